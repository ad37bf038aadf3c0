//! The response body pith hands to the client: upstream frames pass through as they arrive
//! (through the response rewriter, one event at a time, when one is installed), while the
//! ledger gets reference-counted copies of what the provider sent, and timings.
//!
//! `Pending::finish` is the one place a record is finished, its outcome read from how the
//! exchange ended: complete, the upstream broken mid-body, the client gone. A rewriter's
//! [`Hold`](crate::rewrite::Hold) is polled here before what is ready is handed on, so a
//! JSON answer's record is finished once its hold is over.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pith_outcome::RequestOutcome;
use pith_wire::sse::EventSplitter;
use pith_wire::{Provider, Wire};

use pith_ledger::LedgerSink;
use pith_ledger::{ProviderCount, Record};
use pith_transform::StageReport;
use tokio::sync::oneshot;

use crate::gather::Gather;
use crate::rewrite::{BodyRewriter, EventRewriter, Hold, Rewrite, Rewriter};

/// Where a request's record goes, and whether the proxy is cutting requests at shutdown.
#[derive(Clone)]
pub(crate) struct Recorder {
    pub sink: LedgerSink,
    pub shutting_down: Arc<AtomicBool>,
}

impl Recorder {
    /// How a request that was cut short ended: cut at shutdown, or left by its client.
    pub fn cut_short(&self) -> End {
        if self.shutting_down.load(Ordering::SeqCst) {
            End::Shutdown
        } else {
            End::ClientGone
        }
    }
}

/// Responses larger than this are forwarded in full but not kept for usage parsing.
pub(crate) const MAX_KEPT: u64 = 64 << 20;

/// How the exchange with the client ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The whole answer reached the client.
    Complete,
    /// The upstream body failed mid-way.
    Broken,
    /// The upstream went silent for longer than the idle timeout.
    TimedOut,
    /// The client went away first.
    ClientGone,
    /// The proxy shut down with the request still open.
    Shutdown,
}

/// A ledger record waiting for its request to end, and where to send it.
pub(crate) struct Pending {
    pub record: Record,
    pub recorder: Recorder,
    pub started: Instant,
    /// The provider's count of the client's body, when one was asked: the record waits for it.
    pub provider_count: Option<oneshot::Receiver<ProviderCount>>,
}

impl Pending {
    /// The one place a record is finished: its outcome from how the exchange ended, its total
    /// time, then into the ledger's queue.
    pub(crate) fn finish(mut self, end: End, error: Option<String>) {
        self.record.total_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        let answered_by_provider = self.record.outcome == RequestOutcome::Ok;
        self.record.outcome = match end {
            End::ClientGone => RequestOutcome::ClientClosed,
            End::Shutdown => RequestOutcome::Shutdown,
            End::Broken => RequestOutcome::UpstreamBroken,
            End::TimedOut => RequestOutcome::UpstreamTimeout,
            End::Complete if answered_by_provider && self.record.upstream_status_failed() => {
                RequestOutcome::UpstreamError
            }
            // A local answer (or fault) keeps the outcome it was made with.
            End::Complete => self.record.outcome,
        };
        if error.is_some() {
            self.record.error = error;
        }
        crate::provider_count::keep(&self.recorder.sink, self.record, self.provider_count);
    }
}

/// The error a body hands hyper, which then aborts the connection (the client sees a broken
/// body, not a complete one).
pub(crate) type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// The provider went silent mid-body on a wire without an error event of its own.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Silent(String);

/// The provider's silence limit while its body streams, and how to tell the client.
pub(crate) struct Idle {
    limit: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    provider: Provider,
    /// The wire whose own error event ends a silent stream (`None`: not a stream pith can end
    /// cleanly, so the connection is cut).
    event_wire: Option<Wire>,
    /// The last frame handed on: the error event starts on an event boundary, and a Responses
    /// event's sequence number follows the last one.
    last: Bytes,
}

impl Idle {
    pub(crate) fn new(limit: Duration, provider: Provider, sse_wire: Option<Wire>) -> Idle {
        Idle {
            limit,
            sleep: Box::pin(tokio::time::sleep(limit)),
            provider,
            event_wire: sse_wire,
            last: Bytes::new(),
        }
    }

