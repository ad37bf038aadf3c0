//! What one request carries through the phases, and the one place its ledger record is built.

use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use pith_outcome::RequestOutcome;
use pith_transform::StageReport;
use pith_wire::{Provider, Wire, session};

use crate::tee::{Pending, Recorder};
use pith_ledger::{Record, Report};
use pith_store::clock::Clock;

/// One request on its way from the client to the provider and back. Each phase fills in what
/// it learns; nothing here is parsed from the body (that happens on a ledger writer thread).
///
/// A context whose record was never built when it is dropped (hyper dropped the request's
/// future: the client went away before the provider answered, or the proxy shut down) records
/// itself then, so every request that reached pith has a ledger row.
pub(crate) struct Context {
    pub started: Instant,
    /// Wall-clock time the request arrived, for the ledger (from its clock).
    pub ts_ms: i64,
    /// When it arrived, unique within the process: the order its session's rows are paired in.
    pub arrival_us: i64,
    pub method: Method,
    /// Path without the query, e.g. `/v1/messages`: what routing matches on.
    pub path: String,
    /// Path and query as the client sent them, appended unchanged to the upstream origin.
    pub path_and_query: String,
    /// One of the three wires pith understands, or `None` for a pass-through path.
    pub wire: Option<Wire>,
    pub provider: Provider,
    /// The client's headers, as it sent them.
    pub headers: HeaderMap,
    /// The session the headers name, found once for the phases that key on it.
    pub session: Option<String>,
    /// The client's body, as it sent it (shared with the forwarding path, not copied).
    pub body: Bytes,
    /// The prompt as the phases read it, when the body is not it: a WebSocket create's whole
    /// conversation (a chained one carries only its newest part), or a body the client sent
    /// compressed, decoded. Read through [`Context::prompt`].
    pub whole_prompt: Option<Bytes>,
    /// The `content-encoding` of a body on one of the wires that came compressed: the record
    /// keeps the client's bytes and this, and the ledger's writer decodes them itself (a
    /// decoded body, which may be a thousand times the client's, is never spooled).
    pub request_encoding: Option<String>,
    /// Length of the body sent upstream (differs from `body` when a stage changed it).
    pub bytes_upstream: u64,
    /// The body sent upstream, when a stage changed it.
    pub upstream_body: Option<Bytes>,
    /// What each transform stage did, in pipeline order.
    pub transforms: Vec<StageReport>,
    /// The `pith-transforms` value, when a stage changed the request.
    pub transforms_header: Option<String>,
    /// Status of the answer the client gets.
    pub status: Option<StatusCode>,
    pub response_is_sse: bool,
    pub content_encoding: Option<String>,
    /// The account the request belongs to: the proxy's own until its key names another.
    pub account: String,
    /// The provider's count of the client's body, when this changed request was sampled
    /// (`crate::provider_count`): its record waits for it.
    pub provider_count: Option<tokio::sync::oneshot::Receiver<pith_ledger::ProviderCount>>,
    /// Where the record goes; `None` once it was built (or when no ledger is kept).
    recorder: Option<Recorder>,
}

impl Context {
    pub fn new(
        method: Method,
        path: String,
        path_and_query: String,
        headers: HeaderMap,
        account: String,
        recorder: Option<Recorder>,
    ) -> Self {
        // The ledger's clock (the system's, but in tests); no ledger, the system's.
        let system = Clock::system();
        let clock = recorder.as_ref().map_or(&system, |r| r.sink.clock());
        Context {
            started: Instant::now(),
            ts_ms: clock.now_ms(),
            arrival_us: clock.arrival_us(),
            method,
            path,
            path_and_query,
            wire: None,
            provider: Provider::OpenAi,
            session: session::session_from_headers(&headers),
            headers,
            body: Bytes::new(),
            whole_prompt: None,
            request_encoding: None,
            bytes_upstream: 0,
            upstream_body: None,
            transforms: Vec::new(),
            transforms_header: None,
            status: None,
            response_is_sse: false,
            content_encoding: None,
            account,
            provider_count: None,
            recorder,
        }
    }

    /// The prompt the phases read: the whole prompt, else the body.
    pub fn prompt(&self) -> &Bytes {
        self.whole_prompt.as_ref().unwrap_or(&self.body)
    }

    /// Whether a ledger record of this request will be kept.
    pub fn recorded(&self) -> bool {
        self.recorder.is_some()
    }

    /// Keep no ledger record of this request (pith's own pages).
    pub fn forget(&mut self) {
        self.recorder = None;
    }

    /// The request's ledger record, waiting for the request to end, when a ledger is kept.
    /// `outcome` is `Ok` for an answer the provider is sending; for an answer pith made, what
    /// it made. This is the one place a record is built; it is built once.
    pub fn take_pending(&mut self, outcome: RequestOutcome) -> Option<Pending> {
        let recorder = self.recorder.take()?;
        let request_encoding = self.request_encoding.take();
        // A decoded body is the ledger's to decode again from the client's bytes.
        let conversation_body = self
            .whole_prompt
            .take()
            .filter(|_| request_encoding.is_none());
        let record = Record {
            ts_ms: self.ts_ms,
            arrival_us: self.arrival_us,
            client: session::client_from_user_agent(&self.headers),
            header_session: self.session.clone(),
            agent_type: self
                .headers
                .get(crate::own_headers::AGENT_TYPE_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            wire: self.wire,
            provider: Some(self.provider),
            method: self.method.to_string(),
            path: std::mem::take(&mut self.path),
            status: self.status.map(|s| s.as_u16()),
            outcome,
            bytes_upstream: self.bytes_upstream,
            request_body: std::mem::take(&mut self.body),
            upstream_body: self.upstream_body.take(),
            conversation_body,
            request_encoding,
            response_is_sse: self.response_is_sse,
            content_encoding: self.content_encoding.take(),
            transforms: self.transforms.iter().map(Report::from).collect(),
            account: std::mem::take(&mut self.account),
            ..Record::default()
        };
        Some(Pending {
            record,
            recorder,
            started: self.started,
            provider_count: self.provider_count.take(),
        })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        let end = match &self.recorder {
            Some(recorder) => recorder.cut_short(),
            None => {
                // No record takes the bodies (no ledger kept): they are freed here.
                let bodies = [
                    Some(std::mem::take(&mut self.body)),
                    self.whole_prompt.take(),
                    self.upstream_body.take(),
                ];
                let size = bodies.iter().flatten().map(Bytes::len).sum();
                drop(bodies);
                pith_alloc::release::freed(size);
                return;
            }
        };
        if let Some(pending) = self.take_pending(RequestOutcome::Ok) {
            let error = "the request ended before the provider's response headers arrived";
            pending.finish(end, Some(error.to_owned()));
        }
    }
}
