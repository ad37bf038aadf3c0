//! Hidden tool search blocks in the team store, so that any instance behind a load balancer
//! can put back what another one took out of an answer (`crate::search_blocks` keeps the
//! local cache in front of this).
//!
//! Unlike the ledger, which ships in the background, this is on the request path: a block is
//! written before the answer that hid it goes on to the client (the caller holds the answer
//! until the write is done or its bound passes), and read when a request names a `tool_use`
//! this instance has not seen. So both are async, on the proxy's own runtime, each bounded by
//! the caller.

use std::sync::LazyLock;

use deadpool_postgres::Pool;

use crate::postgres::{PgError, StoreUrl, dollar_params, migrate_on, pool};

/// The statements both databases run, in PostgreSQL's parameters.
static PUT: LazyLock<String> = LazyLock::new(|| dollar_params(super::PUT).into_owned());
static FORGET_OLDER: LazyLock<String> =
    LazyLock::new(|| dollar_params(super::FORGET_OLDER).into_owned());

const MIGRATIONS: &[&str] = &["
CREATE TABLE search_blocks (
    session     TEXT NOT NULL,
    tool_use_id TEXT NOT NULL,
    blocks      TEXT NOT NULL,
    ts_ms       BIGINT NOT NULL,
    PRIMARY KEY (session, tool_use_id)
);
CREATE INDEX search_blocks_ts ON search_blocks (ts_ms);
"];

/// The component name in `pith_schema`.
const COMPONENT: &str = "search_blocks";

/// Connections kept: a write and a read or two at once (each takes a millisecond or so).
const POOL_SIZE: usize = 4;

/// Longest a statement may take before its connection is dropped (not returned to the pool):
/// a server gone without a reset, or one that hangs, would otherwise hold the pool's
/// connections for good. Requests stopped waiting long before (their bound).
const STATEMENT_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The team store's search blocks.
pub struct TeamSearchBlocks {
    pool: Pool,
    url: StoreUrl,
    /// Set once the schema is known to be current (the first call that gets a connection).
    migrated: tokio::sync::OnceCell<()>,
}

impl TeamSearchBlocks {
    /// For `url`; connects on first use.
    pub fn new(url: &StoreUrl) -> Result<TeamSearchBlocks, PgError> {
        Ok(TeamSearchBlocks {
            pool: pool(url, POOL_SIZE)?,
            url: url.clone(),
            migrated: tokio::sync::OnceCell::new(),
        })
    }

    /// The URL (shown redacted).
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, PgError> {
        let mut client = self.pool.get().await.map_err(|source| PgError::Connect {
            url: self.url.clone(),
            source,
        })?;
        self.migrated
            .get_or_try_init(|| migrate_on(&mut client, &self.url, COMPONENT, MIGRATIONS))
            .await?;
        Ok(client)
    }

    /// Connect and bring the schema up to date (at start, so the first request does not pay
    /// for it).
    pub async fn warm(&self) -> Result<(), PgError> {
        self.client().await.map(drop)
    }

    /// `work` on a pooled connection, within [`STATEMENT_LIMIT`]; past it the connection is
    /// dropped instead of going back to the pool.
    async fn within_limit<T>(
        &self,
        work: impl AsyncFnOnce(&deadpool_postgres::Object) -> Result<T, PgError>,
    ) -> Result<T, PgError> {
        let client = tokio::time::timeout(STATEMENT_LIMIT, self.client())
            .await
            .map_err(|_| PgError::Hung {
                url: self.url.clone(),
            })??;
        match tokio::time::timeout(STATEMENT_LIMIT, work(&client)).await {
            Ok(done) => done,
            Err(_) => {
                drop(deadpool_postgres::Object::take(client));
                Err(PgError::Hung {
                    url: self.url.clone(),
                })
            }
        }
    }

    /// Keep `blocks` for `tool_use_id` of `session` (replacing what was kept for it).
    pub async fn put(
        &self,
        session: &str,
        tool_use_id: &str,
        blocks: &str,
        ts_ms: i64,
    ) -> Result<(), PgError> {
        self.within_limit(async |client| {
            client
                .execute(PUT.as_str(), &[&session, &tool_use_id, &blocks, &ts_ms])
                .await?;
            Ok(())
        })
        .await
    }

    /// What is kept for each of `tool_use_ids` of `session` since `since_ms`: `(tool_use_id,
    /// blocks, ts_ms)` for those that have blocks.
    pub async fn get(
        &self,
        session: &str,
        tool_use_ids: &[String],
        since_ms: i64,
    ) -> Result<Vec<(String, String, i64)>, PgError> {
        self.within_limit(async |client| {
            let rows = client
                .query(
                    "SELECT tool_use_id, blocks, ts_ms FROM search_blocks
                     WHERE session = $1 AND tool_use_id = ANY($2) AND ts_ms >= $3",
                    &[&session, &tool_use_ids, &since_ms],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect())
        })
        .await
    }

    /// Remove what is older than `before_ms`; the number removed.
    pub async fn prune(&self, before_ms: i64) -> Result<u64, PgError> {
        self.within_limit(async |client| {
            Ok(client.execute(FORGET_OLDER.as_str(), &[&before_ms]).await?)
        })
        .await
    }
}
