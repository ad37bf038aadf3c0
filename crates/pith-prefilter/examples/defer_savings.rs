//! What tool deferral keeps out of context on the real captures, and the cache-weighted prompt
//! cost of the OpenCode mcp40 session and of the Claude Code sessions before and after.
//!
//! `cargo run --release -p pith-prefilter --example defer_savings`
//!
//! It lives here, beside the embedding ranker it can compare against BM25, because this crate
//! already depends on `pith-transform`: the evaluation points downward only.
//!
//! With `PITH_EMBED_URL` (an Ollama `/api/embed` endpoint, e.g. `scripts/eval/minilm_embed_server.py`)
//! and optionally `PITH_EMBED_MODEL`, tools are ranked by pith's embedding client instead of
//! BM25, the way `[transforms] embeddings_url` makes the proxy rank them. With
//! `PITH_EMBED_LOCAL_MODEL` (a directory `pith model install` wrote), by the in-process model
//! over the same text (name and description), to measure whether the deferral would gain from
//! it.
#![expect(clippy::print_stdout, reason = "a report printed for a person")]

#[path = "../../pith-transform/tests/defer/sim.rs"]
mod sim;

use pith_transform::estimated_tokens;
use pith_transform::{DeferOptions, DeferStage, Outcome, apply_splices};
use serde_json::value::RawValue;

use sim::{
    Capture, CostModel, RequestCost, as_deferred_session, capture_folders, deferred_names,
    load_folder,
};

const MCP40: &str = "opencode-1.18.33/anthropic-agentsmd-mcp40";
const FIX_CALC: &str = "opencode-1.18.33/anthropic-fix-calc";
const CLAUDE_CODE: &str = "claude-code-2.1.328/fix-calc";
const CLAUDE_CODE_LONG: &str = "claude-code-2.1.328/fix-calc-long";

fn main() -> Result<(), String> {
    let cache = tempfile::tempdir().map_err(|e| e.to_string())?;
    let stage = stage(cache.path(), DeferOptions::default())?;
    println!("## Tool definitions kept out of context (estimated tokens = bytes / 4)\n");
    println!(
        "| capture | requests | deferred | unchanged (reason) | tool JSON B per request with tools | deferred B per deferred request | est. tokens per deferred request | est. tokens kept out, whole session |"
    );
    println!("|---|---:|---:|---|---:|---:|---:|---:|");
    for folder in capture_folders()? {
        let captures = replayed(&stage, &load_folder(&folder)?)?;
        let (mut with_tools, mut deferred_in, mut tool_bytes, mut deferred_bytes) = (0, 0, 0, 0);
        let mut reasons: Vec<(&str, usize)> = Vec::new();
        for capture in &captures {
            let tools = tool_definitions(capture)?;
            if !tools.is_empty() {
                with_tools += 1;
                tool_bytes += tools.iter().map(|(_, raw)| raw.len()).sum::<usize>();
            }
            match capture.run(&stage).map_err(|e| e.to_string())? {
                Outcome::Edited(edit) => {
                    let out =
                        apply_splices(&capture.body, &edit.splices).map_err(|e| e.to_string())?;
                    let names = deferred_names(&out)?;
                    deferred_in += 1;
                    deferred_bytes += tools
                        .iter()
                        .filter(|(name, _)| names.contains(name))
                        .map(|(_, raw)| raw.len())
                        .sum::<usize>();
                }
                Outcome::Unchanged(reason) => {
                    match reasons.iter_mut().find(|(r, _)| *r == reason) {
                        Some((_, n)) => *n += 1,
                        None => reasons.push((reason, 1)),
                    }
                }
            }
        }
        let per = |total: usize, n: usize| total.checked_div(n).unwrap_or(0);
        let reasons: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} ({r})")).collect();
        println!(
            "| {folder} | {} | {deferred_in} | {} | {} | {} | {} | {} |",
            captures.len(),
            reasons.join(", "),
            per(tool_bytes, with_tools),
            per(deferred_bytes, deferred_in),
            estimated_tokens(per(deferred_bytes, deferred_in)),
            estimated_tokens(deferred_bytes),
        );
    }
    cost_report(&stage, MCP40, true)?;
    // Claude Code's specialised built-ins, on the shared capture and the longer recorded one.
    for folder in [CLAUDE_CODE, CLAUDE_CODE_LONG] {
        cost_report(&stage, folder, false)?;
    }
    // The default threshold leaves the 10-tool session unchanged; what deferring it would cost
    // is the reason for that threshold.
    println!(
        "\n(The next session is left unchanged by default, too_little_to_defer; it is deferred \
         here with min_deferred_chars = 0 to show why.)"
    );
    let any_size = DeferOptions {
        min_deferred_chars: 0,
        ..DeferOptions::default()
    };
    cost_report(&stage_with(cache.path(), any_size)?, FIX_CALC, false)?;
    // A session that needs a search: the mcp40 session keeping only the most relevant tool
    // (and the tools it names), so `edit`, which it calls, is deferred.
    let one = DeferOptions {
        keep_relevant: 1,
        ..DeferOptions::default()
    };
    round_trip_report(&stage_with(cache.path(), one)?, MCP40, "keep_relevant = 1")?;
    Ok(())
}

