//! `pith stats`: what the ledger recorded, per session and per model, with estimated cost.

use pith_outcome::Refusal;
use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use pith_store::ledger::{BUST_CHARGE, DAMAGED_ENTRIES, DROPPED_ROWS, Filter, Group, Ledger};
use pith_transform::FactKind;
use serde::Serialize;

use crate::config::{Config, pith_home};
use crate::prices::Prices;
use pith_wire::usage::{Band, Usage};

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
    /// Only requests newer than this: a number with m, h, d or w (e.g. 30m, 12h, 1d, 2w).
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

#[derive(Debug, Default, Serialize)]
struct Totals {
    requests: u64,
    requests_with_usage: u64,
    errors: u64,
    /// The tokens, by rate (`input_tokens`, `cache_write_tokens` with the one-hour ones
    /// included, `cache_write_1h_tokens`, `cache_read_tokens`, `output_tokens`).
    #[serde(flatten)]
    usage: Usage,
    prompt_tokens: u64,
    /// Share of prompt tokens read from the provider's cache.
    cache_hit_share: f64,
    /// Cost of the priced requests; `None` when no request had a known price.
    cost_usd: Option<f64>,
    /// Models seen without a known price (their tokens are not in `cost_usd`).
    unpriced_models: Vec<String>,
    /// What the provider's prompt cache changed the priced requests' cost by, against the same
    /// prompts billed as uncached input: reads' discount less writes' surcharge (negative when
    /// caches were written and not read). The provider's doing, not pith's.
    cache_discount_usd: Option<f64>,
    /// What pith's transforms are estimated to have saved on the priced requests (see the
    /// report's `savings_method`); negative when they added more than they kept out.
    estimated_saved_usd: Option<f64>,
    /// The prompt tokens behind `estimated_saved_usd` (priced or not), signed.
    estimated_saved_tokens: i64,
    /// Requests compared with the previous one of their session and model for a cache bust.
    cache_bust_pairs: u64,
    /// Busts only in what pith sent (the client's own prompts kept their prefix).
    cache_busts_by_pith: u64,
    /// Busts the client's own prompts show too.
    cache_busts_by_client: u64,
}

impl Totals {
    fn add(&mut self, g: &Group, prices: &Prices) {
        self.requests += g.requests;
        self.requests_with_usage += g.with_usage;
        self.errors += g.errors;
        self.usage += g.usage;
        self.cache_bust_pairs += g.bust_pairs;
        self.cache_busts_by_pith += g.busts_pith;
        self.cache_busts_by_client += g.busts_client;
        self.prompt_tokens = self.usage.prompt_total();
        self.cache_hit_share = if self.prompt_tokens == 0 {
            0.0
        } else {
            self.usage.cache_read as f64 / self.prompt_tokens as f64
        };
        let model = g.model.clone().unwrap_or_else(|| "(none)".to_owned());
        let has_tokens = g.with_usage > 0;
        match g.model.as_deref().and_then(|m| prices.lookup(m)) {
            Some(p) => {
                *self.cost_usd.get_or_insert(0.0) += p.cost(g.usage);
                *self.cache_discount_usd.get_or_insert(0.0) += p.cache_discount(g.usage);
            }
            None if has_tokens && !self.unpriced_models.contains(&model) => {
                self.unpriced_models.push(model);
            }
            None => {}
        }
    }
}

#[derive(Debug, Serialize)]
struct SessionTotals {
    session: Option<String>,
    client: String,
    models: Vec<String>,
    first_ms: i64,
    last_ms: i64,
    #[serde(flatten)]
    totals: Totals,
    /// What each transform is estimated to have saved in this session.
    saved_by_transform: BTreeMap<String, StageSaving>,
}

/// One transform's estimated savings in one session.
#[derive(Debug, Default, Serialize)]
struct StageSaving {
    /// Prompt tokens, signed.
    tokens: i64,
    /// At list prices, USD; `None` when no model had a known price.
    usd: Option<f64>,
}

/// One account's requests: a developer's, on a gateway that maps requests to accounts by key.
#[derive(Debug, Serialize)]
struct AccountTotals {
    account: String,
    #[serde(flatten)]
    totals: Totals,
}

