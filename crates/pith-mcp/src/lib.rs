//! The only crate that knows MCP: `pith mcp`, a stdio server (rmcp) giving agents the
//! workspace (search, optionally ranked by a local model or lexically, and file reads), the
//! project memory and the conversation history.
//!
//! Tool descriptions are kept to a line: clients resend them on every turn. Failures the model
//! can act on (a bad path, an unknown id) come back as tool results with `isError`, in words
//! that name the next step; stdout carries protocol only (logs go through `tracing`, which the
//! binary points at stderr).
//!
//! The tools: over the workspace `search_workspace` and `read_workspace_file` ([`files`]);
//! over the brain `search_memory`, `get_memory`, `save_memory`, `verify_memory`,
//! `forget_memory`; over the history ([`history`]) `search_history`, `tool_output` (an output
//! the proxy shortened, whole),
//! `memory_find_candidates`, `memory_delete`, `memory_restore`, which act only for the
//! server's account. Ranking is on only when the configuration asks for it
//! (`[mcp] local_prefilter`, or `PITH_LOCAL_PREFILTER=1`), and fails open; a ranker is warmed
//! up when the server starts.

pub mod files;
pub mod history;
mod stdio;

use std::sync::{Arc, Mutex, PoisonError};

use pith_brain::origin::{Origin, Origins};
use pith_brain::render::{self, Hints};
use pith_brain::{Brain, BrainError, EvidenceSpec, Kind, NewMemory, Workspace};
use pith_prefilter::{PrefilterConfig, PrefilterRanker};
use pith_search::{RankPolicy, Ranker, SearchRequest};
use pith_store::brain::{open_existing_workspace_brain, open_workspace_brain};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;

/// What `pith mcp` serves.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The workspace whose files and memory the tools serve.
    pub workspace: Workspace,
    /// Local-model ranking of broad workspace searches (off unless `enabled`).
    pub prefilter: PrefilterConfig,
    /// The conversation history the history tools serve.
    pub history: history::HistoryOptions,
    /// The records of the brains this user's pith made; `None`: no brain is known as theirs,
    /// so every note says it quotes the project's file.
    pub origins: Option<Origins>,
}

/// The server could not start or the transport failed.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The handshake with the client failed.
    #[error("MCP server failed to start: {0}")]
    Start(String),
    /// The session ended with a transport error.
    #[error("MCP server stopped with an error: {0}")]
    Run(String),
}