    fn heard(&mut self, data: &Bytes) {
        self.last = data.clone();
        let deadline = tokio::time::Instant::now() + self.limit;
        self.sleep.as_mut().reset(deadline);
    }

    fn message(&self) -> String {
        format!(
            "pith: the {} upstream sent nothing for {} s mid-answer, so pith ended the answer (proxy.upstream_idle_timeout); it is incomplete",
            self.provider,
            self.limit.as_secs()
        )
    }

    /// The wire's own error event carrying `message`, where the wire has one.
    fn error_event(&self, message: &str) -> Option<Bytes> {
        let data = match self.event_wire? {
            Wire::AnthropicMessages => serde_json::json!({
                "type": "error",
                "error": {"type": "timeout_error", "message": message},
            }),
            Wire::Responses => serde_json::json!({
                "type": "error",
                "code": "timeout",
                "message": message,
                "param": null,
                "sequence_number": last_sequence_number(&self.last).map_or(0, |n| n + 1),
            }),
            Wire::ChatCompletions => return None,
        };
        let boundary = self.last.is_empty()
            || self.last.ends_with(b"\n\n")
            || self.last.ends_with(b"\r\n\r\n");
        let lead = if boundary { "" } else { "\n\n" };
        Some(Bytes::from(format!("{lead}event: error\ndata: {data}\n\n")))
    }
}

