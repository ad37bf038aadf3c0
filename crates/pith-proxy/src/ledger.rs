//! The ledger writers: a bounded queue drained into the store by two threads.
//!
//! The request path only moves a [`Record`] (reference-counted body chunks, no parsing) into the
//! queue under a short lock, and while traffic flows it wakes no thread: the idle-priority
//! writer drains the queue on its own clock. Only a queue that is half full, or the first record
//! after a pause, makes a request wake a writer. Everything costly (JSON and SSE parsing,
//! decompression, SQLite) runs on the writer threads. A full queue drops the record and counts
//! it; the count is persisted in the ledger's counters so `pith stats` shows it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pith_store::ledger::{
    self as store, DROPPED_ROWS, Ledger, RequestOutcome, Row, RowUsage, Transform, TransformResult,
};
use pith_transform::{StageReport, StageResult};
use pith_wire::fingerprint::Fingerprint;
use pith_wire::{Provider, Wire, encoding, request, usage};

use crate::history::{HistorySink, Labels};
use pith_store::history::{History, Turn};

/// Largest decoded response body parsed for usage.
const MAX_DECODED: u64 = 64 << 20;
/// Rows written per transaction at most.
const BATCH: usize = 256;

/// Everything the request path knows about one request, unparsed. Built in one place
/// (`request::Context::record`) and finished in one place (`tee::Pending::finish`).
#[derive(Debug, Default)]
pub(crate) struct Record {
    pub ts_ms: i64,
    pub client: String,
    pub header_session: Option<String>,
    /// The `pith-agent-type` header's value, for history.
    pub agent_type: Option<String>,
    /// The account the request belongs to: its key's, else the proxy's own.
    pub account: String,
    pub wire: Option<Wire>,
    pub provider: Option<Provider>,
    pub method: String,
    pub path: String,
    pub status: Option<u16>,
    /// `Ok` while the provider's answer streams; what pith answered with otherwise.
    pub outcome: RequestOutcome,
    pub error: Option<String>,
    /// The client's original body (shared with the forwarding path, not copied).
    pub request_body: Bytes,
    /// The body sent upstream when a stage changed it (shared, not copied).
    pub upstream_body: Option<Bytes>,
    pub bytes_upstream: u64,
    pub response_chunks: Vec<Bytes>,
    pub response_bytes: u64,
    /// Chunks were dropped from `response_chunks` because the response was too large to keep.
    pub response_truncated: bool,
    pub response_is_sse: bool,
    pub content_encoding: Option<String>,
    pub ttfb_ms: Option<f64>,
    pub total_ms: f64,
    /// What each transform stage did, in pipeline order (converted on the writer thread).
    pub transforms: Vec<StageReport>,
}

impl Record {
    /// The provider answered with a 4xx or 5xx.
    pub fn upstream_status_failed(&self) -> bool {
        self.status.is_some_and(|s| !(200..300).contains(&s))
    }

    /// Bytes of request and response body this record keeps alive until the writer is done.
    fn held_bytes(&self) -> usize {
        self.request_body.len()
            + self.upstream_body.as_ref().map_or(0, Bytes::len)
            + self.response_chunks.iter().map(Bytes::len).sum::<usize>()
    }
}

/// Records waiting for the writer, with the body bytes they hold.
#[derive(Default)]
struct Queue {
    records: VecDeque<Box<Record>>,
    bytes: usize,
    /// When the oldest waiting record arrived.
    oldest: Option<Instant>,
}

/// How long a record may wait for the idle writer before the rescue writer takes it: rows reach
/// the ledger within about this long (plus one rescue check) even on a saturated machine.
const MAX_WAIT: Duration = Duration::from_secs(2);
/// How often the rescue writer looks at the age of the queue while records are arriving.
const RESCUE_CHECK: Duration = Duration::from_secs(1);

/// Body bytes the queue may hold (one record larger than this is still taken into an empty
/// queue): what a writer that falls behind may cost in memory.
const MAX_QUEUED_BYTES: usize = 16 << 20;

