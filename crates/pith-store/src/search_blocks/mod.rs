//! Tool search blocks pith took out of answers, kept until the session's next requests put
//! them back (`pith_transform::search_trip`). Reads come from memory (the request path never
//! waits on the disk); every block kept is also written, on a thread of its own, to a small
//! SQLite file, so a restart of pith loses nothing. Bounded in entries and age, in memory and
//! on disk: an expired block is gone, and the request it was for fails open.
//!
//! With a team store (`[store] url`), several instances behind a load balancer share the
//! blocks: each one kept is also written to the store before its answer goes on (the
//! [`Sharing`] the caller holds the answer for), and a request naming a `tool_use` this
//! instance has not seen asks the store first ([`SearchBlocks::fetch`]). Both are bounded in
//! time; past the bound the request fails open, and the caller records it.

pub mod postgres;

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};

use crate::clock::now_ms;
use crate::sqlite::{self, StoreError};
use postgres::TeamSearchBlocks;

const MIGRATIONS: &[&str] = &["CREATE TABLE search_blocks (
        session     TEXT NOT NULL,
        tool_use_id TEXT NOT NULL,
        blocks      TEXT NOT NULL,
        ts_ms       INTEGER NOT NULL,
        PRIMARY KEY (session, tool_use_id)
    ) WITHOUT ROWID;
    CREATE INDEX search_blocks_ts ON search_blocks (ts_ms);"];

/// Keep a tool search's blocks, replacing what its id had (both databases: SQLite's numbered
/// parameters, `$N` on PostgreSQL): `session`, `tool_use_id`, `blocks`, `ts_ms`.
const PUT: &str = "INSERT INTO search_blocks (session, tool_use_id, blocks, ts_ms)
    VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (session, tool_use_id) DO UPDATE SET blocks = excluded.blocks, ts_ms = excluded.ts_ms";
/// Forget what was kept before `?1` (ms since the Unix epoch), on both databases.
const FORGET_OLDER: &str = "DELETE FROM search_blocks WHERE ts_ms < ?1";

/// How much is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Entries (one per `tool_use` a search preceded); the oldest go first.
    pub max_entries: usize,
    /// Age after which an entry is gone.
    pub max_age: Duration,
}

