//! The Responses API over WebSocket through `pith proxy`, against a mock upstream that speaks
//! it as Codex's source has it: the client opens `GET /v1/responses` with `Upgrade: websocket`
//! and `OpenAI-Beta: responses_websockets=...`, sends `{"type":"response.create", ...}` text
//! frames (two on one socket, as Codex reuses it across turns), and reads the events of each
//! answer, one JSON text frame each, up to `response.completed` with its usage.

use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use pith_testkit::responses_socket::{Answers, HANG_UP, SocketMock, frames_of};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::{PithProxy, runtime};

/// The events the mock answers the `n`th request with.
fn events(n: u64) -> Vec<String> {
    let usage = json!({"input_tokens": 100 * n, "input_tokens_details": {"cached_tokens": 10 * n},
                       "output_tokens": n, "total_tokens": 101 * n});
    vec![
        json!({"type": "response.created", "response": {"id": format!("resp_{n}"), "model": "gpt-5.5", "usage": null}}).to_string(),
        json!({"type": "response.output_text.delta", "delta": format!("answer {n}")}).to_string(),
        json!({"type": "response.completed", "response": {"id": format!("resp_{n}"), "model": "gpt-5.5", "usage": usage,
               "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": format!("answer {n}")}]}]}}).to_string(),
    ]
}

/// Reads text frames until `response.completed`.
pub(crate) async fn answer<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>) -> Vec<String>
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
    let mock = rt
        .block_on(SocketMock::start(Arc::new(|_: &Value, n| events(n))))
        .unwrap();
    let upstream_url = mock.url();
    let pith = PithProxy::start_with(&upstream_url, &upstream_url, &[]);

    let creates = [
        json!({"type": "response.create", "model": "gpt-5.5", "instructions": "be brief",
               "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "first"}]}],
               "tools": [], "stream": true, "store": false, "prompt_cache_key": "019-session"}).to_string(),
        // The same request shape, with only the new input (the API does not carry
        // `instructions` over a `previous_response_id`, so a client sends them again).
        json!({"type": "response.create", "model": "gpt-5.5", "instructions": "be brief", "previous_response_id": "resp_1",
               "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "second"}]}],
               "tools": [], "stream": true, "store": false}).to_string(),
    ];
    let answers = rt.block_on(async {
        let mut ws = open_with(
            &pith,
            &[
                ("authorization", "Bearer sk-pith-test-key"),
                ("openai-beta", "responses_websockets=2026-02-06"),
                ("originator", "codex_exec"),
                // pith's own header, and one this hop's Connection names: neither crosses.
                ("pith-agent-type", "main"),
                ("x-hop", "1"),
                ("connection", "Upgrade, x-hop"),
            ],
        )
        .await;
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
    let seen = mock.seen();
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
    assert_eq!(header("pith-agent-type"), None);
    assert_eq!(header("x-hop"), None);

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

    // The second create carried only its new input, chained to the first answer: the history
    // holds the conversation the provider saw (both prompts, both answers), and the prompt
    // fingerprints, taken over that conversation, see no bust where the chain only grew.
    let recorded = crate::history::wait_recorded(&pith, "019-session", 4);
    let id = recorded["id"].as_str().unwrap();
    assert_eq!(
        crate::history::shape(pith.home.path(), id),
        ["user+", "assistant", "user+", "assistant"]
    );
    let busts = crate::support::stats_busts(&pith);
    assert_eq!(busts["pairs"], 1, "{busts}");
    assert_eq!(
        (&busts["by_client"], &busts["by_pith"]),
        (&json!(0), &json!(0)),
        "{busts}"
    );
}

/// The status pith answers a bare upgrade with (101 when it opens the socket).
async fn upgrade_status(pith: &PithProxy) -> u16 {
    let tcp = TcpStream::connect(pith.addr).await.unwrap();
    let req = format!("ws://{}/v1/responses", pith.addr)
        .into_client_request()
        .unwrap();
    match tokio_tungstenite::client_async(req, tcp).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => res.status().as_u16(),
        Ok(_) => 101,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_refused_upgrade_reaches_the_client_as_the_upstream_answered_it() {
    let mock = pith_testkit::MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let rt = runtime();
    let status = rt.block_on(upgrade_status(&pith));
    // The mock speaks no WebSocket: its answer to the GET comes back, and the client falls back.
    assert_ne!(status, 101);
    assert!(
        mock.received()
            .iter()
            .any(|r| r.method == "GET" && r.path() == "/v1/responses")
    );
    // One row, with the upstream's status.
    let rows = pith.wait_rows(1);
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].method.as_str(), rows[0].status),
        ("GET", Some(status))
    );

    // No upstream at all: pith's 502, and its row.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let pith = PithProxy::start(&nowhere, &[]);
    let status = rt.block_on(upgrade_status(&pith));
    assert_eq!(status, 502);
    let rows = pith.wait_rows(1);
    assert_eq!(rows[0].status, Some(502));
    assert_eq!(rows[0].outcome.as_str(), "upstream_unreachable");
    assert!(
        rows[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("could not open the WebSocket")),
        "{:?}",
        rows[0].error
    );
}

