//! The report every reader of the ledger shows: `pith stats` (human and `--json`), the
//! dashboard's `/pith/api/stats`, `/metrics` ([`metrics`]) and the status line's totals, so they
//! agree on every number. Totals per session, model, client, account and instance, what each
//! stage did and is estimated to have saved, priced at the model's list price ([`prices`]).
//! Rendering it for people is the binary's.

pub mod counted;
pub mod holdout;
pub mod metrics;
pub mod prices;

use std::collections::BTreeMap;
use std::path::PathBuf;

use pith_outcome::Refusal;
use pith_store::StoreError;
use pith_store::ledger::{BUST_CHARGE, DAMAGED_ENTRIES, DROPPED_ROWS, Filter, Group, Ledger};
use pith_transform::FactKind;
use pith_transform::words::StageWords;
use pith_wire::usage::{Band, Usage};
use serde::Serialize;

use prices::Prices;

/// The `s` of a plural: none for one ("1 request", "2 requests").
pub fn plural_s(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Totals over some rows: a session's, a model's, a client's, an account's, all.
#[derive(Debug, Default, Serialize)]
pub struct Totals {
    /// Rows.
    pub requests: u64,
    /// Rows whose answer reported usage.
    pub requests_with_usage: u64,
    /// Rows that did not end `ok` or `local`.
    pub errors: u64,
    /// The tokens, by rate (`input_tokens`, `cache_write_tokens` with the one-hour ones
    /// included, `cache_write_1h_tokens`, `cache_read_tokens`, `output_tokens`).
    #[serde(flatten)]
    pub usage: Usage,
    /// Every prompt token, cached or not.
    pub prompt_tokens: u64,
    /// Share of prompt tokens read from the provider's cache.
    pub cache_hit_share: f64,
    /// Cost of the priced requests; `None` when no request had a known price.
    pub cost_usd: Option<f64>,
    /// Models seen without a known price (their tokens are not in `cost_usd`).
    pub unpriced_models: Vec<String>,
    /// What the provider's prompt cache changed the priced requests' cost by, against the same
    /// prompts billed as uncached input: reads' discount less writes' surcharge (negative when
    /// caches were written and not read). The provider's doing, not pith's.
    pub cache_discount_usd: Option<f64>,
    /// What pith's transforms are estimated to have saved on the priced requests (see the
    /// report's `savings_method`); negative when they added more than they kept out.
    pub estimated_saved_usd: Option<f64>,
    /// The prompt tokens behind `estimated_saved_usd` (priced or not), signed.
    pub estimated_saved_tokens: i64,
    /// Requests compared with the previous one of their session and model for a cache bust.
    pub cache_bust_pairs: u64,
    /// Busts only in what pith sent (the client's own prompts kept their prefix).
    pub cache_busts_by_pith: u64,
    /// Busts the client's own prompts show too.
    pub cache_busts_by_client: u64,
}

impl Totals {
    /// Add what a stage saved: `tokens` (signed), and their price when the model has one.
    fn add_saving(&mut self, tokens: i64, usd: Option<f64>) {
        self.estimated_saved_tokens += tokens;
        if let Some(usd) = usd {
            *self.estimated_saved_usd.get_or_insert(0.0) += usd;
        }
    }

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

/// One session's totals (rows without a session are one "session" per model).
#[derive(Debug, Serialize)]
pub struct SessionTotals {
    /// The session; `None` for rows without one.
    pub session: Option<String>,
    /// Its client.
    pub client: String,
    /// The models it used.
    pub models: Vec<String>,
    /// Arrival of its first request, ms since the epoch.
    pub first_ms: i64,
    /// Arrival of its last request, ms since the epoch.
    pub last_ms: i64,
    /// Its totals.
    #[serde(flatten)]
    pub totals: Totals,
    /// What each transform is estimated to have saved in this session.
    pub saved_by_transform: BTreeMap<String, StageSaving>,
}

/// One transform's estimated savings in one session.
#[derive(Debug, Default, Serialize)]
pub struct StageSaving {
    /// Prompt tokens, signed.
    pub tokens: i64,
    /// At list prices, USD; `None` when no model had a known price.
    pub usd: Option<f64>,
}

/// One account's requests: a developer's, on a gateway that maps requests to accounts by key.
#[derive(Debug, Serialize)]
pub struct AccountTotals {
    /// The account.
    pub account: String,
    /// Its totals.
    #[serde(flatten)]
    pub totals: Totals,
}

/// One model's totals.
#[derive(Debug, Serialize)]
pub struct ModelTotals {
    /// The model; `None` for rows without one.
    pub model: Option<String>,
    /// Its totals.
    #[serde(flatten)]
    pub totals: Totals,
}

/// One client's totals (every session it made), with what pith saved on them.
#[derive(Debug, Serialize)]
pub struct ClientTotals {
    /// The client.
    pub client: String,
    /// Its totals.
    #[serde(flatten)]
    pub totals: Totals,
}

/// What one stage did over the rows.
#[derive(Debug, Default, Serialize)]
pub struct TransformTotals {
    /// Requests the transform changed.
    pub requests: u64,
    /// Sums of the numeric facts it reported (e.g. `chars` for defer).
    pub facts: BTreeMap<String, u64>,
    /// Characters its edits kept out of context (the facts of that kind, e.g. defer's
    /// `chars`), when it reports any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chars_kept_out: Option<u64>,
    /// Prompt tokens those characters stand for, estimated as one token per 4 characters (a
    /// heuristic, not a tokenizer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_tokens_kept_out: Option<u64>,
    /// Requests the transform looked at and left unchanged, by reason (e.g. defer's
    /// `already_deferring`, `too_little_to_defer`).
    pub unchanged: BTreeMap<String, u64>,
    /// Estimated prompt tokens its edits saved (kept out less added; negative when it added
    /// more), by the rate the real request paid where they sit: `cache_read`,
    /// `cache_write_5m`, `cache_write_1h`, `input`. Requests without usage are not in it.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub estimated_saved_tokens: BTreeMap<String, i64>,
    /// Those tokens at each model's prices, USD, less what the cache busts it caused cost
    /// (`bust_charged_usd`); `None` when none had a known price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_saved_usd: Option<f64>,
    /// Prompt tokens billed again because of cache busts this transform caused (the prefix
    /// the previous request had cached that the next did not read), when it caused any.
    #[serde(skip_serializing_if = "is_zero")]
    pub bust_tokens_billed_again: i64,
    /// What that cost over the cache-read rate they would have had, USD (already taken off
    /// `estimated_saved_usd`); `None` without a known price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bust_charged_usd: Option<f64>,
    /// How often the model came back for what the stage withheld (its cost in turns), for a
    /// stage that says how it is counted ([`Words::came_back`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub came_back: Option<CameBack>,
}

/// The times the model came back for what a stage withheld, and what they are counted
/// against (the requests it changed, or the stage's own count of what it withheld).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CameBack {
    /// Times the model came back.
    pub times: u64,
    /// Counted against.
    pub of: u64,
}

/// Each stage's [`CameBack`], from the facts the ledger summed (the counting fact may be
/// another stage's).
fn add_came_back(words: &Words, transforms: &mut BTreeMap<String, TransformTotals>) {
    for (stage, spec) in &words.came_back {
        // A stage that changed nothing withheld nothing.
        let Some(t) = transforms.get(*stage).filter(|t| t.requests > 0) else {
            continue;
        };
        let of = match spec.of {
            Some(fact) => t.facts.get(fact).copied().unwrap_or(0),
            None => t.requests,
        };
        let times = transforms
            .get(spec.stage)
            .and_then(|counting| counting.facts.get(spec.fact))
            .copied()
            .unwrap_or(0);
        if let Some(t) = transforms.get_mut(*stage) {
            t.came_back = Some(CameBack { times, of });
        }
    }
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

/// The report over the rows a filter covers.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The ledger it read.
    pub ledger: PathBuf,
    /// Only rows that arrived at or after this time (ms since the epoch), when asked.
    pub since_ms: Option<i64>,
    /// Only this session's rows, when asked.
    pub session: Option<String>,
    /// Per session and model.
    pub sessions: Vec<SessionTotals>,
    /// Per model.
    pub models: Vec<ModelTotals>,
    /// Per client (Claude Code, OpenCode, Codex, an SDK), the busiest first: a session's
    /// requests and savings count for its client; requests without a session for the client
    /// that sent each (`Ledger::sessionless_by_client`).
    pub clients: Vec<ClientTotals>,
    /// Per account (rows from before accounts were kept are the proxy's own account's).
    pub by_account: Vec<AccountTotals>,
    /// Per proxy instance that served the requests, the busiest first (several behind a load
    /// balancer, in team mode); rows from before instances were kept have no name.
    pub by_instance: Vec<pith_store::ledger::InstanceTotals>,
    /// Every row.
    pub total: Totals,
    /// What each stage did, by stage.
    pub transforms: BTreeMap<String, TransformTotals>,
    /// The held-out conversations against the rest, when any was held out
    /// (`[proxy] holdout`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holdout: Option<holdout::HoldoutComparison>,
    /// The provider's own counts of sampled requests against pith's estimate, when any was
    /// sampled (`[proxy] provider_counts`); every other saving figure is pith's estimate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_counts: Option<counted::ProviderCounts>,
    /// Stage failures, summed.
    pub transform_failures: u64,
    /// Requests the proxy served but could not keep for the ledger (its spool at its limit or
    /// its disk refusing the write; before the spool, a full write queue).
    pub dropped_rows: u64,
    /// Entries the proxy had kept in its spool and found damaged when it read them (a write
    /// torn when it was killed): requests with no row, for another cause than `dropped_rows`.
    pub damaged_spool_entries: u64,
    /// Requests refused before they were served, by reason (counted, not rows: a flood of
    /// unauthenticated requests does not grow the ledger).
    pub refused_requests: BTreeMap<&'static str, u64>,
    /// Requests waiting in the proxy's spool to be written as rows (a burst being caught up).
    pub ledger_backlog: LedgerBacklog,
    /// Prompt-cache busts between consecutive requests of a session (same model).
    pub cache_busts: pith_store::ledger::CacheBusts,
    /// Latency histograms (bucket bounds: `pith_store::ledger::LATENCY_BUCKETS_MS`).
    pub latency: pith_store::ledger::Latency,
    /// How `estimated_saved_*` are estimated.
    pub savings_method: &'static str,
    /// What people read for the codes above.
    pub words: Words,
}

/// The report over the ledger at `path`: what `pith stats --json` prints and the dashboard's
/// API serves, so the two agree on every number. Rows that name no account (written before
/// accounts were kept) are `own_account`'s.
pub fn report(
    path: &std::path::Path,
    filter: &Filter,
    prices: &Prices,
    own_account: &str,
    words: Words,
) -> Result<Report, StoreError> {
    // Read-only: stats never changes the ledger's mode or schema, nor makes a file a ledger.
    let ledger = Ledger::open_read_only(path)?;
    report_over(&ledger, path, filter, prices, own_account, words)
}

/// [`report`] over a connection the caller holds (the dashboard's shared readers); `path` is
/// the file it reads, as the report names it.
pub fn report_over(
    ledger: &Ledger,
    path: &std::path::Path,
    filter: &Filter,
    prices: &Prices,
    own_account: &str,
    words: Words,
) -> Result<Report, StoreError> {
    let groups = ledger.groups(filter)?;
    let mut report = build_report(path, filter, &groups, ledger, prices, words)?;
    report.by_account = by_account(ledger, filter, prices, own_account)?;
    Ok(report)
}

/// The totals per account, accounts by name, with what the transforms saved on each.
fn by_account(
    ledger: &Ledger,
    filter: &Filter,
    prices: &Prices,
    own_account: &str,
) -> Result<Vec<AccountTotals>, StoreError> {
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
            totals.add_saving(saving.tokens, usd);
        }
    }
    Ok(accounts
        .into_iter()
        .map(|(account, totals)| AccountTotals { account, totals })
        .collect())
}