impl Queue {
    /// Half full, by records or by bytes: the idle-priority writer is not keeping up (the
    /// machine is saturated), and the rescue writer must take over before records drop.
    fn backlogged(&self, capacity: usize) -> bool {
        self.records.len() * 2 >= capacity || self.bytes * 2 >= MAX_QUEUED_BYTES
    }

    /// A record has waited longer than the idle writer would ever make it wait on a machine
    /// with idle time: it is starved, and the rescue writer writes the row instead.
    fn stale(&self) -> bool {
        self.oldest.is_some_and(|t| t.elapsed() >= MAX_WAIT)
    }

    fn needs_rescue(&self, capacity: usize) -> bool {
        self.backlogged(capacity) || self.stale()
    }
}

/// The ledger and how many dropped records it has been told about, shared by the writers;
/// and the history, when conversations are recorded.
struct Store {
    ledger: Ledger,
    dropped_persisted: u64,
    history: Option<History>,
}

/// Records waiting for the writers, and what the writers and the request path tell each other.
struct Shared {
    queue: Mutex<Queue>,
    capacity: usize,
    store: Mutex<Store>,
    /// How recorded conversations are labelled (`None`: history is not recorded).
    history: Option<Labels>,
    /// Set by the writer before it parks; the request path that finds it set wakes the writer.
    parked: AtomicBool,
    /// Set by the rescue writer before it parks; a request that finds the queue backlogged
    /// wakes it.
    rescue_parked: AtomicBool,
    stop: AtomicBool,
    written: AtomicU64,
    dropped: AtomicU64,
    write_errors: AtomicU64,
    history_errors: AtomicU64,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // A panic while holding the lock cannot leave the queue half-updated.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        // A panic inside an insert leaves SQLite's transaction to roll back; the store is usable.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Counters of what the writer did; `dropped` counts records refused by a full queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerStats {
    /// Rows written to the ledger.
    pub written: u64,
    /// Records refused because the queue was full (by records or by held bytes).
    pub dropped: u64,
    /// Write transactions that failed; their rows are lost.
    pub write_errors: u64,
    /// History write transactions that failed; their turns are lost.
    pub history_errors: u64,
}

/// The request path's handle on the ledger writers. Cloning shares the same writers.
///
/// Two threads write: `pith-ledger` at idle CPU priority does all the work while the machine
/// has idle time, and `pith-ledger-rescue`, at normal priority, writes when the idle one
/// starves (the queue half full, or a record waiting [`MAX_WAIT`]) and at shutdown.
#[derive(Clone)]
pub struct LedgerSink {
    shared: Arc<Shared>,
    writer: std::thread::Thread,
    rescue: std::thread::Thread,
    handles: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

/// How often the writer drains the queue while requests keep coming. Requests then never pay
/// for waking it (a futex call and, on a busy machine, a context switch on their core); rows
/// reach SQLite at most this much later, and bodies wait at most this long to be released.
const TICK: Duration = Duration::from_millis(10);
/// Empty ticks after which the writer parks until the next record wakes it (an idle proxy
/// does not keep a timer running).
const IDLE_TICKS: u32 = 50;

impl LedgerSink {
    /// Start the writer threads; at most `capacity` records wait in the queue.
    pub fn start(ledger: Ledger, capacity: usize) -> std::io::Result<LedgerSink> {
        Self::start_writers(ledger, capacity, None, true)
    }

    /// [`LedgerSink::start`], and record each request's conversation in `history` on the
    /// same threads, after its ledger row.
    pub fn start_with_history(
        ledger: Ledger,
        capacity: usize,
        history: Option<HistorySink>,
    ) -> std::io::Result<LedgerSink> {
        Self::start_writers(ledger, capacity, history, true)
    }

