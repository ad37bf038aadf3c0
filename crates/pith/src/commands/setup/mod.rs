//! `pith setup <client>`: register `pith mcp`, `pith hook` and (Claude Code) `pith statusline`
//! in a coding agent's own settings, in the scope the client defines for a person's own
//! settings unless `--scope` says otherwise. What goes where is the client's file in
//! `pith-clients`; this verb plans the edits ([`edit`]), shows them, records them ([`record`])
//! and writes them.
//!
//! The edit is an insertion into the user's file, never a rewrite. An existing `pith` entry
//! that already runs the same command is left as it is; a different one is never overwritten.
//!
//! Order of work: every part (MCP, hooks, the status line, `--proxy`'s base URL) is planned on
//! one text per file (`Edits`), shown, and recorded before any file is written, so `--undo`
//! always has what it needs; the whole run holds one lock ([`record::lock`]), and each file is
//! written through a temporary file of its own where the path lands ([`record::landing`]: in
//! a project, never through a link out of it). A file the client keeps out of git (Claude
//! Code's local settings) gets the client's own rule in git's global excludes file.

mod edit;
mod record;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, anyhow, bail};
use pith_clients::{Client, Registration, Scope, Setting};
use serde_json::Value;

use crate::client_files::{Disk, default_command};
use crate::config::Config;
use edit::{Member, Plan, Removal};
use record::{Added, Record, diff, read_config, write_file};

#[derive(Debug, clap::Args)]
#[command(after_help = "Scopes (--scope), as each client defines them:
  claude-code  local (default): the MCP server in ~/.claude.json for this project, hooks and the
               status line in .claude/settings.local.json, both yours and not committed;
               project: .mcp.json and .claude/settings.json, the project's shared files;
               user: ~/.claude.json and ~/.claude/settings.json, for every project.
  opencode     user (default): ~/.config/opencode/opencode.json(c), for every project;
               project: the project's opencode.json(c).
  codex        user (the only one): $CODEX_HOME/config.toml (default ~/.codex), and hooks.json
               there when it exists.

Examples:
  pith setup claude-code
  pith setup claude-code --scope project --dry-run
  pith setup --undo claude-code")]
pub struct Args {
    /// The coding agent to register pith with.
    #[arg(value_parser = parse_client, help = format!("The coding agent to register pith with: {}", Client::names()))]
    client: Client,
    /// Where to write: project, local or user (default: where the client keeps your own
    /// settings; see below).
    #[arg(long, value_parser = parse_scope)]
    scope: Option<Scope>,
    /// Show what would change and write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Project directory for the project and local scopes. Default: the nearest ancestor of
    /// the current directory holding `.git` or `.pith`, else the current directory.
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
    /// Take out what `pith setup` added for this client in this scope: each file it changed
    /// goes back to what it was, byte for byte; one changed since loses only pith's entries.
    #[arg(long)]
    undo: bool,
}

fn parse_client(name: &str) -> Result<Client, String> {
    Client::named(name).ok_or_else(|| format!("name one of {}", Client::names()))
}

fn parse_scope(name: &str) -> Result<Scope, String> {
    [Scope::Project, Scope::Local, Scope::User]
        .into_iter()
        .find(|s| s.name() == name)
        .ok_or_else(|| "name project, local or user".to_owned())
}

/// The files one `pith setup` changes: each file's text on disk and as planned so far, so that
/// several parts (the MCP entry, hooks, the status line, the base URL) can edit one file in
/// turn and the user sees one diff per file.
#[derive(Default)]
struct Edits {
    files: Vec<PlannedFile>,
}

struct PlannedFile {
    path: PathBuf,
    disk: Option<String>,
    planned: Option<String>,
    added: Added,
}

impl Edits {
    fn file(&mut self, path: &Path) -> anyhow::Result<&mut PlannedFile> {
        if let Some(at) = self.files.iter().position(|f| f.path == path) {
            return Ok(&mut self.files[at]);
        }
        let disk = read_config(path)?;
        self.files.push(PlannedFile {
            path: path.to_path_buf(),
            disk,
            planned: None,
            added: Added::default(),
        });
        self.files.last_mut().context("internal error: the file")
    }

