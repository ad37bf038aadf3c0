//! Requests pith answers itself because they cannot be forwarded, tagged by who caused it, and
//! answered in the shape of the provider the client was talking to, so its SDK shows them like
//! any provider error.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use pith_outcome::RequestOutcome;
use pith_wire::Provider;

use crate::tee::ProxyBody;

/// `e` and each of its causes, `: `-joined: what the client and the log are told.
pub(crate) fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A request pith could not forward, with what to tell the client and the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fault {
    /// The ledger outcome; it names who caused the fault.
    pub outcome: RequestOutcome,
    pub status: StatusCode,
    /// The provider's error type, e.g. `invalid_request_error`, `api_error`.
    pub kind: &'static str,
    /// What pith tried and what failed, starting with `pith`.
    pub message: String,
}

impl Fault {
    /// The client sent something pith cannot forward (HTTP 400 unless `status` says more).
    pub fn client(status: StatusCode, kind: &'static str, message: String) -> Fault {
        Fault {
            outcome: RequestOutcome::ClientError,
            status,
            kind,
            message,
        }
    }

    /// No connection to the provider could be made.
    pub fn unreachable(message: String) -> Fault {
        Fault {
            outcome: RequestOutcome::UpstreamUnreachable,
            status: StatusCode::BAD_GATEWAY,
            kind: "api_error",
            message,
        }
    }

    /// The connection was made but what came back was not an HTTP response (garbage, or the
    /// connection closed before a response head).
    pub fn upstream_broken(message: String) -> Fault {
        Fault {
            outcome: RequestOutcome::UpstreamBroken,
            status: StatusCode::BAD_GATEWAY,
            kind: "api_error",
            message,
        }
    }

    /// The provider sent no response headers within the proxy's limit (HTTP 504, the
    /// provider's own timeout type).
    pub fn upstream_timeout(provider: Provider, message: String) -> Fault {
        Fault {
            outcome: RequestOutcome::UpstreamTimeout,
            status: StatusCode::GATEWAY_TIMEOUT,
            kind: match provider {
                Provider::Anthropic => "timeout_error",
                Provider::OpenAi => "timeout",
            },
            message,
        }
    }

    /// The reply to send the client, in `provider`'s error shape.
    pub fn response(&self, provider: Provider) -> Response<ProxyBody> {
        let mut resp = Response::new(ProxyBody::full(error_body(
            provider,
            self.kind,
            &self.message,
        )));
        *resp.status_mut() = self.status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    }
}

/// A JSON error body for `provider`. `kind` is the provider's error type
/// (e.g. `api_error`), `message` says what pith tried and what failed.
fn error_body(provider: Provider, kind: &str, message: &str) -> Bytes {
    let value = match provider {
        Provider::Anthropic => serde_json::json!({
            "type": "error",
            "error": {"type": kind, "message": message},
        }),
        Provider::OpenAi => serde_json::json!({
            "error": {"message": message, "type": kind, "param": null, "code": kind},
        }),
    };
    Bytes::from(value.to_string())
}