/// `tokens` saved at `band` on `model`, in USD at its price; `None` when it has none.
pub fn saving_usd(prices: &Prices, model: Option<&str>, band: &str, tokens: i64) -> Option<f64> {
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
    words: Words,
) -> Result<Report, StoreError> {
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
    add_came_back(&words, &mut transforms);
    // Asked of the rows only when some were held out.
    let held_out = if transforms.contains_key(pith_transform::holdout::NAME) {
        ledger.sessions_with_stage(pith_transform::holdout::NAME, filter)?
    } else {
        Vec::new()
    };
    let holdout = holdout::compare(&sums.sessions, &held_out);
    for saving in ledger.sessionless_savings_by_client(filter)? {
        let usd = saving_usd(prices, saving.model.as_deref(), &saving.band, saving.tokens);
        sums.clients
            .entry(saving.key)
            .or_default()
            .add_saving(saving.tokens, usd);
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
        holdout,
        provider_counts: counted::summarize(ledger.provider_counts(filter)?),
        dropped_rows: ledger.counter(DROPPED_ROWS)?,
        damaged_spool_entries: ledger.counter(DAMAGED_ENTRIES)?,
        refused_requests: refusals(ledger)?,
        ledger_backlog: ledger_backlog(path, ledger),
        cache_busts: ledger.cache_busts(filter)?,
        latency: ledger.latency(filter)?,
        savings_method: SAVINGS_METHOD,
        words,
    })
}

