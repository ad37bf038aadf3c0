//! `pith stats`: what the ledger recorded, per session and per model, with estimated cost.

use std::path::PathBuf;

use anyhow::Context;
use pith_ledger::report::prices::Prices;
use pith_ledger::report::{Report, Totals, TransformTotals, Words, plural_s, report, report_over};
use pith_outcome::Refusal;
use pith_store::ledger::{Filter, Ledger};

use crate::config::{Config, pith_home};
use crate::team::{TeamInfo, TeamReport};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Prompt tokens are split into uncached input, cache writes and cache reads (disjoint on
every wire). Cost uses built-in list prices plus [prices.\"<model>\"] from config (USD per
million tokens; five-minute cache writes default to 1.25x input, one-hour ones to 2x, reads
to 0.1x); a model with no known price shows \"unknown price\" and is left out of the cost
total.

What the transforms saved is an estimate: the characters each kept out less those it added,
at 4 characters a token, priced at the rate the real request paid where they sit in the
prompt (cached read, five-minute or one-hour write, or uncached input). It can be negative.
The provider's own cache discount is shown apart.

In team mode ([store] url or PITH_STORE_URL) the report covers every proxy that ships to the
team database: its rows are pulled into a local replica ([store] replica, default
$PITH_HOME/team-ledger.db) first, and each proxy's backlog (rows not yet shipped) is shown. If
the database cannot be reached, the replica as last synced is shown, with the reason.

Requests are also totalled per account (`by_account`; the ACCOUNT table when there are
several): the account of the key a request sent a shared gateway, else its proxy's
[account] id (PITH_ACCOUNT).

Examples:
  pith stats --since 1d
  pith stats --session 39dd4aa9-e8f6-4b73-8e36-c3a73b8de0ec --json"
)]
pub struct Args {
    /// Only requests newer than this: a number with ms, s, m, h, d or w (e.g. 30m, 12h, 1d, 2w).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    since: Option<u64>,

    /// Only this session.
    #[arg(long, value_name = "ID")]
    session: Option<String>,

    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,

    /// Ledger database [default: $PITH_HOME/ledger.db; config: ledger.path].
    #[arg(long, value_name = "FILE")]
    ledger: Option<PathBuf>,

    /// In team mode ([store] url or PITH_STORE_URL), report this machine's ledger only instead
    /// of the team's.
    #[arg(long)]
    local: bool,
}

/// `30m`, `12h`, `1d`, `2w` as milliseconds.
fn parse_age(s: &str) -> Result<u64, String> {
    crate::duration::parse(s).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub fn run(args: Args, config: &Config) -> anyhow::Result<()> {
    let path = match args.ledger.or_else(|| config.ledger.path.clone()) {
        Some(p) => p,
        None => pith_home()?.join("ledger.db"),
    };
    let team = match config.store_url()? {
        Some(url) if !args.local => {
            let replica = config.team_replica()?;
            let history = crate::history_settings::HistorySettings::resolve(config)?.path;
            let info = crate::team::sync(&url, &replica, Some(&path), Some(&history));
            if let (Some(e), false) = (&info.sync_error, replica.exists()) {
                anyhow::bail!(
                    "cannot read the team ledger ({e}), and there is no replica of it yet; \
                     `pith stats --local` reports this machine's ledger"
                );
            }
            Some((replica, info))
        }
        _ => None,
    };
    let (path, team) = match team {
        Some((replica, info)) => (replica, Some(info)),
        None => (path, None),
    };
    let now_ms = pith_store::clock::now_ms();
    let filter = Filter {
        since_ms: args
            .since
            .map(|age| now_ms.saturating_sub(i64::try_from(age).unwrap_or(i64::MAX))),
        session: args.session.clone(),
    };
    let own_account = config.account_id()?;
    let prices = Prices::new(&config.prices);
    // Nothing recorded yet is not an error (as `pith history list` has it): one line says how
    // to get a ledger, and --json gets the report of an empty one.
    let words = pith_proxy::words::report_words();
    let report = if path.exists() {
        report(&path, &filter, &prices, &own_account, words).context("cannot read the ledger")?
    } else {
        eprintln!(
            "pith: no ledger at {} yet: requests are recorded as they pass through pith's proxy; \
             run your agent through it (`pith run claude`) or start `pith proxy` (or pass \
             --ledger FILE)",
            path.display()
        );
        if !args.json {
            return Ok(());
        }
        let empty = Ledger::open_in_memory().context("internal error: an empty ledger")?;
        report_over(&empty, &path, &filter, &prices, &own_account, words)?
    };
    let shown = TeamReport { report, team };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&shown)?);
    } else {
        print!("{}", render(&shown, args.since.is_some()));
    }
    Ok(())
}

