//! The request-target, checked before anything routes on it: pith forwards a request's path to
//! an upstream under a prefix (the ChatGPT backend's `/backend-api/codex`), so a path that is
//! not what it looks like would reach something else there. `/chatgpt/../v1/responses`,
//! resolved by the origin after the prefix, leaves the prefix; `*` has no path to forward;
//! an absolute URL naming another host asks for a forward proxy, which pith is not. Each is
//! refused with a 400 that says what to send instead, and counted as a refusal (no row).
//! Clients send none of these: their HTTP libraries resolve dot segments before sending.

use http::{HeaderMap, Method, Response, StatusCode, Uri};
use pith_outcome::Refusal;

use crate::fault::Fault;
use crate::state::State;
use crate::tee::ProxyBody;

/// What to do with a request-target.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Route it.
    Route,
    /// `OPTIONS *`: a question about the server itself, answered here (never forwarded).
    ServerOptions,
    /// Refuse it, saying why.
    Refuse(String),
}

/// `None` when the request may be routed; else pith's answer (a refusal, counted, or the
/// answer to `OPTIONS *`).
pub(crate) fn check(
    state: &State,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Option<Response<ProxyBody>> {
    match verdict(method, uri, headers) {
        Verdict::Route => None,
        Verdict::ServerOptions => {
            let mut response = Response::new(ProxyBody::full(bytes::Bytes::new()));
            *response.status_mut() = StatusCode::NO_CONTENT;
            Some(response)
        }
        Verdict::Refuse(message) => {
            crate::request::count_refusal(state, Refusal::RequestTarget);
            let fault = Fault::client(StatusCode::BAD_REQUEST, "invalid_request_error", message);
            Some(fault.response(crate::request::provider_for(None, headers)))
        }
    }
}

fn verdict(method: &Method, uri: &Uri, headers: &HeaderMap) -> Verdict {
    // CONNECT's authority-form is refused with the method (405), where it is explained.
    if method == Method::CONNECT {
        return Verdict::Route;
    }
    let path = uri.path();
    if path == "*" && uri.authority().is_none() {
        return if method == Method::OPTIONS {
            Verdict::ServerOptions
        } else {
            Verdict::Refuse(format!(
                "pith: the request-target * is for OPTIONS only, not {method}: send the API \
                 path (e.g. POST /v1/messages)"
            ))
        };
    }
    if let Some(authority) = uri.authority() {
        // Absolute-form is what a client sends a forward proxy; to pith itself it must name
        // the host the Host header names.
        let host = headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok());
        let names_pith = uri.scheme().is_some()
            && host.is_some_and(|h| h.eq_ignore_ascii_case(authority.as_str()));
        if !names_pith {
            return Verdict::Refuse(format!(
                "pith: the request-target names {:?}, and pith is not a forward proxy: send the \
                 path alone (e.g. POST /v1/messages) with the Host header naming pith",
                authority.as_str()
            ));
        }
    }
    if !path.starts_with('/') {
        return Verdict::Refuse(format!(
            "pith: the request path {path:?} does not start with /: send the API path (e.g. \
             POST /v1/messages)"
        ));
    }
    if has_dot_segment(path) {
        return Verdict::Refuse(format!(
            "pith: the request path {path:?} has a . or .. segment; pith routes and prefixes \
             paths as sent, so send it resolved (e.g. /v1/responses, not /chatgpt/../v1/responses)"
        ));
    }
    Verdict::Route
}

/// Whether a segment of `path` is `.` or `..`, written plainly or percent-encoded (`%2e`,
/// which an origin decodes before it resolves them).
fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|segment| {
        let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
        decoded == "." || decoded == ".."
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict_of(method: &str, target: &str, host: Option<&str>) -> Verdict {
        let mut headers = HeaderMap::new();
        if let Some(h) = host {
            headers.insert(http::header::HOST, h.parse().unwrap());
        }
        verdict(&method.parse().unwrap(), &target.parse().unwrap(), &headers)
    }

    #[test]
    fn only_origin_form_without_dot_segments_is_routed() {
        let host = Some("127.0.0.1:8787");
        for ok in [
            "/v1/messages",
            "/v1/messages?beta=true",
            "/chatgpt/responses",
            "/a/.hidden/..x/...",
            "/v1/responses?path=../x",
        ] {
            assert_eq!(verdict_of("POST", ok, host), Verdict::Route, "{ok}");
        }
        assert_eq!(
            verdict_of("POST", "http://127.0.0.1:8787/v1/messages", host),
            Verdict::Route
        );
        for bad in [
            "/chatgpt/../v1/responses",
            "/chatgpt/./responses",
            "/chatgpt/%2e%2E/v1/responses",
            "/chatgpt/%2E/responses",
            "/v1/..",
        ] {
            assert!(
                matches!(verdict_of("POST", bad, host), Verdict::Refuse(m) if m.contains("segment")),
                "{bad}"
            );
        }
        assert!(matches!(verdict_of("POST", "*", host), Verdict::Refuse(_)));
        assert_eq!(verdict_of("OPTIONS", "*", host), Verdict::ServerOptions);
        for elsewhere in [
            "http://attacker.example/v1/messages",
            "https://api.anthropic.com/v1/messages",
        ] {
            assert!(
                matches!(verdict_of("POST", elsewhere, host), Verdict::Refuse(m) if m.contains("forward proxy")),
                "{elsewhere}"
            );
        }
        // No Host to compare with (HTTP/1.0): an absolute URL is refused.
        assert!(matches!(
            verdict_of("GET", "http://127.0.0.1:8787/pith/health", None),
            Verdict::Refuse(_)
        ));
        assert_eq!(
            verdict_of("CONNECT", "api.anthropic.com:443", host),
            Verdict::Route
        );
    }
}