impl Default for Limits {
    /// 10,000 entries (a few KB each: tens of MB at most), 7 days: longer than a session is
    /// resumed in practice, short enough that the file stays small.
    fn default() -> Self {
        Limits {
            max_entries: 10_000,
            max_age: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

struct Entry {
    blocks: Arc<str>,
    ts_ms: i64,
    /// Which insertion this is: an eviction order entry of an older one is stale.
    generation: u64,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<(String, String), Entry>,
    /// Keys oldest first, with the generation they were inserted as (a replaced or removed
    /// entry leaves a stale one here, skipped by eviction).
    order: VecDeque<((String, String), u64)>,
    /// Entries per session, for the fast "nothing here" answer.
    sessions: HashMap<String, usize>,
    next_generation: u64,
}

impl Cache {
    fn insert(&mut self, key: (String, String), blocks: Arc<str>, ts_ms: i64, limits: Limits) {
        let generation = self.next_generation;
        self.next_generation += 1;
        let entry = Entry {
            blocks,
            ts_ms,
            generation,
        };
        if self.entries.insert(key.clone(), entry).is_none() {
            *self.sessions.entry(key.0.clone()).or_default() += 1;
        }
        self.order.push_back((key, generation));
        while self.entries.len() > limits.max_entries {
            let Some((old, generation)) = self.order.pop_front() else {
                break;
            };
            if self
                .entries
                .get(&old)
                .is_some_and(|e| e.generation == generation)
            {
                self.remove(&old);
            }
        }
        // Stale order entries are dropped once they outnumber the live ones.
        if self.order.len() > 2 * limits.max_entries.max(16) {
            let entries = &self.entries;
            self.order
                .retain(|(k, g)| entries.get(k).is_some_and(|e| e.generation == *g));
        }
    }

    fn remove(&mut self, key: &(String, String)) {
        if self.entries.remove(key).is_some()
            && let Some(n) = self.sessions.get_mut(&key.0)
        {
            *n -= 1;
            if *n == 0 {
                self.sessions.remove(&key.0);
            }
        }
    }
}

enum Write {
    Put {
        session: String,
        tool_use_id: String,
        blocks: Arc<str>,
        ts_ms: i64,
    },
    Flush(Sender<()>),
}

/// The kept blocks. Cheap to clone (shared).
#[derive(Clone)]
pub struct SearchBlocks {
    inner: Arc<Inner>,
}

struct Inner {
    cache: Mutex<Cache>,
    limits: Limits,
    /// To the writer thread, which ends when this is dropped with the last handle.
    writer: Mutex<Option<Sender<Write>>>,
    write_failures: Arc<AtomicU64>,
    /// The team store, when the blocks are shared ([`SearchBlocks::share_with`]).
    team: OnceLock<Arc<Team>>,
}

/// How long a "the team store has nothing for this `tool_use`" answer is believed for a
/// `tool_use` of an earlier turn: its block, if any, was written while that turn's answer
/// streamed, well before. A `tool_use` of the last assistant turn is believed absent only for
/// the bound and [`REST`]: the write of a block an answer did not wait for (its instance was
/// resting, or the write missed its bound) may land in that time.
const NOTHING_FOR: Duration = Duration::from_secs(60);

/// Absences remembered at most (about 100 bytes each); past it the expired go, then all.
const MAX_ABSENT: usize = 100_000;

/// Puts to the team store between two prunes of its old blocks.
const TEAM_PRUNE_EVERY: u64 = 1_000;

/// After the store failed or missed its bound, how long requests stop waiting for it: a store
/// that is down or hung costs one bound per this long, not one per request.
const REST: Duration = Duration::from_secs(5);

/// The team side of [`SearchBlocks`].
struct Team {
    store: TeamSearchBlocks,
    /// How long a request waits for the store, reading or writing.
    bound: Duration,
    /// `tool_use`s the store was asked about and had nothing for, with until when that is
    /// believed.
    nothing: Mutex<HashMap<(String, String), Instant>>,
    /// Until when requests do not wait for the store (it failed or was slow just now).
    resting_until: Mutex<Option<Instant>>,
    counts: TeamCounts,
}

impl Team {
    /// Stop waiting for the store for [`REST`].
    fn rest(&self) {
        if let Ok(mut until) = self.resting_until.lock() {
            *until = Some(Instant::now() + REST);
        }
    }

    fn is_resting(&self) -> bool {
        self.resting_until
            .lock()
            .is_ok_and(|until| until.is_some_and(|u| Instant::now() < u))
    }
}

/// What the team side has done since start (the benchmark and tests read it).
#[derive(Debug, Default)]
struct TeamCounts {
    written: AtomicU64,
    write_failed: AtomicU64,
    write_slow: AtomicU64,
    fetched: AtomicU64,
    fetch_failed: AtomicU64,
    fetch_slow: AtomicU64,
}

/// The team side's counts, as read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TeamStats {
    /// Blocks written to the team store.
    pub written: u64,
    /// Writes that failed.
    pub write_failed: u64,
    /// Writes an answer stopped waiting for (the bound passed; such a write may still land,
    /// and then counts in `written` too).
    pub write_slow: u64,
    /// Blocks read from the team store (another instance hid them).
    pub fetched: u64,
    /// Reads that failed.
    pub fetch_failed: u64,
    /// Reads a request stopped waiting for.
    pub fetch_slow: u64,
}

/// A write to the team store that an answer waits for before it goes on: resolves when the
/// block is in the store, when the write failed, or when the bound passed.
pub type Sharing = Pin<Box<dyn Future<Output = Shared> + Send>>;

/// How a [`Sharing`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shared {
    /// In the team store.
    Written,
    /// The store refused it or could not be reached.
    Failed,
    /// The bound passed first (the write goes on and may land later).
    Slow,
    /// Not waited for: the store failed or was slow within the last few seconds (the write
    /// goes on).
    Resting,
}

/// What [`SearchBlocks::fetch`] did for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetch {
    /// No team store: nothing to ask.
    NotShared,
    /// Every `tool_use` named is known here already.
    Known,
    /// The store was asked about `asked` `tool_use`s and had blocks for `found`.
    Fetched {
        /// `tool_use`s asked about.
        asked: usize,
        /// Those it had blocks for (now in the local cache).
        found: usize,
    },
    /// The store did not answer within the bound.
    Slow,
    /// The store could not be read (the error, for the log).
    Failed(String),
    /// Not asked: it failed or was slow within the last few seconds.
    Resting,
}

