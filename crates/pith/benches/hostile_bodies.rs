//! What compressed bodies sent at once cost `pith proxy`: its peak resident memory and the
//! spool's peak size on disk, for two loads (issue 45, finding 11):
//! - `bombs`: PITH_BENCH_BOMBS (default 48) zstd bodies of 131 KB that each decode to
//!   PITH_BENCH_BOMB_GIB GiB (default 4), all sent at once;
//! - `under_limit`: PITH_BENCH_LARGE (default 60) zstd bodies of about 2 KB that each decode to
//!   a valid Responses request of 60 MB (under the 64 MiB body limit), all sent at once.
//!
//! - `long_outputs`: with tool output excerpts on (`PITH_TRIM_OUTPUTS=1`), PITH_BENCH_SESSIONS
//!   (default 300) sessions one after another, each a Codex request whose file read returned
//!   1.5 MB and whose model turn came after it: each output's excerpt (a quarter of it) is
//!   what the stage remembers, and its memory must stay bounded (`outputs/memo.rs`,
//!   `outputs/remembered.rs`); RSS is read once all are answered, and at its peak.
//!
//! Each load runs on a fresh proxy with its own PITH_HOME and ledger. With PITH_BENCH_BEFORE set
//! to another `pith` binary (e.g. one built before a change), each load runs on it too, in the
//! same run.
//!
//! Run: `cargo bench -p pith --bench hostile_bodies` (`PITH_BENCH_LOADS=bombs,under_limit,
//! long_outputs` for a subset).
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a bench stops loudly on a broken setup and reports by printing"
)]

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use pith_testkit::bench::env_list;
use pith_testkit::bombs::{self, Piece};
use pith_testkit::fixtures::{self, responses};
use pith_testkit::{MockUpstream, Reply};
use support::{env_usize, memory_kib, spawn_pith};

const MIB: u64 = 1 << 20;

fn start_pith(bin: &str, upstream: &str, home: &Path, trim: bool) -> (Child, SocketAddr) {
    let mut cmd = Command::new(bin);
    if trim {
        cmd.env("PITH_TRIM_OUTPUTS", "1");
    }
    cmd.args(["proxy", "--listen", "127.0.0.1:0"])
        .args([
            "--anthropic-upstream",
            upstream,
            "--openai-upstream",
            upstream,
        ])
        .env("PITH_HOME", home)
        .env_remove("PITH_CONFIG");
    spawn_pith(cmd)
}

