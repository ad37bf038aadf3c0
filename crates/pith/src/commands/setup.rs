//! `pith setup <client>`: register `pith mcp` in a coding agent's own MCP config, and `pith hook`
//! in its hook config (Claude Code: `.claude/settings.json` in the project; Codex:
//! `$CODEX_HOME/hooks.json` when that file exists, else inline `[hooks]` in its `config.toml`).
//!
//! The edit is an insertion into the user's file, never a rewrite. JSON and JSONC go through
//! jsonc-parser's CST, which adds the entry and keeps comments, trailing commas, key order and
//! every other entry as they were. Only whitespace may move: an object still written on one line
//! is spread over lines, so the entry can be indented like its neighbours, and the object that
//! takes the entry loses blank lines just inside its braces. TOML goes through `toml_edit`, which
//! keeps comments and layout. An existing `pith` entry that already runs the same command is left
//! as it is; a different one is never overwritten.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use jsonc_parser::ParseOptions;
use jsonc_parser::cst::{CstInputValue, CstObject, CstObjectProp, CstRootNode};
use serde_json::{Value, json};

use crate::config::Config;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The coding agent to register pith with.
    #[arg(value_enum)]
    client: Client,
    /// Show what would change and write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Project directory for project-level config (claude-code, opencode). Default: the nearest
    /// ancestor of the current directory holding `.git` or `.pith`, else the current directory.
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// The command the agent should run. Default: `pith` when that is this binary on PATH,
    /// else this binary's absolute path.
    #[arg(long, value_name = "PATH")]
    command: Option<String>,
    /// Also point the client at pith's proxy for good (a base URL in its config). The client
    /// then fails whenever no proxy runs: keep one with `pith service install`, or use
    /// `pith run <client>` instead.
    #[arg(long, conflicts_with = "undo")]
    proxy: bool,
    /// Take out what `pith setup` added for this client: each file it changed goes back to
    /// what it was, byte for byte, unless it changed since (then it is left, and named).
    #[arg(long)]
    undo: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Client {
    /// Claude Code: `.mcp.json` in the project.
    ClaudeCode,
    /// OpenCode: the `mcp` key of `opencode.jsonc` in the project, else of `opencode.json`.
    Opencode,
    /// Codex: `[mcp_servers.pith]` in `$CODEX_HOME/config.toml` (default `~/.codex`).
    Codex,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::ClaudeCode => "claude-code",
            Client::Opencode => "opencode",
            Client::Codex => "codex",
        }
    }
}

/// What registering needs to do to one file.
enum Plan {
    /// The file already runs this command as `pith`.
    Registered,
    Write {
        new: String,
    },
}

/// The files one `pith setup` changes: each file's text on disk and as planned so far, so that
/// several parts (the MCP entry, hooks, the status line, the base URL) can edit one file in
/// turn and the user sees one diff per file.
#[derive(Default)]
struct Edits {
    files: Vec<(PathBuf, Option<String>, Option<String>)>,
}

impl Edits {
    /// The file's text as planned so far (as on disk when no part changed it yet).
    fn current(&mut self, path: &Path) -> anyhow::Result<Option<String>> {
        if let Some((_, disk, planned)) = self.files.iter().find(|(p, ..)| p == path) {
            return Ok(planned.clone().or_else(|| disk.clone()));
        }
        let disk = read_config(path)?;
        self.files.push((path.to_path_buf(), disk.clone(), None));
        Ok(disk)
    }

    /// Apply one part's plan; `registered` is said when there is nothing to change.
    fn apply(&mut self, path: &Path, plan: Plan, registered: impl FnOnce() -> String) {
        match plan {
            Plan::Registered => println!("{}", registered()),
            Plan::Write { new } => {
                if let Some(entry) = self.files.iter_mut().find(|(p, ..)| p == path) {
                    entry.2 = Some(new);
                } else {
                    self.files.push((path.to_path_buf(), None, Some(new)));
                }
            }
        }
    }

    /// The files that change: path, text on disk, new text.
    fn changes(&self) -> impl Iterator<Item = (&PathBuf, Option<&str>, &str)> {
        self.files.iter().filter_map(|(p, disk, planned)| {
            planned
                .as_deref()
                .filter(|new| disk.as_deref() != Some(*new))
                .map(|new| (p, disk.as_deref(), new))
        })
    }
}

