//! The SQLite backend of the brain: one connection to `<workspace>/.pith/brain.db`, FTS5 with
//! BM25 over title, body, tags and error headline.

use std::path::Path;
use std::time::{Duration, Instant};

use pith_brain::store::{
    BrainStore, COMMON_HEADLINE_TERM, HeadlineQuery, Inserted, ListFilter, Matched, SEARCH_CAP,
    SearchHit, SearchHits, SearchQuery, StoreError as BackendError,
};
use pith_brain::{Evidence, Freshness, Kind, LastCheck, LineRange, Memory, MemoryRef};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::excerpt::excerpt;
use super::schema::MIGRATIONS;
use super::schema::OBJECTS;
use crate::sqlite::{
    BUSY_TIMEOUT, StoreError, open_existing_guarded, open_guarded, open_in_memory,
    open_read_only_waiting,
};
use pith_sqlite_guard::{Deadline, Schema, distrust};

/// What upgrades a brain an older pith wrote: any command that saves to it.
const UPGRADE: &str = "save a memory once (`pith memory add`) to upgrade it";

/// The rank the schema gives `memories_fts` (its `rank` setting), called by name: reading the
/// setting makes FTS5 prepare a statement to evaluate it on every query.
const RANK: &str = "bm25(memories_fts, 4.0, 1.0, 2.0, 3.0, 0.0)";

/// Segments the full-text index may hold before a write merges it ([`SqliteBrain::merge_index`]).
const MAX_INDEX_SEGMENTS: i64 = 4;
/// The longest one call of the CLI or the MCP server may spend in a brain's statements (a
/// brain comes with the project, a stranger's data): pith's own take milliseconds on ten
/// thousand memories.
pub const STATEMENT_LIMIT: Duration = Duration::from_secs(2);
/// The same for `pith hook`, whose answer the host waits for on every tool call.
pub const HOOK_STATEMENT_LIMIT: Duration = Duration::from_millis(250);

/// A connection's writes merge the index at most this often; what a burst leaves unmerged is
/// merged when the connection closes.
const MERGE_EVERY: Duration = Duration::from_secs(1);

/// The SQLite backend: one connection to `<workspace>/.pith/brain.db`.
pub struct SqliteBrain {
    conn: Connection,
    /// How often this connection's writes may merge the index ([`MERGE_EVERY`]); `None`: never.
    merge_every: Option<Duration>,
    /// When this connection last merged the index.
    merged_at: Option<Instant>,
    /// Whether this connection changed the index since it last looked at its segments.
    unmerged: bool,
    /// Armed before each call: a statement past it is interrupted.
    deadline: Option<Deadline>,
}