/// A client's socket to pith.
pub(crate) type Socket = tokio_tungstenite::WebSocketStream<TcpStream>;

/// A socket to pith with Codex's user agent and session, and `headers`.
pub(crate) async fn open_with(
    pith: &PithProxy,
    headers: &[(&'static str, &str)],
) -> tokio_tungstenite::WebSocketStream<TcpStream> {
    let mut req = format!("ws://{}/v1/responses", pith.addr)
        .into_client_request()
        .unwrap();
    let h = req.headers_mut();
    h.insert("session-id", "019-session".parse().unwrap());
    h.insert(
        "user-agent",
        "codex_exec/0.169.0 (Debian 12; x86_64)".parse().unwrap(),
    );
    for (name, value) in headers {
        h.insert(*name, value.parse().unwrap());
    }
    let tcp = TcpStream::connect(pith.addr).await.unwrap();
    let (ws, res) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
    assert_eq!(res.status(), 101);
    ws
}

async fn open(pith: &PithProxy) -> tokio_tungstenite::WebSocketStream<TcpStream> {
    open_with(pith, &[]).await
}

fn create() -> Message {
    Message::text(
        json!({"type": "response.create", "model": "gpt-5.5", "input": "hi", "stream": true})
            .to_string(),
    )
}

fn created(n: u64) -> String {
    json!({"type": "response.created", "response": {"id": format!("resp_{n}"), "model": "gpt-5.5", "usage": null}}).to_string()
}

/// What the client reads until the socket ends: its text frames, and the close frame's code.
async fn until_closed<S>(
    ws: &mut tokio_tungstenite::WebSocketStream<S>,
) -> (Vec<String>, Option<u16>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut texts = Vec::new();
    while let Some(msg) = ws.next().await {
        match msg {
            Ok(Message::Text(t)) => texts.push(t.to_string()),
            Ok(Message::Close(frame)) => return (texts, frame.map(|f| u16::from(f.code))),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    (texts, None)
}

/// A pith in front of a WebSocket mock answering with `answers`, with `env`.
fn pith_over(answers: Answers, env: &[(&str, &str)]) -> (PithProxy, tokio::runtime::Runtime) {
    let rt = runtime();
    let mock = rt.block_on(SocketMock::start(answers)).unwrap();
    let upstream_url = mock.url();
    (PithProxy::start_with(&upstream_url, &upstream_url, env), rt)
}

#[test]
fn an_upstream_silent_mid_answer_is_ended_by_the_idle_timeout_with_its_row() {
    // `response.created`, then nothing: the mock keeps the socket open.
    let (pith, rt) = pith_over(
        Arc::new(|_: &Value, n| vec![created(n)]),
        &[("PITH_UPSTREAM_IDLE_TIMEOUT", "1s")],
    );
    let (texts, code) = rt.block_on(async {
        let mut ws = open(&pith).await;
        ws.send(create()).await.unwrap();
        until_closed(&mut ws).await
    });
    assert_eq!(texts.len(), 2, "{texts:?}");
    let error: Value = serde_json::from_str(&texts[1]).unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["status"], 504);
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("upstream_idle_timeout")
    );
    assert_eq!(code, Some(1011));
    let rows = pith.wait_rows(1);
    assert_eq!(
        rows[0].outcome.as_str(),
        "upstream_timeout",
        "{:?}",
        rows[0]
    );
    assert_eq!(rows[0].method, "WEBSOCKET");
}

#[test]
fn an_upstream_reset_and_a_client_gone_mid_answer_each_leave_their_row() {
    let (pith, rt) = pith_over(
        Arc::new(|_: &Value, n| vec![created(n), HANG_UP.to_owned()]),
        &[],
    );
    rt.block_on(async {
        let mut ws = open(&pith).await;
        ws.send(create()).await.unwrap();
        until_closed(&mut ws).await
    });
    let rows = pith.wait_rows(1);
    assert_eq!(rows[0].outcome.as_str(), "upstream_broken", "{:?}", rows[0]);

    let (pith, rt) = pith_over(Arc::new(|_: &Value, n| vec![created(n)]), &[]);
    rt.block_on(async {
        let mut ws = open(&pith).await;
        ws.send(create()).await.unwrap();
        // The first event arrives, then the client goes.
        let first = ws.next().await.unwrap().unwrap();
        assert!(first.to_text().unwrap().contains("response.created"));
        drop(ws);
    });
    let rows = pith.wait_rows(1);
    assert_eq!(rows[0].outcome.as_str(), "client_closed", "{:?}", rows[0]);
}

#[test]
fn a_frame_over_the_body_limit_closes_the_socket_with_1009_and_one_row() {
    let (pith, rt) = pith_over(Arc::new(|_: &Value, n| events(n)), &[]);
    let code = rt.block_on(async {
        let mut ws = open(&pith).await;
        // One byte over the 64 MiB a request body may have.
        let text = format!(
            r#"{{"type":"response.create","input":"{}"}}"#,
            "x".repeat((64 << 20) + 1)
        );
        let _ = ws.send(Message::text(text)).await;
        until_closed(&mut ws).await.1
    });
    assert_eq!(code, Some(1009));
    let rows = pith.wait_rows(1);
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].status, rows[0].outcome.as_str()),
        (Some(413), "client_error")
    );
    assert!(rows[0].error.as_deref().unwrap_or("").contains("max_body"));
}

