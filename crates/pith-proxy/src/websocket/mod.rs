//! The Responses API over WebSocket, relayed: Codex's built-in OpenAI provider opens
//! `GET /v1/responses` with `Upgrade: websocket` (and `OpenAI-Beta: responses_websockets=...`)
//! before it falls back to HTTP, and retries the upgrade for seconds when a proxy refuses it.
//!
//! On that socket the client sends one text frame per request, `{"type": "response.create",
//! ...}` with the body a `POST /v1/responses` would have (model, input, tools, ...), or
//! `{"type": "response.processed", ...}`; the server answers each create with the events a
//! stream would carry, one JSON text frame each, up to `response.completed` (which carries the
//! usage), `response.failed`, `response.incomplete` or `error`. One socket carries many
//! requests (Codex reuses it across turns).
//!
//! pith opens the same upgrade to the upstream with the client's headers (HTTP/1.1: an upgrade
//! has no HTTP/2 form here), answers the client's upgrade only once the upstream accepted (a
//! refusal reaches the client with the upstream's status and body, so it falls back at once),
//! then carries frames both ways (`pump.rs`, within the HTTP path's limits). Each
//! `response.create` is a request of the request path (`turns.rs`, over the socket's transcript,
//! `transcript.rs`): answered by pith when it is a turn of pin commands, transformed, sent up
//! (byte for byte while pith changed nothing), and one ledger row with the events answering it,
//! recorded as the stream of a `POST /v1/responses` would be; an upgrade that opens no socket
//! is one row too. The headers that cross are the HTTP path's (`request::headers`), less this
//! hop's handshake. An upgrade takes a place among `max_sockets` (an eighth of the descriptor
//! limit, each socket holding two) before it connects upstream; past it the answer is a 426,
//! on which Codex falls back to HTTP at once.

mod pump;
mod transcript;
mod turns;

/// Why a socket's turn went up unchanged, in words (see [`crate::words`]).
pub(crate) use turns::reason::WORDS as REASON_WORDS;

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use pith_outcome::{Refusal, RequestOutcome};
use pith_wire::{Provider, Wire};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use crate::fault::Fault;
use crate::own_headers::TOKEN_HEADER;
use crate::request::{self, headers::end_to_end};
use crate::state::{RelayPlace, State, Stop};
use crate::tee::{Idle, ProxyBody, Tee};

