//! The mock server: recording, scripting, pacing, aborts, defaults, lifecycle.

use std::io::{Read, Write};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use pith_testkit::fixtures::{self, DEFAULT_DELTAS, DEFAULT_USAGE};
use pith_testkit::{Chunk, MockUpstream, Reply};

use crate::client::{decode_chunked, fetch, open, raw_exchange, send};

/// `body` with every Anthropic message id read as the first one: each body the fixtures build
/// gets its own, as the API's responses do.
fn same_ids(body: &Bytes) -> Bytes {
    const ID: &[u8] = b"msg_01MockUpstream";
    let mut out = body.to_vec();
    let mut at = 0;
    while let Some(found) = out[at..].windows(ID.len()).position(|w| w == ID) {
        let digits = at + found + ID.len();
        for b in out[digits..].iter_mut().take_while(|b| b.is_ascii_digit()) {
            *b = b'0';
        }
        at = digits;
    }
    Bytes::from(out)
}

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn records_method_path_headers_and_body_byte_exact() {
    let mock = MockUpstream::start().unwrap();
    // Not UTF-8, odd whitespace, a NUL: nothing may be normalised.
    let body: &[u8] = b"{\"b\": 1,  \"a\":[ ]}\n\xff\xfe\x00tail";
    let response = send(
        mock.addr(),
        "POST",
        "/v1/messages?beta=true",
        &[
            ("anthropic-beta", "a-2025-01-01,b-2025-02-02"),
            ("x-claude-code-session-id", "sess 1"),
            ("x-repeated", "one"),
            ("x-repeated", "two"),
        ],
        Bytes::from_static(body),
    )
    .await;
    response.into_body().collect().await.unwrap();

    let received = mock.received();
    assert_eq!(received.len(), 1);
    let request = &received[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path_and_query, "/v1/messages?beta=true");
    assert_eq!(request.path(), "/v1/messages");
    assert_eq!(request.body.as_ref(), body);
    assert_eq!(
        request.header("anthropic-beta"),
        Some("a-2025-01-01,b-2025-02-02")
    );
    assert_eq!(request.header("X-Claude-Code-Session-Id"), Some("sess 1"));
    let repeated: Vec<_> = request.headers.get_all("x-repeated").iter().collect();
    assert_eq!(repeated, ["one", "two"]);
    assert_eq!(
        request.header("content-length"),
        Some(body.len().to_string().as_str())
    );
}

