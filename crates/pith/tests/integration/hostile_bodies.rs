//! Bodies and sockets a client can send to cost the proxy memory, disk or descriptors (issue
//! 45, findings 11, 12, 13 and 16): compressed bodies that decode to gigabytes, tiny frames
//! that spooled a whole conversation each, sockets held open by the hundred, large bodies that
//! leave their pages behind. Memory is read from the proxy's own `/proc/PID/status`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::SinkExt;
use pith_testkit::bombs::{self, Piece};
use pith_testkit::fixtures::{self, responses};
use pith_testkit::responses_socket::{SocketMock, frames_of};
use pith_testkit::{MockUpstream, Reply};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::{self, PithProxy, runtime};

/// A field of `/proc/PID/status` in bytes (`VmRSS`: resident now, `VmHWM`: the most ever).
fn memory(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in {status}"));
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kb << 10
}

const MIB: u64 = 1 << 20;

/// A Responses request as Codex signed in with ChatGPT sends it: zstd-compressed.
fn zstd_post(pith: &PithProxy, body: Vec<u8>) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    support::request(
        "POST",
        &format!("{}/v1/responses", pith.url()),
        &support::headers(&[
            ("content-type", "application/json"),
            ("content-encoding", "zstd"),
            ("authorization", "Bearer sk-test"),
            ("session-id", "019-bombs"),
            ("user-agent", "codex_exec/0.169.0"),
        ]),
        body,
    )
}

/// A Responses WebSocket upstream that answers every turn "Hi.".
fn saying_hi(rt: &tokio::runtime::Runtime) -> SocketMock {
    rt.block_on(SocketMock::start(Arc::new(|_: &Value, _| {
        frames_of(&responses::stream(&["Hi."], fixtures::DEFAULT_USAGE))
    })))
    .unwrap()
}

/// Finding 11, memory: 48 bodies of 131 KB that each decode to 4 GiB, sent at once, took the
/// proxy to 7.2 GB (each decode grew to the 64 MiB body limit, 512 of them allowed at once by
/// the blocking pool). Decodes now share one budget (4 bodies at the limit): the proxy's peak
/// stays within it, and every body still goes up as the client sent it.
#[test]
fn zstd_bombs_sent_at_once_are_decoded_within_one_budget_and_go_up_as_sent() {
    let upstream = MockUpstream::start().unwrap();
    upstream.set_default(Reply::sse(responses::stream(
        &["Hi."],
        fixtures::DEFAULT_USAGE,
    )));
    let pith = PithProxy::start(&upstream.url(), &[]);
    let bomb = bombs::zstd_bomb(4 << 30);
    assert_eq!(bomb.len(), 131_078);
    let before = memory(pith.pid(), "VmRSS");
    let rt = runtime();
    let statuses = rt.block_on(async {
        let client = support::client();
        let sends = (0..48).map(|_| {
            let req = zstd_post(&pith, bomb.clone());
            let client = client.clone();
            async move { support::read_all(support::send(&client, req).await).await.0 }
        });
        futures_util::future::join_all(sends).await
    });
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let peak = memory(pith.pid(), "VmHWM");
    // The budget is 256 MiB; the proxy's own memory and the bodies in flight come on top.
    assert!(
        peak.saturating_sub(before) < 512 * MIB,
        "peak {} MiB from {} MiB",
        peak / MIB,
        before / MIB
    );
    let got = upstream.received();
    assert_eq!(got.len(), 48);
    assert!(
        got.iter()
            .all(|r| r.body[..] == bomb[..] && r.header("content-encoding") == Some("zstd")),
        "a body did not go up as the client sent it"
    );
}