pub fn run(args: Args, config: &Config) -> anyhow::Result<()> {
    if args.undo {
        return undo(&args);
    }
    let command = match args.command.as_deref() {
        Some(c) if !c.trim().is_empty() => c.to_owned(),
        Some(_) => bail!("--command is empty"),
        None => default_command()?,
    };
    let path = config_path(args.client, args.workspace.as_deref())?;
    let rerun = format!("pith setup {}", args.client.name());
    let mut edits = Edits::default();

    // The MCP server.
    let old = edits.current(&path)?;
    let plan = match args.client {
        Client::ClaudeCode => plan_json(
            &path,
            &rerun,
            old,
            "mcpServers",
            object([
                ("type", "stdio".into()),
                ("command", command.as_str().into()),
                ("args", vec!["mcp"].into()),
            ]),
            |existing| existing["command"] == command && existing["args"] == json!(["mcp"]),
        )?,
        Client::Opencode => plan_json(
            &path,
            &rerun,
            old,
            "mcp",
            object([
                ("type", "local".into()),
                ("command", vec![command.as_str(), "mcp"].into()),
                ("enabled", true.into()),
            ]),
            |existing| existing["command"] == json!([command, "mcp"]),
        )?,
        Client::Codex => plan_toml(&path, &rerun, old, &command)?,
    };
    edits.apply(&path, plan, || {
        format!(
            "{} already registers pith (`{command} mcp`); nothing to change.",
            path.display()
        )
    });

    // The hooks.
    if let Some(hook_path) = hook_path(args.client, args.workspace.as_deref())? {
        let hook_command = format!("{} hook", shell_word(&command));
        let entries = hook_entries(args.client);
        let base = edits.current(&hook_path)?;
        let plan = if hook_path.extension().is_some_and(|e| e == "toml") {
            plan_toml_hooks(&hook_path, &rerun, base, &hook_command, entries)?
        } else {
            plan_json_hooks(&hook_path, &rerun, base, &hook_command, entries)?
        };
        edits.apply(&hook_path, plan, || {
            format!(
                "{} already runs `{hook_command}` after tool calls; nothing to change.",
                hook_path.display()
            )
        });
    }

    // Claude Code's status line.
    if let Client::ClaudeCode = args.client {
        let settings = claude_settings(args.workspace.as_deref())?;
        let line = format!("{} statusline", shell_word(&command));
        let base = edits.current(&settings)?;
        let entry = object([
            ("type", "command".into()),
            ("command", line.as_str().into()),
        ]);
        match plan_json_member(&settings, &rerun, base, &["statusLine"], entry)? {
            Member::Planned(plan) => edits.apply(&settings, plan, || {
                format!(
                    "{} already shows `{line}` as the status line; nothing to change.",
                    settings.display()
                )
            }),
            Member::Other(existing) => println!(
                "{} has a status line of its own ({existing}); pith leaves it (the status line \
                 `{line}` shows the session's tokens and cost).",
                settings.display()
            ),
        }
    }

    // A permanent base URL, only when asked.
    if args.proxy {
        let listen = super::proxy::listen_addr(None, config)?;
        let origin = format!("http://{}", super::run::reachable(listen));
        let v1 = format!("{origin}/v1");
        let members: Vec<(PathBuf, Vec<&str>, String)> = match args.client {
            Client::ClaudeCode => vec![(
                claude_settings(args.workspace.as_deref())?,
                vec!["env", "ANTHROPIC_BASE_URL"],
                origin.clone(),
            )],
            Client::Opencode => vec![
                (
                    path.clone(),
                    vec!["provider", "anthropic", "options", "baseURL"],
                    v1.clone(),
                ),
                (
                    path.clone(),
                    vec!["provider", "openai", "options", "baseURL"],
                    v1.clone(),
                ),
            ],
            // `openai_base_url` moves only the built-in provider; a provider of the user's own
            // keeps its base_url (pith never rewrites a setting of the user's).
            Client::Codex => match crate::codex::provider(&[], &crate::codex::home()?) {
                Ok(p) if p.id != "openai" => {
                    println!(
                        "Codex uses its model provider `{}` (base_url {}); pith leaves it: point \
                         that base_url at {v1} yourself, or use `pith run codex`.",
                        p.id, p.base_url
                    );
                    vec![]
                }
                _ => vec![(path.clone(), vec!["openai_base_url"], v1.clone())],
            },
        };
        for (file, key, url) in members {
            let base = edits.current(&file)?;
            let shown = key.join(".");
            let planned = if file.extension().is_some_and(|e| e == "toml") {
                plan_toml_key(&file, &rerun, base, &shown, &url)?
            } else {
                plan_json_member(&file, &rerun, base, &key, url.as_str().into())?
            };
            match planned {
                Member::Planned(plan) => edits.apply(&file, plan, || {
                    format!(
                        "{} already sends {shown} to {url}; nothing to change.",
                        file.display()
                    )
                }),
                Member::Other(existing) => println!(
                    "{} sets {shown} to {existing} already; pith leaves it (use `pith run {}` \
                     to go through pith for one run).",
                    file.display(),
                    super::run::Agent::from(args.client).program()
                ),
            }
        }
        eprintln!(
            "warning: with --proxy, {} needs a pith proxy on {origin} for every run, or its \
             requests fail: keep one running with `pith service install`, or use `pith run {}` \
             instead (it starts one, and goes straight to the provider when it cannot).",
            args.client.name(),
            super::run::Agent::from(args.client).program()
        );
    }

    // Every part is planned before any file is written: a refusal leaves them all as they were.
    let changes: Vec<(PathBuf, Option<String>, String)> = edits
        .changes()
        .map(|(p, old, new)| (p.clone(), old.map(str::to_owned), new.to_owned()))
        .collect();
    for (path, old, new) in &changes {
        let state = if old.as_deref().is_some_and(|t| !t.trim().is_empty()) {
            ""
        } else {
            " (new file)"
        };
        println!("{}{state}:", path.display());
        print!("{}", diff(old.as_deref().unwrap_or(""), new));
    }
    if changes.is_empty() {
        return Ok(());
    }
    if args.dry_run {
        println!("dry run: nothing written.");
        return Ok(());
    }
    // Recorded first: a record that cannot be written leaves every file as it was.
    let mut record = Record::load()?;
    for (path, old, new) in &changes {
        record.wrote(args.client, path, old.as_deref(), new);
    }
    record.save()?;
    for (path, _, new) in &changes {
        write_file(path, new)?;
        println!("wrote {}.", path.display());
    }
    println!(
        "{}",
        match args.client {
            Client::ClaudeCode =>
                "Claude Code asks you to approve the project's `pith` MCP server next time it starts here; \
                 it runs `pith hook` after Read, Edit, Write and Bash calls from then on.",
            Client::Opencode => "OpenCode starts `pith mcp` next time it runs in this project.",
            Client::Codex =>
                "Codex starts `pith mcp` in every project; the workspace is found from where Codex runs. \
                 Codex runs a new hook only once you trust it: open Codex and approve `pith hook` in /hooks.",
        }
    );
    println!(
        "`pith setup --undo {}` takes out what this added.",
        args.client.name()
    );
    Ok(())
}

