//! search_history over 10,000 conversations (target: p50 under 10 ms), with the same searches
//! over 100 conversations as the in-run baseline.
//!
//! The conversations are generated deterministically (fixed-seed PRNG): 4 to 24 messages each
//! (a typed prompt, then assistant text and tool calls, tool results with code and paths),
//! words drawn with a skewed (Zipf-like) distribution from 6,000 generated words and a coding
//! vocabulary, so common words sit in most messages and rare ones in few, as in real sessions.
//! They are stored through `History::import` in a real SQLite file. A search is the whole
//! `History::search` path the MCP tool and the CLI take: the postings of each query term,
//! the account's conversation lengths, BM25 in Rust, the snippet.
//!
//! Run: `cargo bench -p pith-store --bench history_search`. Besides criterion's estimates it
//! prints per-call p50/p95/p99 over 2,000 timed searches per size.

use std::error::Error;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use pith_history::import::Imported;
use pith_history::{AgentType, NewMessage};
use pith_store::history::History;
use pith_testkit::rng::Rng;

const CODING: &[&str] = &[
    "test",
    "fails",
    "error",
    "fix",
    "cargo",
    "build",
    "assert",
    "panic",
    "thread",
    "timeout",
    "sqlite",
    "busy",
    "retry",
    "proxy",
    "stream",
    "header",
    "session",
    "cache",
    "token",
    "config",
    "path",
    "file",
    "function",
    "return",
    "value",
    "struct",
    "impl",
    "trait",
    "async",
    "await",
    "tokio",
    "hyper",
    "request",
    "response",
    "json",
    "parse",
    "serde",
    "migration",
    "schema",
    "index",
    "query",
    "ledger",
    "hook",
    "memory",
    "search",
    "workspace",
    "commit",
    "branch",
    "merge",
    "rebase",
    "lint",
    "clippy",
    "format",
    "deploy",
    "docker",
    "python",
    "pytest",
    "calc",
    "add",
    "subtract",
    "module",
    "import",
    "export",
    "npm",
    "node",
    "react",
];
const SYLLABLES: &[&str] = &[
    "ka", "lo", "mi", "zen", "tor", "pa", "ri", "sto", "vel", "an", "qu", "ex", "dra", "fi", "ul",
    "mo", "ne", "sa", "bri", "cor", "dun", "gal", "hex", "jor",
];
const GENERATED: usize = 6_000;

struct Vocabulary {
    words: Vec<String>,
}

impl Vocabulary {
    fn new(rng: &mut Rng) -> Vocabulary {
        let mut words: Vec<String> = CODING.iter().map(|w| (*w).to_owned()).collect();
        while words.len() < CODING.len() + GENERATED {
            let n = 2 + rng.below(3);
            let w: String = (0..n).map(|_| rng.pick(SYLLABLES)).collect();
            if !words.contains(&w) {
                words.push(w);
            }
        }
        Vocabulary { words }
    }

    /// A word, skewed towards the start of the list (the common ones).
    fn word(&self, rng: &mut Rng) -> &str {
        let u = (rng.below(1_000_000) as f64) / 1_000_000.0;
        let at = ((self.words.len() as f64) * u * u * u) as usize;
        &self.words[at.min(self.words.len() - 1)]
    }

    fn text(&self, rng: &mut Rng, words: usize) -> String {
        (0..words)
            .map(|_| self.word(rng).to_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn conversation(vocabulary: &Vocabulary, rng: &mut Rng, i: usize) -> Imported {
    let messages = 4 + rng.below(21);
    let mut out = Vec::with_capacity(messages);
    for m in 0..messages {
        let (role, words) = match m % 2 {
            0 if m == 0 => ("user", 8 + rng.below(30)),
            0 => ("user", 20 + rng.below(200)),
            _ => ("assistant", 10 + rng.below(80)),
        };
        let text = vocabulary.text(rng, words);
        out.push(NewMessage {
            role: role.into(),
            real_user: m == 0,
            typed: if m == 0 { text.clone() } else { String::new() },
            text,
            ts_ms: 1_800_000_000_000 + (i * 100 + m) as i64,
            outputs: Vec::new(),
        });
    }
    Imported {
        session_id: format!("session-{i}"),
        client: "claude-code",
        started_ms: 1_800_000_000_000 + i as i64 * 100,
        messages: out,
    }
}

fn queries(vocabulary: &Vocabulary, rng: &mut Rng) -> Vec<String> {
    (0..50)
        .map(|i| match i % 3 {
            0 => format!("{} {}", rng.pick(CODING), rng.pick(CODING)),
            1 => format!("{} {}", rng.pick(CODING), vocabulary.word(rng)),
            _ => format!(
                "{} {} {}",
                vocabulary.word(rng),
                vocabulary.word(rng),
                vocabulary.word(rng)
            ),
        })
        .collect()
}

fn build(
    dir: &std::path::Path,
    vocabulary: &Vocabulary,
    count: usize,
) -> Result<History, Box<dyn Error>> {
    let mut history = History::open(&dir.join("history.db"))?;
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let started = Instant::now();
    let mut messages = 0;
    for i in 0..count {
        let c = conversation(vocabulary, &mut rng, i);
        messages += c.messages.len();
        history.import("local", AgentType::Public, &c)?;
    }
    eprintln!(
        "built {count} conversations ({messages} messages) in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(history)
}

fn percentiles(history: &History, queries: &[String], label: &str) -> Result<(), Box<dyn Error>> {
    let mut times: Vec<Duration> = Vec::with_capacity(2000);
    let mut found = 0usize;
    for i in 0..2000 {
        let q = &queries[i % queries.len()];
        let started = Instant::now();
        let hits = history.search("local", q, 10)?;
        times.push(started.elapsed());
        found += hits.len();
    }
    times.sort();
    let at = |p: usize| times[(times.len() * p / 100).min(times.len() - 1)];
    eprintln!(
        "{label}: p50 {:?}  p95 {:?}  p99 {:?}  (mean hits per query {})",
        at(50),
        at(95),
        at(99),
        found / times.len()
    );
    Ok(())
}

fn bench(c: &mut Criterion) {
    if let Err(e) = run(c) {
        eprintln!("history_search bench failed: {e}");
        std::process::exit(1);
    }
}

fn run(c: &mut Criterion) -> Result<(), Box<dyn Error>> {
    let mut rng = Rng::new(0x0bad_5eed);
    let vocabulary = Vocabulary::new(&mut rng);
    let queries = queries(&vocabulary, &mut rng);
    let mut group = c.benchmark_group("search_history");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(10));
    for count in [100usize, 10_000] {
        let dir = tempfile::tempdir()?;
        let history = build(dir.path(), &vocabulary, count)?;
        if history.search("local", &queries[0], 10)?.is_empty() {
            return Err("generated history does not match the queries".into());
        }
        percentiles(&history, &queries, &format!("{count} conversations"))?;
        let mut i = 0usize;
        group.bench_function(BenchmarkId::from_parameter(count), |b| {
            b.iter(|| {
                i += 1;
                black_box(history.search("local", &queries[i % queries.len()], 10))
            })
        });
    }
    group.finish();
    Ok(())
}

criterion_group!(benches, bench);
criterion_main!(benches);
