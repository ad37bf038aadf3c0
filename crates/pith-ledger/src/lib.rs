//! The ledger writers: every finished request's [`Record`] goes to the spool on disk, and two
//! threads turn the spool into rows, in order, each batch committed with the spool position
//! it reached; rows first (a skim and the answer's usage), their derivations (the prompt's
//! fingerprints and busts, the history turn: a parse of the whole prompt) after, from a second
//! position, in the same turn once the rows are caught up.
//!
//! The request path only appends a record to the spool (`spool.rs`: a `write` into the page
//! cache under a short lock, no parsing) as the answer ends ([`LedgerSink::submit`]), and,
//! while traffic flows, wakes no writer: the idle-priority writer reads the spool on its own
//! clock. Only a backlog (the spool holding
//! [`RESCUE_BACKLOG_BYTES`], or an entry waiting [`MAX_WAIT`]) or the first record after a
//! pause makes a request wake a writer. Everything costly (JSON and SSE parsing,
//! decompression, fingerprints, SQLite) runs on the writer threads (`row.rs`). Nothing is
//! dropped for being late: the backlog waits on disk, memory stays bounded, and a record that
//! cannot be kept at all (the spool's limit, a full disk) is counted as lost, persisted in the
//! ledger's counters and logged, so `pith stats` and `/metrics` show it.
//!
//! The two writers are `pith-ledger`, at idle CPU priority, and `pith-ledger-rescue`, at
//! normal priority, which writes what the idle one cannot on a saturated machine; one writes at
//! a time. Rows come before their derivations so that under a burst the ledger's counts, cost
//! and usage stay current while busts and history follow; a row still waiting is marked
//! (`derivations_pending`), shown by `pith stats`, `/metrics` and the dashboard, and not
//! shipped to a team ledger until they come. A ledger that refuses every write (locked,
//! full) leaves the records in the spool, tried again every [`RETRY_AFTER`].
//! [`LedgerSink::flush`] is the barrier for whoever reads the ledger right after a request
//! (`/pith/api/flush`, and every integration test that waits for rows or history).

mod bases;
mod edits;
mod history;
mod record;
pub mod report;
mod row;
mod spool;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pith_outcome::{Refusal, RequestOutcome};
use pith_store::clock::Clock;
use pith_store::history::{History, Turn};
use pith_store::ledger::{DAMAGED_ENTRIES, DROPPED_ROWS, Derivation, Ledger, Row, WriteBatch};

pub use history::{HistorySink, Labels};
pub use record::{ProviderCount, Record, Report};
pub use row::keep_conversation_facts;
pub use spool::{
    DEFAULT_LIMIT as DEFAULT_SPOOL_LIMIT, SpoolConfig, SpoolError, dir_beside as spool_dir,
};
use spool::{
    DERIVED_GENERATION, DERIVED_OFFSET, NotKept, Position, SPOOL_GENERATION, SPOOL_OFFSET, Spool,
};

/// Rows written per transaction at most.
const BATCH: usize = 256;
/// Bytes read per transaction at most (about: one entry may be larger), each entry weighed by
/// its bodies as read (`ReadBatch::weight`): the batch is held decoded while it is parsed, so
/// this bounds what the writers add to the proxy's memory
/// (16 MiB added about 25 MiB to the peak of a burst of 2,000 Claude Code requests).
const BATCH_BYTES: u64 = 4 << 20;

/// How long a record may wait for the idle writer before the rescue writer takes it: rows reach
/// the ledger within about this long (plus one rescue check) even on a saturated machine.
const MAX_WAIT: Duration = Duration::from_secs(2);
/// How often the rescue writer looks at the age of the backlog while records are arriving.
const RESCUE_CHECK: Duration = Duration::from_secs(1);
/// A backlog this large means the idle-priority writer is not keeping up (the machine is
/// saturated): the rescue writer takes over at once.
const RESCUE_BACKLOG_BYTES: u64 = 8 << 20;
/// How long a writer waits before trying a ledger that refused a write again.
const RETRY_AFTER: Duration = Duration::from_millis(250);
/// Lost records are logged at most this often (each with the count so far).
const LOST_LOG_EVERY: Duration = Duration::from_secs(10);
/// Lost records whose announcement the writers still have to close, at most (16 bytes each):
/// past it (a ledger locked for hours with the spool full) a lost request whose answer had
/// started may come back as `interrupted` after a restart.
const LOST_OPEN_MAX: usize = 1 << 16;

/// The ledger, what the writers have read of the spool, and how many lost records it has been
/// told about; and the history, when conversations are recorded.
struct Store {
    ledger: Ledger,
    /// Where the next read of the spool for rows starts: committed with the rows read before
    /// it.
    position: Position,
    /// Where the next read for derivations starts (at most `position`): committed with the
    /// derivations read before it (and with every batch of rows). The spool keeps every entry
    /// from here on.
    derived: Position,
    /// Rows left waiting for derivations no record will bring were looked for (once a start).
    orphans_checked: bool,
    /// The first segment this process appends to: once the writers read there, every record a
    /// previous process left is written, and its requests still open were cut by its end.
    own_generation: u64,
    /// Those requests have been written as interrupted.
    recovered: bool,
    /// Requests that arrived before this are a previous process's.
    started_arrival: i64,
    lost_persisted: u64,
    damaged_persisted: u64,
    history: Option<History>,
}

