//! What pith knows about each coding agent it serves, one file per client ([`claude_code`],
//! [`opencode`], [`codex`]): its names and user agent, the session header it sends, where it
//! keeps settings in each scope and what `pith setup` puts there, its hook events and the tools
//! they report, the per-process wiring of `pith run`, where its session files are, and the text
//! its harness injects into a conversation.
//!
//! The binary's `setup`, `doctor`, `run` and `history import` are verbs over these facts, and
//! the transform, history and recall crates read the harness text and hook tools from here, so
//! each fact is written once. A fourth client is one more file and one more [`Client`] variant;
//! the `match` arms here then name what is still missing. A client's file holds:
//!
//! - its [`Profile`]: pith's name for it, its executable, its user agent's product token, the
//!   session header, the hook events and the tools each reports ([`HookTool`], which recall's
//!   payload reader follows), the harness text it injects, how its side calls open (a request
//!   beside the conversation, such as a title or a summary, which history must not take for a
//!   turn), its scopes and the default one, the variable that moves its base URL;
//! - where its files are (`config_dir`, Codex's `home`, Claude Code's `global_config`), from
//!   [`Places`];
//! - `registration(scope)`: what `pith setup` writes in each scope, which `pith doctor` reads
//!   back; `proxy_settings` (`--proxy`) and `base_urls` (where its own settings send it);
//! - `wire`: the per-process wiring of `pith run`, or why the client would go elsewhere than
//!   the proxy sends;
//! - where its session files are, and the rules-file envelope its prompts carry (for pins).
//!
//! Each file's facts were read from the client's shipped code and checked by running the real
//! client offline with its home in a temporary directory (the versions are in each file).
//!
//! The crate does no I/O: the binary reads the environment once ([`Places::from_env`]) and the
//! files through [`Files`], so every rule here is a pure function with a unit test.

pub mod claude_code;
pub mod codex;
mod harness;
pub mod opencode;
mod places;
mod registration;
mod wiring;

use std::path::{Path, PathBuf};

pub use harness::{
    SYSTEM_REMINDER_CLOSE, SYSTEM_REMINDER_OPEN, harness_openings, harness_prefixes,
    is_one_wrapper, rules_file_named,
};
pub use places::Places;
pub use registration::{
    ENTRY_NAME, GitIgnored, HOOK_TIMEOUT_SECS, HookSetting, McpSetting, Registration, Scope,
    ScopeError, Setting, first_word, lookup, pith_command, runs_pith, shell_word,
};
pub use wiring::{RunContext, Wiring};

/// A coding agent pith knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// Claude Code (`claude`).
    ClaudeCode,
    /// OpenCode (`opencode`).
    Opencode,
    /// Codex (`codex`).
    Codex,
}

/// The facts about a client that are plain data.
#[derive(Debug)]
pub struct Profile {
    /// The name pith uses for it everywhere (ledger, history, `pith setup <name>`).
    pub name: &'static str,
    /// How its makers spell it, for sentences.
    pub display_name: &'static str,
    /// Its executable, looked up on PATH.
    pub program: &'static str,
    /// The first product token of its user agent (before the `/`), or that token's start.
    pub user_agent_product: &'static str,
    /// Whether [`Profile::user_agent_product`] is a prefix (Codex: `codex_exec`, `codex_tui`).
    pub user_agent_is_prefix: bool,
    /// The header its requests carry the session id in.
    pub session_header: &'static str,
    /// The moments `pith hook` speaks to, when the client runs command hooks.
    pub hook_events: &'static [HookEvent],
    /// Whole blocks its harness adds to a user message, by how they open.
    pub harness_openings: &'static [&'static str],
    /// Other openings of text its harness writes in a user message.
    pub harness_prefixes: &'static [&'static str],
    /// How a user message of one of its side calls opens (a request beside the conversation,
    /// such as OpenCode's title call): such a request is not a turn of the conversation.
    pub side_call_openings: &'static [&'static str],
    /// The tool of its own it loads the tools it defers by name with (Claude Code's
    /// `ToolSearch`): the only way to those tools, so pith's deferral keeps it in sight.
    pub own_tool_search: Option<&'static str>,
    /// The scope `pith setup` writes to unless told: where the client keeps a person's own
    /// settings.
    pub default_scope: Scope,
    /// The scopes the client defines, in the order `pith doctor` looks.
    pub scopes: &'static [Scope],
    /// The environment variable that moves its provider's base URL, when it reads one.
    pub base_url_env: Option<&'static str>,
}

