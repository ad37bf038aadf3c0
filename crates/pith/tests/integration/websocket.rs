//! The Responses API over WebSocket through `pith proxy`, against a mock upstream that speaks
//! it as Codex's source has it: the client opens `GET /v1/responses` with `Upgrade: websocket`
//! and `OpenAI-Beta: responses_websockets=...`, sends `{"type":"response.create", ...}` text
//! frames (two on one socket, as Codex reuses it across turns), and reads the events of each
//! answer, one JSON text frame each, up to `response.completed` with its usage.

use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};

use crate::support::{PithProxy, runtime};

/// The events the mock answers the `n`th request with.
fn events(n: u64) -> Vec<String> {
    let usage = json!({"input_tokens": 100 * n, "input_tokens_details": {"cached_tokens": 10 * n},
                       "output_tokens": n, "total_tokens": 101 * n});
    vec![
        json!({"type": "response.created", "response": {"id": format!("resp_{n}"), "model": "gpt-5.5", "usage": null}}).to_string(),
        json!({"type": "response.output_text.delta", "delta": format!("answer {n}")}).to_string(),
        json!({"type": "response.completed", "response": {"id": format!("resp_{n}"), "model": "gpt-5.5", "usage": usage}}).to_string(),
    ]
}

/// What the mock saw: the upgrade's path and headers, and the client's text frames.
#[derive(Default)]
struct Seen {
    path: String,
    headers: Vec<(String, String)>,
    frames: Vec<String>,
}

type Answers = Arc<dyn Fn(u64) -> Vec<String> + Send + Sync>;

/// A WebSocket server on loopback that answers the `n`th `response.create` with `answers(n)`.
async fn mock(seen: Arc<Mutex<Seen>>, answers: Answers) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            let answers = Arc::clone(&answers);
            tokio::spawn(async move {
                #[expect(
                    clippy::result_large_err,
                    reason = "tungstenite's handshake callback returns its own error response"
                )]
                let record = |req: &Request, res: Response| {
                    let mut s = seen.lock().unwrap();
                    s.path = req.uri().to_string();
                    s.headers = req
                        .headers()
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
                        .collect();
                    Ok(res)
                };
                let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(tcp, record).await else {
                    return;
                };
                let mut n = 0;
                while let Some(Ok(msg)) = ws.next().await {
                    let Message::Text(text) = msg else { continue };
                    seen.lock().unwrap().frames.push(text.to_string());
                    let v: Value = serde_json::from_str(&text).unwrap_or_default();
                    if v["type"] == "response.create" {
                        n += 1;
                        for e in answers(n) {
                            ws.send(Message::text(e)).await.unwrap();
                        }
                    }
                }
            });
        }
    });
    addr
}

/// Reads text frames until `response.completed`.
async fn answer<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>) -> Vec<String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut got = Vec::new();
    while let Some(msg) = ws.next().await {
        if let Message::Text(t) = msg.unwrap() {
            let done = t.contains("\"response.completed\"");
            got.push(t.to_string());
            if done {
                break;
            }
        }
    }
    got
}

#[test]
fn a_responses_websocket_session_is_relayed_frame_for_frame_and_its_usage_recorded() {
    let rt = runtime();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let upstream = rt.block_on(mock(Arc::clone(&seen), Arc::new(events)));
    let upstream_url = format!("http://{upstream}");
    let pith = PithProxy::start_with(&upstream_url, &upstream_url, &[]);

    let creates = [
        json!({"type": "response.create", "model": "gpt-5.5", "instructions": "be brief",
               "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "first"}]}],
               "tools": [], "stream": true, "store": false, "prompt_cache_key": "019-session"}).to_string(),
        json!({"type": "response.create", "model": "gpt-5.5", "previous_response_id": "resp_1",
               "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "second"}]}],
               "stream": true, "store": false}).to_string(),
    ];
    let answers = rt.block_on(async {
        let tcp = TcpStream::connect(pith.addr).await.unwrap();
        let mut req = format!("ws://{}/v1/responses", pith.addr)
            .into_client_request()
            .unwrap();
        let h = req.headers_mut();
        h.insert("authorization", "Bearer sk-pith-test-key".parse().unwrap());
        h.insert(
            "openai-beta",
            "responses_websockets=2026-02-06".parse().unwrap(),
        );
        h.insert("session-id", "019-session".parse().unwrap());
        h.insert("originator", "codex_exec".parse().unwrap());
        h.insert(
            "user-agent",
            "codex_exec/0.169.0 (Debian 12; x86_64)".parse().unwrap(),
        );
        let (mut ws, res) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
        assert_eq!(res.status(), 101);
        let mut answers = Vec::new();
        for create in &creates {
            ws.send(Message::text(create.clone())).await.unwrap();
            answers.push(answer(&mut ws).await);
        }
        ws.close(None).await.unwrap();
        answers
    });

    // Frame for frame, both ways.
    assert_eq!(answers, [events(1), events(2)]);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.frames, creates);
    assert_eq!(seen.path, "/v1/responses");
    let header = |name: &str| {
        seen.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("authorization"), Some("Bearer sk-pith-test-key"));
    assert_eq!(
        header("openai-beta"),
        Some("responses_websockets=2026-02-06")
    );
    assert_eq!(header("session-id"), Some("019-session"));
    assert_eq!(header("upgrade"), Some("websocket"));

    // One ledger row per response, with the usage its response.completed carried.
    let rows = pith.wait_rows(2);
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (i, row) in rows.iter().enumerate() {
        let n = i as u64 + 1;
        assert_eq!(row.wire.as_deref(), Some("responses"));
        assert_eq!(row.client, "codex");
        assert_eq!(row.session.as_deref(), Some("019-session"));
        assert_eq!(row.model.as_deref(), Some("gpt-5.5"));
        assert_eq!(row.outcome.as_str(), "ok", "{row:?}");
        let usage = row.usage.unwrap_or_else(|| panic!("no usage: {row:?}"));
        // OpenAI's cached tokens are inside input_tokens; the ledger keeps them apart.
        assert_eq!(
            (usage.input, usage.cache_read, usage.output),
            (90 * n, 10 * n, n)
        );
    }
}

