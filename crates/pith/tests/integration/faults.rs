//! The fault matrix: each way a peer can misbehave, against the real binary, with what the
//! client sees and the ledger row it leaves. Upstreams that misbehave are raw loopback sockets
//! scripted per case; timeouts are shortened through the environment so each case takes
//! seconds.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use pith_store::ledger::RequestOutcome;
use pith_testkit::MockUpstream;

use crate::support::*;

/// A loopback upstream that hands every connection to `serve`, each on its own thread.
fn raw_upstream(serve: impl Fn(TcpStream) + Send + Sync + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let serve = std::sync::Arc::new(serve);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let serve = std::sync::Arc::clone(&serve);
            std::thread::spawn(move || serve(conn));
        }
    });
    format!("http://{addr}")
}

/// Read one request (head and a content-length body) off `conn`.
fn read_request(conn: &mut TcpStream) -> Vec<u8> {
    let mut data = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let n = conn.read(&mut buf).unwrap_or(0);
        if n == 0 {
            return data;
        }
        data.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&data).to_ascii_lowercase();
        if let Some(head_end) = text.find("\r\n\r\n") {
            let length = text[..head_end]
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if data.len() >= head_end + 4 + length {
                return data;
            }
        }
    }
}

const SSE_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

/// One chunk of a chunked body.
fn chunk(data: &str) -> String {
    format!("{:x}\r\n{data}\r\n", data.len())
}

const FIRST_EVENT: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-haiku-4-5\",\"content\":[],\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n";

/// POST `body` to `path` through pith: the status, the body bytes that arrived, and whether the
/// body broke off instead of ending.
fn post(
    pith: &PithProxy,
    path: &str,
    extra: &[(&str, &str)],
    body: String,
) -> (http::StatusCode, Vec<u8>, bool) {
    let rt = runtime();
    rt.block_on(async {
        let resp = send(
            &client(),
            request(
                "POST",
                &format!("{}{path}", pith.url()),
                &headers(extra),
                body,
            ),
        )
        .await;
        let status = resp.status();
        let mut body = resp.into_body();
        let mut bytes = Vec::new();
        let mut broken = false;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => bytes.extend(f.into_data().unwrap_or_default()),
                Err(_) => {
                    broken = true;
                    break;
                }
            }
        }
        (status, bytes, broken)
    })
}

fn anthropic_post(pith: &PithProxy, stream: bool) -> (http::StatusCode, Vec<u8>, bool) {
    let body = format!(
        r#"{{"model":"claude-haiku-4-5","max_tokens":5,"stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    post(
        pith,
        "/v1/messages",
        &[("anthropic-version", "2023-06-01")],
        body,
    )
}

/// A raw client that has sent one `POST /v1/messages` (closing it is the client going away).
fn raw_post(pith: &PithProxy, body: &str) -> TcpStream {
    let mut conn = TcpStream::connect(pith.addr).unwrap();
    write!(
        conn,
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    conn
}

/// Read from `conn` until what arrived contains `needle`.
fn read_until(conn: &mut TcpStream, needle: &str) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(needle) {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "closed before {needle:?} arrived");
        seen.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn an_upstream_silent_before_headers_is_a_504_in_the_providers_shape() {
    let upstream = raw_upstream(|mut conn| {
        read_request(&mut conn);
        std::thread::sleep(Duration::from_secs(30));
    });
    let pith = PithProxy::start(&upstream, &[("PITH_UPSTREAM_HEADERS_TIMEOUT", "1s")]);
    let started = Instant::now();
    let (status, body, _) = anthropic_post(&pith, false);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(status, 504);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "timeout_error");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("pith") && message.contains("upstream_headers_timeout"),
        "{message}"
    );
    let rows = pith.wait_rows(1);
    assert_eq!(rows[0].outcome, RequestOutcome::UpstreamTimeout);
    assert_eq!(rows[0].status, Some(504));
}

