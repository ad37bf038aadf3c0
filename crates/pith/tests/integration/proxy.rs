//! `pith proxy` against the mock upstream: exact forwarding, streaming, errors, cancellation.

use std::io::{Read, Write};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use pith_store::ledger::RequestOutcome;
use pith_testkit::fixtures as captures;
use pith_testkit::fixtures::{self as fixtures, Usage};
use pith_testkit::{MockUpstream, Reply};

use crate::support::*;

fn no_transforms() -> [(&'static str, &'static str); 1] {
    [("PITH_DEFER_TOOLS", "0")]
}

#[test]
fn every_capture_reaches_the_upstream_byte_identical_with_the_same_headers() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &no_transforms());
    let all = captures::captures().unwrap();
    assert!(
        all.len() >= 30,
        "expected every capture, found {}",
        all.len()
    );
    let rt = runtime();
    let client = client();
    for cap in &all {
        mock.clear_received();
        let sent = capture_headers(cap);
        let url = format!("{}{}", pith.url(), cap.path);
        let (status, _, _) = rt.block_on(async {
            read_all(send(&client, request(&cap.method, &url, &sent, cap.body.clone())).await).await
        });
        assert_eq!(status, 200, "{}", cap.id());
        let got = mock.received();
        assert_eq!(got.len(), 1, "{}", cap.id());
        let got = &got[0];
        assert_eq!(got.path_and_query, cap.path, "{}", cap.id());
        assert!(got.body == cap.body, "{}: body differs", cap.id());
        for (k, v) in &sent {
            let values: Vec<&str> = got
                .headers
                .get_all(k.as_str())
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            assert!(
                values.contains(&v.as_str()),
                "{}: header {k} lost or changed",
                cap.id()
            );
        }
        for name in got.headers.keys() {
            let known = PER_HOP.contains(&name.as_str())
                || sent
                    .iter()
                    .any(|(k, _)| k.eq_ignore_ascii_case(name.as_str()));
            assert!(known, "{}: pith added header {name}", cap.id());
        }
    }
}

#[test]
fn a_stream_is_forwarded_event_by_event_and_byte_identical() {
    let mock = MockUpstream::start().unwrap();
    let sse = fixtures::anthropic::stream(&["one", " two", " three"], fixtures::DEFAULT_USAGE);
    // Paced: each event is written 300 ms after the previous one.
    let chunks = fixtures::split_at_events(&sse, Duration::from_millis(300));
    let n_chunks = chunks.len();
    mock.push(Reply::stream(chunks));
    let pith = PithProxy::start(&mock.url(), &[]);
    let rt = runtime();
    let (first, rest) = rt.block_on(async {
        let resp = send(
            &client(),
            request(
                "POST",
                &format!("{}/v1/messages", pith.url()),
                &headers(&[("anthropic-version", "2023-06-01")]),
                r#"{"model":"m","stream":true,"max_tokens":5,"messages":[]}"#,
            ),
        )
        .await;
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["content-type"],
            "text/event-stream; charset=utf-8"
        );
        let mut body = resp.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        let mut rest = Vec::new();
        while let Some(f) = body.frame().await {
            if let Ok(d) = f.unwrap().into_data() {
                rest.push(d);
            }
        }
        (first, rest)
    });
    // The first frame the client sees is the first event alone: pith did not wait for the rest.
    let first_event_end = sse.windows(2).position(|w| w == b"\n\n").unwrap() + 2;
    assert_eq!(&first[..], &sse[..first_event_end]);
    assert!(
        rest.len() + 1 >= n_chunks - 1,
        "events were merged: {} frames",
        rest.len() + 1
    );
    let mut all = first.to_vec();
    all.extend(concat(&rest));
    assert_eq!(all, sse.to_vec());
}

struct WireCase {
    name: &'static str,
    path: &'static str,
    body: &'static str,
    reply: Reply,
    usage: Usage,
}

fn usage(k: u64) -> Usage {
    Usage {
        input: 100 + k,
        output: 20 + k,
        cache_write: 300 + k,
        cache_write_1h: 0,
        cache_read: 4000 + k,
    }
}

