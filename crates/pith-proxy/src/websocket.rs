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
//! then relays frames both ways unchanged. Each `response.create` and the events answering it
//! become one ledger row, recorded as the stream of a `POST /v1/responses` would be (so its
//! usage, model and errors are read the same way). Frames are not transformed.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use pith_outcome::RequestOutcome;
use pith_wire::{Provider, Wire, session};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::fault::Fault;
use crate::ledger::Record;
use crate::own_headers::TOKEN_HEADER;
use crate::state::State;
use crate::tee::ProxyBody;
use pith_store::clock::now_ms;

/// Whether `req` asks to open the Responses API's WebSocket.
pub(crate) fn is_upgrade(req: &Request<Incoming>) -> bool {
    let has = |name: header::HeaderName, token: &str| {
        req.headers().get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    req.method() == Method::GET
        && req.uri().path() == "/v1/responses"
        && has(header::UPGRADE, "websocket")
        && has(header::CONNECTION, "upgrade")
}

/// Headers that belong to one hop of the handshake, or to pith.
fn is_hop_header(name: &str) -> bool {
    matches!(
        name,
        "host"
            | "connection"
            | "upgrade"
            | "sec-websocket-key"
            | "sec-websocket-accept"
            | "sec-websocket-version"
            | "sec-websocket-extensions"
            | "content-length"
            | "transfer-encoding"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
    ) || name == TOKEN_HEADER
        || name == crate::own_headers::ACCOUNT_KEY_HEADER
}

/// Relay one WebSocket session: the upstream's handshake first, then the client's. Its
/// requests belong to `account`.
pub(crate) async fn relay(
    state: Arc<State>,
    mut req: Request<Incoming>,
    account: String,
) -> Response<ProxyBody> {
    let Some(key) = req.headers().get("sec-websocket-key").cloned() else {
        return fault(&Fault::client(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "pith: a WebSocket upgrade needs a sec-websocket-key header".to_owned(),
        ));
    };
    let upstream_req = match upstream_handshake(&state, &req) {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    let upstream = match connect(&state, upstream_req).await {
        Ok(res) => res,
        Err(refused) => return refused,
    };
    if upstream.status() != StatusCode::SWITCHING_PROTOCOLS {
        return refused_as_it_was(upstream).await;
    }
    let upstream_headers = upstream.headers().clone();
    let turns = Turns::new(state.config.ledger.clone(), req.headers(), account);
    let client_upgrade = hyper::upgrade::on(&mut req);
    let upstream_upgrade = hyper::upgrade::on(upstream);
    let activity = Arc::clone(&state.activity);
    activity.relay_started();
    tokio::spawn(async move {
        let (client, upstream) = match tokio::join!(client_upgrade, upstream_upgrade) {
            (Ok(c), Ok(u)) => (c, u),
            (c, u) => {
                tracing::debug!(
                    client = c.is_ok(),
                    upstream = u.is_ok(),
                    "websocket upgrade failed"
                );
                activity.relay_ended();
                return;
            }
        };
        let client =
            WebSocketStream::from_raw_socket(TokioIo::new(client), Role::Server, None).await;
        let upstream =
            WebSocketStream::from_raw_socket(TokioIo::new(upstream), Role::Client, None).await;
        pump(client, upstream, turns).await;
        activity.relay_ended();
    });
    switching_protocols(&upstream_headers, &key)
}

/// The upgrade request to the upstream: the client's end-to-end headers, a handshake of this
/// hop's own.
#[expect(
    clippy::result_large_err,
    reason = "the error is the response the client gets, built once"
)]
fn upstream_handshake(
    state: &State,
    req: &Request<Incoming>,
) -> Result<Request<Full<Bytes>>, Response<ProxyBody>> {
    let path_and_query = req
        .uri()
        .path_and_query()
        .map_or("/v1/responses", |p| p.as_str())
        .to_owned();
    let upstream_uri = state.config.openai.join(&path_and_query).map_err(|e| {
        fault(&Fault::client(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("pith: cannot build the upstream URL: {e}"),
        ))
    })?;
    let mut upstream_req = Request::builder().method(Method::GET).uri(upstream_uri);
    for (name, value) in req.headers() {
        if !is_hop_header(name.as_str()) {
            upstream_req = upstream_req.header(name, value);
        }
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
            fault(&Fault::client(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!("pith: cannot forward this upgrade: {e}"),
            ))
        })
}