/// The cost of a session in which the model searches, with an OpenCode-like client (it sends
/// the history back without the search blocks): pith's real stages, the restore stage fed with
/// the blocks pith hid from the answers (the searches the documented replay has the model run),
/// then deferral, against the same session unproxied and with the round trip off.
fn round_trip_report(stage: &DeferStage, folder: &str, label: &str) -> Result<(), String> {
    use pith_transform::search_trip::SearchMemory;
    use pith_transform::search_trip::restore::RestoreStage;
    use std::sync::Arc;

    let original = load_folder(folder)?;
    let documented = replayed(stage, &original)?;
    let memory = Arc::new(pith_transform::search_trip::InMemory::default());
    for capture in &documented {
        sim::remember_searches(capture, memory.as_ref())?;
    }
    let searches = memory.len();
    let restore = RestoreStage::new(memory.clone() as Arc<dyn SearchMemory>);
    let mut with_round_trip = Vec::new();
    let mut without = Vec::new();
    for capture in &original {
        let restored = match capture.run(&restore).map_err(|e| e.to_string())? {
            Outcome::Edited(edit) => capture
                .with_body(apply_splices(&capture.body, &edit.splices).map_err(|e| e.to_string())?),
            Outcome::Unchanged(_) => capture.with_body(capture.body.clone()),
        };
        for (input, out) in [(&restored, &mut with_round_trip), (capture, &mut without)] {
            out.push(match input.run(stage).map_err(|e| e.to_string())? {
                Outcome::Edited(edit) => {
                    apply_splices(&input.body, &edit.splices).map_err(|e| e.to_string())?
                }
                Outcome::Unchanged(_) => input.body.clone(),
            });
        }
    }
    let documented_out: Vec<Vec<u8>> = documented
        .iter()
        .map(|c| match c.run(stage) {
            Ok(Outcome::Edited(edit)) => {
                apply_splices(&c.body, &edit.splices).unwrap_or_else(|_| c.body.clone())
            }
            _ => c.body.clone(),
        })
        .collect();
    let raw: Vec<Vec<u8>> = original.iter().map(|c| c.body.clone()).collect();
    let cost = |bodies: &[Vec<u8>]| -> Result<f64, String> {
        Ok(total(&sim::session_costs(bodies, CostModel::DOCUMENTED)?))
    };
    let (base, on, off, doc) = (
        cost(&raw)?,
        cost(&with_round_trip)?,
        cost(&without)?,
        cost(&documented_out)?,
    );
    println!(
        "\n## {folder}, {label}: a session that searches ({searches} searches), OpenCode-like client\n"
    );
    println!("| | weighted prompt tokens | vs unproxied |");
    println!("|---|---:|---:|");
    for (name, value) in [
        ("unproxied", base),
        (
            "pith, round trip off (the client drops the search blocks)",
            off,
        ),
        ("pith, round trip on (blocks hidden, then restored)", on),
        ("documented client (sends the blocks back itself)", doc),
    ] {
        println!(
            "| {name} | {value:.0} | {:+.1}% |",
            100.0 * (value / base - 1.0)
        );
    }
    println!(
        "\nRestored bodies identical to the documented client's: {}",
        with_round_trip == documented_out
    );
    Ok(())
}

/// The stage with `options`, ranking by embeddings when `PITH_EMBED_URL` is set.
fn stage(cache_dir: &std::path::Path, options: DeferOptions) -> Result<DeferStage, String> {
    if let Ok(dir) = std::env::var("PITH_EMBED_LOCAL_MODEL") {
        println!("Ranking: the in-process model in {dir}.\n");
        let encoder =
            pith_model::Encoder::load(std::path::Path::new(&dir), 2).map_err(|e| e.to_string())?;
        return Ok(
            DeferStage::new(options).with_ranker(std::sync::Arc::new(InProcess(
                std::sync::Mutex::new(encoder),
            ))),
        );
    }
    match std::env::var("PITH_EMBED_URL") {
        Ok(url) => println!("Ranking: embeddings from {url}.\n"),
        Err(_) => println!("Ranking: BM25 (set PITH_EMBED_URL to rank by embeddings).\n"),
    }
    stage_with(cache_dir, options)
}