fn tokens(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=9_999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

fn cost(t: &Totals) -> String {
    match (t.cost_usd, t.unpriced_models.is_empty()) {
        (Some(c), true) => format!("${c:.4}"),
        (Some(c), false) => format!("${c:.4} + unknown price"),
        (None, false) => "unknown price".to_owned(),
        (None, true) => "$0".to_owned(),
    }
}

fn row(label: &str, t: &Totals) -> Vec<String> {
    vec![
        label.to_owned(),
        t.requests.to_string(),
        tokens(t.usage.input),
        tokens(t.usage.cache_write),
        tokens(t.usage.cache_read),
        tokens(t.usage.output),
        format!("{:.0}%", t.cache_hit_share * 100.0),
        cost(t),
    ]
}

fn table(out: &mut String, head: &str, rows: &[Vec<String>]) {
    let header: Vec<String> = [
        head, "REQS", "INPUT", "CACHE-W", "CACHE-R", "OUTPUT", "HIT", "COST",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let all: Vec<&Vec<String>> = std::iter::once(&header).chain(rows.iter()).collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| all.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for r in all {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i == 0 {
                line.push_str(&format!("{cell:<w$}", w = widths[i]));
            } else {
                line.push_str(&format!("  {cell:>w$}", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// The most characters of a name a table shows.
const NAME_CHARS: usize = 60;

/// A name that came from a client, a provider or a file, as a terminal shows it: at most
/// `max` characters, its control and bidirectional characters escaped (they could otherwise
/// rewrite the terminal or reorder what it shows).
fn shown(name: &str, max: usize) -> String {
    pith_brain::render::one_line(name, max)
}

fn render(shown: &TeamReport, filtered_by_time: bool) -> String {
    let r = &shown.report;
    let mut out = String::new();
    out.push_str(&format!("ledger: {}\n", r.ledger.display()));
    if let Some(team) = &shown.team {
        render_team(&mut out, team);
    }
    if r.total.requests == 0 {
        out.push_str(if filtered_by_time || r.session.is_some() {
            "no requests match\n"
        } else {
            "no requests recorded yet\n"
        });
        render_refused(&mut out, r);
        return out;
    }
    out.push('\n');
    render_tables(&mut out, r);
    render_notes(&mut out, &r.total);
    for (stage, tt) in &r.transforms {
        render_transform(&mut out, &r.words, stage, tt);
    }
    if let Some(holdout) = &r.holdout {
        render_holdout(&mut out, holdout);
    }
    render_provider_counts(&mut out, r);
    render_tail(&mut out, r);
    out
}

/// The provider's own counts of the sampled requests against pith's estimate; without any,
/// that every saving shown is estimated, and how to have some counted.
fn render_provider_counts(out: &mut String, r: &Report) {
    let Some(counts) = &r.provider_counts else {
        if r.total.estimated_saved_usd.is_some() {
            out.push_str(
                "every saving above is pith's estimate (4 characters a token): set [proxy] \
                 provider_counts = 0.1 to have the provider count a tenth of the requests pith \
                 changed\n",
            );
        }
        return;
    };
    let c = &counts.sums;
    let mut not_counted = Vec::new();
    for (n, what) in [
        (
            c.rate_limited,
            "rate limited by the counter (429, not retried)",
        ),
        (c.failed, "failed"),
        (c.paused, "not asked while the counter's 429 wait lasted"),
    ] {
        if n > 0 {
            not_counted.push(format!("{n} {what}"));
        }
    }
    let not_counted = if not_counted.is_empty() {
        String::new()
    } else {
        format!("; {}", not_counted.join(", "))
    };
    out.push_str(&format!(
        "counted by the provider: {} of {} sampled request{} counted{not_counted}\n",
        c.counted,
        c.sampled,
        plural_s(c.sampled)
    ));
    if c.compared == 0 {
        out.push_str("  no counted request with usage yet to compare the estimate with\n");
        return;
    }
    let off = counts.estimate_error.map_or(String::new(), |e| {
        format!(" ({:+.1}% off the count)", 100.0 * e)
    });
    out.push_str(&format!(
        "  kept out of {} request{}: {} tokens counted by the provider, {} estimated by pith{off}\n",
        c.compared,
        plural_s(c.compared),
        c.counted_kept_out,
        c.estimated_kept_out,
    ));
}

/// The held-out conversations against the rest, a group per client and models.
fn render_holdout(out: &mut String, h: &pith_ledger::report::holdout::HoldoutComparison) {
    out.push_str("held out (no transform) against transformed, per conversation:\n");
    let arm = |a: &pith_ledger::report::holdout::Arm| {
        format!(
            "{} conversation{}, {} each, {:.1} requests each, cache hit {:.0}%",
            a.conversations,
            plural_s(a.conversations),
            usd_or_unknown(a.cost_per_conversation_usd),
            a.requests_per_conversation,
            100.0 * a.cache_hit_share
        )
    };
    for g in &h.groups {
        let verdict = match g.cost_per_conversation_difference {
            Some(d) => format!(
                "transformed costs {} per conversation against held out (95% interval {} to {})",
                signed_usd(d.estimate),
                signed_usd(d.low),
                signed_usd(d.high)
            ),
            None => format!(
                "not enough conversations yet ({} priced in each arm needed)",
                h.min_conversations
            ),
        };
        out.push_str(&format!(
            "  {} ({}): held out {}; transformed {}; {verdict}\n",
            shown(&g.client, NAME_CHARS),
            shown(&g.models, NAME_CHARS * 2),
            arm(&g.held_out),
            arm(&g.transformed)
        ));
    }
}

/// `$0.0123`, or "unknown price" without a known price.
fn usd_or_unknown(usd: Option<f64>) -> String {
    usd.map_or("unknown price".to_owned(), |u| format!("${u:.4}"))
}

/// `-$0.0123` or `+$0.0123` (a figure that rounds to nothing, `$0.0000`).
fn signed_usd(v: f64) -> String {
    let rounded = (v * 1e4).round() / 1e4;
    let sign = match rounded {
        r if r < 0.0 => "-",
        r if r > 0.0 => "+",
        _ => "",
    };
    format!("{sign}${:.4}", rounded.abs())
}

/// The tables: per session, per model, per account (with several), the total.
fn render_tables(out: &mut String, r: &Report) {
    let session_rows: Vec<Vec<String>> = r
        .sessions
        .iter()
        .map(|s| {
            let id = s.session.as_deref().unwrap_or("(none)");
            row(
                &format!("{} {}", shown(id, 24), shown(&s.client, NAME_CHARS)),
                &s.totals,
            )
        })
        .collect();
    table(out, "SESSION CLIENT", &session_rows);
    out.push('\n');
    let model_rows: Vec<Vec<String>> = r
        .models
        .iter()
        .map(|m| {
            row(
                &shown(m.model.as_deref().unwrap_or("(none)"), NAME_CHARS),
                &m.totals,
            )
        })
        .collect();
    table(out, "MODEL", &model_rows);
    out.push('\n');
    let client_rows: Vec<Vec<String>> = r
        .clients
        .iter()
        .map(|c| row(&shown(&c.client, NAME_CHARS), &c.totals))
        .collect();
    table(out, "CLIENT", &client_rows);
    out.push('\n');
    // One account is every install's case: the table says something only with several.
    if r.by_account.len() > 1 {
        let account_rows: Vec<Vec<String>> = r
            .by_account
            .iter()
            .map(|a| row(&shown(&a.account, NAME_CHARS), &a.totals))
            .collect();
        table(out, "ACCOUNT", &account_rows);
        out.push('\n');
    }
    // Likewise instances: one proxy is the usual case.
    if r.by_instance.len() > 1 {
        render_instances(out, &r.by_instance);
        out.push('\n');
    }
    table(out, "TOTAL", &[row("all", &r.total)]);
}

/// Requests per instance (a team's gateways behind a load balancer).
fn render_instances(out: &mut String, instances: &[pith_store::ledger::InstanceTotals]) {
    let names: Vec<String> = instances
        .iter()
        .map(|i| shown(i.instance.as_deref().unwrap_or("(unnamed)"), NAME_CHARS))
        .collect();
    let width = names
        .iter()
        .map(|n| n.chars().count())
        .chain(std::iter::once("INSTANCE".len()))
        .max()
        .unwrap_or(0);
    out.push_str(&format!(
        "{:<width$}  {:>8}  {:>6}\n",
        "INSTANCE", "REQS", "ERRORS"
    ));
    for (name, i) in names.iter().zip(instances) {
        out.push_str(&format!(
            "{name:<width$}  {:>8}  {:>6}\n",
            i.requests, i.errors
        ));
    }
}

/// What the totals could not count: requests without usage, models without a price.
fn render_notes(out: &mut String, t: &Totals) {
    if t.requests_with_usage < t.requests {
        out.push_str(&format!(
            "{} of {} requests carried no usage (errors, cancelled streams, count_tokens, other paths)\n",
            t.requests - t.requests_with_usage,
            t.requests
        ));
    }
    if !t.unpriced_models.is_empty() {
        out.push_str(&format!(
            "unknown price for {}: add [prices.\"<model>\"] input/output (USD per million tokens) to config\n",
            t.unpriced_models
                .iter()
                .map(|m| shown(m, NAME_CHARS))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}

/// "1 request", "2 requests".
fn requests(n: u64) -> String {
    format!("{n} request{}", plural_s(n))
}

/// What one transform stage did.
fn render_transform(out: &mut String, words: &Words, stage: &str, tt: &TransformTotals) {
    let facts = words.facts(stage, &tt.facts);
    let name = match words.stage(stage) {
        name if name == stage => stage.to_owned(),
        name => format!("{name} ({stage})"),
    };
    out.push_str(&format!(
        "transform {name}: changed {}{}{}\n",
        requests(tt.requests),
        if facts.is_empty() { "" } else { "; " },
        facts.join(", ")
    ));
    if let (Some(chars), Some(tokens)) = (tt.chars_kept_out, tt.estimated_tokens_kept_out) {
        out.push_str(&format!(
            "  kept out of context: {chars} chars, about {tokens} tokens (estimate: 4 chars per token)\n"
        ));
    }
    if !tt.estimated_saved_tokens.is_empty() {
        let bands: Vec<String> = tt
            .estimated_saved_tokens
            .iter()
            .map(|(band, n)| format!("{n} {}", words.band(band)))
            .collect();
        out.push_str(&format!(
            "  saved (estimate, at each request's cache state): {}{}\n",
            usd_or_unknown(tt.estimated_saved_usd),
            format_args!("; tokens {}", bands.join(", "))
        ));
    }
    if tt.bust_tokens_billed_again != 0 {
        out.push_str(&format!(
            "  cache busts it caused: {} tokens billed again instead of read from the cache, {} (taken off saved)\n",
            tt.bust_tokens_billed_again,
            usd_or_unknown(tt.bust_charged_usd)
        ));
    }
    if let Some(said) = tt.came_back.and_then(|c| words.came_back(stage, &c)) {
        out.push_str(&format!("  came back for what it withheld: {said}\n"));
    }
    if !tt.unchanged.is_empty() {
        let reasons: Vec<String> = tt
            .unchanged
            .iter()
            .map(|(reason, n)| format!("{}: {}", requests(*n), words.reason(stage, reason)))
            .collect();
        out.push_str(&format!("  left unchanged: {}\n", reasons.join("; ")));
    }
}

/// The requests refused before they were served, by reason, when there were any.
fn render_refused(out: &mut String, r: &Report) {
    let refused: Vec<String> = Refusal::ALL
        .iter()
        .filter_map(|reason| {
            let n = *r.refused_requests.get(reason.as_str())?;
            (n > 0).then(|| format!("{n} with {}", reason.describe()))
        })
        .collect();
    if !refused.is_empty() {
        out.push_str(&format!("requests refused: {}\n", refused.join(", ")));
    }
}

/// Savings, the provider's discount, cache busts, failures and what the ledger lost or waits on.
fn render_tail(out: &mut String, r: &Report) {
    let t = &r.total;
    if let Some(saved) = t.estimated_saved_usd {
        out.push_str(&format!("saved by pith (estimate): ${saved:.4}\n"));
    }
    if let Some(discount) = t.cache_discount_usd {
        out.push_str(&format!(
            "the provider's own prompt-cache discount: ${discount:.4}\n"
        ));
    }
    let b = &r.cache_busts;
    out.push_str(&format!(
        "cache busts: {} in {} consecutive requests ({} by pith, {} by the client)\n",
        b.by_pith + b.by_client,
        b.pairs,
        b.by_pith,
        b.by_client
    ));
    for bust in b.busts.iter().filter(|b| b.cause == "pith") {
        let by = bust
            .stage
            .as_deref()
            .map(|s| format!(" ({})", r.words.stage(s)))
            .unwrap_or_default();
        let at = bust
            .segment_words
            .clone()
            .unwrap_or_else(|| format!("prompt segment {}", bust.segment));
        out.push_str(&format!(
            "  by pith{by}: session {}, {at} changed (cached through segment {})\n",
            shown(&bust.session, NAME_CHARS),
            bust.cached_through
        ));
    }
    out.push_str(&format!(
        "transform failures: {}   requests lost to the ledger: {}\n",
        r.transform_failures, r.dropped_rows
    ));
    if r.damaged_spool_entries > 0 {
        out.push_str(&format!(
            "damaged in the ledger spool and skipped: {} (entries torn when pith was killed)\n",
            r.damaged_spool_entries
        ));
    }
    render_refused(out, r);
    if r.ledger_backlog.requests > 0 {
        out.push_str(&format!(
            "ledger backlog: {} requests ({:.1} MB) wait in the spool to be written\n",
            r.ledger_backlog.requests,
            r.ledger_backlog.bytes as f64 / 1e6
        ));
    }
    if r.ledger_backlog.derivations > 0 {
        out.push_str(&format!(
            "ledger backlog: {} rows written wait for their busts and history turns (the \
             writers parse the bodies after the rows)\n",
            r.ledger_backlog.derivations
        ));
    }
}

fn render_team(out: &mut String, team: &TeamInfo) {
    out.push_str(&format!(
        "team ledger: {} ({} proxies ship to it; read through the replica above)\n",
        team.store,
        team.instances.len()
    ));
    if let Some(e) = &team.sync_error {
        out.push_str(&format!(
            "warning: cannot sync the team ledger ({e}); showing the replica as of its last sync\n"
        ));
    }
    for i in &team.instances {
        out.push_str(&format!(
            "  proxy {:016x} of {} on {}: {} rows waiting to ship, {} dropped (as of its last push)\n",
            i.instance, i.account, i.host, i.backlog, i.dropped_rows
        ));
    }
    if let Some(n) = team.local_backlog {
        out.push_str(&format!(
            "this machine: {n} ledger rows waiting to ship{}\n",
            if n > 0 {
                " (they go out when the team database is reachable)"
            } else {
                ""
            }
        ));
    }
    if let Some(n) = team.local_history_backlog {
        out.push_str(&format!(
            "this machine: {n} history messages waiting to ship{}\n",
            if n > 0 {
                " (they go out while `pith proxy` runs and the team database is reachable)"
            } else {
                ""
            }
        ));
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages() {
        assert_eq!(parse_age("30m"), Ok(1_800_000));
        assert_eq!(parse_age("1d"), Ok(86_400_000));
        assert!(parse_age("1x").unwrap_err().contains("use a number"));
    }
}