/// What people read for the report's codes: stages, their facts and reasons, the rates savings
/// are priced at. The codes stay the keys scripts read; the dashboard and the human output
/// show these (defined beside each code: `pith_transform::words`, and the proxy's own stages'
/// in `pith_proxy::words`, which the caller hands to [`Words::new`]).
#[derive(Debug, Serialize)]
pub struct Words {
    /// Each stage's name.
    pub stages: BTreeMap<&'static str, &'static str>,
    /// Each stage's facts in the order they read best: `[code, phrase]`, the phrase with `{n}`
    /// for the number and `{s}` for a plural's `s` (empty: shown another way, as characters
    /// kept out are shown as tokens).
    pub facts: BTreeMap<&'static str, &'static [(&'static str, &'static str)]>,
    /// Why each stage left requests unchanged, to follow "N requests: "; under `*`, reasons
    /// given for every stage at once.
    pub reasons: BTreeMap<&'static str, BTreeMap<&'static str, &'static str>>,
    /// The rates savings are priced at (`estimated_saved_tokens`' keys).
    pub bands: BTreeMap<&'static str, &'static str>,
    /// How requests ended (the requests' `outcome`).
    pub outcomes: BTreeMap<&'static str, &'static str>,
    /// For each stage that says so, where the model coming back for what it withheld is
    /// counted, and its words.
    pub came_back: BTreeMap<&'static str, pith_transform::words::CameBack>,
}

