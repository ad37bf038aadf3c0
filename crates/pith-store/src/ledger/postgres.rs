//! The team ledger in PostgreSQL: every proxy's ledger rows in one table.
//!
//! The logical schema is the SQLite ledger's (`crate::ledger`): the same request columns, the
//! same transform entries and prompt fingerprints. Two things differ, both for the way rows
//! get here:
//! - A row is identified by `(instance, local_id)`: the proxy's ledger (a random id kept in it)
//!   and the row's id there. Pushing the same row again is a no-op, so a shipper that crashed
//!   after a commit but before recording it sends again without doubling anything.
//! - `seq` orders rows by commit: every push takes one transaction-scoped advisory lock before
//!   it draws from the sequence, so a reader that has seen `seq = n` has seen every row below
//!   `n` too, and "pull since a cursor" misses nothing.
//!
//! Transform entries and savings are one `jsonb` array each per request (stage, result,
//! detail, facts, in pipeline order; stage, band, tokens) instead of child tables: a push is
//! then one `INSERT ... SELECT unnest` per batch.
//!
//! Aggregates (`pith stats`, the dashboard) are not computed here: readers pull new rows into a
//! local SQLite replica ([`TeamLedger::sync_replica`]), which keeps the same totals and answers
//! the same queries as a single proxy's ledger.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use tokio_postgres::types::ToSql;

use super::columns::{self, Cell, Column, Kind, SHARED, Value};
use crate::clock::now_ms;
use crate::ledger::{DROPPED_ROWS, Fact, Ledger, Row, Saving, Transform, TransformResult};
use crate::postgres::{Pg, PgError, StoreUrl};