    /// The file's text as planned so far (as on disk when no part changed it yet).
    fn current(&mut self, path: &Path) -> anyhow::Result<Option<String>> {
        let f = self.file(path)?;
        Ok(f.planned.clone().or_else(|| f.disk.clone()))
    }

    /// Apply one part's plan; `registered` is said when there is nothing to change.
    fn apply(&mut self, path: &Path, plan: Plan, registered: impl FnOnce() -> String) {
        match plan {
            Plan::Registered => println!("{}", registered()),
            Plan::Write(new) => {
                if let Ok(f) = self.file(path) {
                    f.planned = Some(new);
                }
            }
        }
    }

    /// Set one member, saying what is there when it is something else.
    fn member(
        &mut self,
        setting: &Setting,
        rerun: &str,
        registered: impl FnOnce() -> String,
        other: impl FnOnce(&Value) -> String,
    ) -> anyhow::Result<()> {
        let base = self.current(&setting.file)?;
        match edit::plan_member(
            &setting.file,
            rerun,
            base.as_deref(),
            &setting.key,
            &setting.value,
        )? {
            Member::Planned(plan) => {
                if let Plan::Write(_) = plan {
                    let f = self.file(&setting.file)?;
                    f.added
                        .members
                        .push((setting.key.clone(), setting.value.clone()));
                }
                self.apply(&setting.file, plan, registered);
            }
            Member::Other(existing) => println!("{}", other(&existing)),
        }
        Ok(())
    }
}

