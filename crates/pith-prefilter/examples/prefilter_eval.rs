//! Does the local prefilter help? Runs broad searches over real source trees through the same
//! path `pith mcp` takes (`search_workspace` with a `ModelRanker`, or with `--ranker lexical`
//! the `fusion::LexicalRanker`, `--per-file N` lines a file, `--fusion k=60,path=1,...` its
//! weights; `--no-intent` searches without the queries' intents, as an agent that gives none)
//! and measures, against files marked by hand as the ones that answer each search:
//!
//! - recall: the share of a query's answer files that appear in what the agent is shown, for
//!   the ranked prefix, for the plain first page (what it sees without ranking), for a
//!   path-order prefix as long as the ranked one (the same budget without a model), and for
//!   one line a file in path order, as many files as lines shown (what one line a file gives
//!   with no ranking);
//! - context: characters of the reply ranked and plain, and estimated tokens (characters / 4);
//! - how long each ranking took, and every ranking that failed open, with its reason.
//!
//! `scripts/eval/prefilter/run` installs and starts a model server and runs this; by hand:
//!
//! ```text
//! cargo run --release -p pith-prefilter --example prefilter_eval -- \
//!     --queries scripts/eval/prefilter/queries.toml --tree pith=DIR --tree tokio=DIR \
//!     --api openai --url http://127.0.0.1:8090 --model smollm2-135m --shown 10,20
//! ```
#![expect(clippy::print_stdout, reason = "a report printed for a person")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use pith_prefilter::fusion::{Fusion, LexicalRanker};
use pith_prefilter::local::LocalModelRanker;
use pith_prefilter::{Api, ModelRanker, PrefilterConfig};
use pith_search::{RankPolicy, Ranking, SearchReport, SearchRequest, search_workspace};
use pith_transform::estimated_tokens;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryFile {
    query: Vec<Query>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Query {
    tree: String,
    pattern: String,
    intent: String,
    #[serde(default)]
    case_insensitive: bool,
    /// Files that answer the search, marked by hand (paths relative to the tree).
    answers: Vec<String>,
}

struct Args {
    /// `model` (through a server) or `lexical` (`fusion::LexicalRanker`, no model).
    ranker: String,
    per_file: usize,
    fusion: Fusion,
    /// Search without the queries' intents (the ranker then ranks by the pattern).
    no_intent: bool,
    queries: PathBuf,
    trees: BTreeMap<String, PathBuf>,
    api: Api,
    url: Option<String>,
    model: String,
    shown: Vec<usize>,
    timeout: Duration,
    only: Option<String>,
    /// The in-process model's directory (`--ranker local`).
    model_dir: Option<PathBuf>,
    /// ONNX Runtime's threads (`--ranker local`).
    threads: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        ranker: "model".to_owned(),
        per_file: pith_prefilter::fusion::DEFAULT_LINES_PER_FILE,
        fusion: Fusion::default(),
        no_intent: false,
        queries: PathBuf::from("scripts/eval/prefilter/queries.toml"),
        trees: BTreeMap::new(),
        api: Api::OpenAi,
        url: None,
        model: String::new(),
        shown: vec![10, 20],
        model_dir: None,
        threads: 2,
        timeout: Duration::from_secs(120),
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--queries" => args.queries = PathBuf::from(value()?),
            "--tree" => {
                let v = value()?;
                let (name, dir) = v
                    .split_once('=')
                    .ok_or_else(|| format!("--tree {v}: use NAME=DIR"))?;
                args.trees.insert(name.to_owned(), PathBuf::from(dir));
            }
            "--api" => {
                let v = value()?;
                args.api =
                    Api::from_name(&v).ok_or_else(|| format!("--api {v}: ollama or openai"))?;
            }
            "--url" => args.url = Some(value()?),
            "--model" => args.model = value()?,
            "--shown" => {
                args.shown = value()?
                    .split(',')
                    .map(|n| n.trim().parse().map_err(|_| format!("--shown: {n:?}")))
                    .collect::<Result<_, _>>()?;
            }
            "--timeout-ms" => {
                let v = value()?;
                args.timeout =
                    Duration::from_millis(v.parse().map_err(|_| format!("--timeout-ms {v}"))?);
            }
            "--only" => args.only = Some(value()?),
            "--ranker" => args.ranker = value()?,
            "--model-dir" => args.model_dir = Some(PathBuf::from(value()?)),
            "--threads" => {
                let v = value()?;
                args.threads = v.parse().map_err(|_| format!("--threads {v}"))?;
            }
            "--no-intent" => args.no_intent = true,
            "--per-file" => {
                let v = value()?;
                args.per_file = v.parse().map_err(|_| format!("--per-file {v}"))?;
            }
            "--fusion" => {
                // k=60,path=1,line=1,density=1,order=1,more=1 (any of them)
                for pair in value()?.split(',') {
                    let (key, v) = pair
                        .split_once('=')
                        .ok_or_else(|| format!("--fusion {pair}: use NAME=NUMBER"))?;
                    let v: f64 = v.parse().map_err(|_| format!("--fusion {pair}"))?;
                    let f = &mut args.fusion;
                    *match key {
                        "k" => &mut f.k,
                        "path" => &mut f.path,
                        "line" => &mut f.line,
                        "density" => &mut f.density,
                        "order" => &mut f.order,
                        "more" => &mut f.more,
                        other => return Err(format!("--fusion: no weight {other}")),
                    } = v;
                }
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.model.is_empty() && args.ranker == "model" {
        return Err("--model is required (or --ranker lexical)".into());
    }
    Ok(args)
}

/// Distinct files among the shown matches.
fn files(report: &SearchReport) -> BTreeSet<&str> {
    report.matches.iter().map(|m| m.path.as_str()).collect()
}

fn recall(shown: &BTreeSet<&str>, answers: &[String]) -> f64 {
    let found = answers
        .iter()
        .filter(|a| shown.contains(a.as_str()))
        .count();
    found as f64 / answers.len() as f64
}

#[derive(Default)]
struct Totals {
    queries: usize,
    ranked: usize,
    recall_ranked: f64,
    recall_prefix: f64,
    recall_files: f64,
    recall_page: f64,
    chars_ranked: usize,
    chars_page: usize,
    millis: Vec<u128>,
    failures: BTreeMap<String, usize>,
}

/// An error and its causes, joined by `: `.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn main() -> Result<(), String> {
    let args = parse_args()?;
    let text = std::fs::read_to_string(&args.queries)
        .map_err(|e| format!("{}: {e}", args.queries.display()))?;
    let file: QueryFile =
        toml::from_str(&text).map_err(|e| format!("{}: {e}", args.queries.display()))?;
    let queries: Vec<&Query> = file
        .query
        .iter()
        .filter(|q| args.only.as_deref().is_none_or(|t| q.tree == t))
        .collect();
    for q in &queries {
        let root = args
            .trees
            .get(&q.tree)
            .ok_or_else(|| format!("no --tree {}=DIR", q.tree))?;
        for answer in &q.answers {
            if !root.join(answer).is_file() {
                return Err(format!("{}: answer {answer} is not a file", q.tree));
            }
        }
    }

    let config = PrefilterConfig {
        enabled: true,
        api: args.api,
        url: args.url.clone(),
        model: args.model.clone(),
        timeout: args.timeout,
        load_timeout: Duration::from_secs(600),
        ..PrefilterConfig::default()
    };
    let lexical = LexicalRanker {
        per_file: args.per_file,
        fusion: args.fusion,
    };
    let local = match (args.ranker.as_str(), &args.model_dir) {
        ("local", Some(dir)) => {
            let ranker = LocalModelRanker::with(dir.clone(), args.timeout, args.threads, lexical);
            let started = Instant::now();
            ranker.load()?;
            println!(
                "{}, loaded in {} ms, {} threads, fused with the lexical signals ({:?}), {} lines a file. {} queries.\n",
                pith_search::Ranker::name(&ranker),
                started.elapsed().as_millis(),
                args.threads,
                args.fusion,
                args.per_file,
                queries.len()
            );
            Some(ranker)
        }
        ("local", None) => return Err("--ranker local needs --model-dir DIR".into()),
        _ => None,
    };
    let model = match args.ranker.as_str() {
        "model" => {
            let ranker = ModelRanker::new(config.clone()).map_err(|e| e.to_string())?;
            let started = Instant::now();
            ranker
                .load()
                .map_err(|e| format!("the model server is not ready: {}", chain(&*e)))?;
            println!(
                "Model {} over {} at {}, loaded in {} ms. {} queries.\n",
                args.model,
                args.api.label(),
                config.base_url(),
                started.elapsed().as_millis(),
                queries.len()
            );
            Some(ranker)
        }
        "lexical" => {
            println!(
                "Lexical file ranking (no model), {} lines a file, {:?}. {} queries.\n",
                args.per_file,
                args.fusion,
                queries.len()
            );
            None
        }
        "local" => None,
        other => return Err(format!("--ranker {other}: model, lexical or local")),
    };
    let ranker: &dyn pith_search::Ranker = match (&model, &local) {
        (Some(m), _) => m,
        (None, Some(l)) => l,
        (None, None) => &lexical,
    };

    let mut totals: BTreeMap<usize, Totals> = BTreeMap::new();
    println!(
        "| tree | pattern | matches | answers | shown | recall ranked | recall path-order prefix | recall first files, a line each | recall plain page | chars ranked | chars plain page | ms | failed open |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for q in &queries {
        let root = &args.trees[&q.tree];
        let req = SearchRequest {
            case_insensitive: q.case_insensitive,
            intent: (!args.no_intent).then(|| q.intent.clone()),
            ..SearchRequest::new(q.pattern.clone())
        };
        let plain = search_workspace(root, &req, None, RankPolicy::default())
            .map_err(|e| format!("{}: {e}", q.pattern))?;
        let everything = search_workspace(
            root,
            &SearchRequest {
                all: true,
                max_results: pith_search::MAX_RESULTS_LIMIT,
                ..req.clone()
            },
            None,
            RankPolicy::default(),
        )
        .map_err(|e| format!("{}: {e}", q.pattern))?;
        let page_files = files(&plain);
        for &shown in &args.shown {
            // Threshold 0: every query is ranked here; which sizes deserve ranking is read off
            // the per-query table.
            let policy = RankPolicy {
                threshold: 0,
                shown,
            };
            let t = Instant::now();
            let ranked = search_workspace(root, &req, Some(ranker), policy)
                .map_err(|e| format!("{}: {e}", q.pattern))?;
            let ms = t.elapsed().as_millis();
            let prefix: BTreeSet<&str> = everything
                .matches
                .iter()
                .take(shown)
                .map(|m| m.path.as_str())
                .collect();
            // One line a file in path order, as many files as lines shown: what showing one
            // line a file alone gives, with no ranking.
            let mut first_files: Vec<&str> = Vec::new();
            for m in &everything.matches {
                if first_files.len() == shown {
                    break;
                }
                if !first_files.contains(&m.path.as_str()) {
                    first_files.push(&m.path);
                }
            }
            let first_files: BTreeSet<&str> = first_files.into_iter().collect();
            let total = totals.entry(shown).or_default();
            total.queries += 1;
            let r_files = recall(&first_files, &q.answers);
            total.recall_files += r_files;
            let r_prefix = recall(&prefix, &q.answers);
            let r_page = recall(&page_files, &q.answers);
            let chars_page = plain.render().chars().count();
            let chars_ranked = ranked.render().chars().count();
            total.recall_prefix += r_prefix;
            total.recall_page += r_page;
            total.chars_page += chars_page;
            let (r_ranked, failed) = match &ranked.ranking {
                Ranking::Ranked { .. } => {
                    total.ranked += 1;
                    total.millis.push(ms);
                    (recall(&files(&ranked), &q.answers), String::new())
                }
                Ranking::FailedOpen { reason, .. } => {
                    let kind = reason.split(':').take(2).collect::<Vec<_>>().join(":");
                    *total.failures.entry(kind).or_default() += 1;
                    // A timeout starts a warm-up in the background; wait for it here, so the
                    // next query finds the model ready as a later search would.
                    if let Some(Err(err)) = model.as_ref().map(ModelRanker::load) {
                        return Err(format!("the model server went away: {}", chain(&*err)));
                    }
                    // Failed open: the agent sees the plain page.
                    (r_page, reason.clone())
                }
                Ranking::NotApplied => (r_page, "not applied".to_owned()),
            };
            total.recall_ranked += r_ranked;
            total.chars_ranked += chars_ranked;
            println!(
                "| {} | `{}` | {} | {} | {shown} | {:.2} | {:.2} | {:.2} | {:.2} | {chars_ranked} | {chars_page} | {ms} | {} |",
                q.tree,
                q.pattern.replace('|', "\\|"),
                everything.total_matches,
                q.answers.len(),
                r_ranked,
                r_prefix,
                r_files,
                r_page,
                failed.replace('|', "\\|"),
            );
        }
    }

    println!("\n## Summary\n");
    println!(
        "| shown | queries | ranked (not failed open) | mean recall ranked | mean recall path-order prefix | mean recall first files, a line each | mean recall plain page | reply chars ranked / plain | est. tokens per reply ranked / plain | ranking ms median / p90 / max | failed open |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for (shown, t) in &mut totals {
        t.millis.sort_unstable();
        let pct = |p: f64| -> u128 {
            if t.millis.is_empty() {
                return 0;
            }
            let i = ((t.millis.len() as f64 - 1.0) * p).round() as usize;
            t.millis[i.min(t.millis.len() - 1)]
        };
        let n = t.queries as f64;
        let failures: Vec<String> = t
            .failures
            .iter()
            .map(|(k, v)| format!("{v}x {k}"))
            .collect();
        println!(
            "| {shown} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} / {} ({:.0}% saved) | {} / {} | {} / {} / {} | {} |",
            t.queries,
            t.ranked,
            t.recall_ranked / n,
            t.recall_prefix / n,
            t.recall_files / n,
            t.recall_page / n,
            t.chars_ranked,
            t.chars_page,
            100.0 * (1.0 - t.chars_ranked as f64 / t.chars_page.max(1) as f64),
            estimated_tokens(t.chars_ranked) / t.queries.max(1),
            estimated_tokens(t.chars_page) / t.queries.max(1),
            pct(0.5),
            pct(0.9),
            t.millis.last().copied().unwrap_or(0),
            if failures.is_empty() {
                "none".to_owned()
            } else {
                failures.join(", ")
            },
        );
    }
    Ok(())
}