/// The upstream's answer to the upgrade, within the headers timeout.
async fn connect(
    state: &State,
    upstream_req: Request<Full<Bytes>>,
) -> Result<Response<Incoming>, Response<ProxyBody>> {
    let connect = state.ws_client.request(upstream_req);
    match tokio::time::timeout(state.config.timeouts.upstream_headers, connect).await {
        Ok(Ok(res)) => Ok(res),
        Ok(Err(e)) => {
            let mut cause = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                cause.push_str(": ");
                cause.push_str(&s.to_string());
                source = s.source();
            }
            Err(fault(&Fault::unreachable(format!(
                "pith could not open the WebSocket to the openai upstream {}: {cause}",
                state.config.openai
            ))))
        }
        Err(_) => Err(fault(&Fault::upstream_timeout(
            Provider::OpenAi,
            format!(
                "pith: the openai upstream {} did not answer the WebSocket upgrade within {:?}",
                state.config.openai, state.config.timeouts.upstream_headers
            ),
        ))),
    }
}

/// The upstream refused: the client hears it as it is (and falls back to HTTP).
async fn refused_as_it_was(upstream: Response<Incoming>) -> Response<ProxyBody> {
    let (parts, body) = upstream.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut res = Response::new(ProxyBody::full(body));
    *res.status_mut() = parts.status;
    for (name, value) in &parts.headers {
        if !is_hop_header(name.as_str()) {
            res.headers_mut().append(name, value.clone());
        }
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
    for (name, value) in upstream_headers {
        if !is_hop_header(name.as_str()) {
            headers.append(name, value.clone());
        }
    }
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        headers.insert("sec-websocket-accept", accept);
    }
    res
}

/// A refused upgrade, in OpenAI's error shape. (Not recorded: no request was made on it.)
fn fault(fault: &Fault) -> Response<ProxyBody> {
    fault.response(Provider::OpenAi)
}

/// Frames both ways until either side closes.
async fn pump<C, U>(client: WebSocketStream<C>, upstream: WebSocketStream<U>, mut turns: Turns)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    U: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut to_client, mut from_client) = client.split();
    let (mut to_upstream, mut from_upstream) = upstream.split();
    let end = loop {
        tokio::select! {
            msg = from_client.next() => match msg {
                Some(Ok(msg)) => {
                    if let Message::Text(text) = &msg {
                        turns.client_sent(text.as_str());
                    }
                    let close = matches!(msg, Message::Close(_));
                    // Each hop answers its own pings.
                    if matches!(msg, Message::Ping(_) | Message::Pong(_)) {
                        continue;
                    }
                    if to_upstream.send(msg).await.is_err() {
                        break RequestOutcome::UpstreamBroken;
                    }
                    if close {
                        break RequestOutcome::ClientClosed;
                    }
                }
                _ => break RequestOutcome::ClientClosed,
            },
            msg = from_upstream.next() => match msg {
                Some(Ok(msg)) => {
                    if let Message::Text(text) = &msg {
                        turns.upstream_sent(text.as_str());
                    }
                    let close = matches!(msg, Message::Close(_));
                    if matches!(msg, Message::Ping(_) | Message::Pong(_)) {
                        continue;
                    }
                    if to_client.send(msg).await.is_err() {
                        break RequestOutcome::ClientClosed;
                    }
                    if close {
                        break RequestOutcome::UpstreamBroken;
                    }
                }
                _ => break RequestOutcome::UpstreamBroken,
            },
        }
    };
    turns.close(end);
    let _ = to_client.close().await;
    let _ = to_upstream.close().await;
}