const MIGRATIONS: &[&str] = &[
    "
CREATE TABLE requests (
    seq                 BIGSERIAL PRIMARY KEY,
    instance            BIGINT NOT NULL,
    local_id            BIGINT NOT NULL,
    ts_ms               BIGINT NOT NULL,
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
    bytes_client        BIGINT NOT NULL,
    bytes_upstream      BIGINT NOT NULL,
    bytes_response      BIGINT NOT NULL,
    tools_bytes         BIGINT NOT NULL,
    system_bytes        BIGINT NOT NULL,
    messages_bytes      BIGINT NOT NULL,
    other_bytes         BIGINT NOT NULL,
    input_tokens        BIGINT,
    output_tokens       BIGINT,
    cache_write_tokens  BIGINT,
    cache_write_1h_tokens BIGINT,
    cache_read_tokens   BIGINT,
    ttfb_ms             DOUBLE PRECISION,
    total_ms            DOUBLE PRECISION NOT NULL,
    transforms          JSONB NOT NULL,
    savings             JSONB NOT NULL,
    fingerprint         BYTEA,
    client_fingerprint  BYTEA,
    UNIQUE (instance, local_id)
);
CREATE INDEX requests_ts ON requests (ts_ms);
CREATE INDEX requests_session ON requests (session, ts_ms);
-- One row per proxy ledger that ever pushed: what it last said about itself.
CREATE TABLE instances (
    instance     BIGINT PRIMARY KEY,
    account      TEXT NOT NULL,
    host         TEXT NOT NULL,
    last_push_ms BIGINT NOT NULL,
    shipped_id   BIGINT NOT NULL,
    backlog      BIGINT NOT NULL,
    dropped_rows BIGINT NOT NULL
);
",
    "
-- Schema 2: the account of each request (a shared gateway maps each request to one by its
-- key). The rows before it belong to the account their proxy shipped as.
ALTER TABLE requests ADD COLUMN account TEXT;
UPDATE requests SET account = instances.account
FROM instances WHERE instances.instance = requests.instance;
ALTER TABLE requests ALTER COLUMN account SET NOT NULL;
",
    "
-- Schema 3: the name of the proxy instance that served each request (`[proxy] instance`;
-- `instance` is the id of the ledger it came from). NULL for rows before it.
ALTER TABLE requests ADD COLUMN served_by TEXT;
",
    "
-- Schema 4: what the provider's own token counter said of the client's body, for the sampled
-- requests a stage changed (as the proxies' ledgers keep it, schema 10 there).
ALTER TABLE requests ADD COLUMN provider_count_outcome TEXT;
ALTER TABLE requests ADD COLUMN provider_count_tokens BIGINT;
",
];

/// The team's own columns of a pushed row, after `local_id` and the columns both databases
/// keep ([`SHARED`]): each with the array type it is bound as and the cast it is stored with.
const PUSH_OWN: &[(&str, &str, &str)] = &[
    ("transforms", "text[]", "::jsonb"),
    ("fingerprint", "bytea[]", ""),
    ("client_fingerprint", "bytea[]", ""),
    ("savings", "text[]", "::jsonb"),
    ("account", "text[]", ""),
    ("served_by", "text[]", ""),
];

/// A batch of rows into `requests`, one array per column (`push_arrays`: `$1` the instance, `$2`
/// the local ids, then [`SHARED`], then [`PUSH_OWN`]), each row once: a row pushed again is
/// skipped.
static PUSH_ROWS: LazyLock<String> = LazyLock::new(|| {
    let mut names = vec!["local_id"];
    let mut arrays = vec!["bigint[]"];
    let mut selected = vec!["u.local_id".to_owned()];
    for c in SHARED {
        names.push(c.name);
        arrays.push(c.kind.pg_array());
        selected.push(format!("u.{}", c.name));
    }
    for (name, array, cast) in PUSH_OWN {
        names.push(name);
        arrays.push(array);
        selected.push(format!("u.{name}{cast}"));
    }
    let arrays: Vec<String> = arrays
        .iter()
        .enumerate()
        .map(|(i, array)| format!("${}::{array}", i + 2))
        .collect();
    let names = names.join(", ");
    format!(
        "INSERT INTO requests (instance, {names})
         SELECT $1, {}
         FROM unnest({}) AS u ({names})
         ORDER BY u.local_id
         ON CONFLICT (instance, local_id) DO NOTHING",
        selected.join(", "),
        arrays.join(", ")
    )
});

/// Rows after a `seq`, oldest first (`$1` the `seq`, `$2` how many): the shared columns, then
/// the team's own, jsonb as text.
static PULL_ROWS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT seq, {}, transforms::text AS transforms_text, fingerprint, client_fingerprint,
            savings::text AS savings_text, account, served_by
         FROM requests WHERE seq > $1 ORDER BY seq LIMIT $2",
        columns::names("")
    )
});

/// What a proxy says about itself with a push.
const UPSERT_INSTANCE: &str = "INSERT INTO instances (instance, host, last_push_ms,
        shipped_id, backlog, dropped_rows, account)
     VALUES ($1, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (instance) DO UPDATE SET host = excluded.host,
        account = excluded.account,
        last_push_ms = excluded.last_push_ms,
        shipped_id = greatest(instances.shipped_id, excluded.shipped_id),
        backlog = excluded.backlog, dropped_rows = excluded.dropped_rows";

/// Rows pulled into a replica per transaction.
const PULL_BATCH: usize = 5_000;
/// The replica's counter of how far it has read the team ledger (a `seq`).
pub const PULLED_THROUGH: &str = "team_pulled_through";

/// One proxy ledger's state as the team ledger last heard it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Instance {
    /// Its random id.
    pub instance: i64,
    /// The account its requests belong to.
    pub account: String,
    /// The host it runs on.
    pub host: String,
    /// When it last pushed (ms since the Unix epoch).
    pub last_push_ms: i64,
    /// The newest local row id it has pushed.
    pub shipped_id: i64,
    /// Rows it held back, not yet pushed, when it last pushed.
    pub backlog: i64,
    /// Rows its queue dropped (its `dropped_rows` counter).
    pub dropped_rows: i64,
}