#[test]
fn usage_is_recorded_for_every_wire_streamed_and_not() {
    let cases = vec![
        WireCase {
            name: "anthropic json",
            path: "/v1/messages",
            body: r#"{"model":"claude-haiku-4-5","max_tokens":5,"messages":[{"role":"user","content":"a"}]}"#,
            reply: Reply::json(fixtures::anthropic::message("hi", usage(1))),
            usage: usage(1),
        },
        WireCase {
            name: "anthropic sse",
            path: "/v1/messages?beta=true",
            body: r#"{"model":"claude-haiku-4-5","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"b"}]}"#,
            reply: Reply::stream(fixtures::split_every(
                &fixtures::anthropic::stream(&["x", "y"], usage(2)),
                7,
                Duration::ZERO,
            )),
            usage: usage(2),
        },
        WireCase {
            name: "chat json",
            path: "/v1/chat/completions",
            body: r#"{"model":"gpt-5.4","messages":[{"role":"user","content":"c"}]}"#,
            reply: Reply::json(fixtures::chat::completion("hi", usage(3))),
            usage: usage(3),
        },
        WireCase {
            name: "chat sse",
            path: "/v1/chat/completions",
            body: r#"{"model":"gpt-5.4","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"d"}]}"#,
            reply: Reply::sse(fixtures::chat::stream(&["x"], Some(usage(4)))),
            usage: usage(4),
        },
        WireCase {
            name: "responses json",
            path: "/v1/responses",
            body: r#"{"model":"gpt-5.4","input":[{"role":"user","content":"e"}]}"#,
            reply: Reply::json(fixtures::responses::response("hi", usage(5))),
            usage: usage(5),
        },
        WireCase {
            name: "responses sse",
            path: "/v1/responses",
            body: r#"{"model":"gpt-5.4","stream":true,"input":[{"role":"user","content":"f"}]}"#,
            reply: Reply::stream(fixtures::split_every(
                &fixtures::responses::stream(&["x", "y"], usage(6)),
                13,
                Duration::ZERO,
            )),
            usage: usage(6),
        },
    ];
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let rt = runtime();
    let client = client();
    for case in &cases {
        mock.push(case.reply.clone());
        let (status, _, _) = rt.block_on(async {
            read_all(
                send(
                    &client,
                    request(
                        "POST",
                        &format!("{}{}", pith.url(), case.path),
                        &headers(&[("x-session-id", "ses_usage")]),
                        case.body,
                    ),
                )
                .await,
            )
            .await
        });
        assert_eq!(status, 200, "{}", case.name);
    }
    let rows = pith.wait_rows(cases.len());
    for (case, row) in cases.iter().zip(&rows) {
        let u = row
            .usage
            .unwrap_or_else(|| panic!("{}: no usage recorded", case.name));
        // Normalized to disjoint counters on every wire (OpenAI's cached tokens are inside
        // its prompt count; the fixtures encode them that way).
        let want = case.usage;
        assert_eq!(
            (u.input, u.output, u.cache_write, u.cache_read),
            (want.input, want.output, want.cache_write, want.cache_read),
            "{}",
            case.name
        );
        assert_eq!(row.outcome, RequestOutcome::Ok, "{}", case.name);
        assert_eq!(row.session.as_deref(), Some("ses_usage"));
        assert!(row.ttfb_ms.is_some(), "{}", case.name);
        assert!(row.model.is_some(), "{}", case.name);
    }
}

#[test]
fn an_unreachable_upstream_is_a_502_in_the_providers_error_shape() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = format!("http://127.0.0.1:{port}");
    let pith = PithProxy::start(&dead, &[]);
    let rt = runtime();
    let client = client();
    let (status, hdrs, body) = rt.block_on(async {
        read_all(
            send(
                &client,
                request(
                    "POST",
                    &format!("{}/v1/messages", pith.url()),
                    &headers(&[("anthropic-version", "2023-06-01")]),
                    "{}",
                ),
            )
            .await,
        )
        .await
    });
    assert_eq!(status, 502);
    assert_eq!(hdrs["content-type"], "application/json");
    let v: serde_json::Value = serde_json::from_slice(&concat(&body)).unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "api_error");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("pith") && msg.contains(&dead), "{msg}");

    let (status, _, body) = rt.block_on(async {
        read_all(
            send(
                &client,
                request("POST", &format!("{}/v1/responses", pith.url()), &[], "{}"),
            )
            .await,
        )
        .await
    });
    assert_eq!(status, 502);
    let v: serde_json::Value = serde_json::from_slice(&concat(&body)).unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("pith") && msg.contains(&dead), "{msg}");
    assert!(v["error"]["type"].is_string());
    let rows = pith.wait_rows(2);
    assert!(
        rows.iter()
            .all(|r| r.outcome == RequestOutcome::UpstreamUnreachable && r.status == Some(502))
    );
}