pub fn run(args: Args, config: &Config) -> anyhow::Result<()> {
    let client = args.client;
    let scope = args.scope.unwrap_or(client.profile().default_scope);
    let places = crate::client_files::places(args.workspace.as_deref())?;
    let command = match args.command.as_deref() {
        Some(c) if !c.trim().is_empty() => c.to_owned(),
        Some(_) => bail!("--command is empty"),
        None => default_command()?,
    };
    let registration = client
        .registration(scope, &places, &Disk, &command)
        .map_err(|e| anyhow!("pith setup {client} --scope {}: {e}", scope.name()))?;
    // One setup at a time, from planning to the last write.
    let _lock = record::lock()?;
    let project = places.project.as_deref();
    if args.undo {
        return undo(client, &registration, args.dry_run, project);
    }
    let rerun = match args.scope {
        Some(s) => format!("pith setup {client} --scope {}", s.name()),
        None => format!("pith setup {client}"),
    };
    let mut edits = Edits::default();
    plan_mcp(&mut edits, client, &registration, &command, &rerun)?;
    if let Some(hooks) = &registration.hooks {
        let base = edits.current(&hooks.file)?;
        let plan = edit::plan_hooks(hooks, &rerun, base.as_deref())?;
        if let Plan::Write(_) = plan {
            edits.file(&hooks.file)?.added.hook_command = Some(hooks.command.clone());
        }
        edits.apply(&hooks.file, plan, || {
            format!(
                "{} already runs `{}` after tool calls; nothing to change.",
                hooks.file.display(),
                hooks.command
            )
        });
    }
    if let Some(line) = &registration.status_line {
        let shown = line.value["command"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        edits.member(
            line,
            &rerun,
            || {
                format!(
                    "{} already shows `{shown}` as the status line; nothing to change.",
                    line.file.display()
                )
            },
            |existing| {
                format!(
                    "{} has a status line of its own ({existing}); pith leaves it (the status \
                     line `{shown}` shows the session's tokens and cost).",
                    line.file.display()
                )
            },
        )?;
    }
    if args.proxy {
        plan_proxy(&mut edits, client, &registration, &places, config, &rerun)?;
    }
    write(edits, client, &registration, args.dry_run, project)
}

/// The MCP server entry; a different `pith` entry already there is refused.
fn plan_mcp(
    edits: &mut Edits,
    client: Client,
    registration: &Registration,
    command: &str,
    rerun: &str,
) -> anyhow::Result<()> {
    let mcp = &registration.mcp;
    let setting = Setting {
        file: mcp.file.clone(),
        key: mcp.key(),
        value: mcp.entry.clone(),
    };
    let base = edits.current(&mcp.file)?;
    let existing = base
        .as_deref()
        .and_then(|t| crate::client_files::parse(&mcp.file, t))
        .and_then(|doc| pith_clients::lookup(&doc, &setting.key).cloned());
    if let Some(existing) = existing {
        if client.mcp_argv(&existing) == client.mcp_argv(&mcp.entry) {
            println!(
                "{} already registers pith (`{command} mcp`); nothing to change.",
                mcp.file.display()
            );
            return Ok(());
        }
        let (what, thing) = if crate::client_files::is_toml(&mcp.file) {
            (format!("[{}]", setting.key.join(".")), "table")
        } else {
            (
                format!("\"pith\" entry under \"{}\"", mcp.section.join(".")),
                "entry",
            )
        };
        bail!(
            "{} already has a different {what}: {existing}\n\
             pith leaves it alone. Remove or rename that {thing}, then run `{rerun}` again.",
            mcp.file.display()
        );
    }
    edits.member(&setting, rerun, String::new, |_| String::new())
}

/// A permanent base URL, only when asked.
fn plan_proxy(
    edits: &mut Edits,
    client: Client,
    registration: &Registration,
    places: &pith_clients::Places,
    config: &Config,
    rerun: &str,
) -> anyhow::Result<()> {
    let listen = super::proxy::listen_addr(None, config)?;
    let origin = format!("http://{}", super::run::reachable(listen));
    match client.proxy_settings(registration, places, &Disk, &origin) {
        Ok(settings) => {
            for setting in &settings {
                let shown = setting.key.join(".");
                let url = setting.value.as_str().unwrap_or_default();
                edits.member(
                    setting,
                    rerun,
                    || {
                        format!(
                            "{} already sends {shown} to {url}; nothing to change.",
                            setting.file.display()
                        )
                    },
                    |existing| {
                        format!(
                            "{} sets {shown} to {existing} already; pith leaves it (use `pith \
                             run {}` to go through pith for one run).",
                            setting.file.display(),
                            client.program()
                        )
                    },
                )?;
            }
        }
        Err(why) => println!("{why}"),
    }
    eprintln!(
        "warning: with --proxy, {client} needs a pith proxy on {origin} for every run, or its \
         requests fail: keep one running with `pith service install`, or use `pith run {}` \
         instead (it starts one, and goes straight to the provider when it cannot).",
        client.program()
    );
    Ok(())
}

/// Show every change, then (unless a dry run) record and write them. Every part is planned
/// before any file is written: a refusal leaves them all as they were.
fn write(
    edits: Edits,
    client: Client,
    registration: &Registration,
    dry_run: bool,
    project: Option<&Path>,
) -> anyhow::Result<()> {
    let changes: Vec<PlannedFile> = edits
        .files
        .into_iter()
        .filter(|f| f.planned.is_some() && f.planned != f.disk)
        .collect();
    for f in &changes {
        let state = if f.disk.as_deref().is_some_and(|t| !t.trim().is_empty()) {
            ""
        } else {
            " (new file)"
        };
        println!("{}{state}:", f.path.display());
        print!(
            "{}",
            diff(
                f.disk.as_deref().unwrap_or(""),
                f.planned.as_deref().unwrap_or("")
            )
        );
    }
    if changes.is_empty() {
        return Ok(());
    }
    // Where each lands is checked before anything is recorded or written, with the
    // directories writing it will create.
    let mut created = Vec::with_capacity(changes.len());
    for f in &changes {
        created.push(missing_dirs(&record::landing(&f.path, project)?));
    }
    // git's excludes file changes too when the file it should ignore is written.
    let ignore = match &registration.git_ignored {
        Some(ignored) if changes.iter().any(|f| f.path == ignored.file) => {
            git_ignore_plan(ignored, project)?.map(|plan| (ignored, plan))
        }
        _ => None,
    };
    if dry_run {
        if let Some((ignored, (excludes, _))) = &ignore {
            println!(
                "would add `{}` to {}, so that git ignores {} (as the client does when it \
                 creates the file).",
                ignored.rule,
                excludes.display(),
                ignored.file.display()
            );
        }
        println!("dry run: nothing written.");
        return Ok(());
    }
    // Recorded first: a record that cannot be written leaves every file as it was.
    let mut record = Record::load()?;
    let mut writes = Vec::new();
    for (mut f, created_dirs) in changes.into_iter().zip(created) {
        let new = f.planned.unwrap_or_default();
        f.added.created_dirs = created_dirs;
        record.wrote(
            (client, registration.scope, project),
            &f.path,
            (f.disk.as_deref(), &new),
            f.added,
        );
        writes.push((f.path, new));
    }
    record.save()?;
    for (path, new) in &writes {
        write_file(path, new, project)?;
        println!("wrote {}.", path.display());
    }
    if let Some((ignored, (excludes, text))) = &ignore {
        write_file(excludes, text, None)?;
        println!(
            "git ignores {} now: added `{}` to {}, as the client does when it creates the file.",
            ignored.file.display(),
            ignored.rule,
            excludes.display()
        );
    }
    println!("{}", registration.next);
    let scope = if registration.scope == client.profile().default_scope {
        String::new()
    } else {
        format!(" --scope {}", registration.scope.name())
    };
    println!("`pith setup --undo {client}{scope}` takes out what this added.");
    Ok(())
}

/// The directories writing a file at `target` creates: its missing ancestors, deepest first.
fn missing_dirs(target: &Path) -> Vec<PathBuf> {
    target
        .ancestors()
        .skip(1)
        .take_while(|dir| !dir.as_os_str().is_empty() && !dir.exists())
        .map(Path::to_path_buf)
        .collect()
}

/// How to have git ignore a file that is one person's, as the client itself does when it
/// creates the file (Claude Code: [`pith_clients::claude_code::LOCAL_SETTINGS_IGNORED`]): git's
/// global excludes file and its text with the rule added, unless a line there is it already.
/// Only in a git repository (a project with `.git`). Unlike Claude Code, pith runs no git
/// command in the project (`git check-ignore` there reads the project's own git config, and a
/// project is a stranger's): a rule already in the project's `.gitignore` gets the global line
/// all the same, which ignores nothing more. Undo leaves the line: it is the one Claude Code
/// adds.
fn git_ignore_plan(
    ignored: &pith_clients::GitIgnored,
    project: Option<&Path>,
) -> anyhow::Result<Option<(PathBuf, String)>> {
    if !project.is_some_and(|p| p.join(".git").exists()) {
        return Ok(None);
    }
    let Some(excludes) = git_excludes_file() else {
        return Ok(None);
    };
    let text = read_config(&excludes)?.unwrap_or_default();
    if text.lines().any(|l| l.trim() == ignored.rule) {
        return Ok(None);
    }
    let mut new = text;
    if !new.is_empty() && !new.ends_with('\n') {
        new.push('\n');
    }
    new.push_str(ignored.rule);
    new.push('\n');
    Ok(Some((excludes, new)))
}

/// git's global excludes file: the one `core.excludesfile` names in the user's git config
/// (`~/` is the home directory; a relative path is not taken), else
/// `$XDG_CONFIG_HOME/git/ignore`, else `~/.config/git/ignore`; `None` without a home.
fn git_excludes_file() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    // Asked from the home directory, away from the project's own git config.
    let configured = Command::new("git")
        .args(["config", "--global", "--get", "core.excludesfile"])
        .current_dir(home.as_deref().unwrap_or(Path::new("/")))
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_default();
    if configured == "~" {
        return home;
    }
    if let Some(rest) = configured.strip_prefix("~/") {
        return home.map(|h| h.join(rest));
    }
    if Path::new(&configured).is_absolute() {
        return Some(PathBuf::from(configured));
    }
    if let Some(xdg) = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from)
        && xdg.is_absolute()
    {
        return Some(xdg.join("git").join("ignore"));
    }
    home.map(|h| h.join(".config").join("git").join("ignore"))
}