/// What a proxy says about itself with each push.
#[derive(Debug, Clone, Default)]
pub struct PushState {
    /// The proxy's own account (`local` for a single install): the account of its rows that
    /// name none (written before the local ledger kept accounts).
    pub account: String,
    /// The host it runs on.
    pub host: String,
    /// Rows still waiting after this push.
    pub backlog: u64,
    /// Its `dropped_rows` counter.
    pub dropped_rows: u64,
}

/// The team ledger.
pub struct TeamLedger {
    pg: Pg,
}

#[derive(Serialize, Deserialize)]
struct StoredTransform {
    stage: String,
    result: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    detail: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    facts: Vec<StoredFact>,
}

#[derive(Serialize, Deserialize)]
struct StoredFact {
    name: String,
    kind: String,
    value: u64,
}

fn transforms_json(transforms: &[Transform]) -> String {
    let stored: Vec<StoredTransform> = transforms
        .iter()
        .map(|t| {
            let (result, detail, facts) = match &t.result {
                TransformResult::Applied(facts) => (
                    "applied",
                    None,
                    facts
                        .iter()
                        .map(|f| StoredFact {
                            name: f.name.clone(),
                            kind: f.kind.clone(),
                            value: f.value,
                        })
                        .collect(),
                ),
                TransformResult::Unchanged(d) => ("unchanged", Some(d.clone()), Vec::new()),
                TransformResult::Failed(d) => ("failed", Some(d.clone()), Vec::new()),
            };
            StoredTransform {
                stage: t.stage.clone(),
                result: result.to_owned(),
                detail,
                facts,
            }
        })
        .collect();
    // Serializing plain strings and numbers cannot fail; an empty list stands in if it did.
    serde_json::to_string(&stored).unwrap_or_else(|_| "[]".to_owned())
}

fn transforms_from_json(text: &str) -> Result<Vec<Transform>, PgError> {
    let stored: Vec<StoredTransform> =
        serde_json::from_str(text).map_err(|e| PgError::Corrupt(e.to_string()))?;
    Ok(stored
        .into_iter()
        .map(|t| Transform {
            stage: t.stage,
            result: match t.result.as_str() {
                "applied" => TransformResult::Applied(
                    t.facts
                        .into_iter()
                        .map(|f| Fact {
                            name: f.name,
                            kind: f.kind,
                            value: f.value,
                        })
                        .collect(),
                ),
                "unchanged" => TransformResult::Unchanged(t.detail.unwrap_or_default()),
                _ => TransformResult::Failed(t.detail.unwrap_or_default()),
            },
        })
        .collect())
}

#[derive(Serialize, Deserialize)]
struct StoredSaving {
    stage: String,
    band: String,
    tokens: i64,
}

fn savings_json(savings: &[Saving]) -> String {
    let stored: Vec<StoredSaving> = savings
        .iter()
        .map(|s| StoredSaving {
            stage: s.stage.clone(),
            band: s.band.clone(),
            tokens: s.tokens,
        })
        .collect();
    serde_json::to_string(&stored).unwrap_or_else(|_| "[]".to_owned())
}

