//! Errors pith itself returns, in the shape of the provider the client was talking to, so the
//! client's SDK shows them like any provider error.

use bytes::Bytes;
use pith_wire::Provider;

/// A JSON error body for `provider`. `kind` is the provider's error type
/// (e.g. `api_error`), `message` says what pith tried and what failed.
pub(crate) fn error_body(provider: Provider, kind: &str, message: &str) -> Bytes {
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