impl Words {
    /// The words for every stage in `stages` and every reason in `any_stage` (given for every
    /// stage at once), with the rates' and the outcomes'.
    pub fn new<S>(
        stages: S,
        any_stage: impl Iterator<Item = &'static (&'static str, &'static str)>,
    ) -> Words
    where
        S: Iterator<Item = &'static StageWords> + Clone,
    {
        let mut reasons: BTreeMap<_, BTreeMap<_, _>> = stages
            .clone()
            .map(|w| (w.stage, w.reasons.iter().copied().collect()))
            .collect();
        reasons.insert(ANY_STAGE, any_stage.copied().collect());
        Words {
            stages: stages.clone().map(|w| (w.stage, w.name)).collect(),
            facts: stages.clone().map(|w| (w.stage, w.facts)).collect(),
            came_back: stages
                .filter_map(|w| Some((w.stage, w.came_back?)))
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

    /// How often the model came back for what `stage` withheld, in words ("the model searched
    /// for a deferred tool 3 times, in 12 requests with tools deferred").
    pub fn came_back(&self, stage: &str, counted: &CameBack) -> Option<String> {
        let spec = self.came_back.get(stage)?;
        Some(format!(
            "{}, {}",
            phrase(spec.times, counted.times),
            phrase(spec.of_words, counted.of)
        ))
    }

    /// `stage`'s name, or its code.
    pub fn stage<'a>(&self, stage: &'a str) -> &'a str {
        self.stages.get(stage).copied().unwrap_or(stage)
    }

    /// `stage`'s `facts` in words, in the stage's order; a fact without words as `name=n`.
    pub fn facts(&self, stage: &str, facts: &BTreeMap<String, u64>) -> Vec<String> {
        let known = self.facts.get(stage).copied().unwrap_or_default();
        let mut out: Vec<String> = known
            .iter()
            .filter(|(_, phrase)| !phrase.is_empty())
            .filter_map(|(name, words)| Some(phrase(words, *facts.get(*name)?)))
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
    pub fn reason<'a>(&self, stage: &str, reason: &'a str) -> &'a str {
        [stage, ANY_STAGE]
            .iter()
            .find_map(|s| self.reasons.get(*s).and_then(|r| r.get(reason)).copied())
            .unwrap_or(reason)
    }

    /// A band's rate in words, or its code.
    pub fn band<'a>(&self, band: &'a str) -> &'a str {
        self.bands.get(band).copied().unwrap_or(band)
    }
}

