//! `pith statusline`: one line for Claude Code's status line, from the ledger. Claude Code runs
//! it with its status payload on stdin (JSON with the `session_id` the ledger keys the session
//! by) and shows the first line printed. It prints the session's requests, tokens, cache hit
//! share, cost and what pith kept out of the prompt; a payload it cannot use prints `pith` and
//! nothing else. It always exits 0: a status line is never an error.

use std::io::Read;
use std::path::PathBuf;

use pith_store::ledger::{Filter, Ledger};

use crate::config::{Config, pith_home};
use crate::prices::Prices;

/// Print one status line for the Claude Code session on stdin.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Ledger database (default `$PITH_HOME/ledger.db`).
    #[arg(long, value_name = "FILE")]
    ledger: Option<PathBuf>,
}

pub fn run(args: Args, config: &Config) -> anyhow::Result<()> {
    let mut input = Vec::new();
    // At most 1 MiB of payload: the fields used are near the top.
    let _ = std::io::stdin().take(1 << 20).read_to_end(&mut input);
    println!(
        "{}",
        line(&args, config, &input).unwrap_or_else(|| "pith".to_owned())
    );
    Ok(())
}

fn line(args: &Args, config: &Config, input: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Payload {
        session_id: String,
    }
    let payload: Payload = serde_json::from_slice(input).ok()?;
    let path = match args.ledger.clone().or_else(|| config.ledger.path.clone()) {
        Some(p) => p,
        None => pith_home().ok()?.join("ledger.db"),
    };
    if !path.exists() {
        return None;
    }
    let ledger = Ledger::open_read_only(&path).ok()?;
    let filter = Filter {
        since_ms: None,
        session: Some(payload.session_id),
    };
    let groups = ledger.groups(&filter).ok()?;
    if groups.is_empty() {
        return Some("pith · no requests yet in this session".to_owned());
    }
    let prices = Prices::new(&config.prices);
    let (mut requests, mut prompt, mut read, mut output, mut cost) = (0, 0, 0, 0, 0.0);
    for g in &groups {
        requests += g.requests;
        prompt += g.input + g.cache_write + g.cache_read;
        read += g.cache_read;
        output += g.output;
        if let Some(p) = g.model.as_deref().and_then(|m| prices.lookup(m)) {
            cost += p.cost(g.input, g.output, g.cache_write, g.cache_read);
        }
    }
    let kept_out: u64 = ledger
        .stage_totals(&filter)
        .ok()?
        .iter()
        .flat_map(|s| &s.facts)
        .filter(|(_, kind, _)| kind == "chars_kept_out")
        .map(|(_, _, chars)| *chars)
        .sum();
    let hit = if prompt == 0 {
        0.0
    } else {
        100.0 * read as f64 / prompt as f64
    };
    let mut out = format!(
        "pith · {requests} req · {} in / {} out · {hit:.0}% cached · ${cost:.2}",
        short(prompt),
        short(output)
    );
    if kept_out > 0 {
        let tokens =
            pith_transform::estimated_tokens(usize::try_from(kept_out).unwrap_or(usize::MAX));
        out.push_str(&format!(" · ~{} kept out", short(tokens as u64)));
    }
    Some(out)
}

fn short(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}
