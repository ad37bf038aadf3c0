//! The project memory ("the brain"): what was fixed and how, what was tried and failed,
//! decisions and notes, each tied to the workspace files it depends on so that it can tell when
//! it has gone stale.
//!
//! [`Brain`] holds the rules (ids, validation, evidence, staleness, when hit counters move) and
//! talks to storage only through [`pith_store::brain::BrainStore`], so a shared PostgreSQL
//! backend can replace the per-workspace SQLite file without touching them. Text for people
//! and agents comes from [`render`], shared by the CLI and the MCP server.

pub mod evidence;
mod id;
pub mod render;
pub mod workspace;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

pub use evidence::{CheckMode, EvidenceCheck, EvidenceSpec, EvidenceState, Status};
pub use pith_store::StoreError;
pub use pith_store::brain::{
    BrainStore, Evidence, Freshness, Kind, LastCheck, LineRange, ListFilter, Matched, Memory,
    MemoryRef, SEARCH_CAP,
};
use pith_store::brain::{Inserted, SearchQuery, SqliteBrain};
pub use workspace::{PathError, Workspace, WorkspacePath};

use evidence::EvidenceError;

/// The brain's directory inside a workspace.
pub const BRAIN_DIR: &str = ".pith";
/// The SQLite file inside [`BRAIN_DIR`].
pub const BRAIN_FILE: &str = "brain.db";
/// Most memories one search returns.
pub const MAX_SEARCH_LIMIT: usize = 50;
/// Longest title accepted, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// A failure the caller can act on; messages name the memory or the input at fault.
#[derive(Debug, thiserror::Error)]
pub enum BrainError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no memory {id}")]
    NotFound { id: String },
    #[error("memory {id} is in the trash")]
    Trashed { id: String },
    #[error("memory {id} is not in the trash")]
    NotTrashed { id: String },
    #[error("{0}")]
    Invalid(String),
    #[error("evidence {spec}: {source}")]
    Evidence { spec: String, source: EvidenceError },
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("cannot create {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A memory to save, as a caller gives it.
#[derive(Debug, Clone)]
pub struct NewMemory {
    pub kind: Kind,
    pub title: String,
    pub body: String,
    pub tags: Vec<String>,
    pub headline: Option<String>,
    pub evidence: Vec<EvidenceSpec>,
}

/// A memory with its status derived against the workspace as it is now.
#[derive(Debug, Clone)]
pub struct Checked {
    pub memory: Memory,
    pub status: Status,
}

/// One search result.
#[derive(Debug, Clone)]
pub struct Found {
    pub checked: Checked,
    /// Body excerpt around the matched words, on one line.
    pub snippet: String,
}

/// A search's results, best first.
#[derive(Debug, Clone)]
pub struct SearchResult {
    pub query: String,
    /// How many memories matched; a lower bound when `total_capped`.
    pub total: u64,
    pub total_capped: bool,
    /// Whether the hits hold every word of the query, or only some.
    pub matched: Matched,
    /// Set when the query matched too many memories to rank them all: the newest this many
    /// were ranked.
    pub ranked_newest: Option<usize>,
    pub hits: Vec<Found>,
}

/// What `verify` found.
#[derive(Debug, Clone)]
pub struct Verification {
    pub id: String,
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
}

impl Brain {
    /// Open the workspace's brain, creating `.pith/brain.db` on first use.
    pub fn open(ws: Workspace) -> Result<Brain, BrainError> {
        let dir = ws.root().join(BRAIN_DIR);
        if !dir.exists() {
            create_brain_dir(&dir)?;
        }
        let store = SqliteBrain::open(&dir.join(BRAIN_FILE))?;
        Ok(Brain::with_store(ws, Box::new(store)))
    }

    /// Open the brain only if the workspace already has one (reads that must not create files).
    pub fn open_existing(ws: Workspace) -> Result<Option<Brain>, BrainError> {
        if !Brain::db_path(ws.root()).exists() {
            return Ok(None);
        }
        Brain::open(ws).map(Some)
    }

    /// Where a workspace's brain lives.
    pub fn db_path(root: &Path) -> PathBuf {
        root.join(BRAIN_DIR).join(BRAIN_FILE)
    }

    /// A brain over any store (tests, benchmarks, other backends).
    pub fn with_store(ws: Workspace, store: Box<dyn BrainStore>) -> Brain {
        Brain { ws, store }
    }

    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    /// Validate, fingerprint the evidence files now, and store under a fresh id.
    pub fn save(&mut self, new: NewMemory) -> Result<Checked, BrainError> {
        let title = one_line("title", &new.title)?;
        if title.is_empty() {
            return Err(BrainError::Invalid("title is empty".into()));
        }
        if title.chars().count() > MAX_TITLE_CHARS {
            return Err(BrainError::Invalid(format!(
                "title is longer than {MAX_TITLE_CHARS} characters; put the detail in the body"
            )));
        }
        let headline = match new.headline.as_deref().map(|h| one_line("headline", h)) {
            Some(Ok(h)) if !h.is_empty() => Some(h),
            Some(Err(e)) => return Err(e),
            _ => None,
        };
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
            body: new.body.trim().to_owned(),
            tags: normalize_tags(&new.tags),
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
                    snippet: h.snippet.split_whitespace().collect::<Vec<_>>().join(" "),
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

/// The `.pith` directory, with a `.gitignore` so the database never shows up as untracked.
fn create_brain_dir(dir: &Path) -> Result<(), BrainError> {
    let io = |source| BrainError::Io {
        path: dir.to_owned(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::write(dir.join(".gitignore"), "*\n").map_err(io)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn brain() -> (tempfile::TempDir, Brain) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/ledger.rs"), "fn write() {}\n").unwrap();
        std::fs::write(dir.path().join("src/other.rs"), "fn other() {}\n").unwrap();
        let brain = Brain::open(Workspace::new(dir.path()).unwrap()).unwrap();
        (dir, brain)
    }

    fn fix(title: &str, evidence: &[&str]) -> NewMemory {
        NewMemory {
            kind: Kind::Fix,
            title: title.into(),
            body: "Set a busy timeout on every connection.".into(),
            tags: vec!["SQLite, Ledger".into(), "#ledger".into()],
            headline: Some("database is locked".into()),
            evidence: evidence
                .iter()
                .map(|s| EvidenceSpec::parse(s).unwrap())
                .collect(),
        }
    }

    #[test]
    fn save_then_get_credits_and_derives_status() {
        let (_dir, mut brain) = brain();
        let saved = brain
            .save(fix("Retry on busy", &["src/ledger.rs"]))
            .unwrap();
        assert!(saved.memory.id.starts_with("m-"));
        assert_eq!(saved.memory.tags, ["sqlite", "ledger"]);
        assert_eq!(saved.status.freshness, Freshness::Fresh);
        assert_eq!(saved.memory.evidence[0].hash.as_ref().unwrap().len(), 64);

        let got = brain.get(&saved.memory.id.to_uppercase()).unwrap();
        assert_eq!(got.memory.hits, 1);
        assert_eq!(brain.get(&saved.memory.id).unwrap().memory.hits, 2);
    }

    #[test]
    fn search_credits_only_what_it_returns_and_list_credits_nothing() {
        let (_dir, mut brain) = brain();
        let a = brain.save(fix("Ledger busy retry", &[])).unwrap().memory.id;
        let b = brain.save(fix("Ledger queue size", &[])).unwrap().memory.id;
        let found = brain.search("ledger busy", None, 1).unwrap();
        assert_eq!(found.total, 2);
        assert_eq!(found.hits.len(), 1);
        assert_eq!(found.hits[0].checked.memory.id, a);
        brain.list(&ListFilter::default()).unwrap();
        brain.pointers("src/ledger.rs").unwrap();
        let all = brain.list(&ListFilter::default()).unwrap();
        let hits = |id: &str| all.iter().find(|c| c.memory.id == id).unwrap().memory.hits;
        assert_eq!((hits(&a), hits(&b)), (1, 0));
    }

    #[test]
    fn verify_reports_edits_and_deletions_and_accept_refreshes() {
        let (dir, mut brain) = brain();
        let id = brain
            .save(fix("Two files", &["src/ledger.rs", "src/other.rs:1"]))
            .unwrap()
            .memory
            .id;
        let v = brain.verify(&id, false).unwrap();
        assert_eq!(v.before, None);
        assert_eq!(v.status.freshness, Freshness::Fresh);

        std::fs::write(dir.path().join("src/ledger.rs"), "fn write2() {}\n").unwrap();
        std::fs::remove_file(dir.path().join("src/other.rs")).unwrap();
        let v = brain.verify(&id, false).unwrap();
        assert_eq!(v.before, Some(Freshness::Fresh));
        assert_eq!(v.status.freshness, Freshness::Stale);
        let problems: Vec<_> = v
            .status
            .problems()
            .map(|c| (c.recorded.path.as_str(), c.state.clone()))
            .collect();
        assert_eq!(
            problems,
            [
                ("src/ledger.rs", EvidenceState::Changed),
                ("src/other.rs", EvidenceState::Gone)
            ]
        );
        assert_eq!(brain.get(&id).unwrap().status.freshness, Freshness::Stale);

        let v = brain.verify(&id, true).unwrap();
        assert_eq!(v.status.freshness, Freshness::Fresh);
        assert!(v.accepted.is_some());
        let m = brain.get(&id).unwrap();
        assert_eq!(m.status.freshness, Freshness::Fresh);
        assert_eq!(m.memory.evidence.len(), 1);
    }

    #[test]
    fn forget_and_restore() {
        let (_dir, mut brain) = brain();
        let id = brain.save(fix("Trash me", &[])).unwrap().memory.id;
        brain.forget(&id).unwrap();
        assert!(matches!(brain.get(&id), Err(BrainError::Trashed { .. })));
        assert!(matches!(brain.forget(&id), Err(BrainError::Trashed { .. })));
        assert_eq!(brain.search("trash", None, 5).unwrap().total, 0);
        brain.restore(&id).unwrap();
        assert!(matches!(
            brain.restore(&id),
            Err(BrainError::NotTrashed { .. })
        ));
        assert_eq!(brain.search("trash", None, 5).unwrap().total, 1);
        assert!(matches!(
            brain.get("m-nope"),
            Err(BrainError::NotFound { .. })
        ));
    }

    #[test]
    fn rejects_bad_input() {
        let (_dir, mut brain) = brain();
        let mut m = fix("two\nlines", &[]);
        assert!(brain.save(m.clone()).is_err());
        m.title = " ".into();
        assert!(brain.save(m.clone()).is_err());
        m.title = "ok".into();
        m.evidence = vec![EvidenceSpec::parse("../etc/passwd").unwrap()];
        let err = brain.save(m.clone()).unwrap_err().to_string();
        assert!(err.contains("`..` is not allowed"), "{err}");
        m.evidence = vec![EvidenceSpec::parse("src/missing.rs").unwrap()];
        let err = brain.save(m).unwrap_err().to_string();
        assert!(err.contains("does not exist"), "{err}");
        assert!(brain.search("  !! ", None, 5).is_err());
    }

    #[test]
    fn ids_stay_unique_under_many_saves() {
        let (_dir, mut brain) = brain();
        let mut ids = std::collections::HashSet::new();
        for i in 0..300 {
            let m = brain.save(fix(&format!("memory {i}"), &[])).unwrap();
            assert!(ids.insert(m.memory.id));
        }
    }

    #[test]
    fn creates_gitignored_brain_dir_and_open_existing_does_not_create() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        assert!(Brain::open_existing(ws.clone()).unwrap().is_none());
        assert!(!dir.path().join(BRAIN_DIR).exists());
        Brain::open(ws.clone()).unwrap();
        let ignore = std::fs::read_to_string(dir.path().join(".pith/.gitignore")).unwrap();
        assert_eq!(ignore, "*\n");
        assert!(Brain::open_existing(ws).unwrap().is_some());
    }
}
