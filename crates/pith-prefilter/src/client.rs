//! The HTTP client for the local-model server: ureq (blocking, rustls), so the ranker needs no
//! async runtime. It is called from `search_workspace` (blocking, run through `spawn_blocking`
//! inside the MCP server's runtime) and from the defer stage on the proxy's blocking pool.
//!
//! Every exchange has one deadline covering connect, TLS, the request and the whole reply.
//! Environment proxies (`HTTPS_PROXY`, `NO_PROXY`, ...) apply to a remote server, never to a
//! loopback one, so a proxy set for other traffic cannot take a local model's requests.

use std::net::IpAddr;
use std::time::Duration;

use ureq::Agent;

/// Largest reply accepted: a ranking reply is a few KB, a model list a few tens, a batch of
/// embeddings a few hundred.
const MAX_RESPONSE_BYTES: u64 = 8 << 20;

/// Characters of an error reply kept to say why it failed.
const ERROR_BODY_CHARS: usize = 200;

/// Why an HTTP exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The deadline passed before the reply was complete.
    #[error("timed out after {} ms", .0.as_millis())]
    Timeout(Duration),
    /// No server answered (connection refused, unknown host, TLS failure, broken reply).
    #[error("cannot reach {url}")]
    Unreachable {
        /// The URL requested.
        url: String,
        /// What the client saw.
        #[source]
        source: ureq::Error,
    },
    /// The server answered with an error status.
    #[error("answered HTTP {status}: {body}")]
    Status {
        /// HTTP status.
        status: u16,
        /// Start of the body (servers put `{"error": ...}` there).
        body: String,
    },
}

/// A server's base URL (`http://` or `https://`, optional path prefix) and an agent for it.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    base: String,
    agent: Agent,
}

/// Why a base URL is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not an http:// or https:// URL with a host")]
pub struct BadUrl(pub String);

impl Client {
    /// A client for `url`; refused unless it is `http(s)://host[:port][/prefix]`.
    pub(crate) fn new(url: &str) -> Result<Self, BadUrl> {
        let base = url.trim().trim_end_matches('/').to_owned();
        let host = host_of(&base).ok_or_else(|| BadUrl(url.to_owned()))?;
        let proxy = if is_loopback(host) {
            None
        } else {
            ureq::Proxy::try_from_env()
        };
        let agent = Agent::config_builder()
            .http_status_as_error(false)
            .proxy(proxy)
            .user_agent(concat!("pith/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Ok(Self { base, agent })
    }

    /// The base URL, without a trailing `/`.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// `GET base+path`; the body of a 2xx reply.
    pub(crate) fn get(&self, path: &str, timeout: Duration) -> Result<Vec<u8>, HttpError> {
        let url = format!("{}{path}", self.base);
        let reply = self
            .agent
            .get(&url)
            .header("accept", "application/json")
            .config()
            .timeout_global(Some(timeout))
            .build()
            .call();
        finish(&url, timeout, reply)
    }

    /// `POST base+path` with a JSON body; the body of a 2xx reply.
    pub(crate) fn post_json(
        &self,
        path: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, HttpError> {
        let url = format!("{}{path}", self.base);
        let reply = self
            .agent
            .post(&url)
            .header("accept", "application/json")
            .header("content-type", "application/json")
            .config()
            .timeout_global(Some(timeout))
            .build()
            .send(body);
        finish(&url, timeout, reply)
    }
}

fn finish(
    url: &str,
    timeout: Duration,
    reply: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<Vec<u8>, HttpError> {
    let fail = |source: ureq::Error| match source {
        ureq::Error::Timeout(_) => HttpError::Timeout(timeout),
        ureq::Error::Io(ref err)
            if matches!(
                err.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ) =>
        {
            HttpError::Timeout(timeout)
        }
        source => HttpError::Unreachable {
            url: url.to_owned(),
            source,
        },
    };
    let mut reply = reply.map_err(fail)?;
    let status = reply.status().as_u16();
    let body = reply
        .body_mut()
        .with_config()
        .limit(MAX_RESPONSE_BYTES)
        .read_to_vec()
        .map_err(fail)?;
    if (200..300).contains(&status) {
        Ok(body)
    } else {
        Err(HttpError::Status {
            status,
            body: String::from_utf8_lossy(&body)
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .take(ERROR_BODY_CHARS)
                .collect::<String>()
                .trim()
                .to_owned(),
        })
    }
}

/// The host of `http(s)://host[:port][/path]` (brackets removed from an IPv6 literal); `None`
/// for another scheme, credentials in the URL, or no host.
fn host_of(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return None;
    }
    let host = if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(valid_port)) {
            return None;
        }
        host
    } else {
        match authority.split_once(':') {
            Some((host, port)) if valid_port(port) => host,
            Some(_) => return None,
            None => authority,
        }
    };
    (!host.is_empty()).then_some(host)
}

fn valid_port(port: &str) -> bool {
    port.parse::<u16>().is_ok()
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_checked() {
        assert_eq!(host_of("http://127.0.0.1:11434"), Some("127.0.0.1"));
        assert_eq!(
            host_of("https://models.example:8443/v1"),
            Some("models.example")
        );
        assert_eq!(host_of("http://[::1]:8080"), Some("::1"));
        assert_eq!(host_of("http://localhost/ollama"), Some("localhost"));
        for bad in [
            "ftp://host",
            "http://:99",
            "http://host:notaport",
            "http://user:pw@host",
            "127.0.0.1:11434",
            "http://[::1",
        ] {
            assert_eq!(host_of(bad), None, "{bad}");
            assert!(Client::new(bad).is_err(), "{bad}");
        }
        let client = Client::new(" http://127.0.0.1:9/ ").unwrap();
        assert_eq!(client.base(), "http://127.0.0.1:9");
        assert!(is_loopback("localhost") && is_loopback("127.0.0.2") && is_loopback("::1"));
        assert!(!is_loopback("models.example") && !is_loopback("10.0.0.1"));
    }
}