/// One hook event pith registers for, and the tools it matches.
#[derive(Debug, PartialEq, Eq)]
pub struct HookEvent {
    /// The event as the client names it (`PostToolUse`).
    pub event: &'static str,
    /// The tools, by the client's names for them, and what each one's payload holds.
    pub tools: &'static [(&'static str, HookTool)],
}

impl HookEvent {
    /// The client's matcher syntax: tool names separated by `|`.
    pub fn matcher(&self) -> String {
        let names: Vec<&str> = self.tools.iter().map(|(name, _)| *name).collect();
        names.join("|")
    }
}

/// What a hooked tool's payload holds, which decides how recall reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookTool {
    /// A file read: `tool_input.file_path`.
    Read,
    /// A file edit or write: `tool_input.file_path`.
    Edit,
    /// A notebook edit: `tool_input.notebook_path`.
    NotebookEdit,
    /// Codex's `apply_patch`: the patch envelope in `tool_input.command`.
    Patch,
    /// A shell command: `tool_input.command`, and its output or failure.
    Shell,
}

/// How pith reads the files a client keeps its settings in (the binary reads the disk; tests
/// hand in a map).
pub trait Files {
    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// The file's content as JSON (JSON and JSONC as written, TOML converted); `None` when it
    /// is missing or does not parse.
    fn read(&self, path: &Path) -> Option<serde_json::Value>;
}

impl Client {
    /// Every client, in the order pith lists them.
    pub const ALL: [Client; 3] = [Client::ClaudeCode, Client::Opencode, Client::Codex];