impl From<Client> for super::run::Agent {
    fn from(client: Client) -> super::run::Agent {
        match client {
            Client::ClaudeCode => super::run::Agent::Claude,
            Client::Opencode => super::run::Agent::Opencode,
            Client::Codex => super::run::Agent::Codex,
        }
    }
}

/// Claude Code's project settings, `.claude/settings.json` (hooks, status line, env).
fn claude_settings(workspace: Option<&Path>) -> anyhow::Result<PathBuf> {
    Ok(crate::workspace::workspace_from(workspace)?
        .root()
        .join(".claude")
        .join("settings.json"))
}

/// What `pith setup` wrote, per file: the text before (none: a new file) and after, kept in
/// `$PITH_HOME/setup.json` so that `--undo` can put back exactly what was there.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Record {
    files: std::collections::BTreeMap<String, RecordedFile>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RecordedFile {
    client: String,
    before: Option<String>,
    after: String,
}

impl Record {
    fn path() -> anyhow::Result<PathBuf> {
        Ok(crate::config::pith_home()?.join("setup.json"))
    }

    fn load() -> anyhow::Result<Record> {
        let path = Record::path()?;
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).with_context(|| {
                format!(
                    "{} is not pith's setup record; move it away",
                    path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Record::default()),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    fn save(&self) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self).context("internal error: the record")?;
        write_file(&Record::path()?, &(text + "\n"))
    }

    fn key(path: &Path) -> String {
        std::path::absolute(path)
            .unwrap_or_else(|_| path.to_path_buf())
            .to_string_lossy()
            .into_owned()
    }

    /// `path` went from `before` to `after`. A file pith changed before and nobody touched
    /// since keeps its first `before`: undo goes back to before pith, not one step.
    fn wrote(&mut self, client: Client, path: &Path, before: Option<&str>, after: &str) {
        let key = Record::key(path);
        let before = match self.files.get(&key) {
            Some(r) if before == Some(r.after.as_str()) => r.before.clone(),
            _ => before.map(str::to_owned),
        };
        self.files.insert(
            key,
            RecordedFile {
                client: client.name().to_owned(),
                before,
                after: after.to_owned(),
            },
        );
    }
}

/// `pith setup --undo <client>`: every file setup changed for this client (here: this project's,
/// and Codex's home) goes back to what it was, when it still holds what setup wrote; one that
/// changed since is left alone, with what to take out by hand.
fn undo(args: &Args) -> anyhow::Result<()> {
    let mut paths = vec![config_path(args.client, args.workspace.as_deref())?];
    if let Some(hooks) = hook_path(args.client, args.workspace.as_deref())? {
        paths.push(hooks);
    }
    if let Client::ClaudeCode = args.client {
        paths.push(claude_settings(args.workspace.as_deref())?);
    }
    // Codex's hooks may be in either file, whichever was in use then.
    if let Client::Codex = args.client {
        let home = crate::codex::home()?;
        paths.push(home.join("hooks.json"));
        paths.push(home.join("config.toml"));
    }
    paths.dedup();
    let mut record = Record::load()?;
    let mut restores: Vec<(PathBuf, Option<String>, String)> = Vec::new();
    let mut changed_since = Vec::new();
    for path in &paths {
        let key = Record::key(path);
        let Some(r) = record
            .files
            .get(&key)
            .filter(|r| r.client == args.client.name())
        else {
            continue;
        };
        if restores.iter().any(|(p, ..)| Record::key(p) == key) {
            continue;
        }
        let now = read_config(path)?;
        if now.as_deref() != Some(r.after.as_str()) {
            changed_since.push(path.clone());
            continue;
        }
        restores.push((path.clone(), r.before.clone(), r.after.clone()));
    }
    if restores.is_empty() && changed_since.is_empty() {
        println!(
            "pith setup changed nothing for {} here (no record in {}); nothing to undo.",
            args.client.name(),
            Record::path()?.display()
        );
        return Ok(());
    }
    for path in &changed_since {
        println!(
            "{} changed since pith setup wrote it; pith leaves it. Take out pith's entries by \
             hand (the `pith` MCP server, the hooks running `pith hook`, a `pith statusline` \
             status line, a base URL naming pith's port).",
            path.display()
        );
    }
    for (path, before, after) in &restores {
        match before {
            Some(before) => {
                println!("{}:", path.display());
                print!("{}", diff(after, before));
            }
            None => println!("{}: remove (pith setup created it)", path.display()),
        }
    }
    if args.dry_run {
        println!("dry run: nothing written.");
        return Ok(());
    }
    for (path, before, _) in &restores {
        match before {
            Some(before) => write_file(path, before)?,
            None => std::fs::remove_file(path)
                .with_context(|| format!("cannot remove {}", path.display()))?,
        }
        record.files.remove(&Record::key(path));
        println!(
            "{} {}.",
            if before.is_some() {
                "restored"
            } else {
                "removed"
            },
            path.display()
        );
    }
    record.save()?;
    if !changed_since.is_empty() {
        bail!(
            "{} file(s) changed since pith setup and were left as they are",
            changed_since.len()
        );
    }
    Ok(())
}