    /// `idle_writer_runs: false` stands in for a machine so busy that the idle-priority
    /// writer never gets the CPU (tests of the rescue writer).
    fn start_writers(
        ledger: Ledger,
        capacity: usize,
        history: Option<HistorySink>,
        idle_writer_runs: bool,
    ) -> std::io::Result<LedgerSink> {
        let capacity = capacity.max(1);
        let (store, history) = match history.map(HistorySink::into_parts) {
            Some((store, labels)) => (Some(store), Some(labels)),
            None => (None, None),
        };
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            capacity,
            store: Mutex::new(Store {
                ledger,
                dropped_persisted: 0,
                history: store,
            }),
            history,
            parked: AtomicBool::new(false),
            rescue_parked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            written: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            history_errors: AtomicU64::new(0),
        });
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
        Ok(LedgerSink {
            shared,
            writer: handle.thread().clone(),
            rescue: rescue_handle.thread().clone(),
            handles: Arc::new(Mutex::new(vec![handle, rescue_handle])),
        })
    }

    /// Queue a record without waiting; a full queue drops it and counts the drop.
    pub(crate) fn submit(&self, record: Record) {
        let bytes = record.held_bytes();
        {
            let mut queue = self.shared.queue();
            let full = queue.records.len() >= self.shared.capacity
                || (queue.bytes > 0 && queue.bytes.saturating_add(bytes) > MAX_QUEUED_BYTES);
            if full {
                drop(queue);
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            queue.records.push_back(Box::new(record));
            queue.bytes = queue.bytes.saturating_add(bytes);
            queue.oldest.get_or_insert_with(Instant::now);
            if queue.backlogged(self.shared.capacity)
                && self.shared.rescue_parked.swap(false, Ordering::SeqCst)
            {
                self.rescue.unpark();
            }
        }
        if self.shared.parked.swap(false, Ordering::SeqCst) {
            // Traffic resumes after a pause: both writers leave their untimed sleep.
            self.writer.unpark();
            self.rescue.unpark();
        }
    }

    /// What the writers have done since start.
    pub fn stats(&self) -> LedgerStats {
        LedgerStats {
            written: self.shared.written.load(Ordering::Relaxed),
            dropped: self.shared.dropped.load(Ordering::Relaxed),
            write_errors: self.shared.write_errors.load(Ordering::Relaxed),
            history_errors: self.shared.history_errors.load(Ordering::Relaxed),
        }
    }

    /// Write what is queued, stop the writers, and wait up to `timeout` for them.
    pub fn shutdown(&self, timeout: Duration) {
        let handles =
            std::mem::take(&mut *self.handles.lock().unwrap_or_else(PoisonError::into_inner));
        self.shared.stop.store(true, Ordering::SeqCst);
        self.writer.unpark();
        self.rescue.unpark();
        let deadline = std::time::Instant::now() + timeout;
        for handle in handles {
            while !handle.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if handle.is_finished() {
                let _ = handle.join();
            }
        }
    }
}

/// Ask the OS to run the writer only on otherwise idle CPU time (Linux `SCHED_IDLE`): on a
/// small machine its parsing and SQLite work then never delays the proxy's own thread or the
/// agent. Under full load rows are late; past the queue's bounds they are dropped and counted.
fn lower_priority() {
    pith_store::priority::run_on_idle_cpu("ledger writer");
}

fn writer(shared: &Shared) {
    lower_priority();
    let mut idle_ticks = 0u32;
    loop {
        let stopping = shared.stop.load(Ordering::SeqCst);
        if drain(shared) {
            idle_ticks = 0;
            if !stopping {
                std::thread::sleep(TICK);
            }
            continue;
        }
        if stopping {
            break;
        }
        idle_ticks += 1;
        if idle_ticks < IDLE_TICKS {
            std::thread::sleep(TICK);
            continue;
        }
        // Announce the park before looking at the queue once more, so a record queued in
        // between either is seen here or finds `parked` set and wakes us.
        shared.parked.store(true, Ordering::SeqCst);
        if shared.queue().records.is_empty() && !shared.stop.load(Ordering::SeqCst) {
            std::thread::park();
        }
        shared.parked.store(false, Ordering::SeqCst);
        idle_ticks = 0;
    }
    let mut store = shared.store();
    persist_drops(&mut store, shared);
}

