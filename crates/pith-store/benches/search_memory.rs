//! search_memory over a brain of 100,000 realistic memories (target: p50 at most 5 ms), with
//! the same search over 1,000 memories as the in-run baseline.
//!
//! The memories are generated deterministically (fixed-seed PRNG over a coding-agent
//! vocabulary: fixes with error headlines, failed attempts, decisions, notes, tags and evidence
//! files), stored through `Brain::save` in a real `.pith/brain.db` file. A search is the whole
//! `Brain::search` path: FTS5 BM25 ranking, the match count, loading the hits, crediting them
//! (a write transaction) and deriving each hit's status from its evidence files.
//!
//! Run: `cargo bench -p pith-store --bench search_memory`. Besides criterion's estimates it
//! prints per-call p50/p95/p99 over 2,000 timed searches per brain size.

use std::error::Error;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use pith_brain::{Brain, EvidenceSpec, Kind, NewMemory, Workspace};
use pith_store::brain::open_workspace_brain;
use pith_testkit::rng::Rng;

const VERBS: &[&str] = &[
    "Retry",
    "Fix",
    "Avoid",
    "Use",
    "Pin",
    "Cache",
    "Disable",
    "Bump",
    "Guard",
    "Split",
    "Batch",
    "Stream",
    "Validate",
    "Escape",
    "Reuse",
    "Drop",
    "Flush",
    "Bound",
    "Normalize",
    "Defer",
];
const COMPONENTS: &[&str] = &[
    "ledger writer",
    "sqlite pool",
    "proxy stream",
    "tokenizer cache",
    "hook runner",
    "config loader",
    "MCP server",
    "search index",
    "SSE decoder",
    "upstream client",
    "retry policy",
    "session store",
    "migration runner",
    "tool registry",
    "prompt cache",
    "request splicer",
    "usage parser",
    "dashboard route",
    "file watcher",
    "test fixture",
    "CI script",
    "release build",
    "error reporter",
    "rate limiter",
    "auth header",
];
const PROBLEMS: &[&str] = &[
    "on SQLITE_BUSY",
    "when the queue is full",
    "for large bodies",
    "on timeout",
    "after rewind",
    "with gzip responses",
    "under concurrent writers",
    "on Windows paths",
    "when stdin closes",
    "with unicode filenames",
    "on HTTP/2 resets",
    "for empty arrays",
    "when the cache is cold",
    "after a schema change",
    "with symlinked workspaces",
    "on partial UTF-8",
    "when the model is missing",
    "for streamed tool calls",
];
const WORDS: &[&str] = &[
    "connection",
    "timeout",
    "busy",
    "lock",
    "transaction",
    "retry",
    "backoff",
    "stream",
    "chunk",
    "buffer",
    "flush",
    "header",
    "body",
    "request",
    "response",
    "status",
    "error",
    "panic",
    "unwrap",
    "borrow",
    "lifetime",
    "async",
    "runtime",
    "tokio",
    "thread",
    "channel",
    "queue",
    "bounded",
    "drop",
    "count",
    "ledger",
    "token",
    "cache",
    "prefix",
    "breakpoint",
    "tool",
    "schema",
    "migration",
    "index",
    "query",
    "rank",
    "bm25",
    "snippet",
    "path",
    "symlink",
    "workspace",
    "gitignore",
    "glob",
    "regex",
    "literal",
    "config",
    "toml",
    "json",
    "serde",
    "field",
    "unknown",
    "default",
    "env",
    "variable",
    "flag",
    "test",
    "fixture",
    "snapshot",
    "insta",
    "proptest",
    "bench",
    "criterion",
    "latency",
    "p50",
    "throughput",
    "memory",
    "allocation",
    "clone",
    "arc",
    "mutex",
    "deadlock",
    "poison",
    "signal",
    "exit",
    "stdin",
    "stdout",
    "stderr",
    "log",
    "tracing",
    "span",
    "event",
    "filter",
    "level",
    "upstream",
    "provider",
    "anthropic",
    "openai",
    "responses",
    "messages",
    "completions",
    "usage",
    "input",
    "output",
    "cached",
    "billing",
    "price",
    "model",
    "session",
    "hook",
];
const TAGS: &[&str] = &[
    "sqlite",
    "proxy",
    "mcp",
    "hook",
    "ci",
    "tests",
    "perf",
    "windows",
    "macos",
    "linux",
    "streaming",
    "sse",
    "tokio",
    "serde",
    "config",
    "cache",
    "ledger",
    "search",
    "brain",
    "release",
    "security",
    "paths",
    "unicode",
    "http2",
    "gzip",
    "auth",
    "pricing",
    "schema",
    "migrations",
    "prefilter",
    "ollama",
    "tokenizer",
    "dashboard",
    "cli",
    "setup",
    "codex",
    "opencode",
    "claude-code",
    "docs",
    "build",
];
const HEADLINES: &[&str] = &[
    "database is locked",
    "error[E0502]: cannot borrow `state` as mutable because it is also borrowed as immutable",
    "connection reset by peer",
    "thread 'main' panicked at 'called `Option::unwrap()` on a `None` value'",
    "error: linking with `cc` failed: exit status: 1",
    "400 Bad Request: tools.3.cache_control: not allowed on deferred tools",
    "stream ended before message_stop",
    "error[E0277]: `Rc<RefCell<Conn>>` cannot be sent between threads safely",
    "invalid type: map, expected a sequence at line 1 column 2",
    "timed out waiting for the upstream after 30s",
    "No such file or directory (os error 2)",
    "FOREIGN KEY constraint failed",
];

