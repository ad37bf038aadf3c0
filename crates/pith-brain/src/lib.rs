//! The project memory ("the brain"): what was fixed and how, what was tried and failed,
//! decisions and notes, each tied to the workspace files it depends on so that it can tell when
//! it has gone stale.
//!
//! [`Brain`] holds the rules (ids, validation, evidence, staleness, when hit counters move) and
//! talks to storage only through [`BrainStore`], a trait this crate defines and backends
//! implement (`pith-store`'s SQLite file today), so a shared PostgreSQL backend can replace the
//! per-workspace file without touching the rules. The types a memory is made of are in
//! [`model`]; text for people and agents comes from [`render`], shared by the CLI and the MCP
//! server.
//!
//! Rules the brain keeps whatever the backend: a memory is credited only when `search` or
//! `get` returns it to a caller (pointers, the one-line note on a file read, never move a
//! counter); forget moves to the trash and restore brings it back, nothing is deleted; a
//! memory is bounded (`MAX_*`: a save past a limit is `Invalid`, naming the limit and the next
//! step), and so is what a search returns, memories saved before the limits included. Reading
//! never creates `.pith/`; the first save does (0700, with a `.gitignore` of `*`). Tests that
//! need a real store are integration tests (`tests/`, dev-depending on `pith-store`): a unit
//! test in `src/` would see a second copy of the types.

mod chain;
pub mod evidence;
mod id;
pub mod model;
pub mod origin;
pub mod recall;
pub mod render;
pub mod store;
pub mod workspace;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

pub use evidence::{CheckMode, EvidenceCheck, EvidenceSpec, EvidenceState, Status};
pub use model::{Evidence, Freshness, Kind, LastCheck, LineRange, Memory, MemoryRef};
pub use store::{BrainStore, ListFilter, Matched, SEARCH_CAP, StoreError};
use store::{HeadlineQuery, Inserted, SearchQuery};
pub use workspace::{PathError, Workspace, WorkspacePath};

use evidence::EvidenceError;

/// The brain's directory inside a workspace.
pub const BRAIN_DIR: &str = ".pith";
/// The SQLite file inside [`BRAIN_DIR`].
pub const BRAIN_FILE: &str = "brain.db";
/// Most memories one search returns.
pub const MAX_SEARCH_LIMIT: usize = 50;
// Limits on what one memory holds. A memory is a note of what was learned (the fix, why an
// attempt failed, what was decided) that cites the files it is about as evidence; real ones are
// a title of under a hundred characters and a body of a few hundred words. Every search hands
// memories back into some agent's context, so each limit is set well above any real memory and
// far below a pasted file or log: hitting one means the text belongs in a file, cited as
// evidence.

/// Longest title accepted, in characters: one line naming the memory (two lines of a wide
/// terminal).
pub const MAX_TITLE_CHARS: usize = 200;
/// Largest body accepted, in bytes (16 KiB, about 2,500 words: a long design note; the longest
/// real memories are a few KiB).
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// Longest error headline accepted, in characters: the one line of an error a fix is for
/// (compiler errors naming long types run to a few hundred).
pub const MAX_HEADLINE_CHARS: usize = 1000;
/// Most tags on one memory (after normalization).
pub const MAX_TAGS: usize = 32;
/// Longest tag accepted, in characters (after normalization).
pub const MAX_TAG_CHARS: usize = 64;
/// Most evidence on one memory: each item is a file hashed on every check, and a brain that
/// came with a project can claim any number (only this many of a memory's are read).
pub const MAX_EVIDENCE: usize = 32;
/// Longest search snippet, in characters: a few words of the body around the match.
pub const MAX_SNIPPET_CHARS: usize = 300;