/// Finding 11, spool: a body of a few KB that decodes to 60 MB put a 63 MB entry in the spool
/// (the decoded body, kept for the ledger's writer), so 60 of them filled it and later requests
/// were lost to the ledger. The spool keeps the client's bytes; the writer decodes them.
#[test]
fn a_compressed_body_is_spooled_as_the_client_sent_it_not_decoded() {
    let upstream = MockUpstream::start().unwrap();
    upstream.set_default(Reply::sse(responses::stream(
        &["Hi."],
        fixtures::DEFAULT_USAGE,
    )));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[ledger]\nspool_limit_mb = 16\n").unwrap();
    let pith = PithProxy::start(
        &upstream.url(),
        &[("PITH_CONFIG", config.to_str().unwrap())],
    );
    // 24 MiB of prompt in a frame of a few KB: more than the whole spool, decoded.
    let body = bombs::zstd(&[
        Piece::Bytes(
            br#"{"model":"gpt-5.5","stream":true,"store":false,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":""#,
        ),
        Piece::Repeat(b'x', 24 * MIB),
        Piece::Bytes(br#""}]}]}"#),
    ]);
    assert!(body.len() < 1024, "{}", body.len());
    let rt = runtime();
    let status = rt.block_on(async {
        let req = zstd_post(&pith, body.clone());
        support::read_all(support::send(&support::client(), req).await)
            .await
            .0
    });
    assert_eq!(status, 200);
    let rows = pith.wait_rows(1);
    let row = &rows[0];
    assert_eq!(row.bytes_client, body.len() as u64);
    // The writer read the decoded body: the model is the request's, its size its messages'.
    assert_eq!(row.model.as_deref(), Some("gpt-5.5"), "{row:?}");
    assert!(row.messages_bytes >= 24 * MIB, "{row:?}");
    let report: Value =
        serde_json::from_slice(&support::pith_stats(&pith, &["--json"]).stdout).unwrap();
    assert_eq!(report["dropped_rows"], 0, "{report}");
}

/// An upgrade to the Responses WebSocket, with its status: `101` and the socket, or the
/// refusal's status and body (`None` when pith did not answer within 10 s).
async fn upgrade(
    pith: &PithProxy,
) -> (
    Option<u16>,
    Option<tokio_tungstenite::WebSocketStream<TcpStream>>,
    String,
) {
    let mut req = format!("ws://{}/v1/responses", pith.addr)
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "openai-beta",
        "responses_websockets=2026-02-06".parse().unwrap(),
    );
    let open = async {
        let tcp = TcpStream::connect(pith.addr).await.unwrap();
        tokio_tungstenite::client_async(req, tcp).await
    };
    match tokio::time::timeout(Duration::from_secs(10), open).await {
        Ok(Ok((ws, res))) => (Some(res.status().as_u16()), Some(ws), String::new()),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(res))) => {
            let body = res
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            (Some(res.status().as_u16()), None, body)
        }
        Ok(Err(e)) => (None, None, e.to_string()),
        Err(_) => (None, None, "no answer within 10 s".to_owned()),
    }
}

/// Finding 13: under a limit of 1,024 descriptors, 500 sockets held open made an ordinary
/// agent request fail with 502 ("Too many open files"). Sockets are capped (an eighth of the
/// descriptor limit: each holds two), and an upgrade past the cap is refused with `426
/// Upgrade Required`, on which Codex falls back to HTTP; the agent's request is answered.
#[test]
fn held_websockets_are_capped_with_a_refusal_codex_falls_back_from() {
    let rt = runtime();
    let sockets = saying_hi(&rt);
    let http = MockUpstream::start().unwrap();
    http.set_default(Reply::sse(pith_testkit::fixtures::anthropic::stream(
        &["Hi."],
        fixtures::DEFAULT_USAGE,
    )));
    let pith = PithProxy::start_limited(&http.url(), &sockets.url(), &[], 256);
    let (held, refusal) = rt.block_on(async {
        let mut held = Vec::new();
        // Far more than the descriptors allow: each socket takes two of the proxy's.
        for _ in 0..200 {
            match upgrade(&pith).await {
                (Some(101), Some(ws), _) => held.push(ws),
                (status, _, body) => return (held, (status, body)),
            }
        }
        (held, (None, "every upgrade was accepted".to_owned()))
    });
    assert_eq!(
        refusal.0,
        Some(426),
        "{} held, then {refusal:?}",
        held.len()
    );
    assert!(
        refusal.1.contains("send this request over HTTP"),
        "{refusal:?}"
    );
    assert_eq!(held.len(), 256 / 8, "the cap");
    // An agent's request, with every socket still held: answered.
    let status = rt.block_on(async {
        let req = support::request(
            "POST",
            &format!("{}/v1/messages", pith.url()),
            &support::headers(&[
                ("content-type", "application/json"),
                ("anthropic-version", "2023-06-01"),
                ("x-api-key", "sk-test"),
            ]),
            json!({"model": "claude-opus-5-5", "max_tokens": 10, "stream": true,
                   "messages": [{"role": "user", "content": "hi"}]})
            .to_string(),
        );
        let answered = support::read_all(support::send(&support::client(), req).await);
        tokio::time::timeout(Duration::from_secs(20), answered)
            .await
            .map(|(status, _, _)| status.as_u16())
    });
    assert_eq!(status, Ok(200));
    // A socket that closes frees its place.
    let reopened = rt.block_on(async {
        let mut held = held;
        let mut ws = held.pop().unwrap();
        ws.close(None).await.unwrap();
        // Its place is free once pith has seen it go: the next upgrade is accepted.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match upgrade(&pith).await {
                (Some(101), Some(ws), _) => break Some((held, ws)),
                _ if Instant::now() > deadline => break None,
                _ => tokio::task::yield_now().await,
            }
        }
    });
    assert!(reopened.is_some(), "a closed socket's place was not freed");
    // The refusal is counted by its reason (written by the ledger's writer).
    pith_testkit::wait::wait_for("the refusal counted", Duration::from_secs(20), || {
        pith.flush();
        let report: Value =
            serde_json::from_slice(&support::pith_stats(&pith, &["--json"]).stdout).unwrap();
        if report["refused_requests"]["websockets_full"].as_u64() >= Some(1) {
            Ok(())
        } else {
            Err(report)
        }
    });
}