/// Serve MCP on stdin/stdout until the client closes stdin.
pub async fn serve_stdio(options: ServerOptions) -> Result<(), McpError> {
    let server = PithServer::new(options);
    // A cold model takes longer to load than a ranking may wait: load it now, in the
    // background, so the session's first broad search finds it ready (or is told it is not).
    if let Some(ranker) = &server.ranker {
        ranker.warm_up();
    }
    tracing::info!(
        root = %server.ws.root().display(),
        prefilter = server.ranker.as_ref().map(|r| r.name()),
        "pith mcp serving on stdio"
    );
    // The server talks to two in-process pipes; the pumps bound what one message may be
    // and answer one over the bound (`stdio.rs`).
    let (server_in, pump_in) = tokio::io::duplex(1 << 20);
    let (server_out, pump_out) = tokio::io::duplex(1 << 20);
    let (errors, refusals) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(stdio::pump_in(tokio::io::stdin(), pump_in, errors));
    let out = tokio::spawn(stdio::pump_out(pump_out, tokio::io::stdout(), refusals));
    let running = server
        .serve((server_in, server_out))
        .await
        .map_err(|e| McpError::Start(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| McpError::Run(e.to_string()))?;
    // The server's end of the output pipe is gone: what it wrote is on stdout once this ends.
    let _ = out.await;
    Ok(())
}

const HINTS: Hints = Hints {
    get: "get_memory",
    more: "raise limit (max 50)",
    accept: "verify_memory with accept=true",
    forget: "forget_memory",
    restore: "the user can run `pith memory restore <id>`",
};

/// The brain is opened on first use, so starting `pith mcp` in a workspace creates nothing.
type SharedBrain = Arc<BrainSlot>;

/// The workspace's brain once opened, and where to look up (and record) whose it is.
struct BrainSlot {
    brain: Mutex<Option<Brain>>,
    origins: Option<Origins>,
}

/// The MCP handler: the tools over one workspace and its brain.
#[derive(Clone)]
pub struct PithServer {
    ws: Workspace,
    brain: SharedBrain,
    /// Set only when the user opted in to ranking (a local model, or the lexical ranking).
    ranker: Option<PrefilterRanker>,
    rank_policy: RankPolicy,
    history: Arc<history::HistoryOptions>,
    tool_router: ToolRouter<Self>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum KindArg {
    Note,
    Fix,
    Failed,
    Decision,
}

impl From<KindArg> for Kind {
    fn from(k: KindArg) -> Kind {
        match k {
            KindArg::Note => Kind::Note,
            KindArg::Fix => Kind::Fix,
            KindArg::Failed => Kind::Failed,
            KindArg::Decision => Kind::Decision,
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct SearchWorkspaceArgs {
    /// Regex (Rust syntax), or text with literal=true.
    pattern: String,
    literal: Option<bool>,
    case_insensitive: Option<bool>,
    /// e.g. "*.rs", "!tests/**".
    globs: Option<Vec<String>>,
    /// Subdirectory or file to search.
    path: Option<String>,
    /// Page size (default 50).
    max_results: Option<u32>,
    /// Matches to skip (next page).
    offset: Option<u32>,
    /// Every match in path order, unranked.
    all: Option<bool>,
    /// What you are looking for, in words (for ranking).
    intent: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ReadFileArgs {
    /// Path relative to the workspace root.
    path: String,
    /// First line (1-based).
    start_line: Option<u32>,
    /// Last line (inclusive).
    end_line: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct SearchMemoryArgs {
    /// Words to look for.
    query: String,
    kind: Option<KindArg>,
    /// Default 5.
    limit: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct IdArgs {
    /// Memory id, e.g. m-7f3a.
    id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct SaveMemoryArgs {
    /// fix, failed (attempt that did not work), decision or note.
    kind: KindArg,
    /// One line.
    title: String,
    body: Option<String>,
    tags: Option<Vec<String>>,
    /// For a fix: the error message it fixes.
    headline: Option<String>,
    /// Files it depends on: "path" or "path:start-end".
    evidence: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct VerifyMemoryArgs {
    /// Memory id.
    id: String,
    /// Memory still holds: re-record the current files as evidence.
    accept: Option<bool>,
}

/// Default number of memories a search returns to an agent.
const DEFAULT_MEMORY_LIMIT: usize = 5;

#[tool_router]
impl PithServer {
    /// A server for `options`; the brain is opened on first use, so this creates nothing.
    pub fn new(options: ServerOptions) -> PithServer {
        PithServer {
            ws: options.workspace,
            brain: Arc::new(BrainSlot {
                brain: Mutex::new(None),
                origins: options.origins,
            }),
            ranker: PrefilterRanker::from_config(&options.prefilter),
            rank_policy: options.prefilter.policy,
            history: Arc::new(options.history),
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Search workspace files: regex or literal, globs, .gitignore-aware, paged."
    )]
    async fn search_workspace(
        &self,
        Parameters(a): Parameters<SearchWorkspaceArgs>,
    ) -> Result<String, String> {
        let defaults = SearchRequest::default();
        let request = SearchRequest {
            pattern: a.pattern,
            literal: a.literal.unwrap_or(false),
            case_insensitive: a.case_insensitive.unwrap_or(false),
            globs: a.globs.unwrap_or_default(),
            path: a.path,
            max_results: a
                .max_results
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(defaults.max_results),
            offset: a.offset.and_then(|n| usize::try_from(n).ok()).unwrap_or(0),
            all: a.all.unwrap_or(false),
            intent: a.intent,
        };
        let root = self.ws.root().to_path_buf();
        let (ranker, policy) = (self.ranker.clone(), self.rank_policy);
        blocking(move || {
            let ranker = ranker.as_ref().map(|r| r as &dyn Ranker);
            pith_search::search_workspace(&root, &request, ranker, policy)
                .map(|report| report.render())
                .map_err(|e| render::error_chain(&e))
        })
        .await
    }

    #[tool(description = "Read a workspace file, optionally a line range.")]
    async fn read_workspace_file(
        &self,
        Parameters(a): Parameters<ReadFileArgs>,
    ) -> Result<String, String> {
        let (ws, brain) = (self.ws.clone(), self.brain.clone());
        blocking(move || {
            let read = files::read(&ws, &a.path, a.start_line, a.end_line)?;
            // A pointer must never cost the read: a brain that cannot be opened adds nothing.
            let (pointers, origin) = with_brain(&brain, &ws, false, |b| {
                Ok((b.pointers(&read.rel)?, b.origin()))
            })
            .unwrap_or_else(|e| {
                tracing::warn!(
                    "memory pointers for {}: {}",
                    read.rel,
                    render::error_chain(&e)
                );
                None
            })
            .unwrap_or((Vec::new(), Origin::Own));
            let mut text = read.text;
            if let Some(line) = render::pointer_line(&pointers, &HINTS) {
                let line = render::from_origin(line, origin);
                text.push_str(&line);
                text.push('\n');
            }
            Ok(text)
        })
        .await
    }

    #[tool(description = "Search project memory: past fixes, failed attempts, decisions, notes.")]
    async fn search_memory(
        &self,
        Parameters(a): Parameters<SearchMemoryArgs>,
    ) -> Result<String, String> {
        let limit = a
            .limit
            .and_then(|l| usize::try_from(l).ok())
            .unwrap_or(DEFAULT_MEMORY_LIMIT);
        let empty = Ok(format!(
            "no memories match \"{}\" (none saved in this workspace yet)\n",
            a.query.trim()
        ));
        self.brain_tool(empty, move |b| {
            let found = b.search(&a.query, a.kind.map(Kind::from), limit)?;
            Ok(render::search(&found, &HINTS))
        })
        .await
    }

    #[tool(description = "Get a memory in full, with the status of its evidence.")]
    async fn get_memory(&self, Parameters(a): Parameters<IdArgs>) -> Result<String, String> {
        self.brain_tool(no_memory(&a.id), move |b| {
            Ok(render::memory(&b.get(&a.id)?))
        })
        .await
    }

    #[tool(
        description = "Save a memory (fix, failed attempt, decision, note) tied to evidence files."
    )]
    async fn save_memory(
        &self,
        Parameters(a): Parameters<SaveMemoryArgs>,
    ) -> Result<String, String> {
        let evidence = a
            .evidence
            .unwrap_or_default()
            .iter()
            .map(|s| EvidenceSpec::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        let new = NewMemory {
            kind: a.kind.into(),
            title: a.title,
            body: a.body.unwrap_or_default(),
            tags: a.tags.unwrap_or_default(),
            headline: a.headline,
            evidence,
        };
        self.brain_tool_creating(move |b| Ok(render::saved_with_evidence(&b.save(new)?)))
            .await
    }

    #[tool(description = "Recheck a memory's evidence files; report what changed.")]
    async fn verify_memory(
        &self,
        Parameters(a): Parameters<VerifyMemoryArgs>,
    ) -> Result<String, String> {
        self.brain_tool(no_memory(&a.id), move |b| {
            let v = b.verify(&a.id, a.accept.unwrap_or(false))?;
            Ok(render::verification(&v, &HINTS))
        })
        .await
    }

    #[tool(description = "Move a memory to the trash (restorable).")]
    async fn forget_memory(&self, Parameters(a): Parameters<IdArgs>) -> Result<String, String> {
        self.brain_tool(no_memory(&a.id), move |b| {
            Ok(render::trashed(&b.forget(&a.id)?, &HINTS))
        })
        .await
    }

    #[tool(
        description = "Search past conversations (BM25); returns conversation ids with snippets."
    )]
    async fn search_history(
        &self,
        Parameters(a): Parameters<history::SearchHistoryArgs>,
    ) -> Result<String, String> {
        let options = self.history.clone();
        blocking(move || history::search(&options, a)).await
    }

    #[tool(
        description = "The whole output of a tool call pith shortened, by the call id its first line names."
    )]
    async fn tool_output(
        &self,
        Parameters(a): Parameters<history::ToolOutputArgs>,
    ) -> Result<String, String> {
        let options = self.history.clone();
        blocking(move || history::tool_output(&options, a)).await
    }

    #[tool(
        description = "Select conversations by a fixed filter; returns them and a token for memory_delete."
    )]
    async fn memory_find_candidates(
        &self,
        Parameters(a): Parameters<history::FindCandidatesArgs>,
    ) -> Result<String, String> {
        let options = self.history.clone();
        blocking(move || history::find_candidates(&options, a)).await
    }

    #[tool(
        description = "Trash the conversations a filterToken selected that still match its filter (restorable)."
    )]
    async fn memory_delete(
        &self,
        Parameters(a): Parameters<history::DeleteArgs>,
    ) -> Result<String, String> {
        let options = self.history.clone();
        blocking(move || history::delete(&options, a)).await
    }

    #[tool(description = "Take trashed conversations out of the trash, by id.")]
    async fn memory_restore(
        &self,
        Parameters(a): Parameters<history::RestoreArgs>,
    ) -> Result<String, String> {
        let options = self.history.clone();
        blocking(move || history::restore(&options, a)).await
    }

    /// Run a brain operation off the async threads on the workspace's brain; a workspace
    /// without one gets `empty` and no `.pith/` is created (only saving creates it).
    async fn brain_tool(
        &self,
        empty: Result<String, String>,
        f: impl FnOnce(&mut Brain) -> Result<String, BrainError> + Send + 'static,
    ) -> Result<String, String> {
        let (ws, brain) = (self.ws.clone(), self.brain.clone());
        blocking(move || {
            with_brain(&brain, &ws, false, f)
                .map_err(explain)?
                .map_or(empty, Ok)
        })
        .await
    }

    /// Like [`PithServer::brain_tool`], creating `.pith/brain.db` when the workspace has none.
    async fn brain_tool_creating(
        &self,
        f: impl FnOnce(&mut Brain) -> Result<String, BrainError> + Send + 'static,
    ) -> Result<String, String> {
        let (ws, brain) = (self.ws.clone(), self.brain.clone());
        blocking(move || {
            with_brain(&brain, &ws, true, f)
                .map_err(explain)?
                .ok_or_else(|| "the project memory could not be opened".to_owned())
        })
        .await
    }
}

#[tool_handler(
    router = self.tool_router,
    name = "pith",
    instructions = "Workspace search, project memory and conversation history. Before fixing an error or retrying an approach, search_memory; after a fix or a failed attempt, save_memory with evidence files."
)]
impl ServerHandler for PithServer {}