/// A failure the caller can act on; messages name the memory or the input at fault.
#[derive(Debug, thiserror::Error)]
pub enum BrainError {
    /// The backend failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No memory has this id, trashed or not.
    #[error("no memory {id}")]
    NotFound {
        /// The id asked for.
        id: String,
    },
    /// The memory exists but is in the trash, so it cannot be used until restored.
    #[error("memory {id} is in the trash")]
    Trashed {
        /// The trashed memory's id.
        id: String,
    },
    /// Restore was asked for a memory that is not in the trash.
    #[error("memory {id} is not in the trash")]
    NotTrashed {
        /// The memory's id.
        id: String,
    },
    /// The request cannot be carried out as given (an empty or overlong title, a line break
    /// where one line is wanted, a query with no words); the message says which.
    #[error("{0}")]
    Invalid(String),
    /// An evidence file could not be recorded.
    #[error("evidence {spec}")]
    Evidence {
        /// The evidence as the caller gave it (`path[:start[-end]]`).
        spec: String,
        /// Why recording it failed.
        source: EvidenceError,
    },
    /// A path the caller gave is refused or missing.
    #[error(transparent)]
    Path(#[from] PathError),
    /// The brain directory could not be created.
    #[error("cannot create {path}")]
    Io {
        /// The file or directory being created.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// `.pith/` or a file of the brain's is not what pith makes (a link, a hard link, not a
    /// file): the project is a stranger's, so pith neither reads nor writes through it.
    #[error("{found}; move it aside to let pith make its own")]
    NotOwn {
        /// What was found, naming the path.
        found: std::io::Error,
    },
}

/// A memory to save, as a caller gives it.
#[derive(Debug, Clone)]
pub struct NewMemory {
    /// What sort of memory this is.
    pub kind: Kind,
    /// One line, at most [`MAX_TITLE_CHARS`] characters.
    pub title: String,
    /// The detail, free text, at most [`MAX_BODY_BYTES`].
    pub body: String,
    /// As typed; entries may hold several comma-separated tags, normalized on save (at most
    /// [`MAX_TAGS`] of at most [`MAX_TAG_CHARS`] characters).
    pub tags: Vec<String>,
    /// For a fix: the error headline it fixes, on one line of at most [`MAX_HEADLINE_CHARS`].
    pub headline: Option<String>,
    /// Workspace files the memory depends on, fingerprinted on save.
    pub evidence: Vec<EvidenceSpec>,
}

/// A memory with its status derived against the workspace as it is now.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The memory as stored.
    pub memory: Memory,
    /// Its evidence checked against the files now.
    pub status: Status,
}

/// One search result.
#[derive(Debug, Clone)]
pub struct Found {
    /// The matching memory and its status.
    pub checked: Checked,
    /// Body excerpt around the matched words, on one line, at most [`MAX_SNIPPET_CHARS`]
    /// characters whatever the backend gave.
    pub snippet: String,
}

/// A search's results, best first.
#[derive(Debug, Clone)]
pub struct SearchResult {
    /// The query as searched.
    pub query: String,
    /// How many memories matched; a lower bound when `total_capped`.
    pub total: u64,
    /// Counting stopped at [`SEARCH_CAP`], so `total` is a lower bound.
    pub total_capped: bool,
    /// Whether the hits hold every word of the query, or only some.
    pub matched: Matched,
    /// Set when the query matched too many memories to rank them all: the newest this many
    /// were ranked.
    pub ranked_newest: Option<usize>,
    /// The best results, at most the limit asked for.
    pub hits: Vec<Found>,
}

/// What `verify` found.
#[derive(Debug, Clone)]
pub struct Verification {
    /// The verified memory's id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// The status at the previous verification, if there was one.
    pub before: Option<Freshness>,
    /// The status now (after `accept`, against the newly recorded evidence).
    pub status: Status,
    /// What the files looked like against the old record, when `accept` replaced it.
    pub accepted: Option<Status>,
}

/// One workspace's memory.
pub struct Brain {
    ws: Workspace,
    store: Box<dyn BrainStore>,
    /// Whether this open made the brain's file (the caller records it as its user's).
    created: bool,
    /// Where its notes come from ([`origin`]); the opener sets it, [`Origin::Own`] until then.
    origin: origin::Origin,
}

impl Brain {
    /// Open the workspace's brain, creating `.pith/` (with its `.gitignore`) on first use;
    /// `open_store` opens the backend on the brain file, so the caller chooses the backend
    /// (`pith_store::brain::open_workspace_brain` for SQLite).
    pub fn open_with(
        ws: Workspace,
        open_store: impl FnOnce(&Path) -> Result<Box<dyn BrainStore>, StoreError>,
    ) -> Result<Brain, BrainError> {
        if !own_brain_files(ws.root())? {
            create_brain_dir(ws.root())?;
        }
        let db = Brain::db_path(ws.root());
        let existed = db.exists();
        let store = open_store(&db)?;
        let mut brain = Brain::with_store(ws, store);
        brain.created = !existed;
        Ok(brain)
    }