#[derive(Debug, Serialize)]
struct ModelTotals {
    model: Option<String>,
    #[serde(flatten)]
    totals: Totals,
}

/// One client's totals (every session it made), with what pith saved on them.
#[derive(Debug, Serialize)]
struct ClientTotals {
    client: String,
    #[serde(flatten)]
    totals: Totals,
}

#[derive(Debug, Default, Serialize)]
struct TransformTotals {
    /// Requests the transform changed.
    requests: u64,
    /// Sums of the numeric facts it reported (e.g. `chars` for defer).
    facts: BTreeMap<String, u64>,
    /// Characters its edits kept out of context (the facts of that kind, e.g. defer's
    /// `chars`), when it reports any.
    #[serde(skip_serializing_if = "Option::is_none")]
    chars_kept_out: Option<u64>,
    /// Prompt tokens those characters stand for, estimated as one token per 4 characters (a
    /// heuristic, not a tokenizer).
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated_tokens_kept_out: Option<u64>,
    /// Requests the transform looked at and left unchanged, by reason (e.g. defer's
    /// `already_deferring`, `too_little_to_defer`).
    unchanged: BTreeMap<String, u64>,
    /// Estimated prompt tokens its edits saved (kept out less added; negative when it added
    /// more), by the rate the real request paid where they sit: `cache_read`,
    /// `cache_write_5m`, `cache_write_1h`, `input`. Requests without usage are not in it.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    estimated_saved_tokens: BTreeMap<String, i64>,
    /// Those tokens at each model's prices, USD, less what the cache busts it caused cost
    /// (`bust_charged_usd`); `None` when none had a known price.
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated_saved_usd: Option<f64>,
    /// Prompt tokens billed again because of cache busts this transform caused (the prefix
    /// the previous request had cached that the next did not read), when it caused any.
    #[serde(skip_serializing_if = "is_zero")]
    bust_tokens_billed_again: i64,
    /// What that cost over the cache-read rate they would have had, USD (already taken off
    /// `estimated_saved_usd`); `None` without a known price.
    #[serde(skip_serializing_if = "Option::is_none")]
    bust_charged_usd: Option<f64>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// How the savings figures are estimated, shown beside them.
const SAVINGS_METHOD: &str = "Each transform reports the characters its edit kept out of the \
prompt and those it added; 4 characters count as one token (an estimate, not a tokenizer). The \
tokens are priced at the rate the real request paid at the place in the prompt where they sit \
(the tools, the system prompt, or the newest message, placed by the client body's byte layout \
in the provider's prompt order): read from the cache at the read rate, written at the \
five-minute or one-hour write rate, otherwise as uncached input; then at the model's list \
price. Negative when an edit added more than it kept out. Known limits: the place of pins' \
edits is taken as the newest message (a turn it drops may sit earlier, in the cached part); on a \
request whose cache pith itself busted the tokens are priced at the write rate that request \
paid. A cache bust pith caused (the client's own prompts kept their prefix, what pith sent did \
not) is charged to the transform that caused it (the first that changed the busting request, \
else the first that changed the one before): the prefix the previous request left cached that \
this one did not read, capped at this prompt, billed again at this request's write or input \
rate instead of the read rate; the difference is taken off that transform's saving and shown \
apart. Defer's rows \
recorded before ledger schema 4 count the tools it kept out without subtracting the search tool \
it added (a few dozen characters). A turn pith answered itself (only pin commands) is priced \
as the request it saved: its whole prompt at the cache-read rate, the lowest that request could \
have paid (the output the model would have written is not counted). The provider's own cache \
discount is reported apart.";

#[derive(Debug, Serialize)]
pub(crate) struct Report {
    ledger: PathBuf,
    since_ms: Option<i64>,
    session: Option<String>,
    sessions: Vec<SessionTotals>,
    models: Vec<ModelTotals>,
    /// Per client (Claude Code, OpenCode, Codex, an SDK), the busiest first: a session's
    /// requests and savings count for its client; requests without a session for the client
    /// that sent each (`Ledger::sessionless_by_client`).
    clients: Vec<ClientTotals>,
    /// Per account (rows from before accounts were kept are the proxy's own account's).
    by_account: Vec<AccountTotals>,
    /// Per proxy instance that served the requests, the busiest first (several behind a load
    /// balancer, in team mode); rows from before instances were kept have no name.
    by_instance: Vec<pith_store::ledger::InstanceTotals>,
    total: Totals,
    transforms: BTreeMap<String, TransformTotals>,
    transform_failures: u64,
    /// Requests the proxy served but could not keep for the ledger (its spool at its limit or
    /// its disk refusing the write; before the spool, a full write queue).
    dropped_rows: u64,
    /// Entries the proxy had kept in its spool and found damaged when it read them (a write
    /// torn when it was killed): requests with no row, for another cause than `dropped_rows`.
    damaged_spool_entries: u64,
    /// Requests refused before they were served, by reason (counted, not rows: a flood of
    /// unauthenticated requests does not grow the ledger).
    refused_requests: BTreeMap<&'static str, u64>,
    /// Requests waiting in the proxy's spool to be written as rows (a burst being caught up).
    ledger_backlog: LedgerBacklog,
    /// Prompt-cache busts between consecutive requests of a session (same model).
    cache_busts: pith_store::ledger::CacheBusts,
    /// Latency histograms (bucket bounds: `pith_store::ledger::LATENCY_BUCKETS_MS`).
    latency: pith_store::ledger::Latency,
    /// How `estimated_saved_*` are estimated.
    savings_method: &'static str,
    /// What people read for the codes above.
    words: Words,
    /// Team mode: the team database, its proxies and their backlogs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) team: Option<crate::team::TeamInfo>,
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
    let mut report = if path.exists() {
        report(&path, &filter, &prices, &own_account)?
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
        report_over(&empty, &path, &filter, &prices, &own_account)?
    };
    report.team = team;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report, args.since.is_some()));
    }
    Ok(())
}

