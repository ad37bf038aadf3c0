//! The shipper: a thread that sends a proxy's local ledger rows to the team ledger.
//!
//! The local SQLite ledger is the queue (an outbox): the proxy's request path and its ledger
//! writers never touch PostgreSQL, so a database that is down or slow cannot delay a request.
//! The shipper reads rows past its cursor (the local counter [`SHIPPED_THROUGH`]), pushes them
//! in one transaction, and only then moves the cursor. A crash between the two sends the batch
//! again, which the team ledger ignores (rows are keyed by this ledger's [`INSTANCE`] id and the
//! local row id): nothing is lost, nothing arrives twice. While the database is unreachable the
//! backlog grows on disk and is retried with backoff; `pith stats` shows it.
//!
//! The same thread ships the local conversation history (when the proxy records one) by the
//! history's own outbox ([`crate::history::ship`]): its cursors live in the history file, and
//! the team history meets a resent batch's rows, so that too arrives once.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{PgError, StoreUrl};
use crate::history::History;
use crate::ledger::postgres::{PushState, TeamLedger};
use crate::ledger::{DROPPED_ROWS, Ledger};

/// The local ledger's counter holding its random id in the team ledger.
pub const INSTANCE: &str = "team_instance";
/// The local ledger's counter holding the newest row id the team ledger has.
pub const SHIPPED_THROUGH: &str = "team_shipped_through";

/// Rows per push: large enough that 2,000 requests/s is a few transactions a second.
const BATCH: usize = 1_000;
/// How often an idle shipper looks for new rows (the proxy's writer commits every ~10 ms under
/// load; a quarter second keeps the team ledger close behind without a busy loop).
const POLL: Duration = Duration::from_millis(250);
/// Waits between attempts while the database is unreachable: doubling up to the maximum.
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// How long stopping waits for the backlog to go out before leaving it for the next start.
const STOP_FLUSH: Duration = Duration::from_secs(2);

/// Rows this ledger still has to send: its newest id past the shipped cursor.
pub fn backlog(ledger: &Ledger) -> Result<u64, crate::StoreError> {
    let last = ledger.last_id()?;
    let shipped = ledger.counter(SHIPPED_THROUGH)?;
    Ok(u64::try_from(last).unwrap_or(0).saturating_sub(shipped))
}

/// What the shipper has done since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShipStats {
    /// Rows pushed (new to the team ledger).
    pub shipped: u64,
    /// Rows waiting, as of the last look.
    pub backlog: u64,
    /// Pushes (or connections) that failed.
    pub failures: u64,
    /// History messages pushed (new to the team history).
    pub history_shipped: u64,
    /// History messages waiting, as of the last look.
    pub history_backlog: u64,
}

#[derive(Default)]
struct Shared {
    stop: Mutex<bool>,
    wake: Condvar,
    shipped: AtomicU64,
    backlog: AtomicU64,
    failures: AtomicU64,
    history_shipped: AtomicU64,
    history_backlog: AtomicU64,
}

/// The running shipper; [`Shipper::stop`] ends it after a last flush.
pub struct Shipper {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Shipper {
    /// Start shipping the ledger at `ledger_path` (which must exist: the proxy's) to `url`, its
    /// requests belonging to `account`, and the history at `history_path` when there is one
    /// (it may not exist yet: it is shipped once the proxy has recorded into it).
    pub fn start(
        ledger_path: PathBuf,
        history_path: Option<PathBuf>,
        url: StoreUrl,
        account: String,
    ) -> std::io::Result<Shipper> {
        let shared = Arc::new(Shared::default());
        let thread = std::thread::Builder::new()
            .name("pith-ship".into())
            .spawn({
                let shared = shared.clone();
                move || {
                    let paths = (ledger_path.as_path(), history_path.as_deref());
                    run(paths, &url, &account, &shared);
                }
            })?;
        Ok(Shipper {
            shared,
            thread: Some(thread),
        })
    }

    /// Counts so far.
    pub fn stats(&self) -> ShipStats {
        ShipStats {
            shipped: self.shared.shipped.load(Ordering::Relaxed),
            backlog: self.shared.backlog.load(Ordering::Relaxed),
            failures: self.shared.failures.load(Ordering::Relaxed),
            history_shipped: self.shared.history_shipped.load(Ordering::Relaxed),
            history_backlog: self.shared.history_backlog.load(Ordering::Relaxed),
        }
    }