#[test]
fn an_upstream_silent_mid_stream_ends_with_the_wires_own_error_event() {
    let upstream = raw_upstream(|mut conn| {
        read_request(&mut conn);
        let _ = conn.write_all(format!("{SSE_HEAD}{}", chunk(FIRST_EVENT)).as_bytes());
        std::thread::sleep(Duration::from_secs(30));
    });
    let pith = PithProxy::start(&upstream, &[("PITH_UPSTREAM_IDLE_TIMEOUT", "1s")]);
    let (status, body, broken) = anthropic_post(&pith, true);
    assert_eq!(status, 200);
    assert!(!broken, "the stream should end cleanly with an error event");
    let text = String::from_utf8(body).unwrap();
    assert!(text.starts_with(FIRST_EVENT), "{text}");
    let events = pith_wire::sse::decode_all(text.as_bytes());
    let last = events.last().unwrap();
    assert_eq!(last.event, "error");
    let v: serde_json::Value = serde_json::from_str(&last.data).unwrap();
    assert_eq!(v["error"]["type"], "timeout_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("upstream_idle_timeout")
    );
    let rows = pith.wait_rows(1);
    assert_eq!(rows[0].outcome, RequestOutcome::UpstreamTimeout);
}

#[test]
fn a_silent_responses_stream_gets_an_error_event_numbered_after_the_last() {
    let upstream = raw_upstream(|mut conn| {
        read_request(&mut conn);
        let event = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\"}}\n\n";
        let _ = conn.write_all(format!("{SSE_HEAD}{}", chunk(event)).as_bytes());
        std::thread::sleep(Duration::from_secs(30));
    });
    let pith = PithProxy::start(&upstream, &[("PITH_UPSTREAM_IDLE_TIMEOUT", "1s")]);
    let body = r#"{"model":"gpt-5.4","stream":true,"input":"hi"}"#.to_owned();
    let (_, bytes, _) = post(&pith, "/v1/responses", &[], body);
    let text = String::from_utf8(bytes).unwrap();
    let events = pith_wire::sse::decode_all(text.as_bytes());
    let last: serde_json::Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    assert_eq!(last["type"], "error");
    assert_eq!(last["code"], "timeout");
    assert_eq!(last["sequence_number"], 1);
    assert_eq!(
        pith.wait_rows(1)[0].outcome,
        RequestOutcome::UpstreamTimeout
    );
}

#[test]
fn a_silent_chat_completions_stream_is_cut_for_lack_of_an_error_event() {
    let upstream = raw_upstream(|mut conn| {
        read_request(&mut conn);
        let event = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[]}\n\n";
        let _ = conn.write_all(format!("{SSE_HEAD}{}", chunk(event)).as_bytes());
        std::thread::sleep(Duration::from_secs(30));
    });
    let pith = PithProxy::start(&upstream, &[("PITH_UPSTREAM_IDLE_TIMEOUT", "1s")]);
    let body = r#"{"model":"gpt-5.4","stream":true,"messages":[]}"#.to_owned();
    let (_, _, broken) = post(&pith, "/v1/chat/completions", &[], body);
    assert!(broken, "a cut stream must not look complete");
    assert_eq!(
        pith.wait_rows(1)[0].outcome,
        RequestOutcome::UpstreamTimeout
    );
}

#[test]
fn an_upstream_reset_mid_stream_is_upstream_broken() {
    let upstream = raw_upstream(|mut conn| {
        read_request(&mut conn);
        let _ = conn.write_all(format!("{SSE_HEAD}{}", chunk(FIRST_EVENT)).as_bytes());
        std::thread::sleep(Duration::from_millis(200));
        // Gone without the last chunk.
    });
    let pith = PithProxy::start(&upstream, &[]);
    let (status, body, broken) = anthropic_post(&pith, true);
    assert_eq!(status, 200);
    assert!(broken, "a reset stream must not look complete");
    assert!(body.starts_with(FIRST_EVENT.as_bytes()));
    let rows = pith.wait_rows(1);
    assert_eq!(rows[0].outcome, RequestOutcome::UpstreamBroken);
    assert!(rows[0].error.as_deref().unwrap().contains("upstream"));
}