/// What setting one member found.
enum Member {
    /// The plan (nothing to change when the member already holds the value).
    Planned(Plan),
    /// The member holds something else, shown; it is left alone.
    Other(String),
}

/// Set the member at `key` (objects created as needed) to `entry` in a JSON/JSONC file,
/// keeping everything else as `plan_json` does.
fn plan_json_member(
    path: &Path,
    rerun: &str,
    old: Option<String>,
    key: &[&str],
    entry: CstInputValue,
) -> anyhow::Result<Member> {
    let file = path.display();
    let old = old.filter(|t| !t.trim().is_empty());
    let text = old.as_deref().unwrap_or("");
    let invalid = |e: jsonc_parser::errors::ParseError| {
        anyhow!("{file} is not valid JSON ({e}); fix that, then run `{rerun}` again")
    };
    let root = CstRootNode::parse(text, &JSONC).map_err(invalid)?;
    let parsed: Value = match root.value() {
        Some(_) => jsonc_parser::parse_to_serde_value(text, &JSONC).map_err(invalid)?,
        None => json!({}),
    };
    let value = to_value(&entry);
    let (leaf, parents) = key.split_last().context("internal error: an empty key")?;
    let mut at = &parsed;
    for (i, k) in key.iter().enumerate() {
        match at.get(k) {
            None => break,
            Some(v) if i + 1 == key.len() => {
                return Ok(if *v == value {
                    Member::Planned(Plan::Registered)
                } else {
                    Member::Other(v.to_string())
                });
            }
            Some(v) if v.is_object() => at = v,
            Some(_) => bail!(
                "\"{}\" in {file} is not an object; fix it by hand",
                key[..=i].join(".")
            ),
        }
    }
    let Some(mut node) = root.object_value_or_create() else {
        bail!("{file} is not a JSON object; fix it by hand");
    };
    node.ensure_multiline();
    for k in parents {
        node = match member(&node, k) {
            Some(prop) => prop
                .object_value()
                .with_context(|| format!("internal error: \"{k}\" is not an object"))?,
            None => {
                node.append(k, CstInputValue::Object(Vec::new()));
                member(&node, k)
                    .and_then(|p| p.object_value())
                    .context("internal error: the new object")?
            }
        };
        node.ensure_multiline();
    }
    node.append(leaf, entry);
    let new = root.to_string();
    let mut expected = parsed;
    let mut slot = &mut expected;
    for k in key {
        slot = &mut slot[*k];
    }
    *slot = value;
    let got: Value = jsonc_parser::parse_to_serde_value(&new, &JSONC)
        .context("internal error: the edit broke the JSON")?;
    if got != expected || !keeps_text(text, &new) {
        bail!("internal error: the edit of {file} would change other content; nothing written");
    }
    let new = if new.ends_with('\n') { new } else { new + "\n" };
    Ok(Member::Planned(Plan::Write { new }))
}

/// Set a top-level string key in a TOML file (Codex's `openai_base_url`).
fn plan_toml_key(
    path: &Path,
    _rerun: &str,
    old: Option<String>,
    key: &str,
    url: &str,
) -> anyhow::Result<Member> {
    let file = path.display();
    let text = old.clone().unwrap_or_default();
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("{file} is not valid TOML"))?;
    if let Some(existing) = doc.get(key) {
        return Ok(if existing.as_str() == Some(url) {
            Member::Planned(Plan::Registered)
        } else {
            Member::Other(existing.to_string().trim().to_owned())
        });
    }
    doc.insert(key, toml_edit::value(url));
    let mut new = doc.to_string();
    if !new.ends_with('\n') {
        new.push('\n');
    }
    Ok(Member::Planned(Plan::Write { new }))
}

/// A config file's text, `None` when it does not exist.
fn read_config(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// One hook registration: the event, and the tools it matches (the hosts' matcher syntax:
/// tool names separated by `|`).
struct HookEntry {
    event: &'static str,
    matcher: &'static str,
}

/// How long a host waits for `pith hook`, in seconds (the hosts' unit). The hook answers in
/// milliseconds; this only bounds a machine that is stalled.
const HOOK_TIMEOUT_SECS: u64 = 10;

/// The moments `pith hook` speaks to, per client: reads, edits and shell commands. Claude Code
/// reports a failing command as `PostToolUseFailure`; Codex has no failure event, and runs its
/// shell commands as `Bash` and edits as `apply_patch`.
fn hook_entries(client: Client) -> &'static [HookEntry] {
    match client {
        Client::ClaudeCode => &[
            HookEntry {
                event: "PostToolUse",
                matcher: "Read|Edit|Write|MultiEdit|NotebookEdit|Bash",
            },
            HookEntry {
                event: "PostToolUseFailure",
                matcher: "Bash",
            },
        ],
        Client::Codex => &[HookEntry {
            event: "PostToolUse",
            matcher: "Bash|apply_patch",
        }],
        Client::Opencode => &[],
    }
}

/// Where a client's hooks are configured; `None` for a client without command hooks
/// (OpenCode).
fn hook_path(client: Client, workspace: Option<&Path>) -> anyhow::Result<Option<PathBuf>> {
    Ok(match client {
        Client::ClaudeCode => Some(
            crate::workspace::workspace_from(workspace)?
                .root()
                .join(".claude")
                .join("settings.json"),
        ),
        Client::Codex => {
            let home = crate::codex::home()?;
            // Codex reads both and warns when one layer has both: use the one in use.
            let json = home.join("hooks.json");
            Some(if json.exists() {
                json
            } else {
                home.join("config.toml")
            })
        }
        Client::Opencode => None,
    })
}