#[test]
fn upstream_errors_pass_through_with_status_headers_and_body() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let rt = runtime();
    let client = client();
    let cases = [
        (
            "/v1/messages",
            Reply::json_status(429, fixtures::anthropic::error_body(429, "slow down"))
                .with_header("retry-after", "7"),
            429u16,
            fixtures::anthropic::error_body(429, "slow down"),
        ),
        (
            "/v1/chat/completions",
            Reply::json_status(500, fixtures::chat::error_body(500, "boom")),
            500,
            fixtures::chat::error_body(500, "boom"),
        ),
        (
            "/v1/responses",
            Reply::json_status(400, fixtures::responses::error_body(400, "bad")),
            400,
            fixtures::responses::error_body(400, "bad"),
        ),
    ];
    for (path, reply, want_status, want_body) in cases {
        mock.push(reply);
        let (status, hdrs, body) = rt.block_on(async {
            read_all(
                send(
                    &client,
                    request("POST", &format!("{}{path}", pith.url()), &[], "{}"),
                )
                .await,
            )
            .await
        });
        assert_eq!(status.as_u16(), want_status, "{path}");
        assert_eq!(concat(&body), want_body.to_vec(), "{path}");
        if want_status == 429 {
            assert_eq!(hdrs["retry-after"], "7");
        }
    }
    let rows = pith.wait_rows(3);
    assert!(
        rows.iter()
            .all(|r| r.outcome == RequestOutcome::UpstreamError),
        "{rows:?}"
    );
}

#[test]
fn a_client_that_goes_away_mid_stream_cancels_the_upstream_request() {
    let mock = MockUpstream::start().unwrap();
    let sse = fixtures::anthropic::stream(&["a"; 20], fixtures::DEFAULT_USAGE);
    mock.push(Reply::stream(fixtures::split_at_events(
        &sse,
        Duration::from_millis(100),
    )));
    let pith = PithProxy::start(&mock.url(), &[]);
    // A raw socket, so that closing it is exactly the client going away.
    let mut conn = std::net::TcpStream::connect(pith.addr).unwrap();
    let body = r#"{"model":"m","stream":true,"messages":[]}"#;
    write!(
        conn,
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("message_start") {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed before the first event");
        seen.extend_from_slice(&buf[..n]);
    }
    drop(conn);
    assert!(
        mock.wait_aborted_streams(1, Duration::from_secs(10)),
        "the upstream stream was not cancelled"
    );
    let rows = pith.wait_rows(1);
    assert_eq!(rows[0].outcome, RequestOutcome::ClientClosed);
}

#[test]
fn malformed_json_is_forwarded_untouched_and_nothing_breaks() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let rt = runtime();
    let client = client();
    let bodies: [&[u8]; 4] = [
        br#"{"model": "x", "tools": [{"name":"#,
        b"\xff\xfe not utf-8",
        b"",
        br#"[1,2,3]"#,
    ];
    for (i, body) in bodies.iter().enumerate() {
        mock.clear_received();
        mock.push(Reply::json_status(
            400,
            fixtures::anthropic::error_body(400, "bad json"),
        ));
        let (status, _, _) = rt.block_on(async {
            read_all(
                send(
                    &client,
                    request(
                        "POST",
                        &format!("{}/v1/messages", pith.url()),
                        &headers(&[("anthropic-version", "2023-06-01")]),
                        Bytes::copy_from_slice(body),
                    ),
                )
                .await,
            )
            .await
        });
        assert_eq!(status, 400, "body {i}");
        assert_eq!(&mock.received()[0].body[..], *body, "body {i}");
    }
}