#[test]
fn a_flood_without_response_completed_is_kept_to_the_bound_and_recorded() {
    // 80 deltas of 1 MiB, no `response.completed`, then the upstream hangs up: every byte
    // reaches the client, the row counts them and keeps none past 64 MiB.
    let delta =
        json!({"type": "response.output_text.delta", "delta": "y".repeat(1 << 20)}).to_string();
    let (pith, rt) = pith_over(
        Arc::new(move |_: &Value, n| {
            let mut answer = vec![created(n)];
            answer.extend(std::iter::repeat_n(delta.clone(), 80));
            answer.push(HANG_UP.to_owned());
            answer
        }),
        &[],
    );
    let texts = rt.block_on(async {
        let mut ws = open(&pith).await;
        ws.send(create()).await.unwrap();
        until_closed(&mut ws).await.0
    });
    assert_eq!(texts.len(), 81);
    let rows = pith.wait_rows(1);
    assert_eq!(
        rows[0].outcome.as_str(),
        "upstream_broken",
        "{:?}",
        rows[0].outcome
    );
    assert!(
        rows[0].bytes_response > 80 << 20,
        "{}",
        rows[0].bytes_response
    );
}

#[test]
fn sigterm_closes_an_idle_socket_at_once_and_cuts_an_open_answer_with_its_row() {
    let (mut pith, rt) = pith_over(Arc::new(|_: &Value, n| vec![created(n)]), &[]);
    let pid = pith.pid().to_string();
    let (idle_code, open_code) = rt.block_on(async {
        let mut idle = open(&pith).await;
        let mut busy = open(&pith).await;
        busy.send(create()).await.unwrap();
        let first = busy.next().await.unwrap().unwrap();
        assert!(first.to_text().unwrap().contains("response.created"));
        let term = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(term.success());
        let idle_code = until_closed(&mut idle).await.1;
        let open_code = until_closed(&mut busy).await.1;
        (idle_code, open_code)
    });
    // Going away (1001), both: the idle one when the shutdown began, the open one at the end
    // of the grace period.
    assert_eq!((idle_code, open_code), (Some(1001), Some(1001)));
    // (The process has exited or is exiting: a second TERM to it is harmless.)
    assert!(pith.stop().success());
    let rows = crate::support::rows(&pith.ledger_path());
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].outcome.as_str(), "shutdown");
}
#[test]
fn the_real_codex_talks_to_the_provider_over_websocket_through_pith_run() {
    use pith_testkit::fixtures::responses;

    let (rt, usage) = (codex_runtime(), CODEX_USAGE);
    let answer = frames_of(&responses::stream(&["Hi over ", "WebSocket."], usage));
    let mock = rt
        .block_on(SocketMock::start(Arc::new(move |_: &Value, _| {
            answer.clone()
        })))
        .unwrap();
    let upstream_url = mock.url();
    let pith = PithProxy::start_with(&upstream_url, &upstream_url, &[]);
    let codex = DefaultCodex::new(&pith, &upstream_url);
    let run = codex.run(&[], "say hi");
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert_eq!(run.stdout, "Hi over WebSocket.\n", "{}", run.stderr);
    assert!(
        !run.stderr.contains("straight to its provider"),
        "{}",
        run.stderr
    );
    let seen = mock.seen();
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
    // The history holds the turn's conversation (whether the turn chains to the warm-up with
    // `previous_response_id` or, as here against this mock, sends its whole input).
    let session = rows[0].session.clone().unwrap();
    let recorded = crate::history::wait_recorded(&pith, &session, 2);
    let shown = crate::history::pith_json(
        pith.home.path(),
        &["history", "show", recorded["id"].as_str().unwrap()],
    );
    let texts: Vec<String> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.to_string())
        .collect();
    assert!(texts.iter().any(|t| t.contains("say hi")), "{texts:?}");
    assert!(
        texts
            .last()
            .is_some_and(|t| t.contains("Hi over WebSocket.")),
        "{texts:?}"
    );
    // The warm-up and the turn share the prompt's start: no bust between them.
    let busts = crate::support::stats_busts(&pith);
    assert_eq!(
        (&busts["by_client"], &busts["by_pith"]),
        (&json!(0), &json!(0)),
        "{busts}"
    );
    drop(rt);
}

