//! The provider's own count of a changed request's original body (`[proxy] provider_counts`,
//! issue 49): the check on pith's estimate of what its stages kept out.
//!
//! For a sampled share of the requests a stage changed, the client's own body is sent to the
//! provider's free token counter: Anthropic `POST /v1/messages/count_tokens` ("Token counting
//! is free to use but is subject to requests per minute rate limits", Anthropic's token
//! counting page), OpenAI `POST /v1/responses/input_tokens` (`client.responses.inputTokens.count`
//! in the official SDK: `{"object": "response.input_tokens", "input_tokens": N}`). It goes
//! beside the request, never on its path: a task started once the provider's answer has begun
//! (a ledger kept, the answer a success), its result put in the request's record when the
//! answer ends (`keep`, from `tee::Pending::finish`, waits for it there, within
//! [`COUNT_TIMEOUT`], without holding the client's answer). It carries the client's credentials, API version and betas,
//! organization and project, and user agent ([`CARRIED`]): nothing else of the request and
//! nothing of pith's.
//!
//! The counter has its own rate limits: a 429 is recorded on the row (`rate_limited`), never
//! retried, and pauses counting for its `retry-after` (at most [`MAX_PAUSE`]); another refusal
//! (a 4xx: a gateway without the counter, credentials it does not take) pauses it for
//! [`MAX_PAUSE`], recorded `failed`. A pause is per counter and credential (a gateway's
//! accounts each have their own limits), and the longer of two is kept; requests sampled
//! meanwhile are recorded `paused` and not asked. Nothing of the count reaches the client.
//!
//! Only the fields each counter documents are sent (Anthropic's count takes no `max_tokens`,
//! `stream` or `metadata`; OpenAI's no `stream`, `store` or `include`), each as the client's
//! own bytes: the body is cut from the client's, never re-serialized.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use pith_ledger::{Held, LedgerSink, ProviderCount, Record};
use pith_wire::Wire;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::upstream::{HttpClient, UpstreamUrl};

/// How long a count may take, answer read included: past it, the count `failed` (and the
/// record it was for waits no longer).
pub const COUNT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest pause a 429's `retry-after` can ask for; without one, [`DEFAULT_PAUSE`].
pub const MAX_PAUSE: Duration = Duration::from_secs(600);
/// The pause after a 429 that says nothing of how long.
pub const DEFAULT_PAUSE: Duration = Duration::from_secs(60);
/// The most of a counter's answer read (a count is a few dozen bytes).
const MAX_ANSWER: usize = 64 << 10;
/// A count above this is not one (no prompt is a billion tokens): `failed`.
const MAX_COUNT: u64 = 1_000_000_000;
/// The most pauses kept at once (one per counter and credential); past it, those over are
/// forgotten first.
const MAX_PAUSES: usize = 1024;

/// The client headers a count carries: its credentials, the API's version and betas, the
/// organization and project it bills, and its user agent. Nothing else of the request, and
/// nothing of pith's.
const CARRIED: &[&str] = &[
    "authorization",
    "x-api-key",
    "anthropic-version",
    "anthropic-beta",
    "openai-organization",
    "openai-project",
    "user-agent",
];

/// Which requests are counted, and the counter's pause after a 429.
pub(crate) struct Counter {
    /// The share of changed requests counted (0 to 1).
    share: f64,
    /// Changed requests seen: every `1 / share`-th is sampled, evenly, from the first.
    seen: AtomicU64,
    /// Until when each counter asked for quiet, by [`pause_key`].
    paused_until: Mutex<HashMap<u64, Instant>>,
}

impl Counter {
    /// A counter of `share` of the changed requests (0: none).
    pub(crate) fn new(share: f64) -> Counter {
        Counter {
            share: share.clamp(0.0, 1.0),
            seen: AtomicU64::new(0),
            paused_until: Mutex::new(HashMap::new()),
        }
    }

    /// Whether any request is counted (off, the default, the request path asks nothing more).
    pub(crate) fn is_on(&self) -> bool {
        self.share > 0.0
    }

    /// Whether this changed request is one of the share: one is taken each time
    /// `seen × share` rounded up climbs, so a share of 0.25 takes the 1st, 5th, 9th... (a
    /// short session still gets a count), 1 takes every one and 0 none.
    fn sampled(&self) -> bool {
        let n = self.seen.fetch_add(1, Ordering::Relaxed) as f64;
        ((n + 1.0) * self.share).ceil() > (n * self.share).ceil()
    }

    fn paused(&self, key: u64) -> bool {
        let pauses = self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
        pauses.get(&key).is_some_and(|t| Instant::now() < *t)
    }

