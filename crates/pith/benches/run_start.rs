//! What `pith run` adds before the client starts (issue 16: goal under 10 ms with a proxy
//! already running, under 300 ms with none, the proxy's start included).
//!
//! Cases, interleaved round by round so the machine's noise falls on all of them alike, each
//! the whole process from spawn to exit:
//! - `true` as the client, run directly and through `pith run` (it is `claude` on PATH): the
//!   difference is pith's own time (probe, locks, wiring, exec), with nothing of the client's;
//! - the same through `pith run` with no proxy running: the round first stops the proxy the
//!   round before started, so the time includes finding none, starting one detached and its
//!   first health answer;
//! - the real `claude --version` (Claude Code 2.1.328 from scripts/test's `.cache`, or
//!   `RUN_BENCH_CLAUDE`), directly and through `pith run` with a proxy running.
//!
//! Run: `cargo bench -p pith --bench run_start` (env `RUN_BENCH_ROUNDS`, default 100).
#![expect(
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a bench stops loudly on a broken setup and reports by printing"
)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// The pid in `/pith/health` on `addr`, if pith answers (its details need a loopback name).
fn proxy_pid(addr: SocketAddr) -> Option<u64> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    s.write_all(b"GET /pith/health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    let body = reply.split_once("\r\n\r\n")?.1;
    serde_json::from_str::<serde_json::Value>(body).ok()?["pid"].as_u64()
}

/// Stop the proxy on `addr` and wait until its port is free.
fn stop_proxy(addr: SocketAddr) {
    if let Some(pid) = proxy_pid(addr) {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the proxy on {addr} did not stop"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

struct Case {
    name: &'static str,
    program: PathBuf,
    args: Vec<&'static str>,
    /// Stop the shared proxy before each run.
    cold: bool,
    times: Vec<Duration>,
}

fn main() {
    let rounds: usize = std::env::var("RUN_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(100);
    let pith = PathBuf::from(env!("CARGO_BIN_EXE_pith"));
    let claude = std::env::var_os("RUN_BENCH_CLAUDE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../.cache/claude-code/node_modules/.bin/claude")
        });
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("pith-home");
    let addr = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    // `claude` on PATH: `true` for the pith-only cases, the real one for the others.
    let stub_bin = dir.path().join("stub");
    let real_bin = dir.path().join("real");
    std::fs::create_dir_all(&stub_bin).expect("stub dir");
    std::fs::create_dir_all(&real_bin).expect("real dir");
    let true_path = which("true").expect("true on PATH");
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&true_path, stub_bin.join("claude")).expect("stub link");
        std::os::unix::fs::symlink(&claude, real_bin.join("claude")).expect("claude link");
    }
    let path = |first: &Path| {
        let mut dirs = vec![first.to_path_buf()];
        dirs.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        std::env::join_paths(dirs).expect("PATH")
    };
    let stub_path = path(&stub_bin);
    let real_path = path(&real_bin);
    let has_claude = claude.exists();

    let mut cases = vec![
        Case {
            name: "`true` directly (baseline)",
            program: true_path.clone(),
            args: vec![],
            cold: false,
            times: vec![],
        },
        Case {
            name: "`pith run` of `true`, proxy running",
            program: pith.clone(),
            args: vec!["run", "claude", "--version"],
            cold: false,
            times: vec![],
        },
        Case {
            name: "`pith run` of `true`, no proxy running (starts one)",
            program: pith.clone(),
            args: vec!["run", "claude", "--version"],
            cold: true,
            times: vec![],
        },
    ];
    if has_claude {
        cases.extend([
            Case {
                name: "`claude --version` directly",
                program: claude.clone(),
                args: vec!["--version"],
                cold: false,
                times: vec![],
            },
            Case {
                name: "`pith run claude --version`, proxy running",
                program: pith.clone(),
                args: vec!["run", "claude", "--version"],
                cold: false,
                times: vec![],
            },
        ]);
    } else {
        eprintln!(
            "{} is missing (run scripts/test once, or set RUN_BENCH_CLAUDE): real-client cases skipped",
            claude.display()
        );
    }
    let run = |case: &Case| -> Duration {
        let mut cmd = Command::new(&case.program);
        cmd.args(&case.args)
            .env("PITH_HOME", &home)
            .env("PITH_LISTEN", addr.to_string())
            .env("PITH_IDLE_STOP", "10m")
            .env_remove("PITH_CONFIG")
            .env_remove("ANTHROPIC_BASE_URL")
            .env(
                "PATH",
                if case.name.contains("claude") {
                    &real_path
                } else {
                    &stub_path
                },
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let start = Instant::now();
        let out = cmd.output().expect("spawn");
        let elapsed = start.elapsed();
        assert!(
            out.status.success(),
            "{}: {}",
            case.name,
            String::from_utf8_lossy(&out.stderr)
        );
        // Through pith, the client must have gone through the proxy (no notice).
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("straight to its provider"),
            "{}: {}",
            case.name,
            String::from_utf8_lossy(&out.stderr)
        );
        elapsed
    };
    // Warm-up: page cache, the proxy's files.
    for case in &cases {
        if case.cold {
            stop_proxy(addr);
        }
        let _ = run(case);
    }
    for _ in 0..rounds {
        for case in &mut cases {
            if case.cold {
                stop_proxy(addr);
            }
            let t = run(case);
            case.times.push(t);
        }
    }
    stop_proxy(addr);
    println!(
        "pith run, whole process, {rounds} rounds; {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!("| case | p50 ms | p90 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|");
    for case in &mut cases {
        case.times.sort();
        println!(
            "| {} | {} | {} | {} | {} |",
            case.name,
            ms(percentile(&case.times, 0.5)),
            ms(percentile(&case.times, 0.9)),
            ms(percentile(&case.times, 0.99)),
            ms(percentile(&case.times, 1.0)),
        );
    }
    let p50 = |name: &str| {
        cases
            .iter()
            .find(|c| c.name == name)
            .map(|c| percentile(&c.times, 0.5))
    };
    println!();
    if let (Some(base), Some(warm), Some(cold)) = (
        p50("`true` directly (baseline)"),
        p50("`pith run` of `true`, proxy running"),
        p50("`pith run` of `true`, no proxy running (starts one)"),
    ) {
        println!(
            "added by pith run (p50 over `true`): {} ms with a proxy running (goal < 10), {} ms with none (goal < 300)",
            ms(warm.saturating_sub(base)),
            ms(cold.saturating_sub(base))
        );
    }
    if let (Some(direct), Some(through)) = (
        p50("`claude --version` directly"),
        p50("`pith run claude --version`, proxy running"),
    ) {
        println!(
            "claude --version: {} ms directly, {} ms through pith run (ratio {:.3})",
            ms(direct),
            ms(through),
            through.as_secs_f64() / direct.as_secs_f64()
        );
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