/// `word` as one shell word (hosts run hook commands through a shell): as it is when it is
/// plain, else single-quoted.
fn shell_word(word: &str) -> String {
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

/// Whether a hook command runs pith's hook (`pith hook`, `/path/to/pith hook`), whichever
/// binary it names.
pub(crate) fn is_pith_hook(command: &str) -> bool {
    let words: Vec<&str> = command.split_whitespace().collect();
    match words.as_slice() {
        [program, "hook"] => {
            let program = program.trim_matches('\'');
            program == "pith" || program.ends_with("/pith")
        }
        _ => false,
    }
}

/// The hook group pith adds under one event.
fn hook_group(matcher: &str, command: &str) -> CstInputValue {
    object([
        ("matcher", matcher.into()),
        (
            "hooks",
            CstInputValue::Array(vec![object([
                ("type", "command".into()),
                ("command", command.into()),
                (
                    "timeout",
                    CstInputValue::Number(HOOK_TIMEOUT_SECS.to_string()),
                ),
            ])]),
        ),
    ])
}

/// Which of `entries` still need adding to `hooks` (the parsed `hooks` object), refusing a
/// different pith hook command already there.
fn missing_hooks<'a>(
    hooks: Option<&Value>,
    file: &str,
    rerun: &str,
    command: &str,
    entries: &'a [HookEntry],
) -> anyhow::Result<Vec<&'a HookEntry>> {
    let mut missing = Vec::new();
    for entry in entries {
        let groups = hooks.and_then(|h| h.get(entry.event));
        let commands: Vec<&str> = groups
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|g| g.get("hooks").and_then(Value::as_array))
            .flatten()
            .filter_map(|h| h.get("command").and_then(Value::as_str))
            .collect();
        if commands.contains(&command) {
            continue;
        }
        if let Some(other) = commands.iter().find(|c| is_pith_hook(c)) {
            bail!(
                "{file} already runs a different pith hook on {}: `{other}`\n\
                 pith leaves it alone. Remove that hook, then run `{rerun}` again.",
                entry.event
            );
        }
        if groups.is_some_and(|g| !g.is_array()) {
            bail!(
                "\"{}\" in {file} is not a list; fix it by hand",
                entry.event
            );
        }
        missing.push(entry);
    }
    Ok(missing)
}

/// Add `command` under each of `entries` in a JSON settings file (`{"hooks": {"<event>":
/// [groups]}}`, Claude Code's and Codex's shape), keeping everything else as written.
fn plan_json_hooks(
    path: &Path,
    rerun: &str,
    old: Option<String>,
    command: &str,
    entries: &[HookEntry],
) -> anyhow::Result<Plan> {
    let file = path.display().to_string();
    let old = old.filter(|t| !t.trim().is_empty());
    let text = old.as_deref().unwrap_or("");
    let (root, top) = parse_settings(path, text, rerun)?;
    let hooks = top.get("hooks");
    if hooks.is_some_and(|h| !h.is_object()) {
        bail!("\"hooks\" in {file} is not an object; fix it by hand");
    }
    let missing = missing_hooks(hooks, &file, rerun, command, entries)?;
    if missing.is_empty() {
        return Ok(Plan::Registered);
    }
    let Some(top_node) = root.object_value_or_create() else {
        bail!("{file} is not a JSON object; fix it by hand");
    };
    top_node.ensure_multiline();
    let hooks_node = match member(&top_node, "hooks") {
        Some(prop) => prop
            .object_value()
            .context("internal error: \"hooks\" is not an object")?,
        None => {
            top_node.append("hooks", CstInputValue::Object(Vec::new()));
            member(&top_node, "hooks")
                .and_then(|p| p.object_value())
                .context("internal error: \"hooks\" was not added")?
        }
    };
    hooks_node.ensure_multiline();
    let mut expected = Value::Object(top.clone());
    for entry in &missing {
        let group = hook_group(entry.matcher, command);
        let value = to_value(&group);
        match member(&hooks_node, entry.event) {
            Some(prop) => {
                let list = prop
                    .array_value()
                    .context("internal error: the event is not a list")?;
                list.ensure_multiline();
                list.append(group);
            }
            None => {
                hooks_node.append(entry.event, CstInputValue::Array(vec![group]));
            }
        }
        let slot = &mut expected["hooks"][entry.event];
        match slot.as_array_mut() {
            Some(list) => list.push(value),
            None => *slot = Value::Array(vec![value]),
        }
    }
    let new = root.to_string();
    let got: Value = jsonc_parser::parse_to_serde_value(&new, &JSONC)
        .context("internal error: the edit broke the JSON")?;
    if got != expected || !keeps_text(text, &new) {
        bail!("internal error: the edit of {file} would change other content; nothing written");
    }
    let new = if new.ends_with('\n') { new } else { new + "\n" };
    Ok(Plan::Write { new })
}

