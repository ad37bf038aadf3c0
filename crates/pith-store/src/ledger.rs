//! The request ledger: one row per request that passed through the proxy.

use std::path::Path;

use rusqlite::{Connection, params};

use crate::sqlite::{self, StoreError};

const MIGRATIONS: &[&str] = &["
CREATE TABLE requests (
    id                  INTEGER PRIMARY KEY,
    ts_ms               INTEGER NOT NULL,
    client              TEXT NOT NULL,
    session             TEXT,
    wire                TEXT,
    provider            TEXT NOT NULL,
    model               TEXT,
    method              TEXT NOT NULL,
    path                TEXT NOT NULL,
    status              INTEGER,
    outcome             TEXT NOT NULL,
    error               TEXT,
    bytes_client        INTEGER NOT NULL,
    bytes_upstream      INTEGER NOT NULL,
    bytes_response      INTEGER NOT NULL,
    tools_bytes         INTEGER NOT NULL,
    system_bytes        INTEGER NOT NULL,
    messages_bytes      INTEGER NOT NULL,
    other_bytes         INTEGER NOT NULL,
    input_tokens        INTEGER,
    output_tokens       INTEGER,
    cache_write_tokens  INTEGER,
    cache_read_tokens   INTEGER,
    ttfb_ms             REAL,
    total_ms            REAL NOT NULL,
    transforms          TEXT,
    transform_skips     TEXT,
    transform_failures  INTEGER NOT NULL,
    local               INTEGER NOT NULL
);
CREATE INDEX requests_ts ON requests (ts_ms);
CREATE INDEX requests_session ON requests (session, ts_ms);
CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"];

/// Name of the counter of ledger rows dropped because the write queue was full.
pub const DROPPED_ROWS: &str = "dropped_rows";

/// One request as the ledger records it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    pub ts_ms: i64,
    pub client: String,
    pub session: Option<String>,
    /// `anthropic`, `chat`, `responses`; `None` for pass-through paths.
    pub wire: Option<String>,
    pub provider: String,
    pub model: Option<String>,
    pub method: String,
    pub path: String,
    /// HTTP status returned to the client; `None` if it went away first.
    pub status: Option<u16>,
    /// `ok`, `client_closed`, `upstream_unreachable`, `upstream_error`, `stream_error`.
    pub outcome: String,
    pub error: Option<String>,
    pub bytes_client: u64,
    pub bytes_upstream: u64,
    pub bytes_response: u64,
    pub tools_bytes: u64,
    pub system_bytes: u64,
    pub messages_bytes: u64,
    pub other_bytes: u64,
    pub usage: Option<RowUsage>,
    pub ttfb_ms: Option<f64>,
    pub total_ms: f64,
    /// The `pith-transforms` header value, when a transform changed the request.
    pub transforms: Option<String>,
    /// `stage:reason` of stages that left the request unchanged, comma-separated.
    pub transform_skips: Option<String>,
    pub transform_failures: u32,
    /// pith answered without contacting the provider.
    pub local: bool,
}

/// Disjoint token counters (see `pith_wire::usage::Usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowUsage {
    pub input: u64,
    pub output: u64,
    pub cache_write: u64,
    pub cache_read: u64,
}

/// The transform columns of one row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TransformNotes {
    /// The `pith-transforms` value: `stage;fact=n;...` entries joined by `, `.
    pub applied: Option<String>,
    /// Stages that left the request unchanged: `stage:reason` entries joined by `,`.
    pub skipped: Option<String>,
}

/// Which rows a summary covers.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub since_ms: Option<i64>,
    pub session: Option<String>,
}

/// Totals of the rows sharing one (session, model) pair.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Group {
    pub session: Option<String>,
    pub client: String,
    pub model: Option<String>,
    pub requests: u64,
    /// Requests whose response carried usage.
    pub with_usage: u64,
    pub input: u64,
    pub output: u64,
    pub cache_write: u64,
    pub cache_read: u64,
    pub errors: u64,
    pub local: u64,
    pub transformed: u64,
    pub transform_failures: u64,
    pub first_ms: i64,
    pub last_ms: i64,
}

