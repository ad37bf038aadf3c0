//! The request path's added time on what real clients send: the captures' own headers (user
//! agent, betas, session id), a body whose last user message changes on every request (as a
//! session's do), and a long conversation; concurrency 1, back to back. Three targets in one
//! run, interleaved request by request: the mock upstream directly, this build's `pith proxy`,
//! and, with `PITH_BENCH_BEFORE`, another `pith` binary (the build before a change).
//!
//! Bodies: Claude Code 2.1.328 `fix-calc/req006` (56 KB) and the same conversation grown to
//! about 1 MB (its first user message's text repeated), each with the capture's headers.
//!
//! Run: `PITH_BENCH_BEFORE=/path/to/old/pith cargo bench -p pith --bench client_requests`
//! (env `PITH_BENCH_ROUNDS`, default 400 requests per target and body).
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a bench stops loudly on a broken setup and reports by printing"
)]

mod support;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use pith_testkit::MockUpstream;
use pith_testkit::fixtures::captures;
use support::{env_usize, memory_kib, spawn_pith};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A `pith proxy` of `bin` in front of `mock`, with a ledger in a home of its own.
fn start(bin: &str, mock: &str, home: &std::path::Path) -> (Child, String) {
    let mut cmd = Command::new(bin);
    cmd.args(["proxy", "--listen", "127.0.0.1:0"])
        .args(["--anthropic-upstream", mock, "--openai-upstream", mock])
        .env("PITH_HOME", home)
        .env_remove("PITH_CONFIG");
    let (child, addr) = spawn_pith(cmd);
    (child, format!("http://{addr}"))
}

/// `body` with its last occurrence of `marker` replaced by `marker` and `n`: a new last user
/// message each request, the prefix unchanged (as a session's next turn).
fn unique(body: &str, marker: &str, n: usize) -> Bytes {
    match body.rfind(marker) {
        Some(at) => {
            let mut out = String::with_capacity(body.len() + 16);
            out.push_str(&body[..at + marker.len()]);
            out.push_str(&format!(" (turn {n})"));
            out.push_str(&body[at + marker.len()..]);
            Bytes::from(out)
        }
        None => Bytes::from(body.to_owned()),
    }
}

async fn one(
    client: &HttpClient,
    url: &str,
    headers: &[(String, String)],
    body: Bytes,
) -> Duration {
    let mut req = http::Request::post(url);
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "host" | "content-length" | "connection" | "accept-encoding"
        ) {
            continue;
        }
        req = req.header(name.as_str(), value.as_str());
    }
    let req = req.body(Full::new(body)).expect("request");
    let start = Instant::now();
    let resp = client.request(req).await.expect("answer");
    assert!(resp.status().is_success(), "{}", resp.status());
    let _ = resp.into_body().collect().await.expect("body");
    start.elapsed()
}

fn pct(mut v: Vec<Duration>, p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

fn main() {
    let rounds = env_usize("PITH_BENCH_ROUNDS", 400);
    let capture = captures()
        .expect("captures")
        .into_iter()
        .find(|c| c.id() == "claude-code-2.1.328/fix-calc/req006")
        .expect("req006");
    let text = std::str::from_utf8(&capture.body)
        .expect("utf-8")
        .to_owned();
    // The last user text of req006 is the marker each request changes after.
    let marker = "\"type\":\"text\",\"text\":\"";
    let long = {
        // About 1 MB: the first text block repeated, as a long session's transcript grows.
        let at = text.find(marker).expect("a text block") + marker.len();
        let filler = "the agent read a file and this is its output line; ".repeat(20_000);
        format!("{}{filler}{}", &text[..at], &text[at..])
    };
    let bodies = [
        ("Claude Code req006, 56 KB", text),
        ("the same grown to ~1 MB", long),
    ];

    let mock = MockUpstream::start().expect("mock");
    mock.set_recording(false);
    let home_after = tempfile::tempdir().expect("home");
    let home_before = tempfile::tempdir().expect("home");
    let (mut after, after_url) = start(env!("CARGO_BIN_EXE_pith"), &mock.url(), home_after.path());
    let before = std::env::var("PITH_BENCH_BEFORE")
        .ok()
        .map(|bin| start(&bin, &mock.url(), home_before.path()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    println!(
        "concurrency 1, back to back, {rounds} requests per target and body, targets interleaved; \
         the capture's headers; a new last message each request"
    );
    println!();
    println!(
        "| body | direct p50 | this build p50 | added p50 | added p99 | build before p50 | added p50 | added p99 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, body) in &bodies {
        let path = &capture.path;
        let mut direct = Vec::new();
        let mut via_after = Vec::new();
        let mut via_before = Vec::new();
        rt.block_on(async {
            for n in 0..rounds + 20 {
                let b = unique(body, marker, n);
                let d = one(
                    &client,
                    &format!("{}{path}", mock.url()),
                    &capture.headers,
                    b.clone(),
                )
                .await;
                let a = one(
                    &client,
                    &format!("{after_url}{path}"),
                    &capture.headers,
                    b.clone(),
                )
                .await;
                let o = match &before {
                    Some((_, url)) => {
                        Some(one(&client, &format!("{url}{path}"), &capture.headers, b).await)
                    }
                    None => None,
                };
                // The first 20 warm the connections and the proxies.
                if n >= 20 {
                    direct.push(d);
                    via_after.push(a);
                    via_before.extend(o);
                }
            }
        });
        let d50 = pct(direct.clone(), 0.5);
        let d99 = pct(direct, 0.99);
        let a50 = pct(via_after.clone(), 0.5);
        let a99 = pct(via_after, 0.99);
        let before_cells = if via_before.is_empty() {
            "| | | ".to_owned()
        } else {
            let b50 = pct(via_before.clone(), 0.5);
            let b99 = pct(via_before, 0.99);
            format!("| {b50:.2} | +{:.2} | +{:.2} ", b50 - d50, b99 - d99)
        };
        println!(
            "| {name} | {d50:.2} | {a50:.2} | +{:.2} | +{:.2} {before_cells}|",
            a50 - d50,
            a99 - d99
        );
    }
    let peak = |child: &Child| memory_kib(child.id()).1 / 1024;
    println!();
    match &before {
        Some((child, _)) => println!(
            "peak resident: this build {} MiB, the build before {} MiB",
            peak(&after),
            peak(child)
        ),
        None => println!("peak resident: this build {} MiB", peak(&after)),
    }
    let _ = after.kill();
    if let Some((mut child, _)) = before {
        let _ = child.kill();
    }
}