/// The same in Codex's `config.toml`: `[[hooks.<event>]]` tables, each with a matcher and
/// `[[hooks.<event>.hooks]]` handlers.
fn plan_toml_hooks(
    path: &Path,
    rerun: &str,
    old: Option<String>,
    command: &str,
    entries: &[HookEntry],
) -> anyhow::Result<Plan> {
    use toml_edit::{ArrayOfTables, DocumentMut, Item, Table, value};

    let file = path.display().to_string();
    let text = old.clone().unwrap_or_default();
    let mut doc: DocumentMut = text
        .parse()
        .with_context(|| format!("{file} is not valid TOML"))?;
    // Read what is there as JSON-shaped values, to share the rules with the JSON files.
    let existing: Option<Value> = doc
        .get("hooks")
        .map(|h| {
            toml::from_str::<toml::Table>(&format!("hooks = {}", inline(h)))
                .ok()
                .and_then(|t| serde_json::to_value(&t["hooks"]).ok())
                .with_context(|| format!("`hooks` in {file} cannot be read; fix it by hand"))
        })
        .transpose()?;
    let missing = missing_hooks(existing.as_ref(), &file, rerun, command, entries)?;
    if missing.is_empty() {
        return Ok(Plan::Registered);
    }
    let hooks = doc
        .entry("hooks")
        .or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        })
        .as_table_like_mut()
        .with_context(|| format!("`hooks` in {file} is not a table; fix it by hand"))?;
    for entry in missing {
        let mut handler = Table::new();
        handler.insert("type", value("command"));
        handler.insert("command", value(command));
        handler.insert("timeout", value(HOOK_TIMEOUT_SECS as i64));
        let mut handlers = ArrayOfTables::new();
        handlers.push(handler);
        let mut group = Table::new();
        group.insert("matcher", value(entry.matcher));
        group.insert("hooks", Item::ArrayOfTables(handlers));
        match hooks.get_mut(entry.event) {
            Some(Item::ArrayOfTables(list)) => list.push(group),
            Some(_) => bail!(
                "`hooks.{}` in {file} is not a list of tables; fix it by hand",
                entry.event
            ),
            None => {
                let mut list = ArrayOfTables::new();
                list.push(group);
                hooks.insert(entry.event, Item::ArrayOfTables(list));
            }
        }
    }
    let mut new = doc.to_string();
    if !new.ends_with('\n') {
        new.push('\n');
    }
    Ok(Plan::Write { new })
}

/// A TOML item written as an inline value (to parse it on its own).
fn inline(item: &toml_edit::Item) -> String {
    match item.clone().into_value() {
        Ok(v) => v.to_string(),
        Err(item) => match item {
            toml_edit::Item::Table(t) => t.into_inline_table().to_string(),
            toml_edit::Item::ArrayOfTables(a) => a.into_array().to_string(),
            _ => String::new(),
        },
    }
}

/// The file a client's registration goes in.
fn config_path(client: Client, workspace: Option<&Path>) -> anyhow::Result<PathBuf> {
    let project = || crate::workspace::workspace_from(workspace).map(|ws| ws.root().to_path_buf());
    Ok(match client {
        Client::ClaudeCode => project()?.join(".mcp.json"),
        Client::Opencode => {
            // OpenCode reads both and lets opencode.jsonc win, so that is where the entry counts.
            let root = project()?;
            let jsonc = root.join("opencode.jsonc");
            if jsonc.exists() {
                jsonc
            } else {
                root.join("opencode.json")
            }
        }
        Client::Codex => crate::codex::home()?.join("config.toml"),
    })
}

/// `pith` when the `pith` on PATH is this very binary, so the config survives reinstalls;
/// otherwise this binary's absolute path, which works wherever the agent runs.
fn default_command() -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("cannot find this binary's path")?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("pith"))
        .find(|p| p.is_file())
        .and_then(|p| p.canonicalize().ok());
    Ok(if on_path.as_deref() == Some(exe.as_path()) {
        "pith".to_owned()
    } else {
        exe.to_string_lossy().into_owned()
    })
}

/// What OpenCode reads (comments, trailing commas) and no more: a file using the JSON5 extras
/// jsonc-parser also knows would not load in either client, so it is refused as invalid.
pub(crate) const JSONC: ParseOptions = ParseOptions {
    allow_comments: true,
    allow_trailing_commas: true,
    allow_loose_object_property_names: false,
    allow_missing_commas: false,
    allow_single_quoted_strings: false,
    allow_hexadecimal_numbers: false,
    allow_unary_plus_numbers: false,
    allow_bare_decimal_point_numbers: false,
    allow_non_finite_numbers: false,
    allow_extended_string_escapes: false,
};