/// `pith setup --undo <client>`: every file setup changed for this client in this scope goes
/// back to what it was when it still holds what setup wrote; one that changed since loses
/// only pith's entries (those still as pith wrote them); anything else is named, to take out
/// by hand.
fn undo(
    client: Client,
    registration: &Registration,
    dry_run: bool,
    project: Option<&Path>,
) -> anyhow::Result<()> {
    let scope = registration.scope;
    let mut record = Record::load()?;
    let (writes, left) = plan_undo(client, registration, &record, project)?;
    if writes.is_empty() && left.is_empty() {
        println!(
            "pith setup changed nothing for {client} in the {} scope here (no record in {}); \
             nothing to undo.",
            scope.name(),
            Record::path()?.display()
        );
        return Ok(());
    }
    for path in &left {
        println!(
            "{} changed since pith setup wrote it, and pith's entries are not as it wrote them; \
             pith leaves it. Take out pith's entries by hand (the `pith` MCP server, the hooks \
             running `pith hook`, a `pith statusline` status line, a base URL naming pith's \
             port).",
            path.display()
        );
    }
    for (path, ..) in &writes {
        record::landing(path, project)?;
    }
    if dry_run {
        println!("dry run: nothing written.");
        return Ok(());
    }
    for (path, text, key) in &writes {
        match text {
            Some(text) => write_file(path, text, project)?,
            None if path.exists() => std::fs::remove_file(path)
                .with_context(|| format!("cannot remove {}", path.display()))?,
            None => {}
        }
        let created = record
            .files
            .remove(key)
            .map(|r| r.created_dirs)
            .unwrap_or_default();
        let done = if text.is_some() {
            "restored"
        } else {
            "removed"
        };
        println!("{done} {}.", path.display());
        // The directories setup created for it, deepest first, each only when nothing is left
        // in it (remove_dir removes no directory that holds anything).
        for dir in created.iter().map(Path::new) {
            if std::fs::remove_dir(dir).is_ok() {
                println!(
                    "removed {} (pith setup created it, and it is empty).",
                    dir.display()
                );
            }
        }
    }
    record.save()?;
    if !left.is_empty() {
        bail!(
            "{} file(s) changed since pith setup and were left as they are",
            left.len()
        );
    }
    Ok(())
}