    /// The facts that are plain data.
    pub fn profile(self) -> &'static Profile {
        match self {
            Client::ClaudeCode => &claude_code::PROFILE,
            Client::Opencode => &opencode::PROFILE,
            Client::Codex => &codex::PROFILE,
        }
    }

    /// pith's name for it (`claude-code`, `opencode`, `codex`).
    pub fn name(self) -> &'static str {
        self.profile().name
    }

    /// Its executable (`claude`, `opencode`, `codex`).
    pub fn program(self) -> &'static str {
        self.profile().program
    }

    /// The client a command line names: pith's name for it or its executable's. Every
    /// command that takes a client takes both (`pith run claude`, `pith setup claude`).
    pub fn named(name: &str) -> Option<Client> {
        Client::ALL
            .into_iter()
            .find(|c| c.name() == name || c.program() == name)
    }

    /// The names [`Client::named`] takes, as help and errors list them:
    /// `claude-code (or claude), opencode, codex`.
    pub fn names() -> String {
        Client::ALL
            .iter()
            .map(|c| {
                if c.name() == c.program() {
                    c.name().to_owned()
                } else {
                    format!("{} (or {})", c.name(), c.program())
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The client a user agent belongs to, by its first product token.
    pub fn from_user_agent(user_agent: &str) -> Option<Client> {
        let first = user_agent.split_whitespace().next().unwrap_or("");
        let product = first.split('/').next().unwrap_or("");
        Client::ALL.into_iter().find(|c| {
            let p = c.profile();
            if p.user_agent_is_prefix {
                product.starts_with(p.user_agent_product)
            } else {
                product == p.user_agent_product
            }
        })
    }

    /// Whether a user message's first text opens one of this client's side calls.
    pub fn opens_side_call(self, text: &str) -> bool {
        let text = text.trim_start();
        self.profile()
            .side_call_openings
            .iter()
            .any(|o| text.starts_with(o))
    }

    /// Whether `name` is the tool some client loads its own deferred tools with.
    pub fn is_own_tool_search(name: &str) -> bool {
        Client::ALL
            .into_iter()
            .any(|c| c.profile().own_tool_search == Some(name))
    }

    /// The hook events pith registers for (none: the client runs no command hooks).
    pub fn hook_events(self) -> &'static [HookEvent] {
        self.profile().hook_events
    }

    /// What `pith setup` writes for this client in `scope`: the MCP server, the hooks, the
    /// status line, each with its file.
    pub fn registration(
        self,
        scope: Scope,
        places: &Places,
        files: &dyn Files,
        command: &str,
    ) -> Result<Registration, ScopeError> {
        match self {
            Client::ClaudeCode => claude_code::registration(scope, places, files, command),
            Client::Opencode => opencode::registration(scope, places, files, command),
            Client::Codex => codex::registration(scope, places, files, command),
        }
    }

    /// The command line (program and arguments) an MCP entry of this client's shape runs.
    pub fn mcp_argv(self, entry: &serde_json::Value) -> Option<Vec<String>> {
        match self {
            Client::ClaudeCode | Client::Codex => registration::command_and_args(entry),
            Client::Opencode => opencode::mcp_argv(entry),
        }
    }

    /// The settings that send this client to pith's proxy for good (`pith setup --proxy`), or
    /// why pith leaves the client's own choice alone.
    pub fn proxy_settings(
        self,
        registration: &Registration,
        places: &Places,
        files: &dyn Files,
        origin: &str,
    ) -> Result<Vec<Setting>, String> {
        match self {
            Client::ClaudeCode => Ok(claude_code::proxy_settings(registration, origin)),
            Client::Opencode => Ok(opencode::proxy_settings(registration, origin)),
            Client::Codex => codex::proxy_settings(registration, places, files, origin),
        }
    }

    /// The base URLs the client's own settings set, each with where it is set: `pith doctor`
    /// checks that each leads somewhere that answers.
    pub fn base_urls(self, places: &Places, files: &dyn Files) -> Vec<(String, String)> {
        match self {
            Client::ClaudeCode => claude_code::base_urls(places, files),
            Client::Opencode => opencode::base_urls(places, files),
            Client::Codex => codex::base_urls(places, files),
        }
    }

    /// The wiring of one `pith run` of this client to the proxy, or why it would send the
    /// client elsewhere than it goes on its own.
    pub fn wire(self, ctx: &RunContext<'_>) -> Result<Wiring, String> {
        match self {
            Client::ClaudeCode => claude_code::wire(ctx),
            Client::Opencode => opencode::wire(ctx),
            Client::Codex => codex::wire(ctx),
        }
    }

    /// Whether the client seems installed: its executable on PATH (`on_path`), or its own
    /// settings directory present.
    pub fn installed(self, places: &Places, files: &dyn Files, on_path: bool) -> bool {
        on_path
            || self
                .settings_dir(places)
                .is_some_and(|dir| files.exists(&dir))
    }

    /// The directory the client keeps a person's settings in.
    pub fn settings_dir(self, places: &Places) -> Option<PathBuf> {
        match self {
            Client::ClaudeCode => claude_code::config_dir(places),
            Client::Opencode => opencode::config_dir(places),
            Client::Codex => codex::home(places),
        }
    }

    /// Where `pith history import` finds the client's session files, for a client that keeps
    /// them as files pith reads.
    pub fn session_files_dir(self, places: &Places) -> Option<PathBuf> {
        match self {
            Client::ClaudeCode => claude_code::config_dir(places).map(|d| d.join("projects")),
            Client::Codex => codex::home(places).map(|h| h.join("sessions")),
            Client::Opencode => None,
        }
    }
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The order pith writes the members of an entry in, as the clients' own documentation shows
/// them (a `serde_json` object keeps its keys sorted); other keys follow, sorted.
pub const MEMBER_ORDER: &[&str] = &[
    "type", "matcher", "command", "args", "enabled", "hooks", "timeout",
];

/// The session headers, in the order a request's session id is looked up (Claude Code,
/// OpenCode, Codex).
pub fn session_headers() -> [&'static str; 3] {
    Client::ALL.map(|c| c.profile().session_header)
}

/// What a hooked tool's payload holds, by the tool's name in any client's hook events;
/// `None` for a tool pith does not hook.
pub fn hook_tool(name: &str) -> Option<HookTool> {
    Client::ALL
        .iter()
        .flat_map(|c| c.hook_events())
        .flat_map(|e| e.tools)
        .find(|(tool, _)| *tool == name)
        .map(|(_, kind)| *kind)
}

/// Files held in memory, for the rules' tests.
#[cfg(test)]
pub(crate) mod test_files {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use serde_json::Value;

    #[derive(Default)]
    pub(crate) struct Disk(BTreeMap<PathBuf, Value>);

    impl Disk {
        pub(crate) fn of<const N: usize>(files: [(PathBuf, Value); N]) -> Disk {
            Disk(BTreeMap::from(files))
        }
    }

    impl super::Files for Disk {
        fn exists(&self, path: &Path) -> bool {
            self.0.contains_key(path)
        }
        fn read(&self, path: &Path) -> Option<Value> {
            self.0.get(path).cloned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_clients_side_calls_are_told_by_how_they_open_and_its_turns_are_not() {
        for client in Client::ALL {
            for opening in client.profile().side_call_openings {
                assert!(
                    client.opens_side_call(&format!("{opening} rest")),
                    "{opening}"
                );
            }
        }
        assert!(Client::ClaudeCode.opens_side_call("<session>\nfix calc.py\n</session>"));
        assert!(Client::Codex.opens_side_call(
            "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary"
        ));
        // What people type, and the harness's own reminders, are turns.
        for typed in [
            "fix calc.py",
            "quota",
            "<system-reminder>\nAs you answer the user's questions, you can use this context",
            "Generate a title for this page",
        ] {
            assert!(!Client::ClaudeCode.opens_side_call(typed), "{typed}");
            assert!(!Client::Codex.opens_side_call(typed), "{typed}");
        }
    }

    #[test]
    fn user_agents_name_their_client() {
        for (ua, want) in [
            (
                "claude-cli/2.1.328 (external, sdk-cli)",
                Some(Client::ClaudeCode),
            ),
            (
                "opencode/1.18.33 ai-sdk/provider-utils/4.0.46",
                Some(Client::Opencode),
            ),
            (
                "codex_exec/0.169.0 (Debian 12.0.0; x86_64)",
                Some(Client::Codex),
            ),
            ("codex_cli_rs/0.169.0", Some(Client::Codex)),
            ("Anthropic/Python 2.14.0", None),
            ("", None),
        ] {
            assert_eq!(Client::from_user_agent(ua), want, "{ua}");
        }
    }

    #[test]
    fn names_and_programs_both_name_a_client() {
        assert_eq!(Client::named("claude"), Some(Client::ClaudeCode));
        assert_eq!(Client::named("claude-code"), Some(Client::ClaudeCode));
        assert_eq!(Client::named("codex"), Some(Client::Codex));
        assert_eq!(Client::named("opencode"), Some(Client::Opencode));
        assert_eq!(Client::named("cursor"), None);
        assert_eq!(Client::names(), "claude-code (or claude), opencode, codex");
        for c in Client::ALL {
            assert!(c.profile().scopes.contains(&c.profile().default_scope));
        }
    }

    #[test]
    fn a_tool_name_means_the_same_in_every_client_that_hooks_it() {
        let tools: Vec<(&str, HookTool)> = Client::ALL
            .iter()
            .flat_map(|c| c.hook_events())
            .flat_map(|e| e.tools.iter().copied())
            .collect();
        for (name, kind) in &tools {
            assert_eq!(hook_tool(name), Some(*kind), "{name}");
        }
        assert_eq!(hook_tool("apply_patch"), Some(HookTool::Patch));
        assert_eq!(hook_tool("WebFetch"), None);
        assert_eq!(
            claude_code::PROFILE.hook_events[0].matcher(),
            "Read|Edit|Write|MultiEdit|NotebookEdit|Bash"
        );
    }
}
