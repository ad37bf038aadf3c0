//! The request path's added time on what real clients send (issue 46): the captures' own
//! headers (user agent, betas, session id), a body whose last message changes on every request
//! (as a session's do), the three clients' bodies and a long conversation. Every target in one
//! run, interleaved request by request, concurrency 1, so each figure has its baseline beside
//! it:
//!
//! - `direct`: the mock upstream itself;
//! - `pith`: this build's `pith proxy` on its defaults (ledger, history, pins, deferral);
//! - `pith --no-ledger`: the same without its ledger (the ledger's own cost, paced);
//! - `pith, outputs trimmed`: this build with tool output excerpts on (`PITH_TRIM_OUTPUTS=1`,
//!   off by default; issue 48), target `trim`;
//! - `pith, hold-out deciding`: this build with `PITH_HOLDOUT` set so small that no body is
//!   held out: the hold-out's decision on every request (issue 49), target `holdout`;
//! - `pith, every change counted`: this build asking the provider's token counter for every
//!   request a stage changed (`PITH_PROVIDER_COUNTS=1`, off by default; issue 49), target
//!   `counts`;
//! - `bare relay`: this build with every stage, the ledger and history off (what forwarding
//!   alone costs, the floor the stages are measured against);
//! - `build before`: with `PITH_BENCH_BEFORE=/path/to/pith`, another binary on its defaults;
//!   `bare-before`, that binary as a bare relay (what a change to forwarding itself moved);
//! - `haproxy`: Debian's HAProxy with the gateway config the project ships, in front of the
//!   mock: what a relay that is not pith costs on this machine (a floor for the goals' added
//!   time, measured beside them).
//!
//! Two modes: back to back (the next request as soon as the last answer's last byte is in),
//! and paced (a request every 10 ms, 100 a second, so the ledger's writers run between
//! requests as they do in a session, and a p99 measures what they take from the path).
//!
//! Bodies: Claude Code 2.1.328 `fix-calc/req006` (56 KB), OpenCode 1.18.33
//! `anthropic-fix-calc/req003` (31 KB, 10 tools, none deferred), Codex 0.169.0
//! `responses-fix-calc/req002` (39 KB), and req006 grown to about 1.3 MB by Read round trips
//! (150 more tool calls whose results are 8 KB of source each), as a long session's are.
//!
//! Run: `PITH_BENCH_BEFORE=/path/to/old/pith cargo bench -p pith --bench client_requests`
//! (env: `PITH_BENCH_ROUNDS`, default 400 requests per target, body and mode;
//! `PITH_BENCH_MODES=back-to-back,paced` for a subset; `PITH_BENCH_BODIES=claude,opencode,
//! codex,long` for a subset; `PITH_BENCH_TARGETS=pith,no-ledger,bare,before,bare-before,trim,holdout,counts,haproxy`
//! likewise; `haproxy` needs it installed, as `scripts/test` does).
//! The older figures' method (one identical body, no user agent) is `proxy_overhead`'s.
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
use pith_testkit::bench::{env_list, percentile_ms};
use pith_testkit::fixtures::captures;
use support::{env_usize, memory_kib, spawn_pith};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// The first requests of each body and target warm connections and the proxies' once-only work.
const WARM_UP: usize = 20;

/// The paced mode's gap between request starts.
const PACE: Duration = Duration::from_millis(10);

/// One relay under measurement.
struct Target {
    name: &'static str,
    url: String,
    process: Process,
}

/// What runs a target: a `pith proxy` in a home of its own, or HAProxy (stopped when dropped).
enum Process {
    Pith {
        child: Child,
        _home: tempfile::TempDir,
    },
    Haproxy(pith_testkit::haproxy::Haproxy),
}

impl Process {
    fn pid(&self) -> u32 {
        match self {
            Process::Pith { child, .. } => child.id(),
            Process::Haproxy(haproxy) => haproxy.pid(),
        }
    }
}

/// A `pith proxy` of `bin` in front of `mock`, in a home of its own, with `flags` and `env`.
fn start(
    name: &'static str,
    bin: &str,
    mock: &str,
    flags: &[&str],
    env: &[(&str, &str)],
) -> Target {
    let home = tempfile::tempdir().expect("home");
    let mut cmd = Command::new(bin);
    cmd.args(["proxy", "--listen", "127.0.0.1:0"])
        .args(["--anthropic-upstream", mock, "--openai-upstream", mock])
        .args(flags)
        .env("PITH_HOME", home.path())
        .env_remove("PITH_CONFIG");
    for (key, value) in env {
        cmd.env(key, value);
    }
    let (child, addr) = spawn_pith(cmd);
    Target {
        name,
        url: format!("http://{addr}"),
        process: Process::Pith { child, _home: home },
    }
}

/// HAProxy in front of `mock`. The shipped config's health checks ask for pith's
/// `/pith/health`, which the mock does not serve as pith does; asked every hour, the server is
/// taken out (two failed checks) only long after a run.
fn haproxy(mock: &str) -> Target {
    let addr = mock
        .trim_start_matches("http://")
        .parse()
        .expect("the mock's address");
    let haproxy = pith_testkit::haproxy::Haproxy::start(&[addr], Duration::from_secs(3600))
        .expect("haproxy (installed by scripts/test)");
    Target {
        name: "haproxy",
        url: haproxy.url(),
        process: Process::Haproxy(haproxy),
    }
}