/// A brain file may be a stranger's, and a migration writes to it (its triggers fire, its views
/// are read): before one runs, the file must hold exactly what pith's migrations make at the
/// version it claims, under the guard (`trusted_schema` off, each statement within `limit`).
fn before_migrating(
    limit: Duration,
) -> impl Fn(&mut Connection, &Path, usize) -> Result<Option<Deadline>, StoreError> {
    move |conn, path, version| {
        let made = open_in_memory(&MIGRATIONS[..version])?;
        let objects: Vec<(String, String)> = made
            .prepare("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let expected: Vec<(&str, &str)> = objects
            .iter()
            .map(|(kind, name)| (kind.as_str(), name.as_str()))
            .collect();
        Ok(Some(distrust(
            conn,
            path,
            Schema::Exactly(&expected),
            limit,
        )?))
    }
}

impl SqliteBrain {
    /// Open (creating if needed) a brain database file.
    pub fn open(path: &Path) -> Result<SqliteBrain, StoreError> {
        let guard = before_migrating(STATEMENT_LIMIT);
        let conn = open_guarded(path, MIGRATIONS, Some(&guard))?;
        SqliteBrain::checked(conn, path, STATEMENT_LIMIT)
    }

    /// Open a brain database file only if it exists; never creates or chmods a file (reads).
    pub fn open_existing(path: &Path) -> Result<SqliteBrain, StoreError> {
        let guard = before_migrating(STATEMENT_LIMIT);
        let conn = open_existing_guarded(path, MIGRATIONS, BUSY_TIMEOUT, Some(&guard))?;
        SqliteBrain::checked(conn, path, STATEMENT_LIMIT)
    }

    /// Open an existing brain database file to read it, changing nothing (no file, mode or
    /// schema), waiting at most `busy` for another process's lock: the hook's way in.
    pub fn open_read_only(path: &Path, busy: Duration) -> Result<SqliteBrain, StoreError> {
        let conn = open_read_only_waiting(path, MIGRATIONS, UPGRADE, busy)?;
        SqliteBrain::checked(conn, path, HOOK_STATEMENT_LIMIT)
    }

    /// [`SqliteBrain::open_existing`], waiting at most `busy` for another process's lock:
    /// `pith hook`'s writer for a captured fix. It never merges the index (a rewrite holds the
    /// write lock longer than another hook waits for it); the next CLI or MCP write does.
    pub fn open_existing_waiting(path: &Path, busy: Duration) -> Result<SqliteBrain, StoreError> {
        let guard = before_migrating(HOOK_STATEMENT_LIMIT);
        let conn = open_existing_guarded(path, MIGRATIONS, busy, Some(&guard))?;
        let mut brain = SqliteBrain::checked(conn, path, HOOK_STATEMENT_LIMIT)?;
        brain.merge_every = None;
        Ok(brain)
    }

    /// A brain file is a stranger's data ([`distrust`]): its schema must be exactly the one
    /// pith makes, and each call's statements are bounded by `limit`.
    fn checked(
        mut conn: Connection,
        path: &Path,
        limit: Duration,
    ) -> Result<SqliteBrain, StoreError> {
        let deadline = distrust(&mut conn, path, Schema::Exactly(OBJECTS), limit)?;
        let mut brain = SqliteBrain::with(conn);
        brain.deadline = Some(deadline);
        Ok(brain)
    }

    /// Give the next call its time ([`STATEMENT_LIMIT`] or the hook's).
    fn arm(&self) {
        if let Some(deadline) = &self.deadline {
            deadline.arm();
        }
    }

    /// A brain that lives in memory only (tests, benchmarks).
    pub fn in_memory() -> Result<SqliteBrain, StoreError> {
        Ok(SqliteBrain::with(open_in_memory(MIGRATIONS)?))
    }

    fn with(conn: Connection) -> SqliteBrain {
        SqliteBrain {
            conn,
            merge_every: Some(MERGE_EVERY),
            merged_at: None,
            unmerged: false,
            deadline: None,
        }
    }

    fn load(&self, seq: i64) -> Result<Option<Memory>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, kind, title, body, tags, headline, created_at, updated_at, hits,
                    last_hit_at, checked_status, checked_at, trashed_at
             FROM memories WHERE seq = ?1",
        )?;
        let row = stmt
            .query_row([seq], |r| {
                Ok(RawMemory {
                    id: r.get(0)?,
                    kind: r.get(1)?,
                    title: r.get(2)?,
                    body: r.get(3)?,
                    tags: r.get(4)?,
                    headline: r.get(5)?,
                    created_at: r.get(6)?,
                    updated_at: r.get(7)?,
                    hits: r.get(8)?,
                    last_hit_at: r.get(9)?,
                    checked_status: r.get(10)?,
                    checked_at: r.get(11)?,
                    trashed_at: r.get(12)?,
                })
            })
            .optional()?;
        let Some(raw) = row else { return Ok(None) };
        let evidence = self.load_evidence(seq)?;
        Ok(Some(raw.into_memory(evidence)))
    }

    fn load_evidence(&self, seq: i64) -> Result<Vec<Evidence>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT path, line_start, line_end, hash, size, mtime_ns
             FROM evidence WHERE memory_seq = ?1 ORDER BY ord LIMIT ?2",
        )?;
        // A brain from a project may hold any number; pith saves at most this many.
        let most = pith_brain::MAX_EVIDENCE as i64;
        let rows = stmt.query_map(rusqlite::params![seq, most], |r| {
            let start: Option<u32> = r.get(1)?;
            let end: Option<u32> = r.get(2)?;
            Ok(Evidence {
                path: r.get(0)?,
                lines: start.zip(end).map(|(start, end)| LineRange { start, end }),
                hash: r.get(3)?,
                size: r
                    .get::<_, Option<i64>>(4)?
                    .and_then(|s| u64::try_from(s).ok()),
                mtime_ns: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn seq_of(&self, id: &str) -> Result<Option<i64>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT seq FROM memories WHERE id = ?1")?;
        Ok(stmt.query_row([id], |r| r.get(0)).optional()?)
    }
}

/// Replace a memory's evidence with `evidence`.
fn write_evidence(
    tx: &rusqlite::Transaction<'_>,
    seq: i64,
    evidence: &[Evidence],
) -> rusqlite::Result<()> {
    replace_evidence(tx, seq, evidence, i64::MAX)
}

/// Replace the evidence a load gives (the first [`pith_brain::MAX_EVIDENCE`]) with `evidence`,
/// as checked: a memory an older pith saved with more keeps the rest, unread.
fn rewrite_read_evidence(
    tx: &rusqlite::Transaction<'_>,
    seq: i64,
    evidence: &[Evidence],
) -> rusqlite::Result<()> {
    replace_evidence(tx, seq, evidence, pith_brain::MAX_EVIDENCE as i64)
}

/// Replace the memory's rows before position `below` with `evidence`.
fn replace_evidence(
    tx: &rusqlite::Transaction<'_>,
    seq: i64,
    evidence: &[Evidence],
    below: i64,
) -> rusqlite::Result<()> {
    tx.execute(
        "DELETE FROM evidence WHERE memory_seq = ?1 AND ord < ?2",
        params![seq, below],
    )?;
    let mut stmt = tx.prepare_cached(
        "INSERT INTO evidence (memory_seq, ord, path, line_start, line_end, hash, size, mtime_ns)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    for (ord, e) in evidence.iter().enumerate() {
        stmt.execute(params![
            seq,
            ord as i64,
            e.path,
            e.lines.map(|l| l.start),
            e.lines.map(|l| l.end),
            e.hash,
            e.size.and_then(|s| i64::try_from(s).ok()),
            e.mtime_ns,
        ])?;
    }
    Ok(())
}

/// A row before its text columns are turned back into types.
struct RawMemory {
    id: String,
    kind: String,
    title: String,
    body: String,
    tags: String,
    headline: Option<String>,
    created_at: i64,
    updated_at: i64,
    hits: i64,
    last_hit_at: Option<i64>,
    checked_status: Option<String>,
    checked_at: Option<i64>,
    trashed_at: Option<i64>,
}

impl RawMemory {
    fn into_memory(self, evidence: Vec<Evidence>) -> Memory {
        let last_check = self
            .checked_status
            .as_deref()
            .and_then(Freshness::parse)
            .zip(self.checked_at)
            .map(|(status, at)| LastCheck { status, at });
        Memory {
            id: self.id,
            // The CHECK constraint keeps this column to the four kinds.
            kind: Kind::parse(&self.kind).unwrap_or(Kind::Note),
            title: self.title,
            body: self.body,
            tags: self.tags.split_whitespace().map(str::to_owned).collect(),
            headline: self.headline,
            evidence,
            created_at: self.created_at,
            updated_at: self.updated_at,
            hits: u64::try_from(self.hits).unwrap_or(0),
            last_hit_at: self.last_hit_at,
            last_check,
            trashed_at: self.trashed_at,
        }
    }
}

/// Each term becomes a quoted FTS5 string (inner quotes doubled), so user text can never be read
/// as query syntax. `joiner` is `" "` (FTS5's implicit AND) or `" OR "`.
fn fts_match(query: &SearchQuery, joiner: &str) -> Option<String> {
    let terms: Vec<String> = query
        .terms
        .iter()
        .filter(|t| t.chars().any(char::is_alphanumeric))
        .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
        .collect();
    if terms.is_empty() {
        return None;
    }
    let terms = terms.join(joiner);
    Some(match query.kind {
        Some(kind) => format!("kind : \"{kind}\" AND ({terms})"),
        None => terms,
    })
}

impl SqliteBrain {
    /// Up to [`SEARCH_CAP`] + 1 matches of `expr`, newest first, with their BM25 rank. One pass
    /// both counts (up to the cap) and scores, so ranking cost is bounded by the cap however
    /// many memories match.
    fn scored(&self, expr: &str) -> Result<Vec<(i64, f64)>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT rowid, rank FROM memories_fts WHERE memories_fts MATCH ?1
             ORDER BY rowid DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![expr, SEARCH_CAP as i64 + 1], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// Live memories citing a path, oldest first. Driven by the path index: the memories citing the
/// path, then each by rowid. (A correlated `EXISTS` made SQLite scan every memory: 600 page
/// reads and ~4 ms at 10,000 memories, paid on every file read and hook call.)
const ON_PATH: &str = "SELECT m.id, m.kind, m.title FROM memories m
     WHERE m.seq IN (SELECT e.memory_seq FROM evidence e WHERE e.path = ?1)
       AND m.trashed_at IS NULL
     ORDER BY m.created_at, m.seq";

/// What a burst of writes left unmerged is merged as the connection closes.
impl Drop for SqliteBrain {
    fn drop(&mut self) {
        if self.unmerged {
            self.arm();
            self.merge_index_now();
        }
    }
}

/// The operations [`BrainStore`] names, with this backend's own error (callers that know the
/// backend can match on it).
impl SqliteBrain {
    /// Store a new memory under `memory.id` unless that id is taken.
    pub fn insert(&mut self, memory: &Memory) -> Result<Inserted, StoreError> {
        self.arm();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let taken: bool = tx
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM memories WHERE id = ?1)")?
            .query_row([&memory.id], |r| r.get(0))?;
        if taken {
            return Ok(Inserted::IdTaken);
        }
        tx.execute(
            "INSERT INTO memories (id, kind, title, body, tags, headline, created_at, updated_at,
                                   hits, last_hit_at, checked_status, checked_at, trashed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                memory.id,
                memory.kind.as_str(),
                memory.title,
                memory.body,
                memory.tags.join(" "),
                memory.headline,
                memory.created_at,
                memory.updated_at,
                i64::try_from(memory.hits).unwrap_or(i64::MAX),
                memory.last_hit_at,
                memory.last_check.as_ref().map(|c| c.status.as_str()),
                memory.last_check.as_ref().map(|c| c.at),
                memory.trashed_at,
            ],
        )?;
        let seq = tx.last_insert_rowid();
        write_evidence(&tx, seq, &memory.evidence)?;
        tx.commit()?;
        self.merge_index();
        Ok(Inserted::Ok)
    }

    /// After a write: merge the full-text index into one segment when it holds more than
    /// [`MAX_INDEX_SEGMENTS`], unless this connection merged it less than [`MERGE_EVERY`] ago
    /// (a burst of writes, such as a sync or a script saving many, merges about once a second
    /// and once more when it closes).
    ///
    /// Why: every segment costs each query a seek of its own (a term's count and the ranking
    /// of `pith hook`'s nomination, a search). Each write adds a segment and FTS5's own merging
    /// keeps about three per level: 12 for 10,000 memories saved one by one, on which a
    /// failure's nomination took 2.8 times as long as on the merged index. Merging rewrites
    /// the index (11 ms for those 10,000 memories). A failure to merge leaves the index as it
    /// was, still correct, and is not the write's failure.
    fn merge_index(&mut self) {
        let Some(every) = self.merge_every else {
            return;
        };
        self.unmerged = true;
        if self.merged_at.is_some_and(|at| at.elapsed() < every) {
            return;
        }
        self.merge_index_now();
    }

    fn merge_index_now(&mut self) {
        self.unmerged = false;
        let segments = self
            .conn
            .prepare_cached("SELECT count(DISTINCT segid) FROM memories_fts_idx")
            .and_then(|mut stmt| stmt.query_row([], |r| r.get::<_, i64>(0)));
        if segments.is_ok_and(|n| n > MAX_INDEX_SEGMENTS) {
            let _ = self.conn.execute(
                "INSERT INTO memories_fts(memories_fts) VALUES ('optimize')",
                [],
            );
            self.merged_at = Some(Instant::now());
        }
    }

    /// A memory by id, trashed ones included.
    pub fn get(&mut self, id: &str) -> Result<Option<Memory>, StoreError> {
        self.arm();
        match self.seq_of(id)? {
            Some(seq) => self.load(seq),
            None => Ok(None),
        }
    }

    /// Full-text search: every term first, any term when too few memories hold them all.
    pub fn search(&mut self, query: &SearchQuery) -> Result<SearchHits, StoreError> {
        self.arm();
        let (Some(all), Some(any)) = (fts_match(query, " "), fts_match(query, " OR ")) else {
            return Ok(SearchHits {
                total: 0,
                total_capped: false,
                matched: Matched::All,
                ranked_newest: None,
                hits: Vec::new(),
            });
        };
        // Every term first (precise, and cheap to rank); any term when too few have all.
        let mut matched = Matched::All;
        let mut scored = self.scored(&all)?;
        if scored.len() < query.limit && any != all {
            matched = Matched::Any;
            scored = self.scored(&any)?;
        }
        let capped = scored.len() > SEARCH_CAP;
        scored.truncate(SEARCH_CAP);
        let total = scored.len() as u64;
        // BM25 rank: lower is better. Ties go to the newer memory (the order scored came in).
        scored.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut hits = Vec::with_capacity(query.limit.min(scored.len()));
        for &(seq, score) in scored.iter().take(query.limit) {
            if let Some(memory) = self.load(seq)? {
                let snippet = excerpt(&memory.body, &query.terms);
                hits.push(SearchHit {
                    memory,
                    score,
                    snippet,
                });
            }
        }
        Ok(SearchHits {
            total,
            total_capped: capped,
            matched,
            ranked_newest: capped.then_some(SEARCH_CAP),
            hits,
        })
    }

    /// Live memories of `query.kind` whose headline holds every selective term (one fewer
    /// than [`COMMON_HEADLINE_TERM`] headlines hold), best first; when none does, those holding
    /// any. Common terms never nominate: only memories sharing what sets a failure apart are
    /// ranked, so the cost does not grow with how many headlines say `FAILED` or `test`.
    pub fn by_headline(&mut self, query: &HeadlineQuery) -> Result<Vec<Memory>, StoreError> {
        self.arm();
        let mut selective: Vec<String> = Vec::new();
        for term in query
            .terms
            .iter()
            .filter(|t| t.chars().any(char::is_alphanumeric))
        {
            let quoted = format!("\"{}\"", term.replace('"', "\"\""));
            if !selective.contains(&quoted)
                && self.headlines_holding(&quoted, COMMON_HEADLINE_TERM)? < COMMON_HEADLINE_TERM
            {
                selective.push(quoted);
            }
        }
        if selective.is_empty() {
            return Ok(Vec::new());
        }
        // Headlines are mostly on fixes; other kinds are dropped after ranking, so rank a few
        // more than asked for.
        let wanted = query.limit.saturating_mul(4);
        let all = self.of_kind(
            self.best(&format!("headline : ({})", selective.join(" ")), wanted)?,
            query,
        )?;
        if !all.is_empty() {
            return Ok(all);
        }
        let any = self.best(&format!("headline : ({})", selective.join(" OR ")), wanted)?;
        self.of_kind(any, query)
    }

    /// The live memories of `query.kind` among `seqs`, in order, at most `query.limit`.
    fn of_kind(&self, seqs: Vec<i64>, query: &HeadlineQuery) -> Result<Vec<Memory>, StoreError> {
        let mut out = Vec::with_capacity(query.limit);
        for seq in seqs {
            if out.len() == query.limit {
                break;
            }
            if let Some(m) = self.load(seq)?
                && m.kind == query.kind
                && m.trashed_at.is_none()
            {
                out.push(m);
            }
        }
        Ok(out)
    }

    /// The best `limit` matches of `expr` by BM25 (few match: every caller narrows first),
    /// sorted here: `ORDER BY rank` has FTS5 prepare a statement of its own for every query
    /// (its sorter), a tenth of a `pith hook` call's own time.
    fn best(&self, expr: &str, limit: usize) -> Result<Vec<i64>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT rowid, {RANK} FROM memories_fts WHERE memories_fts MATCH ?1"
        ))?;
        let mut scored: Vec<(i64, f64)> = stmt
            .query_map(params![expr], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        // Lower is better; ties keep the order FTS5 gave (by rowid).
        scored.sort_by(|a, b| a.1.total_cmp(&b.1));
        Ok(scored.into_iter().take(limit).map(|(seq, _)| seq).collect())
    }

    /// How many live headlines hold `term` (a quoted FTS5 string), counting no further than
    /// `cap`.
    fn headlines_holding(&self, term: &str, cap: usize) -> Result<usize, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT count(*) FROM (SELECT 1 FROM memories_fts WHERE memories_fts MATCH ?1 LIMIT ?2)",
        )?;
        let n: i64 = stmt.query_row(params![format!("headline : {term}"), cap as i64], |r| {
            r.get(0)
        })?;
        Ok(usize::try_from(n).unwrap_or(cap))
    }

    /// Memories newest first (live ones, or the trash).
    pub fn list(&mut self, filter: &ListFilter) -> Result<Vec<Memory>, StoreError> {
        self.arm();
        let seqs: Vec<i64> = {
            let mut stmt = self.conn.prepare_cached(
                "SELECT seq FROM memories
                 WHERE (trashed_at IS NOT NULL) = ?1 AND (?2 IS NULL OR kind = ?2)
                 ORDER BY created_at DESC, seq DESC LIMIT ?3",
            )?;
            let limit = filter
                .limit
                .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
            stmt.query_map(
                params![filter.trashed, filter.kind.map(Kind::as_str), limit],
                |r| r.get(0),
            )?
            .collect::<Result<_, _>>()?
        };
        let mut out = Vec::with_capacity(seqs.len());
        for seq in seqs {
            if let Some(m) = self.load(seq)? {
                out.push(m);
            }
        }
        Ok(out)
    }

    /// Live memories with evidence on `path` (workspace-relative), oldest first.
    pub fn on_path(&mut self, path: &str) -> Result<Vec<MemoryRef>, StoreError> {
        self.arm();
        let mut stmt = self.conn.prepare_cached(ON_PATH)?;
        let rows = stmt.query_map([path], |r| {
            let kind: String = r.get(1)?;
            Ok(MemoryRef {
                id: r.get(0)?,
                kind: Kind::parse(&kind).unwrap_or(Kind::Note),
                title: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Move each hit counter by one: called only when memories were returned to a caller.
    pub fn credit(&mut self, ids: &[&str], at: i64) -> Result<(), StoreError> {
        self.arm();
        if ids.is_empty() {
            return Ok(());
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut stmt = tx.prepare_cached(
                "UPDATE memories SET hits = hits + 1, last_hit_at = ?2 WHERE id = ?1",
            )?;
            for id in ids {
                stmt.execute(params![id, at])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Trash (`Some(time)`) or restore (`None`). Returns false for an unknown id.
    pub fn set_trashed(&mut self, id: &str, trashed_at: Option<i64>) -> Result<bool, StoreError> {
        self.arm();
        let n = self.conn.execute(
            "UPDATE memories SET trashed_at = ?2 WHERE id = ?1",
            params![id, trashed_at],
        )?;
        self.merge_index();
        Ok(n > 0)
    }

    /// Replace the evidence list and record a verification. Returns false for an unknown id.
    pub fn record_check(
        &mut self,
        id: &str,
        evidence: &[Evidence],
        check: &LastCheck,
    ) -> Result<bool, StoreError> {
        self.arm();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let seq: Option<i64> = tx
            .prepare_cached("SELECT seq FROM memories WHERE id = ?1")?
            .query_row([id], |r| r.get(0))
            .optional()?;
        let Some(seq) = seq else { return Ok(false) };
        tx.execute(
            "UPDATE memories SET checked_status = ?2, checked_at = ?3 WHERE seq = ?1",
            params![seq, check.status.as_str(), check.at],
        )?;
        rewrite_read_evidence(&tx, seq, evidence)?;
        tx.commit()?;
        Ok(true)
    }

    /// Number of live memories.
    pub fn count(&mut self) -> Result<u64, StoreError> {
        self.arm();
        let n: i64 = self.conn.query_row(
            "SELECT count(*) FROM memories WHERE trashed_at IS NULL",
            [],
            |r| r.get(0),
        )?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

/// A memory as the team brain carries it: what it says (no hit counters or verification:
/// those are each machine's own) and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The memory.
    pub memory: Memory,
    /// Its version: the time of its last change, ms since the Unix epoch (the newer wins).
    pub changed_ms: i64,
}

/// What applying memories from the team brain did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Memories this brain did not have.
    pub new: u64,
    /// Memories replaced by a newer version.
    pub updated: u64,
    /// Memories left as they were: this brain's version is as new or newer.
    pub kept: u64,
    /// Memories whose id this brain holds for a different memory (another creation time):
    /// left out, both kept as they are.
    pub collisions: u64,
}

/// The team brain's sync: changes since a cursor out, other machines' memories in.
impl SqliteBrain {
    /// At most `limit` memories changed here after local change `rev`, oldest change first,
    /// each with its change number.
    pub fn changed_after(
        &self,
        rev: i64,
        limit: usize,
    ) -> Result<Vec<(i64, Versioned)>, StoreError> {
        self.arm();
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, rev, changed_ms FROM memories WHERE rev > ?1 ORDER BY rev LIMIT ?2",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let found: Vec<(i64, i64, i64)> = stmt
            .query_map(params![rev, limit], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<Result<_, _>>()?;
        let mut out = Vec::with_capacity(found.len());
        for (seq, rev, changed_ms) in found {
            if let Some(mut memory) = self.load(seq)? {
                memory.hits = 0;
                memory.last_hit_at = None;
                memory.last_check = None;
                out.push((rev, Versioned { memory, changed_ms }));
            }
        }
        Ok(out)
    }

    /// Apply memories from the team brain in one transaction, by the rule: a memory is its
    /// id; the newer version (`changed_ms`) wins, and a tie keeps this brain's. Hit counters
    /// and verifications stay as they are here; evidence is taken as recorded where it was
    /// saved, without its file times, so it is checked against this checkout's files.
    pub fn apply_remote(&mut self, items: &[Versioned]) -> Result<Applied, StoreError> {
        self.arm();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut applied = Applied::default();
        for Versioned {
            memory: m,
            changed_ms,
        } in items
        {
            let here: Option<(i64, i64, i64)> = tx
                .prepare_cached("SELECT seq, changed_ms, created_at FROM memories WHERE id = ?1")?
                .query_row([&m.id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()?;
            let evidence: Vec<Evidence> = m
                .evidence
                .iter()
                .map(|e| Evidence {
                    mtime_ns: None,
                    ..e.clone()
                })
                .collect();
            let seq = match here {
                Some((_, _, created)) if created != m.created_at => {
                    applied.collisions += 1;
                    continue;
                }
                Some((_, local, _)) if local >= *changed_ms => {
                    applied.kept += 1;
                    continue;
                }
                Some((seq, _, _)) => {
                    tx.prepare_cached(
                        "UPDATE memories SET kind = ?2, title = ?3, body = ?4, tags = ?5,
                            headline = ?6, updated_at = ?7, trashed_at = ?8, changed_ms = ?9
                         WHERE seq = ?1",
                    )?
                    .execute(params![
                        seq,
                        m.kind.as_str(),
                        m.title,
                        m.body,
                        m.tags.join(" "),
                        m.headline,
                        m.updated_at,
                        m.trashed_at,
                        changed_ms,
                    ])?;
                    applied.updated += 1;
                    seq
                }
                None => {
                    tx.prepare_cached(
                        "INSERT INTO memories (id, kind, title, body, tags, headline, created_at,
                            updated_at, trashed_at, changed_ms)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    )?
                    .execute(params![
                        m.id,
                        m.kind.as_str(),
                        m.title,
                        m.body,
                        m.tags.join(" "),
                        m.headline,
                        m.created_at,
                        m.updated_at,
                        m.trashed_at,
                        changed_ms,
                    ])?;
                    applied.new += 1;
                    tx.last_insert_rowid()
                }
            };
            write_evidence(&tx, seq, &evidence)?;
        }
        tx.commit()?;
        self.merge_index();
        Ok(applied)
    }

    /// A value the sync keeps here (its cursors), 0 if never set.
    pub fn sync_value(&self, name: &str) -> Result<i64, StoreError> {
        self.arm();
        Ok(self
            .conn
            .prepare_cached("SELECT value FROM sync_state WHERE name = ?1")?
            .query_row([name], |r| r.get(0))
            .optional()?
            .unwrap_or(0))
    }

    /// Set a value the sync keeps here.
    pub fn set_sync_value(&mut self, name: &str, value: i64) -> Result<(), StoreError> {
        self.arm();
        self.conn.execute(
            "INSERT INTO sync_state (name, value) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            params![name, value],
        )?;
        Ok(())
    }
}

/// The brain's view of this backend: the methods above, their errors wrapped.
impl BrainStore for SqliteBrain {
    fn insert(&mut self, memory: &Memory) -> Result<Inserted, BackendError> {
        Ok(SqliteBrain::insert(self, memory)?)
    }

    fn get(&mut self, id: &str) -> Result<Option<Memory>, BackendError> {
        Ok(SqliteBrain::get(self, id)?)
    }

    fn search(&mut self, query: &SearchQuery) -> Result<SearchHits, BackendError> {
        Ok(SqliteBrain::search(self, query)?)
    }

    fn list(&mut self, filter: &ListFilter) -> Result<Vec<Memory>, BackendError> {
        Ok(SqliteBrain::list(self, filter)?)
    }

    fn by_headline(&mut self, query: &HeadlineQuery) -> Result<Vec<Memory>, BackendError> {
        Ok(SqliteBrain::by_headline(self, query)?)
    }

    fn on_path(&mut self, path: &str) -> Result<Vec<MemoryRef>, BackendError> {
        Ok(SqliteBrain::on_path(self, path)?)
    }

    fn credit(&mut self, ids: &[&str], at: i64) -> Result<(), BackendError> {
        Ok(SqliteBrain::credit(self, ids, at)?)
    }

    fn set_trashed(&mut self, id: &str, trashed_at: Option<i64>) -> Result<bool, BackendError> {
        Ok(SqliteBrain::set_trashed(self, id, trashed_at)?)
    }

    fn record_check(
        &mut self,
        id: &str,
        evidence: &[Evidence],
        check: &LastCheck,
    ) -> Result<bool, BackendError> {
        Ok(SqliteBrain::record_check(self, id, evidence, check)?)
    }

    fn count(&mut self) -> Result<u64, BackendError> {
        Ok(SqliteBrain::count(self)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(id: &str, kind: Kind, title: &str, body: &str) -> Memory {
        Memory {
            id: id.to_owned(),
            kind,
            title: title.to_owned(),
            body: body.to_owned(),
            tags: vec!["sqlite".to_owned()],
            headline: None,
            evidence: vec![Evidence {
                path: "src/lib.rs".to_owned(),
                lines: Some(LineRange { start: 3, end: 9 }),
                hash: Some("ab".repeat(32)),
                size: Some(120),
                mtime_ns: Some(1),
            }],
            created_at: 100,
            updated_at: 100,
            hits: 0,
            last_hit_at: None,
            last_check: None,
            trashed_at: None,
        }
    }

    fn terms(words: &[&str]) -> SearchQuery {
        SearchQuery {
            terms: words.iter().map(|w| (*w).to_owned()).collect(),
            kind: None,
            limit: 10,
        }
    }

    #[test]
    fn insert_get_roundtrip_and_taken_id() {
        let mut s = SqliteBrain::in_memory().unwrap();
        let m = memory("m-0001", Kind::Fix, "Retry on busy", "use a busy timeout");
        assert_eq!(s.insert(&m).unwrap(), Inserted::Ok);
        assert_eq!(s.insert(&m).unwrap(), Inserted::IdTaken);
        assert_eq!(s.get("m-0001").unwrap().unwrap(), m);
        assert!(s.get("m-ffff").unwrap().is_none());
    }

    fn segments(b: &SqliteBrain) -> i64 {
        b.conn
            .query_row(
                "SELECT count(DISTINCT segid) FROM memories_fts_idx",
                [],
                |r| r.get(0),
            )
            .unwrap()
    }

    #[test]
    fn a_burst_of_saves_leaves_the_index_merged_when_the_brain_closes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("brain.db");
        let mut b = SqliteBrain::open(&path).unwrap();
        // A burst: one merge in it at most (the first write's), so segments pile up...
        b.merge_every = Some(Duration::from_secs(3600));
        for i in 0..60 {
            b.insert(&memory(&format!("m-{i}"), Kind::Note, "retry upstream", ""))
                .unwrap();
        }
        assert!(segments(&b) > MAX_INDEX_SEGMENTS, "{}", segments(&b));
        // ...and are merged as it closes.
        drop(b);
        let b = SqliteBrain::open_existing(&path).unwrap();
        assert_eq!(segments(&b), 1);
        drop(b);
        // A connection that does not merge (the hook's writer) leaves its writes' segments, and
        // one that only reads changes nothing as it closes.
        let mut hook =
            SqliteBrain::open_existing_waiting(&path, Duration::from_millis(100)).unwrap();
        let mut saved = 60;
        while segments(&hook) <= MAX_INDEX_SEGMENTS && saved < 200 {
            hook.insert(&memory(
                &format!("m-{saved}"),
                Kind::Note,
                "retry upstream",
                "",
            ))
            .unwrap();
            saved += 1;
        }
        let left = segments(&hook);
        assert!(left > MAX_INDEX_SEGMENTS, "{left} after {saved} saves");
        drop(hook);
        let mut reader = SqliteBrain::open_read_only(&path, Duration::from_millis(100)).unwrap();
        let found = reader
            .search(&SearchQuery {
                terms: vec!["upstream".into()],
                kind: None,
                limit: 5,
            })
            .unwrap();
        assert_eq!(found.total, saved);
        drop(reader);
        assert_eq!(segments(&SqliteBrain::open_existing(&path).unwrap()), left);
    }

    #[test]
    fn the_index_stays_in_few_segments_as_memories_are_saved_and_trashed() {
        let mut b = SqliteBrain::in_memory().unwrap();
        // Writes further apart than a burst's.
        b.merge_every = Some(Duration::ZERO);
        let mut most = 0;
        for i in 0..100 {
            let title = format!("retry the upstream {i}");
            b.insert(&memory(&format!("m-{i}"), Kind::Note, &title, "body"))
                .unwrap();
            if i % 3 == 0 {
                b.set_trashed(&format!("m-{i}"), Some(5)).unwrap();
            }
            most = most.max(segments(&b));
        }
        assert!(most <= MAX_INDEX_SEGMENTS, "{most} segments");
        // Merged, the index answers as before: the live ones, every one found.
        let found = b
            .search(&SearchQuery {
                terms: vec!["upstream".into()],
                kind: None,
                limit: 100,
            })
            .unwrap();
        assert_eq!(found.total, 66);
    }

    #[test]
    fn best_orders_by_the_rank_the_schema_sets() {
        let mut b = SqliteBrain::in_memory().unwrap();
        let configured: String = b
            .conn
            .query_row(
                "SELECT v FROM memories_fts_config WHERE k = 'rank'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            RANK.replace("memories_fts, ", ""),
            configured,
            "RANK calls the schema's rank"
        );
        let headlines = [
            "FAILED test_calc.py::test_add - assert -1 == 5",
            "FAILED test_calc.py::test_sub - assert 3 == 1",
            "error[E0308]: mismatched types calc add",
            "calc add calc add: TypeError",
            "FAILED tests/test_add.py::test_add_zero - assert 0 == 1",
        ];
        for (i, h) in headlines.iter().enumerate() {
            let mut m = memory(&format!("m-{i}"), Kind::Fix, &format!("fix {i}"), "add");
            m.headline = Some((*h).to_owned());
            b.insert(&m).unwrap();
        }
        for expr in [
            "headline : (\"calc\" OR \"add\")",
            "headline : (\"test\")",
            "add",
        ] {
            let by_rank: Vec<i64> = b
                .conn
                .prepare("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?1 ORDER BY rank")
                .unwrap()
                .query_map([expr], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert!(by_rank.len() >= 2, "{expr}: {by_rank:?}");
            assert_eq!(b.best(expr, 10).unwrap(), by_rank, "{expr}");
            assert_eq!(b.best(expr, 1).unwrap(), by_rank[..1], "{expr}");
        }
    }

    #[test]
    fn search_ranks_title_over_body_and_filters_kind() {
        let mut s = SqliteBrain::in_memory().unwrap();
        s.insert(&memory("m-1", Kind::Note, "Unrelated", "the ledger queue"))
            .unwrap();
        s.insert(&memory("m-2", Kind::Fix, "Ledger queue drops rows", "x"))
            .unwrap();
        let found = s.search(&terms(&["ledger"])).unwrap();
        assert_eq!(found.total, 2);
        let ids: Vec<_> = found.hits.iter().map(|h| h.memory.id.as_str()).collect();
        assert_eq!(ids, ["m-2", "m-1"]);

        let mut q = terms(&["ledger"]);
        q.kind = Some(Kind::Note);
        let found = s.search(&q).unwrap();
        assert_eq!(found.total, 1);
        assert_eq!(found.hits[0].memory.id, "m-1");
    }

    #[test]
    fn all_terms_first_then_any_term() {
        let mut s = SqliteBrain::in_memory().unwrap();
        s.insert(&memory("m-1", Kind::Note, "sqlite busy timeout", ""))
            .unwrap();
        s.insert(&memory("m-2", Kind::Note, "pool timeout", ""))
            .unwrap();
        s.insert(&memory("m-3", Kind::Note, "busy loop", ""))
            .unwrap();
        let mut q = terms(&["busy", "timeout"]);
        q.limit = 1;
        let found = s.search(&q).unwrap();
        assert_eq!((found.matched, found.total), (Matched::All, 1));
        assert_eq!(found.hits[0].memory.id, "m-1");
        q.limit = 5;
        let found = s.search(&q).unwrap();
        assert_eq!((found.matched, found.total), (Matched::Any, 3));
        assert_eq!(found.hits[0].memory.id, "m-1", "all-term match ranks first");
    }

    #[test]
    fn broad_queries_rank_the_newest_matches_and_say_so() {
        let mut s = SqliteBrain::in_memory().unwrap();
        for i in 0..SEARCH_CAP + 50 {
            let title = if i == 10 {
                "common common common"
            } else {
                "common"
            };
            s.insert(&memory(&format!("m-{i}"), Kind::Note, title, ""))
                .unwrap();
        }
        let found = s.search(&terms(&["common"])).unwrap();
        assert!(found.total_capped);
        assert_eq!(found.total, SEARCH_CAP as u64);
        assert_eq!(found.ranked_newest, Some(SEARCH_CAP));
        assert_eq!(found.hits.len(), 10);
        // The old best match is outside the newest SEARCH_CAP, so it is not among the hits.
        assert!(found.hits.iter().all(|h| h.memory.id != "m-10"));
        let mut few = terms(&["common"]);
        few.kind = Some(Kind::Fix);
        let found = s.search(&few).unwrap();
        assert_eq!((found.total, found.total_capped), (0, false));
    }

    #[test]
    fn query_syntax_in_terms_is_inert() {
        let mut s = SqliteBrain::in_memory().unwrap();
        s.insert(&memory("m-1", Kind::Note, "NEAR AND OR", "\"quoted\" body"))
            .unwrap();
        for t in ["\"", "AND", "title:x", "(", "*", "NEAR(a b)", "-x"] {
            s.search(&terms(&[t])).unwrap();
        }
        assert_eq!(s.search(&terms(&["\"quoted\""])).unwrap().total, 1);
    }

    #[test]
    fn memories_on_a_path_are_found_through_the_path_index() {
        let mut s = SqliteBrain::in_memory().unwrap();
        for i in 0..50 {
            let mut m = memory(&format!("m-{i}"), Kind::Note, "Note", "");
            m.evidence[0].path = format!("src/f{}.rs", i % 5);
            m.created_at = 100 - i;
            s.insert(&m).unwrap();
        }
        // Oldest first, trashed ones left out.
        s.set_trashed("m-45", Some(1)).unwrap();
        let ids: Vec<String> = s
            .on_path("src/f0.rs")
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(
            ids,
            [
                "m-40", "m-35", "m-30", "m-25", "m-20", "m-15", "m-10", "m-5", "m-0"
            ]
        );
        // Not a scan of every memory: a hook and every file read pay this query.
        let plan: Vec<String> = s
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {ON_PATH}"))
            .unwrap()
            .query_map(["src/f0.rs"], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter().any(|p| p.contains("evidence_by_path")),
            "{plan:?}"
        );
        assert!(!plan.iter().any(|p| p == "SCAN m"), "{plan:?}");
    }

    #[test]
    fn by_headline_takes_every_term_else_the_selective_ones_never_only_common_ones() {
        let mut s = SqliteBrain::in_memory().unwrap();
        let mut fix = |id: &str, headline: &str| {
            let mut m = memory(id, Kind::Fix, "Fix", "");
            m.headline = Some(headline.to_owned());
            s.insert(&m).unwrap();
        };
        // Many fixes share the common words of a pytest failure.
        for i in 0..COMMON_HEADLINE_TERM + 10 {
            fix(
                &format!("m-c{i}"),
                &format!("FAILED tests/test_x{i}.py::test_y - assert"),
            );
        }
        fix("m-add", "FAILED test_calc.py::test_add - assert -1 == 5");
        fix("m-sub", "FAILED test_calc.py::test_sub - assert");
        let mut note = memory("m-note", Kind::Note, "calc add", "");
        note.headline = Some("FAILED test_calc.py::test_add - assert -1 == 5".into());
        s.insert(&note).unwrap();
        let ids = |s: &mut SqliteBrain, terms: &[&str]| -> Vec<String> {
            s.by_headline(&HeadlineQuery {
                terms: terms.iter().map(|t| (*t).to_owned()).collect(),
                kind: Kind::Fix,
                limit: 10,
            })
            .unwrap()
            .into_iter()
            .map(|m| m.id)
            .collect()
        };
        // Every selective term (calc, add): only that fix (not the note with the same headline).
        assert_eq!(
            ids(&mut s, &["failed", "test", "calc", "py", "add", "assert"]),
            ["m-add"]
        );
        // No headline holds every selective term (calc, add, keyerror): any of them nominates.
        let mut got = ids(&mut s, &["failed", "test", "calc", "py", "add", "keyerror"]);
        got.sort();
        assert_eq!(got, ["m-add", "m-sub"]);
        // A trashed fix is not nominated.
        s.set_trashed("m-add", Some(1)).unwrap();
        assert_eq!(ids(&mut s, &["calc", "add"]), ["m-sub"]);
        // Only common terms and one no headline holds: nothing.
        assert!(ids(&mut s, &["failed", "test", "py", "nowhere"]).is_empty());
    }

    #[test]
    fn stemming_matches_word_forms() {
        let mut s = SqliteBrain::in_memory().unwrap();
        s.insert(&memory("m-1", Kind::Note, "Timeouts everywhere", ""))
            .unwrap();
        assert_eq!(s.search(&terms(&["timeout"])).unwrap().total, 1);
    }

    #[test]
    fn trash_leaves_the_index_and_restore_returns() {
        let mut s = SqliteBrain::in_memory().unwrap();
        s.insert(&memory("m-1", Kind::Note, "Cache keys", ""))
            .unwrap();
        assert!(s.set_trashed("m-1", Some(5)).unwrap());
        assert_eq!(s.search(&terms(&["cache"])).unwrap().total, 0);
        assert!(s.on_path("src/lib.rs").unwrap().is_empty());
        assert_eq!(s.count().unwrap(), 0);
        let trash = s
            .list(&ListFilter {
                trashed: true,
                ..ListFilter::default()
            })
            .unwrap();
        assert_eq!(trash.len(), 1);
        assert_eq!(trash[0].trashed_at, Some(5));
        assert!(s.set_trashed("m-1", None).unwrap());
        assert_eq!(s.search(&terms(&["cache"])).unwrap().total, 1);
        assert!(!s.set_trashed("m-404", None).unwrap());
    }

    #[test]
    fn credit_moves_only_named_counters_and_keeps_index() {
        let mut s = SqliteBrain::in_memory().unwrap();
        s.insert(&memory("m-1", Kind::Note, "Alpha", "")).unwrap();
        s.insert(&memory("m-2", Kind::Note, "Beta", "")).unwrap();
        s.credit(&["m-1", "m-1"], 7).unwrap();
        assert_eq!(s.get("m-1").unwrap().unwrap().hits, 2);
        assert_eq!(s.get("m-1").unwrap().unwrap().last_hit_at, Some(7));
        assert_eq!(s.get("m-2").unwrap().unwrap().hits, 0);
        assert_eq!(s.search(&terms(&["alpha"])).unwrap().total, 1);
    }

    #[test]
    fn record_check_replaces_evidence() {
        let mut s = SqliteBrain::in_memory().unwrap();
        s.insert(&memory("m-1", Kind::Note, "Alpha", "")).unwrap();
        let check = LastCheck {
            status: Freshness::Stale,
            at: 9,
        };
        assert!(s.record_check("m-1", &[], &check).unwrap());
        let m = s.get("m-1").unwrap().unwrap();
        assert!(m.evidence.is_empty());
        assert_eq!(m.last_check, Some(check));
    }

    /// Schema 2 (the team brain's change tracking) over a brain schema 1 wrote: its memories
    /// are changes to send, versioned by their last update; afterwards what a memory says and
    /// its trash move the version, hits do not, and a synced write keeps the version it brings.
    #[test]
    fn schema_two_tracks_changes_and_leaves_hits_and_synced_writes_alone() {
        let (_dir, path, old) = planted_old();
        drop(old);
        let mut s = SqliteBrain::open(&path).unwrap();
        let changed = s.changed_after(0, 10).unwrap();
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].1.changed_ms, 20_000);
        let rev = changed[0].0;

        s.credit(&["m-old1"], 99).unwrap();
        assert!(
            s.changed_after(rev, 10).unwrap().is_empty(),
            "hits are local"
        );
        assert!(s.set_trashed("m-old1", Some(5)).unwrap());
        let after_trash = s.changed_after(rev, 10).unwrap();
        assert_eq!(after_trash.len(), 1);
        assert!(after_trash[0].1.changed_ms > 20_000);
        assert_eq!(after_trash[0].1.memory.hits, 0, "hits never travel");

        let mut remote = memory("m-new1", Kind::Fix, "from elsewhere", "b");
        remote.hits = 7;
        let applied = s
            .apply_remote(&[Versioned {
                memory: remote,
                changed_ms: 123,
            }])
            .unwrap();
        assert_eq!(applied.new, 1);
        let rev = after_trash[0].0;
        assert!(
            s.changed_after(rev, 10).unwrap().is_empty(),
            "a synced memory is not sent back as a change"
        );
        let got = s.get("m-new1").unwrap().unwrap();
        assert_eq!((got.hits, got.evidence[0].mtime_ns), (0, None));
    }

    /// A brain file with one memory, and a raw connection to change its schema as a stranger's
    /// repository could.
    fn planted() -> (tempfile::TempDir, std::path::PathBuf, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("brain.db");
        SqliteBrain::open(&path)
            .unwrap()
            .insert(&memory("m-1", Kind::Note, "a note", ""))
            .unwrap();
        let conn = Connection::open(&path).unwrap();
        (dir, path, conn)
    }

    #[test]
    fn a_brain_whose_table_is_a_recursive_view_is_refused_before_any_read() {
        let (_dir, path, conn) = planted();
        conn.execute_batch(
            "DROP TABLE evidence;
             CREATE VIEW evidence(memory_seq, ord, path, line_start, line_end, hash, size,
                                  mtime_ns) AS
             WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)
             SELECT x, 0, 'README.md', NULL, NULL, NULL, NULL, NULL FROM r;",
        )
        .unwrap();
        drop(conn);
        for opened in [
            SqliteBrain::open_read_only(&path, Duration::from_millis(100)).map(drop),
            SqliteBrain::open_existing(&path).map(drop),
            SqliteBrain::open(&path).map(drop),
        ] {
            let err = opened.unwrap_err();
            assert!(
                err.to_string()
                    .contains("`evidence` is a view, not a table"),
                "{err}"
            );
        }
    }

    #[test]
    fn an_object_pith_does_not_make_is_refused_with_its_name_escaped() {
        let (_dir, path, conn) = planted();
        conn.execute_batch("CREATE TABLE \"x\x1b[31m\" (a);")
            .unwrap();
        drop(conn);
        let err = SqliteBrain::open_existing(&path).map(drop).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("that pith does not make"), "{text}");
        assert!(!text.contains('\x1b'), "escaped: {text:?}");
    }

    #[test]
    fn a_statement_past_the_deadline_is_interrupted() {
        let (_dir, path, conn) = planted();
        // pith's own trigger, by name, with an endless body: it passes the schema check and
        // runs on pith's next save.
        conn.execute_batch(
            "DROP TRIGGER memories_changed_insert;
             CREATE TRIGGER memories_changed_insert AFTER INSERT ON memories BEGIN
                 SELECT count(*) FROM (WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL
                                       SELECT x + 1 FROM r) SELECT x FROM r);
             END;",
        )
        .unwrap();
        drop(conn);
        let mut brain =
            SqliteBrain::open_existing_waiting(&path, Duration::from_millis(100)).unwrap();
        let err = brain
            .insert(&memory("m-2", Kind::Note, "another", ""))
            .unwrap_err();
        assert!(err.to_string().contains("interrupt"), "{err}");
        // The next call has its own time, and reads work.
        assert!(brain.get("m-1").unwrap().is_some());
    }

    /// Each piece of evidence is a file hashed on every check: a brain from a project that
    /// gave one memory 100,000 of them (all one large file) had every `pith memory list` hash
    /// terabytes. Only as many as pith saves are read.
    #[test]
    fn a_memory_gives_at_most_the_evidence_pith_saves() {
        let (_dir, path, conn) = planted();
        conn.execute_batch(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
             INSERT INTO evidence (memory_seq, ord, path, line_start, line_end, hash, size,
                                   mtime_ns)
             SELECT 1, i, 'big.bin', NULL, NULL, 'ab', 1, NULL FROM n;",
        )
        .unwrap();
        drop(conn);
        let mut s = SqliteBrain::open_existing(&path).unwrap();
        let m = s.get("m-1").unwrap().unwrap();
        assert_eq!(m.evidence.len(), pith_brain::MAX_EVIDENCE);
        // A check writes back what it read, and leaves the rest (an older pith's memory).
        let check = LastCheck {
            status: Freshness::Fresh,
            at: 9,
        };
        assert!(s.record_check("m-1", &m.evidence, &check).unwrap());
        let rows: i64 = s
            .conn
            .query_row("SELECT count(*) FROM evidence", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1001);
    }

    /// A brain at schema 1 with one memory, and a raw connection to it: what a repository can
    /// commit for the next migration to run on.
    fn planted_old() -> (tempfile::TempDir, std::path::PathBuf, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("brain.db");
        let old = crate::sqlite::open(&path, &MIGRATIONS[..1]).unwrap();
        old.execute(
            "INSERT INTO memories (id, kind, title, created_at, updated_at)
             VALUES ('m-old1', 'note', 'from schema 1', 10, 20)",
            [],
        )
        .unwrap();
        (dir, path, old)
    }

    /// An endless statement, for a planted trigger's body.
    const SPIN: &str = "SELECT count(*) FROM (WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL \
                        SELECT x + 1 FROM r) SELECT x FROM r)";

    /// Migration 2 updates every memory: a trigger a stranger planted on that update ran with
    /// no guard at all (the check came after the migration), and hung every opener.
    #[test]
    fn an_old_brains_planted_trigger_is_refused_before_the_migration_runs() {
        let (_dir, path, old) = planted_old();
        old.execute_batch(&format!(
            "CREATE TRIGGER spin AFTER UPDATE ON memories BEGIN {SPIN}; END;"
        ))
        .unwrap();
        drop(old);
        for opened in [
            SqliteBrain::open(&path).map(drop),
            SqliteBrain::open_existing(&path).map(drop),
            SqliteBrain::open_existing_waiting(&path, Duration::from_millis(100)).map(drop),
        ] {
            let err = opened.unwrap_err().to_string();
            assert!(
                err.contains("trigger spin that pith does not make"),
                "{err}"
            );
        }
        let version: i64 = Connection::open(&path)
            .unwrap()
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, 1, "not migrated");
    }

    /// The same under one of pith's own names: it passes the check, and the migration runs
    /// under the deadline, which stops it.
    #[test]
    fn an_old_brains_trigger_under_piths_name_runs_under_the_deadline() {
        let (_dir, path, old) = planted_old();
        old.execute_batch(&format!(
            "DROP TRIGGER memories_fts_reindex;
             CREATE TRIGGER memories_fts_reindex AFTER UPDATE ON memories BEGIN {SPIN}; END;"
        ))
        .unwrap();
        drop(old);
        let err = SqliteBrain::open_existing_waiting(&path, Duration::from_millis(100))
            .map(drop)
            .unwrap_err();
        match err {
            StoreError::Migrate {
                version, source, ..
            } => {
                assert_eq!(version, 2);
                assert!(pith_sqlite_guard::interrupted(&source), "{source}");
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn two_connections_write_concurrently() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".pith/brain.db");
        drop(SqliteBrain::open(&path).unwrap());
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let mut s = SqliteBrain::open(&path).unwrap();
                    for i in 0..100 {
                        let id = format!("m-{w}-{i}");
                        let m = memory(&id, Kind::Note, "Concurrent write", "body");
                        assert_eq!(s.insert(&m).unwrap(), Inserted::Ok);
                        s.credit(&[&id], i).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let mut s = SqliteBrain::open(&path).unwrap();
        assert_eq!(s.count().unwrap(), 200);
        assert_eq!(s.search(&terms(&["concurrent"])).unwrap().total, 200);
    }
}