/// How the real Codex signs in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Login<'a> {
    /// An API key (`OPENAI_API_KEY`): the OpenAI API.
    ApiKey,
    /// ChatGPT (`auth.json` with tokens): the ChatGPT backend, the same Responses API under
    /// `/backend-api/codex`. Codex's other ChatGPT calls (accounts, workspace routing,
    /// plugins) go to `chatgpt_base_url`, not through pith: to this origin, which answers
    /// 404 (as a backend without those features; an error answer there stops Codex).
    ChatGpt { account_backend: &'a str },
}

/// A ChatGPT login as Codex stores it: unsigned JWTs (Codex decodes their claims and never
/// checks a signature) expiring in 2036, so no refresh is tried; made for these tests.
const CHATGPT_AUTH: &str = r#"{"auth_mode":"chatgpt","OPENAI_API_KEY":null,"tokens":{"id_token":"eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJlbWFpbCI6ImZha2VAZXhhbXBsZS5jb20iLCJleHAiOjIxMTE1NTIzNzcsImlhdCI6MTc5NjE5MjM3NywiaHR0cHM6Ly9hcGkub3BlbmFpLmNvbS9hdXRoIjp7ImNoYXRncHRfcGxhbl90eXBlIjoicHJvIiwiY2hhdGdwdF91c2VyX2lkIjoidXNlci1mYWtlMTIzIiwiY2hhdGdwdF9hY2NvdW50X2lkIjoiYWNjdC1mYWtlLTEyMyJ9fQ.c2ln","access_token":"eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJleHAiOjIxMTE1NTIzNzcsImlhdCI6MTc5NjE5MjM3NywiaHR0cHM6Ly9hcGkub3BlbmFpLmNvbS9hdXRoIjp7ImNoYXRncHRfYWNjb3VudF9pZCI6ImFjY3QtZmFrZS0xMjMiLCJjaGF0Z3B0X3BsYW5fdHlwZSI6InBybyIsImNoYXRncHRfdXNlcl9pZCI6InVzZXItZmFrZTEyMyJ9fQ.c2ln","refresh_token":"rt-fake","account_id":"acct-fake-123"},"last_refresh":"2026-12-02T06:19:37.036797Z"}"#;

/// The ChatGPT account id in [`CHATGPT_AUTH`], which Codex sends as `ChatGPT-Account-ID`.
pub(crate) const CHATGPT_ACCOUNT: &str = "acct-fake-123";