/// An object whose members stay in the order written (a `serde_json::Map` would sort them).
fn object<const N: usize>(members: [(&str, CstInputValue); N]) -> CstInputValue {
    CstInputValue::Object(
        members
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

/// The same value as serde sees it, to compare with what the file holds.
fn to_value(input: &CstInputValue) -> Value {
    match input {
        CstInputValue::Null => Value::Null,
        CstInputValue::Bool(b) => Value::Bool(*b),
        // Only pith's own entries get here; a number that does not parse fails the safety check.
        CstInputValue::Number(n) => serde_json::from_str(n).unwrap_or(Value::Null),
        CstInputValue::String(s) => Value::String(s.clone()),
        CstInputValue::Array(items) => Value::Array(items.iter().map(to_value).collect()),
        CstInputValue::Object(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| (k.clone(), to_value(v)))
                .collect(),
        ),
    }
}

/// The member `name` of `object`; the last one if it repeats, as JSON parsers (and so the
/// clients) take the last.
fn member(object: &CstObject, name: &str) -> Option<CstObjectProp> {
    object
        .properties()
        .into_iter()
        .rfind(|p| p.decoded_name().as_deref() == Some(name))
}

/// Whether every non-blank byte of `old` is still in `new`, in order: the edit may add text and
/// move whitespace, never drop or change what was written, comments included, which the value
/// comparison cannot see.
fn keeps_text(old: &str, new: &str) -> bool {
    let mut rest = new.bytes().filter(|b| !b.is_ascii_whitespace());
    old.bytes()
        .filter(|b| !b.is_ascii_whitespace())
        .all(|b| rest.any(|n| n == b))
}

/// A settings file's text (JSON, or JSONC by its extension) as its syntax tree, to edit keeping
/// comments, and its top-level object, to read. A file of only comments holds no value yet: it
/// reads as an empty object and gets one after them.
fn parse_settings(
    path: &Path,
    text: &str,
    rerun: &str,
) -> anyhow::Result<(CstRootNode, serde_json::Map<String, Value>)> {
    let file = path.display();
    let format = if path.extension().is_some_and(|e| e == "jsonc") {
        "JSONC"
    } else {
        "JSON"
    };
    let invalid = |e: jsonc_parser::errors::ParseError| {
        anyhow!("{file} is not valid {format} ({e}); fix that, then run `{rerun}` again")
    };
    let root = CstRootNode::parse(text, &JSONC).map_err(invalid)?;
    let parsed: Value = match root.value() {
        Some(_) => jsonc_parser::parse_to_serde_value(text, &JSONC).map_err(invalid)?,
        None => json!({}),
    };
    let Value::Object(top) = parsed else {
        bail!("{file} is not a JSON object; fix it by hand");
    };
    Ok((root, top))
}

fn plan_json(
    path: &Path,
    rerun: &str,
    old: Option<String>,
    section: &str,
    entry: CstInputValue,
    same: impl Fn(&Value) -> bool,
) -> anyhow::Result<Plan> {
    let file = path.display();
    // A blank file is as good as none: it gets a fresh one.
    let old = old.filter(|t| !t.trim().is_empty());
    let text = old.as_deref().unwrap_or("");
    let (root, top) = parse_settings(path, text, rerun)?;
    let existing = match top.get(section) {
        None => None,
        Some(Value::Object(servers)) => servers.get("pith"),
        Some(_) => bail!("\"{section}\" in {file} is not an object; fix it by hand"),
    };
    if let Some(existing) = existing {
        if same(existing) {
            return Ok(Plan::Registered);
        }
        bail!(
            "{file} already has a different \"pith\" entry under \"{section}\": {existing}\n\
             pith leaves it alone. Remove or rename that entry, then run `{rerun}` again."
        );
    }

    let value = to_value(&entry);
    let Some(top_node) = root.object_value_or_create() else {
        bail!("{file} is not a JSON object; fix it by hand");
    };
    // The CST spreads the object it adds to over lines; a one-line root gets the same first, or
    // the new lines would be indented against a brace on the line above.
    top_node.ensure_multiline();
    match member(&top_node, section) {
        Some(servers) => servers
            .object_value()
            .context("internal error: the section is not an object")?
            .append("pith", entry),
        None => top_node.append(section, CstInputValue::Object(vec![("pith".into(), entry)])),
    };
    let new = root.to_string();

    // The edit must add exactly the entry and change nothing else.
    let mut expected = Value::Object(top);
    expected[section]["pith"] = value;
    let got: Value = jsonc_parser::parse_to_serde_value(&new, &JSONC)
        .context("internal error: the edit broke the JSON")?;
    if got != expected || !keeps_text(text, &new) {
        bail!("internal error: the edit of {file} would change other content; nothing written");
    }
    Ok(Plan::Write { new })
}

fn plan_toml(path: &Path, rerun: &str, old: Option<String>, command: &str) -> anyhow::Result<Plan> {
    use toml_edit::{Array, DocumentMut, Item, Table, value};

    let file = path.display();
    let text = old.clone().unwrap_or_default();
    let mut doc: DocumentMut = text
        .parse()
        .with_context(|| format!("{file} is not valid TOML"))?;
    let servers = doc
        .entry("mcp_servers")
        .or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        })
        .as_table_like_mut()
        .with_context(|| format!("`mcp_servers` in {file} is not a table; fix it by hand"))?;
    if let Some(existing) = servers.get("pith") {
        let same_command = existing.get("command").and_then(Item::as_str) == Some(command);
        let args: Option<Vec<&str>> = existing
            .get("args")
            .and_then(Item::as_array)
            .map(|a| a.iter().filter_map(|v| v.as_str()).collect());
        if same_command && args.as_deref() == Some(&["mcp"][..]) {
            return Ok(Plan::Registered);
        }
        bail!(
            "{file} already has a different [mcp_servers.pith]: {}\n\
             pith leaves it alone. Remove or rename that table, then run `{rerun}` again.",
            existing.to_string().trim()
        );
    }
    let mut pith = Table::new();
    pith.insert("command", value(command));
    pith.insert("args", value(Array::from_iter(["mcp"])));
    servers.insert("pith", Item::Table(pith));
    let mut new = doc.to_string();
    if !new.ends_with('\n') {
        new.push('\n');
    }
    Ok(Plan::Write { new })
}

