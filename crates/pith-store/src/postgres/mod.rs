//! The team backend's connection: PostgreSQL (tokio-postgres with a deadpool pool), for a team
//! that shares one ledger across machines (`[store] url` / `PITH_STORE_URL`). Each domain keeps
//! its PostgreSQL side beside its SQLite one (`ledger::postgres`, `brain::postgres`,
//! `search_blocks::postgres`; history's queries are written once for both, `history::db`);
//! this module is what they share: the URL, the pool, the blocking handle and migrations.
//!
//! SQLite stays the store of record on each machine: the proxy writes its ledger there as
//! always, and [`ship`] sends those rows to PostgreSQL in the background, so a database that is
//! down or slow never reaches a request. Readers (`pith stats`, the dashboard) pull the team's
//! rows into a local SQLite replica ([`crate::ledger::postgres::TeamLedger::sync_replica`]) and run the same
//! queries over it as over a single ledger.
//!
//! [`crate::brain::postgres`] shares the project memory between clones of one repository the same way: each
//! workspace's SQLite brain stays the one the hook reads, and a sync pushes and pulls changes.
//!
//! Everything here is synchronous to its callers (the ledger's threads, the CLI): a [`Pg`]
//! owns a current-thread runtime and blocks on it.
//!
//! Credentials: a URL is only ever shown through [`StoreUrl`]'s `Display`/`Debug`, which hide
//! the password; the driver's errors do not carry the URL.

pub mod ship;
mod tls;

use std::borrow::Cow;
use std::str::FromStr as _;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

/// SQL written for both databases, with SQLite's numbered parameters (`?N`), as PostgreSQL's
/// `$N` (the SQL given holds no `?` inside a string literal).
pub(crate) fn dollar_params(sql: &str) -> Cow<'_, str> {
    if sql.contains('?') {
        Cow::Owned(sql.replace('?', "$"))
    } else {
        Cow::Borrowed(sql)
    }
}

/// How long connecting to the server may take before it counts as down (unless the URL sets
/// `connect_timeout`): the shipper retries later, a reader says the server is unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// TCP keepalive probes start after this much silence on a connection.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// Unacknowledged data for this long closes the connection (Linux).
#[cfg(target_os = "linux")]
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections a [`Pg`] keeps: each user of one (the shipper, a reader) runs one query at a time.
const POOL_SIZE: usize = 2;