fn savings_from_json(text: &str) -> Result<Vec<Saving>, PgError> {
    let stored: Vec<StoredSaving> =
        serde_json::from_str(text).map_err(|e| PgError::Corrupt(e.to_string()))?;
    Ok(stored
        .into_iter()
        .map(|s| Saving {
            stage: s.stage,
            band: s.band,
            tokens: s.tokens,
        })
        .collect())
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// The advisory lock every push holds while it draws `seq` values (see the module doc).
const PUSH_LOCK: i64 = 7_369_746_801;

impl TeamLedger {
    /// Connect to the team ledger at `url` and bring its schema up to date.
    pub fn open(url: &StoreUrl) -> Result<TeamLedger, PgError> {
        let pg = Pg::new(url)?;
        pg.migrate("ledger", MIGRATIONS)?;
        Ok(TeamLedger { pg })
    }

    /// The URL (shown redacted).
    pub fn url(&self) -> &StoreUrl {
        self.pg.url()
    }

    /// Push rows of proxy ledger `instance` (each with its local id) in one transaction, with
    /// what the proxy says about itself. Rows already there are skipped: pushing twice is
    /// pushing once. Returns how many rows were new.
    pub fn push(
        &self,
        instance: i64,
        rows: &[(i64, Row)],
        state: &PushState,
    ) -> Result<u64, PgError> {
        let arrays = push_arrays(rows, &state.account);
        let shipped = rows.last().map_or(0, |(id, _)| *id);
        let now = now_ms();
        self.pg.with(async |client| {
            let tx = client.transaction().await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&PUSH_LOCK])
                .await?;
            let params: Vec<&(dyn ToSql + Sync)> =
                std::iter::once(&instance as &(dyn ToSql + Sync))
                    .chain(arrays.iter().map(|a| &**a as &(dyn ToSql + Sync)))
                    .collect();
            let inserted = tx.execute(PUSH_ROWS.as_str(), &params).await?;
            tx.execute(
                UPSERT_INSTANCE,
                &[
                    &instance,
                    &state.host,
                    &now,
                    &shipped,
                    &to_i64(state.backlog),
                    &to_i64(state.dropped_rows),
                    &state.account,
                ],
            )
            .await?;
            tx.commit().await?;
            Ok(inserted)
        })
    }

    /// At most `limit` rows after `seq` (in commit order), each with its `seq`.
    pub fn pull(&self, after_seq: i64, limit: usize) -> Result<Vec<(i64, Row)>, PgError> {
        let limit = to_i64(limit as u64);
        let rows = self.pg.with(async |client| {
            Ok(client
                .query(PULL_ROWS.as_str(), &[&after_seq, &limit])
                .await?)
        })?;
        rows.iter().map(row_of).collect()
    }

    /// Every proxy ledger that has pushed, by id.
    pub fn instances(&self) -> Result<Vec<Instance>, PgError> {
        let rows = self.pg.with(async |client| {
            Ok(client
                .query(
                    "SELECT instance, host, last_push_ms, shipped_id, backlog, dropped_rows,
                        account
                     FROM instances ORDER BY instance",
                    &[],
                )
                .await?)
        })?;
        Ok(rows
            .iter()
            .map(|r| Instance {
                instance: r.get(0),
                host: r.get(1),
                last_push_ms: r.get(2),
                shipped_id: r.get(3),
                backlog: r.get(4),
                dropped_rows: r.get(5),
                account: r.get(6),
            })
            .collect())
    }

    /// Bring `replica` up to date with the team ledger: pull every row it has not seen, in
    /// commit order, each batch written with the cursor in one transaction (a crash never
    /// reads a row twice). Its `dropped_rows` counter becomes the team's sum. Returns how many
    /// rows were new.
    pub fn sync_replica(&self, replica: &mut Ledger) -> Result<u64, PgError> {
        // A replica pulled before the ledger kept accounts has rows that name none: it cannot
        // say whose they are, so it is pulled again whole.
        if replica.rows_without_account()? > 0 {
            replica.clear_replica()?;
        }
        let mut pulled = 0;
        loop {
            let cursor = to_i64(replica.counter(PULLED_THROUGH)?);
            let batch = self.pull(cursor, PULL_BATCH)?;
            let Some(&(last, _)) = batch.last() else {
                break;
            };
            let rows: Vec<Row> = batch.into_iter().map(|(_, r)| r).collect();
            replica.insert_and_set_counter(&rows, PULLED_THROUGH, to_u64(last))?;
            pulled += rows.len() as u64;
            if rows.len() < PULL_BATCH {
                break;
            }
        }
        let dropped: i64 = self.instances()?.iter().map(|i| i.dropped_rows).sum();
        replica.set_counter(DROPPED_ROWS, to_u64(dropped))?;
        Ok(pulled)
    }
}

