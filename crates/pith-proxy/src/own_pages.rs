//! pith's own pages on the proxy's address: the dashboard at `/`, its API under `/pith/`,
//! `/metrics`. The proxy only routes them (GET, after the access-token check, so a proxy bound
//! beyond loopback serves them only with its token); what they say comes from an [`OwnPages`]
//! the binary provides, run on the blocking pool because it reads the ledger. They are never
//! forwarded and never a ledger row, whatever the method (a method but GET is a 405). Without
//! an access token only loopback host names are served ([`host_is_loopback`]: DNS rebinding
//! sends the attacker's name). Every answer is `no-store`, `nosniff`, `X-Frame-Options: DENY`
//! and `no-referrer`, and HTML carries the policy [`OwnPages::content_security_policy`] gives
//! (the dashboard's names its one script by its hash).
//!
//! One answer is for anyone: `GET /pith/health` from a caller the page rules do not admit (a
//! load balancer's check with no Host header or a pod IP for a name, a probe without the
//! token) gets [`OwnPages::liveness`], which says only whether the instance is up. The
//! rules protect what a browser could read (DNS rebinding) and what the instance is (its
//! upstreams, version, pid); "up" or "stopping" gives neither away.

use bytes::Bytes;
use http::{Method, StatusCode};

/// One of pith's own answers.
#[derive(Debug)]
pub struct OwnPage {
    /// The status.
    pub status: StatusCode,
    /// Its content type.
    pub content_type: &'static str,
    /// The body.
    pub body: OwnBody,
}

/// An answer's body: whole, or a stream (server-sent events) that lasts until its sender is
/// dropped or the client goes away (then sending fails, and the sender should stop).
#[derive(Debug)]
pub enum OwnBody {
    /// The whole body.
    Full(Bytes),
    /// Chunks as they come.
    Stream(tokio::sync::mpsc::Receiver<Bytes>),
}

impl From<Bytes> for OwnBody {
    fn from(bytes: Bytes) -> OwnBody {
        OwnBody::Full(bytes)
    }
}

/// The health path: the full answer under the page rules, [`OwnPages::liveness`] to anyone.
pub const HEALTH_PATH: &str = "/pith/health";

/// What pith serves on its own paths.
pub trait OwnPages: Send + Sync {
    /// `/pith/health` for a caller the page rules do not admit: whether the instance is up
    /// (200) or stopping (503), and nothing else. Answered on the event loop: it must not
    /// block.
    fn liveness(&self) -> OwnPage {
        OwnPage {
            status: StatusCode::OK,
            content_type: "application/json",
            body: Bytes::from_static(br#"{"status":"ok"}"#).into(),
        }
    }

    /// The answer for a GET of `path` with `query` (without the `?`); `None` hands the request
    /// on to the provider as any other.
    fn get(&self, path: &str, query: &str) -> Option<OwnPage>;

    /// The `Content-Security-Policy` of the HTML pages (the page knows its own scripts).
    fn content_security_policy(&self) -> Option<&str> {
        None
    }
}

/// Whether a path is one of pith's own: no provider API lives at `/`, at `/pith` or under
/// `/pith/`, at `/metrics` or at `/favicon.ico` (which a browser asks for with the page). Any
/// method on them is pith's to answer (only GET is served), never the provider's.
pub fn is_own_path(path: &str) -> bool {
    path == "/"
        || path == "/pith"
        || path == "/metrics"
        || path == "/favicon.ico"
        || path.starts_with("/pith/")
}

/// Whether the request names a loopback host (`localhost`, `*.localhost`, `127.0.0.0/8`,
/// `[::1]`, with or without a port). A page on another site that resolves its own name to
/// 127.0.0.1 (DNS rebinding) sends its own name: a proxy without an access token serves its
/// pages only to loopback names.
pub fn host_is_loopback(headers: &http::HeaderMap) -> bool {
    let Some(host) = headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
    else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                name
            } else {
                host
            }
        }),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether `method` is served on pith's own paths.
pub fn is_served(method: &Method) -> bool {
    method == Method::GET
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_and_others() {
        let host = |h: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert(http::header::HOST, h.parse().unwrap());
            host_is_loopback(&headers)
        };
        for ok in [
            "127.0.0.1:8787",
            "127.1.2.3",
            "localhost",
            "LOCALHOST:1",
            "pith.localhost:80",
            "[::1]:8787",
            "[::1]",
            "localhost.",
        ] {
            assert!(host(ok), "{ok}");
        }
        for no in [
            "attacker.example",
            "attacker.example:8787",
            "localhost.attacker.example",
            "10.0.0.1:8787",
            "[::2]:1",
            "127.0.0.1.nip.io",
            "",
        ] {
            assert!(!host(no), "{no}");
        }
        assert!(!host_is_loopback(&http::HeaderMap::new()));
    }
}
