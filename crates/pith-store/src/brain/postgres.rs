//! The team brain: memories shared by every clone of a repository, in PostgreSQL.
//!
//! A repository is identified by its root commit (`git rev-list --max-parents=0 HEAD`, the
//! smallest when there are several), not its path, so every clone of it on any machine shares
//! one set of memories. Each workspace keeps its own SQLite brain (`.pith/brain.db`), which the
//! hook reads locally; [`sync`] keeps it fresh from the proxy or the MCP server:
//! 1. push: the memories changed here since the push cursor (the local `rev`), each upserted
//!    only if its version (`changed_ms`) is newer than the database's;
//! 2. pull: the memories changed in the database since the pull cursor (`seq`), applied
//!    locally by the same rule (see [`SqliteBrain::apply_remote`]).
//!
//! Conflict rule: a memory is its id within its repository; the newest change wins (its
//! `changed_ms`), and on a tie the copy already there stays. Two different memories that drew
//! the same id (creation times differ) are both kept where they are and counted as collisions.
//! Hit counters and verifications never travel: evidence is checked against each machine's own
//! checkout, so a memory can be fresh on one and stale on another.
//!
//! `seq` is redrawn on every accepted change under one advisory lock, as in the team ledger,
//! so pulling since a cursor misses nothing.

use std::path::Path;

use crate::brain::{Applied, SqliteBrain, Versioned};
use crate::postgres::{Pg, PgError, StoreUrl};

const MIGRATIONS: &[&str] = &["
CREATE SEQUENCE memories_seq;
CREATE TABLE memories (
    repo       TEXT NOT NULL,
    id         TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    changed_ms BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    memory     JSONB NOT NULL,  -- pith_brain::Memory as JSON, without hits or verification
    PRIMARY KEY (repo, id)
);
CREATE INDEX memories_by_seq ON memories (repo, seq);
"];

/// The advisory lock every push holds while it draws `seq` values.
const PUSH_LOCK: i64 = 7_369_746_802;
/// Memories per push or pull round trip.
const BATCH: usize = 2_000;
/// The local brain's push cursor (a local `rev`) and pull cursor (a database `seq`).
const PUSHED_THROUGH: &str = "team_pushed_through";
const PULLED_THROUGH: &str = "team_pulled_through";

/// What one sync did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SyncReport {
    /// Local changes sent.
    pub pushed: u64,
    /// Of those, the ones the database took (newer than its copy).
    pub accepted: u64,
    /// Memories received and new here.
    pub new: u64,
    /// Memories received that replaced an older copy here.
    pub updated: u64,
    /// Memories received that were not newer than the copy here.
    pub kept: u64,
    /// Memories whose id names a different memory here or there: left apart.
    pub collisions: u64,
}

/// The team brain.
pub struct TeamBrain {
    pg: Pg,
}

impl TeamBrain {
    /// Connect to the team brain at `url` and bring its schema up to date.
    pub fn open(url: &StoreUrl) -> Result<TeamBrain, PgError> {
        let pg = Pg::new(url)?;
        pg.migrate("brain", MIGRATIONS)?;
        Ok(TeamBrain { pg })
    }

    /// Push, then pull, until both sides are level: see the module doc.
    pub fn sync(&self, repo: &str, local: &mut SqliteBrain) -> Result<SyncReport, PgError> {
        let mut report = SyncReport::default();
        loop {
            let cursor = local.sync_value(PUSHED_THROUGH)?;
            let changed = local.changed_after(cursor, BATCH)?;
            let Some(&(last, _)) = changed.last() else {
                break;
            };
            let items: Vec<Versioned> = changed.into_iter().map(|(_, v)| v).collect();
            let (accepted, collisions) = self.push(repo, &items)?;
            report.pushed += items.len() as u64;
            report.accepted += accepted;
            report.collisions += collisions;
            local.set_sync_value(PUSHED_THROUGH, last)?;
        }
        loop {
            let cursor = local.sync_value(PULLED_THROUGH)?;
            let batch = self.pull(repo, cursor, BATCH)?;
            let Some(&(last, _)) = batch.last() else {
                break;
            };
            let n = batch.len();
            let items: Vec<Versioned> = batch.into_iter().map(|(_, v)| v).collect();
            let Applied {
                new,
                updated,
                kept,
                collisions,
            } = local.apply_remote(&items)?;
            report.new += new;
            report.updated += updated;
            report.kept += kept;
            report.collisions += collisions;
            local.set_sync_value(PULLED_THROUGH, last)?;
            if n < BATCH {
                break;
            }
        }
        Ok(report)
    }

