//! The proxy's access token: compared in constant time, so the time a refusal takes says
//! nothing about how much of a guess was right.

use http::HeaderMap;

use crate::own_headers::{TOKEN_HEADER, constant_time_eq};

/// Whether `headers` carry `expected` in the token header.
pub(crate) fn matches(headers: &HeaderMap, expected: &str) -> bool {
    headers
        .get(TOKEN_HEADER)
        .is_some_and(|v| constant_time_eq(v.as_bytes(), expected.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_matches() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        for other in [&b""[..], b"s3cre", b"s3cret!", b"S3cret", b"x3cret"] {
            assert!(!constant_time_eq(other, b"s3cret"), "{other:?}");
        }
        let mut headers = HeaderMap::new();
        assert!(!matches(&headers, "s3cret"));
        headers.insert(TOKEN_HEADER, "s3cret".parse().unwrap());
        assert!(matches(&headers, "s3cret"));
    }
}