fn stage_with(cache_dir: &std::path::Path, options: DeferOptions) -> Result<DeferStage, String> {
    let stage = DeferStage::new(options);
    let Ok(url) = std::env::var("PITH_EMBED_URL") else {
        return Ok(stage);
    };
    let model = std::env::var("PITH_EMBED_MODEL").unwrap_or_else(|_| "all-minilm".to_owned());
    let api = match std::env::var("PITH_EMBED_API") {
        Ok(name) => pith_prefilter::Api::from_name(&name)
            .ok_or_else(|| format!("PITH_EMBED_API={name:?}: use ollama or openai"))?,
        Err(_) => pith_prefilter::Api::Ollama,
    };
    let ranker = pith_prefilter::EmbedRanker::new(pith_prefilter::EmbedConfig {
        api,
        url,
        model,
        timeout: std::time::Duration::from_secs(60),
        cache_dir: cache_dir.to_owned(),
    })
    .map_err(|e| e.to_string())?;
    Ok(stage.with_ranker(std::sync::Arc::new(ranker)))
}

/// Tools ranked by the in-process model: the cosine of the task with each tool's name and
/// description (the text the embedding ranker embeds).
struct InProcess(std::sync::Mutex<pith_model::Encoder>);

impl pith_rank::ToolRanker for InProcess {
    fn scores(&self, task: &str, tools: &[pith_rank::ToolText<'_>]) -> Option<Vec<f64>> {
        if tools.is_empty() {
            return Some(Vec::new());
        }
        if task.trim().is_empty() {
            return None;
        }
        let mut texts: Vec<String> = vec![task.chars().take(2_000).collect()];
        texts.extend(tools.iter().map(|t| {
            if t.description.is_empty() {
                t.name.to_owned()
            } else {
                format!("{}: {}", t.name, t.description)
            }
        }));
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut encoder = self.0.lock().ok()?;
        let vectors = encoder.embed(&refs).ok()?;
        let (task, tools) = vectors.split_first()?;
        Some(
            tools
                .iter()
                .map(|v| f64::from(pith_model::cosine(task, v)))
                .collect(),
        )
    }
}

/// Cache-weighted prompt cost of one Anthropic session before and after deferral.
fn cost_report(stage: &DeferStage, folder: &str, detail: bool) -> Result<(), String> {
    let original = load_folder(folder)?;
    let session = replayed(stage, &original)?;
    let mut rewritten = Vec::new();
    for capture in &session {
        rewritten.push(match capture.run(stage).map_err(|e| e.to_string())? {
            Outcome::Edited(edit) => {
                apply_splices(&capture.body, &edit.splices).map_err(|e| e.to_string())?
            }
            Outcome::Unchanged(_) => capture.body.clone(),
        });
    }
    let raw: Vec<Vec<u8>> = original.iter().map(|c| c.body.clone()).collect();
    println!("\n## {folder}: cache-weighted prompt tokens (1x uncached, 1.25x write, 0.1x read)\n");
    for (label, model) in [
        (
            "conservative (search tool +500 tokens, continuation re-reads the prompt)",
            CostModel::CONSERVATIVE,
        ),
        ("documented costs only", CostModel::DOCUMENTED),
    ] {
        let before = sim::session_costs(&raw, model)?;
        let after = sim::session_costs(&rewritten, model)?;
        if detail {
            println!("Cost model: {label}.\n");
            println!(
                "| request | before: uncached / write / read | weighted | after: uncached / write / read | search cont. | weighted | new write? |"
            );
            println!("|---|---|---:|---|---:|---:|---|");
            for (k, (b, a)) in before.iter().zip(&after).enumerate() {
                println!(
                    "| {} | {} | {:.0} | {} | {:.0} | {:.0} | {} |",
                    original[k].file,
                    split(b),
                    b.weighted(),
                    split(a),
                    a.search_continuation,
                    a.weighted(),
                    if a.prompt.write > 0.0 && b.prompt.write == 0.0 {
                        "YES"
                    } else {
                        "no"
                    }
                );
            }
            println!();
        }
        let new_writes = before
            .iter()
            .zip(&after)
            .filter(|(b, a)| a.prompt.write > 0.0 && b.prompt.write == 0.0)
            .count();
        let (b, a) = (total(&before), total(&after));
        println!(
            "- {label}: before {b:.0}, after {a:.0} weighted tokens, {:.1}% less; requests with a cache write the original did not pay: {new_writes}",
            100.0 * (1.0 - a / b)
        );
        if detail {
            println!();
        }
    }
    // A client that drops the search blocks from the history it sends back (OpenCode 1.18.33,
    // observed with the real CLI): the stage sees the captured history as it is, and from the
    // first call of a tool no search surfaced it forwards requests unchanged.
    let mut dropped = Vec::new();
    let mut unchanged_after = None;
    for capture in &original {
        dropped.push(match capture.run(stage).map_err(|e| e.to_string())? {
            Outcome::Edited(edit) => {
                apply_splices(&capture.body, &edit.splices).map_err(|e| e.to_string())?
            }
            Outcome::Unchanged(reason) => {
                if reason == pith_transform::defer::reason::MID_SESSION_JOIN
                    && unchanged_after.is_none()
                {
                    unchanged_after = Some(capture.file.clone());
                }
                capture.body.clone()
            }
        });
    }
    let before = total(&sim::session_costs(&raw, CostModel::DOCUMENTED)?);
    let after = total(&sim::session_costs(&dropped, CostModel::DOCUMENTED)?);
    println!(
        "- a client that drops the search blocks (OpenCode): before {before:.0}, after {after:.0}, {:.1}% less (documented costs; unchanged from {})",
        100.0 * (1.0 - after / before),
        unchanged_after.as_deref().unwrap_or("no request")
    );
    // The same tools section on the captured history, no searches: what a replay that ignores
    // the cost of finding deferred tools reports.
    let first = rewritten
        .iter()
        .zip(&original)
        .find(|(out, orig)| out != &&orig.body)
        .map(|(out, _)| out)
        .ok_or("nothing deferred")?;
    let section = tools_section(first)?;
    let tools: Vec<serde_json::Value> =
        serde_json::from_str(&section).map_err(|e| e.to_string())?;
    let loaded: Vec<&str> = tools
        .iter()
        .filter(|t| t.get("defer_loading").is_none())
        .filter_map(|t| t["name"].as_str())
        .collect();
    println!(
        "- loaded set: {} of {} tools: {}",
        loaded.len(),
        tools.len(),
        loaded.join(", ")
    );
    let mut no_search = Vec::new();
    for capture in &original {
        no_search.push(match tools_span(capture)? {
            Some(span) => {
                let mut body = capture.body[..span.start].to_vec();
                body.extend_from_slice(section.as_bytes());
                body.extend_from_slice(&capture.body[span.end..]);
                body
            }
            None => capture.body.clone(),
        });
    }
    let before = total(&sim::session_costs(&raw, CostModel::DOCUMENTED)?);
    let after = total(&sim::session_costs(&no_search, CostModel::DOCUMENTED)?);
    println!(
        "- searches not modelled (the deferred tools section on the captured history): before {before:.0}, after {after:.0}, {:.1}% less",
        100.0 * (1.0 - after / before)
    );
    Ok(())
}

fn total(costs: &[RequestCost]) -> f64 {
    costs.iter().map(RequestCost::weighted).sum()
}

fn tools_span(capture: &Capture) -> Result<Option<std::ops::Range<usize>>, String> {
    #[derive(serde::Deserialize)]
    struct Top<'a> {
        #[serde(borrow)]
        tools: Option<&'a RawValue>,
    }
    let body = capture.body_str();
    let top: Top<'_> = serde_json::from_str(body).map_err(|e| e.to_string())?;
    Ok(top.tools.and_then(|t| pith_transform::span_of(body, t)))
}

