//! `pith history ...`: the conversation history for a person. Search, list and show read;
//! `import` reads the clients' session files; `candidates` runs one of the fixed filters and
//! prints the token `delete` needs; `trash` lists, restores and (the only hard delete) purges.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use pith_clients::Client;
use pith_history::import;
use pith_history::{AgentType, Filter};
use pith_store::history::{Changed, Conversation, History};
use serde_json::json;

use crate::config::Config;
use crate::history_settings::HistorySettings;
use pith_store::clock::now_ms;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Recorded: each conversation that passes through `pith proxy` (off with [history] record = false
or PITH_HISTORY=0), in $PITH_HOME/history.db (mode 0600). Kept per message: role, whether a
person typed it, the time, and its text up to 16 KiB (tool calls and results included), indexed
for search. Nothing leaves the machine.

Deleting is by filter only: `candidates` runs a fixed filter and prints a signed token; `delete`
trashes those of its conversations that still match; `trash purge` deletes for good.

Team mode ([store] url / PITH_STORE_URL): the proxy still records here, and ships each message to
the team's PostgreSQL in the background; search, list, show, candidates, delete and the trash run
there, on your account's conversations ([account] id / PITH_ACCOUNT) from every machine. `import`
reads into this machine's file and sends it on at once. --local works on this machine's file.")]
pub struct Args {
    /// In team mode, work on this machine's history file instead of the team's database.
    #[arg(long, global = true)]
    local: bool,
    #[command(subcommand)]
    command: HistoryCommand,
}

#[derive(Debug, clap::Subcommand)]
enum HistoryCommand {
    /// Import Claude Code (~/.claude/projects/*/*.jsonl) and Codex ($CODEX_HOME/sessions)
    /// session files and OpenCode's sessions (its opencode.db); importing again adds only what
    /// they gained.
    Import(ImportArgs),
    /// Search message text (BM25), best conversations first, with a snippet each.
    Search(SearchArgs),
    /// List conversations, newest first.
    List(ListArgs),
    /// Show a conversation's messages.
    Show(ShowArgs),
    /// Run a fixed filter and print its candidates and the token that deletes them.
    Candidates(CandidatesArgs),
    /// Trash the conversations a token from `candidates` selected that still match its filter.
    Delete(DeleteArgs),
    /// The trash: list, restore, purge.
    Trash(TrashArgs),
}