    /// Send what is left (for at most two seconds), then end the thread. Rows still waiting
    /// stay in the local ledger for the next start.
    pub fn stop(mut self) -> ShipStats {
        self.signal_stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.stats()
    }

    fn signal_stop(&self) {
        *self
            .shared
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.wake.notify_all();
    }
}

impl Drop for Shipper {
    fn drop(&mut self) {
        self.signal_stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Wait up to `d`; true when stopping was asked for.
fn wait(shared: &Shared, d: Duration) -> bool {
    let stop = shared.stop.lock().unwrap_or_else(PoisonError::into_inner);
    if *stop {
        return true;
    }
    let (stop, _) = shared
        .wake
        .wait_timeout(stop, d)
        .unwrap_or_else(PoisonError::into_inner);
    *stop
}

fn stopping(shared: &Shared) -> bool {
    *shared.stop.lock().unwrap_or_else(PoisonError::into_inner)
}

fn run(
    (ledger_path, history_path): (&std::path::Path, Option<&std::path::Path>),
    url: &StoreUrl,
    account: &str,
    shared: &Shared,
) {
    // Shipping is never urgent: the rows wait on disk. Measured in BENCHMARKS.md.
    crate::priority::run_on_idle_cpu("team ledger shipper");
    let mut team: Option<TeamLedger> = None;
    let mut local: Option<(Ledger, i64)> = None;
    let mut histories = Histories::default();
    let mut backoff = Backoff {
        retry: RETRY_FIRST,
        down_since: None,
    };
    let mut stop_deadline: Option<Instant> = None;
    let host = host_name();
    loop {
        if stop_deadline.is_none() && stopping(shared) {
            stop_deadline = Some(Instant::now() + STOP_FLUSH);
        }
        if stop_deadline.is_some_and(|d| Instant::now() >= d) {
            return;
        }
        let ledger = step(
            ledger_path,
            url,
            (account, &host),
            shared,
            &mut team,
            &mut local,
        );
        if ledger.is_err() {
            // A connection-level failure may have left the pool holding broken
            // connections; a fresh one is cheap.
            team = None;
        }
        let history = match history_path {
            Some(path) => histories.step(path, url, shared),
            None => Ok(Step::Idle),
        };
        match both(ledger, history) {
            Ok(Step::Shipped) => backoff.reachable(url),
            Ok(Step::Idle) => {
                backoff.retry = RETRY_FIRST;
                if stop_deadline.is_some() {
                    return; // stopping, and nothing is left to send
                }
                if wait(shared, POLL) {
                    stop_deadline = Some(Instant::now() + STOP_FLUSH);
                }
            }
            Err(e) => {
                backoff.failed(shared, &e);
                if stop_deadline.is_some() {
                    return;
                }
                if wait(shared, backoff.retry) {
                    stop_deadline = Some(Instant::now() + STOP_FLUSH);
                }
                backoff.retry = (backoff.retry * 2).min(RETRY_MAX);
            }
        }
    }
}

/// One pass's outcome from the ledger's and the history's: either's failure, else whether
/// either shipped.
fn both(ledger: Result<Step, PgError>, history: Result<Step, PgError>) -> Result<Step, PgError> {
    match (ledger, history) {
        (Err(e), _) | (_, Err(e)) => Err(e),
        (Ok(Step::Shipped), _) | (_, Ok(Step::Shipped)) => Ok(Step::Shipped),
        _ => Ok(Step::Idle),
    }
}

/// The wait before the next attempt while the team database is unreachable, and since when
/// it has been (to log an outage once, and its end).
struct Backoff {
    retry: Duration,
    down_since: Option<Instant>,
}

impl Backoff {
    /// Something went out: log the end of an outage, and wait the least after the next failure.
    fn reachable(&mut self, url: &StoreUrl) {
        if let Some(since) = self.down_since.take() {
            tracing::info!(
                "team ledger {url} reachable again after {:.1} s; the backlog is going out",
                since.elapsed().as_secs_f64()
            );
        }
        self.retry = RETRY_FIRST;
    }

    /// A pass failed: count it, and warn at the start of an outage only.
    fn failed(&mut self, shared: &Shared, e: &PgError) {
        shared.failures.fetch_add(1, Ordering::Relaxed);
        if self.down_since.is_none() {
            self.down_since = Some(Instant::now());
            tracing::warn!(
                error = e as &dyn std::error::Error,
                "cannot ship to the team database; ledger rows and history wait in the local files and go out when it is back"
            );
        }
    }
}

enum Step {
    Shipped,
    Idle,
}

/// The shipper's two ends of the history: this machine's file and the team's database, each
/// opened when first needed and the team's dropped after a failure.
#[derive(Default)]
struct Histories {
    local: Option<History>,
    team: Option<History>,
}

impl Histories {
    /// Send one batch of the history at `path` (nothing yet when the proxy never recorded).
    fn step(
        &mut self,
        path: &std::path::Path,
        url: &StoreUrl,
        shared: &Shared,
    ) -> Result<Step, PgError> {
        let outcome = self.try_step(path, url, shared);
        if outcome.is_err() {
            self.team = None;
        }
        outcome
    }

    fn try_step(
        &mut self,
        path: &std::path::Path,
        url: &StoreUrl,
        shared: &Shared,
    ) -> Result<Step, PgError> {
        if self.local.is_none() {
            if !path.exists() {
                return Ok(Step::Idle);
            }
            self.local = Some(History::open(path)?);
        }
        let Some(local) = self.local.as_mut() else {
            return Ok(Step::Idle);
        };
        let waiting = local.backlog()?.messages;
        shared.history_backlog.store(waiting, Ordering::Relaxed);
        let outbox = local.outbox()?;
        if outbox.is_empty() {
            return Ok(Step::Idle);
        }
        if self.team.is_none() {
            self.team = Some(History::open_team(url)?);
        }
        let Some(team) = self.team.as_mut() else {
            return Ok(Step::Idle);
        };
        let report = team.push(&outbox)?;
        local.mark_shipped(&outbox)?;
        shared
            .history_shipped
            .fetch_add(report.added, Ordering::Relaxed);
        shared.history_backlog.store(
            waiting.saturating_sub(outbox.messages() as u64),
            Ordering::Relaxed,
        );
        Ok(Step::Shipped)
    }
}

fn step(
    ledger_path: &std::path::Path,
    url: &StoreUrl,
    (account, host): (&str, &str),
    shared: &Shared,
    team: &mut Option<TeamLedger>,
    local: &mut Option<(Ledger, i64)>,
) -> Result<Step, PgError> {
    if local.is_none() {
        let mut ledger = Ledger::open(ledger_path)?;
        let mut instance = ledger.counter(INSTANCE)?;
        if instance == 0 {
            instance = random_instance();
            ledger.set_counter(INSTANCE, instance)?;
        }
        *local = Some((ledger, i64::try_from(instance).unwrap_or(i64::MAX)));
    }
    let Some((ledger, instance)) = local.as_mut() else {
        return Ok(Step::Idle);
    };
    let cursor = i64::try_from(ledger.counter(SHIPPED_THROUGH)?).unwrap_or(i64::MAX);
    let rows = ledger.rows_after(cursor, BATCH)?;
    let waiting = backlog(ledger)?;
    shared.backlog.store(waiting, Ordering::Relaxed);
    let Some(&(last, _)) = rows.last() else {
        return Ok(Step::Idle);
    };
    if team.is_none() {
        *team = Some(TeamLedger::open(url)?);
    }
    let Some(t) = team.as_ref() else {
        return Ok(Step::Idle);
    };
    let state = PushState {
        account: account.to_owned(),
        host: host.to_owned(),
        backlog: waiting.saturating_sub(rows.len() as u64),
        dropped_rows: ledger.counter(DROPPED_ROWS)?,
    };
    let new = t.push(*instance, &rows, &state)?;
    ledger.set_counter(SHIPPED_THROUGH, u64::try_from(last).unwrap_or(0))?;
    shared.shipped.fetch_add(new, Ordering::Relaxed);
    shared.backlog.store(state.backlog, Ordering::Relaxed);
    Ok(Step::Shipped)
}

/// A random positive id, from the standard library's randomly keyed hasher (no RNG crate for
/// one number per ledger).
fn random_instance() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    (h.finish() >> 1).max(1)
}

/// This machine's host name (`unknown` when it cannot be read).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}
