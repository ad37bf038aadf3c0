//! Which headers cross the proxy: every end-to-end header as the client (or the provider) sent
//! it; none of those that describe one hop.

use http::header::{self, HeaderMap, HeaderName};

/// Headers that describe one hop, not the request (RFC 9110 7.6.1), plus those pith recomputes
/// and pith's own headers (the access token, the agent type: meant for pith, never for the
/// provider; nor the account key).
fn is_hop_header(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "expect"
            | "host"
            | "content-length"
            | crate::own_headers::TOKEN_HEADER
            | crate::own_headers::AGENT_TYPE_HEADER
            | crate::own_headers::ACCOUNT_KEY_HEADER
    )
}

/// Copy `headers` minus hop-by-hop ones (and any the `connection` header names).
pub(crate) fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let named_by_connection: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .collect();
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if is_hop_header(name) || named_by_connection.iter().any(|n| n == name.as_str()) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}