#[test]
fn garbage_from_the_upstream_is_a_502_and_upstream_broken() {
    let upstream = raw_upstream(|mut conn| {
        read_request(&mut conn);
        let _ = conn.write_all(b"\x00\x01 not http at all\r\n\r\n");
    });
    let pith = PithProxy::start(&upstream, &[]);
    let (status, body, _) = anthropic_post(&pith, false);
    assert_eq!(status, 502);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["type"], "api_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("pith"));
    assert_eq!(pith.wait_rows(1)[0].outcome, RequestOutcome::UpstreamBroken);
}

#[test]
fn a_slow_client_gets_every_byte() {
    let mock = MockUpstream::start().unwrap();
    let big = format!(
        r#"{{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{{"type":"text","text":"{}"}}],"stop_reason":"end_turn","usage":{{"input_tokens":1,"output_tokens":1}}}}"#,
        "x".repeat(4 << 20)
    );
    mock.push(pith_testkit::Reply::json(big.clone()));
    let pith = PithProxy::start(&mock.url(), &[]);
    let mut conn = TcpStream::connect(pith.addr).unwrap();
    let body = r#"{"model":"m","messages":[]}"#;
    write!(
        conn,
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\nanthropic-version: 2023-06-01\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // 64 KiB every 5 ms: about 0.3 s for the whole answer, far slower than loopback.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = conn.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        std::thread::sleep(Duration::from_millis(5));
    }
    let text = String::from_utf8(got).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{}", &text[..100]);
    assert!(text.ends_with(&big));
    assert_eq!(pith.wait_rows(1)[0].outcome, RequestOutcome::Ok);
}

#[test]
fn a_client_gone_before_the_response_headers_leaves_a_row() {
    let (reached, reached_upstream) = std::sync::mpsc::channel();
    let upstream = raw_upstream(move |mut conn| {
        read_request(&mut conn);
        let _ = reached.send(());
        // Silent past the client's going away.
        std::thread::sleep(Duration::from_secs(3));
        let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}");
    });
    let pith = PithProxy::start(&upstream, &[]);
    let body = r#"{"model":"m","messages":[]}"#;
    let conn = raw_post(&pith, body);
    // The client goes once its request is with the provider, before any answer.
    reached_upstream
        .recv_timeout(Duration::from_secs(10))
        .expect("the request never reached the upstream");
    drop(conn);
    let rows = pith.wait_rows(1);
    assert_eq!(rows[0].outcome, RequestOutcome::ClientClosed);
    assert_eq!(rows[0].status, None);
    assert_eq!(rows[0].bytes_client, body.len() as u64);
    assert!(
        rows[0]
            .error
            .as_deref()
            .unwrap()
            .contains("before the provider's response headers")
    );
}

#[test]
fn slowloris_headers_are_cut_after_the_header_timeout() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_CLIENT_HEADER_TIMEOUT", "1s")]);
    let mut conn = TcpStream::connect(pith.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    conn.write_all(b"POST /v1/messages HTTP/1.1\r\n").unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    let closed = loop {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still open after 10 s"
        );
        // One header line every 300 ms never finishes the head.
        if conn.write_all(b"x-slow: 1\r\n").is_err() {
            break true;
        }
        match conn.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => break true, // hyper answers 408 before closing
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    assert!(closed);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    assert_eq!(mock.request_count(), 0);
}

