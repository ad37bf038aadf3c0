//! `pith setup <client>`: register `pith mcp` in a coding agent's own MCP config.
//!
//! The edit is an insertion into the user's file, never a rewrite: JSON files get the new entry
//! spliced into their text (formatting, key order and every other entry stay byte for byte),
//! TOML goes through `toml_edit`, which keeps comments and layout. An existing `pith` entry that
//! already runs the same command is left as it is; a different one is never overwritten.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
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
    /// OpenCode: the `mcp` key of `opencode.json` in the project.
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
            json!({"type": "stdio", "command": command, "args": ["mcp"]}),
            |existing| existing["command"] == command && existing["args"] == json!(["mcp"]),
        )?,
        Client::Opencode => {
            let jsonc = path.with_extension("jsonc");
            if old.is_none() && jsonc.exists() {
                bail!(
                    "{} exists; pith edits only opencode.json. Add this under its \"mcp\" key by \
                     hand: \"pith\": {{\"type\": \"local\", \"command\": [{}, \"mcp\"]}}",
                    jsonc.display(),
                    json!(command)
                );
            }
            plan_json(
                &path,
                &rerun,
                old,
                "mcp",
                json!({"type": "local", "command": [command, "mcp"], "enabled": true}),
                |existing| existing["command"] == json!([command, "mcp"]),
            )?
        }
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
        Client::Opencode => project()?.join("opencode.json"),
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

