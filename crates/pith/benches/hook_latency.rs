//! `pith hook`'s whole-process time, start to answer, as a host pays it on every tool call:
//! spawn the release binary, write the payload to its stdin, wait for it to exit with its
//! answer read. Target (issue 13): p50 at most 3 ms, p99 at most 10 ms, with a 10,000-memory
//! brain, on a Read and on a failing pytest payload.
//!
//! Cases, interleaved round by round so the machine's noise falls on all of them alike:
//! - `/bin/true` with the same stdin: the floor of spawning any process from here;
//! - `pith --version`: the binary's own start-up (loading, relocation, clap), no work;
//! - Claude Code's real Read payload on a file 12 memories cite (a note each time: every
//!   round is a new host session, so dedupe never short-cuts it);
//! - Claude Code's real failing-pytest payload (`PostToolUseFailure`): headline, BM25
//!   nomination over 3,500 fixes, overlap, a note naming the fix;
//! - the same Read in a session that already heard it (silence: the common case);
//! - a Read of a file no memory cites (silence).
//!
//! Wall time is what the host waits; CPU time (the process's scheduler run time) is also given,
//! as it moves less with other load on the machine.
//!
//! Run: `cargo bench -p pith --bench hook_latency` (env `HOOK_BENCH_ROUNDS`, default 400;
//! `HOOK_BENCH_DIR` builds the workspace there and keeps it, to look at it with other tools;
//! `HOOK_BENCH_PITH` names another `pith` binary to measure; `HOOK_BENCH_COMPARE` adds the same
//! cases for a second binary, interleaved with the first; `HOOK_BENCH_BRAIN` copies another
//! brain file of the same workspace over the one built, such as one an older pith built).
//! Binaries compared should sit in one directory: the same file under a deeper path started
//! 0.1 ms slower here.
#![expect(
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a bench stops loudly on a broken setup and reports by printing"
)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pith_brain::{EvidenceSpec, Kind, NewMemory, Workspace};
use pith_store::brain::open_workspace_brain;
use pith_testkit::fixtures::claude_code_hook_payloads;
use pith_testkit::rng::Rng;

const MEMORIES: usize = 10_000;
const FILES: usize = 200;

const WORDS: &[&str] = &[
    "parse", "config", "cache", "stream", "token", "retry", "timeout", "session", "ledger",
    "schema", "index", "query", "path", "unicode", "header", "body", "upstream", "usage", "price",
    "model", "hook", "queue", "lock", "buffer", "flush", "route", "login", "export", "import",
    "render", "invoice", "order", "user", "account", "report", "total", "discount",
];
const EXCEPTIONS: &[&str] = &[
    "KeyError",
    "ValueError",
    "TypeError",
    "AssertionError",
    "AttributeError",
    "ZeroDivisionError",
    "IndexError",
];

fn headline(rng: &mut Rng) -> String {
    match rng.below(4) {
        // Most like the payload's: pytest summaries sharing FAILED, test, py, assert.
        0 | 1 => format!(
            "FAILED tests/test_{}.py::test_{}_{} - assert {} == {}",
            rng.pick(WORDS),
            rng.pick(WORDS),
            rng.pick(WORDS),
            rng.below(100),
            rng.below(100)
        ),
        2 => format!(
            "FAILED tests/test_{}.py::test_{} - {}: '{}'",
            rng.pick(WORDS),
            rng.pick(WORDS),
            rng.pick(EXCEPTIONS),
            rng.pick(WORDS)
        ),
        _ => format!(
            "error[E0{}]: mismatched types in {}",
            300 + rng.below(400),
            rng.pick(WORDS)
        ),
    }
}