#[derive(Debug, clap::Args)]
struct ImportArgs {
    /// Claude Code's config directory [default: $CLAUDE_CONFIG_DIR, else ~/.claude].
    #[arg(long, value_name = "DIR")]
    claude_dir: Option<PathBuf>,
    /// Codex's home [default: $CODEX_HOME, else ~/.codex].
    #[arg(long, value_name = "DIR")]
    codex_home: Option<PathBuf>,
    /// OpenCode's session database [default: $OPENCODE_DB, else
    /// $XDG_DATA_HOME/opencode/opencode.db, else ~/.local/share/opencode/opencode.db].
    #[arg(long, value_name = "FILE")]
    opencode_db: Option<PathBuf>,
    /// The agent type of the imported conversations: public or admin.
    #[arg(long, value_parser = parse_agent_type, default_value = "public")]
    agent_type: AgentType,
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct SearchArgs {
    /// Words to look for.
    #[arg(required = true, num_args = 1..)]
    query: Vec<String>,
    /// Most conversations to show.
    #[arg(long, default_value_t = 10)]
    limit: usize,
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// Most conversations to show.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ShowArgs {
    /// Conversation id (from list or search), e.g. c-0123456789abcdef.
    id: String,
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct CandidatesArgs {
    /// empty (no messages) or single-assistant (exactly one message, from the assistant).
    /// (There is deliberately no filter on content such as "no real user input".)
    #[arg(long, value_parser = parse_filter)]
    filter: Filter,
    /// Only conversations of this agent type: public or admin.
    #[arg(long, value_parser = parse_agent_type)]
    agent_type: Option<AgentType>,
    /// Most candidates to return and sign (at most 500).
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// The token can be looked at but never deletes.
    #[arg(long)]
    dry_run: bool,
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct DeleteArgs {
    /// The token `pith history candidates` printed.
    #[arg(long)]
    token: String,
    /// Only these of the token's conversations (never others).
    ids: Vec<String>,
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct TrashArgs {
    #[command(subcommand)]
    command: TrashCommand,
}

#[derive(Debug, clap::Subcommand)]
enum TrashCommand {
    /// List trashed conversations, newest first.
    List(ListArgs),
    /// Take conversations out of the trash.
    Restore(RestoreArgs),
    /// Delete for good the conversations trashed longer ago than --older-than, with their
    /// messages and their text in the search index. Asks first, unless --yes.
    Purge(PurgeArgs),
}

#[derive(Debug, clap::Args)]
struct RestoreArgs {
    /// Conversation ids.
    #[arg(required = true, num_args = 1..)]
    ids: Vec<String>,
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct PurgeArgs {
    /// Only conversations trashed at least this long ago, e.g. 30d, 12h.
    #[arg(long, value_name = "AGE", value_parser = crate::duration::parse)]
    older_than: std::time::Duration,
    /// Do not ask (for scripts).
    #[arg(long)]
    yes: bool,
    /// Print JSON instead of text (for scripts).
    #[arg(long)]
    json: bool,
}

fn parse_filter(s: &str) -> Result<Filter, String> {
    s.parse().map_err(|e| format!("{e}"))
}

fn parse_agent_type(s: &str) -> Result<AgentType, String> {
    s.parse().map_err(|e| format!("{e}"))
}

pub fn run(args: Args, config: &Config) -> anyhow::Result<()> {
    let mut settings = HistorySettings::resolve(config)?;
    if args.local {
        settings.team = None;
    }
    match args.command {
        HistoryCommand::Import(a) => import_sessions(&settings, a),
        HistoryCommand::Search(a) => search(&settings, a),
        HistoryCommand::List(a) => list(&settings, a, false),
        HistoryCommand::Show(a) => show(&settings, a),
        HistoryCommand::Candidates(a) => candidates(&settings, a),
        HistoryCommand::Delete(a) => delete(&settings, a),
        HistoryCommand::Trash(t) => match t.command {
            TrashCommand::List(a) => list(&settings, a, true),
            TrashCommand::Restore(a) => restore(&settings, a),
            TrashCommand::Purge(a) => purge(&settings, a),
        },
    }
}

/// The history for a command that writes: the team's in team mode, else the local file
/// (creating it, 0600).
fn open(settings: &HistorySettings) -> anyhow::Result<History> {
    match &settings.team {
        Some(url) => open_team(url),
        None => open_local(settings),
    }
}

fn open_local(settings: &HistorySettings) -> anyhow::Result<History> {
    History::open(&settings.path)
        .with_context(|| format!("cannot open the history {}", settings.path.display()))
}

fn open_team(url: &pith_store::postgres::StoreUrl) -> anyhow::Result<History> {
    History::open_team(url).with_context(|| {
        format!(
            "cannot reach the team history at {url}; `pith history --local ...` works on this machine's file"
        )
    })
}

/// The history for a command that only reads; `None` when nothing was recorded yet.
fn open_to_read(settings: &HistorySettings) -> anyhow::Result<Option<History>> {
    if let Some(url) = &settings.team {
        return open_team(url).map(Some);
    }
    if !settings.path.exists() {
        eprintln!(
            "pith: no history at {} yet: conversations are recorded as they pass through \
             `pith proxy`; `pith history import` reads Claude Code's and Codex's session files and OpenCode's sessions",
            settings.path.display()
        );
        return Ok(None);
    }
    History::open_read_only(&settings.path)
        .map(Some)
        .with_context(|| format!("cannot read the history {}", settings.path.display()))
}

fn import_sessions(settings: &HistorySettings, a: ImportArgs) -> anyhow::Result<()> {
    let mut places = crate::client_files::places_without_project();
    if let Some(dir) = a.claude_dir {
        places.claude_config_dir = Some(dir);
    }
    if let Some(dir) = a.codex_home {
        places.codex_home = Some(dir);
    }
    if let Some(db) = a.opencode_db {
        places.opencode_db = Some(db);
    }
    let dirs: Vec<(Client, PathBuf)> = Client::ALL
        .into_iter()
        .filter_map(|c| c.session_files_dir(&places).map(|d| (c, d)))
        .collect();
    let files = import::session_files(&dirs);
    // Into this machine's file always: in team mode it is the outbox, sent on below.
    let mut into = Importing {
        history: open_local(settings)?,
        account: &settings.account,
        agent_type: a.agent_type,
        counts: ImportCounts::default(),
    };
    into.session_files(&files)?;
    // OpenCode keeps its sessions in a database, each session one conversation.
    let opencode_sessions =
        match pith_clients::opencode::database(&places).filter(|db| db.is_file()) {
            Some(db) => into.opencode(&db)?,
            None => 0,
        };
    let shipped = settings
        .team
        .as_ref()
        .map(|url| ship_now(&mut into.history, url));
    let by_source = |s: Client| files.iter().filter(|(x, _)| *x == s).count();
    let read = ImportRead {
        files: files.len(),
        claude_code_files: by_source(Client::ClaudeCode),
        codex_files: by_source(Client::Codex),
        opencode_sessions,
    };
    print_import(&read, &into.counts, shipped, settings, a.json);
    Ok(())
}

/// What an import read.
struct ImportRead {
    files: usize,
    claude_code_files: usize,
    codex_files: usize,
    opencode_sessions: usize,
}

/// What an import did, as JSON or in words, with what went to the team's history.
fn print_import(
    read: &ImportRead,
    counts: &ImportCounts,
    shipped: Option<anyhow::Result<pith_store::history::ship::ShipReport>>,
    settings: &HistorySettings,
    json: bool,
) {
    let ImportCounts {
        created,
        added,
        failed,
    } = *counts;
    let total = read.files;
    if json {
        let mut out = json!({
            "files": total,
            "claudeCodeFiles": read.claude_code_files,
            "codexFiles": read.codex_files,
            "opencodeSessions": read.opencode_sessions,
            "conversationsCreated": created,
            "messagesAdded": added,
            "unreadable": failed,
        });
        match shipped {
            Some(Ok(report)) => out["teamShipped"] = json!(report),
            Some(Err(e)) => out["teamShipError"] = json!(format!("{e:#}")),
            None => {}
        }
        println!("{out}");
        return;
    }
    println!(
        "read {total} session files ({} Claude Code, {} Codex) and {} OpenCode sessions: {created} new conversations, {added} new messages{}",
        read.claude_code_files,
        read.codex_files,
        read.opencode_sessions,
        if failed > 0 {
            format!(", {failed} unreadable")
        } else {
            String::new()
        }
    );
    match (shipped, &settings.team) {
        (Some(Ok(report)), Some(url)) => println!(
            "sent {} messages to the team history at {url} ({} new to it)",
            report.sent, report.added
        ),
        (Some(Err(e)), _) => eprintln!(
            "pith: {e:#}; the messages wait in {} and go out with the next import or with `pith proxy` running",
            settings.path.display()
        ),
        _ => {}
    }
}

/// What an import did: conversations created, messages added, sources it could not read.
#[derive(Default, Clone, Copy)]
struct ImportCounts {
    created: usize,
    added: usize,
    failed: usize,
}

/// An import under way into this machine's history.
struct Importing<'a> {
    history: History,
    account: &'a str,
    agent_type: AgentType,
    counts: ImportCounts,
}

impl Importing<'_> {
    fn one(&mut self, imported: &import::Imported) -> Result<(), pith_store::StoreError> {
        let outcome = self
            .history
            .import(self.account, self.agent_type, imported)?;
        self.counts.created += usize::from(outcome.created);
        self.counts.added += outcome.added;
        Ok(())
    }

    /// Claude Code's and Codex's session files; an unreadable one is skipped and counted.
    fn session_files(&mut self, files: &[(Client, PathBuf)]) -> anyhow::Result<()> {
        let total = files.len();
        for (i, (source, path)) in files.iter().enumerate() {
            let imported = match import::read(*source, path) {
                Ok(imported) => imported,
                Err(e) => {
                    eprintln!(
                        "pith: skipped: {}",
                        text(&format!("{:#}", anyhow::Error::new(e)))
                    );
                    self.counts.failed += 1;
                    continue;
                }
            };
            self.one(&imported)
                .with_context(|| format!("cannot import {}", path.display()))?;
            if total > 100 && (i + 1) % 100 == 0 {
                eprintln!("pith: imported {} of {total} session files", i + 1);
            }
        }
        Ok(())
    }

    /// OpenCode's database, each session imported as it is read (one session at a time in
    /// memory); the sessions it read.
    fn opencode(&mut self, db: &Path) -> anyhow::Result<usize> {
        let mut failure = None;
        let read = pith_history::opencode::read(db, |imported| match self.one(&imported) {
            Ok(()) => true,
            Err(e) => {
                failure = Some(anyhow::Error::new(e).context(format!(
                    "cannot import OpenCode's session {}",
                    imported.session_id
                )));
                false
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        match read {
            Ok(summary) => {
                if summary.left_out > 0 {
                    eprintln!(
                        "pith: left out {} OpenCode messages or parts over {} MiB (or past {} MiB \
                         in one session): the history keeps at most 16 KiB of a message",
                        summary.left_out,
                        pith_history::opencode::MAX_PART_BYTES >> 20,
                        pith_history::opencode::MAX_SESSION_BYTES >> 20
                    );
                }
                Ok(summary.sessions)
            }
            Err(e) => {
                eprintln!(
                    "pith: skipped: {}",
                    text(&format!("{:#}", anyhow::Error::new(e)))
                );
                self.counts.failed += 1;
                Ok(0)
            }
        }
    }
}

/// Send everything this machine's history has not shipped to the team's.
fn ship_now(
    local: &mut History,
    url: &pith_store::postgres::StoreUrl,
) -> anyhow::Result<pith_store::history::ship::ShipReport> {
    let mut team = open_team(url)?;
    local
        .ship_all(&mut team)
        .with_context(|| format!("cannot send the history to {url}"))
}

fn search(settings: &HistorySettings, a: SearchArgs) -> anyhow::Result<()> {
    let query = a.query.join(" ");
    let hits = match open_to_read(settings)? {
        Some(h) => h.search(&settings.account, &query, a.limit.clamp(1, 100))?,
        None => Vec::new(),
    };
    if a.json {
        println!("{}", json!({ "query": query, "hits": hits }));
        return Ok(());
    }
    if hits.is_empty() {
        println!("no conversation matches {}", text(&format!("{query:?}")));
    }
    for hit in hits {
        println!(
            "{}  {}  {}  score {:.2}\n    {} #{}: {}",
            hit.id,
            shown(&hit.client),
            shown(&hit.session_id),
            hit.score,
            shown(&hit.role),
            hit.position,
            text(&hit.snippet)
        );
    }
    Ok(())
}

/// A name that came from a client (a session id, a client name), as a terminal shows it:
/// escaped, and at most 80 characters.
fn shown(name: &str) -> String {
    pith_brain::render::one_line(name, 80)
}

/// Message text as a terminal shows it: escaped (control characters, bidirectional overrides)
/// on one line, at most 400 characters.
fn text(message: &str) -> String {
    pith_brain::render::one_line(message, 400)
}

fn conversation_line(c: &Conversation) -> String {
    format!(
        "{}  {}  {}  {}  {} messages ({} by a person, {} assistant){}  {}",
        c.id,
        c.agent_type,
        shown(&c.client),
        shown(&c.session_id),
        c.messages,
        c.real_user_messages,
        c.assistant_messages,
        c.trashed_ms
            .map(|t| format!(", trashed at {t}"))
            .unwrap_or_default(),
        text(c.first_user_preview.as_deref().unwrap_or(""))
    )
}

fn list(settings: &HistorySettings, a: ListArgs, trashed: bool) -> anyhow::Result<()> {
    let conversations = match open_to_read(settings)? {
        Some(h) => h.list(&settings.account, trashed, a.limit)?,
        None => Vec::new(),
    };
    if a.json {
        println!("{}", json!({ "conversations": conversations }));
        return Ok(());
    }
    if conversations.is_empty() {
        println!(
            "{}",
            if a.limit == 0 {
                "--limit 0: no conversations listed"
            } else if trashed {
                "the trash is empty"
            } else {
                "no conversations"
            }
        );
    }
    for c in &conversations {
        println!("{}", conversation_line(c));
    }
    Ok(())
}

fn show(settings: &HistorySettings, a: ShowArgs) -> anyhow::Result<()> {
    let found = match open_to_read(settings)? {
        Some(h) => h.show(&settings.account, a.id.trim())?,
        None => None,
    };
    let Some((conversation, messages)) = found else {
        anyhow::bail!(
            "no conversation {} in this history; `pith history list` or `pith history search` give ids",
            a.id.trim()
        );
    };
    if a.json {
        println!(
            "{}",
            json!({ "conversation": conversation, "messages": messages })
        );
        return Ok(());
    }
    println!("{}", conversation_line(&conversation));
    for m in messages {
        let who = if m.real_user {
            "user (typed)"
        } else {
            m.role.as_str()
        };
        println!("  #{} {}: {}", m.position, shown(who), text(&m.preview));
    }
    Ok(())
}

fn candidates(settings: &HistorySettings, a: CandidatesArgs) -> anyhow::Result<()> {
    let history = open(settings)?;
    let key = settings.token_key()?;
    let found = history.find_candidates(
        &key,
        &settings.account,
        a.filter,
        a.agent_type,
        a.limit,
        a.dry_run,
        now_ms(),
        settings.token_ttl_ms,
    )?;
    if a.json {
        println!("{}", serde_json::to_string(&found)?);
        return Ok(());
    }
    println!(
        "{} conversations match filter {}{}; {} shown{}",
        found.matched,
        found.filter,
        found
            .agent_type
            .map(|t| format!(" (agent type {t})"))
            .unwrap_or_default(),
        found.sampled,
        if found.dry_run { " (dry run)" } else { "" }
    );
    for c in &found.items {
        println!(
            "  {}  {}  {} assistant, {} typed  {}",
            c.id,
            shown(&c.session_id),
            c.assistant_msg_count,
            c.real_user_msg_count,
            text(c.first_user_msg_preview.as_deref().unwrap_or(""))
        );
    }
    if found.dry_run {
        println!("dry-run token (never deletes): {}", found.filter_token);
    } else if found.sampled > 0 {
        println!(
            "to trash them: pith history delete --token {}",
            found.filter_token
        );
    }
    Ok(())
}

fn print_changed(done: &Changed, verb: &str, as_json: bool) {
    if as_json {
        println!("{}", json!({ verb: done.changed, "skipped": done.skipped }));
        return;
    }
    println!("{verb}: {}", done.changed.len());
    for id in &done.changed {
        println!("  {}", shown(id));
    }
    for s in &done.skipped {
        println!("  skipped {}: {}", shown(&s.id), s.reason);
    }
}

fn delete(settings: &HistorySettings, a: DeleteArgs) -> anyhow::Result<()> {
    let mut history = open(settings)?;
    let key = settings.token_key()?;
    let ids = (!a.ids.is_empty()).then_some(a.ids.as_slice());
    let done = history
        .delete(&key, &settings.account, &a.token, ids, now_ms())
        .context("nothing was deleted")?;
    print_changed(&done, "trashed", a.json);
    Ok(())
}

fn restore(settings: &HistorySettings, a: RestoreArgs) -> anyhow::Result<()> {
    let mut history = open(settings)?;
    let done = history.restore(&settings.account, &a.ids)?;
    // Nothing restored is a failure, with each reason (it said "restored: 0" and exited 0).
    anyhow::ensure!(
        !done.changed.is_empty(),
        "nothing restored: {} (`pith history trash list` shows what is in the trash)",
        done.skipped
            .iter()
            .map(|s| format!("{}: {}", shown(&s.id), s.reason))
            .collect::<Vec<_>>()
            .join("; ")
    );
    print_changed(&done, "restored", a.json);
    Ok(())
}

fn purge(settings: &HistorySettings, a: PurgeArgs) -> anyhow::Result<()> {
    let mut history = open(settings)?;
    let age_ms = i64::try_from(a.older_than.as_millis()).unwrap_or(i64::MAX);
    let cutoff = now_ms().saturating_sub(age_ms);
    let doomed = history.purgeable(&settings.account, cutoff)?;
    let messages: u64 = doomed.iter().map(|c| c.messages).sum();
    if doomed.is_empty() {
        if a.json {
            println!(
                "{}",
                json!({ "conversations": 0, "messages": 0, "indexRows": 0 })
            );
        } else {
            println!("nothing in the trash is older than that");
        }
        return Ok(());
    }
    if !a.yes {
        anyhow::ensure!(
            std::io::stdin().is_terminal(),
            "purge deletes {} conversations ({messages} messages) for good; run it in a terminal to confirm, or pass --yes",
            doomed.len()
        );
        eprint!(
            "Delete {} trashed conversations ({messages} messages) for good? This cannot be undone. Type yes: ",
            doomed.len()
        );
        std::io::stderr().flush().ok();
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if answer.trim() != "yes" {
            eprintln!("pith: nothing was deleted");
            return Ok(());
        }
    }
    let purged = history.purge(&settings.account, cutoff)?;
    if a.json {
        println!(
            "{}",
            json!({
                "conversations": purged.conversations,
                "messages": purged.messages,
                "indexRows": purged.index_rows,
            })
        );
    } else {
        println!(
            "deleted {} conversations, {} messages and {} search index rows",
            purged.conversations, purged.messages, purged.index_rows
        );
    }
    Ok(())
}