#[test]
fn a_refused_upgrade_reaches_the_client_as_the_upstream_answered_it() {
    let mock = pith_testkit::MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let rt = runtime();
    let status = rt.block_on(async {
        let tcp = TcpStream::connect(pith.addr).await.unwrap();
        let req = format!("ws://{}/v1/responses", pith.addr)
            .into_client_request()
            .unwrap();
        match tokio_tungstenite::client_async(req, tcp).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(res)) => res.status().as_u16(),
            Ok(_) => 101,
            Err(e) => panic!("{e}"),
        }
    });
    // The mock speaks no WebSocket: its answer to the GET comes back, and the client falls back.
    assert_ne!(status, 101);
    assert!(
        mock.received()
            .iter()
            .any(|r| r.method == "GET" && r.path() == "/v1/responses")
    );
}

/// The data of each event of an SSE body: what the same answer sends as WebSocket frames.
fn frames_of(sse: &[u8]) -> Vec<String> {
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

#[test]
fn the_real_codex_talks_to_the_provider_over_websocket_through_pith_run() {
    use pith_testkit::fixtures::{Usage, responses};

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let usage = Usage {
        input: 300,
        output: 7,
        cache_write: 0,
        cache_write_1h: 0,
        cache_read: 100,
    };
    let answer = frames_of(&responses::stream(&["Hi over ", "WebSocket."], usage));
    let upstream = rt.block_on(mock(Arc::clone(&seen), Arc::new(move |_| answer.clone())));
    let upstream_url = format!("http://{upstream}");
    let pith = PithProxy::start_with(&upstream_url, &upstream_url, &[]);
    let (work, home) = crate::clients::project();
    // Codex's built-in OpenAI provider (no model_provider), with an API key.
    let codex_home = home.path().join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        "model = \"gpt-5.5\"\napproval_policy = \"never\"\nsandbox_mode = \"danger-full-access\"\n\
         check_for_update_on_startup = false\n\n[analytics]\nenabled = false\n\n[features]\nplugins = false\n",
    )
    .unwrap();
    let env: Vec<(&str, std::ffi::OsString)> = vec![
        ("PITH_HOME", pith.home.path().as_os_str().to_owned()),
        ("PITH_LISTEN", pith.addr.to_string().into()),
        ("PITH_OPENAI_UPSTREAM", upstream_url.clone().into()),
        ("PITH_ANTHROPIC_UPSTREAM", upstream_url.clone().into()),
        // Where this Codex goes on its own: the mock (so pith run wires it through pith).
        ("OPENAI_BASE_URL", format!("{upstream_url}/v1").into()),
        ("OPENAI_API_KEY", crate::clients::FAKE_KEY.into()),
    ];
    let run = crate::clients::codex_via(
        crate::clients::Launch::PithRun(&env),
        work.path(),
        home.path(),
        &[],
        "say hi",
        crate::clients::LIMIT,
        &[],
    );
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert_eq!(run.stdout, "Hi over WebSocket.\n", "{}", run.stderr);
    assert!(
        !run.stderr.contains("straight to its provider"),
        "{}",
        run.stderr
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.path, "/v1/responses");
    // Codex 0.169.0 sends two creates on the socket: a warm-up (`"generate": false`), then
    // the turn; the mock answers both.
    let creates: Vec<Value> = seen
        .frames
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .filter(|f: &Value| f["type"] == "response.create")
        .collect();
    assert!(
        creates.iter().all(|c| c["model"] == "gpt-5.5"),
        "{creates:?}"
    );
    let rows = pith.wait_rows(creates.len());
    let ws: Vec<_> = rows.iter().filter(|r| r.method == "WEBSOCKET").collect();
    assert_eq!(
        ws.len(),
        creates.len(),
        "one row per response.create: {rows:?}"
    );
    for row in ws {
        assert_eq!(row.client, "codex");
        assert_eq!(row.outcome.as_str(), "ok");
        let got = row.usage.unwrap();
        assert_eq!(
            (got.input, got.cache_read, got.output),
            (300, 100, 7),
            "{row:?}"
        );
    }
    assert_eq!(creates.len(), 2, "{creates:?}");
    assert_eq!(creates[0]["generate"], false);
    assert!(creates[1].get("generate").is_none());
    drop(rt);
}