/// The requests of one socket, each recorded when its last event arrives.
struct Turns {
    sink: Option<crate::ledger::LedgerSink>,
    /// The client and session the upgrade's headers name, the same for every request on it.
    client: String,
    session: Option<String>,
    /// The account the socket's requests belong to.
    account: String,
    open: Option<Turn>,
}

struct Turn {
    started: Instant,
    ts_ms: i64,
    arrival_us: i64,
    request: Bytes,
    chunks: Vec<Bytes>,
    bytes: u64,
    ttfb_ms: Option<f64>,
    status: u16,
}

/// The event types that end a response.
const LAST_EVENTS: &[&str] = &[
    "response.completed",
    "response.failed",
    "response.incomplete",
    "error",
];

fn event_type(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: Option<String>,
        status: Option<u16>,
    }
    serde_json::from_str::<Typed>(text).ok().and_then(|t| {
        t.kind.map(|k| match (k.as_str(), t.status) {
            ("error", Some(s)) => format!("error:{s}"),
            _ => k,
        })
    })
}

impl Turns {
    fn new(sink: Option<crate::ledger::LedgerSink>, headers: &HeaderMap, account: String) -> Turns {
        Turns {
            sink,
            client: session::client_from_user_agent(headers),
            session: session::session_from_headers(headers),
            account,
            open: None,
        }
    }

    fn client_sent(&mut self, text: &str) {
        if event_type(text).as_deref() != Some("response.create") {
            return;
        }
        // A new request before the last one ended: the last one is cut.
        self.close(RequestOutcome::ClientClosed);
        self.open = Some(Turn {
            started: Instant::now(),
            ts_ms: now_ms(),
            arrival_us: crate::ledger::arrival_now(),
            request: Bytes::copy_from_slice(text.as_bytes()),
            chunks: Vec::new(),
            bytes: 0,
            ttfb_ms: None,
            status: 200,
        });
    }

    fn upstream_sent(&mut self, text: &str) {
        let Some(turn) = self.open.as_mut() else {
            return;
        };
        let kind = event_type(text).unwrap_or_default();
        turn.ttfb_ms
            .get_or_insert_with(|| turn.started.elapsed().as_secs_f64() * 1000.0);
        let (kind, status) = match kind.split_once(':') {
            Some((k, s)) => (k.to_owned(), s.parse().ok()),
            None => (kind, None),
        };
        // As the same answer over HTTP would have streamed it.
        let chunk = Bytes::from(format!("event: {kind}\ndata: {text}\n\n"));
        turn.bytes += chunk.len() as u64;
        turn.chunks.push(chunk);
        if let Some(status) = status {
            turn.status = status;
        }
        if LAST_EVENTS.contains(&kind.as_str()) {
            self.close(RequestOutcome::Ok);
        }
    }

    /// Record the open request, if any, as ended with `outcome`.
    fn close(&mut self, outcome: RequestOutcome) {
        let Some(turn) = self.open.take() else { return };
        let Some(sink) = &self.sink else { return };
        sink.submit(Record {
            ts_ms: turn.ts_ms,
            arrival_us: turn.arrival_us,
            client: self.client.clone(),
            header_session: self.session.clone(),
            wire: Some(Wire::Responses),
            provider: Some(Provider::OpenAi),
            method: "WEBSOCKET".to_owned(),
            path: "/v1/responses".to_owned(),
            status: Some(turn.status),
            outcome: if outcome == RequestOutcome::Ok && turn.status >= 400 {
                RequestOutcome::UpstreamError
            } else {
                outcome
            },
            bytes_upstream: turn.request.len() as u64,
            request_body: turn.request,
            response_chunks: turn.chunks,
            response_bytes: turn.bytes,
            response_is_sse: true,
            ttfb_ms: turn.ttfb_ms,
            total_ms: turn.started.elapsed().as_secs_f64() * 1000.0,
            account: self.account.clone(),
            ..Record::default()
        });
    }
}
