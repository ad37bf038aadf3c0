//! The requests of one relayed socket, each a ledger row: a `response.create` frame and the
//! events answering it, recorded as the stream of a `POST /v1/responses` would be (so its
//! usage, model and errors are read the same way), within the HTTP path's bounds.

use std::time::Instant;

use bytes::Bytes;
use http::HeaderMap;
use pith_outcome::RequestOutcome;
use pith_store::clock::now_ms;
use pith_wire::{Provider, Wire, session};

use crate::ledger::{LedgerSink, Record};
use crate::tee::MAX_KEPT;

/// The event types that end a response.
const LAST_EVENTS: &[&str] = &[
    "response.completed",
    "response.failed",
    "response.incomplete",
    "error",
];

/// The requests of one socket, each recorded when its last event arrives (or the socket ends).
pub(super) struct Turns {
    sink: Option<LedgerSink>,
    /// The client and session the upgrade's headers name, the same for every request on it.
    client: String,
    session: Option<String>,
    /// The account the socket's requests belong to.
    account: String,
    open: Option<Turn>,
}

struct Turn {
    started: Instant,
    ts_ms: i64,
    arrival_us: i64,
    request: Bytes,
    chunks: Vec<Bytes>,
    bytes: u64,
    truncated: bool,
    ttfb_ms: Option<f64>,
    status: u16,
}

/// A frame's `type`, with an error event's `status` as `error:<status>`.
fn event_type(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: Option<String>,
        status: Option<u16>,
    }
    serde_json::from_str::<Typed>(text).ok().and_then(|t| {
        t.kind.map(|k| match (k.as_str(), t.status) {
            ("error", Some(s)) => format!("error:{s}"),
            _ => k,
        })
    })
}

impl Turns {
    pub(super) fn new(sink: Option<LedgerSink>, headers: &HeaderMap, account: String) -> Turns {
        Turns {
            sink,
            client: session::client_from_user_agent(headers),
            session: session::session_from_headers(headers),
            account,
            open: None,
        }
    }

    /// Whether a request is waiting for its answer.
    pub(super) fn is_open(&self) -> bool {
        self.open.is_some()
    }

    pub(super) fn client_sent(&mut self, text: &str) {
        if event_type(text).as_deref() != Some("response.create") {
            return;
        }
        // A new request before the last one ended: the last one is cut.
        self.close(RequestOutcome::ClientClosed, None);
        self.open = Some(Turn {
            started: Instant::now(),
            ts_ms: now_ms(),
            arrival_us: crate::ledger::arrival_now(),
            request: Bytes::copy_from_slice(text.as_bytes()),
            chunks: Vec::new(),
            bytes: 0,
            truncated: false,
            ttfb_ms: None,
            status: 200,
        });
    }

    pub(super) fn upstream_sent(&mut self, text: &str) {
        let Some(turn) = self.open.as_mut() else {
            return;
        };
        let kind = event_type(text).unwrap_or_default();
        turn.ttfb_ms
            .get_or_insert_with(|| turn.started.elapsed().as_secs_f64() * 1000.0);
        let (kind, status) = match kind.split_once(':') {
            Some((k, s)) => (k.to_owned(), s.parse().ok()),
            None => (kind, None),
        };
        // As the same answer over HTTP would have streamed it, kept up to the HTTP path's
        // bound: past it the answer still passes, and the row says it was too large to keep.
        let chunk = format!("event: {kind}\ndata: {text}\n\n");
        turn.bytes += chunk.len() as u64;
        if turn.bytes <= MAX_KEPT {
            turn.chunks.push(Bytes::from(chunk));
        } else if !turn.truncated {
            turn.truncated = true;
            turn.chunks = Vec::new();
        }
        if let Some(status) = status {
            turn.status = status;
        }
        if LAST_EVENTS.contains(&kind.as_str()) {
            self.close(RequestOutcome::Ok, None);
        }
    }

    /// Record the open request, if any, as ended with `outcome` (and pith's `error`).
    pub(super) fn close(&mut self, outcome: RequestOutcome, error: Option<String>) {
        let Some(turn) = self.open.take() else { return };
        let Some(sink) = &self.sink else { return };
        sink.submit(Record {
            ts_ms: turn.ts_ms,
            arrival_us: turn.arrival_us,
            status: Some(turn.status),
            outcome: if outcome == RequestOutcome::Ok && turn.status >= 400 {
                RequestOutcome::UpstreamError
            } else {
                outcome
            },
            error,
            bytes_upstream: turn.request.len() as u64,
            request_body: turn.request,
            response_chunks: turn.chunks,
            response_bytes: turn.bytes,
            response_truncated: turn.truncated,
            response_is_sse: true,
            ttfb_ms: turn.ttfb_ms,
            total_ms: turn.started.elapsed().as_secs_f64() * 1000.0,
            ..self.row("WEBSOCKET")
        });
    }

    /// Record a frame the client sent that pith could not take (too large), as one request
    /// pith answered itself.
    pub(super) fn refused_frame(&mut self, status: u16, error: String) {
        self.close(RequestOutcome::ClientClosed, None);
        let Some(sink) = &self.sink else { return };
        sink.submit(Record {
            status: Some(status),
            outcome: RequestOutcome::ClientError,
            error: Some(error),
            ..self.row("WEBSOCKET")
        });
    }

    /// What every row of this socket says, arriving now.
    fn row(&self, method: &str) -> Record {
        socket_row(method, &self.client, &self.session, &self.account)
    }
}

/// A row of the socket's client, session and account, arriving now.
fn socket_row(method: &str, client: &str, session: &Option<String>, account: &str) -> Record {
    Record {
        ts_ms: now_ms(),
        arrival_us: crate::ledger::arrival_now(),
        client: client.to_owned(),
        header_session: session.clone(),
        wire: Some(Wire::Responses),
        provider: Some(Provider::OpenAi),
        method: method.to_owned(),
        path: "/v1/responses".to_owned(),
        account: account.to_owned(),
        ..Record::default()
    }
}

/// The row of an upgrade that opened no socket: the upstream's refusal (its status), or pith's
/// own answer when the upstream could not be reached or asked.
pub(super) fn refused_upgrade(
    sink: Option<&LedgerSink>,
    headers: &HeaderMap,
    account: &str,
    status: u16,
    outcome: RequestOutcome,
    error: Option<String>,
) {
    let Some(sink) = sink else { return };
    let client = session::client_from_user_agent(headers);
    let session = session::session_from_headers(headers);
    sink.submit(Record {
        status: Some(status),
        outcome,
        error,
        ..socket_row("GET", &client, &session, account)
    });
}
