//! The lexical file ranking's cost: `LexicalRanker::rank` over 200 candidates (the most a
//! ranker is given: `DEFAULT_MAX_RANK_CANDIDATES`), the first 200 matches of `timeout` in this
//! repository's own source, beside copying those candidates (the least any ranker does with
//! them) as the baseline. The benchmark thread's CPU time.
//!
//! `cargo bench -p pith-prefilter --bench fusion`
#![expect(
    clippy::unwrap_used,
    reason = "a benchmark over this repository's own files"
)]
#![expect(
    clippy::print_stdout,
    reason = "the candidates' count, printed for a person"
)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use pith_prefilter::fusion::LexicalRanker;
use pith_search::Ranker;
use pith_testkit::bench::ThreadCpu;

#[path = "support/candidates.rs"]
mod support;

use support::{INTENT, PATTERN};

fn bench(c: &mut Criterion<ThreadCpu>) {
    let candidates = support::candidates();
    let files: std::collections::BTreeSet<&str> =
        candidates.iter().map(|c| c.path.as_str()).collect();
    println!(
        "{} candidates in {} files ({PATTERN:?} in this repository)",
        candidates.len(),
        files.len()
    );
    let mut group = c.benchmark_group("fusion");
    group.bench_function("copy the candidates (baseline)", |b| {
        b.iter(|| black_box(&candidates).clone());
    });
    let lexical = LexicalRanker::default();
    group.bench_function("LexicalRanker::rank", |b| {
        b.iter(|| {
            lexical
                .rank(black_box(INTENT), black_box(&candidates), 10)
                .unwrap()
        });
    });
    group.finish();
}

fn config() -> Criterion<ThreadCpu> {
    Criterion::default().with_measurement(ThreadCpu)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench
}
criterion_main!(benches);