/// Write `text` to `path`. An existing file keeps its mode; a new one is 0600, and a missing
/// directory 0700, whatever the umask (a client config names a command the client runs).
fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // Write beside and rename, so an interrupted write never leaves half a config.
    let tmp = path.with_extension("pith-tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    // The mode the file has, or (a new file, or a temporary file left by an interrupted run
    // with another mode) 0600.
    let mode = match std::fs::metadata(path) {
        Ok(meta) => Some(meta.permissions()),
        #[cfg(unix)]
        Err(_) => Some(std::os::unix::fs::PermissionsExt::from_mode(0o600)),
        #[cfg(not(unix))]
        Err(_) => None,
    };
    if let Some(mode) = mode {
        std::fs::set_permissions(&tmp, mode)
            .with_context(|| format!("cannot set permissions on {}", tmp.display()))?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))
}

/// Changed lines with two lines of context: `+ ` added, `- ` removed.
fn diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let mut out = String::new();
    for line in &a[prefix.saturating_sub(2)..prefix] {
        out.push_str(&format!("  {line}\n"));
    }
    for line in &a[prefix..a.len() - suffix] {
        out.push_str(&format!("- {line}\n"));
    }
    for line in &b[prefix..b.len() - suffix] {
        out.push_str(&format!("+ {line}\n"));
    }
    let after = a.len() - suffix;
    for line in &a[after..(after + 2).min(a.len())] {
        out.push_str(&format!("  {line}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(old: &str, section: &str) -> anyhow::Result<Plan> {
        let entry = object([("command", "pith".into()), ("args", vec!["mcp"].into())]);
        plan_json(
            Path::new("x.jsonc"),
            "pith setup x",
            Some(old.into()),
            section,
            entry,
            |_| false,
        )
    }

    fn splice(old: &str, section: &str) -> String {
        match plan(old, section).unwrap() {
            Plan::Write { new } => new,
            Plan::Registered => panic!("registered"),
        }
    }

    #[test]
    fn splices_into_an_existing_section_keeping_its_style() {
        let old = "{\n    \"zeta\": 1,\n    \"mcpServers\": {\n        \"other\": {\"command\": \"x\"}\n    }\n}\n";
        assert_eq!(
            splice(old, "mcpServers"),
            "{\n    \"zeta\": 1,\n    \"mcpServers\": {\n        \"other\": {\"command\": \"x\"},\n        \"pith\": {\n            \"command\": \"pith\",\n            \"args\": [\"mcp\"]\n        }\n    }\n}\n"
        );
        let crlf = "{\r\n  \"mcp\": {\r\n    \"other\": 1\r\n  }\r\n}\r\n";
        assert_eq!(
            splice(crlf, "mcp"),
            "{\r\n  \"mcp\": {\r\n    \"other\": 1,\r\n    \"pith\": {\r\n      \"command\": \"pith\",\r\n      \"args\": [\"mcp\"]\r\n    }\r\n  }\r\n}\r\n"
        );
    }

    #[test]
    fn adds_a_missing_section_and_fills_empty_objects() {
        // One-line objects are spread over lines; their content stays.
        assert_eq!(
            splice("{\"a\": \"}{\\\"\"}", "mcp"),
            "{\n  \"a\": \"}{\\\"\",\n  \"mcp\": {\n    \"pith\": {\n      \"command\": \"pith\",\n      \"args\": [\"mcp\"]\n    }\n  }\n}"
        );
        assert_eq!(
            splice("{\"mcp\": {}}\n", "mcp"),
            "{\n  \"mcp\": {\n    \"pith\": {\n      \"command\": \"pith\",\n      \"args\": [\"mcp\"]\n    }\n  }\n}\n"
        );
        assert_eq!(
            splice("{\n\t\"mcp\": {}\n}", "mcp"),
            "{\n\t\"mcp\": {\n\t\t\"pith\": {\n\t\t\t\"command\": \"pith\",\n\t\t\t\"args\": [\"mcp\"]\n\t\t}\n\t}\n}"
        );
    }

    #[test]
    fn a_blank_file_is_new_and_a_comment_only_file_keeps_its_comment() {
        let fresh = "{\n  \"mcp\": {\n    \"pith\": {\n      \"command\": \"pith\",\n      \"args\": [\"mcp\"]\n    }\n  }\n}\n";
        match plan(" \n", "mcp").unwrap() {
            Plan::Write { new } => assert_eq!(new, fresh),
            _ => panic!("a blank file gets a fresh one"),
        }
        assert_eq!(
            splice("// project settings\n", "mcp"),
            format!("// project settings\n{fresh}")
        );
    }

    #[test]
    fn refuses_what_the_clients_would_not_read() {
        for bad in ["{ not json", "{'a': 1}", "{a: 1}", "{\"a\": 0x10}", "[1]"] {
            let err = plan(bad, "mcp")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.starts_with("x.jsonc is not "), "{bad}: {err}");
        }
        let err = plan("{\n  \"a\": 1\n  \"b\": 2\n}", "mcp")
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            err,
            "x.jsonc is not valid JSONC (Expected comma on line 2 column 9); fix that, then run \
             `pith setup x` again"
        );
    }

    #[test]
    fn keeps_text_sees_a_dropped_comment() {
        assert!(keeps_text("{ /* c */ }", "{\n  /* c */\n  \"a\": 1\n}"));
        assert!(!keeps_text("{ /* c */ }", "{\n  \"a\": 1\n}"));
    }

    #[test]
    fn diff_shows_context_and_changes() {
        assert_eq!(
            diff("a\nb\nc\nd\ne\n", "a\nb\nc\nX\nd\ne\n"),
            "  b\n  c\n+ X\n  d\n  e\n"
        );
        assert_eq!(diff("", "x\n"), "+ x\n");
    }
}