#[test]
fn a_32_mib_body_passes_intact() {
    let mock = MockUpstream::start().unwrap();
    mock.set_recording(true);
    let pith = PithProxy::start(&mock.url(), &[]);
    let filler = "x".repeat(32 << 20);
    let body = format!(
        r#"{{"model":"claude-haiku-4-5","max_tokens":1,"messages":[{{"role":"user","content":"{filler}"}}]}}"#
    );
    let rt = runtime();
    let (status, _, _) = rt.block_on(async {
        read_all(
            send(
                &client(),
                request(
                    "POST",
                    &format!("{}/v1/messages", pith.url()),
                    &[],
                    body.clone(),
                ),
            )
            .await,
        )
        .await
    });
    assert_eq!(status, 200);
    let got = mock.received();
    assert_eq!(got[0].body.len(), body.len());
    assert!(got[0].body == body.as_bytes());
}

#[test]
fn other_paths_pass_through_to_the_provider_the_request_belongs_to() {
    let anthropic = MockUpstream::start().unwrap();
    let openai = MockUpstream::start().unwrap();
    let pith = PithProxy::start_with(&anthropic.url(), &openai.url(), &[]);
    let rt = runtime();
    let client = client();
    rt.block_on(async {
        let (status, _, _) = read_all(
            send(
                &client,
                request(
                    "GET",
                    &format!("{}/v1/models?limit=1000", pith.url()),
                    &headers(&[("x-api-key", "k")]),
                    Bytes::new(),
                ),
            )
            .await,
        )
        .await;
        assert_eq!(status, 200);
        let (status, _, _) = read_all(
            send(
                &client,
                request(
                    "GET",
                    &format!("{}/v1/models", pith.url()),
                    &[],
                    Bytes::new(),
                ),
            )
            .await,
        )
        .await;
        assert_eq!(status, 200);
    });
    let a = anthropic.received();
    let o = openai.received();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].method, "GET");
    assert_eq!(a[0].path_and_query, "/v1/models?limit=1000");
    assert_eq!(o.len(), 1);
    assert_eq!(o[0].path_and_query, "/v1/models");
}

#[test]
fn sigterm_flushes_the_ledger_and_exits_cleanly() {
    let mock = MockUpstream::start().unwrap();
    let mut pith = PithProxy::start(&mock.url(), &[]);
    let rt = runtime();
    let client = client();
    for _ in 0..5 {
        rt.block_on(async {
            read_all(
                send(
                    &client,
                    request(
                        "POST",
                        &format!("{}/v1/chat/completions", pith.url()),
                        &[],
                        r#"{"model":"gpt-5.4","messages":[]}"#,
                    ),
                )
                .await,
            )
            .await
        });
    }
    drop(client);
    let status = pith.stop();
    assert!(status.success(), "{status:?}");
    assert!(
        pith.stderr().contains("5 rows written, 0 lost"),
        "{}",
        pith.stderr()
    );
    assert_eq!(crate::support::rows(&pith.ledger_path()).len(), 5);
}

#[test]
fn official_sdks_parse_what_pith_forwards() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let out = std::process::Command::new(python())
        .arg(python_script("sdk_clients.py"))
        .args(["--base-url", &pith.url()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sdk_clients.py failed:\n{}\npith log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        pith.stderr()
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = fixtures::DEFAULT_USAGE;
    let text: String = fixtures::DEFAULT_DELTAS.concat();
    assert_eq!(v["anthropic.messages.create"]["text"], text);
    assert_eq!(v["anthropic.messages.stream"]["text"], text);
    assert_eq!(
        v["anthropic.messages.stream"]["usage"]["output_tokens"],
        d.output
    );
    assert_eq!(
        v["anthropic.messages.stream"]["usage"]["cache_read_input_tokens"],
        d.cache_read
    );
    assert_eq!(v["openai.chat.stream"]["text"], text);
    assert_eq!(
        v["openai.chat.stream"]["usage"]["prompt_tokens"],
        d.prompt_total()
    );
    assert_eq!(v["openai.responses.stream"]["text"], text);
    assert_eq!(v["openai.responses.stream"]["sequence_ok"], true);
    assert_eq!(
        v["openai.responses.create"]["usage"]["output_tokens"],
        d.output
    );
    // Every SDK call went through pith and was recorded.
    let calls = v.as_object().unwrap().len();
    let rows = pith.wait_rows(calls);
    assert_eq!(rows.len(), calls);
}