/// The normal-priority writer. While records arrive it looks every second for a queue that is
/// half full or holds a record older than [`MAX_WAIT`] (a request that finds the queue half
/// full wakes it at once), and writes the rows the starved idle writer could not. While the
/// proxy is idle (the idle writer parked, the queue empty) it sleeps until traffic resumes.
fn rescue(shared: &Shared) {
    loop {
        shared.rescue_parked.store(true, Ordering::SeqCst);
        let (needed, empty) = {
            let queue = shared.queue();
            (
                queue.needs_rescue(shared.capacity),
                queue.records.is_empty(),
            )
        };
        if !needed && !shared.stop.load(Ordering::SeqCst) {
            if empty && shared.parked.load(Ordering::SeqCst) {
                std::thread::park();
            } else {
                std::thread::park_timeout(RESCUE_CHECK);
            }
        }
        shared.rescue_parked.store(false, Ordering::SeqCst);
        if shared.stop.load(Ordering::SeqCst) {
            // Shutting down: write what is queued at normal priority, so a busy machine does
            // not leave it to the idle writer until the shutdown timeout cuts it off.
            while drain(shared) {}
            return;
        }
        while shared.queue().needs_rescue(shared.capacity) {
            drain(shared);
        }
    }
}

/// Take every queued record, parse it and write the rows; `false` when the queue was empty.
fn drain(shared: &Shared) -> bool {
    let records = std::mem::take(&mut *shared.queue()).records;
    if records.is_empty() {
        return false;
    }
    // Parsing happens outside the store's lock, so two writers parse in parallel.
    let (rows, turns): (Vec<Row>, Vec<Option<Turn>>) = records
        .into_iter()
        .map(|r| to_row(*r, shared.history.as_ref()))
        .unzip();
    let turns: Vec<Turn> = turns.into_iter().flatten().collect();
    let mut store = shared.store();
    for chunk in rows.chunks(BATCH) {
        insert(&mut store.ledger, shared, chunk);
    }
    persist_drops(&mut store, shared);
    if let Some(history) = store.history.as_mut()
        && !turns.is_empty()
        && let Err(e) = history.record(&turns)
    {
        shared.history_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            error = &e as &dyn std::error::Error,
            turns = turns.len(),
            "history write failed"
        );
    }
    true
}

/// Write `rows` in one transaction.
fn insert(ledger: &mut Ledger, shared: &Shared, rows: &[Row]) {
    match ledger.insert(rows) {
        Ok(()) => {
            shared
                .written
                .fetch_add(rows.len() as u64, Ordering::Relaxed);
        }
        Err(e) => {
            shared.write_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, rows = rows.len(), "ledger write failed");
        }
    }
}

fn persist_drops(store: &mut Store, shared: &Shared) {
    let dropped = shared.dropped.load(Ordering::Relaxed);
    if dropped > store.dropped_persisted {
        match store
            .ledger
            .add_counter(DROPPED_ROWS, dropped - store.dropped_persisted)
        {
            Ok(()) => store.dropped_persisted = dropped,
            Err(e) => tracing::warn!(error = %e, "cannot record dropped ledger rows"),
        }
    }
}

