//! What `pith setup` writes for a client, in the scopes the client defines: the MCP server, the
//! hooks and the status line, each with the file it goes in. The binary's setup edits those
//! files (keeping everything else as written), its doctor reads the same declarations back.

use std::path::PathBuf;

use serde_json::Value;

use crate::HookEvent;

/// Where a setting lives, as the clients define their scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The project's shared files, meant to be committed.
    Project,
    /// This person's settings for this project, not committed.
    Local,
    /// This person's settings for every project.
    User,
}

impl Scope {
    /// As `--scope` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Project => "project",
            Scope::Local => "local",
            Scope::User => "user",
        }
    }
}

/// A scope the client does not define, or one that needs a project when there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeError(pub String);

impl std::fmt::Display for ScopeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScopeError {}

/// Everything `pith setup` registers for one client in one scope.
#[derive(Debug, Clone, PartialEq)]
pub struct Registration {
    /// The scope these files belong to.
    pub scope: Scope,
    /// The MCP server entry.
    pub mcp: McpSetting,
    /// The hooks, for a client that runs command hooks.
    pub hooks: Option<HookSetting>,
    /// The status line, for a client that shows one.
    pub status_line: Option<Setting>,
    /// Every file pith may have changed in this scope, the ones above and any the client
    /// reads instead (Codex's hooks in `hooks.json` or `config.toml`), for `--undo`.
    pub files: Vec<PathBuf>,
    /// What the person should know once it is written (an approval the client asks for).
    pub next: String,
    /// A file of this scope that is one person's and must not be committed, with the rule
    /// the client itself adds to git's global excludes when it creates the file.
    pub git_ignored: Option<GitIgnored>,
}

/// A project file git should not offer for commit ([`Registration::git_ignored`]).
#[derive(Debug, Clone, PartialEq)]
pub struct GitIgnored {
    /// The file.
    pub file: PathBuf,
    /// The line for git's global excludes file (`**/.claude/settings.local.json`).
    pub rule: &'static str,
}

/// The `pith` entry of a client's MCP servers.
#[derive(Debug, Clone, PartialEq)]
pub struct McpSetting {
    /// The file (JSON, JSONC by its extension, or TOML).
    pub file: PathBuf,
    /// The object the servers are members of, from the file's top (`["mcpServers"]`).
    pub section: Vec<String>,
    /// The entry, as JSON (a TOML file gets the same as a table).
    pub entry: Value,
}

impl McpSetting {
    /// The key path of the entry itself.
    pub fn key(&self) -> Vec<String> {
        let mut key = self.section.clone();
        key.push(ENTRY_NAME.to_owned());
        key
    }
}

/// The name of pith's entry among a client's MCP servers.
pub const ENTRY_NAME: &str = "pith";

/// `pith hook` under each of a client's hook events.
#[derive(Debug, Clone, PartialEq)]
pub struct HookSetting {
    /// The file (Claude Code's settings, Codex's `hooks.json` or `config.toml`).
    pub file: PathBuf,
    /// The events and their tools.
    pub events: &'static [HookEvent],
    /// The command each hook runs (`pith hook`).
    pub command: String,
    /// How long the client waits for the hook, in seconds (the clients' unit).
    pub timeout_secs: u64,
}

/// One member of a settings file set to a value (objects on the way created as needed).
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    /// The file.
    pub file: PathBuf,
    /// The member's key path from the file's top.
    pub key: Vec<String>,
    /// Its value.
    pub value: Value,
}

/// How long a client waits for `pith hook`. The hook answers in milliseconds; this only bounds
/// a machine that is stalled.
pub const HOOK_TIMEOUT_SECS: u64 = 10;

/// `word` as one shell word (clients run hook and status line commands through a shell): as
/// it is when it is plain, else single-quoted.
pub fn shell_word(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The shell command running pith's `subcommand` through `command`.
pub fn pith_command(command: &str, subcommand: &str) -> String {
    format!("{} {subcommand}", shell_word(command))
}

/// Whether a shell command runs pith's `subcommand` (`pith hook`, `/path/to/pith hook`,
/// `'/my tools/pith' hook`), whichever binary it names.
pub fn runs_pith(command: &str, subcommand: &str) -> bool {
    let Some((program, rest)) = first_word(command) else {
        return false;
    };
    (program == "pith" || program.ends_with("/pith")) && rest.trim() == subcommand
}

/// The first shell word of `command` as the shell reads it (a single-quoted word unquoted,
/// `'\''` inside it a quote), and the rest of the line.
pub fn first_word(command: &str) -> Option<(String, &str)> {
    let command = command.trim_start();
    let mut word = String::new();
    let mut chars = command.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' => {
                // Up to the closing quote.
                loop {
                    match chars.next() {
                        Some((_, '\'')) => break,
                        Some((_, ch)) => word.push(ch),
                        None => return None,
                    }
                }
            }
            '\\' => {
                if let Some((_, ch)) = chars.next() {
                    word.push(ch);
                }
            }
            c if c.is_whitespace() => return Some((word, &command[i..])),
            c => word.push(c),
        }
    }
    (!word.is_empty()).then_some((word, ""))
}

/// `{"command": ..., "args": [...]}` as a command line (Claude Code's and Codex's MCP entries).
pub(crate) fn command_and_args(entry: &Value) -> Option<Vec<String>> {
    let mut argv = vec![entry.get("command")?.as_str()?.to_owned()];
    if let Some(args) = entry.get("args") {
        for a in args.as_array()? {
            argv.push(a.as_str()?.to_owned());
        }
    }
    Some(argv)
}

/// The value at `key` in a JSON document.
pub fn lookup<'a>(doc: &'a Value, key: &[String]) -> Option<&'a Value> {
    key.iter().try_fold(doc, |at, k| at.get(k))
}

/// A key path from its parts.
pub(crate) fn key(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| (*p).to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_one_shell_word_and_recognised_whichever_binary() {
        assert_eq!(pith_command("pith", "hook"), "pith hook");
        assert_eq!(
            pith_command("/opt/my tools/pith", "hook"),
            "'/opt/my tools/pith' hook"
        );
        assert!(runs_pith("pith hook", "hook"));
        assert!(runs_pith("/usr/local/bin/pith hook", "hook"));
        assert!(runs_pith("'/opt/x/pith' statusline", "statusline"));
        assert!(!runs_pith("pith statusline", "hook"));
        assert!(!runs_pith("other hook", "hook"));
        // What pith_command writes for a path with spaces (and a quote) is recognised.
        for path in ["/opt/my tools/pith", "/home/o'brien/bin/pith"] {
            assert!(runs_pith(&pith_command(path, "hook"), "hook"), "{path}");
            assert_eq!(
                first_word(&pith_command(path, "hook")).map(|(w, _)| w),
                Some(path.to_owned())
            );
        }
    }
}