    /// Like [`Brain::open_with`], only if the workspace already has a brain, and creating
    /// nothing (reads): `open_store` must open the existing file without creating or chmodding
    /// one (`pith_store::brain::open_existing_workspace_brain` for SQLite).
    pub fn open_existing_with(
        ws: Workspace,
        open_store: impl FnOnce(&Path) -> Result<Box<dyn BrainStore>, StoreError>,
    ) -> Result<Option<Brain>, BrainError> {
        let db = Brain::db_path(ws.root());
        if !own_brain_files(ws.root())? || !db.exists() {
            return Ok(None);
        }
        let store = open_store(&db)?;
        Ok(Some(Brain::with_store(ws, store)))
    }

    /// Where a workspace's brain lives.
    pub fn db_path(root: &Path) -> PathBuf {
        root.join(BRAIN_DIR).join(BRAIN_FILE)
    }

    /// A brain over any store (tests, benchmarks, other backends).
    pub fn with_store(ws: Workspace, store: Box<dyn BrainStore>) -> Brain {
        Brain {
            ws,
            store,
            created: false,
            origin: origin::Origin::Own,
        }
    }

    /// Whether this open made the brain's file: the caller then records it as its user's
    /// ([`origin::Origins::remember`]).
    pub fn created(&self) -> bool {
        self.created
    }

    /// Where this brain's notes come from.
    pub fn origin(&self) -> origin::Origin {
        self.origin
    }

    /// Say where this brain's notes come from (the opener looks it up in [`origin::Origins`]).
    pub fn set_origin(&mut self, origin: origin::Origin) {
        self.origin = origin;
    }

    /// The workspace this brain belongs to.
    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    /// Validate, fingerprint the evidence files now, and store under a fresh id.
    pub fn save(&mut self, new: NewMemory) -> Result<Checked, BrainError> {
        let Valid {
            title,
            body,
            headline,
            tags,
        } = validate(&new)?;
        let mut evidence: Vec<Evidence> = Vec::with_capacity(new.evidence.len());
        for spec in &new.evidence {
            let e = evidence::record(&self.ws, spec).map_err(|source| BrainError::Evidence {
                spec: spec.to_string(),
                source,
            })?;
            if !evidence.contains(&e) {
                evidence.push(e);
            }
        }
        let now = now();
        let mut memory = Memory {
            id: String::new(),
            kind: new.kind,
            title,
            body,
            tags,
            headline,
            evidence,
            created_at: now,
            updated_at: now,
            hits: 0,
            last_hit_at: None,
            last_check: None,
            trashed_at: None,
        };
        let title = memory.title.clone();
        for candidate in id::candidates(&title) {
            memory.id = candidate;
            if self.store.insert(&memory)? == Inserted::Ok {
                let status = evidence::check(&self.ws, &memory.evidence, CheckMode::Quick);
                return Ok(Checked { memory, status });
            }
        }
        Err(BrainError::Invalid(format!(
            "no free memory id after {} tries",
            id::MAX_ATTEMPTS
        )))
    }

    /// A live memory by id. Returning it to the caller credits it.
    pub fn get(&mut self, id: &str) -> Result<Checked, BrainError> {
        let mut memory = self.live(id)?;
        let now = now();
        self.store.credit(&[&memory.id], now)?;
        memory.hits += 1;
        memory.last_hit_at = Some(now);
        let status = evidence::check(&self.ws, &memory.evidence, CheckMode::Quick);
        Ok(Checked { memory, status })
    }

    /// Full-text search (BM25 over title, body, tags and error headline), best first. Every
    /// memory returned is credited; the rest of `total` is not.
    pub fn search(
        &mut self,
        query: &str,
        kind: Option<Kind>,
        limit: usize,
    ) -> Result<SearchResult, BrainError> {
        let terms: Vec<String> = query
            .split_whitespace()
            .filter(|t| t.chars().any(char::is_alphanumeric))
            .map(str::to_owned)
            .collect();
        if terms.is_empty() {
            return Err(BrainError::Invalid(
                "the query has no words to search for".into(),
            ));
        }
        let limit = limit.clamp(1, MAX_SEARCH_LIMIT);
        let found = self.store.search(&SearchQuery { terms, kind, limit })?;
        let now = now();
        let ids: Vec<&str> = found.hits.iter().map(|h| h.memory.id.as_str()).collect();
        self.store.credit(&ids, now)?;
        let hits = found
            .hits
            .into_iter()
            .map(|h| {
                let mut memory = h.memory;
                memory.hits += 1;
                memory.last_hit_at = Some(now);
                let status = evidence::check(&self.ws, &memory.evidence, CheckMode::Quick);
                Found {
                    checked: Checked { memory, status },
                    snippet: render::clip(
                        &h.snippet.split_whitespace().collect::<Vec<_>>().join(" "),
                        MAX_SNIPPET_CHARS,
                    ),
                }
            })
            .collect();
        Ok(SearchResult {
            query: query.trim().to_owned(),
            total: found.total,
            total_capped: found.total_capped,
            matched: found.matched,
            ranked_newest: found.ranked_newest,
            hits,
        })
    }