/// Parse a record into a ledger row, and the conversation turn it holds when history is
/// recorded. Runs on a writer thread.
fn to_row(r: Record, history: Option<&Labels>) -> (Row, Option<Turn>) {
    let session_need = match r.header_session {
        Some(_) => request::SessionNeed::Known,
        None => request::SessionNeed::FromBody,
    };
    let facts = r
        .wire
        .map(|w| request::request_facts(w, &r.request_body, session_need))
        .unwrap_or_default();
    let mut anatomy = facts.anatomy;
    if r.wire.is_none() {
        anatomy.other = r.request_body.len() as u64;
    }
    let body = response_body(&r);
    let response = response_facts(&r, body.as_deref());
    let session = r
        .header_session
        .clone()
        .or(facts.metadata_session)
        .or(facts.first_user_hash);
    let turn = history.and_then(|h| h.turn(&r, session.as_deref(), body.as_deref()));
    let (fingerprint, client_fingerprint) = fingerprints(&r);
    let savings = match (r.wire, response.usage) {
        (Some(wire), Some(usage)) => savings(wire, &anatomy, &usage, &r.transforms),
        _ => Vec::new(),
    };
    let mut outcome = r.outcome;
    let mut error = r.error;
    if let Some(e) = &response.stream_error {
        outcome = RequestOutcome::StreamError;
        error = Some(e.clone());
    }
    let row = Row {
        ts_ms: r.ts_ms,
        client: r.client,
        session,
        wire: r.wire.map(|w| w.as_str().to_owned()),
        provider: r
            .provider
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default(),
        model: facts.model.or(response.model),
        method: r.method,
        path: r.path,
        status: r.status,
        outcome,
        error,
        bytes_client: r.request_body.len() as u64,
        bytes_upstream: r.bytes_upstream,
        bytes_response: r.response_bytes,
        tools_bytes: anatomy.tools,
        system_bytes: anatomy.system,
        messages_bytes: anatomy.messages,
        other_bytes: anatomy.other,
        usage: response.usage.map(|u| RowUsage {
            input: u.input,
            output: u.output,
            cache_write: u.cache_write,
            cache_write_1h: u.cache_write_1h,
            cache_read: u.cache_read,
        }),
        ttfb_ms: r.ttfb_ms,
        total_ms: r.total_ms,
        transforms: r.transforms.into_iter().map(transform_entry).collect(),
        fingerprint,
        client_fingerprint,
        savings,
        account: Some(r.account),
    };
    (row, turn)
}

/// What each stage's edits are estimated to have saved on this request, by the rate the
/// characters they kept out (less those they added) would have been billed at: the rate the
/// real request paid at the place in the prompt where they sit (a prefix read from the cache
/// is priced as a read, one written as a write). Places come from the client body's anatomy
/// in the provider's prompt order, less what the stages kept out and plus what they added (so
/// the bytes stand for what was billed), scaled to the billed prompt; tokens are
/// [`pith_transform::estimated_tokens`]. Negative when a stage added more than it kept out.
fn savings(
    wire: Wire,
    anatomy: &request::Anatomy,
    usage: &usage::Usage,
    reports: &[StageReport],
) -> Vec<store::Saving> {
    use pith_transform::{FactKind, Site};
    let (mut kept, mut added) = (0u64, 0u64);
    for report in reports {
        if let StageResult::Applied(facts) = &report.result {
            for f in facts {
                match f.kind {
                    FactKind::CharsKeptOut => kept += f.value,
                    FactKind::CharsAdded => added += f.value,
                    _ => {}
                }
            }
        }
    }
    // Defer keeps its characters out of the tools, which come before the system prompt only on
    // Responses' instructions-first order; elsewhere they are at the start and need no fixing.
    let tools_billed = match wire {
        Wire::Responses => anatomy.tools.saturating_sub(kept).saturating_add(added),
        _ => anatomy.tools,
    };
    let prompt_bytes = (anatomy.tools + anatomy.system + anatomy.messages)
        .saturating_sub(kept)
        .saturating_add(added)
        .max(anatomy.system + tools_billed.min(anatomy.tools));
    let before = |site: Site| -> u64 {
        match (wire, site) {
            (_, Site::Tail) => prompt_bytes,
            (Wire::Responses, Site::System) => 0,
            (Wire::Responses, Site::Tools) => anatomy.system,
            (_, Site::Tools) => 0,
            (_, Site::System) => anatomy.tools,
        }
    };
    let position = |site: Site| -> u64 {
        let total = u128::from(usage.prompt_total());
        match prompt_bytes {
            0 => 0,
            b => u64::try_from(total * u128::from(before(site).min(b)) / u128::from(b))
                .unwrap_or(u64::MAX),
        }
    };
    let mut out: Vec<store::Saving> = Vec::new();
    for report in reports {
        let StageResult::Applied(facts) = &report.result else {
            continue;
        };
        for f in facts {
            let sign = match f.kind {
                FactKind::CharsKeptOut => 1,
                FactKind::CharsAdded => -1,
                _ => continue,
            };
            let Some(site) = f.site else { continue };
            let chars = usize::try_from(f.value).unwrap_or(usize::MAX);
            let tokens =
                sign * i64::try_from(pith_transform::estimated_tokens(chars)).unwrap_or(i64::MAX);
            let band = usage.band_at(position(site)).as_str();
            match out
                .iter_mut()
                .find(|s| s.stage == report.stage && s.band == band)
            {
                Some(s) => s.tokens += tokens,
                None => out.push(store::Saving {
                    stage: report.stage.to_owned(),
                    band: band.to_owned(),
                    tokens,
                }),
            }
        }
    }
    out
}