#[test]
fn records_a_chunked_request_body_reassembled_from_sync_code() {
    let mock = MockUpstream::start().unwrap();
    let request = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n4\r\n{\"mo\r\na\r\ndel\":\"\xc3\xa9\"}\r\n0\r\n\r\n";
    let response = raw_exchange(mock.addr(), request);
    assert!(
        response.starts_with(b"HTTP/1.1 200 OK\r\n"),
        "{}",
        String::from_utf8_lossy(&response)
    );

    let received = mock.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body.as_ref(), "{\"model\":\"é\"}".as_bytes());
    assert_eq!(received[0].header("transfer-encoding"), Some("chunked"));
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_replies_are_used_in_order_then_the_default() {
    let mock = MockUpstream::start().unwrap();
    mock.push(Reply::json_status(
        529,
        fixtures::anthropic::error_body(529, "Overloaded"),
    ));
    mock.push(Reply::json(r#"{"second":true}"#).with_header("request-id", "req_2"));
    mock.push(Reply::sse(fixtures::chat::stream(&["x"], None)));
    assert_eq!(mock.queued_replies(), 3);

    let (status, _, body) = fetch(mock.addr(), "POST", "/v1/messages", "{}").await;
    assert_eq!(status, 529);
    assert_eq!(body, fixtures::anthropic::error_body(529, "Overloaded"));

    // Scripted replies ignore the path: the queue is strictly first in, first out.
    let (status, headers, body) = fetch(mock.addr(), "POST", "/anything", "{}").await;
    assert_eq!(status, 200);
    assert_eq!(headers["request-id"], "req_2");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(body.as_ref(), br#"{"second":true}"#);

    let (status, headers, body) = fetch(mock.addr(), "POST", "/v1/messages", "{}").await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream; charset=utf-8");
    assert_eq!(body, fixtures::chat::stream(&["x"], None));

    let (status, _, body) = fetch(mock.addr(), "POST", "/v1/messages", "{}").await;
    assert_eq!(status, 200);
    assert_eq!(
        same_ids(&body),
        same_ids(&fixtures::anthropic::message(
            &DEFAULT_DELTAS.concat(),
            DEFAULT_USAGE
        ))
    );
    assert_eq!(mock.request_count(), 4);
    assert_eq!(mock.queued_replies(), 0);
    let paths: Vec<_> = mock
        .received()
        .into_iter()
        .map(|r| r.path_and_query)
        .collect();
    assert_eq!(
        paths,
        ["/v1/messages", "/anything", "/v1/messages", "/v1/messages"]
    );
}

#[tokio::test]
async fn conditional_replies_wait_for_a_body_they_fit() {
    let mock = MockUpstream::start().unwrap();
    let has_tools = |body: &[u8]| body.windows(8).any(|w| w == b"\"tools\":");
    mock.push_when(has_tools, Reply::json(r#"{"for":"tools"}"#));
    mock.push(Reply::json(r#"{"for":"anyone"}"#));

    // A body without tools skips the conditional reply and takes the next one that fits.
    let (_, _, body) = fetch(mock.addr(), "POST", "/v1/messages", r#"{"a":1}"#).await;
    assert_eq!(body.as_ref(), br#"{"for":"anyone"}"#);
    let (_, _, body) = fetch(mock.addr(), "POST", "/v1/messages", r#"{"b":2}"#).await;
    assert_eq!(
        same_ids(&body),
        same_ids(&fixtures::anthropic::message(
            &DEFAULT_DELTAS.concat(),
            DEFAULT_USAGE
        )),
        "nothing queued fits: the default answers"
    );
    assert_eq!(mock.queued_replies(), 1);
    let (_, _, body) = fetch(mock.addr(), "POST", "/v1/messages", r#"{"tools":[]}"#).await;
    assert_eq!(body.as_ref(), br#"{"for":"tools"}"#);
    assert_eq!(mock.queued_replies(), 0);
}

#[tokio::test]
async fn reply_headers_replace_defaults_and_repeat() {
    let mock = MockUpstream::start().unwrap();
    mock.push(
        Reply::json("x")
            .with_header("content-type", "text/plain")
            .with_header("x-multi", "1")
            .with_header("x-multi", "2"),
    );
    let (_, headers, _) = fetch(mock.addr(), "GET", "/", "").await;
    let types: Vec<_> = headers.get_all("content-type").iter().collect();
    assert_eq!(types, ["text/plain"]);
    let multi: Vec<_> = headers.get_all("x-multi").iter().collect();
    assert_eq!(multi, ["1", "2"]);
}

#[tokio::test]
async fn an_invalid_scripted_reply_answers_500_saying_why() {
    let mock = MockUpstream::start().unwrap();
    mock.push(Reply::json_status(1000, "{}"));
    mock.push(Reply::json("{}").with_header("bad name", "v"));
    let (status, _, body) = fetch(mock.addr(), "GET", "/", "").await;
    assert_eq!(status, 500);
    assert!(String::from_utf8_lossy(&body).contains("invalid status 1000"));
    let (status, _, body) = fetch(mock.addr(), "GET", "/", "").await;
    assert_eq!(status, 500);
    assert!(String::from_utf8_lossy(&body).contains("invalid header name"));
}

/// The last chunk waits far longer than the test runs, so receiving the first two chunks and
/// then seeing the stream counted as aborted proves they were sent before the last one.
#[tokio::test]
async fn chunks_arrive_one_by_one_before_the_last_is_sent_and_a_hangup_counts_as_aborted() {
    let mock = MockUpstream::start().unwrap();
    let text = "data: caf\u{e9}\n\n".as_bytes();
    let cut = text.len() - 3; // inside the two bytes of 'é'
    mock.push(Reply::stream(vec![
        Chunk {
            delay: Duration::ZERO,
            bytes: Bytes::copy_from_slice(&text[..cut]),
        },
        Chunk {
            delay: Duration::from_millis(20),
            bytes: Bytes::copy_from_slice(&text[cut..]),
        },
        Chunk {
            delay: Duration::from_secs(600),
            bytes: Bytes::from_static(b"data: never\n\n"),
        },
    ]));

    let (response, hang_up) = open(mock.addr(), "/v1/messages").await;
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream; charset=utf-8"
    );
    assert_eq!(response.headers()["cache-control"], "no-cache");
    assert!(response.headers().get("content-length").is_none());
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first.as_ref(), &text[..cut]);
    let second = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(second.as_ref(), &text[cut..]);
    assert_eq!(mock.aborted_streams(), 0);

    drop((body, hang_up));
    assert!(
        mock.wait_aborted_streams_async(1, WAIT).await,
        "the mock never noticed the hang-up"
    );
    assert_eq!(mock.aborted_streams(), 1);
}

#[tokio::test]
async fn a_stream_read_to_the_end_is_not_aborted() {
    let mock = MockUpstream::start().unwrap();
    let sse = fixtures::anthropic::stream(&["a", "b"], DEFAULT_USAGE);
    mock.push(Reply::stream(fixtures::split_every(
        &sse,
        7,
        Duration::from_millis(1),
    )));
    let (status, _, body) = fetch(mock.addr(), "POST", "/v1/messages", "{}").await;
    assert_eq!(status, 200);
    assert_eq!(body, sse);
    // A second, aborted stream on the same mock is what makes the count move.
    mock.push(Reply::stream(fixtures::split_at_events(
        &sse,
        Duration::from_secs(600),
    )));
    let (response, hang_up) = open(mock.addr(), "/v1/messages").await;
    let mut body = response.into_body();
    body.frame().await.unwrap().unwrap();
    drop((body, hang_up));
    assert!(mock.wait_aborted_streams_async(1, WAIT).await);
    assert_eq!(
        mock.aborted_streams(),
        1,
        "the completed stream must not count"
    );
}

#[test]
fn zero_delay_chunks_keep_their_boundaries_on_the_wire() {
    let mock = MockUpstream::start().unwrap();
    let sse = fixtures::responses::stream(&["Hel", "lo"], DEFAULT_USAGE);
    let chunks = fixtures::split_every(&sse, 100, Duration::ZERO);
    let expected: Vec<Vec<u8>> = chunks.iter().map(|c| c.bytes.to_vec()).collect();
    mock.push(Reply::stream(chunks));

    let response = raw_exchange(
        mock.addr(),
        b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
    );
    let (head, wire_chunks) = decode_chunked(&response);
    assert!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    assert_eq!(wire_chunks, expected);
}

async fn default_for(mock: &MockUpstream, path: &str, body: &str) -> (u16, String, Bytes) {
    let (status, headers, body) = fetch(mock.addr(), "POST", path, body.to_owned()).await;
    let content_type = headers["content-type"].to_str().unwrap().to_owned();
    (status.as_u16(), content_type, same_ids(&body))
}

#[tokio::test]
async fn default_replies_follow_the_path_and_the_stream_field() {
    let mock = MockUpstream::start().unwrap();
    let text = DEFAULT_DELTAS.concat();
    let json = "application/json".to_owned();
    let sse = "text/event-stream; charset=utf-8".to_owned();

    assert_eq!(
        default_for(
            &mock,
            "/v1/messages?beta=true",
            r#"{"model":"m","stream":false}"#
        )
        .await,
        (
            200,
            json.clone(),
            same_ids(&fixtures::anthropic::message(&text, DEFAULT_USAGE))
        )
    );
    assert_eq!(
        default_for(&mock, "/v1/messages", r#"{"model":"m","stream":true}"#).await,
        (
            200,
            sse.clone(),
            same_ids(&fixtures::anthropic::stream(DEFAULT_DELTAS, DEFAULT_USAGE))
        )
    );
    assert_eq!(
        default_for(&mock, "/v1/messages/count_tokens", r#"{"model":"m"}"#).await,
        (
            200,
            json.clone(),
            fixtures::anthropic::count_tokens(DEFAULT_USAGE.prompt_total())
        )
    );
    assert_eq!(
        default_for(&mock, "/v1/chat/completions", r#"{"messages":[]}"#).await,
        (
            200,
            json.clone(),
            fixtures::chat::completion(&text, DEFAULT_USAGE)
        )
    );
    assert_eq!(
        default_for(&mock, "/v1/chat/completions", r#"{"stream":true}"#).await,
        (
            200,
            sse.clone(),
            fixtures::chat::stream(DEFAULT_DELTAS, None)
        )
    );
    assert_eq!(
        default_for(
            &mock,
            "/v1/chat/completions",
            r#"{"stream":true,"stream_options":{"include_usage":true}}"#
        )
        .await,
        (
            200,
            sse.clone(),
            fixtures::chat::stream(DEFAULT_DELTAS, Some(DEFAULT_USAGE))
        )
    );
    assert_eq!(
        default_for(&mock, "/v1/responses", r#"{"input":"hi"}"#).await,
        (
            200,
            json.clone(),
            fixtures::responses::response(&text, DEFAULT_USAGE)
        )
    );
    assert_eq!(
        default_for(&mock, "/v1/responses", r#"{"input":"hi","stream":true}"#).await,
        (
            200,
            sse,
            fixtures::responses::stream(DEFAULT_DELTAS, DEFAULT_USAGE)
        )
    );
    assert_eq!(mock.aborted_streams(), 0);
}

#[tokio::test]
async fn default_for_other_paths_echoes_and_bad_json_gets_a_provider_400() {
    let mock = MockUpstream::start().unwrap();
    let (status, _, body) = fetch(mock.addr(), "GET", "/v1/models?limit=1000", "").await;
    assert_eq!(status, 200);
    let echo: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        echo,
        serde_json::json!({"method": "GET", "path": "/v1/models?limit=1000"})
    );

    let (status, _, body) = fetch(mock.addr(), "POST", "/v1/messages", "{not json").await;
    assert_eq!(status, 400);
    let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");

    let (status, _, body) = fetch(mock.addr(), "POST", "/v1/responses", "").await;
    assert_eq!(status, 400);
    let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn set_default_answers_every_path_after_the_queue() {
    let mock = MockUpstream::start().unwrap();
    mock.set_default(Reply::json_status(503, "down"));
    mock.push(Reply::json("queued"));
    let (status, _, body) = fetch(mock.addr(), "POST", "/v1/messages", "{}").await;
    assert_eq!((status.as_u16(), body.as_ref()), (200, b"queued".as_ref()));
    for path in ["/v1/messages", "/v1/responses", "/elsewhere"] {
        let (status, _, body) = fetch(mock.addr(), "POST", path, "{}").await;
        assert_eq!(
            (status.as_u16(), body.as_ref()),
            (503, b"down".as_ref()),
            "{path}"
        );
    }
}

#[tokio::test]
async fn clear_received_and_recording_off_keep_counting() {
    let mock = MockUpstream::start().unwrap();
    fetch(mock.addr(), "GET", "/a", "").await;
    fetch(mock.addr(), "GET", "/b", "").await;
    assert_eq!(mock.request_count(), 2);
    mock.clear_received();
    assert_eq!(mock.request_count(), 0);
    assert!(mock.received().is_empty());

    mock.set_recording(false);
    fetch(mock.addr(), "GET", "/c", "").await;
    assert!(mock.received().is_empty());
    assert_eq!(mock.request_count(), 1);
    mock.set_recording(true);
    fetch(mock.addr(), "GET", "/d", "").await;
    assert!(mock.wait_requests_async(2, WAIT).await);
    let paths: Vec<_> = mock
        .received()
        .into_iter()
        .map(|r| r.path_and_query)
        .collect();
    assert_eq!(paths, ["/d"]);
    assert!(!mock.wait_requests_async(3, Duration::from_millis(10)).await);
    assert!(!mock.wait_requests(3, Duration::from_millis(10)));
}

#[test]
fn serves_keep_alive_connections_and_stops_on_drop() {
    let mock = MockUpstream::start().unwrap();
    let addr = mock.addr();
    assert_eq!(mock.url(), format!("http://127.0.0.1:{}", addr.port()));
    // Two requests on one connection, the second closing it.
    let response = raw_exchange(
        addr,
        b"GET /one HTTP/1.1\r\nhost: x\r\n\r\nGET /two HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    let text = String::from_utf8(response).unwrap();
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
    assert!(text.contains(r#"{"method":"GET","path":"/one"}"#));
    assert!(text.contains(r#"{"method":"GET","path":"/two"}"#));
    drop(mock);
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still listening after drop"
    );
}

#[test]
fn a_raw_client_hanging_up_mid_stream_is_counted_from_sync_code() {
    let mock = MockUpstream::start().unwrap();
    mock.push(Reply::stream(vec![
        Chunk {
            delay: Duration::ZERO,
            bytes: Bytes::from_static(b"data: a\n\n"),
        },
        Chunk {
            delay: Duration::from_secs(600),
            bytes: Bytes::from_static(b"data: never\n\n"),
        },
    ]));
    let mut stream = std::net::TcpStream::connect(mock.addr()).unwrap();
    stream
        .write_all(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
        .unwrap();
    let mut seen = Vec::new();
    let mut buffer = [0_u8; 1024];
    while !seen.ends_with(b"data: a\n\n\r\n") {
        let n = stream.read(&mut buffer).unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buffer[..n]);
    }
    drop(stream);
    assert!(mock.wait_aborted_streams(1, WAIT));
    assert!(!String::from_utf8_lossy(&seen).contains("never"));
}