/// A PostgreSQL failure.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The URL could not be read as a PostgreSQL connection string.
    #[error(
        "store url {url} is not a PostgreSQL URL (postgres://user:password@host:port/database)"
    )]
    BadUrl {
        /// The URL, password hidden.
        url: StoreUrl,
        /// The driver's reason.
        source: tokio_postgres::Error,
    },
    /// The URL's TLS settings cannot be used.
    #[error("store url {url}: {reason}")]
    BadTls {
        /// The URL, password hidden.
        url: StoreUrl,
        /// What is wrong with them.
        reason: String,
    },
    /// The CA file the URL names (`sslrootcert`) cannot be used.
    #[error("store url {url}: cannot use sslrootcert {}: {reason}", path.display())]
    RootCert {
        /// The URL, password hidden.
        url: StoreUrl,
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// No connection to the server.
    #[error("cannot connect to {url}")]
    Connect {
        /// The URL, password hidden.
        url: StoreUrl,
        /// Why.
        source: deadpool_postgres::PoolError,
    },
    /// A query failed.
    #[error("PostgreSQL query failed")]
    Query(#[from] tokio_postgres::Error),
    /// A statement took longer than its limit; its connection was dropped.
    #[error("{url} did not answer in time; the connection was dropped")]
    Hung {
        /// The URL, password hidden.
        url: StoreUrl,
    },
    /// The database was migrated by a newer pith; it is left untouched.
    #[error(
        "the {component} schema in {url} is version {found}, newer than this pith knows ({known}); upgrade pith on this machine"
    )]
    TooNew {
        /// The schema part: `ledger`, `brain`, `history`, `search_blocks`.
        component: &'static str,
        /// The URL, password hidden.
        url: StoreUrl,
        /// The database's version.
        found: i32,
        /// The newest version this pith knows.
        known: i32,
    },
    /// A migration failed; its transaction was rolled back.
    #[error("cannot migrate the {component} schema in {url} to version {version}")]
    Migrate {
        /// The schema part: `ledger`, `brain`, `history`, `search_blocks`.
        component: &'static str,
        /// The URL, password hidden.
        url: StoreUrl,
        /// The version the failed migration leads to.
        version: i32,
        /// The driver's error.
        source: tokio_postgres::Error,
    },
    /// The local side (a SQLite ledger or replica) failed.
    #[error("local store")]
    Local(#[from] crate::StoreError),
    /// The runtime that drives the driver could not be built.
    #[error("cannot start the PostgreSQL client's runtime")]
    Runtime(#[source] std::io::Error),
    /// The pool could not be built.
    #[error("cannot set up the PostgreSQL connection pool")]
    Pool(#[from] deadpool_postgres::BuildError),
    /// A stored row could not be read back (a column out of range, unreadable JSON).
    #[error("unreadable row in the team ledger: {0}")]
    Corrupt(String),
}

/// A store URL as given (`postgres://...`), shown with its password hidden wherever it is
/// printed or logged (`Display` and `Debug` both).
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl(String);

impl StoreUrl {
    /// Wrap `url`.
    pub fn new(url: impl Into<String>) -> StoreUrl {
        StoreUrl(url.into())
    }

    /// Whether this is a PostgreSQL URL (`postgres://` or `postgresql://`).
    pub fn is_postgres(&self) -> bool {
        self.0.starts_with("postgres://") || self.0.starts_with("postgresql://")
    }

    /// The URL with its credentials in place, for the driver only.
    pub(crate) fn secret(&self) -> &str {
        &self.0
    }

    /// The URL with the password replaced by `***` (in the user info, and a `password=`
    /// parameter in the query or a key=value string).
    pub fn redacted(&self) -> String {
        let url = &self.0;
        let mut out = match url.find("://") {
            Some(scheme_end) => {
                let rest = &url[scheme_end + 3..];
                let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
                let authority = &rest[..authority_end];
                match authority.rfind('@') {
                    Some(at) => {
                        let userinfo = &authority[..at];
                        let user = match userinfo.find(':') {
                            Some(colon) => format!("{}:***", &userinfo[..colon]),
                            None => userinfo.to_owned(),
                        };
                        format!("{}{user}{}", &url[..scheme_end + 3], &rest[at..])
                    }
                    None => url.clone(),
                }
            }
            None => url.clone(),
        };
        // `password=...` in a query string or a key=value connection string.
        let mut searched = 0;
        while let Some(found) = out[searched..].find("password=") {
            let start = searched + found + "password=".len();
            let end = out[start..]
                .find(['&', ' '])
                .map_or(out.len(), |e| start + e);
            out.replace_range(start..end, "***");
            searched = start + 3;
        }
        out
    }
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreUrl({})", self.redacted())
    }
}

/// A pool of at most `size` connections to `url` (TLS as its `sslmode` and `sslrootcert`
/// say: `tls.rs`), connecting lazily. Its connections run on the runtime that first asks for
/// one: [`Pg`]'s own, or an async caller's (the proxy's team search blocks).
pub(crate) fn pool(url: &StoreUrl, size: usize) -> Result<Pool, PgError> {
    let (driver_url, tls) = tls::split(url)?;
    let mut config =
        tokio_postgres::Config::from_str(&driver_url).map_err(|source| PgError::BadUrl {
            url: url.clone(),
            source,
        })?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    // A server that vanished without a reset (a failover, a partition) is noticed instead of
    // holding connections for good.
    config.keepalives(true);
    config.keepalives_idle(KEEPALIVE_IDLE);
    #[cfg(target_os = "linux")]
    config.tcp_user_timeout(TCP_USER_TIMEOUT);
    config.application_name("pith");
    let recycling = || ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    let manager = match &tls {
        tls::Tls::Off => Manager::from_config(config, NoTls, recycling()),
        tls::Tls::Verified { root_cert, .. } => Manager::from_config(
            config,
            tls::connector(url, root_cert.as_ref())?,
            recycling(),
        ),
    };
    Ok(Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .create_timeout(Some(CONNECT_TIMEOUT))
        .wait_timeout(Some(CONNECT_TIMEOUT))
        .build()?)
}

/// A connection pool to one PostgreSQL database, with the runtime that drives it, for
/// synchronous callers. Use it from one thread at a time.
pub struct Pg {
    runtime: tokio::runtime::Runtime,
    pool: Pool,
    url: StoreUrl,
}

impl Pg {
    /// Set up the pool for `url` (TLS as its `sslmode` and `sslrootcert` say: `tls.rs`);
    /// connects lazily (the first query connects).
    pub fn new(url: &StoreUrl) -> Result<Pg, PgError> {
        let pool = pool(url, POOL_SIZE)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(PgError::Runtime)?;
        Ok(Pg {
            runtime,
            pool,
            url: url.clone(),
        })
    }

    /// The URL (shown redacted).
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    /// Block on `work` with this pool's runtime.
    pub(crate) fn block_on<T>(&self, work: impl Future<Output = T>) -> T {
        self.runtime.block_on(work)
    }

    /// A connection from the pool, to hold across statements (a transaction).
    pub(crate) async fn lease(&self) -> Result<deadpool_postgres::Object, PgError> {
        self.pool.get().await.map_err(|source| PgError::Connect {
            url: self.url.clone(),
            source,
        })
    }

    /// Run `work` with a pooled connection, blocking until it is done.
    pub(crate) fn with<T>(
        &self,
        work: impl AsyncFnOnce(&mut deadpool_postgres::Object) -> Result<T, PgError>,
    ) -> Result<T, PgError> {
        self.runtime.block_on(async {
            let mut client = self.pool.get().await.map_err(|source| PgError::Connect {
                url: self.url.clone(),
                source,
            })?;
            work(&mut client).await
        })
    }

    /// Each component's schema version, reading only (`pith doctor`): empty for a database
    /// pith never opened.
    pub fn schema_versions(&self) -> Result<Vec<(String, i32)>, PgError> {
        self.with(async |client| {
            let exists: bool = client
                .query_one("SELECT to_regclass('pith_schema') IS NOT NULL", &[])
                .await?
                .get(0);
            if !exists {
                return Ok(Vec::new());
            }
            Ok(client
                .query(
                    "SELECT component, version FROM pith_schema ORDER BY component",
                    &[],
                )
                .await?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect())
        })
    }

    /// Bring `component`'s schema to `migrations.len()`: `migrations[i]` takes it from version
    /// `i` to `i + 1`, each in its own transaction, under an advisory lock so two pith
    /// processes starting at once migrate once. A database newer than this pith is refused,
    /// naming both versions.
    pub(crate) fn migrate(
        &self,
        component: &'static str,
        migrations: &[&str],
    ) -> Result<(), PgError> {
        let url = self.url.clone();
        self.with(async |client| migrate_on(client, &url, component, migrations).await)
    }
}

/// [`Pg::migrate`] on one connection, for async callers too.
pub(crate) async fn migrate_on(
    client: &mut deadpool_postgres::Object,
    url: &StoreUrl,
    component: &'static str,
    migrations: &[&str],
) -> Result<(), PgError> {
    let known = i32::try_from(migrations.len()).unwrap_or(i32::MAX);
    let tx = client.transaction().await?;
    tx.batch_execute(
        "SELECT pg_advisory_xact_lock(7369746800);
         CREATE TABLE IF NOT EXISTS pith_schema (
             component TEXT PRIMARY KEY,
             version   INTEGER NOT NULL
         )",
    )
    .await?;
    let found: i32 = tx
        .query_opt(
            "SELECT version FROM pith_schema WHERE component = $1",
            &[&component],
        )
        .await?
        .map_or(0, |r| r.get(0));
    if found > known {
        return Err(PgError::TooNew {
            component,
            url: url.clone(),
            found,
            known,
        });
    }
    for (i, sql) in migrations.iter().enumerate().skip(found as usize) {
        let version = i32::try_from(i + 1).unwrap_or(i32::MAX);
        let migrate = |source| PgError::Migrate {
            component,
            url: url.clone(),
            version,
            source,
        };
        tx.batch_execute(sql).await.map_err(migrate)?;
        tx.execute(
            "INSERT INTO pith_schema (component, version) VALUES ($1, $2)
             ON CONFLICT (component) DO UPDATE SET version = excluded.version",
            &[&component, &version],
        )
        .await
        .map_err(migrate)?;
    }
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        for (url, shown) in [
            (
                "postgres://team:hunter2@db.internal:5432/pith",
                "postgres://team:***@db.internal:5432/pith",
            ),
            (
                "postgresql://team:p%40ss@db/pith?sslmode=disable",
                "postgresql://team:***@db/pith?sslmode=disable",
            ),
            ("postgres://team@db/pith", "postgres://team@db/pith"),
            (
                "postgres://db/pith?user=team&password=hunter2&x=1",
                "postgres://db/pith?user=team&password=***&x=1",
            ),
            (
                "host=db user=team password=hunter2 dbname=pith",
                "host=db user=team password=*** dbname=pith",
            ),
        ] {
            let url = StoreUrl::new(url);
            assert_eq!(url.to_string(), shown);
            assert!(!format!("{url:?}").contains("hunter2"));
            assert!(!format!("{url:?}").contains("p%40ss"));
        }
    }
}