/// Whether `req` asks to open the Responses API's WebSocket.
pub(crate) fn is_upgrade(req: &Request<Incoming>) -> bool {
    let has = |name: header::HeaderName, token: &str| {
        req.headers().get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    req.method() == Method::GET
        && Wire::from_path(req.uri().path()) == Some(Wire::Responses)
        && has(header::UPGRADE, "websocket")
        && has(header::CONNECTION, "upgrade")
}

/// The handshake's own headers: this hop's, computed afresh on each side.
fn is_handshake_header(name: &str) -> bool {
    name.starts_with("sec-websocket-")
}

/// `headers` as they cross: the HTTP path's end-to-end headers, less this hop's handshake.
fn crossing(headers: &HeaderMap) -> impl Iterator<Item = (header::HeaderName, HeaderValue)> {
    end_to_end(headers)
        .into_iter()
        .scan(None, |name, (next, value)| {
            // `HeaderMap::into_iter` names a header once, before its first value.
            if next.is_some() {
                *name = next;
            }
            Some(name.clone().map(|n| (n, value)))
        })
        .flatten()
        .filter(|(name, _)| !is_handshake_header(name.as_str()))
}

/// Serve one upgrade: admitted as any request is (the access token, the account its key
/// names), and while fewer than the proxy's cap of sockets are open; then relayed.
pub(crate) async fn serve(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, std::convert::Infallible> {
    if let Some(expected) = state.config.token.as_deref()
        && !request::token::matches(req.headers(), expected)
    {
        request::count_refusal(&state, Refusal::AccessToken);
        return Ok(Fault::client(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            format!("pith: this proxy needs its access token in the {TOKEN_HEADER} header"),
        )
        .response(Provider::OpenAi));
    }
    let account = match request::account_of(&state, req.headers()) {
        Ok(account) => account,
        Err((reason, fault)) => {
            request::count_refusal(&state, reason);
            return Ok(fault.response(Provider::OpenAi));
        }
    };
    let Some(place) = state.activity.admit_relay(state.config.max_sockets) else {
        request::count_refusal(&state, Refusal::SocketsFull);
        return Ok(sockets_full(state.config.max_sockets));
    };
    Ok(relay(state, req, account, place).await)
}

/// The refusal of an upgrade past the cap of open sockets: `426 Upgrade Required`, the status
/// on which Codex falls back to HTTP for the rest of its session at once, without retrying the
/// upgrade (openai/codex, `codex-rs/core/src/client.rs`, `stream_responses_websocket`: an
/// `ApiError::Transport(TransportError::Http { status })` with `status ==
/// StatusCode::UPGRADE_REQUIRED` returns `WebsocketStreamOutcome::FallbackToHttp`, and `stream`
/// then calls `try_switch_fallback_transport`). Any other status it retries first.
fn sockets_full(max: usize) -> Response<ProxyBody> {
    Fault::client(
        StatusCode::UPGRADE_REQUIRED,
        "invalid_request_error",
        format!(
            "pith: {max} WebSockets are open through this proxy already, its cap (an eighth of \
             its open-file limit): send this request over HTTP (POST /v1/responses), close idle \
             sessions, or start pith under a higher `ulimit -n`"
        ),
    )
    .response(Provider::OpenAi)
}

/// Relay one WebSocket session: the upstream's handshake first, then the client's. Its
/// requests belong to `account`; `place` counts it among the open sockets until it ends.
async fn relay(
    state: Arc<State>,
    mut req: Request<Incoming>,
    account: String,
    place: RelayPlace,
) -> Response<ProxyBody> {
    let refused = |fault: Fault| {
        turns::refused_upgrade(
            &state,
            req.headers(),
            req.uri().path(),
            &account,
            fault.status,
            fault.outcome,
            Some(fault.message.clone()),
        );
        fault.response(Provider::OpenAi)
    };
    let Some(key) = req.headers().get("sec-websocket-key").cloned() else {
        return refused(Fault::client(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "pith: a WebSocket upgrade needs a sec-websocket-key header".to_owned(),
        ));
    };
    let (base, path) = state.config.upstream_for(
        Provider::OpenAi,
        req.uri()
            .path_and_query()
            .map_or("/v1/responses", |p| p.as_str()),
    );
    let upstream = match upstream_handshake(base, &path, &req) {
        Ok(upstream_req) => connect(&state, base, upstream_req).await,
        Err(fault) => Err(fault),
    };
    let upstream = match upstream {
        Ok(res) => res,
        Err(fault) => return refused(fault),
    };
    if upstream.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Recorded as answered by the provider: a 4xx or 5xx is its error.
        turns::refused_upgrade(
            &state,
            req.headers(),
            req.uri().path(),
            &account,
            upstream.status(),
            RequestOutcome::Ok,
            None,
        );
        return refused_as_it_was(&state, upstream);
    }
    let upstream_headers = upstream.headers().clone();
    let turns = turns::Turns::new(Arc::clone(&state), req.headers(), req.uri().path(), account);
    let client_upgrade = hyper::upgrade::on(&mut req);
    let upstream_upgrade = hyper::upgrade::on(upstream);
    let limits = pump::Limits {
        in_answer: state.config.timeouts.upstream_idle,
        max_frame: state.config.max_body,
    };
    let stop = state.relay_stop.subscribe();
    tokio::spawn(relay_frames(
        place,
        client_upgrade,
        upstream_upgrade,
        turns,
        limits,
        stop,
    ));
    switching_protocols(&upstream_headers, &key)
}

/// The relay's task: once both upgrades are done, frames both ways (`pump.rs`) until the
/// session ends; `place` counts it among the open sockets until then.
async fn relay_frames(
    place: RelayPlace,
    client_upgrade: OnUpgrade,
    upstream_upgrade: OnUpgrade,
    turns: turns::Turns,
    limits: pump::Limits,
    stop: tokio::sync::watch::Receiver<Stop>,
) {
    // Counted until the relay ends, however it ends.
    let _place = place;
    let (client, upstream) = match tokio::join!(client_upgrade, upstream_upgrade) {
        (Ok(c), Ok(u)) => (c, u),
        (c, u) => {
            tracing::debug!(
                client = c.is_ok(),
                upstream = u.is_ok(),
                "websocket upgrade failed"
            );
            return;
        }
    };
    // Frames as large as a request body may be, either way (tungstenite's defaults cut a
    // 16 MiB frame with no close code).
    let config = WebSocketConfig::default()
        .max_message_size(Some(limits.max_frame))
        .max_frame_size(Some(limits.max_frame));
    let client =
        WebSocketStream::from_raw_socket(TokioIo::new(client), Role::Server, Some(config)).await;
    let upstream =
        WebSocketStream::from_raw_socket(TokioIo::new(upstream), Role::Client, Some(config)).await;
    pump::pump(client, upstream, turns, limits, stop).await;
}

/// The upgrade request to the upstream: the client's end-to-end headers, a handshake of this
/// hop's own.
fn upstream_handshake(
    base: &crate::upstream::UpstreamUrl,
    path_and_query: &str,
    req: &Request<Incoming>,
) -> Result<Request<Full<Bytes>>, Fault> {
    let upstream_uri = base.join(path_and_query).map_err(|e| {
        Fault::client(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("pith: cannot build the upstream URL: {e}"),
        )
    })?;
    let mut upstream_req = Request::builder().method(Method::GET).uri(upstream_uri);
    for (name, value) in crossing(req.headers()) {
        upstream_req = upstream_req.header(name, value);
    }
    upstream_req
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header("sec-websocket-version", "13")
        .header(
            "sec-websocket-key",
            tokio_tungstenite::tungstenite::handshake::client::generate_key(),
        )
        .body(Full::new(Bytes::new()))
        .map_err(|e| {
            Fault::client(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!("pith: cannot forward this upgrade: {e}"),
            )
        })
}

/// The upstream's answer to the upgrade, within the headers timeout.
async fn connect(
    state: &State,
    base: &crate::upstream::UpstreamUrl,
    upstream_req: Request<Full<Bytes>>,
) -> Result<Response<Incoming>, Fault> {
    let connect = state.ws_client.request(upstream_req);
    match tokio::time::timeout(state.config.timeouts.upstream_headers, connect).await {
        Ok(Ok(res)) => Ok(res),
        Ok(Err(e)) => {
            let cause = crate::fault::with_causes(&e);
            Err(Fault::unreachable(format!(
                "pith could not open the WebSocket to the upstream {base}: {cause}"
            )))
        }
        Err(_) => Err(Fault::upstream_timeout(
            Provider::OpenAi,
            format!(
                "pith: the upstream {base} did not answer the WebSocket upgrade within {:?}",
                state.config.timeouts.upstream_headers
            ),
        )),
    }
}

/// The upstream refused: the client hears it as it is (and falls back to HTTP), its body
/// streamed through within the idle timeout, never collected (a refusal can be any size).
fn refused_as_it_was(state: &State, upstream: Response<Incoming>) -> Response<ProxyBody> {
    let (parts, body) = upstream.into_parts();
    let idle = Idle::new(state.config.timeouts.upstream_idle, Provider::OpenAi, None);
    let mut res = Response::new(ProxyBody::tee(Tee::new(body, None, None, idle)));
    *res.status_mut() = parts.status;
    for (name, value) in crossing(&parts.headers) {
        res.headers_mut().append(name, value);
    }
    res
}

/// The client's `101`: the upstream's own headers (x-request-id, openai-model,
/// x-reasoning-included, ...) reach it; the handshake's are this hop's.
fn switching_protocols(
    upstream_headers: &http::HeaderMap,
    key: &HeaderValue,
) -> Response<ProxyBody> {
    let mut res = Response::new(ProxyBody::full(Bytes::new()));
    *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = res.headers_mut();
    for (name, value) in crossing(upstream_headers) {
        headers.append(name, value);
    }
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        headers.insert("sec-websocket-accept", accept);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handshake_crosses_with_the_http_paths_header_rules_less_its_own() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer k"),
            ("openai-beta", "responses_websockets=2026-02-06"),
            ("connection", "Upgrade, x-hop"),
            ("x-hop", "1"),
            ("upgrade", "websocket"),
            ("sec-websocket-key", "abc"),
            ("sec-websocket-extensions", "permessage-deflate"),
            (crate::own_headers::AGENT_TYPE_HEADER, "main"),
            (crate::own_headers::TOKEN_HEADER, "t"),
            (crate::own_headers::ACCOUNT_KEY_HEADER, "a"),
            ("x-many", "1"),
        ] {
            headers.append(
                header::HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        headers.append("x-many", HeaderValue::from_static("2"));
        let crossed: Vec<(String, String)> = crossing(&headers)
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let end_to_end: Vec<String> = end_to_end(&headers)
            .keys()
            .map(ToString::to_string)
            .filter(|n| !n.starts_with("sec-websocket-"))
            .collect();
        assert_eq!(
            crossed,
            [
                ("authorization".to_owned(), "Bearer k".to_owned()),
                (
                    "openai-beta".to_owned(),
                    "responses_websockets=2026-02-06".to_owned()
                ),
                ("x-many".to_owned(), "1".to_owned()),
                ("x-many".to_owned(), "2".to_owned()),
            ]
        );
        let mut names: Vec<String> = crossed.into_iter().map(|(n, _)| n).collect();
        names.dedup();
        assert_eq!(names, end_to_end, "one list for both paths");
    }
}
