//! The response body pith hands to the client: upstream frames pass through untouched as they
//! arrive, while the ledger gets reference-counted copies and timings.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::ledger::{LedgerSink, Record};

/// Responses larger than this are forwarded in full but not kept for usage parsing.
const MAX_KEPT: u64 = 64 << 20;

/// A record waiting for its response to end, and where to send it.
pub(crate) struct Pending {
    pub record: Record,
    pub sink: LedgerSink,
    pub started: Instant,
}

impl Pending {
    fn elapsed_ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1000.0
    }

    /// Send the record with its final outcome.
    pub(crate) fn finish(mut self, outcome: &'static str, error: Option<String>) {
        self.record.total_ms = self.elapsed_ms();
        // An outcome set earlier (e.g. `upstream_error` for a 4xx) survives a clean end of body.
        if outcome != "ok" || self.record.outcome.is_empty() {
            self.record.outcome = outcome;
        }
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
    Tee(Tee),
}

impl ProxyBody {
    pub(crate) fn full(bytes: Bytes) -> Self {
        ProxyBody::Full(Some(bytes))
    }
}

pub(crate) struct Tee {
    inner: Incoming,
    pending: Option<Box<Pending>>,
}

impl Tee {
    pub(crate) fn new(inner: Incoming, pending: Option<Box<Pending>>) -> Self {
        Tee { inner, pending }
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
            ProxyBody::Tee(tee) => tee.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            ProxyBody::Full(None) => SizeHint::with_exact(0),
            ProxyBody::Tee(tee) => tee.inner.size_hint(),
        }
    }
}

impl Tee {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let Some(pending) = self.pending.as_mut() else {
            return polled;
        };
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
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
            Poll::Ready(Some(Err(e))) => {
                let error = format!("upstream stream failed: {e}");
                if let Some(p) = self.pending.take() {
                    p.finish("upstream_error", Some(error));
                }
            }
            Poll::Ready(None) => {
                if let Some(p) = self.pending.take() {
                    p.finish("ok", None);
                }
            }
            Poll::Pending => {}
        }
        polled
    }
}

impl Drop for Tee {
    /// The client went away (or the server shut down) before the upstream body ended: dropping
    /// `inner` closes the upstream connection, which cancels the upstream request.
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            // hyper may drop an already-finished body without polling its end.
            let outcome = if self.inner.is_end_stream() {
                "ok"
            } else {
                "client_closed"
            };
            p.finish(outcome, None);
        }
    }
}