/// The report over the ledger at `path`: what `pith stats --json` prints and the dashboard's
/// API serves, so the two agree on every number. Rows that name no account (written before
/// accounts were kept) are `own_account`'s.
pub(crate) fn report(
    path: &std::path::Path,
    filter: &Filter,
    prices: &Prices,
    own_account: &str,
) -> anyhow::Result<Report> {
    // Read-only: stats never changes the ledger's mode or schema, nor makes a file a ledger.
    let ledger = Ledger::open_read_only(path).context("cannot read the ledger")?;
    report_over(&ledger, path, filter, prices, own_account)
}

/// [`report`] over a connection the caller holds (the dashboard's shared readers); `path` is
/// the file it reads, as the report names it.
pub(crate) fn report_over(
    ledger: &Ledger,
    path: &std::path::Path,
    filter: &Filter,
    prices: &Prices,
    own_account: &str,
) -> anyhow::Result<Report> {
    let groups = ledger.groups(filter)?;
    let mut report = build_report(path, filter, &groups, ledger, prices)?;
    report.by_account = by_account(ledger, filter, prices, own_account)?;
    Ok(report)
}

/// The totals per account, accounts by name, with what the transforms saved on each.
fn by_account(
    ledger: &Ledger,
    filter: &Filter,
    prices: &Prices,
    own_account: &str,
) -> anyhow::Result<Vec<AccountTotals>> {
    let mut accounts: BTreeMap<String, Totals> = BTreeMap::new();
    let name = |a: Option<String>| a.unwrap_or_else(|| own_account.to_owned());
    for g in ledger.account_groups(filter)? {
        accounts
            .entry(name(g.account))
            .or_default()
            .add(&g.totals, prices);
    }
    for saving in ledger.account_savings(filter)? {
        let usd = saving_usd(prices, saving.model.as_deref(), &saving.band, saving.tokens);
        if let Some(totals) = accounts.get_mut(&name(saving.key)) {
            totals.estimated_saved_tokens += saving.tokens;
            if let Some(usd) = usd {
                *totals.estimated_saved_usd.get_or_insert(0.0) += usd;
            }
        }
    }
    Ok(accounts
        .into_iter()
        .map(|(account, totals)| AccountTotals { account, totals })
        .collect())
}

