//! Team mode as readers see it (`pith stats`, the dashboard): the team ledger pulled into a
//! local replica, and what each proxy last said about itself. A team database that cannot be
//! reached is not an error: the replica as last synced is shown, with the reason.

use std::path::{Path, PathBuf};

use pith_store::ledger::Ledger;
use pith_store::postgres::StoreUrl;
use pith_store::postgres::ledger::{Instance, TeamLedger};
use pith_store::postgres::ship;
use serde::Serialize;

/// The team part of a report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TeamInfo {
    /// The team database, password hidden.
    pub store: String,
    /// The local replica the report was computed from.
    pub replica: PathBuf,
    /// Rows this sync pulled.
    pub pulled: u64,
    /// Why the sync failed, when it did (the report is then the replica as last synced).
    pub sync_error: Option<String>,
    /// Every proxy ledger that has shipped rows, as it last reported itself.
    pub instances: Vec<Instance>,
    /// Rows this machine's ledger still has to ship (`None` without a local ledger).
    pub local_backlog: Option<u64>,
}

/// Bring the replica at `replica` up to date from `url`, and say how that went; `local` is
/// this machine's own ledger, whose backlog is reported.
pub(crate) fn sync(url: &StoreUrl, replica: &Path, local: Option<&Path>) -> TeamInfo {
    let local_backlog = local
        .filter(|p| p.exists())
        .and_then(|p| Ledger::open_read_only(p).ok())
        .and_then(|l| ship::backlog(&l).ok());
    let mut info = TeamInfo {
        store: url.to_string(),
        replica: replica.to_owned(),
        pulled: 0,
        sync_error: None,
        instances: Vec::new(),
        local_backlog,
    };
    let synced = Ledger::open(replica)
        .map_err(pith_store::postgres::PgError::from)
        .and_then(|mut ledger| {
            let team = TeamLedger::open(url)?;
            let pulled = team.sync_replica(&mut ledger)?;
            Ok((pulled, team.instances()?))
        });
    match synced {
        Ok((pulled, instances)) => {
            info.pulled = pulled;
            info.instances = instances;
        }
        Err(e) => info.sync_error = Some(format!("{:#}", anyhow::Error::new(e))),
    }
    info
}
