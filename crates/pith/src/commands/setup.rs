//! `pith setup <client>`: register `pith mcp` in a coding agent's own MCP config.
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
        old: Option<String>,
        new: String,
    },
}

pub fn run(args: Args, _config: &Config) -> anyhow::Result<()> {
    let command = match args.command {
        Some(c) if !c.trim().is_empty() => c,
        Some(_) => bail!("--command is empty"),
        None => default_command()?,
    };
    let path = config_path(args.client, args.workspace.as_deref())?;
    let rerun = format!("pith setup {}", args.client.name());
    let old = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
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
    let (old, new) = match plan {
        Plan::Registered => {
            println!(
                "{} already registers pith (`{command} mcp`); nothing to change.",
                path.display()
            );
            return Ok(());
        }
        Plan::Write { old, new } => (old, new),
    };
    let state = if old.is_some() { "" } else { " (new file)" };
    println!("{}{state}:", path.display());
    print!("{}", diff(old.as_deref().unwrap_or(""), &new));
    if args.dry_run {
        println!("dry run: nothing written.");
        return Ok(());
    }
    write_file(&path, &new)?;
    println!("wrote {}.", path.display());
    println!(
        "{}",
        match args.client {
            Client::ClaudeCode =>
                "Claude Code asks you to approve the project's `pith` MCP server next time it starts here.",
            Client::Opencode => "OpenCode starts `pith mcp` next time it runs in this project.",
            Client::Codex =>
                "Codex starts `pith mcp` in every project; the workspace is found from where Codex runs.",
        }
    );
    Ok(())
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
        Client::Codex => {
            let home = match std::env::var_os("CODEX_HOME").filter(|v| !v.is_empty()) {
                Some(h) => PathBuf::from(h),
                None => dirs::home_dir()
                    .context("cannot find your home directory; set CODEX_HOME")?
                    .join(".codex"),
            };
            home.join("config.toml")
        }
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
const JSONC: ParseOptions = ParseOptions {
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
    let format = if path.extension().is_some_and(|e| e == "jsonc") {
        "JSONC"
    } else {
        "JSON"
    };
    let invalid = |e: jsonc_parser::errors::ParseError| {
        anyhow!("{file} is not valid {format} ({e}); fix that, then run `{rerun}` again")
    };
    let root = CstRootNode::parse(text, &JSONC).map_err(invalid)?;
    // A file of only comments holds no value yet; it gets an object after them.
    let parsed: Value = match root.value() {
        Some(_) => jsonc_parser::parse_to_serde_value(text, &JSONC).map_err(invalid)?,
        None => json!({}),
    };
    let Some(top) = parsed.as_object() else {
        bail!("{file} is not a JSON object; fix it by hand");
    };
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
    let mut expected = parsed;
    expected[section]["pith"] = value;
    let got: Value = jsonc_parser::parse_to_serde_value(&new, &JSONC)
        .context("internal error: the edit broke the JSON")?;
    if got != expected || !keeps_text(text, &new) {
        bail!("internal error: the edit of {file} would change other content; nothing written");
    }
    Ok(Plan::Write { old, new })
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
    Ok(Plan::Write { old, new })
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
            Plan::Write { new, .. } => new,
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
            Plan::Write { old: None, new } => assert_eq!(new, fresh),
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