/// `tokens` saved at `band` on `model`, in USD at its price; `None` when it has none.
pub(crate) fn saving_usd(
    prices: &Prices,
    model: Option<&str>,
    band: &str,
    tokens: i64,
) -> Option<f64> {
    model
        .and_then(|m| prices.lookup(m))
        .zip(Band::parse(band))
        .map(|(p, band)| tokens as f64 * p.rate(band) / 1_000_000.0)
}

fn build_report(
    path: &std::path::Path,
    filter: &Filter,
    groups: &[Group],
    ledger: &Ledger,
    prices: &Prices,
) -> anyhow::Result<Report> {
    let mut sums = sum_groups(groups, prices);
    // The requests without a session, per the client that sent each (`groups` has them
    // one group per model).
    for g in ledger.sessionless_by_client(filter)? {
        sums.clients
            .entry(g.client.clone())
            .or_default()
            .add(&g, prices);
    }
    let mut transforms = transform_totals(ledger, filter)?;
    add_savings(ledger, filter, prices, &mut transforms, &mut sums)?;
    for saving in ledger.sessionless_savings_by_client(filter)? {
        let usd = saving_usd(prices, saving.model.as_deref(), &saving.band, saving.tokens);
        let client = sums.clients.entry(saving.key).or_default();
        client.estimated_saved_tokens += saving.tokens;
        if let Some(usd) = usd {
            *client.estimated_saved_usd.get_or_insert(0.0) += usd;
        }
    }
    Ok(Report {
        ledger: path.to_owned(),
        since_ms: filter.since_ms,
        session: filter.session.clone(),
        sessions: sums.sessions,
        models: sums
            .models
            .into_iter()
            .map(|(model, totals)| ModelTotals { model, totals })
            .collect(),
        clients: {
            let mut clients: Vec<ClientTotals> = sums
                .clients
                .into_iter()
                .map(|(client, totals)| ClientTotals { client, totals })
                .collect();
            clients.sort_by_key(|c| std::cmp::Reverse(c.totals.requests));
            clients
        },
        by_account: Vec::new(),
        by_instance: ledger.instance_totals(filter)?,
        transform_failures: groups.iter().map(|g| g.transform_failures).sum(),
        total: sums.total,
        transforms,
        dropped_rows: ledger.counter(DROPPED_ROWS)?,
        damaged_spool_entries: ledger.counter(DAMAGED_ENTRIES)?,
        refused_requests: refusals(ledger)?,
        ledger_backlog: ledger_backlog(path, ledger),
        cache_busts: ledger.cache_busts(filter)?,
        latency: ledger.latency(filter)?,
        savings_method: SAVINGS_METHOD,
        words: Words::all(),
        team: None,
    })
}

/// What people read for the report's codes: stages, their facts and reasons, the rates savings
/// are priced at. The codes stay the keys scripts read; the dashboard and the human output
/// show these (`pith_proxy::words`, defined beside each code).
#[derive(Debug, Serialize)]
struct Words {
    /// Each stage's name.
    stages: BTreeMap<&'static str, &'static str>,
    /// Each stage's facts in the order they read best: `[code, phrase]`, the phrase with `{n}`
    /// for the number and `{s}` for a plural's `s` (empty: shown another way, as characters
    /// kept out are shown as tokens).
    facts: BTreeMap<&'static str, &'static [(&'static str, &'static str)]>,
    /// Why each stage left requests unchanged, to follow "N requests: "; under `*`, reasons
    /// given for every stage at once.
    reasons: BTreeMap<&'static str, BTreeMap<&'static str, &'static str>>,
    /// The rates savings are priced at (`estimated_saved_tokens`' keys).
    bands: BTreeMap<&'static str, &'static str>,
    /// How requests ended (the requests' `outcome`).
    outcomes: BTreeMap<&'static str, &'static str>,
}

impl Words {
    fn all() -> Words {
        let mut reasons: BTreeMap<_, BTreeMap<_, _>> = pith_proxy::words::stages()
            .map(|w| (w.stage, w.reasons.iter().copied().collect()))
            .collect();
        reasons.insert(ANY_STAGE, pith_proxy::words::any_stage().copied().collect());
        Words {
            stages: pith_proxy::words::stages()
                .map(|w| (w.stage, w.name))
                .collect(),
            facts: pith_proxy::words::stages()
                .map(|w| (w.stage, w.facts))
                .collect(),
            reasons,
            bands: pith_wire::usage::Band::ALL
                .into_iter()
                .map(|b| (b.as_str(), b.words()))
                .collect(),
            outcomes: pith_outcome::RequestOutcome::ALL
                .into_iter()
                .map(|o| (o.as_str(), o.describe()))
                .collect(),
        }
    }