/// The real Codex on its default path: its built-in OpenAI provider (no `model_provider`),
/// signed in as `login` says, run by `pith run` through `pith` in front of the upstream
/// `upstream_url` (where this Codex would go on its own, so `pith run` is what wires it
/// through pith).
pub(crate) struct DefaultCodex {
    work: tempfile::TempDir,
    home: tempfile::TempDir,
    env: Vec<(&'static str, std::ffi::OsString)>,
}

impl DefaultCodex {
    pub(crate) fn new(pith: &PithProxy, upstream_url: &str) -> DefaultCodex {
        DefaultCodex::signed_in(pith, upstream_url, Login::ApiKey)
    }

    pub(crate) fn signed_in(
        pith: &PithProxy,
        upstream_url: &str,
        login: Login<'_>,
    ) -> DefaultCodex {
        let (work, home) = crate::clients::project();
        let codex_home = home.path().join(".codex");
        std::fs::create_dir_all(&codex_home).unwrap();
        let mut config = "model = \"gpt-5.5\"\napproval_policy = \"never\"\n\
             sandbox_mode = \"danger-full-access\"\ncheck_for_update_on_startup = false\n"
            .to_owned();
        let mut env = vec![
            ("PITH_HOME", pith.home.path().as_os_str().to_owned()),
            ("PITH_LISTEN", pith.addr.to_string().into()),
            ("PITH_OPENAI_UPSTREAM", upstream_url.into()),
            ("PITH_ANTHROPIC_UPSTREAM", upstream_url.into()),
        ];
        match login {
            Login::ApiKey => {
                env.push(("OPENAI_BASE_URL", format!("{upstream_url}/v1").into()));
                env.push(("OPENAI_API_KEY", crate::clients::FAKE_KEY.into()));
            }
            Login::ChatGpt { account_backend } => {
                std::fs::write(codex_home.join("auth.json"), CHATGPT_AUTH).unwrap();
                config.push_str(&format!(
                    "openai_base_url = \"{upstream_url}/backend-api/codex\"\n\
                     chatgpt_base_url = \"{account_backend}/backend-api/\"\n"
                ));
                env.push(("PITH_CHATGPT_UPSTREAM", upstream_url.into()));
            }
        }
        config.push_str("\n[analytics]\nenabled = false\n\n[features]\nplugins = false\n");
        std::fs::write(codex_home.join("config.toml"), config).unwrap();
        DefaultCodex { work, home, env }
    }

    /// The project it works in.
    pub(crate) fn work(&self) -> &std::path::Path {
        self.work.path()
    }

    /// Its `$CODEX_HOME`, where it keeps its session files.
    pub(crate) fn codex_home(&self) -> std::path::PathBuf {
        self.home.path().join(".codex")
    }

    /// `pith run codex exec [ARGS] PROMPT`.
    pub(crate) fn run(&self, args: &[&str], prompt: &str) -> crate::clients::Run {
        crate::clients::codex_via(
            crate::clients::Launch::PithRun(&self.env),
            self.work.path(),
            self.home.path(),
            args,
            prompt,
            crate::clients::LIMIT,
            &[],
        )
    }
}

/// A runtime of one worker for a test that runs a real Codex beside the mock.
pub(crate) fn codex_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// The usage the mock answers the real Codex's turns with.
pub(crate) const CODEX_USAGE: pith_testkit::fixtures::Usage = pith_testkit::fixtures::Usage {
    input: 300,
    output: 7,
    cache_write: 0,
    cache_write_1h: 0,
    cache_read: 100,
};

/// A socket mock answering Codex as the service does: its warm-up with nothing, every turn
/// with "Hi." and `usage`.
pub(crate) fn says_hi_to_codex(
    rt: &tokio::runtime::Runtime,
    usage: pith_testkit::fixtures::Usage,
) -> SocketMock {
    let hi = frames_of(&pith_testkit::fixtures::responses::stream(&["Hi."], usage));
    rt.block_on(SocketMock::start(Arc::new(move |create: &Value, _| {
        if pith_testkit::responses_socket::is_warm_up(create) {
            pith_testkit::responses_socket::warm_up_answer(250)
        } else {
            hi.clone()
        }
    })))
    .unwrap()
}