    /// Memories newest first, with status; listing credits nothing.
    pub fn list(&mut self, filter: &ListFilter) -> Result<Vec<Checked>, BrainError> {
        Ok(self
            .store
            .list(filter)?
            .into_iter()
            .map(|memory| {
                let status = evidence::check(&self.ws, &memory.evidence, CheckMode::Quick);
                Checked { memory, status }
            })
            .collect())
    }

    /// Rehash every evidence file, record the result, and say what changed. With `accept`,
    /// the current files become the new evidence (the memory was checked and still holds) and
    /// evidence files that are gone are dropped.
    pub fn verify(&mut self, id: &str, accept: bool) -> Result<Verification, BrainError> {
        let memory = self.live(id)?;
        let found = evidence::check(&self.ws, &memory.evidence, CheckMode::Full);
        let stored = found.evidence_to_store(accept);
        let (status, accepted) = if accept && found.freshness == Freshness::Stale {
            (
                evidence::check(&self.ws, &stored, CheckMode::Full),
                Some(found),
            )
        } else {
            (found, None)
        };
        let check = LastCheck {
            status: status.freshness,
            at: now(),
        };
        self.store.record_check(&memory.id, &stored, &check)?;
        Ok(Verification {
            id: memory.id,
            title: memory.title,
            before: memory.last_check.map(|c| c.status),
            status,
            accepted,
        })
    }

    /// Move a memory to the trash (restorable with [`Brain::restore`]).
    pub fn forget(&mut self, id: &str) -> Result<Memory, BrainError> {
        let mut memory = self.live(id)?;
        let at = now();
        self.store.set_trashed(&memory.id, Some(at))?;
        memory.trashed_at = Some(at);
        Ok(memory)
    }

    /// Bring a memory back from the trash.
    pub fn restore(&mut self, id: &str) -> Result<Memory, BrainError> {
        let id = id::normalize(id);
        let mut memory = self
            .store
            .get(&id)?
            .ok_or_else(|| BrainError::NotFound { id: id.clone() })?;
        if memory.trashed_at.is_none() {
            return Err(BrainError::NotTrashed { id });
        }
        self.store.set_trashed(&memory.id, None)?;
        memory.trashed_at = None;
        Ok(memory)
    }

    /// Memories with evidence on a workspace-relative path: ids and titles for a pointer, which
    /// never credits them.
    pub fn pointers(&mut self, rel_path: &str) -> Result<Vec<MemoryRef>, BrainError> {
        Ok(self.store.on_path(rel_path)?)
    }

    /// Live memories of `kind` whose error headline holds the selective ones of `terms` (every
    /// one first, else any; BM25 order), for recall to choose from: like
    /// [`Brain::pointers`], naming a memory is not returning it, so nothing is credited.
    pub fn nominate(
        &mut self,
        terms: &[String],
        kind: Kind,
        limit: usize,
    ) -> Result<Vec<Memory>, BrainError> {
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.store.by_headline(&HeadlineQuery {
            terms: terms.to_vec(),
            kind,
            limit: limit.clamp(1, MAX_SEARCH_LIMIT),
        })?)
    }

    /// `memory` with its status derived from its evidence now (a quick check: files whose size
    /// and modification time are unchanged are not rehashed).
    pub fn checked(&self, memory: Memory) -> Checked {
        let status = evidence::check(&self.ws, &memory.evidence, CheckMode::Quick);
        Checked { memory, status }
    }

    /// Live memories.
    pub fn count(&mut self) -> Result<u64, BrainError> {
        Ok(self.store.count()?)
    }

    fn live(&mut self, id: &str) -> Result<Memory, BrainError> {
        let id = id::normalize(id);
        match self.store.get(&id)? {
            None => Err(BrainError::NotFound { id }),
            Some(m) if m.trashed_at.is_some() => Err(BrainError::Trashed { id }),
            Some(m) => Ok(m),
        }
    }
}

/// The files SQLite opens by path for a brain: the database and its side files.
const BRAIN_FILES: &[&str] = &[
    "brain.db",
    "brain.db-wal",
    "brain.db-shm",
    "brain.db-journal",
];