const FILES: usize = 200;

fn file_name(i: usize) -> String {
    format!("src/mod{}/file{}.rs", i % 20, i)
}

fn make_workspace(dir: &Path) -> Result<Workspace, Box<dyn Error>> {
    std::fs::create_dir_all(dir.join(".git"))?;
    for i in 0..FILES {
        let path = dir.join(file_name(i));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let text: String = (0..40).map(|l| format!("fn f{i}_{l}() {{}}\n")).collect();
        std::fs::write(path, text)?;
    }
    Ok(Workspace::new(dir)?)
}

fn sentence(rng: &mut Rng) -> String {
    let n = 6 + rng.below(10);
    let words: Vec<&str> = (0..n).map(|_| rng.pick(WORDS)).collect();
    format!("{}.", words.join(" "))
}

fn memory(rng: &mut Rng) -> NewMemory {
    let kind = match rng.below(20) {
        0..=6 => Kind::Fix,
        7..=12 => Kind::Note,
        13..=16 => Kind::Failed,
        _ => Kind::Decision,
    };
    let title = format!(
        "{} {} {}",
        rng.pick(VERBS),
        rng.pick(COMPONENTS),
        rng.pick(PROBLEMS)
    );
    let body = (0..2 + rng.below(4))
        .map(|_| sentence(rng))
        .collect::<Vec<_>>()
        .join(" ");
    let tags = (0..1 + rng.below(3))
        .map(|_| rng.pick(TAGS).to_owned())
        .collect();
    let headline = matches!(kind, Kind::Fix | Kind::Failed).then(|| rng.pick(HEADLINES).to_owned());
    let evidence = (0..rng.below(3))
        .map(|_| {
            let start = 1 + rng.below(30) as u32;
            let path = file_name(rng.below(FILES));
            EvidenceSpec {
                path,
                lines: (rng.below(2) == 0).then_some(pith_brain::LineRange {
                    start,
                    end: start + rng.below(10) as u32,
                }),
            }
        })
        .collect();
    NewMemory {
        kind,
        title,
        body,
        tags,
        headline,
        evidence,
    }
}

fn queries(rng: &mut Rng) -> Vec<String> {
    (0..50)
        .map(|i| match i % 3 {
            0 => format!("{} {}", rng.pick(WORDS), rng.pick(WORDS)),
            1 => format!("{} {}", rng.pick(COMPONENTS), rng.pick(WORDS)),
            _ => rng.pick(HEADLINES).to_owned(),
        })
        .collect()
}

fn build(dir: &Path, count: usize) -> Result<Brain, Box<dyn Error>> {
    let ws = make_workspace(dir)?;
    let mut brain = open_workspace_brain(ws)?;
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let started = Instant::now();
    for _ in 0..count {
        brain.save(memory(&mut rng))?;
    }
    eprintln!(
        "built {count} memories in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(brain)
}

/// Per-call latency percentiles, measured directly.
fn percentiles(brain: &mut Brain, queries: &[String], label: &str) -> Result<(), Box<dyn Error>> {
    let mut times: Vec<Duration> = Vec::with_capacity(2000);
    let mut matched = 0u64;
    for i in 0..2000 {
        let q = &queries[i % queries.len()];
        let started = Instant::now();
        let found = brain.search(q, None, 5)?;
        times.push(started.elapsed());
        matched += found.total;
    }
    times.sort();
    let at = |p: usize| times[(times.len() * p / 100).min(times.len() - 1)];
    eprintln!(
        "{label}: p50 {:?}  p95 {:?}  p99 {:?}  (mean matches per query {})",
        at(50),
        at(95),
        at(99),
        matched / times.len() as u64
    );
    Ok(())
}

fn bench(c: &mut Criterion) {
    if let Err(e) = run(c) {
        eprintln!("search_memory bench failed: {e}");
        std::process::exit(1);
    }
}

fn run(c: &mut Criterion) -> Result<(), Box<dyn Error>> {
    let mut rng = Rng::new(0x0bad_5eed);
    let queries = queries(&mut rng);
    let mut group = c.benchmark_group("search_memory");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(10));
    for count in [1_000usize, 100_000] {
        let dir = tempfile::tempdir()?;
        let mut brain = build(dir.path(), count)?;
        if brain.search(&queries[0], None, 5)?.hits.is_empty() {
            return Err("generated brain does not match the queries".into());
        }
        percentiles(&mut brain, &queries, &format!("{count} memories"))?;
        let mut i = 0usize;
        group.bench_function(BenchmarkId::from_parameter(count), |b| {
            b.iter(|| {
                i += 1;
                black_box(brain.search(&queries[i % queries.len()], None, 5))
            })
        });
    }
    group.finish();
    Ok(())
}

criterion_group!(benches, bench);
criterion_main!(benches);
