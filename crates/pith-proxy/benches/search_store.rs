//! The tool search round trip's blocks behind a team store, on the request path, against the
//! local file they live in without one, in one run, on a real PostgreSQL the test kit starts
//! (loopback, a temporary directory).
//!
//! Per request (wall time per call, p50 and p99 over PITH_BENCH_CALLS calls, rounds
//! interleaved): what the request path does to have a session's blocks in memory before the
//! restore stage reads them, on Claude Code's fix-calc req006 (57 KB, 5 `tool_use`s):
//! - `local file`: no team store: the lookup the restore stage makes (the baseline);
//! - `local hit`: a team store, every `tool_use` known here (this instance hid the blocks or
//!   asked before): the fetch phase reads the body's `tool_use` ids and asks nothing;
//! - `store hit`: the last `tool_use` is new here, its blocks in the store (another instance
//!   hid them): one query;
//! - `store slow`: the same against a store that accepts and never answers: the bound;
//! - `resting`: the requests after that one, which do not wait for it (for 5 s).
//!
//! Writes (blocks kept per second): the local file's writer thread (N puts, then its flush),
//! against the team store one at a time (an answer waits for its write) and 32 at once.
//!
//! Run: `cargo bench -p pith-proxy --bench search_store` (env: PITH_BENCH_CALLS, default 2,000;
//! PITH_BENCH_WRITES, default 2,000; PITH_BENCH_ROUNDS, default 3; PITH_BENCH_BOUND_MS, the
//! store's bound, default 100).
#![expect(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a bench stops loudly on a broken setup and reports by printing"
)]

use std::net::TcpListener;
use std::time::{Duration, Instant};

use pith_proxy::search_trip::fetch;
use pith_store::postgres::StoreUrl;
use pith_store::search_blocks::postgres::TeamSearchBlocks;
use pith_store::search_blocks::{Limits, SearchBlocks};
use pith_testkit::bench::env_usize;
use pith_testkit::postgres::PgServer;
use pith_wire::Wire;

const BODY: &str = "claude-code-2.1.328/fix-calc/req006";
const KEPT: &str = r#"{"tool_use_at":1,"blocks":[[0,{"type":"server_tool_use","id":"srvtoolu_1","name":"tool_search_tool_regex","input":{"pattern":"x"}}]]}"#;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

struct Figures {
    p50: Duration,
    p99: Duration,
}

fn figures(mut times: Vec<Duration>) -> Figures {
    times.sort();
    Figures {
        p50: percentile(&times, 0.5),
        p99: percentile(&times, 0.99),
    }
}

fn shared(url: &str, bound: Duration) -> SearchBlocks {
    let blocks = SearchBlocks::in_memory(Limits::default());
    blocks.share_with(TeamSearchBlocks::new(&StoreUrl::new(url)).unwrap(), bound);
    blocks
}

/// The ids the request names, the last one being the one a store hit asks for.
fn ids_of(body: &[u8]) -> Vec<String> {
    let ids = pith_transform::search_trip::restore::tool_use_ids(body).ids;
    assert!(ids.len() >= 2, "{BODY} names too few tool_uses");
    ids
}

