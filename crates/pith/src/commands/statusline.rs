//! `pith statusline`: one line for Claude Code's status line, from the ledger. Claude Code runs
//! it with its status payload on stdin (JSON with the `session_id` the ledger keys the session
//! by) and shows the first line printed. It prints the session's requests, tokens, cache hit
//! share, cost and what pith saved (an estimate); a payload it cannot use prints `pith` and
//! nothing else. It always exits 0: a status line is never an error.

use std::io::Read;
use std::path::PathBuf;

use pith_store::ledger::{Filter, Ledger};

use crate::config::{Config, pith_home};
use pith_ledger::report::prices::Prices;
use pith_wire::usage::Usage;

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
    let requests: u64 = groups.iter().map(|g| g.requests).sum();
    let usage: Usage = groups.iter().map(|g| g.usage).sum();
    let cost: f64 = groups
        .iter()
        .filter_map(|g| {
            Some(
                g.model
                    .as_deref()
                    .and_then(|m| prices.lookup(m))?
                    .cost(g.usage),
            )
        })
        .sum();
    let (prompt, read, output) = (usage.prompt_total(), usage.cache_read, usage.output);
    // What the transforms saved, priced as `pith stats` prices it (an estimate).
    let (mut saved_tokens, mut saved_usd) = (0i64, None::<f64>);
    for s in ledger.savings(&filter).ok()? {
        saved_tokens += s.tokens;
        if let Some(usd) =
            pith_ledger::report::saving_usd(&prices, s.model.as_deref(), &s.band, s.tokens)
        {
            *saved_usd.get_or_insert(0.0) += usd;
        }
    }
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
    if saved_tokens != 0 || saved_usd.is_some_and(|u| u != 0.0) {
        let sign = if saved_tokens < 0 { "-" } else { "" };
        out.push_str(&format!(
            " · ~{sign}{} saved",
            short(saved_tokens.unsigned_abs())
        ));
        if let Some(usd) = saved_usd {
            let sign = if usd < 0.0 { "-" } else { "" };
            out.push_str(&format!(" (~{sign}${:.2})", usd.abs()));
        }
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
