//! Added latency and memory of `pith proxy` against the same requests sent straight to the mock
//! upstream, measured in one run with interleaved rounds (these machines are noisy, so the
//! baseline is always measured next to the figure it is compared with).
//!
//! Run: `cargo bench -p pith --bench proxy_overhead` (env: PITH_BENCH_ROUNDS, PITH_BENCH_PER_ROUND,
//! PITH_BENCH_LEDGER=0 to run pith without its ledger, PITH_BENCH_MODES=json,sse and
//! PITH_BENCH_CONCURRENCY=1,16 to measure a subset, e.g. while profiling; PITH_BENCH_BIN to
//! measure another `pith` binary with this harness, PITH_BENCH_BURST=N for the size of the
//! closing burst of concurrent connections, 0 to skip it; PITH_BENCH_TEAM=1 to run pith in team
//! mode, shipping its ledger to a PostgreSQL the test kit starts, and to count what arrived;
//! PITH_BENCH_SUSTAINED_S=60 for a sustained phase after the burst, at
//! PITH_BENCH_SUSTAINED_CONC connections (default 16), unstreamed, paced at
//! PITH_BENCH_SUSTAINED_RATE requests/s when set).
//! At the end it counts the requests sent through pith against the ledger's rows, the ones it
//! lost and the ones left in its spool, the spool's peak size, and how long after the burst (and
//! the sustained load) every row was written and every row's derivations (busts, history).
//! Body: Claude Code 2.1.328's 54 KB `fix-calc/req002.json` from `pith-testkit/fixtures/captures`.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a bench stops loudly on a broken setup and reports by printing"
)]

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use pith_testkit::MockUpstream;
use pith_testkit::bench::{env_list, percentile_ms as pct};
use pith_testkit::fixtures as captures;
use support::{env_usize, memory_kib, spawn_pith};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

struct Sample {
    total: Duration,
    ttfb: Duration,
}

/// The binary measured: this build's, or `PITH_BENCH_BIN` (to measure an older build with the
/// same harness, e.g. before and after a change).
fn pith_bin() -> String {
    std::env::var("PITH_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_pith").to_owned())
}

fn start_pith(mock: &str, home: &std::path::Path, team: Option<&str>) -> (Child, SocketAddr) {
    let mut cmd = Command::new(pith_bin());
    cmd.args(["proxy", "--listen", "127.0.0.1:0"]);
    if let Some(url) = team {
        cmd.env("PITH_STORE_URL", url);
    }
    // PITH_BENCH_LEDGER=0 measures the proxy without its ledger thread.
    if std::env::var("PITH_BENCH_LEDGER").is_ok_and(|v| v == "0") {
        cmd.arg("--no-ledger");
    }
    cmd.args(["--anthropic-upstream", mock, "--openai-upstream", mock])
        .env("PITH_HOME", home);
    spawn_pith(cmd)
}

async fn one(client: &HttpClient, url: &str, body: &Bytes) -> Sample {
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .header("x-claude-code-session-id", "bench")
        .body(Full::new(body.clone()))
        .unwrap();
    let start = Instant::now();
    let resp = client.request(req).await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    let mut body = resp.into_body();
    let mut ttfb = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap();
        if frame.is_data() && ttfb.is_none() {
            ttfb = Some(start.elapsed());
        }
    }
    let total = start.elapsed();
    Sample {
        total,
        ttfb: ttfb.unwrap_or(total),
    }
}

/// One keep-alive client per path, as an agent keeps its connection to the provider (or to
/// pith) open across requests.
fn client(concurrency: usize) -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(concurrency)
        .build_http()
}