/// A pulled row and its `seq`, its columns read by name.
fn row_of(r: &tokio_postgres::Row) -> Result<(i64, Row), PgError> {
    let mut row = columns::read(|c| pg_value(r, c), PgError::Corrupt)?.finish();
    let transforms: String = r.try_get("transforms_text")?;
    let savings: String = r.try_get("savings_text")?;
    row.transforms = transforms_from_json(&transforms)?;
    row.fingerprint = r.try_get("fingerprint")?;
    row.client_fingerprint = r.try_get("client_fingerprint")?;
    row.savings = savings_from_json(&savings)?;
    row.account = Some(r.try_get("account")?);
    // `arrival_us` is not shipped: a replica pairs the team's rows in `ts_ms` order.
    row.instance = r.try_get("served_by")?;
    Ok((r.try_get("seq")?, row))
}

/// A shared column's value in a PostgreSQL row, by its name.
fn pg_value(r: &tokio_postgres::Row, c: &Column) -> Result<Value, PgError> {
    Ok(match (c.kind, c.required) {
        (Kind::Int, true) => Value::Int(Some(r.try_get(c.name)?)),
        (Kind::Int, false) => Value::Int(r.try_get(c.name)?),
        (Kind::Int4, true) => Value::Int(Some(i64::from(r.try_get::<_, i32>(c.name)?))),
        (Kind::Int4, false) => Value::Int(r.try_get::<_, Option<i32>>(c.name)?.map(i64::from)),
        (Kind::Real, true) => Value::Real(Some(r.try_get(c.name)?)),
        (Kind::Real, false) => Value::Real(r.try_get(c.name)?),
        (Kind::Text, true) => Value::Text(Some(r.try_get(c.name)?)),
        (Kind::Text, false) => Value::Text(r.try_get(c.name)?),
    })
}

/// A batch of rows as one array per column, for `unnest`, in [`PUSH_ROWS`]' order after the
/// instance; a row that names no account is `own_account`'s.
fn push_arrays<'a>(
    rows: &'a [(i64, Row)],
    own_account: &'a str,
) -> Vec<Box<dyn ToSql + Sync + 'a>> {
    let mut arrays: Vec<Box<dyn ToSql + Sync + 'a>> = vec![Box::new(
        rows.iter().map(|(id, _)| *id).collect::<Vec<i64>>(),
    )];
    for c in SHARED {
        arrays.push(shared_array(c, rows));
    }
    let each = |f: fn(&Row) -> String| rows.iter().map(|(_, r)| f(r)).collect::<Vec<String>>();
    arrays.push(Box::new(each(|r| transforms_json(&r.transforms))));
    let fingerprints = |f: fn(&Row) -> Option<&[u8]>| {
        rows.iter()
            .map(|(_, r)| f(r))
            .collect::<Vec<Option<&[u8]>>>()
    };
    arrays.push(Box::new(fingerprints(|r| r.fingerprint.as_deref())));
    arrays.push(Box::new(fingerprints(|r| r.client_fingerprint.as_deref())));
    arrays.push(Box::new(each(|r| savings_json(&r.savings))));
    let accounts: Vec<&str> = rows
        .iter()
        .map(|(_, r)| r.account.as_deref().unwrap_or(own_account))
        .collect();
    arrays.push(Box::new(accounts));
    let served_by: Vec<Option<&str>> = rows.iter().map(|(_, r)| r.instance.as_deref()).collect();
    arrays.push(Box::new(served_by));
    arrays
}

