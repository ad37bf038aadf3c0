//! Added latency per turn of `pith proxy` over the Responses WebSocket, against the same body
//! over HTTP, and its memory during a flood of frames; every figure next to its baseline (the
//! same requests sent straight to the mock), measured in one run with interleaved rounds.
//!
//! Run: `cargo bench -p pith --bench websocket_turns` (env: PITH_BENCH_ROUNDS, default 5;
//! PITH_BENCH_TURNS, turns per round and mode, default 40; PITH_BENCH_FLOOD_MB, default 400).
//!
//! Modes, each a number of turns on one keep-alive connection (one socket, or one HTTP/1.1
//! connection):
//! - `http`: Codex 0.169.0's fix-calc requests (`codex-0.169.0/responses-fix-calc`, 41-44 KB)
//!   as `POST /v1/responses`, streamed;
//! - `socket`: the same bodies as whole `response.create` frames;
//! - `chained`: a tool loop, each create chained to the last answer with one new
//!   `function_call_output` (what Codex sends), so pith builds each turn's conversation from
//!   its transcript;
//! - `pinned`: the same loop after a `@pith pin` turn, so each create goes up whole with the
//!   pin at its tail.
//!
//! Then a flood: one create answered by PITH_BENCH_FLOOD_MB frames of 1 MB and no
//! `response.completed`; pith's resident memory before and at its peak.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a bench stops loudly on a broken setup and reports by printing"
)]

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use pith_testkit::bench::percentile_ms;
use pith_testkit::fixtures::{self as captures, ToolCall, responses};
use pith_testkit::responses_socket::{SocketMock, frames_of};
use pith_testkit::{MockUpstream, Reply};
use serde_json::{Value, json};
use support::{env_usize, memory_kib, spawn_pith};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

type HttpClient = Client<HttpConnector, Full<Bytes>>;
type Socket = WebSocketStream<TcpStream>;

fn start_pith(upstream: &str, home: &std::path::Path) -> (Child, SocketAddr) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pith"));
    cmd.args(["proxy", "--listen", "127.0.0.1:0"])
        .args([
            "--anthropic-upstream",
            upstream,
            "--openai-upstream",
            upstream,
        ])
        .env("PITH_HOME", home);
    spawn_pith(cmd)
}

