//! Who is talking: session id from headers and the client from its user-agent.

use http::HeaderMap;

/// The session id a client put in its headers, if any.
pub fn session_from_headers(headers: &HeaderMap) -> Option<String> {
    pith_clients::session_headers().iter().find_map(|name| {
        headers
            .get(*name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    })
}

/// A short client name from the user-agent: `claude-code`, `opencode`, `codex`, else the
/// user-agent's first product token (e.g. `python-httpx`), else `unknown`.
pub fn client_from_user_agent(headers: &HeaderMap) -> String {
    let ua = headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let Some(client) = pith_clients::Client::from_user_agent(ua) {
        return client.name().to_owned();
    }
    let first = ua.split_whitespace().next().unwrap_or("");
    match first.split('/').next().unwrap_or("") {
        "" => "unknown".to_owned(),
        p => p.to_ascii_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn clients_and_sessions() {
        let mut h = HeaderMap::new();
        assert_eq!(client_from_user_agent(&h), "unknown");
        assert_eq!(session_from_headers(&h), None);
        for (ua, want) in [
            ("claude-cli/2.1.328 (external, sdk-cli)", "claude-code"),
            ("opencode/1.18.33 ai-sdk/provider-utils/4.0.46", "opencode"),
            ("codex_exec/0.169.0 (Debian 12.0.0; x86_64)", "codex"),
            ("Anthropic/Python 2.14.0", "anthropic"),
        ] {
            h.insert("user-agent", HeaderValue::from_static(ua));
            assert_eq!(client_from_user_agent(&h), want);
        }
        h.insert("session-id", HeaderValue::from_static("codex-1"));
        assert_eq!(session_from_headers(&h).as_deref(), Some("codex-1"));
        h.insert("x-session-id", HeaderValue::from_static("ses_1"));
        assert_eq!(session_from_headers(&h).as_deref(), Some("ses_1"));
    }
}
