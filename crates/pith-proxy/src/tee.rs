//! The response body pith hands to the client: upstream frames pass through as they arrive
//! (through the response rewriter, one event at a time, when one is installed), while the
//! ledger gets reference-counted copies of what the provider sent, and timings.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pith_store::ledger::RequestOutcome;
use pith_wire::sse::EventSplitter;

use crate::ledger::{LedgerSink, Record};
use crate::rewrite::{EventRewriter, Rewrite};

/// Responses larger than this are forwarded in full but not kept for usage parsing.
const MAX_KEPT: u64 = 64 << 20;

/// How the exchange with the client ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The whole answer reached the client.
    Complete,
    /// The upstream body failed mid-way.
    Broken,
    /// The client went away first.
    ClientGone,
}

/// A ledger record waiting for its request to end, and where to send it.
pub(crate) struct Pending {
    pub record: Record,
    pub sink: LedgerSink,
    pub started: Instant,
}

impl Pending {
    /// The one place a record is finished: its outcome from how the exchange ended, its total
    /// time, then into the ledger's queue.
    pub(crate) fn finish(mut self, end: End, error: Option<String>) {
        self.record.total_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        let answered_by_provider = self.record.outcome == RequestOutcome::Ok;
        self.record.outcome = match end {
            End::ClientGone => RequestOutcome::ClientClosed,
            End::Broken => RequestOutcome::UpstreamBroken,
            End::Complete if answered_by_provider && self.record.upstream_status_failed() => {
                RequestOutcome::UpstreamError
            }
            // A local answer (or fault) keeps the outcome it was made with.
            End::Complete => self.record.outcome,
        };
        if error.is_some() {
            self.record.error = error;
        }
        self.sink.submit(self.record);
    }
}

/// Body sent to the client.
pub(crate) enum ProxyBody {
    /// A body pith made (errors) or nothing.
    Full(Option<Bytes>),
    /// An upstream body streaming through.
    Tee(Tee<Incoming>),
}

impl ProxyBody {
    pub(crate) fn full(bytes: Bytes) -> Self {
        ProxyBody::Full(Some(bytes))
    }
}

/// A rewriter and the event it is waiting to complete.
struct Rewriting {
    rewriter: Box<dyn EventRewriter>,
    splitter: EventSplitter,
    /// Rewritten events not yet handed to the client.
    ready: VecDeque<Bytes>,
}

impl Rewriting {
    fn take(&mut self, event: Bytes) {
        match self.rewriter.event(&event) {
            Rewrite::Keep => self.ready.push_back(event),
            Rewrite::Drop => {}
            Rewrite::Replace(bytes) => self.ready.push_back(bytes),
        }
    }

    fn feed(&mut self, chunk: &[u8]) {
        self.splitter.push(chunk);
        while let Some(event) = self.splitter.next_event() {
            self.take(event);
        }
    }

    fn finish(&mut self) {
        if let Some(rest) = self.splitter.finish() {
            self.take(rest);
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
    /// The upstream body has ended (a rewriter may still hold bytes to hand on).
    upstream_done: bool,
}

impl<B: Body> Tee<B> {
    pub(crate) fn new(
        inner: B,
        pending: Option<Box<Pending>>,
        rewriter: Option<Box<dyn EventRewriter>>,
    ) -> Self {
        Tee {
            inner,
            pending,
            rewriting: rewriter.map(|rewriter| Rewriting {
                rewriter,
                splitter: EventSplitter::new(),
                ready: VecDeque::new(),
            }),
            upstream_done: false,
        }
    }

    fn end(&mut self, end: End, error: Option<String>) {
        if let Some(p) = self.pending.take() {
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
    B::Error: std::fmt::Display,
{
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        loop {
            if let Some(ready) = self.rewriting.as_mut().and_then(Rewriting::drain) {
                return Poll::Ready(Some(Ok(Frame::data(ready))));
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
                    match self.rewriting.as_mut() {
                        // Nothing ready yet means an incomplete event: read on.
                        Some(rewriting) => rewriting.feed(&data),
                        None => return Poll::Ready(Some(Ok(frame))),
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    self.end(End::Broken, Some(format!("upstream stream failed: {e}")));
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    self.upstream_done = true;
                    self.end(End::Complete, None);
                    match self.rewriting.as_mut() {
                        Some(rewriting) => rewriting.finish(),
                        None => return Poll::Ready(None),
                    }
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ProxyBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            ProxyBody::Tee(tee) => tee.poll(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Full(bytes) => bytes.is_none(),
            ProxyBody::Tee(tee) => tee.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            ProxyBody::Full(None) => SizeHint::with_exact(0),
            // A rewriter may change the length.
            ProxyBody::Tee(tee) if tee.rewriting.is_some() => SizeHint::default(),
            ProxyBody::Tee(tee) => tee.inner.size_hint(),
        }
    }
}

impl<B: Body> Tee<B> {
    fn is_end_stream(&self) -> bool {
        match &self.rewriting {
            Some(r) => self.upstream_done && r.ready.is_empty(),
            None => self.inner.is_end_stream(),
        }
    }
}

impl<B: Body> Drop for Tee<B> {
    /// The client went away (or the server shut down) before the upstream body ended: dropping
    /// `inner` closes the upstream connection, which cancels the upstream request.
    fn drop(&mut self) {
        // hyper may drop an already-finished body without polling its end.
        let end = if self.inner.is_end_stream() {
            End::Complete
        } else {
            End::ClientGone
        };
        self.end(end, None);
    }
}