/// A workspace with `FILES` source files, `calc.py` and `test_calc.py`, and a brain of
/// `MEMORIES` memories saved through `Brain::save` (evidence hashed as in use).
fn build(root: &Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(root.join(".git"))?;
    std::fs::create_dir_all(root.join("src"))?;
    for i in 0..FILES {
        std::fs::write(root.join(format!("src/mod{i}.py")), format!("x = {i}\n"))?;
    }
    std::fs::write(root.join("calc.py"), "def add(a, b):\n    return a - b\n")?;
    std::fs::write(root.join("test_calc.py"), "from calc import add\n")?;
    std::fs::write(root.join("README.md"), "# calc\n")?;
    let mut brain = open_workspace_brain(Workspace::new(root)?)?;
    let mut rng = Rng::new(13);
    for i in 0..MEMORIES {
        let (kind, headline) = match rng.below(20) {
            0..=6 => (Kind::Fix, Some(headline(&mut rng))),
            7..=12 => (Kind::Note, None),
            13..=16 => (Kind::Failed, None),
            _ => (Kind::Decision, None),
        };
        // 12 memories cite calc.py; the rest cite the other files.
        let evidence = if i % (MEMORIES / 12) == 0 {
            "calc.py".to_owned()
        } else {
            format!("src/mod{}.py", rng.below(FILES))
        };
        let title = format!(
            "{} the {} {} when {}",
            rng.pick(&["Retry", "Guard", "Cache", "Split", "Escape", "Bound"]),
            rng.pick(WORDS),
            rng.pick(WORDS),
            rng.pick(WORDS)
        );
        brain.save(NewMemory {
            kind,
            title,
            body: format!(
                "{} {} {} {}.",
                rng.pick(WORDS),
                rng.pick(WORDS),
                rng.pick(WORDS),
                rng.pick(WORDS)
            ),
            tags: vec![rng.pick(WORDS).to_owned()],
            headline,
            evidence: vec![EvidenceSpec::parse(&evidence)?],
        })?;
    }
    // The fix the failing pytest payload is about.
    brain.save(NewMemory {
        kind: Kind::Fix,
        title: "add() subtracted: return a + b".into(),
        body: "The operator was wrong.".into(),
        tags: vec![],
        headline: Some("FAILED test_calc.py::test_add - assert -1 == 5".into()),
        evidence: vec![EvidenceSpec::parse("calc.py")?],
    })?;
    Ok(())
}

/// The segments of the brain's full-text index: each costs every query a seek.
fn index_segments(db: &Path) -> i64 {
    rusqlite::Connection::open(db)
        .and_then(|c| {
            c.query_row(
                "SELECT count(DISTINCT segid) FROM memories_fts_idx",
                [],
                |r| r.get(0),
            )
        })
        .expect("the brain's index")
}

/// One timed run of `program args` with `input` on stdin: the wall time from spawn to exit,
/// the CPU time the process used (its scheduler run time, read from `/proc/<pid>/schedstat`
/// once it has exited and before it is reaped; zero where there is none), and its stdout.
fn run(program: &str, args: &[&str], input: &[u8]) -> (Duration, Duration, Vec<u8>) {
    use std::io::Read;
    let start = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .env("PITH_HOME", PITH_HOME.get().expect("PITH_HOME set in main"))
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        // `true` exits without reading: a closed pipe is expected there.
        let _ = stdin.write_all(input);
    }
    let mut out = Vec::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_end(&mut out);
    }
    // Exited (its stdout closed) but not yet reaped: its accounting is still readable.
    while running(child.id()) {
        std::thread::yield_now();
    }
    let cpu = cpu_time(child.id()).unwrap_or_default();
    let _ = child.wait();
    (start.elapsed(), cpu, out)
}

