//! Upstream base URLs and the HTTP client that reaches them.
//!
//! Where a request goes is `ProxyConfig::upstream_for`: a path under pith's `/chatgpt`
//! (`pith_clients::codex::PITH_CHATGPT_PATH`) to the ChatGPT upstream under the backend's
//! `/backend-api/codex`, any other to its provider's upstream with the path as it came. That is
//! where Codex signed in with ChatGPT sends its model traffic once `pith run` sets its
//! `openai_base_url` (Codex uses the ChatGPT backend only while its provider has no base URL):
//! the same Responses API, over HTTP (its bodies zstd-compressed) and WebSocket, with the
//! login's bearer token and `ChatGPT-Account-ID`. Its other ChatGPT calls do not go through
//! pith. Origins are shown with their credentials redacted.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// Anthropic's public endpoint, used when nothing else is configured.
pub const ANTHROPIC_DEFAULT: &str = "https://api.anthropic.com";
/// OpenAI's public endpoint, used when nothing else is configured.
pub const OPENAI_DEFAULT: &str = "https://api.openai.com";
/// The ChatGPT backend's origin (Codex signed in with ChatGPT), used when nothing else is
/// configured; what the proxy takes under `pith_clients::codex::PITH_CHATGPT_PATH` goes there.
pub const CHATGPT_DEFAULT: &str = "https://chatgpt.com";

/// Why an upstream could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The configured upstream is not a usable origin.
    #[error("upstream {url:?} is not a valid URL: {reason}")]
    Invalid {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The HTTP client's TLS setup (rustls, webpki roots) failed.
    #[error("cannot set up TLS: {0}")]
    Tls(String),
}

/// An upstream origin such as `https://api.anthropic.com` or `http://127.0.0.1:9000`. The
/// client's request path (`/v1/messages?beta=true`) is appended to it unchanged.
#[derive(Clone, PartialEq, Eq)]
pub struct UpstreamUrl {
    scheme: String,
    authority: String,
    /// Path prefix without trailing slash (usually empty).
    prefix: String,
}

impl UpstreamUrl {
    /// Parse an origin: `http` or `https`, a host, an optional path prefix; no query string and
    /// no trailing `/v1` (the client's paths carry it).
    pub fn parse(url: &str) -> Result<UpstreamUrl, UpstreamError> {
        let invalid = |reason: &str| UpstreamError::Invalid {
            url: redact_credentials(url),
            reason: reason.to_owned(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| invalid(&e.to_string()))?;
        let scheme = uri
            .scheme_str()
            .ok_or_else(|| invalid("it needs a scheme: http:// or https://"))?;
        if scheme != "http" && scheme != "https" {
            return Err(invalid("the scheme must be http or https"));
        }
        let authority = uri
            .authority()
            .ok_or_else(|| invalid("it needs a host"))?
            .to_string();
        if uri.query().is_some() {
            return Err(invalid("it must not carry a query string"));
        }
        let prefix = uri.path().trim_end_matches('/').to_owned();
        if prefix.ends_with("/v1") {
            return Err(invalid(
                "give the origin without /v1 (clients already send /v1/... paths)",
            ));
        }
        Ok(UpstreamUrl {
            scheme: scheme.to_owned(),
            authority,
            prefix,
        })
    }

    /// The full upstream URI for a client's `path_and_query`.
    pub fn join(&self, path_and_query: &str) -> Result<Uri, http::Error> {
        Uri::builder()
            .scheme(self.scheme.as_str())
            .authority(self.authority.as_str())
            .path_and_query(format!("{}{}", self.prefix, path_and_query))
            .build()
    }
}

/// `url` with the credentials of its authority (`user:password@`) replaced by `***@`.
fn redact_credentials(url: &str) -> String {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let authority_end = url[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| after_scheme + i);
    match url[after_scheme..authority_end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..after_scheme], &url[after_scheme + at..]),
        None => url.to_owned(),
    }
}

impl fmt::Display for UpstreamUrl {
    /// The URL with any credentials in it replaced by `***`: it is shown in the banner, logs,
    /// error replies and the ledger.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = format!("{}://{}{}", self.scheme, self.authority, self.prefix);
        f.write_str(&redact_credentials(&url))
    }
}

impl fmt::Debug for UpstreamUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UpstreamUrl({self})")
    }
}

/// Idle upstream connections kept per host: an agent keeps a few requests in flight (a main
/// turn, a title or summary side call, subagents), far fewer than this.
const MAX_IDLE_PER_HOST: usize = 32;

pub(crate) type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// One pooled client for every upstream: HTTP/1.1 on plain connections, HTTP/2 or 1.1 by ALPN
/// over TLS (rustls, webpki roots). TCP_NODELAY so small SSE frames are not held back.
///
/// hyper-util's client is used instead of reqwest because reqwest adds headers the client did
/// not send (`accept: */*`), and pith must forward headers exactly.
pub(crate) fn client(pool_idle: Duration) -> Result<HttpClient, UpstreamError> {
    build_client(pool_idle, true)
}

/// The same over HTTP/1.1 only: a WebSocket upgrade needs it.
pub(crate) fn http1_client(pool_idle: Duration) -> Result<HttpClient, UpstreamError> {
    build_client(pool_idle, false)
}

fn build_client(pool_idle: Duration, http2: bool) -> Result<HttpClient, UpstreamError> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    http.set_connect_timeout(Some(Duration::from_secs(10)));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(provider)
        .map_err(|e| UpstreamError::Tls(e.to_string()))?
        .https_or_http()
        .enable_http1();
    let https = if http2 {
        https.enable_http2().wrap_connector(http)
    } else {
        https.wrap_connector(http)
    };
    // The idle timeout only fires with a timer: without one, idle sockets stay pooled forever.
    // An idle connection holds its buffers (tens of KiB after an answer of that size), so the
    // pool keeps at most MAX_IDLE_PER_HOST of them: after a burst the rest are closed at once.
    Ok(Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(pool_idle)
        .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
        .build(https))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_join() {
        let u = UpstreamUrl::parse("http://127.0.0.1:9000/").unwrap();
        assert_eq!(
            u.join("/v1/messages?beta=true").unwrap().to_string(),
            "http://127.0.0.1:9000/v1/messages?beta=true"
        );
        let u = UpstreamUrl::parse("https://gw.example/anthropic").unwrap();
        assert_eq!(
            u.join("/v1/messages").unwrap().to_string(),
            "https://gw.example/anthropic/v1/messages"
        );
        // Credentials in the URL never reach a message.
        let u = UpstreamUrl::parse("http://user:s3cret@127.0.0.1:9000/gw").unwrap();
        assert_eq!(u.to_string(), "http://***@127.0.0.1:9000/gw");
        assert_eq!(
            format!("{u:?}"),
            "UpstreamUrl(http://***@127.0.0.1:9000/gw)"
        );
        let e = UpstreamUrl::parse("ftp://user:s3cret@host/x").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        assert_eq!(
            redact_credentials("https://a@b@host?x=@"),
            "https://***@host?x=@"
        );
        for bad in [
            "api.anthropic.com",
            "ftp://x",
            "https://api.openai.com/v1",
            "http://x/?a=1",
        ] {
            let e = UpstreamUrl::parse(bad).unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
    }
}