/// A phrase of a stage's words with its number: `{n}` the number, `{s}` a plural's `s`.
fn phrase(words: &str, n: u64) -> String {
    words
        .replace("{n}", &n.to_string())
        .replace("{s}", plural_s(n))
}

/// The key of [`Words::reasons`] for reasons any stage gives.
const ANY_STAGE: &str = "*";

/// The ledger's groups summed three ways: per session, per model, in all.
struct Sums {
    pub sessions: Vec<SessionTotals>,
    pub models: BTreeMap<Option<String>, Totals>,
    pub clients: BTreeMap<String, Totals>,
    pub total: Totals,
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
) -> Result<BTreeMap<String, TransformTotals>, StoreError> {
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
) -> Result<(), StoreError> {
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
            totals.add_saving(saving.tokens, usd);
        }
    }
    Ok(())
}

/// The ledger's refusal counters, by reason.
fn refusals(ledger: &Ledger) -> Result<BTreeMap<&'static str, u64>, StoreError> {
    let mut out = BTreeMap::new();
    for reason in Refusal::ALL {
        out.insert(reason.as_str(), ledger.counter(&reason.counter())?);
    }
    Ok(out)
}

/// Requests waiting in a proxy's spool for the ledger's writers.
#[derive(Debug, Default, Serialize)]
pub struct LedgerBacklog {
    /// Requests waiting for their rows.
    pub requests: u64,
    /// Their bytes in the spool.
    pub bytes: u64,
    /// Rows written whose derivations (prompt fingerprints and busts, history turns) the
    /// writers have still to make: the rows come first, these after.
    pub derivations: u64,
}

/// The spool beside the ledger at `path` (none beside a team replica): read-only, and a
/// spool that cannot be read counts as empty rather than failing the report.
fn ledger_backlog(path: &std::path::Path, ledger: &Ledger) -> LedgerBacklog {
    let dir = crate::spool_dir(path);
    let derivations = ledger.derivations_pending().unwrap_or_else(|e| {
        tracing::debug!(error = %e, "cannot count the rows waiting for derivations");
        0
    });
    match crate::spool_backlog(&dir, ledger) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(requests: u64, facts: &[(&str, u64)]) -> TransformTotals {
        TransformTotals {
            requests,
            facts: facts.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            ..TransformTotals::default()
        }
    }

    /// Deferral's cost in turns is the tool searches the hiding half counted, against the
    /// requests it deferred in; the excerpts' is their own `asked_again` against the outputs
    /// they shortened; a stage that changed nothing has none (it withheld nothing), and one the
    /// model never came back to says 0.
    #[test]
    fn a_stages_cost_in_turns_is_counted_where_its_words_say() {
        let words = Words::new(pith_transform::words::STAGES.iter(), std::iter::empty());
        let mut transforms = BTreeMap::from([
            ("defer".to_owned(), stage(12, &[("tools", 300)])),
            (
                pith_transform::search_trip::hide::NAME.to_owned(),
                stage(3, &[(pith_transform::search_trip::hide::SEARCHES, 4)]),
            ),
            (
                "outputs".to_owned(),
                stage(30, &[("first", 9), ("asked_again", 2)]),
            ),
            ("pins".to_owned(), stage(1, &[])),
        ]);
        add_came_back(&words, &mut transforms);
        let came_back = |s: &str| transforms[s].came_back;
        assert_eq!(came_back("defer"), Some(CameBack { times: 4, of: 12 }));
        assert_eq!(came_back("outputs"), Some(CameBack { times: 2, of: 9 }));
        assert_eq!(came_back("pins"), None);
        assert_eq!(
            words
                .came_back("defer", &CameBack { times: 1, of: 12 })
                .as_deref(),
            Some(
                "the model searched for a deferred tool 1 time, in 12 requests with tools deferred"
            )
        );

        let mut quiet = BTreeMap::from([
            ("defer".to_owned(), stage(5, &[])),
            ("outputs".to_owned(), stage(0, &[])),
        ]);
        add_came_back(&words, &mut quiet);
        assert_eq!(quiet["defer"].came_back, Some(CameBack { times: 0, of: 5 }));
        assert_eq!(quiet["outputs"].came_back, None, "it changed nothing");
    }
}
