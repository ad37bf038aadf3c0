//! The response phase's slot for response transforms: a rewriter that sees each SSE event of a
//! streamed answer, in order, and decides what the client receives instead, holding at most one
//! incomplete event. What pith added to a request, it takes out of the answer here (the tool
//! search round trip for clients without tool search). No rewriter is installed by default:
//! then the answer's bytes pass through untouched, frame by frame.

use bytes::Bytes;
use http::StatusCode;
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

/// Rewrites one streamed answer. `event` is one raw SSE event, the exact bytes through the blank
/// line that ends it (the last one of a stream may lack that line).
pub trait EventRewriter: Send {
    /// What the client receives in place of `event`.
    fn event(&mut self, event: &[u8]) -> Rewrite;
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
}

/// Chooses a rewriter for each streamed answer (`text/event-stream`) of the three wires.
pub trait ResponseRewrites: Send + Sync {
    /// `None` leaves the answer as the provider sent it.
    fn for_response(&self, info: &ResponseInfo<'_>) -> Option<Box<dyn EventRewriter>>;
}