fn age_ms(limits: Limits) -> i64 {
    i64::try_from(limits.max_age.as_millis()).unwrap_or(i64::MAX)
}

impl SearchBlocks {
    /// Open (creating if needed, 0600) the file at `path`, load what is still within `limits`,
    /// and start the writer thread.
    pub fn open(path: &Path, limits: Limits) -> Result<SearchBlocks, StoreError> {
        let conn = sqlite::open(path, MIGRATIONS)?;
        let since = now_ms().saturating_sub(age_ms(limits));
        let mut cache = Cache::default();
        {
            let mut stmt = conn.prepare(
                "SELECT session, tool_use_id, blocks, ts_ms FROM search_blocks
                 WHERE ts_ms >= ?1 ORDER BY ts_ms DESC LIMIT ?2",
            )?;
            let limit = i64::try_from(limits.max_entries).unwrap_or(i64::MAX);
            let rows = stmt.query_map(params![since, limit], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })?;
            let mut loaded: Vec<(String, String, String, i64)> = rows.collect::<Result<_, _>>()?;
            loaded.reverse();
            for (session, id, blocks, ts_ms) in loaded {
                cache.insert((session, id), Arc::from(blocks), ts_ms, limits);
            }
        }
        let (tx, rx) = channel();
        let failures = Arc::new(AtomicU64::new(0));
        let inner = Arc::new(Inner {
            cache: Mutex::new(cache),
            limits,
            writer: Mutex::new(Some(tx)),
            write_failures: Arc::clone(&failures),
            team: OnceLock::new(),
        });
        std::thread::Builder::new()
            .name("pith-search-blocks".into())
            .spawn(move || write_loop(conn, rx, limits, &failures))
            .map_err(|source| StoreError::Io {
                path: path.to_owned(),
                source,
            })?;
        Ok(SearchBlocks { inner })
    }

    /// Kept in memory only (nothing survives the process): when the file cannot be opened,
    /// and for tests.
    pub fn in_memory(limits: Limits) -> SearchBlocks {
        SearchBlocks {
            inner: Arc::new(Inner {
                cache: Mutex::new(Cache::default()),
                limits,
                writer: Mutex::new(None),
                write_failures: Arc::new(AtomicU64::new(0)),
                team: OnceLock::new(),
            }),
        }
    }

    /// Share the blocks through the team store `store` from now on, each read and write
    /// bounded by `bound`; the schema is brought up to date in the background when a runtime
    /// is running. Once per handle: a second call is ignored.
    pub fn share_with(&self, store: TeamSearchBlocks, bound: Duration) {
        let team = Arc::new(Team {
            store,
            bound,
            nothing: Mutex::new(HashMap::new()),
            resting_until: Mutex::new(None),
            counts: TeamCounts::default(),
        });
        if self.inner.team.set(Arc::clone(&team)).is_ok()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                if let Err(e) = team.store.warm().await {
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "the team store cannot keep tool search blocks yet; each request retries"
                    );
                }
            });
        }
    }

    /// Whether the blocks are shared through a team store.
    pub fn is_shared(&self) -> bool {
        self.inner.team.get().is_some()
    }

    /// The team side's counts (all zero when not shared).
    pub fn team_stats(&self) -> TeamStats {
        let Some(team) = self.inner.team.get() else {
            return TeamStats::default();
        };
        let c = &team.counts;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TeamStats {
            written: n(&c.written),
            write_failed: n(&c.write_failed),
            write_slow: n(&c.write_slow),
            fetched: n(&c.fetched),
            fetch_failed: n(&c.fetch_failed),
            fetch_slow: n(&c.fetch_slow),
        }
    }

    /// Keep `blocks` for `tool_use_id` of `session` (replacing what was kept for it). With a
    /// team store, the write to it starts now, on the running runtime; the answer that hid the
    /// blocks waits for the returned [`Sharing`] before it goes on, so whichever instance the
    /// client's next request reaches finds them.
    pub fn put(&self, session: &str, tool_use_id: &str, blocks: &str) -> Option<Sharing> {
        let ts_ms = now_ms();
        self.keep_here(session, tool_use_id, Arc::from(blocks), ts_ms);
        let team = Arc::clone(self.inner.team.get()?);
        // The bound runs from now, however long the answer takes to ask for the wait.
        let deadline = tokio::time::Instant::now();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            team.counts.write_failed.fetch_add(1, Ordering::Relaxed);
            return Some(Box::pin(std::future::ready(Shared::Failed)));
        };
        let (session, tool_use_id, blocks) = (
            session.to_owned(),
            tool_use_id.to_owned(),
            blocks.to_owned(),
        );
        let writer = Arc::clone(&team);
        let max_age = age_ms(self.inner.limits);
        let write = runtime.spawn(async move {
            let counts = &writer.counts;
            match writer
                .store
                .put(&session, &tool_use_id, &blocks, ts_ms)
                .await
            {
                Ok(()) => {
                    let n = counts.written.fetch_add(1, Ordering::Relaxed) + 1;
                    if n % TEAM_PRUNE_EVERY == 0 {
                        let _ = writer.store.prune(now_ms().saturating_sub(max_age)).await;
                    }
                    Shared::Written
                }
                Err(e) => {
                    counts.write_failed.fetch_add(1, Ordering::Relaxed);
                    writer.rest();
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "a tool search block did not reach the team store; another instance \
                         serving this session's next request leaves it unchanged"
                    );
                    Shared::Failed
                }
            }
        });
        if team.is_resting() {
            return Some(Box::pin(std::future::ready(Shared::Resting)));
        }
        Some(Box::pin(async move {
            match tokio::time::timeout_at(deadline + team.bound, write).await {
                Ok(Ok(shared)) => shared,
                Ok(Err(_)) => Shared::Failed,
                Err(_) => {
                    team.counts.write_slow.fetch_add(1, Ordering::Relaxed);
                    team.rest();
                    Shared::Slow
                }
            }
        }))
    }

    /// Ask the team store for the blocks of those of `tool_use_ids` (of `session`) this
    /// instance knows nothing about, within the bound; what it has goes into the local cache,
    /// so the restore stage, which never waits on I/O, finds it. `tool_use_ids[newest..]` are
    /// the last assistant turn's (see [`NOTHING_FOR`]).
    pub async fn fetch(&self, session: &str, tool_use_ids: &[&str], newest: usize) -> Fetch {
        let Some(team) = self.inner.team.get() else {
            return Fetch::NotShared;
        };
        let asked = self.unknown(team, session, tool_use_ids);
        if asked.is_empty() {
            return Fetch::Known;
        }
        if team.is_resting() {
            return Fetch::Resting;
        }
        let since = now_ms().saturating_sub(age_ms(self.inner.limits));
        // On a task of its own: when the bound passes, the query still ends (or its connection
        // is dropped) there, never left half-read in the pool.
        let reader = Arc::clone(team);
        let (read_session, read_ids) = (session.to_owned(), asked.clone());
        let read =
            tokio::spawn(async move { reader.store.get(&read_session, &read_ids, since).await });
        let found = match tokio::time::timeout(team.bound, read).await {
            Ok(Ok(Ok(found))) => found,
            Ok(Err(_)) => {
                team.counts.fetch_failed.fetch_add(1, Ordering::Relaxed);
                team.rest();
                return Fetch::Failed("the read's task ended abnormally".to_owned());
            }
            Ok(Ok(Err(e))) => {
                team.counts.fetch_failed.fetch_add(1, Ordering::Relaxed);
                team.rest();
                return Fetch::Failed(pith_brain::render::error_chain(&e));
            }
            Err(_) => {
                team.counts.fetch_slow.fetch_add(1, Ordering::Relaxed);
                team.rest();
                return Fetch::Slow;
            }
        };
        team.counts
            .fetched
            .fetch_add(found.len() as u64, Ordering::Relaxed);
        let result = Fetch::Fetched {
            asked: asked.len(),
            found: found.len(),
        };
        let mut had: Vec<String> = Vec::with_capacity(found.len());
        for (id, blocks, ts_ms) in found {
            self.keep_here(session, &id, Arc::from(blocks), ts_ms);
            had.push(id);
        }
        if let Ok(mut nothing) = team.nothing.lock() {
            let now = Instant::now();
            if nothing.len() >= MAX_ABSENT {
                nothing.retain(|_, until| now < *until);
                if nothing.len() >= MAX_ABSENT {
                    nothing.clear();
                }
            }
            let recent = &tool_use_ids[newest.min(tool_use_ids.len())..];
            for id in asked.into_iter().filter(|id| !had.contains(id)) {
                let believed = if recent.contains(&id.as_str()) {
                    team.bound + REST
                } else {
                    NOTHING_FOR
                };
                nothing.insert((session.to_owned(), id), now + believed);
            }
        }
        result
    }

    /// Those of `ids` neither kept here nor recently found absent from the store.
    fn unknown(&self, team: &Team, session: &str, ids: &[&str]) -> Vec<String> {
        let Ok(cache) = self.inner.cache.lock() else {
            return Vec::new();
        };
        let nothing = team.nothing.lock().ok();
        let mut key = (session.to_owned(), String::new());
        let mut unknown = Vec::new();
        for id in ids {
            key.1.clear();
            key.1.push_str(id);
            let absent = nothing
                .as_ref()
                .and_then(|n| n.get(&key))
                .is_some_and(|until| Instant::now() < *until);
            if !cache.entries.contains_key(&key) && !absent && !unknown.iter().any(|u| u == id) {
                unknown.push((*id).to_owned());
            }
        }
        unknown
    }

    /// Into the cache and the local file.
    fn keep_here(&self, session: &str, tool_use_id: &str, blocks: Arc<str>, ts_ms: i64) {
        if let Ok(mut cache) = self.inner.cache.lock() {
            cache.insert(
                (session.to_owned(), tool_use_id.to_owned()),
                Arc::clone(&blocks),
                ts_ms,
                self.inner.limits,
            );
        }
        let sent = self.inner.writer.lock().ok().and_then(|w| {
            w.as_ref().map(|tx| {
                tx.send(Write::Put {
                    session: session.to_owned(),
                    tool_use_id: tool_use_id.to_owned(),
                    blocks,
                    ts_ms,
                })
                .is_ok()
            })
        });
        if sent == Some(false) {
            self.inner.write_failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// What is kept for `tool_use_id` of `session`, unless it is older than the age limit.
    pub fn get(&self, session: &str, tool_use_id: &str) -> Option<Arc<str>> {
        let mut cache = self.inner.cache.lock().ok()?;
        let key = (session.to_owned(), tool_use_id.to_owned());
        let entry = cache.entries.get(&key)?;
        if entry.ts_ms < now_ms().saturating_sub(age_ms(self.inner.limits)) {
            cache.remove(&key);
            return None;
        }
        Some(Arc::clone(&entry.blocks))
    }

    /// Whether anything is kept for `session`.
    pub fn has_session(&self, session: &str) -> bool {
        self.inner
            .cache
            .lock()
            .is_ok_and(|c| c.sessions.contains_key(session))
    }

    /// Entries kept in memory.
    pub fn len(&self) -> usize {
        self.inner.cache.lock().map_or(0, |c| c.entries.len())
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes that did not reach the file (the writer thread is gone, or SQLite failed).
    pub fn write_failures(&self) -> u64 {
        self.inner.write_failures.load(Ordering::Relaxed)
    }

    /// Wait until everything kept so far is in the file (shutdown, tests).
    pub fn flush(&self) {
        let (tx, rx) = channel();
        let sent = self
            .inner
            .writer
            .lock()
            .ok()
            .and_then(|w| w.as_ref().map(|w| w.send(Write::Flush(tx)).is_ok()));
        if sent == Some(true) {
            let _ = rx.recv_timeout(Duration::from_secs(10));
        }
    }
}

/// The writer thread: each kept entry into the file; now and then the old ones out. It ends
/// when the last handle is dropped.
fn write_loop(conn: Connection, rx: Receiver<Write>, limits: Limits, failures: &AtomicU64) {
    let mut since_prune = 0usize;
    for write in rx {
        match write {
            Write::Put {
                session,
                tool_use_id,
                blocks,
                ts_ms,
            } => {
                let done = conn.execute(PUT, params![session, tool_use_id, blocks.as_ref(), ts_ms]);
                if done.is_err() {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
                since_prune += 1;
                if since_prune >= 100 {
                    since_prune = 0;
                    prune(&conn, limits, failures);
                }
            }
            Write::Flush(done) => {
                prune(&conn, limits, failures);
                let _ = done.send(());
            }
        }
    }
}

fn prune(conn: &Connection, limits: Limits, failures: &AtomicU64) {
    let since = now_ms().saturating_sub(age_ms(limits));
    let keep = i64::try_from(limits.max_entries).unwrap_or(i64::MAX);
    let old = conn.execute(FORGET_OLDER, params![since]);
    let over = conn.execute(
        "DELETE FROM search_blocks WHERE (session, tool_use_id) IN (
            SELECT session, tool_use_id FROM search_blocks
            ORDER BY ts_ms DESC LIMIT -1 OFFSET ?1)",
        params![keep],
    );
    if old.is_err() || over.is_err() {
        failures.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_blocks_survive_a_reopen_and_stay_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("search-blocks.db");
        let limits = Limits {
            max_entries: 3,
            ..Limits::default()
        };
        let blocks = SearchBlocks::open(&path, limits).unwrap();
        for i in 0..5 {
            blocks.put("ses", &format!("toolu_{i}"), &format!("[{i}]"));
        }
        assert_eq!(blocks.len(), 3, "the oldest went first");
        assert_eq!(blocks.get("ses", "toolu_0"), None);
        assert_eq!(blocks.get("ses", "toolu_4").as_deref(), Some("[4]"));
        assert!(blocks.has_session("ses"));
        assert!(!blocks.has_session("other"));
        blocks.flush();
        drop(blocks);
        let again = SearchBlocks::open(&path, limits).unwrap();
        assert_eq!(again.len(), 3);
        assert_eq!(again.get("ses", "toolu_2").as_deref(), Some("[2]"));
        assert_eq!(again.get("ses", "toolu_1"), None);
        assert_eq!(again.write_failures(), 0);
    }

    #[test]
    fn a_replaced_entry_is_not_evicted_by_its_old_place_in_line() {
        let blocks = SearchBlocks::in_memory(Limits {
            max_entries: 2,
            ..Limits::default()
        });
        blocks.put("s", "a", "1");
        blocks.put("s", "b", "2");
        blocks.put("s", "a", "3"); // a is now the newest
        blocks.put("s", "c", "4"); // evicts b, the oldest live one
        assert_eq!(blocks.get("s", "a").as_deref(), Some("3"));
        assert_eq!(blocks.get("s", "b"), None);
        assert_eq!(blocks.get("s", "c").as_deref(), Some("4"));
        assert_eq!(blocks.len(), 2);
    }

    #[test]
    fn expired_entries_are_gone() {
        let blocks = SearchBlocks::in_memory(Limits {
            max_entries: 10,
            max_age: Duration::ZERO,
        });
        blocks.put("ses", "toolu_1", "[1]");
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(blocks.get("ses", "toolu_1"), None);
    }

    #[test]
    fn the_file_is_pruned_to_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.db");
        let limits = Limits {
            max_entries: 1,
            ..Limits::default()
        };
        let blocks = SearchBlocks::open(&path, limits).unwrap();
        blocks.put("a", "1", "x");
        blocks.put("a", "2", "y");
        blocks.flush();
        let conn = Connection::open(&path).unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM search_blocks", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(blocks.write_failures(), 0);
    }
}
