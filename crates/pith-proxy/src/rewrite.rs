//! The response phase's slot for response transforms. What pith added to a request, it takes
//! out of the answer here (the tool search round trip: `crate::search_trip`). A rewriter sees a
//! streamed answer one SSE event at a time, in order, holding at most one incomplete event
//! ([`EventRewriter`]), or a JSON answer whole ([`BodyRewriter`]); it may report what it did,
//! and the report joins the request's transforms in the ledger. A rewriter may also ask the
//! answer to wait ([`Hold`]) before what it let through so far goes on: the round trip's write
//! to a team store, which has to land before the client can send its next request. With no
//! rewriter, the answer's bytes pass through untouched, frame by frame.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use http::StatusCode;
use pith_transform::StageReport;
use pith_wire::Wire;

/// What to send the client in place of one SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rewrite {
    /// The event's exact bytes.
    Keep,
    /// Nothing: the client never sees this event.
    Drop,
    /// These bytes instead (e.g. the event with its block index renumbered).
    Replace(Bytes),
}

/// Work the answer waits for before its next bytes go to the client (bounded by whoever made
/// it).
pub type Hold = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Rewrites one streamed answer. `event` is one raw SSE event, the exact bytes through the blank
/// line that ends it (the last one of a stream may lack that line).
pub trait EventRewriter: Send {
    /// What the client receives in place of `event`.
    fn event(&mut self, event: &[u8]) -> Rewrite;
    /// What it did, for the ledger, once the answer ended (or was cut).
    fn report(&mut self) -> Option<StageReport> {
        None
    }
    /// Whether the rest of the answer may pass on unread now (an event too large to hold
    /// came): true while nothing it did so far depends on reading the rest (it hid nothing
    /// whose absence later events must be renumbered for).
    fn may_pass_unread(&self) -> bool {
        true
    }
    /// What the answer must wait for before the events rewritten so far go on, if anything
    /// (asked after each chunk is read).
    fn hold(&mut self) -> Option<Hold> {
        None
    }
}

/// Rewrites one JSON answer, read whole.
pub trait BodyRewriter: Send {
    /// What the client receives instead of `body`; `None` sends `body` as it came.
    fn body(&mut self, body: &[u8]) -> Option<Bytes>;
    /// What it did, for the ledger.
    fn report(&mut self) -> Option<StageReport> {
        None
    }
    /// What the answer must wait for before it goes on, if anything (asked after `body`).
    fn hold(&mut self) -> Option<Hold> {
        None
    }
}

/// A rewriter for one answer.
pub enum Rewriter {
    /// A streamed answer, event by event.
    Events(Box<dyn EventRewriter>),
    /// A JSON answer, whole.
    Whole(Box<dyn BodyRewriter>),
}

/// What a factory knows when it decides whether an answer needs rewriting.
#[derive(Debug, Clone, Copy)]
pub struct ResponseInfo<'a> {
    /// The wire of the request the answer belongs to.
    pub wire: Wire,
    /// The request path without query, e.g. `/v1/messages`.
    pub path: &'a str,
    /// The session the request belongs to, from its headers, if they named one.
    pub session: Option<&'a str>,
    /// The status the provider answered with.
    pub status: StatusCode,
    /// The answer is a stream (`text/event-stream`); else a body read whole.
    pub sse: bool,
    /// The answer's `content-encoding`, when it has one (a rewriter cannot read it then).
    pub content_encoding: Option<&'a str>,
    /// What each request stage did to the request this answers.
    pub transforms: &'a [StageReport],
}

/// Chooses a rewriter for each answer on the three wires.
pub trait ResponseRewrites: Send + Sync {
    /// Whether [`ResponseRewrites::for_response`] may read the answer to a request the
    /// pipeline left like this: the request then asks the provider for an uncompressed answer
    /// (`accept-encoding: identity`). One rule for both sides, so pith never asks for identity
    /// it will not read, nor gets an answer it would read compressed.
    fn reads_answer(&self, wire: Wire, transforms: &[StageReport]) -> bool;
    /// `None` leaves the answer as the provider sent it.
    fn for_response(&self, info: &ResponseInfo<'_>) -> Option<Rewriter>;
}