fn main() {
    let calls = env_usize("PITH_BENCH_CALLS", 2_000);
    let writes = env_usize("PITH_BENCH_WRITES", 2_000);
    let rounds = env_usize("PITH_BENCH_ROUNDS", 3);
    let bound = Duration::from_millis(env_usize("PITH_BENCH_BOUND_MS", 100) as u64);
    let body = pith_testkit::bench::capture_body(BODY);
    let ids = ids_of(&body);
    let last = ids.last().unwrap().clone();
    let url = PgServer::shared().database().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!(
        "postgres://pith@{}/pith?connect_timeout=60",
        silent.local_addr().unwrap()
    );
    let dir = tempfile::tempdir().unwrap();

    let mut local = Vec::new();
    let mut local_hit = Vec::new();
    let mut store_hit = Vec::new();
    let mut slow = Vec::new();
    let mut resting = Vec::new();
    let mut local_writes = Vec::new();
    let mut one_by_one = Vec::new();
    let mut concurrent = Vec::new();
    runtime.block_on(async {
        for round in 0..rounds {
            // The baseline: the local file's memory, every id kept.
            let file =
                SearchBlocks::open(&dir.path().join(format!("r{round}.db")), Limits::default())
                    .unwrap();
            for id in &ids {
                drop(file.put("s", id, KEPT));
            }
            for _ in 0..calls {
                let t = Instant::now();
                std::hint::black_box(fetch(&file, Wire::AnthropicMessages, "s", &body).await);
                std::hint::black_box(file.get("s", &last));
                local.push(t.elapsed());
            }
            // Shared, everything known here.
            let known = shared(&url, bound);
            for id in &ids {
                if let Some(w) = known.put(&format!("k{round}"), id, KEPT) {
                    w.await;
                }
            }
            for _ in 0..calls {
                let t = Instant::now();
                std::hint::black_box(
                    fetch(&known, Wire::AnthropicMessages, &format!("k{round}"), &body).await,
                );
                std::hint::black_box(known.get(&format!("k{round}"), &last));
                local_hit.push(t.elapsed());
            }
            // Shared, the last tool_use new here each time: another instance kept it.
            let other = shared(&url, bound);
            let sessions: Vec<String> = (0..calls).map(|i| format!("h{round}-{i}")).collect();
            for session in &sessions {
                if let Some(w) = other.put(session, &last, KEPT) {
                    w.await;
                }
            }
            // Every other id is known here already (kept before the store was shared, so
            // nothing else is written): only the last is asked.
            let here = SearchBlocks::in_memory(Limits::default());
            for session in &sessions {
                for id in &ids[..ids.len() - 1] {
                    drop(here.put(session, id, KEPT));
                }
            }
            here.share_with(TeamSearchBlocks::new(&StoreUrl::new(&url)).unwrap(), bound);
            for session in &sessions {
                let t = Instant::now();
                let report = fetch(&here, Wire::AnthropicMessages, session, &body).await;
                std::hint::black_box(here.get(session, &last));
                store_hit.push(t.elapsed());
                let fetched = report
                    .is_some_and(|r| matches!(r.result, pith_transform::StageResult::Applied(_)));
                assert!(
                    fetched,
                    "the store hit did not fetch: {:?}",
                    here.team_stats()
                );
            }
            // A store that never answers: the first call waits the bound (a fresh instance
            // each time), the next ones on that instance do not wait (it rests).
            for i in 0..5 {
                let hung = shared(&silent_url, bound);
                let t = Instant::now();
                std::hint::black_box(
                    fetch(&hung, Wire::AnthropicMessages, &format!("x{i}"), &body).await,
                );
                slow.push(t.elapsed());
                for j in 0..calls / 10 {
                    let t = Instant::now();
                    std::hint::black_box(
                        fetch(&hung, Wire::AnthropicMessages, &format!("y{i}-{j}"), &body).await,
                    );
                    resting.push(t.elapsed());
                }
            }
            // Writes: the local file's thread, then the team store.
            let file =
                SearchBlocks::open(&dir.path().join(format!("w{round}.db")), Limits::default())
                    .unwrap();
            let t = Instant::now();
            for i in 0..writes {
                drop(file.put("w", &format!("toolu_{i}"), KEPT));
            }
            file.flush();
            local_writes.push(writes as f64 / t.elapsed().as_secs_f64());
            let team = shared(&url, bound);
            let t = Instant::now();
            for i in 0..writes {
                team.put(&format!("w{round}"), &format!("toolu_{i}"), KEPT)
                    .unwrap()
                    .await;
            }
            one_by_one.push(writes as f64 / t.elapsed().as_secs_f64());
            let t = Instant::now();
            let mut pending = Vec::new();
            for i in 0..writes {
                pending.push(
                    team.put(&format!("c{round}"), &format!("toolu_{i}"), KEPT)
                        .unwrap(),
                );
                if pending.len() == 32 {
                    for w in pending.drain(..) {
                        w.await;
                    }
                }
            }
            for w in pending {
                w.await;
            }
            concurrent.push(writes as f64 / t.elapsed().as_secs_f64());
            let stats = team.team_stats();
            assert_eq!(stats.write_failed + stats.write_slow, 0, "{stats:?}");
        }
    });
    drop(silent);

    let base = figures(local);
    println!(
        "fetch phase + lookup per request, {BODY} ({} tool_uses), {rounds} rounds x {calls} calls:",
        ids.len()
    );
    println!(
        "{:<12} {:>10} {:>10} {:>10} {:>10}",
        "case", "p50", "p99", "p50 / file", "p99 / file"
    );
    let line = |name: &str, f: &Figures| {
        println!(
            "{name:<12} {:>10.1?} {:>10.1?} {:>10.1} {:>10.1}",
            f.p50,
            f.p99,
            f.p50.as_secs_f64() / base.p50.as_secs_f64(),
            f.p99.as_secs_f64() / base.p99.as_secs_f64()
        )
    };
    line("local file", &base);
    line("local hit", &figures(local_hit));
    line("store hit", &figures(store_hit));
    line("store slow", &figures(slow));
    line("resting", &figures(resting));
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let file_rate = median(local_writes);
    println!("writes (blocks kept per second, median of {rounds} rounds of {writes}):");
    println!("local file (writer thread)   {file_rate:>10.0}");
    for (name, rate) in [
        ("team store, one at a time", median(one_by_one)),
        ("team store, 32 at once", median(concurrent)),
    ] {
        println!(
            "{name:<28} {rate:>10.0}  ({:.2} of the file)",
            rate / file_rate
        );
    }
}