/// The mock's answer to every turn: a short text, then a tool call (a loop goes on).
fn answer_sse() -> Bytes {
    let tool = ToolCall::new("call_1", "exec_command", r#"{"cmd":"ls"}"#);
    responses::stream_with_tool(&["ok"], &tool, captures::DEFAULT_USAGE)
}

async fn post(client: &HttpClient, url: &str, body: &Bytes) -> Duration {
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .header("user-agent", "codex_exec/0.169.0")
        .header("session-id", "bench")
        .body(Full::new(body.clone()))
        .unwrap();
    let start = Instant::now();
    let resp = client.request(req).await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    let mut body = resp.into_body();
    while let Some(frame) = body.frame().await {
        frame.unwrap();
    }
    start.elapsed()
}

async fn open(addr: &str) -> Socket {
    let mut req = format!("ws://{addr}/v1/responses")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("user-agent", "codex_exec/0.169.0".parse().unwrap());
    req.headers_mut()
        .insert("session-id", "bench".parse().unwrap());
    let tcp = TcpStream::connect(addr).await.unwrap();
    // No Nagle delay: the figures are pith's, not TCP's delayed acknowledgement.
    tcp.set_nodelay(true).unwrap();
    let (ws, _) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
    ws
}

/// One turn: the frame out, events in until `response.completed`; its time and answer id.
async fn turn(ws: &mut Socket, frame: String) -> (Duration, String) {
    let start = Instant::now();
    ws.send(Message::text(frame)).await.unwrap();
    while let Some(msg) = ws.next().await {
        if let Message::Text(t) = msg.unwrap()
            && t.contains("\"response.completed\"")
        {
            let v: Value = serde_json::from_str(&t).unwrap();
            let id = v["response"]["id"].as_str().unwrap_or_default().to_owned();
            return (start.elapsed(), id);
        }
    }
    panic!("the socket closed before response.completed");
}

/// A whole create of `body` (an HTTP request body).
fn whole(body: &Bytes) -> String {
    let mut v: Value = serde_json::from_slice(body).unwrap();
    v["type"] = json!("response.create");
    v.to_string()
}

/// A tool loop of `turns` on one socket, each create chained to the last answer; `pin` first
/// sends a pin turn (answered by pith when it is in between).
async fn tool_loop(addr: &str, first: &Bytes, turns: usize, pin: bool) -> Vec<Duration> {
    let mut ws = open(addr).await;
    let (_, mut previous) = turn(&mut ws, whole(first)).await;
    if pin {
        let frame = json!({"type": "response.create", "model": "gpt-5.5", "stream": true,
            "previous_response_id": previous,
            "input": [{"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "@pith pin be concise"}]}]});
        previous = turn(&mut ws, frame.to_string()).await.1;
    }
    let base: Value = serde_json::from_slice(first).unwrap();
    let mut times = Vec::with_capacity(turns);
    for k in 0..turns {
        let mut frame = base.clone();
        frame["type"] = json!("response.create");
        frame["previous_response_id"] = json!(previous);
        frame["input"] = json!([{"type": "function_call_output", "call_id": "call_1",
                                 "output": format!("file_{k}.py\n").repeat(40)}]);
        let (took, id) = turn(&mut ws, frame.to_string()).await;
        previous = id;
        times.push(took);
    }
    let _ = ws.close(None).await;
    times
}

fn pct(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    percentile_ms(samples, p)
}

/// Samples of one mode, direct and through pith.
#[derive(Default)]
struct Pair {
    direct: Vec<Duration>,
    pith: Vec<Duration>,
}

impl Pair {
    /// Added ms at p50 and p99.
    fn added(&mut self) -> (f64, f64) {
        (
            pct(&mut self.pith, 0.5) - pct(&mut self.direct, 0.5),
            pct(&mut self.pith, 0.99) - pct(&mut self.direct, 0.99),
        )
    }
}

fn main() {
    let rounds = env_usize("PITH_BENCH_ROUNDS", 5);
    let turns = env_usize("PITH_BENCH_TURNS", 40);
    let flood_mb = env_usize("PITH_BENCH_FLOOD_MB", 400);
    let bodies: Vec<Bytes> = captures::captures()
        .unwrap()
        .into_iter()
        .filter(|c| c.client_folder.starts_with("codex-") && c.scenario == "responses-fix-calc")
        .map(|c| c.body)
        .collect();
    assert!(!bodies.is_empty(), "no Codex capture");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let http_mock = MockUpstream::start().unwrap();
    http_mock.set_default(Reply::sse(answer_sse()));
    let events = frames_of(&answer_sse());
    let flood = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flooding = Arc::clone(&flood);
    let socket_mock = rt
        .block_on(SocketMock::start(Arc::new(move |_: &Value, _| {
            if flooding.load(std::sync::atomic::Ordering::SeqCst) {
                let delta =
                    json!({"type": "response.output_text.delta", "delta": "x".repeat(1 << 20)})
                        .to_string();
                let mut out = vec![events[0].clone()];
                out.extend(std::iter::repeat_n(delta, flood_mb));
                out.push(pith_testkit::responses_socket::HANG_UP.to_owned());
                out
            } else {
                events.clone()
            }
        })))
        .unwrap();
    let http_home = tempfile::tempdir().unwrap();
    let ws_home = tempfile::tempdir().unwrap();
    let (http_pith, http_addr) = start_pith(&http_mock.url(), http_home.path());
    let (ws_pith, ws_addr) = start_pith(&socket_mock.url(), ws_home.path());
    let direct_ws = socket_mock.url().trim_start_matches("http://").to_owned();
    let through_ws = ws_addr.to_string();

    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1)
        .build_http();
    let (mut http, mut socket, mut chained, mut pinned) = (
        Pair::default(),
        Pair::default(),
        Pair::default(),
        Pair::default(),
    );
    let direct_http = format!("{}/v1/responses", http_mock.url());
    let through_http = format!("http://{http_addr}/v1/responses");
    rt.block_on(async {
        for _ in 0..rounds {
            for (url, into) in [(&direct_http, 0), (&through_http, 1)] {
                for k in 0..turns {
                    let took = post(&client, url, &bodies[k % bodies.len()]).await;
                    if into == 0 {
                        http.direct.push(took)
                    } else {
                        http.pith.push(took)
                    }
                }
            }
            for (addr, into) in [(&direct_ws, 0), (&through_ws, 1)] {
                let mut ws = open(addr).await;
                for k in 0..turns {
                    let (took, _) = turn(&mut ws, whole(&bodies[k % bodies.len()])).await;
                    if into == 0 {
                        socket.direct.push(took)
                    } else {
                        socket.pith.push(took)
                    }
                }
                let _ = ws.close(None).await;
                let times = tool_loop(addr, &bodies[0], turns, false).await;
                if into == 0 {
                    chained.direct.extend(times)
                } else {
                    chained.pith.extend(times)
                }
                let times = tool_loop(addr, &bodies[0], turns, into == 1).await;
                if into == 0 {
                    pinned.direct.extend(times)
                } else {
                    pinned.pith.extend(times)
                }
            }
        }
    });
    let (http_p50, http_p99) = http.added();
    let (ws_p50, ws_p99) = socket.added();
    let (chained_p50, chained_p99) = chained.added();
    let (pinned_p50, pinned_p99) = pinned.added();
    let direct_http_p50 = pct(&mut http.direct, 0.5);
    let direct_ws_p50 = pct(&mut socket.direct, 0.5);

    // The flood.
    let (before, _) = memory_kib(ws_pith.id());
    flood.store(true, std::sync::atomic::Ordering::SeqCst);
    rt.block_on(async {
        let mut ws = open(&through_ws).await;
        ws.send(Message::text(whole(&bodies[0]))).await.unwrap();
        while let Some(Ok(_)) = ws.next().await {}
    });
    let (_, peak) = memory_kib(ws_pith.id());
    let result = json!({
        "rounds": rounds, "turns_per_round": turns,
        "direct_p50_ms": {"http": direct_http_p50, "socket": direct_ws_p50},
        "added_ms": {
            "http": {"p50": http_p50, "p99": http_p99},
            "socket": {"p50": ws_p50, "p99": ws_p99},
            "chained": {"p50": chained_p50, "p99": chained_p99},
            "pinned": {"p50": pinned_p50, "p99": pinned_p99},
        },
        "socket_over_http_added_p50": ws_p50 / http_p50,
        "flood": {"frames_mb": flood_mb, "rss_before_mib": before / 1024, "peak_rss_mib": peak / 1024},
    });
    println!("{}", serde_json::to_string_pretty(&result).unwrap());
    for mut pith in [http_pith, ws_pith] {
        let _ = pith.kill();
        let _ = pith.wait();
    }
}