    /// Quiet for `wait` on the counter and credential `key`; a longer pause already running
    /// stays.
    fn pause(&self, key: u64, wait: Duration) {
        let now = Instant::now();
        let mut pauses = self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
        if pauses.len() >= MAX_PAUSES {
            pauses.retain(|_, until| *until > now);
            if pauses.len() >= MAX_PAUSES {
                pauses.clear();
            }
        }
        let until = pauses.entry(key).or_insert(now);
        *until = (*until).max(now + wait.min(MAX_PAUSE));
    }
}

/// The pause a 429's `retry-after` asks for (seconds; [`DEFAULT_PAUSE`] when it says none).
fn retry_after(value: Option<&HeaderValue>) -> Duration {
    value
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(DEFAULT_PAUSE, Duration::from_secs)
}

/// Which pause a count falls under: its counter (the URL without the query) and the
/// credential it carries, hashed (never kept).
fn pause_key(uri: &http::Uri, headers: &HeaderMap) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    uri.authority().map(|a| a.as_str()).hash(&mut h);
    uri.path().hash(&mut h);
    for name in ["authorization", "x-api-key"] {
        headers.get(name).map(HeaderValue::as_bytes).hash(&mut h);
    }
    h.finish()
}

/// What a count needs of a request, taken before the request moves on.
struct Asked {
    uri: http::Uri,
    headers: HeaderMap,
    /// Its counter's and credential's pause.
    key: u64,
    /// The client's own body (shared, not copied).
    body: Bytes,
}

/// The count of a request a stage changed, when it is sampled: `body` is the client's own
/// (decoded when it came compressed), `path_and_query` its target there, `upstream` where it
/// goes. `None` when it is not counted (not sampled, not a wire with a counter, not the
/// provider's own path: the ChatGPT backend's is not); otherwise what the counter's task will
/// answer, started at once, or `paused` without asking.
pub(crate) fn start(
    counter: &std::sync::Arc<Counter>,
    client: &HttpClient,
    upstream: &UpstreamUrl,
    wire: Wire,
    path_and_query: &str,
    client_headers: &HeaderMap,
    body: Bytes,
) -> Option<oneshot::Receiver<ProviderCount>> {
    let count_path = count_path(wire, path_and_query)?;
    if !counter.sampled() {
        return None;
    }
    let (tell, answer) = oneshot::channel();
    let Ok(uri) = upstream.join(&count_path) else {
        let _ = tell.send(ProviderCount::Failed);
        return Some(answer);
    };
    let headers = carried(client_headers);
    let key = pause_key(&uri, &headers);
    if counter.paused(key) {
        let _ = tell.send(ProviderCount::Paused);
        return Some(answer);
    }
    let asked = Asked {
        uri,
        headers,
        key,
        body,
    };
    let (counter, client) = (std::sync::Arc::clone(counter), client.clone());
    tokio::spawn(async move {
        let count = tokio::time::timeout(COUNT_TIMEOUT, ask(&counter, &client, wire, asked))
            .await
            .unwrap_or(ProviderCount::Failed);
        let _ = tell.send(count);
    });
    Some(answer)
}

/// Keep `record` in the ledger with the provider's count, when one was asked: at once when it
/// has come (or failed), else when it comes, held beside the answer that has gone out already
/// (bounded by the count's own timeout). A count cut short (no runtime, the wait dropped) is
/// `failed`.
pub(crate) fn keep(
    sink: &LedgerSink,
    mut record: Record,
    count: Option<oneshot::Receiver<ProviderCount>>,
) {
    let Some(mut count) = count else {
        return sink.submit(record);
    };
    record.provider_count = Some(ProviderCount::Failed);
    match count.try_recv() {
        Ok(counted) => record.provider_count = Some(counted),
        Err(oneshot::error::TryRecvError::Empty) => {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let mut wait = CountWait {
                    held: sink.hold(record),
                    count,
                };
                runtime.spawn(async move {
                    if let Ok(counted) = (&mut wait.count).await {
                        wait.set(counted);
                    }
                });
                return;
            }
        }
        Err(oneshot::error::TryRecvError::Closed) => {}
    }
    sink.submit(record);
}

/// A finished record waiting for the provider's count of its body. Dropped unfinished (the
/// runtime shutting down), it takes a count that has come but was not yet read.
struct CountWait {
    held: Held,
    count: oneshot::Receiver<ProviderCount>,
}

impl CountWait {
    fn set(&mut self, counted: ProviderCount) {
        if let Some(record) = self.held.record_mut() {
            record.provider_count = Some(counted);
        }
    }
}

impl Drop for CountWait {
    fn drop(&mut self) {
        if let Ok(counted) = self.count.try_recv() {
            self.set(counted);
        }
    }
}