/// The spool, and what the writers and the request path tell each other.
struct Shared {
    spool: Spool,
    store: Mutex<Store>,
    /// How recorded conversations are labelled (`None`: history is not recorded).
    history: Option<Labels>,
    /// The name of the instance that serves the requests, on each row (given at start, or
    /// by [`LedgerSink::name_instance`] once the proxy knows its port). Rows a previous process
    /// left in the spool get the name of the one that writes them (one home is one instance);
    /// written before the name is known, they have none.
    instance: std::sync::OnceLock<String>,
    /// Set by the writer before it parks; the request path that finds it set wakes the writer.
    parked: AtomicBool,
    /// Set by the rescue writer before it parks; a request that finds a backlog wakes it.
    rescue_parked: AtomicBool,
    stop: AtomicBool,
    /// Stop without writing what waits (tests: a process killed with records in the spool).
    #[cfg(test)]
    abandoned: AtomicBool,
    written: AtomicU64,
    /// Records lost since start (the ledger's `dropped_rows` counter keeps the total).
    lost: AtomicU64,
    /// Records lost since start whose answer may have been announced ([`LedgerSink::opened`]),
    /// each with where the spool ended when it was lost (its announcement lies before): the
    /// writers close the announcement once they have read that far, so the next start does not
    /// write it as `interrupted` (it is counted as lost already).
    lost_open: Mutex<Vec<(Position, i64)>>,
    /// Spool entries found damaged and skipped since start (the ledger's
    /// `damaged_spool_entries` counter keeps the total): kept, but unreadable.
    damaged: AtomicU64,
    /// Requests refused since start, per reason (the ledger's `refused:*` counters keep the
    /// totals).
    refused: [AtomicU64; Refusal::ALL.len()],
    /// Of those, the ones added to the ledger's counters.
    refused_kept: [AtomicU64; Refusal::ALL.len()],
    /// The ledger refused the last counter write: tried again with the next rows written, not
    /// at every tick (and said once, not at every try).
    counters_failing: AtomicBool,
    write_errors: AtomicU64,
    /// Derivations the ledger refused (their rows are kept without them).
    derivation_errors: AtomicU64,
    history_errors: AtomicU64,
    /// Tests: write rows but no derivations while set.
    #[cfg(test)]
    hold_derivations: AtomicBool,
    /// When a lost record was last logged.
    lost_logged: Mutex<Option<Instant>>,
    /// Signalled after every commit that wrote rows: what a caller waiting for rows waits on.
    commits: (Mutex<()>, std::sync::Condvar),
    /// Records handed over by [`LedgerSink::submit`] and not yet appended: the spool is not
    /// idle while one waits.
    submitting: AtomicU64,
    /// What records are stamped with, and what tells this process's requests from a previous
    /// one's.
    clock: Clock,
}