#[test]
fn sigterm_mid_stream_cuts_the_stream_and_records_it() {
    let upstream = raw_upstream(|mut conn| {
        read_request(&mut conn);
        let _ = conn.write_all(format!("{SSE_HEAD}{}", chunk(FIRST_EVENT)).as_bytes());
        std::thread::sleep(Duration::from_secs(60));
    });
    let mut pith = PithProxy::start(&upstream, &[]);
    let mut conn = raw_post(&pith, r#"{"model":"m","stream":true,"messages":[]}"#);
    read_until(&mut conn, "message_start");
    let started = Instant::now();
    let status = pith.stop();
    assert!(status.success(), "{status:?}");
    // The grace period is 5 s; then the stream is cut.
    assert!(started.elapsed() < Duration::from_secs(15));
    let rows = crate::support::rows(&pith.ledger_path());
    assert_eq!(rows[0].outcome, RequestOutcome::Shutdown);
    assert_eq!(rows[0].status, Some(200));
    assert!(
        pith.stderr().contains("1 rows written"),
        "{}",
        pith.stderr()
    );
}

#[test]
fn two_thousand_concurrent_connections_are_all_answered_and_recorded() {
    const N: usize = 2000;
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let rt = runtime();
    let addr: SocketAddr = pith.addr;
    let ok = rt.block_on(async move {
        let body = r#"{"model":"gpt-5.4","messages":[]}"#;
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..N {
            let request = request.clone();
            tasks.spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut conn = tokio::net::TcpStream::connect(addr).await.ok()?;
                conn.write_all(request.as_bytes()).await.ok()?;
                let mut reply = Vec::new();
                conn.read_to_end(&mut reply).await.ok()?;
                Some(reply.starts_with(b"HTTP/1.1 200"))
            });
        }
        let mut ok = 0;
        while let Some(done) = tasks.join_next().await {
            if done.ok().flatten() == Some(true) {
                ok += 1;
            }
        }
        ok
    });
    assert_eq!(ok, N);
    let rows = pith.wait_rows(N);
    assert_eq!(rows.len(), N);
    assert!(rows.iter().all(|r| r.outcome == RequestOutcome::Ok));
    let rss_kib = std::fs::read_to_string(format!("/proc/{}/status", pith.pid()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap();
    assert!(
        rss_kib < 256 << 10,
        "pith RSS {rss_kib} KiB after the burst"
    );
}

#[test]
fn a_64_mib_body_passes_and_one_byte_more_is_a_413() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let rt = runtime();
    let limit = 64 << 20;
    let prefix = r#"{"model":"m","messages":[],"pad":""#;
    let make = |len: usize| {
        let mut b = prefix.as_bytes().to_vec();
        b.resize(len - 2, b'x');
        b.extend_from_slice(b"\"}");
        Bytes::from(b)
    };
    let (at_limit, over) = (make(limit), make(limit + 1));
    let statuses = rt.block_on(async {
        let c = client();
        let mut statuses = Vec::new();
        for body in [at_limit.clone(), over] {
            let resp = send(
                &c,
                request(
                    "POST",
                    &format!("{}/v1/messages", pith.url()),
                    &headers(&[("anthropic-version", "2023-06-01")]),
                    body,
                ),
            )
            .await;
            let (status, _, frames) = read_all(resp).await;
            statuses.push((status, concat(&frames)));
        }
        statuses
    });
    assert_eq!(statuses[0].0, 200);
    assert!(mock.received()[0].body == at_limit, "body changed");
    assert_eq!(statuses[1].0, 413);
    let v: serde_json::Value = serde_json::from_slice(&statuses[1].1).unwrap();
    assert_eq!(v["error"]["type"], "request_too_large");
    let rows = pith.wait_rows(2);
    assert_eq!(rows[1].outcome, RequestOutcome::ClientError);
    assert_eq!(mock.request_count(), 1);
}

#[test]
fn listening_beyond_loopback_needs_an_access_token() {
    let home = tempfile::tempdir().unwrap();
    // Refused before binding: nothing listens beyond loopback.
    let out = Command::new(pith_bin())
        .args(["proxy", "--listen", "0.0.0.0:0", "--no-ledger"])
        .env("PITH_HOME", home.path())
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_PROXY_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("without an access token") && err.contains("PITH_PROXY_TOKEN"),
        "{err}"
    );
    // A short one is refused too (a new user's `PITH_PROXY_TOKEN=short` was accepted: the
    // build before serves, and is stopped here after 20 s).
    let mut short = Command::new(pith_bin());
    short
        .args(["proxy", "--listen", "0.0.0.0:0", "--no-ledger"])
        .env("PITH_HOME", home.path())
        .env("PITH_PROXY_TOKEN", "short")
        .env_remove("PITH_CONFIG");
    let out = crate::untrusted_project::output_within(short, b"", Duration::from_secs(20))
        .expect("a 5-character token was accepted beyond loopback");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is 5 characters long") && err.contains("at least 16"),
        "{err}"
    );

    // With a token, a request needs it, and the token is never forwarded.
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_PROXY_TOKEN", "s3cret-token")]);
    let rt = runtime();
    let statuses = rt.block_on(async {
        let c = client();
        let mut out = Vec::new();
        for token in [None, Some("wrong"), Some("s3cret-token")] {
            let mut h = vec![("anthropic-version", "2023-06-01")];
            if let Some(t) = token {
                h.push(("x-pith-token", t));
            }
            let resp = send(
                &c,
                request(
                    "POST",
                    &format!("{}/v1/messages", pith.url()),
                    &headers(&h),
                    r#"{"model":"m","messages":[]}"#,
                ),
            )
            .await;
            let (status, _, frames) = read_all(resp).await;
            out.push((status, concat(&frames)));
        }
        out
    });
    assert_eq!(statuses[0].0, 401);
    assert_eq!(statuses[1].0, 401);
    let v: serde_json::Value = serde_json::from_slice(&statuses[0].1).unwrap();
    assert_eq!(v["error"]["type"], "authentication_error");
    assert_eq!(statuses[2].0, 200);
    assert_eq!(mock.request_count(), 1);
    assert_eq!(mock.received()[0].header("x-pith-token"), None);
    // The start-up banner says what clients must send (never the token itself).
    let banner = pith.stderr();
    assert!(banner.contains("x-pith-token"), "{banner}");
    assert!(!banner.contains("s3cret-token"), "{banner}");
}

