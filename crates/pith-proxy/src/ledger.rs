//! The ledger writer: a bounded queue drained by one thread into the store.
//!
//! The request path only moves a [`Record`] (reference-counted body chunks, no parsing) into the
//! queue with `try_send`. Everything costly (JSON and SSE parsing, decompression, SQLite) runs on
//! the writer thread. A full queue drops the record and counts it; the count is persisted in the
//! ledger's counters so `pith stats` shows it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use pith_store::ledger::{DROPPED_ROWS, Ledger, Row, RowUsage};
use pith_wire::{Provider, Wire, encoding, request, session, usage};

/// Largest decoded response body parsed for usage.
const MAX_DECODED: u64 = 64 << 20;
/// Rows written per transaction at most.
const BATCH: usize = 256;

/// Everything the request path knows about one request, unparsed.
#[derive(Debug, Default)]
pub(crate) struct Record {
    pub ts_ms: i64,
    pub client: String,
    pub header_session: Option<String>,
    pub wire: Option<Wire>,
    pub provider: Option<Provider>,
    pub method: String,
    pub path: String,
    pub status: Option<u16>,
    pub outcome: &'static str,
    pub error: Option<String>,
    /// The client's original body (shared with the forwarding path, not copied).
    pub request_body: Bytes,
    pub bytes_upstream: u64,
    pub response_chunks: Vec<Bytes>,
    pub response_bytes: u64,
    /// Chunks were dropped from `response_chunks` because the response was too large to keep.
    pub response_truncated: bool,
    pub response_is_sse: bool,
    pub content_encoding: Option<String>,
    pub ttfb_ms: Option<f64>,
    pub total_ms: f64,
    pub transforms: Option<String>,
    pub transform_skips: Option<String>,
    pub transform_failures: u32,
    pub local: bool,
}

enum Message {
    Record(Box<Record>),
    /// Write what is queued, then stop.
    Stop,
}

/// Counters of the writer, for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerStats {
    pub written: u64,
    pub dropped: u64,
    pub write_errors: u64,
}

#[derive(Default)]
struct Shared {
    written: AtomicU64,
    dropped: AtomicU64,
    write_errors: AtomicU64,
}

/// Handle to the queue. Cloning shares the queue.
#[derive(Clone)]
pub struct LedgerSink {
    tx: SyncSender<Message>,
    shared: Arc<Shared>,
    thread: Arc<std::sync::Mutex<Option<JoinHandle<()>>>>,
}

impl LedgerSink {
    /// Start the writer thread over `ledger` with room for `capacity` queued records.
    pub fn start(ledger: Ledger, capacity: usize) -> std::io::Result<LedgerSink> {
        let (tx, rx) = mpsc::sync_channel(capacity.max(1));
        let shared = Arc::new(Shared::default());
        let thread_shared = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("pith-ledger".into())
            .spawn(move || writer(ledger, rx, &thread_shared))?;
        Ok(LedgerSink {
            tx,
            shared,
            thread: Arc::new(std::sync::Mutex::new(Some(handle))),
        })
    }