/// What undo does to each file recorded for this client and scope: the text to write back
/// (`None`: remove the file setup created), and the files it leaves.
#[expect(
    clippy::type_complexity,
    reason = "a pair of lists, named at the one caller"
)]
fn plan_undo(
    client: Client,
    registration: &Registration,
    record: &Record,
    project: Option<&Path>,
) -> anyhow::Result<(Vec<(PathBuf, Option<String>, String)>, Vec<PathBuf>)> {
    let mut writes: Vec<(PathBuf, Option<String>, String)> = Vec::new();
    let mut left = Vec::new();
    let mut paths = registration.files.clone();
    paths.dedup();
    for path in &paths {
        let Some((key, r)) = record.find(path, client, registration.scope, project) else {
            continue;
        };
        let Some(now) = read_config(path)? else {
            // Gone already: nothing of pith's is left in it.
            continue;
        };
        if now == r.after {
            print_restore(path, &r.after, r.before.as_deref());
            writes.push((path.clone(), r.before.clone(), key));
            continue;
        }
        let removal = Removal {
            members: &r.members,
            hook_command: r.hook_command.as_deref(),
            before: r
                .before
                .as_deref()
                .and_then(|t| crate::client_files::parse(path, t)),
        };
        match edit::remove(path, &now, &removal) {
            Ok(Some(new)) => {
                println!(
                    "{} (changed since; only pith's entries go):",
                    path.display()
                );
                print!("{}", diff(&now, &new));
                writes.push((path.clone(), Some(new), key));
            }
            _ => left.push(path.clone()),
        }
    }
    Ok((writes, left))
}

fn print_restore(path: &Path, after: &str, before: Option<&str>) {
    match before {
        Some(before) => {
            println!("{}:", path.display());
            print!("{}", diff(after, before));
        }
        None => println!("{}: remove (pith setup created it)", path.display()),
    }
}
