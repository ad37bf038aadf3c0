//! What compressed bodies sent at once cost `pith proxy`: its peak resident memory and the
//! spool's peak size on disk, for two loads (issue 45, finding 11):
//! - `bombs`: PITH_BENCH_BOMBS (default 48) zstd bodies of 131 KB that each decode to
//!   PITH_BENCH_BOMB_GIB GiB (default 4), all sent at once;
//! - `under_limit`: PITH_BENCH_LARGE (default 60) zstd bodies of about 2 KB that each decode to
//!   a valid Responses request of 60 MB (under the 64 MiB body limit), all sent at once.
//!
//! Each load runs on a fresh proxy with its own PITH_HOME and ledger. With PITH_BENCH_BEFORE set
//! to another `pith` binary (e.g. one built before a change), each load runs on it too, in the
//! same run.
//!
//! Run: `cargo bench -p pith --bench hostile_bodies`.
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
use hyper_util::rt::TokioExecutor;
use pith_testkit::bombs::{self, Piece};
use pith_testkit::fixtures::{self, responses};
use pith_testkit::{MockUpstream, Reply};
use support::{env_usize, memory_kib, spawn_pith};

const MIB: u64 = 1 << 20;

fn start_pith(bin: &str, upstream: &str, home: &Path) -> (Child, SocketAddr) {
    let mut cmd = Command::new(bin);
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

/// Send every body in `bodies` at once to a fresh proxy (`bin`), sampling the spool's size
/// until every request is answered and the ledger has caught up.
fn run(bin: &str, bodies: &[Bytes]) -> Figures {
    let upstream = MockUpstream::start().unwrap();
    upstream.set_recording(false);
    upstream.set_default(Reply::sse(responses::stream(
        &["Hi."],
        fixtures::DEFAULT_USAGE,
    )));
    let home = tempfile::tempdir().unwrap();
    let (mut child, addr) = start_pith(bin, &upstream.url(), home.path());
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
        // The ledger catches up: the flush barrier answers once the spool is written.
        let flush = http::Request::get(format!("http://{addr}/pith/api/flush"))
            .header("host", "127.0.0.1")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let flushed = client.request(flush).await.unwrap();
        let _ = flushed.into_body().collect().await;
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
    let bomb = Bytes::from(bombs::zstd_bomb(gib << 30));
    let large = Bytes::from(bombs::zstd(&[
        Piece::Bytes(
            br#"{"model":"gpt-5.5","stream":true,"store":false,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":""#,
        ),
        Piece::Repeat(b'x', 60_000_000),
        Piece::Bytes(br#""}]}]}"#),
    ]));
    let loads = [
        ("bombs", vec![bomb.clone(); n_bombs]),
        ("under_limit", vec![large.clone(); n_large]),
    ];
    let mut binaries = vec![("this build", env!("CARGO_BIN_EXE_pith").to_owned())];
    if let Ok(before) = std::env::var("PITH_BENCH_BEFORE") {
        binaries.push(("PITH_BENCH_BEFORE", before));
    }
    println!(
        "bombs: {n_bombs} x {} KB decoding to {gib} GiB each; under_limit: {n_large} x {} KB \
         decoding to 60 MB each",
        bomb.len() / 1000,
        large.len() / 1000
    );
    println!(
        "| load | binary | answered | RSS before | peak RSS | spool peak | rows | lost | took |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for (load, bodies) in &loads {
        for (name, bin) in &binaries {
            let figures = run(bin, bodies);
            print(load, name, &figures);
        }
    }
}
