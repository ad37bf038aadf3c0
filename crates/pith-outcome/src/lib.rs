//! How a request through pith ended, and who caused it when it did not end well: decided by
//! the proxy, stored by the ledger by name ([`RequestOutcome::as_str`]), read by `pith stats`
//! and the dashboard. A leaf, so that the proxy says it without taking its words from the
//! storage crate.

/// Who caused a request to end the way it did, when it did not end well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Party {
    /// The client: a request pith could not forward, or it went away before the answer ended.
    Client,
    /// The provider: unreachable, an error status, or a stream that broke off or reported an error.
    Upstream,
    /// pith itself.
    Pith,
}

/// How a request ended. Stored by [`RequestOutcome::as_str`]; each failure names who caused it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum RequestOutcome {
    /// The provider answered and the answer reached the client.
    #[default]
    Ok,
    /// pith answered without contacting the provider (its own reply, marked as such).
    Local,
    /// The client went away before the answer was complete (the upstream request was cancelled).
    ClientClosed,
    /// The client's request could not be forwarded: unreadable or too large a body, a target
    /// that makes no upstream URL. pith answered in the provider's error shape. (A request
    /// refused before it is served, a method pith does not proxy or a missing access token, is
    /// a [`Refusal`], counted, not a row.)
    ClientError,
    /// The client stopped sending its request body for longer than the proxy waits.
    ClientTimeout,
    /// No connection to the provider. pith answered with a 502 in the provider's error shape.
    UpstreamUnreachable,
    /// The provider answered with a 4xx or 5xx status (forwarded unchanged).
    UpstreamError,
    /// The provider's answer broke off mid-body (connection reset, protocol error).
    UpstreamBroken,
    /// The provider reported an error event inside a successful stream.
    StreamError,
    /// The provider sent no response headers, or went silent mid-body, for longer than the
    /// proxy waits; pith ended the request with an error naming the limit.
    UpstreamTimeout,
    /// The proxy shut down with the request still open (after its grace period).
    Shutdown,
    /// The proxy stopped without shutting down (killed, crashed) while the answer streamed:
    /// the client had the response headers, perhaps not the whole body. Written by the next
    /// start from what the proxy recorded when the answer began.
    Interrupted,
    /// pith itself failed to handle the request.
    PithError,
}

impl RequestOutcome {
    /// Every outcome, in the order they are listed.
    pub const ALL: [RequestOutcome; 13] = [
        RequestOutcome::Ok,
        RequestOutcome::Local,
        RequestOutcome::ClientClosed,
        RequestOutcome::ClientError,
        RequestOutcome::ClientTimeout,
        RequestOutcome::UpstreamUnreachable,
        RequestOutcome::UpstreamError,
        RequestOutcome::UpstreamBroken,
        RequestOutcome::StreamError,
        RequestOutcome::UpstreamTimeout,
        RequestOutcome::Shutdown,
        RequestOutcome::Interrupted,
        RequestOutcome::PithError,
    ];