    /// Queue a record; never blocks. A full queue drops it and counts the drop.
    pub(crate) fn submit(&self, record: Record) {
        match self.tx.try_send(Message::Record(Box::new(record))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn stats(&self) -> LedgerStats {
        LedgerStats {
            written: self.shared.written.load(Ordering::Relaxed),
            dropped: self.shared.dropped.load(Ordering::Relaxed),
            write_errors: self.shared.write_errors.load(Ordering::Relaxed),
        }
    }

    /// Write what is queued, stop the writer and wait for it (at most `timeout`). Records
    /// submitted afterwards are counted as dropped.
    pub fn shutdown(&self, timeout: Duration) {
        let handle = self.thread.lock().ok().and_then(|mut h| h.take());
        let _ = self.tx.send(Message::Stop);
        if let Some(handle) = handle {
            let deadline = std::time::Instant::now() + timeout;
            while !handle.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if handle.is_finished() {
                let _ = handle.join();
            }
        }
    }
}

fn writer(mut ledger: Ledger, rx: Receiver<Message>, shared: &Shared) {
    let mut dropped_persisted = 0u64;
    let mut stopping = false;
    while !stopping {
        let Ok(first) = rx.recv() else { break };
        let mut rows = Vec::new();
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Record(r) => rows.push(to_row(*r)),
                Message::Stop => stopping = true,
            }
            if rows.len() < BATCH {
                next = rx.try_recv().ok();
            }
        }
        if rows.is_empty() {
            continue;
        }
        match ledger.insert(&rows) {
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
        persist_drops(&mut ledger, shared, &mut dropped_persisted);
    }
    persist_drops(&mut ledger, shared, &mut dropped_persisted);
}

fn persist_drops(ledger: &mut Ledger, shared: &Shared, persisted: &mut u64) {
    let dropped = shared.dropped.load(Ordering::Relaxed);
    if dropped > *persisted {
        match ledger.add_counter(DROPPED_ROWS, dropped - *persisted) {
            Ok(()) => *persisted = dropped,
            Err(e) => tracing::warn!(error = %e, "cannot record dropped ledger rows"),
        }
    }
}

/// Parse a record into a ledger row. Runs on the writer thread.
fn to_row(r: Record) -> Row {
    let facts = r
        .wire
        .map(|w| request::request_facts(w, &r.request_body))
        .unwrap_or_default();
    let mut anatomy = facts.anatomy;
    if r.wire.is_none() {
        anatomy.other = r.request_body.len() as u64;
    }
    let response = response_facts(&r);
    let mut outcome = r.outcome.to_owned();
    let mut error = r.error;
    if let Some(e) = &response.stream_error {
        outcome = "stream_error".to_owned();
        error = Some(e.clone());
    }
    Row {
        ts_ms: r.ts_ms,
        client: r.client,
        session: r
            .header_session
            .or(facts.metadata_session)
            .or(facts.first_user_hash),
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
            cache_read: u.cache_read,
        }),
        ttfb_ms: r.ttfb_ms,
        total_ms: r.total_ms,
        transforms: r.transforms,
        transform_skips: r.transform_skips,
        transform_failures: r.transform_failures,
        local: r.local,
    }
}

fn response_facts(r: &Record) -> usage::ResponseFacts {
    let Some(wire) = r.wire else {
        return usage::ResponseFacts::default();
    };
    // count_tokens answers are free estimates, not billed usage.
    let billed = !r.path.ends_with("/count_tokens");
    let ok = r.status.is_some_and(|s| (200..300).contains(&s));
    if !billed || !ok || r.response_truncated || r.response_chunks.is_empty() {
        return usage::ResponseFacts::default();
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
                return usage::ResponseFacts::default();
            }
        };
    }
    if r.response_is_sse {
        usage::from_sse(wire, &body)
    } else {
        usage::from_json(wire, &body)
    }
}

/// The session id a record will be filed under, from headers alone (used for logging).
pub(crate) fn header_session(headers: &http::HeaderMap) -> Option<String> {
    session::session_from_headers(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: usize) -> Record {
        Record {
            ts_ms: i as i64,
            client: "test".into(),
            method: "POST".into(),
            path: "/v1/messages".into(),
            outcome: "ok",
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
        // The writer holds at most one batch in hand plus the queue's two; every other record
        // submitted while it is stuck must be dropped, and submitting must not wait for it.
        let submitted = 1000;
        for i in 0..submitted {
            sink.submit(record(i));
        }
        // A blocking submit would have waited for the writer instead of dropping.
        let dropped = sink.stats().dropped;
        assert!(
            dropped >= (submitted - BATCH - 2) as u64,
            "dropped {dropped}"
        );
        blocker.execute_batch("COMMIT").unwrap();
        sink.shutdown(Duration::from_secs(10));
        let stats = sink.stats();
        assert_eq!(stats.written + stats.dropped, submitted as u64, "{stats:?}");
        let ledger = Ledger::open(&path).unwrap();
        assert_eq!(ledger.counter(DROPPED_ROWS).unwrap(), stats.dropped);
        assert_eq!(ledger.rows().unwrap().len() as u64, stats.written);
    }
}