/// Ask the counter once: the client's body cut to the counter's fields on the blocking pool
/// (a walk and a copy of a body that may be megabytes, kept off the event loop), then sent.
async fn ask(counter: &Counter, client: &HttpClient, wire: Wire, asked: Asked) -> ProviderCount {
    let client_body = asked.body;
    let Ok(Some(body)) = tokio::task::spawn_blocking(move || count_body(wire, &client_body)).await
    else {
        return ProviderCount::Failed;
    };
    let mut req = Request::new(Full::new(Bytes::from(body)));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = asked.uri;
    *req.headers_mut() = asked.headers;
    let Ok(response) = client.request(req).await else {
        return ProviderCount::Failed;
    };
    let status = response.status();
    if status == StatusCode::TOO_MANY_REQUESTS {
        let wait = retry_after(response.headers().get(header::RETRY_AFTER));
        counter.pause(asked.key, wait);
        tracing::info!(
            wait_s = wait.min(MAX_PAUSE).as_secs(),
            "the provider's token counter is rate limited: counting paused"
        );
        return ProviderCount::RateLimited;
    }
    if status.is_client_error() {
        // Asking again would be refused again (no such counter behind this upstream,
        // credentials it does not take, a body it does not take).
        counter.pause(asked.key, MAX_PAUSE);
        tracing::info!(
            status = status.as_u16(),
            "the provider's token counter refused a count: counting paused for 10 minutes"
        );
        return ProviderCount::Failed;
    }
    if !status.is_success() {
        return ProviderCount::Failed;
    }
    match Limited::new(response.into_body(), MAX_ANSWER)
        .collect()
        .await
    {
        Ok(body) => {
            input_tokens(&body.to_bytes()).map_or(ProviderCount::Failed, ProviderCount::Counted)
        }
        Err(_) => ProviderCount::Failed,
    }
}

/// The counter's path for a request on `wire` to `path_and_query`: the provider's own
/// Messages or Responses path (a query kept: Claude Code's `?beta=true`); `None` for any other
/// (Chat Completions has no counter; a gateway's or the ChatGPT backend's paths may not).
fn count_path(wire: Wire, path_and_query: &str) -> Option<String> {
    let (path, query) = match path_and_query.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path_and_query, None),
    };
    let counter = match (wire, path) {
        (Wire::AnthropicMessages, "/v1/messages") => "/v1/messages/count_tokens",
        (Wire::Responses, "/v1/responses") => "/v1/responses/input_tokens",
        _ => return None,
    };
    Some(match query {
        Some(query) => format!("{counter}?{query}"),
        None => counter.to_owned(),
    })
}

/// The fields of a request each counter takes (its documented parameters).
fn counted_fields(wire: Wire) -> &'static [&'static [u8]] {
    match wire {
        Wire::AnthropicMessages => &[
            b"model",
            b"messages",
            b"system",
            b"tools",
            b"tool_choice",
            b"thinking",
            b"mcp_servers",
            b"context_management",
            b"output_config",
            b"output_format",
        ],
        Wire::Responses => &[
            b"model",
            b"input",
            b"instructions",
            b"tools",
            b"tool_choice",
            b"parallel_tool_calls",
            b"previous_response_id",
            b"conversation",
            b"reasoning",
            b"text",
            b"truncation",
        ],
        Wire::ChatCompletions => &[],
    }
}

/// The count's body: the client's object with only the fields its counter takes, each
/// member's bytes as the client wrote them. `None` when the body is not an object.
fn count_body(wire: Wire, body: &[u8]) -> Option<Vec<u8>> {
    let members = pith_wire::skim::object_members(body)?;
    let fields = counted_fields(wire);
    let mut out = Vec::with_capacity(body.len());
    out.push(b'{');
    for m in members {
        if !fields.contains(&&body[m.key.clone()]) {
            continue;
        }
        if out.len() > 1 {
            out.push(b',');
        }
        // The key with its quotes, then its value.
        out.extend_from_slice(&body[m.key.start - 1..m.key.end + 1]);
        out.push(b':');
        out.extend_from_slice(&body[m.value]);
    }
    out.push(b'}');
    Some(out)
}

/// The headers a count carries: [`CARRIED`] as the client sent them, and JSON.
fn carried(client: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for name in CARRIED {
        for value in client.get_all(*name) {
            out.append(*name, value.clone());
        }
    }
    out.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    out
}