    /// Upsert `items` into `repo` by the conflict rule; (taken, collisions).
    fn push(&self, repo: &str, items: &[Versioned]) -> Result<(u64, u64), PgError> {
        let mut ids = Vec::with_capacity(items.len());
        let mut changed = Vec::with_capacity(items.len());
        let mut created = Vec::with_capacity(items.len());
        let mut bodies = Vec::with_capacity(items.len());
        for v in items {
            ids.push(v.memory.id.clone());
            changed.push(v.changed_ms);
            created.push(v.memory.created_at);
            bodies.push(
                serde_json::to_string(&v.memory).map_err(|e| PgError::Corrupt(e.to_string()))?,
            );
        }
        self.pg.with(async |client| {
            let tx = client.transaction().await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&PUSH_LOCK])
                .await?;
            let collisions = tx
                .query_one(
                    "SELECT count(*) FROM memories m
                     JOIN unnest($2::text[], $3::bigint[]) AS u (id, created_at)
                       ON m.repo = $1 AND m.id = u.id AND m.created_at <> u.created_at",
                    &[&repo, &ids, &created],
                )
                .await?
                .get::<_, i64>(0);
            let taken = tx
                .execute(
                    "INSERT INTO memories (repo, id, seq, changed_ms, created_at, memory)
                     SELECT $1, id, nextval('memories_seq'), changed_ms, created_at, memory::jsonb
                     FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::text[])
                          AS u (id, changed_ms, created_at, memory)
                     ON CONFLICT (repo, id) DO UPDATE SET seq = excluded.seq,
                        changed_ms = excluded.changed_ms, memory = excluded.memory
                     WHERE excluded.changed_ms > memories.changed_ms
                       AND excluded.created_at = memories.created_at",
                    &[&repo, &ids, &changed, &created, &bodies],
                )
                .await?;
            tx.commit().await?;
            Ok((taken, u64::try_from(collisions).unwrap_or(0)))
        })
    }

    /// At most `limit` memories of `repo` changed after `seq`, in commit order.
    fn pull(&self, repo: &str, after: i64, limit: usize) -> Result<Vec<(i64, Versioned)>, PgError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.pg.with(async |client| {
            Ok(client
                .query(
                    "SELECT seq, changed_ms, memory::text FROM memories
                     WHERE repo = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                    &[&repo, &after, &limit],
                )
                .await?)
        })?;
        rows.iter()
            .map(|r| {
                let text: String = r.try_get(2)?;
                let memory =
                    serde_json::from_str(&text).map_err(|e| PgError::Corrupt(e.to_string()))?;
                Ok((
                    r.try_get(0)?,
                    Versioned {
                        memory,
                        changed_ms: r.try_get(1)?,
                    },
                ))
            })
            .collect()
    }
}

/// How long naming a repository may take (git answers in milliseconds).
const GIT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The repository `root` is a clone of, by its root commit; `None` outside a git repository
/// or one without commits (nothing to share by).
///
/// The repository is a stranger's, and git runs what its config says when it fetches: a
/// partial clone's missing object is fetched from its promisor remote, whose `uploadpack`
/// command is any command (a repository unpacked from an archive keeps its `.git/config`). So
/// no object is fetched (`GIT_NO_LAZY_FETCH`, and no transport allowed at all).
/// A FIFO where git reads (`HEAD`, a config's `include.path`) would block it: it is stopped
/// after [`GIT_WAIT`].
pub fn repository_of(root: &Path) -> Option<String> {
    let mut child = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["-c", "protocol.allow=never", "-c", "core.fsmonitor=false"])
        .args(["rev-list", "--max-parents=0", "HEAD"])
        .env("GIT_NO_LAZY_FETCH", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let started = std::time::Instant::now();
    // One line a root commit: the pipe fills only past a thousand of them (then none is named).
    while child.try_wait().ok()?.is_none() {
        if started.elapsed() > GIT_WAIT {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = child.wait_with_output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    text.split_whitespace().min().map(|c| format!("git:{c}"))
}