impl Shared {
    /// The writers' shared state over `spool` and `store`, nothing counted yet.
    fn new(
        spool: Spool,
        store: Store,
        history: Option<Labels>,
        instance: Option<&str>,
        clock: Clock,
    ) -> Shared {
        Shared {
            clock,
            spool,
            store: Mutex::new(store),
            history,
            instance: instance
                .map(str::to_owned)
                .map_or_else(std::sync::OnceLock::new, From::from),
            parked: AtomicBool::new(false),
            rescue_parked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            #[cfg(test)]
            abandoned: AtomicBool::new(false),
            written: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            lost_open: Mutex::new(Vec::new()),
            damaged: AtomicU64::new(0),
            refused: std::array::from_fn(|_| AtomicU64::new(0)),
            refused_kept: std::array::from_fn(|_| AtomicU64::new(0)),
            counters_failing: AtomicBool::new(false),
            write_errors: AtomicU64::new(0),
            derivation_errors: AtomicU64::new(0),
            history_errors: AtomicU64::new(0),
            #[cfg(test)]
            hold_derivations: AtomicBool::new(false),
            lost_logged: Mutex::new(None),
            commits: (Mutex::new(()), std::sync::Condvar::new()),
            submitting: AtomicU64::new(0),
        }
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        // A panic inside an insert leaves SQLite's transaction to roll back; the store is usable.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The idle writer is not keeping up: a large backlog, or an entry waiting too long.
    fn needs_rescue(&self) -> bool {
        let (_, bytes) = self.spool.backlog();
        bytes >= RESCUE_BACKLOG_BYTES || self.spool.oldest_wait().is_some_and(|w| w >= MAX_WAIT)
    }

    fn idle(&self) -> bool {
        self.submitting.load(Ordering::SeqCst) == 0 && self.spool.backlog().0 == 0
    }

    fn lost_open(&self) -> MutexGuard<'_, Vec<(Position, i64)>> {
        self.lost_open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The lost records whose announcements lie before `through` (taken: handed back with
    /// [`Shared::lost_open_back`] when their batch is not written).
    fn lost_open_through(&self, through: Position) -> Vec<i64> {
        let mut open = self.lost_open();
        let mut due = Vec::new();
        open.retain(|&(at, arrival)| {
            let read = at <= through;
            if read {
                due.push(arrival);
            }
            !read
        });
        due
    }

    /// Lost records taken by [`Shared::lost_open_through`] whose batch was not written.
    fn lost_open_back(&self, through: Position, arrivals: &[i64]) {
        self.lost_open()
            .extend(arrivals.iter().map(|&arrival| (through, arrival)));
    }

    /// Count `n` rows written and wake whoever waits for rows.
    fn wrote(&self, n: u64) {
        self.written.fetch_add(n, Ordering::Relaxed);
        let _guard = self
            .commits
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.commits.1.notify_all();
    }
}

/// Counters of what the writers did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerStats {
    /// Rows written to the ledger.
    pub written: u64,
    /// Records that could not be kept (the spool's limit reached, or the disk refused them).
    pub lost: u64,
    /// Spool entries found damaged and skipped (a write torn when pith was killed).
    pub damaged: u64,
    /// Rows the ledger refused alone (their records are skipped and counted as lost).
    pub write_errors: u64,
    /// Rows whose derivations the ledger refused alone (kept without them).
    pub derivation_errors: u64,
    /// History write transactions that failed; their turns are lost.
    pub history_errors: u64,
    /// Records waiting in the spool now: for their rows, or for their derivations.
    pub backlog: u64,
    /// Their bytes.
    pub backlog_bytes: u64,
}

/// The request path's handle on the ledger writers. Cloning shares the same writers.
///
/// Two threads write: `pith-ledger` at idle CPU priority does all the work while the machine
/// has idle time, and `pith-ledger-rescue`, at normal priority, writes when the idle one
/// starves (a backlog of [`RESCUE_BACKLOG_BYTES`], or a record waiting [`MAX_WAIT`]) and at
/// shutdown. They never write at the same time, so rows are written in spool order.
#[derive(Clone)]
pub struct LedgerSink {
    shared: Arc<Shared>,
    writer: std::thread::Thread,
    rescue: std::thread::Thread,
    handles: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

/// Records with at least this many bytes of bodies are appended on the blocking pool (a thread
/// woken per request, worth it only when the write is long), smaller ones on the proxy's own
/// thread before their answer's end.
const APPEND_BESIDE_BYTES: usize = 256 << 10;

/// A large record on its way to the spool ([`LedgerSink::submit`]): appended when it is
/// dropped, on the blocking pool or, should that never run it, as the runtime shuts down.
struct Submission {
    sink: LedgerSink,
    record: Option<Record>,
}

impl Drop for Submission {
    fn drop(&mut self) {
        if let Some(record) = self.record.take() {
            self.sink.append_now(record);
        }
        self.sink.shared.submitting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A finished record waiting for one more fact ([`LedgerSink::hold`]): submitted when dropped.
pub struct Held {
    sink: LedgerSink,
    record: Option<Record>,
}

impl Held {
    /// The record, to fill in what it waited for.
    pub fn record_mut(&mut self) -> Option<&mut Record> {
        self.record.as_mut()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(record) = self.record.take() {
            // Submitted before the hold is let go, so a flush never finds neither.
            self.sink.submit(record);
        }
        self.sink.shared.submitting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How often the writer drains the spool while requests keep coming. Requests then never pay
/// for waking it (a futex call and, on a busy machine, a context switch on their core); rows
/// reach SQLite at most this much later.
const TICK: Duration = Duration::from_millis(10);
/// Empty ticks after which the writer parks until the next record wakes it (an idle proxy
/// does not keep a timer running).
const IDLE_TICKS: u32 = 50;

/// Why the writers could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The spool directory or its files.
    #[error(transparent)]
    Spool(#[from] SpoolError),
    /// The ledger's counters could not be read.
    #[error("cannot read the ledger's spool position")]
    Ledger(#[from] pith_store::StoreError),
    /// A writer thread could not be started.
    #[error("cannot start the ledger writer threads")]
    Thread(#[from] std::io::Error),
}

impl LedgerSink {
    /// Start the writer threads over `ledger`, with records waiting in the spool `spool`.
    /// Records a previous process left in the spool are written first.
    pub fn start(ledger: Ledger, spool: &SpoolConfig) -> Result<LedgerSink, StartError> {
        Self::start_writers(ledger, spool, None, true, None, Clock::system())
    }

    /// [`LedgerSink::start`], and record each request's conversation in `history` on the
    /// same threads, after its ledger row; every row names `instance` when it is known before
    /// the writers start (rows a previous process left in the spool included). Records are
    /// stamped from `clock` ([`LedgerSink::clock`]; the system's, but in tests).
    pub fn start_with_history(
        ledger: Ledger,
        spool: &SpoolConfig,
        history: Option<HistorySink>,
        instance: Option<&str>,
        clock: Clock,
    ) -> Result<LedgerSink, StartError> {
        Self::start_writers(ledger, spool, history, true, instance, clock)
    }

    /// The clock the proxy stamps this ledger's records with.
    pub fn clock(&self) -> &Clock {
        &self.shared.clock
    }

    /// `idle_writer_runs: false` stands in for a machine so busy that the idle-priority
    /// writer never gets the CPU (tests of the rescue writer).
    fn start_writers(
        ledger: Ledger,
        spool: &SpoolConfig,
        history: Option<HistorySink>,
        idle_writer_runs: bool,
        instance: Option<&str>,
        clock: Clock,
    ) -> Result<LedgerSink, StartError> {
        let rows_through = last_committed(&ledger)?;
        // Unset: a ledger from before the split (or new) has its derivations written with its
        // rows (every batch of rows sets them from then on). Nothing is written here: another
        // process may hold the ledger's lock, and the writers wait for it.
        let derived_through = match (
            ledger.counter_if_set(DERIVED_GENERATION)?,
            ledger.counter_if_set(DERIVED_OFFSET)?,
        ) {
            (Some(generation), Some(offset)) => Position { generation, offset },
            _ => rows_through,
        };
        let started_arrival = clock.arrival_us();
        // The spool keeps what the derivations have not read yet.
        let (spool, derived) = Spool::open(spool, derived_through.min(rows_through))?;
        let position = rows_through.max(derived);
        let own_generation = spool.generation();
        let (store, history) = match history.map(HistorySink::into_parts) {
            Some((store, labels)) => (Some(store), Some(labels)),
            None => (None, None),
        };
        let store = Store {
            ledger,
            position,
            derived,
            orphans_checked: false,
            own_generation,
            recovered: false,
            started_arrival,
            lost_persisted: 0,
            damaged_persisted: 0,
            history: store,
        };
        let shared = Arc::new(Shared::new(spool, store, history, instance, clock));
        Ok(Self::spawn_writers(shared, idle_writer_runs)?)
    }

    /// Start the two writer threads over `shared`, and wake them at once when a previous
    /// process left records waiting.
    fn spawn_writers(shared: Arc<Shared>, idle_writer_runs: bool) -> std::io::Result<LedgerSink> {
        let thread_shared = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("pith-ledger".into())
            .spawn(move || {
                if idle_writer_runs {
                    writer(&thread_shared);
                } else {
                    while !thread_shared.stop.load(Ordering::SeqCst) {
                        std::thread::park();
                    }
                }
            })?;
        let rescue_shared = Arc::clone(&shared);
        let rescue_handle = std::thread::Builder::new()
            .name("pith-ledger-rescue".into())
            .spawn(move || rescue(&rescue_shared))?;
        let sink = LedgerSink {
            shared,
            writer: handle.thread().clone(),
            rescue: rescue_handle.thread().clone(),
            handles: Arc::new(Mutex::new(vec![handle, rescue_handle])),
        };
        if !sink.shared.idle() {
            // What a previous process left waits no longer than a tick.
            sink.writer.unpark();
            sink.rescue.unpark();
        }
        Ok(sink)
    }

    /// The answer to `record`'s request has started (its response headers are going to the
    /// client): announce it in the spool, so that if this process dies before the answer ends
    /// the next start still writes its row (`interrupted`). A failure here is not a loss: the
    /// finished record follows.
    pub fn opened(&self, record: &Record) {
        let _ = self.shared.spool.append_opened(record);
    }

    /// Count a request refused before it was served (no row: see [`Refusal`]). A parked
    /// writer is woken to put it in the ledger's counters.
    pub fn refused(&self, reason: Refusal) {
        // SeqCst with the writer's `parked` store: one of the two sees the other.
        self.shared.refused[reason.index()].fetch_add(1, Ordering::SeqCst);
        if self.shared.parked.load(Ordering::SeqCst) {
            self.writer.unpark();
        }
    }

    /// Keep a finished request's record. `finish` calls this while the body's end is polled,
    /// before hyper writes the closing chunk, so a record appended here is in the spool before
    /// the client has its answer's end: a kill -9 after an answer reached the client finds it
    /// finished, never interrupted. That costs the answer's end a `write` of the record into
    /// the page cache, a few microseconds for a usual turn. A record of
    /// [`APPEND_BESIDE_BYTES`] or more (a 1.3 MB session: about a millisecond of writing) goes
    /// to the blocking pool instead, so its write runs beside the session's next request
    /// rather than before the answer's end; a kill -9 within that millisecond leaves its row
    /// `interrupted` (the `opened` entry), still in the ledger once. A submission that never
    /// runs (the runtime shutting down) appends when it is dropped: nothing is lost, and
    /// [`LedgerSink::flush`] waits for every submission.
    pub fn submit(&self, record: Record) {
        let large = record.body_bytes() >= APPEND_BESIDE_BYTES;
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if large => runtime,
            _ => return self.append_now(record),
        };
        self.shared.submitting.fetch_add(1, Ordering::SeqCst);
        let submission = Submission {
            sink: self.clone(),
            record: Some(record),
        };
        runtime.spawn_blocking(move || drop(submission));
    }

    /// Keep a finished record that waits for one more fact (the provider's count of its body,
    /// asked beside the request): it is submitted when the [`Held`] is dropped, and
    /// [`LedgerSink::flush`] waits for it meanwhile. A runtime shutting down drops it, so it
    /// is kept either way. The wait is the holder's to bound; a kill -9 within it leaves the
    /// row `interrupted` (the `opened` entry), still in the ledger once.
    pub fn hold(&self, record: Record) -> Held {
        self.shared.submitting.fetch_add(1, Ordering::SeqCst);
        Held {
            sink: self.clone(),
            record: Some(record),
        }
    }

    /// Append a record to the spool now. One that cannot be kept is counted and logged.
    fn append_now(&self, record: Record) {
        let appended = self.shared.spool.append(&record);
        let (size, arrival_us) = (record.body_bytes(), record.arrival_us);
        drop(record);
        pith_alloc::release::freed(size);
        if let Err(why) = appended {
            self.lose(&why, arrival_us);
            return;
        }
        if self.shared.needs_rescue() && self.shared.rescue_parked.swap(false, Ordering::SeqCst) {
            self.rescue.unpark();
        }
        if self.shared.parked.swap(false, Ordering::SeqCst) {
            // Traffic resumes after a pause: both writers leave their untimed sleep.
            self.writer.unpark();
            self.rescue.unpark();
        }
    }

    fn lose(&self, why: &NotKept, arrival_us: i64) {
        let lost = self.shared.lost.fetch_add(1, Ordering::Relaxed) + 1;
        {
            let mut open = self.shared.lost_open();
            if open.len() < LOST_OPEN_MAX {
                open.push((self.shared.spool.end(), arrival_us));
            }
        }
        let mut logged = self
            .shared
            .lost_logged
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if logged.is_some_and(|at| at.elapsed() < LOST_LOG_EVERY) {
            return;
        }
        *logged = Some(Instant::now());
        match why {
            NotKept::Full => tracing::warn!(
                lost,
                "the ledger spool is at its limit: requests are served but not recorded \
                 (raise [ledger] spool_limit, or find why the ledger is not being written)"
            ),
            NotKept::Io(e) => tracing::warn!(
                lost,
                error = e as &dyn std::error::Error,
                "cannot write the ledger spool: requests are served but not recorded"
            ),
        }
    }

    /// Name the instance on every row written from now on (once; a second name is ignored).
    pub fn name_instance(&self, name: &str) {
        let _ = self.shared.instance.set(name.to_owned());
    }

    /// What the writers have done since start, and what waits.
    pub fn stats(&self) -> LedgerStats {
        let (backlog, backlog_bytes) = self.shared.spool.backlog();
        LedgerStats {
            written: self.shared.written.load(Ordering::Relaxed),
            lost: self.shared.lost.load(Ordering::Relaxed),
            damaged: self.shared.damaged.load(Ordering::Relaxed),
            write_errors: self.shared.write_errors.load(Ordering::Relaxed),
            derivation_errors: self.shared.derivation_errors.load(Ordering::Relaxed),
            history_errors: self.shared.history_errors.load(Ordering::Relaxed),
            backlog,
            backlog_bytes,
        }
    }

    /// Write what waits, stop the writers, and wait up to `timeout` for them. What is not
    /// written by then stays in the spool for the next start.
    pub fn shutdown(&self, timeout: Duration) {
        let handles =
            std::mem::take(&mut *self.handles.lock().unwrap_or_else(PoisonError::into_inner));
        self.shared.stop.store(true, Ordering::SeqCst);
        self.writer.unpark();
        self.rescue.unpark();
        let deadline = Instant::now() + timeout;
        for handle in handles {
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if handle.is_finished() {
                let _ = handle.join();
            }
        }
    }
}

impl LedgerSink {
    /// Wait until nothing waits in the spool (every record appended before is in the ledger,
    /// with its history turns, or counted lost) and every refusal counted is in the ledger's
    /// counters, or `timeout`: whether it is so. Under
    /// a load that never lets it empty this waits the whole timeout; what is appended meanwhile
    /// is waited for too.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (lock, commits) = &self.shared.commits;
        let mut guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.shared.idle() && !self.shared.refusals_waiting() {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            guard = commits
                .wait_timeout(guard, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

#[cfg(test)]
impl LedgerSink {
    /// Wait until at least `n` rows are written, or `timeout` passes: the count then.
    fn wait_written(&self, n: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        let (lock, commits) = &self.shared.commits;
        let mut guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let written = self.shared.written.load(Ordering::Relaxed);
            let left = deadline.saturating_duration_since(Instant::now());
            if written >= n || left.is_zero() {
                return written;
            }
            guard = commits
                .wait_timeout(guard, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Stop the writers leaving the spool as it is, as a killed process would.
    fn abandon(&self) {
        self.shared.abandoned.store(true, Ordering::SeqCst);
        self.shutdown(Duration::from_secs(10));
    }
}

/// Ask the OS to run the writer only on otherwise idle CPU time (Linux `SCHED_IDLE`): on a
/// small machine its parsing and SQLite work then never delays the proxy's own thread or the
/// agent. Under full load rows are late, never lost: the backlog waits in the spool.
fn lower_priority() {
    pith_store::priority::run_on_idle_cpu("ledger writer");
}

fn writer(shared: &Shared) {
    lower_priority();
    let mut idle_ticks = 0u32;
    loop {
        let stopping = shared.stop.load(Ordering::SeqCst);
        match drain(shared) {
            Drained::Some => {
                idle_ticks = 0;
                if !stopping {
                    std::thread::sleep(TICK);
                }
                continue;
            }
            Drained::Refused => {
                if stopping {
                    break;
                }
                std::thread::sleep(RETRY_AFTER);
                continue;
            }
            Drained::Nothing => {
                if shared.refusals_waiting() {
                    persist_lost(&mut shared.store(), shared);
                }
            }
        }
        if stopping {
            break;
        }
        idle_ticks += 1;
        if idle_ticks < IDLE_TICKS {
            std::thread::sleep(TICK);
            continue;
        }
        // Announce the park before looking at the spool once more, so a record appended in
        // between either is seen here or finds `parked` set and wakes us.
        shared.parked.store(true, Ordering::SeqCst);
        if shared.idle() && !shared.refusals_waiting() && !shared.stop.load(Ordering::SeqCst) {
            std::thread::park();
        }
        shared.parked.store(false, Ordering::SeqCst);
        idle_ticks = 0;
    }
    persist_lost(&mut shared.store(), shared);
}

/// The normal-priority writer. While records arrive it looks every second for a backlog that
/// is large or has waited [`MAX_WAIT`] (a request that finds a large one wakes it at once), and
/// writes the rows the starved idle writer could not. While the proxy is idle (the idle writer
/// parked, nothing waiting) it sleeps until traffic resumes.
fn rescue(shared: &Shared) {
    loop {
        shared.rescue_parked.store(true, Ordering::SeqCst);
        let needed = shared.needs_rescue();
        if !needed && !shared.stop.load(Ordering::SeqCst) {
            if shared.idle() && shared.parked.load(Ordering::SeqCst) {
                std::thread::park();
            } else {
                std::thread::park_timeout(RESCUE_CHECK);
            }
        }
        shared.rescue_parked.store(false, Ordering::SeqCst);
        if shared.stop.load(Ordering::SeqCst) {
            // Shutting down: write what waits at normal priority, so a busy machine does not
            // leave it to the idle writer until the shutdown timeout cuts it off.
            while drain(shared) == Drained::Some {}
            persist_lost(&mut shared.store(), shared);
            return;
        }
        while shared.needs_rescue() {
            match drain(shared) {
                Drained::Some => {}
                Drained::Refused => {
                    std::thread::sleep(RETRY_AFTER);
                    break;
                }
                Drained::Nothing => break,
            }
        }
    }
}

/// What one [`drain`] did.
#[derive(Debug, PartialEq, Eq)]
enum Drained {
    /// Rows were written (or unreadable entries skipped).
    Some,
    /// Nothing waited.
    Nothing,
    /// The ledger refused the write: the records stay in the spool for the next try.
    Refused,
}

/// Write what waits, rows first: the next batch of rows when records wait for theirs, else the
/// next batch of derivations. One writer at a time (the store's lock), so each is written in
/// spool order.
fn drain(shared: &Shared) -> Drained {
    let mut store = shared.store();
    #[cfg(test)]
    if shared.abandoned.load(Ordering::SeqCst) {
        return Drained::Nothing;
    }
    if !store.recovered && store.position.generation >= store.own_generation {
        match write_interrupted(&mut store, shared) {
            Ok(()) => store.recovered = true,
            Err(e) if e.refuses_every_write() => return Drained::Refused,
            Err(e) => {
                store.recovered = true;
                tracing::warn!(error = %e, "cannot write the requests a previous pith left open");
            }
        }
    }
    let rows = match drain_rows(&mut store, shared) {
        // A whole batch: more rows may wait, and they go first.
        (Drained::Some, true) => return Drained::Some,
        (Drained::Refused, _) => return Drained::Refused,
        (rows, _) => rows,
    };
    #[cfg(test)]
    if shared.hold_derivations.load(Ordering::SeqCst) {
        return rows;
    }
    // The rows are caught up: the derivations next, in the same turn (under a steady load
    // rows never stop arriving, and the derivations must keep up with them).
    match (rows, drain_derivations(&mut store, shared)) {
        (_, Drained::Refused) => Drained::Refused,
        (Drained::Some, _) | (_, Drained::Some) => Drained::Some,
        _ => Drained::Nothing,
    }
}

/// Read the next batch of records from the spool, and write their core rows with the position
/// reached: the skim of each body and the usage of its answer, no parse of the whole prompt.
/// Whether the batch was whole (as many records as a batch takes: more may wait).
fn drain_rows(store: &mut Store, shared: &Shared) -> (Drained, bool) {
    let mut freed = pith_alloc::release::FreedAfter::default();
    let batch = shared.spool.read(store.position, BATCH, BATCH_BYTES);
    freed.note(batch.records.iter().map(Record::body_bytes));
    // Requests lost after their answer was announced, announcements read by now: closed with
    // this batch, so none comes back as `interrupted` (each is counted as lost already).
    let lost_open = shared.lost_open_through(batch.end);
    if batch.end == store.position {
        return (close_lost_open(store, shared, batch.end, &lost_open), false);
    }
    let whole_batch = batch.records.len() >= BATCH || batch.weight() >= BATCH_BYTES;
    let opened = encode_opened(&batch.opened);
    let mut closed: Vec<i64> = batch.records.iter().map(|r| r.arrival_us).collect();
    closed.extend_from_slice(&lost_open);
    if batch.skipped > 0 {
        // Kept once, unreadable now: not a record the spool refused (its own counter).
        shared.damaged.fetch_add(batch.skipped, Ordering::Relaxed);
        tracing::warn!(
            skipped = batch.skipped,
            "damaged entries in the ledger spool (a write torn when pith was killed, or a \
             damaged disk) were skipped: those requests have no row"
        );
    }
    let rows: Vec<Row> = batch
        .records
        .iter()
        .map(row::core_row)
        .map(|mut row| {
            row.instance = shared.instance.get().cloned();
            row
        })
        .collect();
    let end = batch.end;
    let counters = [position_counters(end), derived_counters(store.derived)].concat();
    let whole = WriteBatch {
        rows: &rows,
        opened: &opened,
        closed: &closed,
        counters: &counters,
    };
    let written = match store.ledger.write_batch(&whole) {
        Ok(()) => rows.len() as u64,
        Err(e) if e.refuses_every_write() => {
            // Locked by another process, full or read-only: the records wait in the spool.
            tracing::warn!(error = %e, rows = rows.len(), "ledger write refused; will retry");
            shared.lost_open_back(end, &lost_open);
            return (Drained::Refused, false);
        }
        Err(e) => {
            // One row may be what the ledger refuses: write them one at a time, and skip (and
            // count) only a row refused alone while the ledger takes a write.
            tracing::warn!(error = %e, rows = rows.len(), "ledger write failed; retrying row by row");
            match write_row_by_row(store, shared, &whole, &lost_open, &batch.ends, end) {
                Some(written) => written,
                None => return (Drained::Refused, false),
            }
        }
    };
    store.position = end;
    persist_lost(store, shared);
    shared.spool.taken();
    shared.wrote(written);
    (Drained::Some, whole_batch)
}

/// A read that found no new record: close the lost records' announcements it read past, if
/// any (handed back when the ledger refuses).
fn close_lost_open(
    store: &mut Store,
    shared: &Shared,
    end: Position,
    lost_open: &[i64],
) -> Drained {
    if lost_open.is_empty() {
        return Drained::Nothing;
    }
    let close = WriteBatch {
        closed: lost_open,
        ..WriteBatch::default()
    };
    if store.ledger.write_batch(&close).is_err() {
        shared.lost_open_back(end, lost_open);
        return Drained::Refused;
    }
    Drained::Nothing
}

/// The announcements of `opened` as the ledger keeps them (by arrival, encoded as spooled), to
/// write a row from should the request never end.
fn encode_opened(opened: &[Record]) -> Vec<(i64, Vec<u8>)> {
    let mut encoded = Vec::new();
    opened
        .iter()
        .map(|r| {
            encoded.clear();
            spool::encode(r, spool::OPENED, &mut encoded);
            (r.arrival_us, encoded.clone())
        })
        .collect()
}

/// `whole` (a batch of rows the ledger refused together), written again one row at a time,
/// each with the position its entry ends at (`ends`): the rows written, or `None` when the
/// ledger takes no write at all (the records wait in the spool).
fn write_row_by_row(
    store: &mut Store,
    shared: &Shared,
    whole: &WriteBatch<'_>,
    lost_open: &[i64],
    ends: &[Position],
    end: Position,
) -> Option<u64> {
    let mut written = 0;
    // The announcements first, alone (they are what a row written later may need).
    let announced = WriteBatch {
        opened: whole.opened,
        closed: lost_open,
        ..WriteBatch::default()
    };
    if store.ledger.write_batch(&announced).is_err() {
        shared.lost_open_back(end, lost_open);
        return None;
    }
    for ((row, at), arrival) in whole.rows.iter().zip(ends).zip(whole.closed) {
        let counters = [position_counters(*at), derived_counters(store.derived)].concat();
        let one = WriteBatch {
            rows: std::slice::from_ref(row),
            closed: std::slice::from_ref(arrival),
            counters: &counters,
            ..WriteBatch::default()
        };
        if store.ledger.write_batch(&one).is_ok() {
            written += 1;
            continue;
        }
        let skip = WriteBatch {
            closed: std::slice::from_ref(arrival),
            counters: &counters,
            ..WriteBatch::default()
        };
        if store.ledger.write_batch(&skip).is_err() {
            // The ledger takes no write at all (disk full, locked): try again later
            // from the last position committed.
            store.position = last_committed(&store.ledger).unwrap_or(store.position);
            shared.wrote(written);
            return None;
        }
        shared.write_errors.fetch_add(1, Ordering::Relaxed);
        shared.lost.fetch_add(1, Ordering::Relaxed);
    }
    Some(written)
}

/// Read the next batch of records whose rows are written, and write their derivations with
/// the position reached: each prompt read once for its fingerprints (and the bust pairing and
/// charge they decide) and its history turn.
fn drain_derivations(store: &mut Store, shared: &Shared) -> Drained {
    if store.derived >= store.position {
        check_orphans(store);
        return Drained::Nothing;
    }
    let mut freed = pith_alloc::release::FreedAfter::default();
    let batch = shared
        .spool
        .read_until(store.derived, Some(store.position), BATCH, BATCH_BYTES);
    freed.note(batch.records.iter().map(Record::body_bytes));
    if batch.end == store.derived {
        return Drained::Nothing;
    }
    let (derivations, turns): (Vec<Derivation>, Vec<Option<Turn>>) = batch
        .records
        .iter()
        .filter(|r| row::has_derivations(r))
        .map(|r| row::derivations(r, shared.history.as_ref()))
        .unzip();
    let end = batch.end;
    match store
        .ledger
        .write_derived(&derivations, &derived_counters(end))
    {
        Ok(()) => {}
        Err(e) if e.refuses_every_write() => {
            tracing::warn!(error = %e, "ledger write refused; will retry");
            return Drained::Refused;
        }
        Err(e) => {
            // One row's derivations may be what the ledger refuses: one at a time, and a row
            // refused alone is kept without them (counted), so it never waits for ever.
            tracing::warn!(
                error = %e,
                rows = derivations.len(),
                "ledger write of derivations failed; retrying row by row"
            );
            if !derive_row_by_row(store, shared, &derivations, end) {
                return Drained::Refused;
            }
        }
    }
    store.derived = end;
    let turns: Vec<Turn> = turns.into_iter().flatten().collect();
    record_history(store, shared, &turns);
    // Consumed once its derivations and their history turns are written: a flush that sees
    // the spool empty sees both.
    shared.spool.consumed(&batch);
    if store.derived >= store.position {
        // Caught up (under a steady load, the only moment it is): the check for rows left
        // waiting by a previous process.
        check_orphans(store);
    }
    shared.wrote(0);
    Drained::Some
}

/// `derivations` (a batch the ledger refused together) written again one row at a time, a
/// row refused alone kept without them, then the position `end`: whether the ledger took it
/// (`false`: it takes no write at all).
fn derive_row_by_row(
    store: &mut Store,
    shared: &Shared,
    derivations: &[Derivation],
    end: Position,
) -> bool {
    for d in derivations {
        if store
            .ledger
            .write_derived(std::slice::from_ref(d), &[])
            .is_ok()
        {
            continue;
        }
        if store.ledger.abandon_derivation(d.arrival_us).is_err() {
            return false;
        }
        shared.derivation_errors.fetch_add(1, Ordering::Relaxed);
    }
    store
        .ledger
        .insert_and_set_counters(&[], &derived_counters(end))
        .is_ok()
}

/// Record a batch's history `turns`, when history is recorded; a failure loses them (counted
/// and logged), the ledger's rows stay.
fn record_history(store: &mut Store, shared: &Shared, turns: &[Turn]) {
    if let Some(history) = store.history.as_mut()
        && !turns.is_empty()
        && let Err(e) = history.record(turns)
    {
        shared.history_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            error = &e as &dyn std::error::Error,
            turns = turns.len(),
            "history write failed"
        );
    }
}

/// Once a start, with the derivations caught up with the rows: a row still waiting for its
/// derivations has no record left to bring them (a previous process's record that could not
/// be read back), and would hold the team shipper back for ever: keep it without them.
fn check_orphans(store: &mut Store) {
    if store.orphans_checked {
        return;
    }
    match store.ledger.abandon_derivations() {
        Ok(0) => store.orphans_checked = true,
        Ok(rows) => {
            store.orphans_checked = true;
            tracing::warn!(
                rows,
                "rows whose derivations (prompt fingerprints, busts) could not be made are \
                 kept without them"
            );
        }
        Err(e) => tracing::debug!(error = %e, "cannot look for rows without derivations"),
    }
}

/// Requests waiting in the spool at `dir` to be written to `ledger`, and their bytes (for
/// `pith stats`, from any process: reads only).
pub fn spool_backlog(dir: &std::path::Path, ledger: &Ledger) -> std::io::Result<(u64, u64)> {
    let from = last_committed(ledger).map_err(std::io::Error::other)?;
    spool::backlog(dir, from)
}

/// The counters that say the spool was read up to `at` for rows.
fn position_counters(at: Position) -> [(&'static str, u64); 2] {
    [(SPOOL_GENERATION, at.generation), (SPOOL_OFFSET, at.offset)]
}

/// The counters that say the spool was read up to `at` for derivations.
fn derived_counters(at: Position) -> [(&'static str, u64); 2] {
    [
        (DERIVED_GENERATION, at.generation),
        (DERIVED_OFFSET, at.offset),
    ]
}

/// The requests a previous process announced and never finished (it was killed or crashed
/// mid-answer): each written now as `interrupted`, from what it recorded when the answer
/// began, once all that process's finished records are written (none of these can still end).
fn write_interrupted(store: &mut Store, shared: &Shared) -> Result<(), pith_store::StoreError> {
    let open = store.ledger.open_requests()?;
    let (mut rows, mut closed) = (Vec::new(), Vec::new());
    for (arrival, encoded) in open {
        if arrival >= store.started_arrival {
            continue;
        }
        closed.push(arrival);
        let Some((_, mut record)) = spool::decode(&encoded) else {
            continue;
        };
        record.outcome = RequestOutcome::Interrupted;
        record.error = Some(
            "pith stopped (killed or crashed) while the answer streamed; the client had the \
             response headers"
                .to_owned(),
        );
        // Announced without bodies: nothing to derive.
        let mut row = row::core_row(&record);
        row.derivations_pending = false;
        row.instance = shared.instance.get().cloned();
        rows.push(row);
    }
    if closed.is_empty() {
        return Ok(());
    }
    store.ledger.write_batch(&WriteBatch {
        rows: &rows,
        closed: &closed,
        ..WriteBatch::default()
    })?;
    shared.wrote(rows.len() as u64);
    tracing::warn!(
        requests = rows.len(),
        "requests a previous pith left mid-answer are in the ledger as interrupted"
    );
    Ok(())
}

fn last_committed(ledger: &Ledger) -> Result<Position, pith_store::StoreError> {
    Ok(Position {
        generation: ledger.counter(SPOOL_GENERATION)?,
        offset: ledger.counter(SPOOL_OFFSET)?,
    })
}

/// Add to the ledger's counters what this process counted since it last did: records lost,
/// requests refused.
fn persist_lost(store: &mut Store, shared: &Shared) {
    let lost = shared.lost.load(Ordering::Relaxed);
    if lost > store.lost_persisted {
        match store
            .ledger
            .add_counter(DROPPED_ROWS, lost - store.lost_persisted)
        {
            Ok(()) => store.lost_persisted = lost,
            Err(e) => tracing::warn!(error = %e, "cannot record lost ledger rows"),
        }
    }
    let damaged = shared.damaged.load(Ordering::Relaxed);
    if damaged > store.damaged_persisted {
        match store
            .ledger
            .add_counter(DAMAGED_ENTRIES, damaged - store.damaged_persisted)
        {
            Ok(()) => store.damaged_persisted = damaged,
            Err(e) => tracing::warn!(error = %e, "cannot record damaged spool entries"),
        }
    }
    let mut kept = false;
    for reason in Refusal::ALL {
        let i = reason.index();
        let refused = shared.refused[i].load(Ordering::SeqCst);
        let before = shared.refused_kept[i].load(Ordering::SeqCst);
        if refused > before {
            match store
                .ledger
                .add_counter(&reason.counter(), refused - before)
            {
                Ok(()) => {
                    shared.refused_kept[i].store(refused, Ordering::SeqCst);
                    shared.counters_failing.store(false, Ordering::SeqCst);
                    kept = true;
                }
                Err(e) => {
                    if !shared.counters_failing.swap(true, Ordering::SeqCst) {
                        tracing::warn!(error = %e, "cannot record refused requests");
                    }
                }
            }
        }
    }
    if kept {
        // A flush waiting for the counters sees them.
        shared.wrote(0);
    }
}

impl Shared {
    /// Refusals counted and not in the ledger yet, while the ledger takes counter writes.
    fn refusals_waiting(&self) -> bool {
        if self.counters_failing.load(Ordering::SeqCst) {
            return false;
        }
        Refusal::ALL.iter().any(|r| {
            self.refused[r.index()].load(Ordering::SeqCst)
                > self.refused_kept[r.index()].load(Ordering::SeqCst)
        })
    }
}

#[cfg(test)]
mod tests;