    /// `stage`'s name, or its code.
    fn stage<'a>(&self, stage: &'a str) -> &'a str {
        self.stages.get(stage).copied().unwrap_or(stage)
    }

    /// `stage`'s `facts` in words, in the stage's order; a fact without words as `name=n`.
    fn facts(&self, stage: &str, facts: &BTreeMap<String, u64>) -> Vec<String> {
        let known = self.facts.get(stage).copied().unwrap_or_default();
        let mut out: Vec<String> = known
            .iter()
            .filter(|(_, phrase)| !phrase.is_empty())
            .filter_map(|(name, phrase)| {
                let n = facts.get(*name)?;
                Some(
                    phrase
                        .replace("{n}", &n.to_string())
                        .replace("{s}", plural_s(*n)),
                )
            })
            .collect();
        out.extend(
            facts
                .iter()
                .filter(|(name, _)| !known.iter().any(|(k, _)| k == name))
                .map(|(name, n)| format!("{name}={n}")),
        );
        out
    }

    /// Why `stage` left requests unchanged, or the reason's code.
    fn reason<'a>(&self, stage: &str, reason: &'a str) -> &'a str {
        [stage, ANY_STAGE]
            .iter()
            .find_map(|s| self.reasons.get(*s).and_then(|r| r.get(reason)).copied())
            .unwrap_or(reason)
    }

    /// A band's rate in words, or its code.
    fn band<'a>(&self, band: &'a str) -> &'a str {
        self.bands.get(band).copied().unwrap_or(band)
    }
}

/// The key of [`Words::reasons`] for reasons any stage gives.
const ANY_STAGE: &str = "*";

/// The ledger's groups summed three ways: per session, per model, in all.
struct Sums {
    sessions: Vec<SessionTotals>,
    models: BTreeMap<Option<String>, Totals>,
    clients: BTreeMap<String, Totals>,
    total: Totals,
}

fn sum_groups(groups: &[Group], prices: &Prices) -> Sums {
    let mut sums = Sums {
        sessions: Vec::new(),
        models: BTreeMap::new(),
        clients: BTreeMap::new(),
        total: Totals::default(),
    };
    for g in groups {
        sums.total.add(g, prices);
        // Requests without a session are added per client apart (`build_report`).
        if g.session.is_some() {
            sums.clients
                .entry(g.client.clone())
                .or_default()
                .add(g, prices);
        }
        sums.models
            .entry(g.model.clone())
            .or_default()
            .add(g, prices);
        match sums.sessions.iter_mut().find(|s| s.session == g.session) {
            Some(s) => {
                s.totals.add(g, prices);
                s.first_ms = s.first_ms.min(g.first_ms);
                s.last_ms = s.last_ms.max(g.last_ms);
                if let Some(m) = g.model.as_ref().filter(|m| !s.models.contains(m)) {
                    s.models.push(m.clone());
                }
            }
            None => {
                let mut totals = Totals::default();
                totals.add(g, prices);
                sums.sessions.push(SessionTotals {
                    session: g.session.clone(),
                    client: g.client.clone(),
                    models: g.model.iter().cloned().collect(),
                    first_ms: g.first_ms,
                    last_ms: g.last_ms,
                    totals,
                    saved_by_transform: BTreeMap::new(),
                });
            }
        }
    }
    sums
}