/// The last `"sequence_number":N` in `chunk`.
fn last_sequence_number(chunk: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"sequence_number\":";
    let at = memchr::memmem::rfind(chunk, KEY)? + KEY.len();
    let digits: Vec<u8> = chunk[at..]
        .iter()
        .skip_while(|b| **b == b' ')
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

/// Body sent to the client.
pub(crate) enum ProxyBody {
    /// A body pith made (errors) or nothing.
    Full(Option<Bytes>),
    /// An upstream body streaming through, what came at once handed on at once.
    Tee(Box<Gather<Tee<Incoming>>>),
    /// pith's own stream (the dashboard's live events), chunk by chunk until its sender ends.
    Events(tokio::sync::mpsc::Receiver<Bytes>),
}

impl ProxyBody {
    pub(crate) fn full(bytes: Bytes) -> Self {
        ProxyBody::Full(Some(bytes))
    }

    pub(crate) fn tee(tee: Tee<Incoming>) -> Self {
        ProxyBody::Tee(Box::new(Gather::new(tee)))
    }
}

/// A rewriter and what it is waiting for: the rest of an event, or the whole body.
struct Rewriting {
    kind: RewriterKind,
    /// Rewritten bytes not yet handed to the client.
    ready: VecDeque<Bytes>,
    /// What the rewriter asked the answer to wait for before `ready` goes on.
    hold: Option<Hold>,
}

enum RewriterKind {
    Events {
        rewriter: Box<dyn EventRewriter>,
        splitter: EventSplitter,
    },
    Whole {
        rewriter: Box<dyn BodyRewriter>,
        body: Vec<u8>,
    },
    /// A whole-body rewriter gave up (the body outgrew [`MAX_WHOLE`]): bytes pass as they are.
    Passing,
}

/// The largest JSON answer a whole-body rewriter holds back to read.
const MAX_WHOLE: usize = 16 << 20;

/// The largest event an event rewriter holds back to read (a tool search result is a few KB;
/// a model's single event of hundreds of MB is not one to rewrite): past it, the event and the
/// rest of the answer pass on as they come, unread (fail open), unless the rewriter already
/// changed the stream in a way the rest must follow (it hid a block: the later events are
/// renumbered), and then it reads on.
const MAX_EVENT: usize = 8 << 20;

impl Rewriting {
    fn new(rewriter: Rewriter) -> Rewriting {
        let kind = match rewriter {
            Rewriter::Events(rewriter) => RewriterKind::Events {
                rewriter,
                splitter: EventSplitter::new(),
            },
            Rewriter::Whole(rewriter) => RewriterKind::Whole {
                rewriter,
                body: Vec::new(),
            },
        };
        Rewriting {
            kind,
            ready: VecDeque::new(),
            hold: None,
        }
    }

    /// Take what the rewriter asks to wait for (after what is held already).
    fn ask_hold(&mut self) {
        let asked = match &mut self.kind {
            RewriterKind::Events { rewriter, .. } => rewriter.hold(),
            RewriterKind::Whole { rewriter, .. } => rewriter.hold(),
            RewriterKind::Passing => None,
        };
        if let Some(asked) = asked {
            self.hold = Some(match self.hold.take() {
                None => asked,
                Some(held) => Box::pin(async move {
                    held.await;
                    asked.await;
                }),
            });
        }
    }

    /// Whether what the rewriter asked to wait for is still pending.
    fn holding(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(hold) = self.hold.as_mut() else {
            return false;
        };
        if hold.as_mut().poll(cx).is_pending() {
            return true;
        }
        self.hold = None;
        false
    }

    fn take(rewriter: &mut dyn EventRewriter, ready: &mut VecDeque<Bytes>, event: Bytes) {
        match rewriter.event(&event) {
            Rewrite::Keep => ready.push_back(event),
            Rewrite::Drop => {}
            Rewrite::Replace(bytes) => ready.push_back(bytes),
        }
    }

    fn feed(&mut self, chunk: &[u8]) {
        match &mut self.kind {
            RewriterKind::Events { rewriter, splitter } => {
                splitter.push(chunk);
                while let Some(event) = splitter.next_event() {
                    Self::take(rewriter.as_mut(), &mut self.ready, event);
                }
                if splitter.pending() > MAX_EVENT && rewriter.may_pass_unread() {
                    tracing::warn!(
                        bytes = splitter.pending(),
                        "an event too large to rewrite: the rest of the answer passes as it came"
                    );
                    self.ready.push_back(splitter.take_pending());
                    self.kind = RewriterKind::Passing;
                }
            }
            RewriterKind::Whole { body, .. } => {
                body.extend_from_slice(chunk);
                if body.len() > MAX_WHOLE {
                    // Too large to hold: hand it on as it came, unread, from here on.
                    let held = Bytes::from(std::mem::take(body));
                    self.ready.push_back(held);
                    self.kind = RewriterKind::Passing;
                }
            }
            RewriterKind::Passing => self.ready.push_back(Bytes::copy_from_slice(chunk)),
        }
        self.ask_hold();
    }

    fn finish(&mut self) {
        match &mut self.kind {
            RewriterKind::Events { rewriter, splitter } => {
                if let Some(rest) = splitter.finish() {
                    Self::take(rewriter.as_mut(), &mut self.ready, rest);
                }
            }
            RewriterKind::Whole { rewriter, body } => {
                let body = std::mem::take(body);
                let out = rewriter.body(&body).unwrap_or_else(|| Bytes::from(body));
                self.ready.push_back(out);
            }
            RewriterKind::Passing => {}
        }
        self.ask_hold();
    }

    fn report(&mut self) -> Option<StageReport> {
        match &mut self.kind {
            RewriterKind::Events { rewriter, .. } => rewriter.report(),
            RewriterKind::Whole { rewriter, .. } => rewriter.report(),
            RewriterKind::Passing => None,
        }
    }

    /// Everything ready, as one frame.
    fn drain(&mut self) -> Option<Bytes> {
        match self.ready.len() {
            0 => None,
            1 => self.ready.pop_front(),
            _ => Some(self.ready.drain(..).flatten().collect::<Vec<u8>>().into()),
        }
    }
}

/// The upstream body on its way to the client.
pub(crate) struct Tee<B: Body> {
    inner: B,
    pending: Option<Box<Pending>>,
    rewriting: Option<Rewriting>,
    idle: Idle,
    /// pith's own last frame (the error event of a silent stream), sent before the end.
    tail: Option<Bytes>,
    /// The upstream body has ended (a rewriter may still hold bytes to hand on).
    upstream_done: bool,
    /// The upstream body ended complete while the rewriter asked to wait: the record is
    /// finished once the wait is over, so its report has what the wait found.
    end_after_hold: bool,
}

impl<B: Body> Tee<B> {
    pub(crate) fn new(
        inner: B,
        pending: Option<Box<Pending>>,
        rewriter: Option<Rewriter>,
        idle: Idle,
    ) -> Self {
        Tee {
            inner,
            pending,
            idle,
            tail: None,
            rewriting: rewriter.map(Rewriting::new),
            upstream_done: false,
            end_after_hold: false,
        }
    }

    fn end(&mut self, end: End, error: Option<String>) {
        if let Some(mut p) = self.pending.take() {
            // What a response rewriter did joins the request's transforms.
            if let Some(report) = self.rewriting.as_mut().and_then(Rewriting::report) {
                p.record.transforms.push(pith_ledger::Report::from(&report));
            }
            p.finish(end, error);
        }
    }

    /// Keep a copy of an upstream chunk for the ledger.
    fn account(&mut self, data: &Bytes) {
        let Some(pending) = self.pending.as_mut() else {
            return;
        };
        let record = &mut pending.record;
        if record.ttfb_ms.is_none() {
            record.ttfb_ms = Some(pending.started.elapsed().as_secs_f64() * 1000.0);
        }
        record.response_bytes += data.len() as u64;
        if record.response_bytes <= MAX_KEPT {
            record.response_chunks.push(data.clone());
        } else if !record.response_truncated {
            record.response_truncated = true;
            record.response_chunks = Vec::new();
        }
    }
}

impl<B> Tee<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BodyError> + std::fmt::Display,
{
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        loop {
            if self.rewriting.as_mut().is_some_and(|r| r.holding(cx)) {
                return Poll::Pending;
            }
            if std::mem::take(&mut self.end_after_hold) {
                self.end(End::Complete, None);
            }
            if let Some(ready) = self.rewriting.as_mut().and_then(Rewriting::drain) {
                return Poll::Ready(Some(Ok(Frame::data(ready))));
            }
            if let Some(tail) = self.tail.take() {
                return Poll::Ready(Some(Ok(Frame::data(tail))));
            }
            if self.upstream_done {
                return Poll::Ready(None);
            }
            let polled = Pin::new(&mut self.inner).poll_frame(cx);
            match polled {
                Poll::Ready(Some(Ok(frame))) => {
                    let Some(data) = frame.data_ref() else {
                        return Poll::Ready(Some(Ok(frame)));
                    };
                    let data = data.clone();
                    self.account(&data);
                    self.idle.heard(&data);
                    match self.rewriting.as_mut() {
                        // Nothing ready yet means an incomplete event: read on.
                        Some(rewriting) => rewriting.feed(&data),
                        None => return Poll::Ready(Some(Ok(frame))),
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    self.end(End::Broken, Some(format!("upstream stream failed: {e}")));
                    return Poll::Ready(Some(Err(e.into())));
                }
                Poll::Ready(None) => {
                    self.upstream_done = true;
                    match self.rewriting.as_mut() {
                        Some(rewriting) => {
                            rewriting.finish();
                            // Finished on the next turn of the loop, after any wait.
                            self.end_after_hold = true;
                        }
                        None => {
                            self.end(End::Complete, None);
                            return Poll::Ready(None);
                        }
                    }
                }
                Poll::Pending => {
                    let idle = &mut self.idle;
                    if idle.sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    let message = idle.message();
                    let event = idle.error_event(&message);
                    tracing::warn!("{message}");
                    self.upstream_done = true;
                    self.end(End::TimedOut, Some(message.clone()));
                    match event {
                        Some(event) => self.tail = Some(event),
                        None => return Poll::Ready(Some(Err(Box::new(Silent(message))))),
                    }
                }
            }
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            ProxyBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            ProxyBody::Tee(tee) => Pin::new(tee.as_mut()).poll_frame(cx),
            ProxyBody::Events(rx) => rx
                .poll_recv(cx)
                .map(|chunk| chunk.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Full(bytes) => bytes.is_none(),
            ProxyBody::Tee(tee) => tee.is_end_stream(),
            ProxyBody::Events(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            ProxyBody::Full(None) => SizeHint::with_exact(0),
            ProxyBody::Tee(tee) => tee.size_hint(),
            ProxyBody::Events(_) => SizeHint::default(),
        }
    }
}

impl<B> Body for Tee<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BodyError> + std::fmt::Display,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.get_mut().poll(cx)
    }

    fn is_end_stream(&self) -> bool {
        if self.tail.is_some() {
            return false;
        }
        match &self.rewriting {
            Some(r) => self.upstream_done && r.ready.is_empty() && r.hold.is_none(),
            None => self.upstream_done || self.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self.rewriting {
            // A rewriter may change the length.
            Some(_) => SizeHint::default(),
            None => self.inner.size_hint(),
        }
    }
}

impl<B: Body> Drop for Tee<B> {
    /// The client went away (or the server shut down) before the upstream body ended: dropping
    /// `inner` closes the upstream connection, which cancels the upstream request.
    fn drop(&mut self) {
        // hyper may drop an already-finished body without polling its end.
        let end = match &self.pending {
            None => return,
            Some(_) if self.inner.is_end_stream() => End::Complete,
            Some(p) => p.recorder.cut_short(),
        };
        self.end(end, None);
    }
}

#[cfg(test)]
mod rewriting_tests {
    use super::*;
    use crate::rewrite::{EventRewriter, Rewrite, Rewriter};

    /// Drops every event it reads: what reaches the client past it was never read.
    struct DropAll;
    impl EventRewriter for DropAll {
        fn event(&mut self, _event: &[u8]) -> Rewrite {
            Rewrite::Drop
        }
    }

    /// Drops every event, and has changed the stream so that none may pass unread.
    struct Renumbering;
    impl EventRewriter for Renumbering {
        fn event(&mut self, _event: &[u8]) -> Rewrite {
            Rewrite::Drop
        }
        fn may_pass_unread(&self) -> bool {
            false
        }
    }

    #[test]
    fn an_event_over_the_bound_and_the_rest_pass_as_they_come() {
        let mut r = Rewriting::new(Rewriter::Events(Box::new(DropAll)));
        r.feed(b"event: a\ndata: {}\n\n");
        assert_eq!(r.drain(), None, "a small event is read (and dropped)");
        // 20 MiB of one event, in 64 KiB chunks: handed on once past the bound, not held.
        let chunk = vec![b'x'; 64 << 10];
        r.feed(b"data: ");
        let mut out = 0;
        let mut fed = 6;
        for _ in 0..320 {
            r.feed(&chunk);
            fed += chunk.len();
            out += r.drain().map_or(0, |b| b.len());
            assert!(
                fed - out <= MAX_EVENT + chunk.len() + 6,
                "held {}",
                fed - out
            );
        }
        r.feed(b"\n\n");
        r.feed(b"data: {}\n\n");
        out += r.drain().map_or(0, |b| b.len());
        assert_eq!(out, fed + 2 + 10, "the large event and the rest pass whole");
    }

    #[test]
    fn a_rewriter_that_renumbers_reads_a_large_event_whole() {
        let mut r = Rewriting::new(Rewriter::Events(Box::new(Renumbering)));
        r.feed(b"data: ");
        r.feed(&vec![b'x'; MAX_EVENT + 1]);
        assert_eq!(
            r.drain(),
            None,
            "held: the rest must follow what it changed"
        );
        r.feed(b"\n\n");
        assert_eq!(r.drain(), None, "read whole, and dropped");
    }
}

#[cfg(test)]
mod hold_tests {
    use super::*;
    use crate::rewrite::{EventRewriter, Rewrite, Rewriter};

    /// Keeps every event, and after the first asks the answer to wait until `go` is sent.
    struct Holding(Option<tokio::sync::oneshot::Receiver<()>>);
    impl EventRewriter for Holding {
        fn event(&mut self, _event: &[u8]) -> Rewrite {
            Rewrite::Keep
        }
        fn hold(&mut self) -> Option<Hold> {
            let go = self.0.take()?;
            Some(Box::pin(async move {
                let _ = go.await;
            }))
        }
    }

    #[test]
    fn what_a_rewriter_asks_to_wait_for_holds_its_bytes_until_done() {
        let (go, wait) = tokio::sync::oneshot::channel();
        let mut r = Rewriting::new(Rewriter::Events(Box::new(Holding(Some(wait)))));
        let event = b"event: ping\ndata: {}\n\n";
        r.feed(event);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(r.holding(&mut cx), "the event went on before the write");
        assert!(r.holding(&mut cx));
        go.send(()).unwrap();
        assert!(!r.holding(&mut cx));
        assert_eq!(r.drain().as_deref(), Some(&event[..]));
        // Asked once: the next events pass at once.
        r.feed(event);
        assert!(!r.holding(&mut cx));
    }
}