/// A client's request: its path, its headers, and its body as text.
struct ClientBody {
    name: &'static str,
    path: String,
    headers: Vec<(String, String)>,
    text: String,
}

impl ClientBody {
    /// The body with its last string value (the last message's text, a tool result, a function
    /// call's output) starting with a new mark: a new last message each request, the prefix
    /// unchanged, as a session's next turn.
    ///
    /// Only the history array is searched: Claude Code's system prompt, after its messages,
    /// has text blocks too, and varying those would be a new system prompt every turn, which
    /// no client sends (the captures of all three repeat everything after the history).
    fn unique(&self, n: usize) -> Bytes {
        let history = ["messages", "input"]
            .iter()
            .find_map(|key| pith_wire::skim::member_forward(self.text.as_bytes(), key.as_bytes()))
            .expect("a history array");
        let within = &self.text[..history.value.end];
        let at = ["\"text\":\"", "\"content\":\"", "\"output\":\""]
            .iter()
            .filter_map(|m| within.rfind(m).map(|at| at + m.len()))
            .max()
            .expect("a string value to vary");
        let mut out = String::with_capacity(self.text.len() + 16);
        out.push_str(&self.text[..at]);
        out.push_str(&format!("(turn {n}) "));
        out.push_str(&self.text[at..]);
        Bytes::from(out)
    }
}

fn capture(id: &str, name: &'static str) -> ClientBody {
    let capture = captures()
        .expect("captures")
        .into_iter()
        .find(|c| c.id() == id)
        .unwrap_or_else(|| panic!("capture {id}"));
    ClientBody {
        name,
        path: capture.path.clone(),
        headers: capture.headers.clone(),
        text: String::from_utf8(capture.body.to_vec()).expect("utf-8"),
    }
}

