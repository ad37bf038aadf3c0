//! A mock of the Responses API's WebSocket mode on loopback, as OpenAI documents it and Codex
//! uses it: `GET /v1/responses` with `Upgrade: websocket`, one `response.create` text frame per
//! request, its events one JSON text frame each.
//!
//! Like the real service it keeps one previous response per connection (the last completed
//! one): a create chained to any other id (`previous_response_id`) is answered with the
//! documented `previous_response_not_found` error event, and a turn that fails evicts it.
//! Each answer's response id is unique (`resp_ws_<connection>_<n>`), so a chain to an answer
//! of another socket, or to an id the mock never gave, is refused as the service would.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};

use crate::fixtures::responses::RESPONSE_ID;

/// What the mock saw: the last upgrade's path and headers, every client text frame in order,
/// and how many sockets were opened.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// The last upgrade's path and query.
    pub path: String,
    /// The last upgrade's headers.
    pub headers: Vec<(String, String)>,
    /// Every text frame a client sent, in order, across sockets.
    pub frames: Vec<String>,
    /// Sockets opened.
    pub connections: usize,
}

impl Seen {
    /// The `response.create` frames, parsed.
    pub fn creates(&self) -> Vec<Value> {
        self.frames
            .iter()
            .filter_map(|f| serde_json::from_str::<Value>(f).ok())
            .filter(|f| f["type"] == "response.create")
            .collect()
    }

    /// The creates that are not warm-ups: the main loop's turns.
    pub fn turns(&self) -> Vec<Value> {
        self.creates()
            .into_iter()
            .filter(|c| !is_warm_up(c))
            .collect()
    }
}

/// The events answering a create: given the create and its number on its socket (from 1).
pub type Answers = Arc<dyn Fn(&Value, u64) -> Vec<String> + Send + Sync>;

/// In an answer, where the mock drops the socket without a close frame.
pub const HANG_UP: &str = "hang up";

/// A running mock.
pub struct SocketMock {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
}

impl SocketMock {
    /// Start on the current tokio runtime (it serves while that runtime runs).
    pub async fn start(answers: Answers) -> std::io::Result<SocketMock> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let shared = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                // As the service does: no Nagle delay on a small event.
                let _ = tcp.set_nodelay(true);
                let seen = Arc::clone(&shared);
                let answers = Arc::clone(&answers);
                let connection = {
                    let mut s = lock(&seen);
                    s.connections += 1;
                    s.connections
                };
                tokio::spawn(serve(tcp, seen, answers, connection));
            }
        });
        Ok(SocketMock { addr, seen })
    }

    /// `http://127.0.0.1:PORT`, the origin pith's upstream is set to.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it saw so far.
    pub fn seen(&self) -> MutexGuard<'_, Seen> {
        lock(&self.seen)
    }
}

fn lock(seen: &Mutex<Seen>) -> MutexGuard<'_, Seen> {
    seen.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn serve(
    tcp: tokio::net::TcpStream,
    seen: Arc<Mutex<Seen>>,
    answers: Answers,
    connection: usize,
) {
    #[expect(
        clippy::result_large_err,
        reason = "tungstenite's handshake callback returns its own error response"
    )]
    let record = |req: &Request, res: Response| {
        let mut s = lock(&seen);
        s.path = req.uri().to_string();
        s.headers = req
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        Ok(res)
    };
    // Frames as large as pith's body limit (tungstenite's default cuts one over 16 MiB).
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20));
    let accepted = tokio_tungstenite::accept_hdr_async_with_config(tcp, record, Some(config));
    let Ok(mut ws) = accepted.await else {
        return;
    };
    let mut n = 0;
    // The connection-local cache: the last completed response's id.
    let mut previous: Option<String> = None;
    while let Some(Ok(msg)) = ws.next().await {
        let Message::Text(text) = msg else { continue };
        lock(&seen).frames.push(text.to_string());
        let create: Value = serde_json::from_str(&text).unwrap_or_default();
        if create["type"] != "response.create" {
            continue;
        }
        if let Some(id) = create["previous_response_id"].as_str()
            && previous.as_deref() != Some(id)
        {
            previous = None;
            if ws.send(Message::text(not_found(id))).await.is_err() {
                return;
            }
            continue;
        }
        n += 1;
        let id = format!("resp_ws_{connection}_{n}");
        previous = None;
        for event in answers(&create, n) {
            // The socket goes away here, as a reset upstream's does.
            if event == HANG_UP {
                return;
            }
            let event = event.replace(RESPONSE_ID, &id);
            if let Ok(v) = serde_json::from_str::<Value>(&event)
                && v["type"] == "response.completed"
            {
                previous = v["response"]["id"].as_str().map(str::to_owned);
            }
            if ws.send(Message::text(event)).await.is_err() {
                return;
            }
        }
    }
}

/// The service's answer to a chain to a response it does not hold.
pub fn not_found(id: &str) -> String {
    json!({"type": "error", "status": 400, "error": {
        "type": "invalid_request_error", "code": "previous_response_not_found",
        "message": format!("Previous response with id '{id}' not found."),
        "param": "previous_response_id"}})
    .to_string()
}

/// A refusal of the request itself, as an `error` event with its status.
pub fn refusal(message: &str) -> String {
    json!({"type": "error", "status": 400, "error": {
        "type": "invalid_request_error", "code": "invalid_value", "message": message, "param": "input"}})
    .to_string()
}

/// The events of an SSE body, one JSON text each: the same answer as WebSocket frames.
pub fn frames_of(sse: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(sse)
        .split("\n\n")
        .filter_map(|event| {
            event
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .map(str::to_owned)
        })
        .collect()
}

/// Codex's warm-up (`generate: false`): nothing is generated, the service answers with an
/// empty completed response.
pub fn is_warm_up(create: &Value) -> bool {
    create["generate"] == false
}

/// The answer to a warm-up: created, then completed with no output and the input's usage.
pub fn warm_up_answer(input_tokens: u64) -> Vec<String> {
    let response = |status: &str, usage: Value| {
        json!({"id": RESPONSE_ID, "object": "response", "status": status, "model": "gpt-5.5",
               "output": [], "usage": usage})
    };
    vec![
        json!({"type": "response.created", "response": response("in_progress", Value::Null)})
            .to_string(),
        json!({"type": "response.completed", "response": response("completed", json!({
            "input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens}))})
        .to_string(),
    ]
}