    /// The stable name stored in the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestOutcome::Ok => "ok",
            RequestOutcome::Local => "local",
            RequestOutcome::ClientClosed => "client_closed",
            RequestOutcome::ClientError => "client_error",
            RequestOutcome::ClientTimeout => "client_timeout",
            RequestOutcome::UpstreamUnreachable => "upstream_unreachable",
            RequestOutcome::UpstreamError => "upstream_error",
            RequestOutcome::UpstreamBroken => "upstream_broken",
            RequestOutcome::StreamError => "stream_error",
            RequestOutcome::UpstreamTimeout => "upstream_timeout",
            RequestOutcome::Shutdown => "shutdown",
            RequestOutcome::Interrupted => "interrupted",
            RequestOutcome::PithError => "pith_error",
        }
    }

    /// In words, for a person (the dashboard's requests).
    pub fn describe(self) -> &'static str {
        match self {
            RequestOutcome::Ok => "answered",
            RequestOutcome::Local => "answered by pith",
            RequestOutcome::ClientClosed => "the client went away",
            RequestOutcome::ClientError => "not forwardable",
            RequestOutcome::ClientTimeout => "the client stopped sending",
            RequestOutcome::UpstreamUnreachable => "provider unreachable",
            RequestOutcome::UpstreamError => "provider error",
            RequestOutcome::UpstreamBroken => "answer broke off",
            RequestOutcome::StreamError => "error in the stream",
            RequestOutcome::UpstreamTimeout => "provider too slow",
            RequestOutcome::Shutdown => "pith shut down",
            RequestOutcome::Interrupted => "pith stopped mid-answer",
            RequestOutcome::PithError => "pith failed",
        }
    }

    /// The outcome stored as `name`; an unknown name (a newer pith wrote it) reads as a pith
    /// error rather than as success.
    pub fn parse(name: &str) -> RequestOutcome {
        RequestOutcome::ALL
            .into_iter()
            .find(|o| o.as_str() == name)
            .unwrap_or(RequestOutcome::PithError)
    }

    /// Who caused it, when the request did not end well.
    pub fn caused_by(self) -> Option<Party> {
        match self {
            RequestOutcome::Ok | RequestOutcome::Local => None,
            RequestOutcome::ClientClosed
            | RequestOutcome::ClientError
            | RequestOutcome::ClientTimeout => Some(Party::Client),
            RequestOutcome::UpstreamUnreachable
            | RequestOutcome::UpstreamError
            | RequestOutcome::UpstreamBroken
            | RequestOutcome::StreamError
            | RequestOutcome::UpstreamTimeout => Some(Party::Upstream),
            RequestOutcome::Shutdown | RequestOutcome::Interrupted | RequestOutcome::PithError => {
                Some(Party::Pith)
            }
        }
    }
}

impl std::fmt::Display for RequestOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why pith refused a request before serving it. A refusal is counted (per reason, in the
/// ledger's counters), not written as a row: a flood of unauthenticated requests must not grow
/// the ledger, and a refused request is not one the proxy served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Refusal {
    /// A method pith does not proxy (`CONNECT`, `TRACE`).
    Method,
    /// No access token, or another one, on a proxy that has one.
    AccessToken,
    /// No account key, on a gateway that maps requests to accounts by key.
    AccountKeyMissing,
    /// A key that is none of the gateway's.
    AccountKeyUnknown,
    /// A WebSocket upgrade while the proxy's cap of open sockets is reached (the client falls
    /// back to HTTP).
    SocketsFull,
    /// A request-target pith does not route: a path with dot segments (`/chatgpt/../v1`),
    /// `*` with another method than OPTIONS, an absolute URL naming another host.
    RequestTarget,
}

impl Refusal {
    /// Every reason, in the order they are listed.
    pub const ALL: [Refusal; 6] = [
        Refusal::Method,
        Refusal::AccessToken,
        Refusal::AccountKeyMissing,
        Refusal::AccountKeyUnknown,
        Refusal::SocketsFull,
        Refusal::RequestTarget,
    ];

    /// The stable name (in the ledger's counters, `pith stats --json` and `/metrics`).
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Method => "method_not_proxied",
            Refusal::AccessToken => "access_token",
            Refusal::AccountKeyMissing => "account_key_missing",
            Refusal::AccountKeyUnknown => "account_key_unknown",
            Refusal::SocketsFull => "websockets_full",
            Refusal::RequestTarget => "request_target",
        }
    }

    /// In words, for a person.
    pub fn describe(self) -> &'static str {
        match self {
            Refusal::Method => "a method pith does not proxy",
            Refusal::AccessToken => "no or a wrong access token",
            Refusal::AccountKeyMissing => "no account key",
            Refusal::AccountKeyUnknown => "an unknown account key",
            Refusal::SocketsFull => "a WebSocket past the proxy's cap (sent over HTTP instead)",
            Refusal::RequestTarget => "a request-target pith does not route",
        }
    }

    /// Its position in [`Refusal::ALL`] (for a counter per reason).
    pub fn index(self) -> usize {
        match self {
            Refusal::Method => 0,
            Refusal::AccessToken => 1,
            Refusal::AccountKeyMissing => 2,
            Refusal::AccountKeyUnknown => 3,
            Refusal::SocketsFull => 4,
            Refusal::RequestTarget => 5,
        }
    }

    /// The name of its counter in the ledger.
    pub fn counter(self) -> String {
        format!("refused:{}", self.as_str())
    }
}