/// What each stage did, from its totals in the ledger.
fn transform_totals(
    ledger: &Ledger,
    filter: &Filter,
) -> anyhow::Result<BTreeMap<String, TransformTotals>> {
    let mut transforms: BTreeMap<String, TransformTotals> = BTreeMap::new();
    for stage in ledger.stage_totals(filter)? {
        let t = transforms.entry(stage.stage).or_default();
        t.requests = stage.applied;
        t.unchanged = stage.unchanged.into_iter().collect();
        for (name, kind, sum) in stage.facts {
            match FactKind::parse(&kind) {
                // A level describes one request; its sum means nothing.
                Some(FactKind::Level) => continue,
                Some(FactKind::CharsKeptOut) => *t.chars_kept_out.get_or_insert(0) += sum,
                _ => {}
            }
            t.facts.insert(name, sum);
        }
        t.estimated_tokens_kept_out = t.chars_kept_out.map(|chars| {
            pith_transform::estimated_tokens(usize::try_from(chars).unwrap_or(usize::MAX)) as u64
        });
    }
    Ok(transforms)
}

/// Each saving the ledger estimated, priced and added to its stage, its session, its model
/// and the total.
fn add_savings(
    ledger: &Ledger,
    filter: &Filter,
    prices: &Prices,
    transforms: &mut BTreeMap<String, TransformTotals>,
    sums: &mut Sums,
) -> anyhow::Result<()> {
    for saving in ledger.savings(filter)? {
        let usd = saving_usd(prices, saving.model.as_deref(), &saving.band, saving.tokens);
        // A bust charge (`bust:<stage>`) belongs to its stage's saving, told apart.
        let (stage, charge) = match saving.stage.strip_prefix(BUST_CHARGE) {
            Some(stage) => (stage.to_owned(), true),
            None => (saving.stage.clone(), false),
        };
        let t = transforms.entry(stage.clone()).or_default();
        if charge {
            if saving.band == Band::CacheRead.as_str() {
                t.bust_tokens_billed_again += saving.tokens;
            }
            if let Some(usd) = usd {
                *t.bust_charged_usd.get_or_insert(0.0) -= usd;
            }
        } else {
            *t.estimated_saved_tokens
                .entry(saving.band.clone())
                .or_default() += saving.tokens;
        }
        if let Some(usd) = usd {
            *t.estimated_saved_usd.get_or_insert(0.0) += usd;
        }
        let session = sums.sessions.iter_mut().find(|s| s.session == saving.key);
        let mut targets: Vec<&mut Totals> = vec![&mut sums.total];
        // A session's saving counts for its client; one without a session is added per
        // client apart (`build_report`).
        if let Some(c) = session
            .as_ref()
            .filter(|s| s.session.is_some())
            .and_then(|s| sums.clients.get_mut(&s.client))
        {
            targets.push(c);
        }
        if let Some(s) = session {
            let by_stage = s.saved_by_transform.entry(stage).or_default();
            by_stage.tokens += saving.tokens;
            if let Some(usd) = usd {
                *by_stage.usd.get_or_insert(0.0) += usd;
            }
            targets.push(&mut s.totals);
        }
        if let Some(m) = sums.models.get_mut(&saving.model) {
            targets.push(m);
        }
        for totals in targets {
            totals.estimated_saved_tokens += saving.tokens;
            if let Some(usd) = usd {
                *totals.estimated_saved_usd.get_or_insert(0.0) += usd;
            }
        }
    }
    Ok(())
}

/// The ledger's refusal counters, by reason.
fn refusals(ledger: &Ledger) -> anyhow::Result<BTreeMap<&'static str, u64>> {
    let mut out = BTreeMap::new();
    for reason in Refusal::ALL {
        out.insert(reason.as_str(), ledger.counter(&reason.counter())?);
    }
    Ok(out)
}

/// Requests waiting in a proxy's spool for the ledger's writers.
#[derive(Debug, Default, Serialize)]
struct LedgerBacklog {
    /// Requests waiting for their rows.
    requests: u64,
    /// Their bytes in the spool.
    bytes: u64,
    /// Rows written whose derivations (prompt fingerprints and busts, history turns) the
    /// writers have still to make: the rows come first, these after.
    derivations: u64,
}