/// The prompt fingerprints of a request on one of the three wires (`count_tokens` and bodies
/// that are not JSON have none): as sent, and as the client sent it when a stage changed it.
fn fingerprints(r: &Record) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let Some(wire) = r.wire.filter(|_| !r.path.ends_with("/count_tokens")) else {
        return (None, None);
    };
    let of = |body: &[u8]| Fingerprint::of(wire, body).map(|f| f.to_bytes());
    match &r.upstream_body {
        Some(sent) => (of(sent), of(&r.request_body)),
        None => (of(&r.request_body), None),
    }
}

/// A stage's report in the ledger's words.
fn transform_entry(report: StageReport) -> Transform {
    let result = match report.result {
        StageResult::Applied(facts) => TransformResult::Applied(
            facts
                .into_iter()
                .map(|f| store::Fact {
                    name: f.name.to_owned(),
                    kind: f.kind.as_str().to_owned(),
                    value: f.value,
                })
                .collect(),
        ),
        StageResult::Unchanged(reason) => TransformResult::Unchanged(reason.to_owned()),
        StageResult::Failed(error) => TransformResult::Failed(error),
    };
    Transform {
        stage: report.stage.to_owned(),
        result,
    }
}

/// The response body the tee kept, decoded: for a successful answer on one of the wires that
/// was kept whole.
fn response_body(r: &Record) -> Option<Vec<u8>> {
    r.wire?;
    let ok = r.status.is_some_and(|s| (200..300).contains(&s));
    if !ok || r.response_truncated || r.response_chunks.is_empty() {
        return None;
    }
    let mut body = Vec::with_capacity(usize::try_from(r.response_bytes).unwrap_or(0));
    for c in &r.response_chunks {
        body.extend_from_slice(c);
    }
    if let Some(enc) = &r.content_encoding {
        body = match encoding::decode(enc, body, MAX_DECODED) {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(error = %e, "cannot decode response for usage");
                return None;
            }
        };
    }
    Some(body)
}

