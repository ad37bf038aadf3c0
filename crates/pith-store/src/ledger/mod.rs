//! The request ledger: one row per request that passed through the proxy, with what each
//! transform stage did to it (`transform_results`, `transform_facts`).

mod columns;
mod model;
pub mod postgres;
mod query;
mod readers;
mod schema;
mod session;
#[cfg(test)]
mod tests;
mod write;

pub use model::*;
pub use readers::Readers;
use schema::MIGRATIONS;
pub use session::{
    SESSION_REQUESTS_MAX, SavingEntry, SessionBust, SessionRequest, SessionRequests, StageEntry,
};
pub use write::WriteBatch;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rusqlite::OptionalExtension;
use rusqlite::{Connection, params};

use crate::sqlite::{self, StoreError};

/// An hour in milliseconds: the width of `hour_totals`' buckets.
const HOUR_MS: i64 = 3_600_000;

/// What upgrades a ledger an older pith wrote.
const UPGRADE: &str = "run `pith proxy` once to upgrade it";

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

/// The rows a [`Filter`] covers, as a condition on `requests` (parameters `?1`, `?2`).
const FILTERED: &str =
    "(?1 IS NULL OR requests.ts_ms >= ?1) AND (?2 IS NULL OR requests.session = ?2)";

impl Ledger {
    /// Open the ledger at `path`, creating it and bringing it to the newest schema as needed.
    pub fn open(path: &Path) -> Result<Ledger, StoreError> {
        Ok(Ledger {
            conn: sqlite::open(path, MIGRATIONS)?,
        })
    }

    /// Open the ledger at `path` to read it, changing nothing (`pith stats`): see
    /// [`sqlite::open_read_only`]. A ledger an older pith wrote is refused with the command that
    /// upgrades it, rather than migrated by a reader.
    pub fn open_read_only(path: &Path) -> Result<Ledger, StoreError> {
        Ok(Ledger {
            conn: sqlite::open_read_only(path, MIGRATIONS, UPGRADE)?,
        })
    }

    /// [`Ledger::open_read_only`], and whether the connection may be kept for later reads: not
    /// when it was opened immutable (no writer had the file open), since it would never see
    /// a later commit.
    fn open_read_only_keepable(path: &Path) -> Result<(Ledger, bool), StoreError> {
        let (conn, immutable) =
            sqlite::open_read_only_telling(path, MIGRATIONS, UPGRADE, sqlite::BUSY_TIMEOUT)?;
        Ok((Ledger { conn }, !immutable))
    }

    /// A new, empty ledger that lives in memory only (tests).
    pub fn open_in_memory() -> Result<Ledger, StoreError> {
        Ok(Ledger {
            conn: sqlite::open_in_memory(MIGRATIONS)?,
        })
    }
}