/// The bytes in the spool's segment files now.
fn spool_bytes(home: &Path) -> u64 {
    std::fs::read_dir(home.join("ledger.db-spool"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

struct Figures {
    statuses: Vec<u16>,
    rss_before: u64,
    peak_rss: u64,
    peak_spool: u64,
    rows: u64,
    lost: u64,
    took: Duration,
}

/// A mock upstream answering every request with a short Responses stream, and a fresh proxy
/// (`bin`, excerpts on with `trim`) in front of it with a home of its own.
fn start(bin: &str, trim: bool) -> (MockUpstream, tempfile::TempDir, Child, SocketAddr) {
    let upstream = MockUpstream::start().unwrap();
    upstream.set_default(Reply::sse(responses::stream(
        &["Hi."],
        fixtures::DEFAULT_USAGE,
    )));
    let home = tempfile::tempdir().unwrap();
    let (child, addr) = start_pith(bin, &upstream.url(), home.path(), trim);
    (upstream, home, child, addr)
}

/// Waits for the ledger to catch up: the flush barrier answers once the spool is written.
async fn flush(client: &Client<HttpConnector, Full<Bytes>>, addr: SocketAddr) {
    let flush = http::Request::get(format!("http://{addr}/pith/api/flush"))
        .header("host", "127.0.0.1")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let flushed = client.request(flush).await.unwrap();
    let _ = flushed.into_body().collect().await;
}

/// Send every body in `bodies` at once to a fresh proxy (`bin`), sampling the spool's size
/// until every request is answered and the ledger has caught up.
fn run(bin: &str, bodies: &[Bytes]) -> Figures {
    let (upstream, home, mut child, addr) = start(bin, false);
    upstream.set_recording(false);
    let pid = child.id();
    let (rss_before, _) = memory_kib(pid);
    let peak_spool = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done, dir) = (
            Arc::clone(&peak_spool),
            Arc::clone(&done),
            home.path().to_owned(),
        );
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(spool_bytes(&dir), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let statuses = rt.block_on(async {
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let sends = bodies.iter().map(|body| {
            let req = http::Request::post(format!("http://{addr}/v1/responses"))
                .header("content-type", "application/json")
                .header("content-encoding", "zstd")
                .header("user-agent", "codex_exec/0.169.0")
                .header("session-id", "bench-bombs")
                .body(Full::new(body.clone()))
                .unwrap();
            let client = client.clone();
            async move {
                let res = client.request(req).await.unwrap();
                let status = res.status().as_u16();
                let _ = res.into_body().collect().await;
                status
            }
        });
        let statuses = futures_util::future::join_all(sends).await;
        flush(&client, addr).await;
        statuses
    });
    let took = started.elapsed();
    done.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    let (_, peak_rss) = memory_kib(pid);
    let _ = child.kill();
    let _ = child.wait();
    let report = Command::new(bin)
        .args(["stats", "--json"])
        .env("PITH_HOME", home.path())
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap_or_default();
    Figures {
        statuses,
        rss_before: rss_before << 10,
        peak_rss: peak_rss << 10,
        peak_spool: peak_spool.load(Ordering::SeqCst),
        rows: report["total"]["requests"].as_u64().unwrap_or(0),
        lost: report["dropped_rows"].as_u64().unwrap_or(0),
        took,
    }
}

/// A Codex request of session `s`: its file read returned `output_bytes` of numbered lines,
/// and the model answered after it (so the read rides as an excerpt).
fn long_output_body(s: usize, output_bytes: usize) -> Bytes {
    let mut output = String::with_capacity(output_bytes + 100);
    let mut i = 1;
    while output.len() < output_bytes {
        output.push_str(&format!(
            "{i:6}\t    let value_{i} = compute_{s}_{i}(input, {i});\n"
        ));
        i += 1;
    }
    let body = serde_json::json!({
        "model": "gpt-5.5", "stream": true, "store": false,
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": format!("session {s}: read the module")}]},
            {"type": "function_call", "call_id": format!("call_{s}"), "name": "shell",
             "arguments": serde_json::json!({"command": ["bash", "-lc", format!("cat -n src/m{s}.rs")]}).to_string()},
            {"type": "function_call_output", "call_id": format!("call_{s}"), "output": output},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": format!("value_{} is what compute returns.", 17 + s)}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]}
        ]
    });
    Bytes::from(body.to_string())
}

/// What a proxy held while taking one load after another.
struct Retained {
    answered: usize,
    sent: usize,
    rss_before: u64,
    rss_after: u64,
    peak_rss: u64,
    took: Duration,
}

/// Send `sessions` long-output requests one after another to a fresh proxy with excerpts on,
/// each made as it is sent (the bench's own memory stays flat); the proxy's RSS once all are
/// answered and at its peak.
fn run_sequential(bin: &str, sessions: usize) -> Retained {
    let (upstream, _home, mut child, addr) = start(bin, true);
    let pid = child.id();
    let (rss_before, _) = memory_kib(pid);
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let answered = rt.block_on(async {
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let mut answered = 0;
        for s in 0..sessions {
            let body = long_output_body(s, 1_500_000);
            let req = http::Request::post(format!("http://{addr}/v1/responses"))
                .header("content-type", "application/json")
                .header("user-agent", "codex_exec/0.169.0")
                .header("session-id", format!("bench-outputs-{s}"))
                .body(Full::new(body.clone()))
                .unwrap();
            let res = client.request(req).await.unwrap();
            answered += usize::from(res.status() == 200);
            let _ = res.into_body().collect().await;
            if s == 0 {
                // The load measures what the stage keeps only if it shortened the output.
                let up = upstream.received()[0].body.len();
                assert!(
                    up < body.len() / 2,
                    "{bin}: the first output was not shortened: {up} of {} bytes sent",
                    body.len()
                );
                upstream.set_recording(false);
            }
        }
        flush(&client, addr).await;
        answered
    });
    let took = started.elapsed();
    let (rss_after, peak_rss) = memory_kib(pid);
    let _ = child.kill();
    let _ = child.wait();
    Retained {
        answered,
        sent: sessions,
        rss_before: rss_before << 10,
        rss_after: rss_after << 10,
        peak_rss: peak_rss << 10,
        took,
    }
}

fn print(load: &str, binary: &str, f: &Figures) {
    let ok = f.statuses.iter().filter(|s| **s == 200).count();
    println!(
        "| {load} | {binary} | {ok}/{} | {} MiB | **{} MiB** | {:.1} MiB | {} | {} | {:.1} s |",
        f.statuses.len(),
        f.rss_before / MIB,
        f.peak_rss / MIB,
        f.peak_spool as f64 / MIB as f64,
        f.rows,
        f.lost,
        f.took.as_secs_f64()
    );
}

fn main() {
    let n_bombs = env_usize("PITH_BENCH_BOMBS", 48);
    let gib = env_usize("PITH_BENCH_BOMB_GIB", 4) as u64;
    let n_large = env_usize("PITH_BENCH_LARGE", 60);
    let wanted = env_list("PITH_BENCH_LOADS", "bombs,under_limit,long_outputs");
    let wants = |load: &str| wanted.iter().any(|w| w == load);
    // Each load's bodies are made only when it runs (the bomb alone takes seconds to make).
    let bomb = wants("bombs").then(|| Bytes::from(bombs::zstd_bomb(gib << 30)));
    let large = wants("under_limit").then(|| {
        Bytes::from(bombs::zstd(&[
            Piece::Bytes(
                br#"{"model":"gpt-5.5","stream":true,"store":false,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":""#,
            ),
            Piece::Repeat(b'x', 60_000_000),
            Piece::Bytes(br#""}]}]}"#),
        ]))
    });
    let mut binaries = vec![("this build", env!("CARGO_BIN_EXE_pith").to_owned())];
    if let Ok(before) = std::env::var("PITH_BENCH_BEFORE") {
        binaries.push(("PITH_BENCH_BEFORE", before));
    }
    let loads = [
        ("bombs", bomb.map(|b| vec![b; n_bombs])),
        ("under_limit", large.map(|b| vec![b; n_large])),
    ];
    for (load, bodies) in &loads {
        let Some(bodies) = bodies else { continue };
        println!(
            "{load}: {} x {} KB decoding to {}",
            bodies.len(),
            bodies.first().map_or(0, |b| b.len() / 1000),
            if *load == "bombs" {
                format!("{gib} GiB each")
            } else {
                "60 MB each".to_owned()
            }
        );
    }
    if loads.iter().any(|(_, bodies)| bodies.is_some()) {
        println!(
            "| load | binary | answered | RSS before | peak RSS | spool peak | rows | lost | took |"
        );
        println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    }
    for (load, bodies) in &loads {
        let Some(bodies) = bodies else { continue };
        for (name, bin) in &binaries {
            let figures = run(bin, bodies);
            print(load, name, &figures);
        }
    }
    if !wants("long_outputs") {
        return;
    }
    let n_sessions = env_usize("PITH_BENCH_SESSIONS", 300);
    println!(
        "\nlong_outputs: {n_sessions} sessions one after another, each a 1.5 MB file read \
         shortened\n| binary | answered | RSS before | RSS after | peak RSS | took |\n\
         |---|---:|---:|---:|---:|---:|"
    );
    for (name, bin) in &binaries {
        let r = run_sequential(bin, n_sessions);
        println!(
            "| {name} | {}/{} | {} MiB | **{} MiB** | {} MiB | {:.1} s |",
            r.answered,
            r.sent,
            r.rss_before / MIB,
            r.rss_after / MIB,
            r.peak_rss / MIB,
            r.took.as_secs_f64()
        );
    }
}