/// Finding 16: after five WebSocket creates of 60 MiB, 834 MB stayed resident while the proxy
/// sat idle; only a burst of 64 connections gave it back. Large bodies freed now give their
/// pages back themselves.
#[test]
fn memory_taken_by_large_bodies_goes_back_when_they_are_done() {
    let rt = runtime();
    let sockets = saying_hi(&rt);
    let pith = PithProxy::start_with(&sockets.url(), &sockets.url(), &[]);
    let at_rest = memory(pith.pid(), "VmRSS");
    // 60 MiB of conversation, as a long session holds it: many items of 20 KiB.
    let text = "x".repeat(20 << 10);
    rt.block_on(async {
        let (_, ws, body) = upgrade(&pith).await;
        let mut ws = ws.unwrap_or_else(|| panic!("{body}"));
        for n in 0..5 {
            let items: Vec<Value> = (0..3000)
                .map(|i| {
                    json!({"type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": format!("{n} {i} {text}")}]})
                })
                .collect();
            let create = json!({"type": "response.create", "model": "gpt-5.5", "stream": true,
                "store": false, "input": items});
            ws.send(Message::text(create.to_string())).await.unwrap();
            crate::websocket::answer(&mut ws).await;
        }
        ws.close(None).await.unwrap();
    });
    drop(text);
    // Every record written: nothing of the bodies is still in use.
    pith.wait_rows(5);
    let peak = memory(pith.pid(), "VmHWM");
    assert!(
        peak > at_rest + 300 * MIB,
        "the bodies took no memory: {peak}"
    );
    // Given back soon after: at most what the proxy held at rest, and a margin (before, 147
    // MiB stayed of 20 at rest, for as long as the proxy sat idle).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut resident = memory(pith.pid(), "VmRSS");
    while resident > at_rest + 64 * MIB && Instant::now() < deadline {
        pith.flush();
        resident = memory(pith.pid(), "VmRSS");
    }
    assert!(
        resident <= at_rest + 64 * MIB,
        "{} MiB resident after the bodies, {} MiB at rest, {} MiB at the peak",
        resident / MIB,
        at_rest / MIB,
        peak / MIB
    );
}

/// The bytes of the files in `dir` (none when it does not exist).
fn size_of_dir(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .map(|e| e.unwrap().metadata().unwrap())
        .filter(std::fs::Metadata::is_file)
        .map(|m| m.len())
        .sum()
}