fn cpu_time(pid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Whether `pid` still runs (not a zombie).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

struct Case {
    name: String,
    program: String,
    args: Vec<&'static str>,
    /// The payload for round `r`.
    input: Box<dyn Fn(usize) -> Vec<u8>>,
    /// Whether the answer must be a note (checked every round, so a silent regression cannot
    /// pass for a fast one).
    speaks: Option<bool>,
    times: Vec<Duration>,
    cpu: Vec<Duration>,
}

/// The PITH_HOME every run shares, as a user's hook calls do: it records the brain built as
/// the user's own ([`pith_brain::origin`]), so the note is the one a user's own brain gives.
static PITH_HOME: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let rounds: usize = std::env::var("HOOK_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(400);
    // `HOOK_BENCH_PITH` measures another build of the binary with the same harness.
    let pith =
        std::env::var("HOOK_BENCH_PITH").unwrap_or_else(|_| env!("CARGO_BIN_EXE_pith").to_owned());
    let dir = tempfile::tempdir().expect("temp dir");
    let root = match std::env::var_os("HOOK_BENCH_DIR") {
        Some(kept) => {
            let kept = std::path::PathBuf::from(kept);
            let _ = std::fs::remove_dir_all(&kept);
            std::fs::create_dir_all(&kept).expect("HOOK_BENCH_DIR");
            kept.canonicalize().expect("canonical HOOK_BENCH_DIR")
        }
        None => dir.path().canonicalize().expect("canonical temp dir"),
    };
    let started = Instant::now();
    build(&root).expect("build the brain");
    let db = root.join(".pith/brain.db");
    let home = tempfile::tempdir().expect("temp dir");
    PITH_HOME.get_or_init(|| home.path().to_owned());
    // `HOOK_BENCH_BRAIN` measures another brain file of the same workspace (one an older
    // pith built, say) in place of the one just built.
    if let Some(other) = std::env::var_os("HOOK_BENCH_BRAIN") {
        std::fs::copy(other, &db).expect("HOOK_BENCH_BRAIN");
    }
    pith_brain::origin::Origins::new(home.path())
        .remember(&root)
        .expect("record the brain as the user's");
    eprintln!(
        "built a {MEMORIES}-memory brain in {:.1?} ({} KiB, its full-text index in {} segments)",
        started.elapsed(),
        std::fs::metadata(&db).map(|m| m.len() / 1024).unwrap_or(0),
        index_segments(&db)
    );

    let payloads = claude_code_hook_payloads().expect("the capture's hook payloads");
    let at_root = |i: usize| payloads[i].replace("/home/dev/calc", root.to_str().unwrap_or(""));
    let with_session = |payload: String, session: String| -> Vec<u8> {
        let mut v: serde_json::Value = serde_json::from_str(&payload).expect("payload");
        v["session_id"] = session.into();
        v.to_string().into_bytes()
    };
    let failure = at_root(1);
    let read = at_root(2);
    let uncited = read.replace("/calc.py", "/README.md");
    let mut cases = vec![Case {
        name: "/bin/true (baseline)".into(),
        program: "/bin/true".into(),
        args: vec![],
        input: Box::new({
            let read = read.clone();
            move |_| read.clone().into_bytes()
        }),
        speaks: None,
        times: vec![],
        cpu: vec![],
    }];
    // `HOOK_BENCH_COMPARE` adds the same cases for a second binary, interleaved with the first.
    let mut binaries = vec![(String::new(), pith.clone())];
    if let Ok(other) = std::env::var("HOOK_BENCH_COMPARE") {
        binaries.push(("[compare] ".to_owned(), other));
    }
    for (tag, bin) in &binaries {
        let (f, r, r2, u) = (failure.clone(), read.clone(), read.clone(), uncited.clone());
        let tagged = tag.clone();
        let with = move |payload: String, session: String| {
            with_session(payload, format!("{tagged}{session}"))
        };
        let (w1, w2, w3, w4) = (with.clone(), with.clone(), with.clone(), with);
        cases.extend([
            Case {
                name: format!("{tag}pith --version (start-up only)"),
                program: bin.clone(),
                args: vec!["--version"],
                input: Box::new(|_| Vec::new()),
                speaks: None,
                times: vec![],
                cpu: vec![],
            },
            Case {
                name: format!("{tag}Read, 12 memories on the file: note"),
                program: bin.clone(),
                args: vec!["hook"],
                input: Box::new(move |round| w1(r.clone(), format!("read-{round}"))),
                speaks: Some(true),
                times: vec![],
                cpu: vec![],
            },
            Case {
                name: format!("{tag}failing pytest: fix note"),
                program: bin.clone(),
                args: vec!["hook"],
                input: Box::new(move |round| w2(f.clone(), format!("fail-{round}"))),
                speaks: Some(true),
                times: vec![],
                cpu: vec![],
            },
            Case {
                name: format!("{tag}Read already noted this session: silence"),
                program: bin.clone(),
                args: vec!["hook"],
                input: Box::new(move |_| w3(r2.clone(), "repeat".into())),
                speaks: None,
                times: vec![],
                cpu: vec![],
            },
            Case {
                name: format!("{tag}Read of a file no memory cites: silence"),
                program: bin.clone(),
                args: vec!["hook"],
                input: Box::new(move |round| w4(u.clone(), format!("none-{round}"))),
                speaks: Some(false),
                times: vec![],
                cpu: vec![],
            },
        ]);
    }
    // One warm-up round (page cache, the first session directory).
    for case in &mut cases {
        let _ = run(&case.program, &case.args, &(case.input)(usize::MAX));
    }
    for round in 0..rounds {
        for case in &mut cases {
            let (elapsed, cpu, out) = run(&case.program, &case.args, &(case.input)(round));
            if let Some(speaks) = case.speaks {
                assert_eq!(
                    !out.is_empty(),
                    speaks,
                    "{}: round {round} answered {:?}",
                    case.name,
                    String::from_utf8_lossy(&out)
                );
            }
            case.times.push(elapsed);
            case.cpu.push(cpu);
        }
    }
    let size = std::fs::metadata(&pith).map(|m| m.len()).unwrap_or(0);
    println!(
        "pith hook, whole process, {rounds} rounds, {MEMORIES} memories; binary {:.1} MiB; {} cores",
        size as f64 / (1024.0 * 1024.0),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!("| case | p50 ms | p90 ms | p99 ms | max ms | CPU p50 ms | CPU p99 ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for case in &mut cases {
        case.times.sort();
        case.cpu.sort();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            case.name,
            ms(percentile(&case.times, 0.5)),
            ms(percentile(&case.times, 0.9)),
            ms(percentile(&case.times, 0.99)),
            ms(percentile(&case.times, 1.0)),
            ms(percentile(&case.cpu, 0.5)),
            ms(percentile(&case.cpu, 0.99))
        );
    }
}