/// Where a just-opened brain came from: one this open made is recorded as the user's (a record
/// that cannot be written leaves it unknown, so its notes say where they come from).
fn brain_origin(origins: Option<&Origins>, brain: &Brain, ws: &Workspace) -> Origin {
    let Some(origins) = origins else {
        return Origin::Project;
    };
    if brain.created()
        && let Err(e) = origins.remember(ws.root())
    {
        tracing::warn!("cannot record the new brain as this user's: {e}");
    }
    origins.of(ws.root())
}

/// Run `f` on the brain, opening it first (`create`: make `.pith/brain.db` if missing;
/// otherwise a workspace without a brain yields `None`).
fn with_brain<T>(
    brain: &SharedBrain,
    ws: &Workspace,
    create: bool,
    f: impl FnOnce(&mut Brain) -> Result<T, BrainError>,
) -> Result<Option<T>, BrainError> {
    let mut guard = brain.brain.lock().unwrap_or_else(PoisonError::into_inner);
    if guard.is_none() {
        let mut opened = if create {
            Some(open_workspace_brain(ws.clone())?)
        } else {
            open_existing_workspace_brain(ws.clone())?
        };
        if let Some(b) = &mut opened {
            b.set_origin(brain_origin(brain.origins.as_ref(), b, ws));
        }
        *guard = opened;
    }
    match guard.as_mut() {
        Some(b) => f(b).map(Some),
        None => Ok(None),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(format!("internal error: {e}")))
}

/// The reply for an id in a workspace that has no memories at all.
fn no_memory(id: &str) -> Result<String, String> {
    Err(explain(BrainError::NotFound {
        id: id.trim().to_owned(),
    }))
}

/// Brain errors in the agent's terms, naming the tool that helps.
fn explain(e: BrainError) -> String {
    match e {
        BrainError::NotFound { id } => format!("no memory {id}; search_memory finds ids"),
        BrainError::Trashed { id } => {
            format!("memory {id} is in the trash; the user can run `pith memory restore {id}`")
        }
        other => {
            let text = render::error_chain(&other);
            tracing::debug!("brain tool error: {text}");
            text
        }
    }
}