/// req006 grown by `calls` Read round trips before its last exchange, each result `size` bytes
/// of distinct source lines: a long session's transcript, mostly tool output.
fn grown(base: &ClientBody, calls: usize, size: usize) -> ClientBody {
    ClientBody {
        name: "Claude Code req006 grown to ~1.3 MB",
        path: base.path.clone(),
        headers: base.headers.clone(),
        text: pith_testkit::bench::grown_conversation(&base.text, calls, size),
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

/// Time a process has spent on a CPU, in microseconds: its main thread (pith's event loop)
/// and all its other threads (ledger writers, the blocking pool), from `/proc` (Linux).
fn cpu_us(pid: u32) -> (u64, u64) {
    let on_cpu = |task: &std::path::Path| {
        std::fs::read_to_string(task.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
            / 1000
    };
    let mut main = 0;
    let mut others = 0;
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    for task in tasks.flatten() {
        let us = on_cpu(&task.path());
        if task.file_name().to_str() == Some(&pid.to_string()) {
            main += us;
        } else {
            others += us;
        }
    }
    (main, others)
}

fn pct(v: &[Duration], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort();
    percentile_ms(&v, p)
}

/// Every target's times for one body in one mode: `rounds` requests each, interleaved.
async fn measure(
    client: &HttpClient,
    mock: &str,
    targets: &[Target],
    body: &ClientBody,
    rounds: usize,
    paced: bool,
) -> Vec<Vec<Duration>> {
    let mut times = vec![Vec::with_capacity(rounds); targets.len() + 1];
    let mut next = tokio::time::Instant::now();
    for n in 0..rounds + WARM_UP {
        let b = body.unique(n);
        for (i, base) in std::iter::once(mock)
            .chain(targets.iter().map(|t| t.url.as_str()))
            .enumerate()
        {
            if paced {
                next += PACE;
                tokio::time::sleep_until(next).await;
            }
            let took = one(
                client,
                &format!("{base}{}", body.path),
                &body.headers,
                b.clone(),
            )
            .await;
            if n >= WARM_UP {
                times[i].push(took);
            }
        }
    }
    times
}

fn main() {
    let rounds = env_usize("PITH_BENCH_ROUNDS", 400);
    let modes = env_list("PITH_BENCH_MODES", "back-to-back,paced");
    let wanted_bodies = env_list("PITH_BENCH_BODIES", "claude,opencode,codex,long");
    let wanted_targets = env_list("PITH_BENCH_TARGETS", "pith,no-ledger,bare,before");

    let claude = capture(
        "claude-code-2.1.328/fix-calc/req006",
        "Claude Code req006, 56 KB",
    );
    let long = grown(&claude, 150, 8 * 1024);
    let mut bodies = Vec::new();
    for (key, body) in [
        ("claude", claude),
        (
            "opencode",
            capture(
                "opencode-1.18.33/anthropic-fix-calc/req003",
                "OpenCode req003, 31 KB",
            ),
        ),
        (
            "codex",
            capture(
                "codex-0.169.0/responses-fix-calc/req002",
                "Codex req002, 39 KB",
            ),
        ),
        ("long", long),
    ] {
        if wanted_bodies.iter().any(|w| w == key) {
            bodies.push(body);
        }
    }

    let mock = MockUpstream::start().expect("mock");
    mock.set_recording(false);
    let this = env!("CARGO_BIN_EXE_pith");
    let bare_env = [
        ("PITH_PINS", "off"),
        ("PITH_DEFER_TOOLS", "off"),
        ("PITH_HISTORY", "off"),
        ("PITH_TOOL_SEARCH_ROUND_TRIP", "off"),
    ];
    let mut targets = Vec::new();
    for want in &wanted_targets {
        match want.as_str() {
            "pith" => targets.push(start("pith", this, &mock.url(), &[], &[])),
            "no-ledger" => targets.push(start(
                "pith --no-ledger",
                this,
                &mock.url(),
                &["--no-ledger"],
                &[],
            )),
            "trim" => targets.push(start(
                "pith, outputs trimmed",
                this,
                &mock.url(),
                &[],
                &[("PITH_TRIM_OUTPUTS", "1")],
            )),
            // The hold-out's decision on every request, none held out (a share too small for
            // the bodies' openings): what deciding costs a transformed request.
            "holdout" => targets.push(start(
                "pith, hold-out deciding",
                this,
                &mock.url(),
                &[],
                &[("PITH_HOLDOUT", "0.000001")],
            )),
            // The provider asked to count every changed request (the worst case of
            // `[proxy] provider_counts`): what asking beside the request costs it.
            "counts" => targets.push(start(
                "pith, every change counted",
                this,
                &mock.url(),
                &[],
                &[("PITH_PROVIDER_COUNTS", "1")],
            )),
            "bare" => targets.push(start(
                "bare relay",
                this,
                &mock.url(),
                &["--no-ledger"],
                &bare_env,
            )),
            "before" => {
                if let Ok(bin) = std::env::var("PITH_BENCH_BEFORE") {
                    targets.push(start("build before", &bin, &mock.url(), &[], &[]));
                }
            }
            "bare-before" => {
                if let Ok(bin) = std::env::var("PITH_BENCH_BEFORE") {
                    targets.push(start(
                        "bare relay, build before",
                        &bin,
                        &mock.url(),
                        &["--no-ledger"],
                        &bare_env,
                    ));
                }
            }
            "haproxy" => targets.push(haproxy(&mock.url())),
            other => panic!("PITH_BENCH_TARGETS: unknown target {other}"),
        }
    }
    let idle: Vec<u64> = targets
        .iter()
        .map(|t| memory_kib(t.process.pid()).0 / 1024)
        .collect();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    for mode in &modes {
        let paced = match mode.as_str() {
            "back-to-back" => false,
            "paced" => true,
            other => panic!("PITH_BENCH_MODES: unknown mode {other}"),
        };
        println!();
        println!(
            "{mode}{}: concurrency 1, {rounds} requests per target and body after {WARM_UP} \
             to warm up, targets interleaved; the capture's headers; a new last message each \
             request; times in ms, added = target minus direct; CPU per request from /proc",
            if paced {
                " (a request every 10 ms)"
            } else {
                ""
            }
        );
        println!();
        println!(
            "| body | target | p50 | p99 | added p50 | added p99 | CPU µs/request, event loop | \
             other threads |"
        );
        println!("|---|---|---:|---:|---:|---:|---:|---:|");
        for body in &bodies {
            let cpu_before: Vec<_> = targets.iter().map(|t| cpu_us(t.process.pid())).collect();
            let times = rt.block_on(measure(&client, &mock.url(), &targets, body, rounds, paced));
            let sent = (rounds + WARM_UP) as u64;
            let cpu: Vec<(u64, u64)> = targets
                .iter()
                .zip(cpu_before)
                .map(|(t, (main, others))| {
                    let (main_after, others_after) = cpu_us(t.process.pid());
                    (
                        main_after.saturating_sub(main) / sent,
                        others_after.saturating_sub(others) / sent,
                    )
                })
                .collect();
            let (d50, d99) = (pct(&times[0], 0.5), pct(&times[0], 0.99));
            println!("| {} | direct | {d50:.3} | {d99:.3} | | | | |", body.name);
            for ((target, t), (main, others)) in targets.iter().zip(&times[1..]).zip(&cpu) {
                let (p50, p99) = (pct(t, 0.5), pct(t, 0.99));
                println!(
                    "| {} | {} | {p50:.3} | {p99:.3} | {:+.3} | {:+.3} | {main} | {others} |",
                    body.name,
                    target.name,
                    p50 - d50,
                    p99 - d99
                );
            }
        }
    }
    println!();
    for (target, idle) in targets.iter().zip(idle) {
        let (_, peak) = memory_kib(target.process.pid());
        println!(
            "{}: resident {idle} MiB idle, peak {} MiB",
            target.name,
            peak / 1024
        );
    }
    for target in targets {
        if let Process::Pith { mut child, .. } = target.process {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