/// The count in a counter's answer: its top-level `input_tokens`.
fn input_tokens(answer: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Count {
        input_tokens: u64,
    }
    serde_json::from_slice::<Count>(answer)
        .ok()
        .map(|c| c.input_tokens)
        .filter(|&n| n <= MAX_COUNT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_counters_fields_go_as_the_client_wrote_them() {
        let body = br#"{"model":"claude-sonnet-4-5","max_tokens":32000,"stream":true,"metadata":{"user_id":"u"},"system":[{"type":"text","text":"be \"brief\""}],"messages":[{"role":"user","content":"hi"}],"tools":[ {"name":"Read"} ],"temperature":1}"#;
        let out = count_body(Wire::AnthropicMessages, body).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"model":"claude-sonnet-4-5","system":[{"type":"text","text":"be \"brief\""}],"messages":[{"role":"user","content":"hi"}],"tools":[ {"name":"Read"} ]}"#
        );
        let responses = br#"{"model":"gpt-5.5","instructions":"x","input":[],"tools":[],"stream":true,"store":false,"include":["reasoning.encrypted_content"],"prompt_cache_key":"k"}"#;
        let out = count_body(Wire::Responses, responses).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"model":"gpt-5.5","instructions":"x","input":[],"tools":[]}"#
        );
        assert_eq!(count_body(Wire::AnthropicMessages, b"[1]"), None);
    }

    #[test]
    fn only_the_providers_own_paths_have_a_counter() {
        assert_eq!(
            count_path(Wire::AnthropicMessages, "/v1/messages?beta=true").as_deref(),
            Some("/v1/messages/count_tokens?beta=true")
        );
        assert_eq!(
            count_path(Wire::Responses, "/v1/responses").as_deref(),
            Some("/v1/responses/input_tokens")
        );
        assert_eq!(
            count_path(Wire::ChatCompletions, "/v1/chat/completions"),
            None
        );
        assert_eq!(count_path(Wire::Responses, "/chatgpt/responses"), None);
    }

    #[test]
    fn a_share_samples_evenly_from_the_first() {
        let picks = |share: f64| {
            let c = Counter::new(share);
            (0..12).map(|_| c.sampled()).collect::<Vec<_>>()
        };
        assert!(picks(1.0).iter().all(|&p| p));
        assert!(picks(0.0).iter().all(|&p| !p));
        let quarter = picks(0.25);
        assert_eq!(quarter.iter().filter(|&&p| p).count(), 3, "{quarter:?}");
        assert!(
            quarter[0],
            "the first is counted: a short session still gets a count"
        );
    }

    #[test]
    fn only_credentials_and_versions_are_carried() {
        let mut h = HeaderMap::new();
        for (name, value) in [
            ("x-api-key", "sk-ant-1"),
            ("authorization", "Bearer sk-ant-oat01"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "oauth-2025-04-20"),
            ("user-agent", "claude-cli/2.1.328"),
            ("x-claude-code-session-id", "s"),
            ("content-length", "99"),
            (crate::own_headers::TOKEN_HEADER, "t"),
            (crate::own_headers::ACCOUNT_KEY_HEADER, "k"),
            (crate::own_headers::AGENT_TYPE_HEADER, "a"),
        ] {
            h.insert(
                http::HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let out = carried(&h);
        let mut names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "anthropic-beta",
                "anthropic-version",
                "authorization",
                "content-type",
                "user-agent",
                "x-api-key"
            ]
        );
        assert_eq!(out["authorization"], "Bearer sk-ant-oat01");
    }

    #[test]
    fn a_count_is_read_from_either_counters_answer() {
        assert_eq!(input_tokens(br#"{"input_tokens":2095}"#), Some(2095));
        assert_eq!(
            input_tokens(br#"{"object":"response.input_tokens","input_tokens":11}"#),
            Some(11)
        );
        assert_eq!(input_tokens(br#"{"type":"error"}"#), None);
        assert_eq!(
            input_tokens(br#"{"input_tokens":18446744073709551615}"#),
            None,
            "no prompt is that long"
        );
    }

    #[test]
    fn a_pause_is_per_counter_and_credential_and_the_longer_stays() {
        let c = Counter::new(1.0);
        let uri = |u: &str| u.parse::<http::Uri>().unwrap();
        let key = |u: &str, k: &'static str| {
            let mut h = HeaderMap::new();
            h.insert("x-api-key", HeaderValue::from_static(k));
            pause_key(&uri(u), &h)
        };
        let anthropic = key("http://a/v1/messages/count_tokens?beta=true", "one");
        assert_eq!(
            anthropic,
            key("http://a/v1/messages/count_tokens", "one"),
            "the query is not the counter"
        );
        c.pause(anthropic, Duration::from_secs(60));
        assert!(c.paused(anthropic));
        assert!(!c.paused(key("http://a/v1/messages/count_tokens", "two")));
        assert!(!c.paused(key("http://a/v1/responses/input_tokens", "one")));
        c.pause(anthropic, Duration::from_secs(1));
        let until = c.paused_until.lock().unwrap()[&anthropic];
        assert!(
            until > Instant::now() + Duration::from_secs(30),
            "the longer stays"
        );
        assert_eq!(
            retry_after(Some(&HeaderValue::from_static("30"))),
            Duration::from_secs(30)
        );
        assert_eq!(retry_after(None), DEFAULT_PAUSE);
    }
}