/// `concurrency` workers each send `per_worker` requests back to back.
async fn round(
    client: &HttpClient,
    url: &str,
    body: &Bytes,
    concurrency: usize,
    per_worker: usize,
) -> Vec<Sample> {
    let url: Arc<str> = Arc::from(url);
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let client = client.clone();
        let url = Arc::clone(&url);
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::with_capacity(per_worker);
            for _ in 0..per_worker {
                out.push(one(&client, &url, &body).await);
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

struct Stats {
    p50: f64,
    p99: f64,
    ttfb_p50: f64,
    ttfb_p99: f64,
}

fn stats(samples: &[Sample]) -> Stats {
    let mut total: Vec<Duration> = samples.iter().map(|s| s.total).collect();
    let mut ttfb: Vec<Duration> = samples.iter().map(|s| s.ttfb).collect();
    total.sort();
    ttfb.sort();
    Stats {
        p50: pct(&total, 0.5),
        p99: pct(&total, 0.99),
        ttfb_p50: pct(&ttfb, 0.5),
        ttfb_p99: pct(&ttfb, 0.99),
    }
}

/// CPU time the process `pid` has used so far, user and system (Linux `/proc/PID/stat`, in
/// clock ticks of 1/100 s); zero where it cannot be read.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) in parentheses.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime: fields 14 and 15 of the whole line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// Bytes in the spool directory beside the ledger now.
fn spool_bytes(home: &std::path::Path) -> u64 {
    std::fs::read_dir(home.join("ledger.db-spool"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// `pith stats --json` over `home`.
fn report(home: &std::path::Path) -> serde_json::Value {
    let stats = Command::new(pith_bin())
        .args(["stats", "--json"])
        .env("PITH_HOME", home)
        .output()
        .unwrap();
    serde_json::from_slice(&stats.stdout).unwrap_or_default()
}

/// How long, from now, until every request that waits in the spool has its row, and until
/// every row has its derivations too (busts, history turns; a pith from before rows came first
/// writes both at once and reports none waiting). Polled every 100 ms.
fn drained(home: &std::path::Path) -> (Duration, Duration) {
    let start = Instant::now();
    let mut rows = None;
    loop {
        let backlog = report(home)["ledger_backlog"].clone();
        let waiting = |what: &str| backlog[what].as_u64().unwrap_or(0);
        if rows.is_none() && waiting("requests") == 0 {
            rows = Some(start.elapsed());
        }
        if let Some(rows) = rows
            && waiting("derivations") == 0
        {
            return (rows, start.elapsed());
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "the spool never emptied"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run a smoke pass.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let rounds = if smoke {
        1
    } else {
        env_usize("PITH_BENCH_ROUNDS", 50)
    };
    let per_round = if smoke {
        20
    } else {
        env_usize("PITH_BENCH_PER_ROUND", 40)
    };

    let capture = captures::captures()
        .unwrap()
        .into_iter()
        .find(|c| c.id() == "claude-code-2.1.328/fix-calc/req002")
        .expect("capture claude-code-2.1.328/fix-calc/req002");
    let streamed = capture.body.clone();
    let text = std::str::from_utf8(&streamed).unwrap();
    assert!(text.contains("\"stream\":true"));
    let unstreamed = Bytes::from(text.replace("\"stream\":true", "\"stream\":false"));

    let mock = MockUpstream::start().unwrap();
    mock.set_recording(false);
    let home = tempfile::tempdir().unwrap();
    // Team mode: a PostgreSQL of the bench's own, started before pith and outliving it.
    let team_server = std::env::var("PITH_BENCH_TEAM")
        .is_ok_and(|v| v == "1")
        .then(|| pith_testkit::postgres::PgServer::start().unwrap());
    let team_url = team_server.as_ref().map(|pg| pg.database().unwrap());
    let (mut child, addr) = start_pith(&mock.url(), home.path(), team_url.as_deref());
    let pid = child.id();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (idle_rss, _) = memory_kib(pid);
    // Requests sent through pith (each must become one ledger row), and the spool's peak.
    let sent = Arc::new(AtomicU64::new(0));
    let via_pith = |client: &HttpClient, url: &str, body: &Bytes, conc: usize, per: usize| {
        sent.fetch_add((conc * per) as u64, Ordering::Relaxed);
        rt.block_on(round(client, url, body, conc, per))
    };
    let spool_peak = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, on, home) = (
            Arc::clone(&spool_peak),
            Arc::clone(&sampling),
            home.path().to_owned(),
        );
        std::thread::spawn(move || {
            while on.load(Ordering::Relaxed) {
                peak.fetch_max(spool_bytes(&home), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    println!(
        "body: {} bytes; {rounds} rounds x {per_round} requests per configuration, direct and via pith interleaved",
        streamed.len()
    );
    println!();
    println!(
        "| mode | conc | direct p50 | pith p50 | added p50 | direct p99 | pith p99 | added p99 | added ttfb p50 | added ttfb p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let direct_url = format!("{}/v1/messages?beta=true", mock.url());
    let pith_url = format!("http://{addr}/v1/messages?beta=true");
    let modes = env_list("PITH_BENCH_MODES", "json,sse");
    let concurrencies: Vec<usize> = env_list("PITH_BENCH_CONCURRENCY", "1,16")
        .iter()
        .map(|c| {
            c.parse()
                .expect("PITH_BENCH_CONCURRENCY: numbers, e.g. 1,16")
        })
        .collect();
    for (mode, body) in [("json", &unstreamed), ("sse", &streamed)] {
        if !modes.iter().any(|m| m == mode) {
            continue;
        }
        for &concurrency in &concurrencies {
            let per_worker = (per_round / concurrency).max(1);
            // Start each configuration from a quiet machine: the ledger writes the rows of the
            // previous one (thousands after concurrency 16) on otherwise idle CPU time.
            std::thread::sleep(Duration::from_secs(if smoke { 0 } else { 2 }));
            let (direct_client, pith_client) = (client(concurrency), client(concurrency));
            // Warm both paths (connections, pith's pools, page cache).
            rt.block_on(round(
                &direct_client,
                &direct_url,
                body,
                concurrency,
                per_worker,
            ));
            via_pith(&pith_client, &pith_url, body, concurrency, per_worker);
            let mut direct = Vec::new();
            let mut via = Vec::new();
            for _ in 0..rounds {
                direct.extend(rt.block_on(round(
                    &direct_client,
                    &direct_url,
                    body,
                    concurrency,
                    per_worker,
                )));
                via.extend(via_pith(
                    &pith_client,
                    &pith_url,
                    body,
                    concurrency,
                    per_worker,
                ));
            }
            let d = stats(&direct);
            let p = stats(&via);
            println!(
                "| {mode} | {concurrency} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                d.p50,
                p.p50,
                p.p50 - d.p50,
                d.p99,
                p.p99,
                p.p99 - d.p99,
                p.ttfb_p50 - d.ttfb_p50,
                p.ttfb_p99 - d.ttfb_p99,
            );
        }
    }
    // Memory under concurrency 64 (streamed, the heavier case).
    let per_worker = if smoke { 2 } else { 20 };
    via_pith(&client(64), &pith_url, &streamed, 64, per_worker);
    let (after_rss, peak) = memory_kib(pid);
    println!();
    println!("(all times in ms; added = pith minus direct at the same percentile)");
    println!(
        "pith RSS: idle {:.1} MiB; after concurrency 64: {:.1} MiB; peak {:.1} MiB",
        idle_rss as f64 / 1024.0,
        after_rss as f64 / 1024.0,
        peak as f64 / 1024.0
    );
    // A burst of concurrent connections (one request each, then closed), and whether memory
    // comes back once it is over.
    let burst = if smoke {
        20
    } else {
        env_usize("PITH_BENCH_BURST", 2000)
    };
    let ledger_on = !std::env::var("PITH_BENCH_LEDGER").is_ok_and(|v| v == "0");
    if burst > 0 {
        let (before, _) = memory_kib(pid);
        via_pith(&client(burst), &pith_url, &unstreamed, burst, 1);
        let ended = Instant::now();
        let (right_after, peak) = memory_kib(pid);
        if ledger_on {
            let (rows, derived) = drained(home.path());
            println!(
                "after the burst: every row written in {:.1} s, their derivations in {:.1} s",
                rows.as_secs_f64(),
                derived.as_secs_f64()
            );
        }
        std::thread::sleep(
            Duration::from_secs(if smoke { 0 } else { 10 }).saturating_sub(ended.elapsed()),
        );
        let (later, _) = memory_kib(pid);
        println!(
            "burst of {burst} connections: RSS before {:.1} MiB; right after {:.1} MiB; peak {:.1} MiB; 10 s after {:.1} MiB",
            before as f64 / 1024.0,
            right_after as f64 / 1024.0,
            peak as f64 / 1024.0,
            later as f64 / 1024.0
        );
    }
    // Sustained: as fast as this machine lets the clients send, for a while.
    let sustained = if smoke {
        0
    } else {
        env_usize("PITH_BENCH_SUSTAINED_S", 0)
    };
    if sustained > 0 {
        let conc = env_usize("PITH_BENCH_SUSTAINED_CONC", 16);
        let c = client(conc);
        let cpu_before = cpu_seconds(pid);
        let start = Instant::now();
        let before = sent.load(Ordering::Relaxed);
        // PITH_BENCH_SUSTAINED_RATE=N paces the load at N requests/s (0: as fast as it goes).
        let rate = env_usize("PITH_BENCH_SUSTAINED_RATE", 0);
        while start.elapsed() < Duration::from_secs(sustained as u64) {
            via_pith(&c, &pith_url, &unstreamed, conc, 10);
            if rate > 0 {
                let due = Duration::from_secs_f64(
                    (sent.load(Ordering::Relaxed) - before) as f64 / rate as f64,
                );
                std::thread::sleep(due.saturating_sub(start.elapsed()));
            }
        }
        let n = sent.load(Ordering::Relaxed) - before;
        let secs = start.elapsed().as_secs_f64();
        let (rss, peak) = memory_kib(pid);
        println!(
            "sustained: {n} requests in {secs:.1} s ({:.0}/s) at concurrency {conc}; RSS {:.1} MiB, peak {:.1} MiB",
            n as f64 / secs,
            rss as f64 / 1024.0,
            peak as f64 / 1024.0
        );
        if ledger_on {
            let (rows, derived) = drained(home.path());
            println!(
                "after the sustained load: every row written in {:.1} s, their derivations in {:.1} s",
                rows.as_secs_f64(),
                derived.as_secs_f64()
            );
        }
        // Serving and recording them, writers included (the ledger's work is done by now).
        let cpu = cpu_seconds(pid) - cpu_before;
        println!(
            "pith's CPU time for the sustained load: {cpu:.1} s, {:.0} us per request",
            cpu * 1e6 / n.max(1) as f64
        );
    }
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.join();
    // SIGTERM, then count what the ledger kept.
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = child.wait();
    if !ledger_on {
        return;
    }
    let report = report(home.path());
    println!(
        "ledger: {} requests sent through pith, {} rows written, {} lost, {} left in the spool; spool peak {:.1} MiB",
        sent.load(Ordering::Relaxed),
        report["total"]["requests"],
        report["dropped_rows"],
        report["ledger_backlog"]["requests"],
        spool_peak.load(Ordering::Relaxed) as f64 / (1024.0 * 1024.0)
    );
    if let Some(url) = &team_url {
        let team = Command::new(pith_bin())
            .args(["stats", "--json"])
            .env("PITH_HOME", home.path())
            .env("PITH_STORE_URL", url)
            .output()
            .unwrap();
        let team: serde_json::Value = serde_json::from_slice(&team.stdout).unwrap_or_default();
        println!(
            "team ledger: {} rows arrived in PostgreSQL; {} still waiting in the local ledger",
            team["total"]["requests"], team["team"]["local_backlog"]
        );
    }
}