/// Finding 12: each `@pith pin` create pith answered itself on a socket (a frame of about 150
/// bytes) put the whole conversation the socket holds in the ledger's spool: 100 such frames
/// wrote 1.58 GB to disk with no call upstream. A turn pith answers spools its frame, its
/// answer and the few facts its row reads from the conversation; every turn is still one row,
/// its saving priced on the conversation.
#[test]
fn pin_turns_on_a_socket_spool_their_frame_not_the_conversation_it_holds() {
    let rt = runtime();
    let sockets = saying_hi(&rt);
    let pith = PithProxy::start_with(&sockets.url(), &sockets.url(), &[]);
    let held = 2 * MIB;
    let create = |previous: Option<&str>, text: &str| {
        let mut c = json!({"type": "response.create", "model": "gpt-5.5", "stream": true,
            "store": false, "input": [{"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]}]});
        if let Some(id) = previous {
            c["previous_response_id"] = json!(id);
        }
        c.to_string()
    };
    let id_of = |events: &[String]| -> String {
        let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
        assert_eq!(last["type"], "response.completed", "{events:?}");
        last["response"]["id"].as_str().unwrap().to_owned()
    };
    let mut ws = rt.block_on(crate::websocket::open_with(&pith, &[]));
    // One turn that goes up, with a large input: the socket holds a conversation of 2 MiB.
    let mut previous = rt.block_on(async {
        let big = "x".repeat(usize::try_from(held).unwrap());
        ws.send(Message::text(create(None, &big))).await.unwrap();
        id_of(&crate::websocket::answer(&mut ws).await)
    });
    pith.wait_rows(1);
    // The ledger's writers locked out: what the pin turns spool stays in the spool.
    let mut lock = rusqlite::Connection::open(pith.ledger_path()).unwrap();
    lock.busy_timeout(Duration::from_secs(20)).unwrap();
    let lock = lock
        .transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)
        .unwrap();
    let spool = pith.home.path().join("ledger.db-spool");
    let before = size_of_dir(&spool);
    let pins = 50;
    let mut frames = 0;
    rt.block_on(async {
        for _ in 0..pins {
            let frame = create(Some(&previous), crate::pins::PIN);
            frames += frame.len() as u64;
            ws.send(Message::text(frame)).await.unwrap();
            let events = crate::websocket::answer(&mut ws).await;
            previous = id_of(&events);
            assert!(previous.starts_with("resp_pith_"), "{events:?}");
        }
    });
    // Each record is in the spool before its answer is sent.
    let grown = size_of_dir(&spool).saturating_sub(before);
    drop(lock);
    // Its frame and a few facts each; before, the conversation each (100 MiB here).
    assert!(
        grown < frames + pins * 1024,
        "{pins} pin turns of {frames} bytes in all grew the spool by {grown} bytes"
    );
    assert_eq!(sockets.seen().creates().len(), 1, "a pin turn went up");
    // Every turn a row, once: the pin turns pith's own, priced on the conversation they saved.
    let rows = pith.wait_rows(1 + pins as usize);
    pith.flush();
    let rows_now = support::rows(&pith.ledger_path());
    assert_eq!(rows_now.len(), rows.len());
    assert_eq!(rows.len(), 1 + pins as usize, "{rows:?}");
    let mut arrivals: Vec<Option<i64>> = rows.iter().map(|r| r.arrival_us).collect();
    arrivals.sort_unstable();
    arrivals.dedup();
    assert_eq!(arrivals.len(), rows.len(), "a turn recorded twice");
    assert_eq!(rows[0].outcome.as_str(), "ok");
    for row in &rows[1..] {
        assert_eq!(row.outcome.as_str(), "local", "{row:?}");
        assert_eq!(row.model.as_deref(), Some("gpt-5.5"), "{row:?}");
        assert_eq!(row.session.as_deref(), Some("019-session"), "{row:?}");
        assert!(row.messages_bytes > held, "{row:?}");
        let prompt = row.tools_bytes + row.system_bytes + row.messages_bytes;
        let saved: Vec<(&str, &str, i64)> = row
            .savings
            .iter()
            .map(|s| (s.stage.as_str(), s.band.as_str(), s.tokens))
            .collect();
        let tokens = i64::try_from(prompt.div_ceil(4)).unwrap();
        assert_eq!(saved, [("pins", "cache_read", tokens)], "{row:?}");
    }
    let report: Value =
        serde_json::from_slice(&support::pith_stats(&pith, &["--json"]).stdout).unwrap();
    assert_eq!(report["dropped_rows"], 0, "{report}");
}