/// Whether `root` has a `.pith/` directory whose brain files are pith's to open: each absent
/// or a regular file with one name. SQLite follows links to all of them, so a `.pith` or a
/// `brain.db-wal` committed as a link would make a save write outside the project: refused
/// ([`BrainError::NotOwn`]). `Ok(false)`: no `.pith/` at all.
fn own_brain_files(root: &Path) -> Result<bool, BrainError> {
    debug_assert_eq!(BRAIN_FILES[0], BRAIN_FILE);
    pith_paths::own::own_files_or_none(root, BRAIN_DIR, BRAIN_FILES)
        .map_err(|found| BrainError::NotOwn { found })
}

/// The `.pith` directory (0700), with a `.gitignore` (0600) so the database never shows up as
/// untracked; both private whatever the umask, made without following a link.
fn create_brain_dir(root: &Path) -> Result<(), BrainError> {
    use pith_paths::own::{Access, OwnDir};
    let dir = root.join(BRAIN_DIR);
    let io = |source| BrainError::Io {
        path: dir.clone(),
        source,
    };
    let own = OwnDir::open(root, &[BRAIN_DIR], true).map_err(io)?;
    match own.file(".gitignore", Access::CreateNew) {
        Ok(mut file) => std::io::Write::write_all(&mut file, b"*\n").map_err(io)?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    Ok(())
}

fn one_line(what: &str, text: &str) -> Result<String, BrainError> {
    let text = text.trim();
    if text.contains(['\n', '\r']) {
        return Err(BrainError::Invalid(format!(
            "{what} must be one line; put the detail in the body"
        )));
    }
    Ok(text.to_owned())
}

/// Lowercase, `#` and commas stripped, inner spaces as `-`, no duplicates, in given order.
fn normalize_tags(tags: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for tag in tags.iter().flat_map(|t| t.split(',')) {
        let tag = tag.trim().trim_start_matches('#').to_lowercase();
        let tag = tag.split_whitespace().collect::<Vec<_>>().join("-");
        if !tag.is_empty() && !out.contains(&tag) {
            out.push(tag);
        }
    }
    out
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A new memory's title, body, headline and tags, checked against the limits.
struct Valid {
    title: String,
    body: String,
    headline: Option<String>,
    tags: Vec<String>,
}

/// `new`'s text within the limits, each refusal saying what was over and what to do.
fn validate(new: &NewMemory) -> Result<Valid, BrainError> {
    let title = one_line("title", &new.title)?;
    if title.is_empty() {
        return Err(BrainError::Invalid("title is empty".into()));
    }
    let chars = title.chars().count();
    if chars > MAX_TITLE_CHARS {
        return Err(BrainError::Invalid(format!(
            "title is {chars} characters, over the limit of {MAX_TITLE_CHARS}; shorten it \
             and put the detail in the body"
        )));
    }
    let body = new.body.trim();
    if body.len() > MAX_BODY_BYTES {
        return Err(BrainError::Invalid(format!(
            "body is {} bytes, over the limit of {MAX_BODY_BYTES} (16 KiB); keep what was \
             learned and cite the files it is about as evidence instead of pasting them",
            body.len()
        )));
    }
    let headline = match new.headline.as_deref().map(|h| one_line("headline", h)) {
        Some(Ok(h)) if !h.is_empty() => Some(h),
        Some(Err(e)) => return Err(e),
        _ => None,
    };
    if let Some(chars) = headline.as_ref().map(|h| h.chars().count())
        && chars > MAX_HEADLINE_CHARS
    {
        return Err(BrainError::Invalid(format!(
            "headline is {chars} characters, over the limit of {MAX_HEADLINE_CHARS}; give \
             the error's first line and put the rest in the body"
        )));
    }
    if new.evidence.len() > MAX_EVIDENCE {
        return Err(BrainError::Invalid(format!(
            "{} pieces of evidence, over the limit of {MAX_EVIDENCE}; cite the files (or line \
             ranges) the memory is about",
            new.evidence.len()
        )));
    }
    let tags = normalize_tags(&new.tags);
    if tags.len() > MAX_TAGS {
        return Err(BrainError::Invalid(format!(
            "{} tags, over the limit of {MAX_TAGS}; keep the few words someone would search for",
            tags.len()
        )));
    }
    if let Some(chars) = tags
        .iter()
        .map(|t| t.chars().count())
        .find(|&n| n > MAX_TAG_CHARS)
    {
        return Err(BrainError::Invalid(format!(
            "a tag is {chars} characters, over the limit of {MAX_TAG_CHARS}; a tag is a word \
             or two"
        )));
    }
    Ok(Valid {
        title,
        body: body.to_owned(),
        headline,
        tags,
    })
}