/// One shared column of a batch, as the array its kind is bound as.
fn shared_array<'a>(c: &Column, rows: &'a [(i64, Row)]) -> Box<dyn ToSql + Sync + 'a> {
    let cells = rows.iter().map(move |(_, r)| (c.get)(r));
    let int = |cell| match cell {
        Cell::Int(v) => v,
        _ => None,
    };
    match c.kind {
        Kind::Int => Box::new(cells.map(int).collect::<Vec<Option<i64>>>()),
        Kind::Int4 => Box::new(
            cells
                .map(|cell| int(cell).and_then(|v| i32::try_from(v).ok()))
                .collect::<Vec<Option<i32>>>(),
        ),
        Kind::Real => Box::new(
            cells
                .map(|cell| match cell {
                    Cell::Real(v) => v,
                    _ => None,
                })
                .collect::<Vec<Option<f64>>>(),
        ),
        Kind::Text => Box::new(
            cells
                .map(|cell| match cell {
                    Cell::Text(v) => v,
                    _ => None,
                })
                .collect::<Vec<Option<&'a str>>>(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pith_testkit::postgres::PgServer;

    /// A replica pulled before accounts were kept (its rows name none) is pulled again whole,
    /// so each row has its account and the totals stay those of the team ledger.
    #[test]
    fn a_replica_without_accounts_is_pulled_again() {
        let url = PgServer::shared().database().unwrap();
        let team = TeamLedger::open(&StoreUrl::new(&url)).unwrap();
        let state = PushState {
            account: "alice".into(),
            ..PushState::default()
        };
        let rows: Vec<(i64, Row)> = (1..=3)
            .map(|i| {
                (
                    i,
                    Row {
                        ts_ms: i,
                        ..Row::default()
                    },
                )
            })
            .collect();
        team.push(5, &rows, &state).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("team-ledger.db");
        let mut replica = Ledger::open(&path).unwrap();
        assert_eq!(team.sync_replica(&mut replica).unwrap(), 3);
        drop(replica);
        // As a schema-5 replica migrated to 6 has them.
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute("UPDATE requests SET account = NULL", [])
            .unwrap();
        let mut replica = Ledger::open(&path).unwrap();
        assert_eq!(team.sync_replica(&mut replica).unwrap(), 3, "pulled again");
        let accounts: Vec<Option<String>> = replica
            .rows()
            .unwrap()
            .into_iter()
            .map(|r| r.account)
            .collect();
        assert_eq!(accounts, vec![Some("alice".to_owned()); 3]);
        let groups = replica
            .account_groups(&crate::ledger::Filter::default())
            .unwrap();
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].totals.requests, 3);
        assert_eq!(team.sync_replica(&mut replica).unwrap(), 0);
    }

    /// Rows shipped before the team ledger kept accounts belong to the account their proxy
    /// shipped as; a row shipped since with none named is its proxy's too.
    #[test]
    fn schema_one_rows_get_their_instances_account() {
        let server = PgServer::shared();
        let url = server.database().unwrap();
        let db = url.rsplit('/').next().unwrap().to_owned();
        Pg::new(&StoreUrl::new(&url))
            .unwrap()
            .migrate("ledger", &MIGRATIONS[..1])
            .unwrap();
        server
            .psql(
                &db,
                "INSERT INTO instances VALUES (7, 'alice', 'h', 0, 2, 0, 0), (8, 'bob', 'h', 0, 1, 0, 0);
                 INSERT INTO requests (instance, local_id, ts_ms, client, provider, method, path,
                    outcome, bytes_client, bytes_upstream, bytes_response, tools_bytes,
                    system_bytes, messages_bytes, other_bytes, total_ms, transforms, savings)
                 SELECT i, l, l, 'c', 'anthropic', 'POST', '/v1/messages', 'ok', 0, 0, 0, 0, 0, 0,
                    0, 1.0, '[]', '[]'
                 FROM (VALUES (7, 1), (7, 2), (8, 1)) AS v (i, l);",
            )
            .unwrap();
        let team = TeamLedger::open(&StoreUrl::new(&url)).unwrap();
        let state = PushState {
            account: "carol".into(),
            ..PushState::default()
        };
        let named = Row {
            account: Some("dave".into()),
            ..Row::default()
        };
        team.push(9, &[(1, Row::default()), (2, named)], &state)
            .unwrap();
        let accounts: Vec<Option<String>> = team
            .pull(0, 100)
            .unwrap()
            .into_iter()
            .map(|(_, r)| r.account)
            .collect();
        let some = |a: &str| Some(a.to_owned());
        assert_eq!(
            accounts,
            [
                some("alice"),
                some("alice"),
                some("bob"),
                some("carol"),
                some("dave")
            ]
        );
    }
}
