//! `pith memory ...`: the project memory for a person. The same brain and the same words as the
//! MCP tools, with `--json` on every command for scripts.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use pith_brain::render::{self, Hints};
use pith_brain::{
    Brain, BrainError, Checked, EvidenceSpec, Kind, ListFilter, Matched, NewMemory, SearchResult,
};
use pith_paths::lexically_normal;
use pith_store::brain::{open_existing_workspace_brain, open_workspace_brain};
use serde_json::json;

use crate::config::Config;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workspace root. Default: the nearest ancestor of the current directory holding `.git`
    /// or `.pith`, else the current directory.
    #[arg(long, global = true, value_name = "DIR")]
    workspace: Option<PathBuf>,

    #[command(subcommand)]
    command: MemoryCommand,
}

#[derive(Debug, clap::Subcommand)]
enum MemoryCommand {
    /// Save a memory: `pith memory add fix "Retry on SQLITE_BUSY" --evidence src/db.rs:40-60`.
    Add(AddArgs),
    /// Search memories (title, body, tags, error headline), best first.
    Search(SearchArgs),
    /// Show a memory in full, with the status of its evidence.
    Show(IdArgs),
    /// Recheck evidence files, record the result and say what changed.
    Verify(VerifyArgs),
    /// List memories, newest first.
    List(ListArgs),
    /// Move a memory to the trash (`pith memory restore` brings it back).
    Forget(IdArgs),
    /// Bring a memory back from the trash.
    Restore(IdArgs),
    /// Say that this workspace's brain is yours, once you have read it (`pith memory list`):
    /// notes from a brain that came with the project (a clone, an archive) say so until then.
    Trust(TrustArgs),
    /// Team mode: send this workspace's memory changes to the team database and take the
    /// changes other clones of the repository made (`pith mcp` does this in the background).
    Sync(SyncArgs),
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Clones of one repository share memories, whatever their paths: the repository is
identified by its root commit. The newest change to a memory wins. Hit counters and
verifications stay on each machine, and evidence is checked against this checkout's files, so
a memory can be fresh here and stale elsewhere. Needs [store] url or PITH_STORE_URL."
)]
struct SyncArgs {
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "pith remembers the brains it creates (in $PITH_HOME/brains/). A .pith/brain.db
that arrived with a repository is another author's text: until you trust it, the notes pith
adds to the agent's context from it begin \"pith, quoting a memory file that came with this
project\". A brain made by a pith from before this record needs the same one-time trust."
)]
struct TrustArgs {
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct AddArgs {
    /// note, fix, failed (an attempt that did not work) or decision.
    #[arg(value_parser = parse_kind)]
    kind: Kind,
    /// One line saying what the memory is about.
    title: String,
    /// The detail; `-` reads it from standard input.
    #[arg(long)]
    body: Option<String>,
    /// A tag (repeat, or separate with commas).
    #[arg(long = "tag", value_name = "TAG")]
    tags: Vec<String>,
    /// For a fix: the error headline it fixes.
    #[arg(long)]
    headline: Option<String>,
    /// A file the memory depends on, optionally a line range (repeat). Relative paths are
    /// taken from the current directory when it is inside the workspace, else from the root.
    #[arg(long = "evidence", value_name = "PATH[:START[-END]]")]
    evidence: Vec<String>,
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct SearchArgs {
    /// Words to look for; memories matching more of them rank higher.
    #[arg(required = true, num_args = 1..)]
    query: Vec<String>,
    /// Only this kind.
    #[arg(long, value_parser = parse_kind)]
    kind: Option<Kind>,
    /// Most results to show (at most 50).
    #[arg(long, default_value_t = 10)]
    limit: usize,
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct IdArgs {
    /// Memory id, e.g. m-7f3a.
    id: String,
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct VerifyArgs {
    /// Memory id, e.g. m-7f3a.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    id: Option<String>,
    /// Verify every live memory.
    #[arg(long)]
    all: bool,
    /// The memory still holds: record the files as they are now as its evidence.
    #[arg(long)]
    accept: bool,
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// Only this kind.
    #[arg(long, value_parser = parse_kind)]
    kind: Option<Kind>,
    /// List the trash instead.
    #[arg(long)]
    trash: bool,
    /// Most memories to list.
    #[arg(long)]
    limit: Option<usize>,
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

const HINTS: Hints = Hints {
    get: "`pith memory show <id>`",
    more: "use --limit N (at most 50)",
    accept: "`pith memory verify <id> --accept`",
    forget: "`pith memory forget <id>`",
    restore: "`pith memory restore <id>`",
};

fn parse_kind(s: &str) -> Result<Kind, String> {
    Kind::parse(s).ok_or_else(|| format!("unknown kind {s:?}; use note, fix, failed or decision"))
}

pub fn run(args: Args, config: &Config) -> anyhow::Result<()> {
    let ws = crate::workspace::workspace_from(args.workspace.as_deref())?;
    let root = ws.root().to_path_buf();
    // Only saving creates the brain. Every other command reads (and records hits and checks)
    // an existing one: reading never creates `.pith/` or changes a file's mode.
    let brain = match args.command {
        MemoryCommand::Add(_) => Some(open_workspace_brain(ws)?),
        // The sync opens the brain file itself (creating it in a fresh clone).
        MemoryCommand::Sync(_) => None,
        _ => open_existing_workspace_brain(ws)?,
    };
    let Some(mut brain) = brain else {
        return without_brain(args.command, &root, config);
    };
    if brain.created() {
        origins()?.remember(&root).with_context(|| {
            format!("cannot record the new brain of {} as yours", root.display())
        })?;
    }
    match args.command {
        MemoryCommand::Add(a) => add(&mut brain, a),
        MemoryCommand::Trust(a) => {
            let memories = brain.count()?;
            origins()?.remember(&root).with_context(|| {
                format!("cannot record the brain of {} as yours", root.display())
            })?;
            let db = pith_brain::Brain::db_path(&root);
            let value = json!({"brain": db, "memories": memories, "trusted": true});
            emit(a.json, value, || {
                format!(
                    "trusted {} ({memories} {}): pith's notes quote it as your own",
                    render::one_line(&db.display().to_string(), 300),
                    if memories == 1 { "memory" } else { "memories" }
                )
            })
        }
        MemoryCommand::Search(a) => {
            let query = a.query.join(" ");
            let found = brain.search(&query, a.kind, a.limit)?;
            emit(a.json, render::search_json(&found), || {
                render::search(&found, &HINTS)
            })
        }
        MemoryCommand::Show(a) => {
            let c = brain.get(&a.id).map_err(|e| explain(e, &root))?;
            emit(a.json, render::memory_json(&c), || render::memory(&c))
        }
        MemoryCommand::Verify(a) => verify(&mut brain, a, &root),
        MemoryCommand::List(a) => {
            let filter = ListFilter {
                kind: a.kind,
                trashed: a.trash,
                limit: a.limit,
            };
            let items = brain.list(&filter)?;
            let as_json = items.iter().map(render::memory_json).collect();
            emit(a.json, as_json, || list_text(&items, &a, &root))
        }
        MemoryCommand::Forget(a) => {
            let m = brain.forget(&a.id).map_err(|e| explain(e, &root))?;
            let value = json!({"id": m.id, "title": m.title, "trashed_at": m.trashed_at});
            emit(a.json, value, || render::trashed(&m, &HINTS))
        }
        MemoryCommand::Restore(a) => {
            let m = brain.restore(&a.id).map_err(|e| explain(e, &root))?;
            let value = json!({"id": m.id, "title": m.title, "trashed_at": null});
            emit(a.json, value, || render::restored(&m))
        }
        MemoryCommand::Sync(a) => sync(config, &root, a.json),
    }
}

/// The records of the brains this user's pith made.
fn origins() -> anyhow::Result<pith_brain::origin::Origins> {
    Ok(pith_brain::origin::Origins::new(
        &crate::config::pith_home()?
    ))
}

/// A read in a workspace with no brain: what the same command says over an empty one.
fn without_brain(command: MemoryCommand, root: &Path, config: &Config) -> anyhow::Result<()> {
    let unknown = |id: &str| {
        explain(
            BrainError::NotFound {
                id: id.trim().to_owned(),
            },
            root,
        )
    };
    match command {
        MemoryCommand::Add(_) => anyhow::bail!("the project memory could not be created"),
        MemoryCommand::Trust(_) => anyhow::bail!(
            "{} has no brain to trust (`pith memory add` makes one, and records it as yours)",
            render::one_line(&root.display().to_string(), 300)
        ),
        MemoryCommand::Sync(a) => sync(config, root, a.json),
        MemoryCommand::Search(a) => {
            let found = SearchResult {
                query: a.query.join(" ").trim().to_owned(),
                total: 0,
                total_capped: false,
                matched: Matched::All,
                ranked_newest: None,
                hits: Vec::new(),
            };
            emit(a.json, render::search_json(&found), || {
                render::search(&found, &HINTS)
            })
        }
        MemoryCommand::List(a) => emit(a.json, json!([]), || list_text(&[], &a, root)),
        MemoryCommand::Verify(VerifyArgs { id: None, json, .. }) => {
            emit(json, json!([]), || "no memories to verify\n".to_owned())
        }
        MemoryCommand::Verify(VerifyArgs { id: Some(id), .. })
        | MemoryCommand::Show(IdArgs { id, .. })
        | MemoryCommand::Forget(IdArgs { id, .. })
        | MemoryCommand::Restore(IdArgs { id, .. }) => Err(unknown(&id)),
    }
}

/// The list, or what an empty one means: none asked for, none of the kind, an empty trash,
/// or no memory at all yet.
fn list_text(items: &[Checked], a: &ListArgs, root: &Path) -> String {
    if !items.is_empty() {
        render::list(items)
    } else if a.limit == Some(0) {
        "--limit 0: no memories listed\n".to_owned()
    } else if let Some(kind) = a.kind {
        let place = if a.trash { "in the trash" } else { "here" };
        format!("no {kind} memories {place}; `pith memory list` shows every kind\n")
    } else if a.trash {
        "the trash is empty\n".to_owned()
    } else {
        format!(
            "no memories in {} yet; `pith memory add` saves one\n",
            render::one_line(&root.display().to_string(), 300)
        )
    }
}

fn add(brain: &mut Brain, a: AddArgs) -> anyhow::Result<()> {
    let body = match a.body.as_deref() {
        Some("-") => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read the body from standard input")?;
            text
        }
        Some(text) => text.to_owned(),
        None => String::new(),
    };
    let root = brain.workspace().root().to_path_buf();
    let base = evidence_base(&root)?;
    let evidence = a
        .evidence
        .iter()
        .map(|spec| {
            let mut parsed = EvidenceSpec::parse(spec).map_err(anyhow::Error::msg)?;
            // `..` folded by name, not resolved: on the command line `../src/a.rs` from a
            // subdirectory is an ordinary way to name a file; the brain then confines it.
            parsed.path = lexically_normal(&base.join(&parsed.path))
                .to_string_lossy()
                .into_owned();
            Ok(parsed)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let saved = brain.save(NewMemory {
        kind: a.kind,
        title: a.title,
        body,
        tags: a.tags,
        headline: a.headline,
        evidence,
    })?;
    emit(a.json, render::memory_json(&saved), || {
        render::saved(&saved)
    })
}

fn verify(brain: &mut Brain, a: VerifyArgs, root: &Path) -> anyhow::Result<()> {
    let ids: Vec<String> = match a.id {
        Some(id) => vec![id],
        None => brain
            .list(&ListFilter::default())?
            .into_iter()
            .map(|c| c.memory.id)
            .collect(),
    };
    let mut results = Vec::with_capacity(ids.len());
    for id in &ids {
        results.push(brain.verify(id, a.accept).map_err(|e| explain(e, root))?);
    }
    let as_json = if a.all {
        results.iter().map(render::verification_json).collect()
    } else {
        results
            .first()
            .map(render::verification_json)
            .unwrap_or_default()
    };
    emit(a.json, as_json, || {
        if results.is_empty() {
            return "no memories to verify\n".to_owned();
        }
        results
            .iter()
            .map(|v| render::verification(v, &HINTS))
            .collect()
    })
}

/// Where relative evidence paths start: the current directory when it is inside the
/// workspace, else the workspace root.
fn evidence_base(root: &Path) -> anyhow::Result<PathBuf> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let cwd = cwd.canonicalize().unwrap_or(cwd);
    Ok(if cwd.starts_with(root) {
        cwd
    } else {
        root.to_path_buf()
    })
}

/// Errors about one memory, with the command that helps.
fn explain(e: BrainError, root: &Path) -> anyhow::Error {
    match e {
        BrainError::NotFound { id } => anyhow::anyhow!(
            "no memory {id} in {}; `pith memory list` shows the ids",
            root.display()
        ),
        BrainError::Trashed { id } => anyhow::anyhow!(
            "memory {id} is in the trash; `pith memory restore {id}` brings it back"
        ),
        BrainError::NotTrashed { id } => {
            anyhow::anyhow!("memory {id} is not in the trash; nothing to restore")
        }
        other => other.into(),
    }
}

fn sync(config: &Config, root: &Path, as_json: bool) -> anyhow::Result<()> {
    let Some(url) = config.store_url()? else {
        anyhow::bail!(
            "team mode is off: set [store] url in config or PITH_STORE_URL to a postgres:// URL"
        );
    };
    let ws = pith_brain::Workspace::new(root)?;
    let Some(report) = crate::team::sync_brain(&url, ws)? else {
        anyhow::bail!(
            "{} is not a git repository with a commit: clones are matched by their root commit",
            root.display()
        );
    };
    emit(as_json, json!(report), || {
        format!(
            "synced with {url}: sent {} changes ({} taken), received {} new and {} updated memories{}",
            report.pushed,
            report.accepted,
            report.new,
            report.updated,
            if report.collisions > 0 {
                format!(
                    "; {} memories share an id with a different memory and were left apart",
                    report.collisions
                )
            } else {
                String::new()
            }
        )
    })
}

fn emit(
    as_json: bool,
    value: serde_json::Value,
    text: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    if as_json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        let text = text();
        // Renderers end some texts with a newline and not others; print exactly one.
        println!("{}", text.trim_end_matches('\n'));
    }
    Ok(())
}