/// The ledger database.
pub struct Ledger {
    conn: Connection,
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl Ledger {
    pub fn open(path: &Path) -> Result<Ledger, StoreError> {
        Ok(Ledger {
            conn: sqlite::open(path, MIGRATIONS)?,
        })
    }

    pub fn open_in_memory() -> Result<Ledger, StoreError> {
        Ok(Ledger {
            conn: sqlite::open_in_memory(MIGRATIONS)?,
        })
    }

    /// Insert rows in one transaction.
    pub fn insert(&mut self, rows: &[Row]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO requests (ts_ms, client, session, wire, provider, model, method, path,
                    status, outcome, error, bytes_client, bytes_upstream, bytes_response,
                    tools_bytes, system_bytes, messages_bytes, other_bytes, input_tokens,
                    output_tokens, cache_write_tokens, cache_read_tokens, ttfb_ms, total_ms,
                    transforms, transform_skips, transform_failures, local)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                    ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28)",
            )?;
            for r in rows {
                let u = r.usage;
                stmt.execute(params![
                    r.ts_ms,
                    r.client,
                    r.session,
                    r.wire,
                    r.provider,
                    r.model,
                    r.method,
                    r.path,
                    r.status,
                    r.outcome,
                    r.error,
                    to_i64(r.bytes_client),
                    to_i64(r.bytes_upstream),
                    to_i64(r.bytes_response),
                    to_i64(r.tools_bytes),
                    to_i64(r.system_bytes),
                    to_i64(r.messages_bytes),
                    to_i64(r.other_bytes),
                    u.map(|u| to_i64(u.input)),
                    u.map(|u| to_i64(u.output)),
                    u.map(|u| to_i64(u.cache_write)),
                    u.map(|u| to_i64(u.cache_read)),
                    r.ttfb_ms,
                    r.total_ms,
                    r.transforms,
                    r.transform_skips,
                    r.transform_failures,
                    r.local,
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Add `delta` to the named counter.
    pub fn add_counter(&mut self, name: &str, delta: u64) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO counters (name, value) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
            params![name, to_i64(delta)],
        )?;
        Ok(())
    }

    pub fn counter(&self, name: &str) -> Result<u64, StoreError> {
        let v: Option<i64> = self
            .conn
            .query_row(
                "SELECT value FROM counters WHERE name = ?1",
                params![name],
                |r| r.get(0),
            )
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?;
        Ok(v.map(to_u64).unwrap_or(0))
    }

    /// Totals per (session, model), oldest session first.
    pub fn groups(&self, filter: &Filter) -> Result<Vec<Group>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT session, min(client), model, count(*),
                    count(input_tokens),
                    coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
                    coalesce(sum(cache_write_tokens), 0), coalesce(sum(cache_read_tokens), 0),
                    sum(outcome != 'ok'), sum(local), count(transforms), sum(transform_failures),
                    min(ts_ms), max(ts_ms)
             FROM requests
             WHERE (?1 IS NULL OR ts_ms >= ?1) AND (?2 IS NULL OR session = ?2)
             GROUP BY session, model
             ORDER BY min(ts_ms)",
        )?;
        let rows = stmt.query_map(params![filter.since_ms, filter.session], |r| {
            Ok(Group {
                session: r.get(0)?,
                client: r.get(1)?,
                model: r.get(2)?,
                requests: to_u64(r.get(3)?),
                with_usage: to_u64(r.get(4)?),
                input: to_u64(r.get(5)?),
                output: to_u64(r.get(6)?),
                cache_write: to_u64(r.get(7)?),
                cache_read: to_u64(r.get(8)?),
                errors: to_u64(r.get(9)?),
                local: to_u64(r.get(10)?),
                transformed: to_u64(r.get(11)?),
                transform_failures: to_u64(r.get(12)?),
                first_ms: r.get(13)?,
                last_ms: r.get(14)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// What the transforms did to each matching row that any of them looked at: the
    /// `pith-transforms` header they applied and the stages that left the request unchanged.
    pub fn transform_notes(&self, filter: &Filter) -> Result<Vec<TransformNotes>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT transforms, transform_skips FROM requests
             WHERE (transforms IS NOT NULL OR transform_skips IS NOT NULL)
               AND (?1 IS NULL OR ts_ms >= ?1) AND (?2 IS NULL OR session = ?2)",
        )?;
        let rows = stmt.query_map(params![filter.since_ms, filter.session], |r| {
            Ok(TransformNotes {
                applied: r.get(0)?,
                skipped: r.get(1)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every row, oldest first (tests and export).
    pub fn rows(&self) -> Result<Vec<Row>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT ts_ms, client, session, wire, provider, model, method, path, status, outcome,
                    error, bytes_client, bytes_upstream, bytes_response, tools_bytes,
                    system_bytes, messages_bytes, other_bytes, input_tokens, output_tokens,
                    cache_write_tokens, cache_read_tokens, ttfb_ms, total_ms, transforms,
                    transform_skips, transform_failures, local
             FROM requests ORDER BY id",
        )?;
        let rows = stmt.query_map([], |r| {
            let input: Option<i64> = r.get(18)?;
            let usage = match input {
                Some(input) => Some(RowUsage {
                    input: to_u64(input),
                    output: to_u64(r.get::<_, Option<i64>>(19)?.unwrap_or(0)),
                    cache_write: to_u64(r.get::<_, Option<i64>>(20)?.unwrap_or(0)),
                    cache_read: to_u64(r.get::<_, Option<i64>>(21)?.unwrap_or(0)),
                }),
                None => None,
            };
            Ok(Row {
                ts_ms: r.get(0)?,
                client: r.get(1)?,
                session: r.get(2)?,
                wire: r.get(3)?,
                provider: r.get(4)?,
                model: r.get(5)?,
                method: r.get(6)?,
                path: r.get(7)?,
                status: r.get(8)?,
                outcome: r.get(9)?,
                error: r.get(10)?,
                bytes_client: to_u64(r.get(11)?),
                bytes_upstream: to_u64(r.get(12)?),
                bytes_response: to_u64(r.get(13)?),
                tools_bytes: to_u64(r.get(14)?),
                system_bytes: to_u64(r.get(15)?),
                messages_bytes: to_u64(r.get(16)?),
                other_bytes: to_u64(r.get(17)?),
                usage,
                ttfb_ms: r.get(22)?,
                total_ms: r.get(23)?,
                transforms: r.get(24)?,
                transform_skips: r.get(25)?,
                transform_failures: r.get(26)?,
                local: r.get(27)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(session: &str, model: &str, ts: i64, usage: Option<RowUsage>) -> Row {
        Row {
            ts_ms: ts,
            client: "claude-code".into(),
            session: Some(session.into()),
            wire: Some("anthropic".into()),
            provider: "anthropic".into(),
            model: Some(model.into()),
            method: "POST".into(),
            path: "/v1/messages".into(),
            status: Some(200),
            outcome: "ok".into(),
            usage,
            total_ms: 1.5,
            ..Row::default()
        }
    }

    #[test]
    fn round_trip_and_groups() {
        let mut l = Ledger::open_in_memory().unwrap();
        let u = RowUsage {
            input: 10,
            output: 5,
            cache_write: 100,
            cache_read: 1000,
        };
        let rows = vec![
            row("s1", "m1", 1, Some(u)),
            row("s1", "m1", 2, Some(u)),
            row("s1", "m2", 3, None),
            row("s2", "m1", 4, Some(u)),
        ];
        l.insert(&rows).unwrap();
        assert_eq!(l.rows().unwrap(), rows);
        let all = l.groups(&Filter::default()).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(
            (all[0].requests, all[0].input, all[0].cache_read),
            (2, 20, 2000)
        );
        assert_eq!((all[1].requests, all[1].with_usage), (1, 0));
        let s2 = l
            .groups(&Filter {
                session: Some("s2".into()),
                ..Filter::default()
            })
            .unwrap();
        assert_eq!(s2.len(), 1);
        let recent = l
            .groups(&Filter {
                since_ms: Some(3),
                ..Filter::default()
            })
            .unwrap();
        assert_eq!(recent.iter().map(|g| g.requests).sum::<u64>(), 2);
    }

    #[test]
    fn counters_accumulate() {
        let mut l = Ledger::open_in_memory().unwrap();
        assert_eq!(l.counter(DROPPED_ROWS).unwrap(), 0);
        l.add_counter(DROPPED_ROWS, 3).unwrap();
        l.add_counter(DROPPED_ROWS, 4).unwrap();
        assert_eq!(l.counter(DROPPED_ROWS).unwrap(), 7);
    }
}