/// The spool beside the ledger at `path` (none beside a team replica): read-only, and a
/// spool that cannot be read counts as empty rather than failing the report.
fn ledger_backlog(path: &std::path::Path, ledger: &Ledger) -> LedgerBacklog {
    let dir = pith_ledger::spool_dir(path);
    let derivations = ledger.derivations_pending().unwrap_or_else(|e| {
        tracing::debug!(error = %e, "cannot count the rows waiting for derivations");
        0
    });
    match pith_ledger::spool_backlog(&dir, ledger) {
        Ok((requests, bytes)) => LedgerBacklog {
            requests,
            bytes,
            derivations,
        },
        Err(e) => {
            tracing::debug!(error = %e, "cannot read the ledger spool");
            LedgerBacklog {
                derivations,
                ..LedgerBacklog::default()
            }
        }
    }
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

fn render(r: &Report, filtered_by_time: bool) -> String {
    let mut out = String::new();
    out.push_str(&format!("ledger: {}\n", r.ledger.display()));
    if let Some(team) = &r.team {
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
    render_tail(&mut out, r);
    out
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

/// The `s` of a plural: none for one.
fn plural_s(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
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
            tt.estimated_saved_usd
                .map_or("unknown price".to_owned(), |u| format!("${u:.4}")),
            format_args!("; tokens {}", bands.join(", "))
        ));
    }
    if tt.bust_tokens_billed_again != 0 {
        out.push_str(&format!(
            "  cache busts it caused: {} tokens billed again instead of read from the cache, {} (taken off saved)\n",
            tt.bust_tokens_billed_again,
            tt.bust_charged_usd
                .map_or("unknown price".to_owned(), |u| format!("${u:.4}"))
        ));
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

fn render_team(out: &mut String, team: &crate::team::TeamInfo) {
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

/// The report in Prometheus' text format (`/metrics`): the same numbers as `pith stats
/// --json`.
pub(crate) fn metrics(r: &Report) -> String {
    let families = [
        request_families(r),
        account_families(r),
        vec![instance_family(r)],
        transform_families(r),
        ledger_families(r),
        latency_families(r),
        vec![bust_family(r)],
    ];
    let mut out = String::new();
    for f in families.iter().flatten() {
        out.push_str(&format!(
            "# HELP {} {}\n# TYPE {} {}\n",
            f.name, f.help, f.name, f.kind
        ));
        for (labels, value) in &f.samples {
            out.push_str(&format!("{}{labels} {value}\n", f.name));
        }
    }
    out
}

/// One metric family: its name, type, help and samples (labels as written, value).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(String, f64)>,
}

fn family(
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(String, f64)>,
) -> Family {
    Family {
        name,
        kind,
        help,
        samples,
    }
}

/// One sample without labels.
fn single(value: f64) -> Vec<(String, f64)> {
    vec![(String::new(), value)]
}

fn request_families(r: &Report) -> Vec<Family> {
    let t = &r.total;
    let tokens = [
        ("input", t.usage.input),
        ("cache_write", t.usage.cache_write),
        ("cache_read", t.usage.cache_read),
        ("output", t.usage.output),
    ]
    .into_iter()
    .map(|(k, v)| (format!("{{kind=\"{k}\"}}"), v as f64))
    .collect();
    vec![
        family(
            "pith_requests_total",
            "counter",
            "Requests pith recorded.",
            single(t.requests as f64),
        ),
        family(
            "pith_request_errors_total",
            "counter",
            "Requests that ended in an error.",
            single(t.errors as f64),
        ),
        family(
            "pith_tokens_total",
            "counter",
            "Billed tokens by kind, as the providers reported them.",
            tokens,
        ),
        family(
            "pith_cost_usd_total",
            "counter",
            "Cost of the priced requests at list prices, USD.",
            single(t.cost_usd.unwrap_or(0.0)),
        ),
    ]
}

fn account_families(r: &Report) -> Vec<Family> {
    let per_account = |value: fn(&Totals) -> f64| -> Vec<(String, f64)> {
        r.by_account
            .iter()
            .map(|a| {
                (
                    format!("{{account=\"{}\"}}", label(&a.account)),
                    value(&a.totals),
                )
            })
            .collect()
    };
    vec![
        family(
            "pith_account_requests_total",
            "counter",
            "Requests pith recorded, by account (a gateway maps each to its key's).",
            per_account(|t| t.requests as f64),
        ),
        family(
            "pith_account_cost_usd_total",
            "counter",
            "Cost of each account's priced requests at list prices, USD.",
            per_account(|t| t.cost_usd.unwrap_or(0.0)),
        ),
    ]
}

fn instance_family(r: &Report) -> Family {
    family(
        "pith_instance_requests_total",
        "counter",
        "Requests pith recorded, by the proxy instance that served them.",
        r.by_instance
            .iter()
            .map(|i| {
                (
                    format!(
                        "{{instance=\"{}\"}}",
                        label(i.instance.as_deref().unwrap_or(""))
                    ),
                    i.requests as f64,
                )
            })
            .collect(),
    )
}

fn transform_families(r: &Report) -> Vec<Family> {
    let mut stages = Vec::new();
    for (stage, tt) in &r.transforms {
        stages.push((
            format!(
                "{{stage=\"{}\",result=\"applied\",reason=\"\"}}",
                label(stage)
            ),
            tt.requests as f64,
        ));
        for (reason, n) in &tt.unchanged {
            stages.push((
                format!(
                    "{{stage=\"{}\",result=\"unchanged\",reason=\"{}\"}}",
                    label(stage),
                    label(reason)
                ),
                *n as f64,
            ));
        }
    }
    vec![
        family(
            "pith_transform_requests_total",
            "counter",
            "Requests each transform stage changed or left unchanged (with why).",
            stages,
        ),
        family(
            "pith_transform_failures_total",
            "counter",
            "Transform stages that failed and were skipped (fail open).",
            single(r.transform_failures as f64),
        ),
    ]
}

fn ledger_families(r: &Report) -> Vec<Family> {
    vec![
        family(
            "pith_ledger_dropped_rows_total",
            "counter",
            "Requests served but not kept for the ledger (spool at its limit, or disk refused).",
            single(r.dropped_rows as f64),
        ),
        family(
            "pith_ledger_damaged_spool_entries_total",
            "counter",
            "Requests kept in the spool but found damaged when read (a write torn by a kill), skipped.",
            single(r.damaged_spool_entries as f64),
        ),
        family(
            "pith_refused_requests_total",
            "counter",
            "Requests refused before they were served, by reason (no ledger row each).",
            Refusal::ALL
                .iter()
                .map(|reason| {
                    (
                        format!("{{reason=\"{}\"}}", reason.as_str()),
                        r.refused_requests
                            .get(reason.as_str())
                            .copied()
                            .unwrap_or(0) as f64,
                    )
                })
                .collect(),
        ),
        family(
            "pith_ledger_backlog_requests",
            "gauge",
            "Requests waiting in the spool to be written to the ledger.",
            single(r.ledger_backlog.requests as f64),
        ),
        family(
            "pith_ledger_derivations_pending",
            "gauge",
            "Rows written whose derivations (prompt fingerprints and busts, history turns) wait.",
            single(r.ledger_backlog.derivations as f64),
        ),
    ]
}

fn latency_families(r: &Report) -> Vec<Family> {
    [
        (
            "pith_request_duration_seconds",
            "Requests from arrival to the last byte out.",
            &r.latency.total_ms,
        ),
        (
            "pith_time_to_first_byte_seconds",
            "Requests from arrival to the provider's first body byte.",
            &r.latency.ttfb_ms,
        ),
    ]
    .into_iter()
    .map(|(name, help, h)| {
        let mut samples: Vec<(String, f64)> = pith_store::ledger::LATENCY_BUCKETS_MS
            .iter()
            .zip(&h.cumulative)
            .map(|(le, n)| {
                (
                    format!("_bucket{{le=\"{}\"}}", *le as f64 / 1000.0),
                    *n as f64,
                )
            })
            .collect();
        samples.push(("_bucket{le=\"+Inf\"}".to_owned(), h.count as f64));
        samples.push(("_sum".to_owned(), h.sum_ms / 1000.0));
        samples.push(("_count".to_owned(), h.count as f64));
        family(name, "histogram", help, samples)
    })
    .collect()
}

fn bust_family(r: &Report) -> Family {
    family(
        "pith_cache_busts_total",
        "counter",
        "Prompt-cache busts between consecutive requests of a session, by who caused them.",
        vec![
            ("{cause=\"pith\"}".to_owned(), r.cache_busts.by_pith as f64),
            (
                "{cause=\"client\"}".to_owned(),
                r.cache_busts.by_client as f64,
            ),
        ],
    )
}

/// A Prometheus label value, escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
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
