//! Read-only ledger connections opened once and shared, for readers inside a process that
//! also writes the ledger (the proxy's dashboard, `/metrics`, its live tail).
//!
//! Why a pool and not a connection per page view: closing a connection is closing a file
//! descriptor, and a process that closes a descriptor of a file loses every POSIX lock it holds
//! on that file. SQLite defers such closes for its own connections, but each open and close
//! still costs a schema read, and a viewer per thread would hold a descriptor each. Kept here,
//! the connections live as long as the process, and at most [`IDLE_PER_FILE`] stay open per
//! file once a burst of viewers has gone.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use super::Ledger;
use crate::sqlite::StoreError;

/// Connections kept open per file between uses.
pub const IDLE_PER_FILE: usize = 4;

/// A pool of read-only [`Ledger`] connections, by file.
#[derive(Default)]
pub struct Readers {
    idle: Mutex<HashMap<PathBuf, Vec<Ledger>>>,
}

impl Readers {
    /// An empty pool; connections are opened on first use.
    pub fn new() -> Readers {
        Readers::default()
    }

    /// Run `read` on a read-only connection to the ledger at `path`, opened the first time
    /// (see [`Ledger::open_read_only`]) and kept for the next caller (unless it was opened
    /// immutable, with no writer on the file: it would never see a later commit).
    pub fn with<T>(
        &self,
        path: &Path,
        read: impl FnOnce(&Ledger) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let taken = self.lock().get_mut(path).and_then(Vec::pop);
        let (ledger, keep) = match taken {
            Some(l) => (l, true),
            None => Ledger::open_read_only_keepable(path)?,
        };
        let result = read(&ledger);
        if keep {
            let mut idle = self.lock();
            let kept = idle.entry(path.to_owned()).or_default();
            if kept.len() < IDLE_PER_FILE {
                kept.push(ledger);
            }
        }
        result
    }

    /// Connections open and idle now, over every file (tests).
    pub fn idle(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Vec<Ledger>>> {
        // The map is only pushed to and popped from: a panic cannot leave it half-updated.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
