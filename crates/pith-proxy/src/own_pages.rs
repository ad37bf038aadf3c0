//! pith's own pages on the proxy's address: the dashboard at `/`, its API under `/pith/`,
//! `/metrics`. The proxy only routes them (GET, after the access-token check, so a proxy bound
//! beyond loopback serves them only with its token); what they say comes from an [`OwnPages`]
//! the binary provides, run on the blocking pool because it reads the ledger.

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

/// What pith serves on its own paths.
pub trait OwnPages: Send + Sync {
    /// The answer for a GET of `path` with `query` (without the `?`); `None` hands the request
    /// on to the provider as any other.
    fn get(&self, path: &str, query: &str) -> Option<OwnPage>;
}

/// Whether a request is for one of pith's own paths: no provider API lives at `/`, under
/// `/pith/`, at `/metrics` or at `/favicon.ico` (which a browser asks for with the page).
pub fn is_own_path(method: &Method, path: &str) -> bool {
    method == Method::GET
        && (path == "/"
            || path == "/metrics"
            || path == "/favicon.ico"
            || path.starts_with("/pith/"))
}
