//! The ledger under test, on either backend, behind the two operations every behaviour test
//! needs: write rows the way its writer does, and read them the way `pith stats` does.

use pith_store::ledger::postgres::{PushState, TeamLedger};
use pith_store::ledger::{Ledger, Row};
use pith_store::postgres::StoreUrl;
use pith_testkit::postgres::PgServer;

/// Where the rows live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// One proxy's SQLite ledger, written and read directly.
    Sqlite,
    /// The team ledger in PostgreSQL: rows pushed by two proxy instances in turn (as their
    /// shippers do), read through a replica synced from it (as `pith stats` does).
    Postgres,
}

/// Every backend: a behaviour test loops over these.
pub const BACKENDS: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];

/// A ledger on one backend.
pub struct Subject {
    local: Ledger,
    team: Option<(TeamLedger, [i64; 2])>,
    next_id: i64,
    batches: usize,
}

impl Subject {
    pub fn new(backend: Backend) -> Subject {
        let team = (backend == Backend::Postgres).then(|| {
            let url = StoreUrl::new(PgServer::shared().database().unwrap());
            (TeamLedger::open(&url).unwrap(), [11, 22])
        });
        Subject {
            // SQLite: the ledger itself; PostgreSQL: the reader's replica.
            local: Ledger::open_in_memory().unwrap(),
            team,
            next_id: 0,
            batches: 0,
        }
    }

    /// Write `rows` in one batch (on PostgreSQL: from the next of the two instances).
    pub fn insert(&mut self, rows: &[Row]) {
        match &self.team {
            None => self.local.insert(rows).unwrap(),
            Some((team, instances)) => {
                let instance = instances[self.batches % 2];
                let numbered: Vec<(i64, Row)> = rows
                    .iter()
                    .map(|r| {
                        self.next_id += 1;
                        (self.next_id, r.clone())
                    })
                    .collect();
                let new = team
                    .push(instance, &numbered, &Self::state_of(instance))
                    .unwrap();
                assert_eq!(new, rows.len() as u64);
            }
        }
        self.batches += 1;
    }

    /// What proxy `instance` says about itself: its own account is `proxy-<instance>` (the
    /// account of its rows that name none).
    pub fn state_of(instance: i64) -> PushState {
        PushState {
            account: format!("proxy-{instance}"),
            ..PushState::default()
        }
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        match self.team {
            None => Backend::Sqlite,
            Some(_) => Backend::Postgres,
        }
    }

    /// The ledger to read, up to date with everything written.
    pub fn read(&mut self) -> &Ledger {
        if let Some((team, _)) = &self.team {
            team.sync_replica(&mut self.local).unwrap();
        }
        &self.local
    }
}
