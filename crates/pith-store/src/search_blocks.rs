//! Tool search blocks pith took out of answers, kept until the session's next requests put
//! them back (`pith_transform::search_trip`). Reads come from memory (the request path never
//! waits on the disk); every block kept is also written, on a thread of its own, to a small
//! SQLite file, so a restart of pith loses nothing. Bounded in entries and age, in memory and
//! on disk: an expired block is gone, and the request it was for fails open.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, params};

use crate::clock::now_ms;
use crate::sqlite::{self, StoreError};

const MIGRATIONS: &[&str] = &["CREATE TABLE search_blocks (
        session     TEXT NOT NULL,
        tool_use_id TEXT NOT NULL,
        blocks      TEXT NOT NULL,
        ts_ms       INTEGER NOT NULL,
        PRIMARY KEY (session, tool_use_id)
    ) WITHOUT ROWID;
    CREATE INDEX search_blocks_ts ON search_blocks (ts_ms);"];

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
            }),
        }
    }

    /// Keep `blocks` for `tool_use_id` of `session` (replacing what was kept for it).
    pub fn put(&self, session: &str, tool_use_id: &str, blocks: &str) {
        let blocks: Arc<str> = Arc::from(blocks);
        let ts_ms = now_ms();
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
                let done = conn.execute(
                    "INSERT OR REPLACE INTO search_blocks (session, tool_use_id, blocks, ts_ms)
                     VALUES (?1, ?2, ?3, ?4)",
                    params![session, tool_use_id, blocks.as_ref(), ts_ms],
                );
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
    let old = conn.execute("DELETE FROM search_blocks WHERE ts_ms < ?1", params![since]);
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