#[test]
fn credentials_in_an_upstream_url_never_show() {
    // Nothing listens on port 1: every request fails to connect and is reported.
    let url = "http://user:s3cret-pass@127.0.0.1:1";
    let pith = PithProxy::start(url, &[]);
    let (status, body, _) = anthropic_post(&pith, false);
    assert_eq!(status, 502);
    let rows = pith.wait_rows(1);
    let body = String::from_utf8(body).unwrap();
    let error = rows[0].error.clone().unwrap();
    let stderr = pith.stderr();
    assert!(body.contains("***@127.0.0.1:1"), "{body}");
    for (what, text) in [("reply", &body), ("ledger", &error), ("log", &stderr)] {
        assert!(!text.contains("s3cret-pass"), "{what}: {text}");
    }
}

#[test]
fn connect_is_refused_with_a_405_in_the_providers_shape() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let mut conn = TcpStream::connect(pith.addr).unwrap();
    conn.write_all(b"CONNECT api.anthropic.com:443 HTTP/1.1\r\nhost: api.anthropic.com:443\r\nx-api-key: k\r\n\r\n")
        .unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&reply).ends_with("}") {
        let n = conn.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with("HTTP/1.1 405"), "{text}");
    assert!(text.contains("\"type\":\"error\""), "{text}");
    assert!(text.contains("CONNECT is not proxied"), "{text}");
    assert_eq!(mock.request_count(), 0);
    // Refused, so counted by its reason and not written as a row.
    pith.flush();
    assert!(crate::support::rows(&pith.ledger_path()).is_empty());
    let ledger = pith_store::ledger::Ledger::open_read_only(&pith.ledger_path()).unwrap();
    assert_eq!(
        ledger
            .counter(&pith_outcome::Refusal::Method.counter())
            .unwrap(),
        1
    );
}

/// Sockets `pid` has open (its listener, its clients', its upstream connections).
fn open_sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

#[test]
fn idle_upstream_connections_are_closed_after_the_pool_idle_timeout() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_POOL_IDLE_TIMEOUT", "1s")]);
    let before = open_sockets(pith.pid());
    let rt = runtime();
    let addr = pith.addr;
    rt.block_on(async move {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..20 {
            tasks.spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let body = r#"{"model":"gpt-5.4","messages":[]}"#;
                let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
                let request = format!(
                    "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                conn.write_all(request.as_bytes()).await.unwrap();
                let mut reply = Vec::new();
                conn.read_to_end(&mut reply).await.unwrap();
            });
        }
        while tasks.join_next().await.is_some() {}
    });
    // The clients are gone; what pith still holds are pooled upstream connections, closed
    // once they have been idle for the timeout.
    pith_testkit::wait::wait_for(
        "the pooled upstream connections closed",
        Duration::from_secs(10),
        || {
            let open = open_sockets(pith.pid());
            if open <= before {
                Ok(())
            } else {
                Err(format!("{open} sockets open, {before} before the requests"))
            }
        },
    );
}