fn plan_json(
    path: &Path,
    rerun: &str,
    old: Option<String>,
    section: &str,
    entry: Value,
    same: impl Fn(&Value) -> bool,
) -> anyhow::Result<Plan> {
    let file = path.display();
    let Some(old) = old.filter(|t| !t.trim().is_empty()) else {
        let new = format!(
            "{}\n",
            pretty(&json!({ section: { "pith": entry } }), "", "  ")
        );
        return Ok(Plan::Write { old: None, new });
    };
    let parsed: Value =
        serde_json::from_str(&old).with_context(|| format!("{file} is not valid JSON"))?;
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

    let bytes = old.as_bytes();
    let open = skip_ws(bytes, 0);
    let new = match member_span(bytes, open, section)? {
        Some(section_open) => insert_member(&old, section_open, "pith", &entry)?,
        None => insert_member(&old, open, section, &json!({ "pith": entry }))?,
    };

    // The splice must add exactly the entry and change nothing else.
    let mut expected = parsed;
    expected[section]["pith"] = entry;
    let got: Value = serde_json::from_str(&new).context("internal error: edit broke the JSON")?;
    if got != expected {
        bail!("internal error: the edit of {file} would change other content; nothing written");
    }
    Ok(Plan::Write {
        old: Some(old),
        new,
    })
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

fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // Write beside and rename, so an interrupted write never leaves half a config.
    let tmp = path.with_extension("pith-tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    if let Ok(meta) = std::fs::metadata(path) {
        std::fs::set_permissions(&tmp, meta.permissions())
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

// A minimal scanner over JSON text that is already known to be valid (serde_json parsed it),
// so that an entry can be spliced in without re-serializing the user's file.

fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while s.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// Index just past the string starting at `i` (which holds `"`).
fn string_end(s: &[u8], mut i: usize) -> anyhow::Result<usize> {
    i += 1;
    while let Some(&c) = s.get(i) {
        match c {
            b'\\' => i += 2,
            b'"' => return Ok(i + 1),
            _ => i += 1,
        }
    }
    bail!("unterminated JSON string")
}

/// Index just past the value starting at `i`.
fn value_end(s: &[u8], i: usize) -> anyhow::Result<usize> {
    match s.get(i) {
        Some(b'"') => string_end(s, i),
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            let mut j = i;
            while let Some(&c) = s.get(j) {
                match c {
                    b'"' => {
                        j = string_end(s, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Ok(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            bail!("unterminated JSON container")
        }
        Some(_) => {
            let mut j = i;
            while s
                .get(j)
                .is_some_and(|c| !matches!(c, b',' | b'}' | b']') && !c.is_ascii_whitespace())
            {
                j += 1;
            }
            Ok(j)
        }
        None => bail!("JSON ended where a value was expected"),
    }
}

struct Member {
    key: String,
    key_start: usize,
    value_start: usize,
    value_end: usize,
}

/// The members of the object opening at `open`, and the index of its closing brace.
fn members(text: &str, open: usize) -> anyhow::Result<(Vec<Member>, usize)> {
    let s = text.as_bytes();
    let mut out = Vec::new();
    let mut i = skip_ws(s, open + 1);
    if s.get(i) == Some(&b'}') {
        return Ok((out, i));
    }
    loop {
        let key_start = i;
        let key_end = string_end(s, i)?;
        let key: String = serde_json::from_str(&text[key_start..key_end])?;
        i = skip_ws(s, key_end);
        anyhow::ensure!(s.get(i) == Some(&b':'), "expected `:` in JSON object");
        let value_start = skip_ws(s, i + 1);
        let value_end = value_end(s, value_start)?;
        out.push(Member {
            key,
            key_start,
            value_start,
            value_end,
        });
        i = skip_ws(s, value_end);
        match s.get(i) {
            Some(b',') => i = skip_ws(s, i + 1),
            Some(b'}') => return Ok((out, i)),
            _ => bail!("expected `,` or `}}` in JSON object"),
        }
    }
}

/// Where the object-valued member `key` of the object at `open` opens, if present.
fn member_span(s: &[u8], open: usize, key: &str) -> anyhow::Result<Option<usize>> {
    let text = std::str::from_utf8(s)?;
    let (members, _) = members(text, open)?;
    Ok(members
        .into_iter()
        .rfind(|m| m.key == key)
        .map(|m| m.value_start))
}

/// The whitespace that starts the line holding byte `i`.
fn line_indent(text: &str, i: usize) -> &str {
    let start = text[..i].rfind('\n').map_or(0, |n| n + 1);
    let line = &text[start..];
    let end = line
        .find(|c: char| c != ' ' && c != '\t')
        .unwrap_or(line.len());
    &line[..end]
}

/// Insert `"key": value` as the last member of the object opening at `open`, in the style
/// the object already uses (its members' indentation, or one line when it is written inline).
fn insert_member(text: &str, open: usize, key: &str, value: &Value) -> anyhow::Result<String> {
    let (members, close) = members(text, open)?;
    let key_json = serde_json::to_string(key)?;
    let outer = line_indent(text, open);
    let Some(last) = members.last() else {
        let inner = format!("{outer}  ");
        return Ok(format!(
            "{}\n{inner}{key_json}: {}\n{outer}{}",
            &text[..=open],
            pretty(value, &inner, "  "),
            &text[close..]
        ));
    };
    let first_key = members.first().map_or(last.key_start, |m| m.key_start);
    let insertion = if text[open..first_key].contains('\n') {
        let indent = line_indent(text, first_key);
        let unit = indent
            .strip_prefix(outer)
            .filter(|u| !u.is_empty())
            .unwrap_or("  ");
        format!(",\n{indent}{key_json}: {}", pretty(value, indent, unit))
    } else {
        format!(", {key_json}: {}", serde_json::to_string(value)?)
    };
    let at = last.value_end;
    Ok(format!("{}{insertion}{}", &text[..at], &text[at..]))
}

/// Pretty JSON indented by `unit` per level, every line after the first prefixed by `indent`.
fn pretty(value: &Value, indent: &str, unit: &str) -> String {
    use serde::Serialize;
    let mut buf = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(unit.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, formatter);
    // Serializing a Value into memory cannot fail.
    let _ = value.serialize(&mut ser);
    String::from_utf8_lossy(&buf).replace('\n', &format!("\n{indent}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn splice(old: &str, section: &str) -> String {
        let entry = json!({"command": "pith", "args": ["mcp"]});
        match plan_json(
            Path::new("x.json"),
            "pith setup x",
            Some(old.into()),
            section,
            entry,
            |_| false,
        )
        .unwrap()
        {
            Plan::Write { new, .. } => new,
            Plan::Registered => panic!("registered"),
        }
    }

    #[test]
    fn splices_into_an_existing_section_keeping_its_style() {
        let old = "{\n    \"zeta\": 1,\n    \"mcpServers\": {\n        \"other\": {\"command\": \"x\"}\n    }\n}\n";
        assert_eq!(
            splice(old, "mcpServers"),
            "{\n    \"zeta\": 1,\n    \"mcpServers\": {\n        \"other\": {\"command\": \"x\"},\n        \"pith\": {\n            \"args\": [\n                \"mcp\"\n            ],\n            \"command\": \"pith\"\n        }\n    }\n}\n"
        );
    }

    #[test]
    fn adds_a_missing_section_and_fills_empty_objects() {
        assert_eq!(
            splice("{\"a\": \"}{\\\"\"}", "mcp"),
            "{\"a\": \"}{\\\"\", \"mcp\": {\"pith\":{\"args\":[\"mcp\"],\"command\":\"pith\"}}}"
        );
        assert_eq!(
            splice("{}\n", "mcp"),
            "{\n  \"mcp\": {\n    \"pith\": {\n      \"args\": [\n        \"mcp\"\n      ],\n      \"command\": \"pith\"\n    }\n  }\n}\n"
        );
        assert_eq!(
            splice("{\n\t\"mcp\": {}\n}", "mcp"),
            "{\n\t\"mcp\": {\n\t  \"pith\": {\n\t    \"args\": [\n\t      \"mcp\"\n\t    ],\n\t    \"command\": \"pith\"\n\t  }\n\t}\n}"
        );
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