fn response_facts(r: &Record, body: Option<&[u8]>) -> usage::ResponseFacts {
    // count_tokens answers are free estimates, not billed usage.
    let billed = !r.path.ends_with("/count_tokens");
    let (Some(wire), Some(body)) = (r.wire, body.filter(|_| billed)) else {
        return usage::ResponseFacts::default();
    };
    if r.response_is_sse {
        usage::from_sse(wire, body)
    } else {
        usage::from_json(wire, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pith_transform::{Fact, Site};

    fn applied(stage: &'static str, facts: Vec<Fact>) -> StageReport {
        StageReport {
            stage,
            result: StageResult::Applied(facts),
        }
    }

    fn usage(input: u64, cache_write: u64, cache_write_1h: u64, cache_read: u64) -> usage::Usage {
        usage::Usage {
            input,
            output: 1,
            cache_write,
            cache_write_1h,
            cache_read,
        }
    }

    fn bands(s: &[store::Saving]) -> Vec<(&str, &str, i64)> {
        s.iter()
            .map(|s| (s.stage.as_str(), s.band.as_str(), s.tokens))
            .collect()
    }

    /// Defer's tools sit at the start of an Anthropic prompt: a warm cache prices them as reads,
    /// a cold one as writes of the lifetime the request wrote, none as input; the search tool it
    /// adds is set against them.
    #[test]
    fn kept_out_tools_are_priced_at_the_cache_state_of_the_prompt_start() {
        let anatomy = request::Anatomy {
            tools: 40_000,
            system: 10_000,
            messages: 50_000,
            other: 100,
        };
        let defer = [applied(
            "defer",
            vec![
                Fact::chars_kept_out("chars", 36_000, Site::Tools),
                Fact::chars_added("added", 80, Site::Tools),
            ],
        )];
        let net = 9_000 - 20;
        let warm = savings(
            Wire::AnthropicMessages,
            &anatomy,
            &usage(10, 500, 0, 15_000),
            &defer,
        );
        assert_eq!(bands(&warm), [("defer", "cache_read", net)]);
        let cold = savings(
            Wire::AnthropicMessages,
            &anatomy,
            &usage(10, 15_000, 0, 0),
            &defer,
        );
        assert_eq!(bands(&cold), [("defer", "cache_write_5m", net)]);
        let hour = savings(
            Wire::AnthropicMessages,
            &anatomy,
            &usage(10, 15_000, 15_000, 0),
            &defer,
        );
        assert_eq!(bands(&hour), [("defer", "cache_write_1h", net)]);
        let none = savings(
            Wire::ChatCompletions,
            &anatomy,
            &usage(15_000, 0, 0, 0),
            &defer,
        );
        assert_eq!(bands(&none), [("defer", "input", net)]);
    }

    /// On Responses the tools come after the instructions: with a cache that covers less than
    /// the instructions, the tools were not cached. The billed bytes leave out what was kept out.
    #[test]
    fn responses_tools_sit_after_the_instructions() {
        let anatomy = request::Anatomy {
            tools: 40_000,
            system: 20_000,
            messages: 4_000,
            other: 0,
        };
        let defer = [applied(
            "defer",
            vec![Fact::chars_kept_out("chars", 36_000, Site::Tools)],
        )];
        // Billed: 20,000 + 4,000 + 4,000 bytes as 7,000 tokens; the tools start at 5,000.
        let cached_through_instructions = savings(
            Wire::Responses,
            &anatomy,
            &usage(1_000, 0, 0, 6_000),
            &defer,
        );
        assert_eq!(
            bands(&cached_through_instructions),
            [("defer", "cache_read", 9_000)]
        );
        let short_cache = savings(
            Wire::Responses,
            &anatomy,
            &usage(3_000, 0, 0, 4_000),
            &defer,
        );
        assert_eq!(bands(&short_cache), [("defer", "input", 9_000)]);
    }

    /// Pins' block lands at the tail: a stage that adds more than it keeps out saves a negative
    /// amount there, summed with nothing else; requests of stages that report no characters,
    /// and stages that left the request alone, save nothing.
    #[test]
    fn an_edit_that_adds_saves_a_negative_amount_at_the_tail() {
        let anatomy = request::Anatomy {
            tools: 1_000,
            system: 1_000,
            messages: 8_000,
            other: 0,
        };
        let reports = [
            applied(
                "pins",
                vec![
                    Fact::level("pins", 2),
                    Fact::chars_added("chars_in", 400, Site::Tail),
                ],
            ),
            applied("search_restore", vec![Fact::count("searches", 1)]),
            StageReport {
                stage: "defer",
                result: StageResult::Unchanged("too_little_to_defer"),
            },
        ];
        // The tail of a prompt cached through its last message was written.
        let got = savings(
            Wire::AnthropicMessages,
            &anatomy,
            &usage(0, 300, 0, 2_000),
            &reports,
        );
        assert_eq!(bands(&got), [("pins", "cache_write_5m", -100)]);
        let got = savings(
            Wire::AnthropicMessages,
            &anatomy,
            &usage(30, 0, 0, 2_000),
            &reports,
        );
        assert_eq!(bands(&got), [("pins", "input", -100)]);
    }

    fn record(i: usize) -> Record {
        Record {
            ts_ms: i as i64,
            client: "test".into(),
            method: "POST".into(),
            path: "/v1/messages".into(),
            ..Record::default()
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        drop(Ledger::open(&path).unwrap());
        // Another process holds the write lock: the writer blocks inside its first insert.
        let blocker = rusqlite::Connection::open(&path).unwrap();
        blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let sink = LedgerSink::start(Ledger::open(&path).unwrap(), 2).unwrap();
        // Each writer holds at most one queue's worth (two) in hand, plus the queue's two;
        // every other record submitted while they are stuck must be dropped, and submitting
        // must not wait for them.
        let submitted = 1000;
        for i in 0..submitted {
            sink.submit(record(i));
        }
        // A blocking submit would have waited for the writer instead of dropping.
        let dropped = sink.stats().dropped;
        assert!(dropped >= (submitted - 3 * 2) as u64, "dropped {dropped}");
        blocker.execute_batch("COMMIT").unwrap();
        sink.shutdown(Duration::from_secs(10));
        let stats = sink.stats();
        assert_eq!(stats.written + stats.dropped, submitted as u64, "{stats:?}");
        let ledger = Ledger::open(&path).unwrap();
        assert_eq!(ledger.counter(DROPPED_ROWS).unwrap(), stats.dropped);
        assert_eq!(ledger.rows().unwrap().len() as u64, stats.written);
    }

    #[test]
    fn queued_bodies_are_bounded_in_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        drop(Ledger::open(&path).unwrap());
        let blocker = rusqlite::Connection::open(&path).unwrap();
        blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
        // Room for 1000 records, but each holds 10 MiB: the byte bound decides.
        let sink = LedgerSink::start(Ledger::open(&path).unwrap(), 1000).unwrap();
        let body = Bytes::from(vec![b'x'; 10 << 20]);
        let submitted = 10;
        for i in 0..submitted {
            let mut r = record(i);
            r.request_body = body.clone();
            sink.submit(r);
        }
        // Accepted: one into the empty queue, perhaps one each writer took out before it
        // blocked and one more into the queue they emptied; never the other six.
        let dropped = sink.stats().dropped;
        assert!(dropped >= 6, "dropped {dropped}");
        blocker.execute_batch("COMMIT").unwrap();
        sink.shutdown(Duration::from_secs(10));
        let stats = sink.stats();
        assert_eq!(stats.written + stats.dropped, submitted as u64, "{stats:?}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_writer_asks_for_idle_priority() {
        use thread_priority::unix::{
            NormalThreadSchedulePolicy, ThreadSchedulePolicy, thread_schedule_policy,
        };
        let policy = std::thread::spawn(|| {
            lower_priority();
            thread_schedule_policy().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(
            policy,
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle)
        );
    }

    #[test]
    fn the_rescue_writer_writes_what_a_starved_idle_writer_cannot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let sink =
            LedgerSink::start_writers(Ledger::open(&path).unwrap(), 1000, None, false).unwrap();
        let started = Instant::now();
        // Far from half full: only the record's age can bring the rescue writer in.
        sink.submit(record(1));
        while sink.stats().written == 0 && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let waited = started.elapsed();
        assert_eq!(sink.stats().written, 1, "not written after {waited:?}");
        // Written once the record was MAX_WAIT old, at the next rescue check.
        assert!(waited >= MAX_WAIT, "{waited:?}");
        assert!(
            waited < MAX_WAIT + RESCUE_CHECK + Duration::from_secs(2),
            "{waited:?}"
        );

        // Half full (capacity 4: two records) wakes the rescue writer at once.
        let sink = LedgerSink::start_writers(Ledger::open(&path).unwrap(), 4, None, false).unwrap();
        let started = Instant::now();
        sink.submit(record(2));
        sink.submit(record(3));
        while sink.stats().written < 2 && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(sink.stats().written, 2);
        assert!(started.elapsed() < MAX_WAIT, "{:?}", started.elapsed());
        sink.shutdown(Duration::from_secs(5));
        assert_eq!(Ledger::open(&path).unwrap().rows().unwrap().len(), 3);
    }
}
