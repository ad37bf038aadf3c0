//! Team mode in the binary: the team ledger as readers see it (`pith stats`, the dashboard:
//! pulled into a local replica, with what each proxy last said about itself; a team database
//! that cannot be reached is not an error, the replica as last synced is shown, with the
//! reason), and the team brain's sync of one workspace (`pith memory sync`, and `pith mcp` in
//! the background).

use std::path::{Path, PathBuf};

use pith_store::brain::postgres::{SyncReport, TeamBrain, repository_of};
use pith_store::ledger::Ledger;
use pith_store::ledger::postgres::{Instance, TeamLedger};
use pith_store::postgres::StoreUrl;
use pith_store::postgres::ship;
use serde::Serialize;

/// The ledger's report with, in team mode, the team database's state: what `pith stats --json`
/// prints and `/pith/api/stats` serves (the report's fields, then `team`).
#[derive(Debug, Serialize)]
pub(crate) struct TeamReport {
    #[serde(flatten)]
    pub report: pith_ledger::report::Report,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team: Option<TeamInfo>,
}

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
    /// History messages this machine still has to ship (`None` without a local history).
    pub local_history_backlog: Option<u64>,
}

/// History messages the file at `path` has not shipped yet (`None`: no history there, or one
/// it cannot read).
pub(crate) fn history_backlog(path: &Path) -> Option<u64> {
    if !path.exists() {
        return None;
    }
    pith_store::history::History::open_read_only(path)
        .and_then(|h| h.backlog())
        .ok()
        .map(|b| b.messages)
}

/// Bring the replica at `replica` up to date from `url`, and say how that went; `local` is
/// this machine's own ledger, and `history` its history, whose backlogs are reported.
pub(crate) fn sync(
    url: &StoreUrl,
    replica: &Path,
    local: Option<&Path>,
    history: Option<&Path>,
) -> TeamInfo {
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
        local_history_backlog: history.and_then(history_backlog),
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

/// Sync the workspace's brain with the team brain at `url`; `None` when the workspace is not a
/// git repository with a commit (there is nothing to match its clones by).
pub(crate) fn sync_brain(
    url: &StoreUrl,
    ws: pith_brain::Workspace,
) -> anyhow::Result<Option<SyncReport>> {
    let Some(repo) = repository_of(ws.root()) else {
        return Ok(None);
    };
    let root = ws.root().to_path_buf();
    let existed = pith_brain::Brain::db_path(&root).exists();
    let origins = pith_brain::origin::Origins::new(&crate::config::pith_home()?);
    // A brain that came with the project is a stranger's: synced, its memories would reach the
    // whole team as the team's (and win every conflict with the times they claim), and the
    // team's would be written into a file pith did not make.
    anyhow::ensure!(
        !existed || origins.of(&root) == pith_brain::origin::Origin::Own,
        "{} is not synced with the team brain: pith has no record of making it here (it came \
         with the project, or an older pith made it, or the project was moved or copied); once \
         you have reviewed it, `pith memory trust` records it as yours",
        pith_brain::Brain::db_path(&root).display()
    );
    let mut local = pith_store::brain::open_workspace_sqlite(ws)?;
    // A brain the sync made holds the team's memories, from the database the user named:
    // recorded as theirs, like one their own save made.
    if !existed {
        origins
            .remember(&root)
            .map_err(|e| anyhow::anyhow!("cannot record the new brain as yours: {e}"))?;
    }
    let team = TeamBrain::open(url)?;
    Ok(Some(team.sync(&repo, &mut local)?))
}

/// How often `pith mcp` syncs its workspace's brain in team mode: a fix saved on one machine
/// reaches the other's hook within this (plus the other's own interval).
pub(crate) const BRAIN_SYNC_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// `pith mcp`'s background sync: a thread that syncs the workspace's brain every
/// [`BRAIN_SYNC_EVERY`] for as long as the server runs. A failure is logged once per outage
/// (the URL shown without its password) and retried at the next tick.
pub(crate) fn spawn_brain_sync(url: StoreUrl, root: PathBuf) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("pith-brain-sync".into())
        .spawn(move || {
            let mut failing = false;
            loop {
                let result = pith_brain::Workspace::new(&root)
                    .map_err(anyhow::Error::from)
                    .and_then(|ws| sync_brain(&url, ws));
                match result {
                    Ok(Some(report)) => {
                        if failing {
                            tracing::info!("team brain {url} reachable again");
                        }
                        failing = false;
                        tracing::debug!(?report, "team brain synced");
                    }
                    Ok(None) => {
                        tracing::info!(
                            "{} is not a git repository with a commit: its memories are not shared",
                            root.display()
                        );
                        return;
                    }
                    Err(e) => {
                        if !failing {
                            tracing::warn!(
                                "cannot sync the project memory with the team brain: {e:#}"
                            );
                        }
                        failing = true;
                    }
                }
                std::thread::sleep(BRAIN_SYNC_EVERY);
            }
        })?;
    Ok(())
}
