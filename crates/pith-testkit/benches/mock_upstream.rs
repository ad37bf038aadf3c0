//! Round-trip cost of the mock upstream, the baseline of pith's proxy latency benchmark.
//! Compared in the same run against a bare hyper server on its own thread that answers a fixed
//! body, so the ratio shows what the mock's scripting and recording add on top of HTTP itself.
//!
//! Run: `cargo bench -p pith-testkit --bench mock_upstream`

#![expect(
    clippy::expect_used,
    reason = "a benchmark whose setup fails cannot measure anything; stopping loudly is right"
)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use pith_testkit::MockUpstream;
use pith_testkit::fixtures::{self, DEFAULT_DELTAS, DEFAULT_USAGE};

/// A hyper server with the mock's setup (own thread, current-thread runtime, HTTP/1.1,
/// TCP_NODELAY) that reads the body and answers the same bytes every time.
fn bare_server(reply: Bytes) -> SocketAddr {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                let reply = reply.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: http::Request<hyper::body::Incoming>| {
                            let reply = reply.clone();
                            async move {
                                let _ = request.into_body().collect().await;
                                let mut response = http::Response::new(Full::new(reply));
                                response.headers_mut().insert(
                                    http::header::CONTENT_TYPE,
                                    http::HeaderValue::from_static("application/json"),
                                );
                                Ok::<_, Infallible>(response)
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    });
    addr
}

async fn connect(addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    sender
}

async fn round_trip(sender: &mut SendRequest<Full<Bytes>>, path: &str, body: &Bytes) -> usize {
    sender.ready().await.expect("ready");
    let request = http::Request::post(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(body.clone()))
        .expect("request");
    let response = sender.send_request(request).await.expect("response");
    let body = response.into_body().collect().await.expect("body");
    body.to_bytes().len()
}

/// The largest real request (OpenCode with 53 tools, ~65 KB), made non-streaming so both
/// servers answer the same JSON.
fn largest_capture() -> Bytes {
    let body = fixtures::captures()
        .expect("captures")
        .into_iter()
        .map(|capture| capture.body)
        .max_by_key(Bytes::len)
        .expect("at least one capture");
    let text = String::from_utf8(body.to_vec()).expect("UTF-8 body");
    Bytes::from(text.replacen(r#""stream":true"#, r#""stream":false"#, 1))
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let text = DEFAULT_DELTAS.concat();
    let bare = bare_server(fixtures::anthropic::message(&text, DEFAULT_USAGE));
    let mock = MockUpstream::start().expect("mock");
    // Recording keeps every body; off, so memory stays flat over millions of requests.
    mock.set_recording(false);

    let small = Bytes::from_static(
        br#"{"model":"claude-sonnet-4-6","max_tokens":256,"messages":[{"role":"user","content":"Say hello."}]}"#,
    );
    let small_stream = Bytes::from_static(
        br#"{"model":"claude-sonnet-4-6","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"Say hello."}]}"#,
    );
    let large = largest_capture();

    let mut group = c.benchmark_group("round_trip");
    group.measurement_time(Duration::from_secs(4));
    group.warm_up_time(Duration::from_secs(1));
    let cases: [(&str, SocketAddr, &Bytes); 5] = [
        ("bare_hyper/small", bare, &small),
        ("mock/messages_json/small", mock.addr(), &small),
        ("mock/messages_sse/small", mock.addr(), &small_stream),
        ("bare_hyper/large_capture", bare, &large),
        ("mock/messages_json/large_capture", mock.addr(), &large),
    ];
    for (name, addr, body) in cases {
        let mut sender = runtime.block_on(connect(addr));
        group.bench_function(name, |b| {
            b.iter(|| runtime.block_on(round_trip(&mut sender, "/v1/messages", body)));
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