fn tools_section(body: &[u8]) -> Result<String, String> {
    let capture = Capture {
        file: String::new(),
        path: String::new(),
        headers: Default::default(),
        body: body.to_vec(),
    };
    let span = tools_span(&capture)?.ok_or("no tools")?;
    Ok(capture.body_str()[span].to_owned())
}

fn split(c: &RequestCost) -> String {
    format!(
        "{:.0} / {:.0} / {:.0}",
        c.prompt.uncached, c.prompt.write, c.prompt.read
    )
}

/// Anthropic sessions replayed as they would go under deferral (searches before the first
/// call of each deferred tool); other wires as captured.
fn replayed(stage: &DeferStage, captures: &[Capture]) -> Result<Vec<Capture>, String> {
    for capture in captures {
        if capture.wire() != Some(pith_wire::Wire::AnthropicMessages) {
            continue;
        }
        if let Outcome::Edited(edit) = capture.run(stage).map_err(|e| e.to_string())? {
            let out = apply_splices(&capture.body, &edit.splices).map_err(|e| e.to_string())?;
            return as_deferred_session(captures, &deferred_names(&out)?);
        }
    }
    as_deferred_session(captures, &[])
}

/// `(name, definition JSON)` of each tool in a request.
fn tool_definitions(capture: &Capture) -> Result<Vec<(String, String)>, String> {
    #[derive(serde::Deserialize)]
    struct Top<'a> {
        #[serde(borrow)]
        tools: Option<Vec<&'a RawValue>>,
    }
    let top: Top<'_> = serde_json::from_slice(&capture.body).map_err(|e| e.to_string())?;
    top.tools
        .unwrap_or_default()
        .into_iter()
        .map(|raw| {
            let value: serde_json::Value =
                serde_json::from_str(raw.get()).map_err(|e| e.to_string())?;
            let name = value["name"].as_str().unwrap_or("").to_owned();
            Ok((name, raw.get().to_owned()))
        })
        .collect()
}
