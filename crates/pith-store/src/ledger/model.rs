//! What a ledger row is, and the summaries read from the ledger.

/// Name of the counter of ledger rows dropped because the write queue was full.
pub const DROPPED_ROWS: &str = "dropped_rows";

/// Name of the counter of spool entries found damaged (a write torn when the proxy was killed,
/// a damaged disk) and skipped: records that were kept and could not be read back, told apart
/// from [`DROPPED_ROWS`] (records never kept).
pub const DAMAGED_ENTRIES: &str = "damaged_spool_entries";

/// The stage of a [`Saving`] that charges a cache bust pith caused to the stage that caused
/// it: `bust:<stage>`. Derived where rows are paired (the writer, a replica), never shipped.
pub const BUST_CHARGE: &str = "bust:";

/// How a request ended and who caused it are the proxy's words, in a leaf both crates use
/// (`pith-outcome`); the ledger stores them by name.
pub use pith_outcome::{Party, RequestOutcome};
pub use pith_wire::usage::Usage;

/// One number a transform reported, e.g. `tools = 48` of kind `count`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    /// Short stable name, e.g. `tools`.
    pub name: String,
    /// What the number measures (`pith_transform::FactKind::as_str`), e.g. `chars_kept_out`.
    pub kind: String,
    /// The number, in what `kind` says it measures.
    pub value: u64,
}

/// What one transform stage did to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransformResult {
    /// It changed the request; its facts in the order the `pith-transforms` header lists them.
    Applied(Vec<Fact>),
    /// It left the request unchanged, for this named reason (e.g. `already_deferring`).
    Unchanged(String),
    /// It failed and its edit was dropped (the request went on without it); the error.
    Failed(String),
}

impl TransformResult {
    pub(super) fn as_str(&self) -> &'static str {
        match self {
            TransformResult::Applied(_) => "applied",
            TransformResult::Unchanged(_) => "unchanged",
            TransformResult::Failed(_) => "failed",
        }
    }
}

/// The requests one proxy instance served (`Ledger::instance_totals`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InstanceTotals {
    /// Its name; `None` for rows written before instances were kept.
    pub instance: Option<String>,
    /// Requests it served.
    pub requests: u64,
    /// Those that did not end `ok` or `local`.
    pub errors: u64,
    /// Its first request (ms since the Unix epoch).
    pub first_ms: i64,
    /// Its last request.
    pub last_ms: i64,
}

/// One stage's entry for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transform {
    /// The stage's name (`Stage::name`), e.g. `defer`.
    pub stage: String,
    /// What the stage did.
    pub result: TransformResult,
}

/// One request as the ledger records it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    /// When the request arrived, in milliseconds since the Unix epoch.
    pub ts_ms: i64,
    /// Short client name from the user-agent, e.g. `claude-code`; `unknown` when it has none.
    pub client: String,
    /// Session id: from a session header, else `metadata.user_id`, else `h-` and a hash of the
    /// first user message; `None` when none of them is there.
    pub session: Option<String>,
    /// `anthropic`, `chat`, `responses`; `None` for pass-through paths.
    pub wire: Option<String>,
    /// The upstream the request went to: `anthropic` or `openai`.
    pub provider: String,
    /// The model the request asked for, else the one the response named; `None` when neither did.
    pub model: Option<String>,
    /// HTTP method, e.g. `POST`.
    pub method: String,
    /// Request path without the query, e.g. `/v1/messages`.
    pub path: String,
    /// HTTP status returned to the client; `None` if it went away first.
    pub status: Option<u16>,
    /// How the request ended.
    pub outcome: RequestOutcome,
    /// What went wrong, in words: pith's own fault message, a broken stream, or the error a stream
    /// reported; `None` otherwise (an upstream error status is in `status`).
    pub error: Option<String>,
    /// Length of the request body the client sent.
    pub bytes_client: u64,
    /// Length of the request body sent upstream (differs from `bytes_client` when a stage changed
    /// it; 0 when the request never got that far).
    pub bytes_upstream: u64,
    /// Bytes of response body the provider sent, as encoded on the wire; 0 when pith answered.
    pub bytes_response: u64,
    /// Bytes of the client's body in `tools`.
    pub tools_bytes: u64,
    /// Bytes of the client's body in the system prompt (Anthropic `system`, Responses
    /// `instructions`).
    pub system_bytes: u64,
    /// Bytes of the client's body in the history (`messages`, Responses `input`).
    pub messages_bytes: u64,
    /// Every other byte of the client's body (all of it on pass-through paths).
    pub other_bytes: u64,
    /// Billed tokens the response reported; `None` when it reported none or was not read (an
    /// error status, `count_tokens`, a pass-through path, a body too large to keep).
    pub usage: Option<Usage>,
    /// Milliseconds from arrival to the provider's first body chunk; `None` if none came.
    pub ttfb_ms: Option<f64>,
    /// Milliseconds from arrival until the exchange ended (last byte out, a failure, or the client
    /// going away).
    pub total_ms: f64,
    /// What each stage of the pipeline did, in pipeline order.
    pub transforms: Vec<Transform>,
    /// The prompt as sent upstream, fingerprinted (`pith_wire::fingerprint::Fingerprint`
    /// bytes); `None` off the three wires or for a body that is not JSON.
    pub fingerprint: Option<Vec<u8>>,
    /// The prompt as the client sent it, when a stage changed it (else `None`: the same).
    pub client_fingerprint: Option<Vec<u8>>,
    /// What the stages' edits are estimated to have saved, per (stage, rate); empty without
    /// usage (nothing to price by).
    pub savings: Vec<Saving>,
    /// The account the request belongs to (a gateway's key maps each request to one); `None`
    /// for rows written before ledger schema 6, which belong to the ledger's own account (the
    /// proxy's `[account] id`).
    pub account: Option<String>,
    /// When the request arrived, in microseconds since the epoch (unique within the proxy
    /// that wrote it): the order a session's requests are paired in for cache busts. `None`
    /// for a row that does not know (pulled from the team ledger): it arrived at `ts_ms`.
    pub arrival_us: Option<i64>,
    /// The name of the proxy instance that served it (`[proxy] instance`); `None` for rows
    /// written before ledger schema 8.
    pub instance: Option<String>,
    /// Its derivations (the prompt fingerprints, the bust pairing and charge) come later, by
    /// [`Ledger::write_derived`]: the proxy's writers put the row in the ledger as soon as it
    /// can be written and parse the body after. Such a row is not shipped to a team ledger
    /// until they have come. Never set on a row read back.
    pub derivations_pending: bool,
    /// What the provider's token counter said of the client's own body, for a request a
    /// stage changed that was sampled for counting: `counted`, `rate_limited`, `failed` or
    /// `paused` (`pith_ledger::ProviderCount`); `None` when it was not sampled, and for rows
    /// written before ledger schema 10.
    pub provider_count_outcome: Option<String>,
    /// The input tokens the counter counted in the client's own body, with `counted`.
    pub provider_count_tokens: Option<u64>,
}

/// The requests sampled for the provider's own count of the client's body
/// ([`Row::provider_count_outcome`]), summed, with what the report compares the counts to.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProviderCountSums {
    /// Sampled requests.
    pub sampled: u64,
    /// Counted (`counted`).
    pub counted: u64,
    /// The counter's 429 (`rate_limited`).
    pub rate_limited: u64,
    /// Not asked during a pause (`paused`).
    pub paused: u64,
    /// Any other end (`failed`, or a name a newer pith wrote).
    pub failed: u64,
    /// Counted requests whose answer reported usage: those compared.
    pub compared: u64,
    /// Over those: the tokens counted in the clients' own bodies less the prompt tokens billed
    /// for the bodies pith sent (usage: uncached, cache writes and reads together).
    pub counted_kept_out: i64,
    /// Over the same: what pith estimated its stages kept out (their savings, every rate, net
    /// of what they added; a request with none counts 0).
    pub estimated_kept_out: i64,
}

/// The derivations of a row written with [`Row::derivations_pending`], found by its arrival.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Derivation {
    /// The row's [`Row::arrival_us`].
    pub arrival_us: i64,
    /// [`Row::fingerprint`].
    pub fingerprint: Option<Vec<u8>>,
    /// [`Row::client_fingerprint`].
    pub client_fingerprint: Option<Vec<u8>>,
}

impl Row {
    /// What `stage` did to this request, if it looked at it.
    pub fn transform(&self, stage: &str) -> Option<&TransformResult> {
        self.transforms
            .iter()
            .find(|t| t.stage == stage)
            .map(|t| &t.result)
    }
}

/// What one stage's edits of one request are estimated to have saved at one rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saving {
    /// The stage's name.
    pub stage: String,
    /// The rate the tokens would have been billed at (`pith_wire::usage::Band::as_str`).
    pub band: String,
    /// Estimated prompt tokens kept out, less those added; negative when it added more.
    pub tokens: i64,
}

/// A [`Saving`] summed over the rows sharing one key and model: what the stages saved per
/// (key, model, stage, rate). The key says whose rows: [`SessionSaving`], [`AccountSaving`],
/// [`ClientSaving`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavingSum<K> {
    /// Whose rows: a session, an account or a client (see the aliases).
    pub key: K,
    /// The model (what prices the tokens); `None` for rows without one.
    pub model: Option<String>,
    /// The stage (`bust:<stage>` for a bust's charge).
    pub stage: String,
    /// The rate (`pith_wire::usage::Band::as_str`).
    pub band: String,
    /// The tokens, summed (signed).
    pub tokens: i64,
}

/// Savings per (session, model): the key is the session, `None` for rows without one.
pub type SessionSaving = SavingSum<Option<String>>;
/// Savings per (account, model): the key is the account, `None` for rows written before
/// accounts were kept (the ledger's own).
pub type AccountSaving = SavingSum<Option<String>>;
/// Savings of the requests without a session per (client, model): the key is the client.
pub type ClientSaving = SavingSum<String>;

/// Which rows a summary covers.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only rows that arrived at or after this time (ms since the Unix epoch); `None` for all.
    pub since_ms: Option<i64>,
    /// Only the rows of this session; `None` for every session.
    pub session: Option<String>,
}

/// Totals of the rows sharing one (session, model) pair.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Group {
    /// The session; `None` for rows without one.
    pub session: Option<String>,
    /// The client of the group's rows (the first by name, should they differ).
    pub client: String,
    /// The model; `None` for rows without one.
    pub model: Option<String>,
    /// Rows in the group.
    pub requests: u64,
    /// Requests whose response carried usage.
    pub with_usage: u64,
    /// Their tokens, summed.
    pub usage: Usage,
    /// Requests compared with the previous one of the group for a cache bust.
    pub bust_pairs: u64,
    /// Busts only in what pith sent.
    pub busts_pith: u64,
    /// Busts the client's own prompts show too.
    pub busts_client: u64,
    /// Requests that did not end `ok` or `local`.
    pub errors: u64,
    /// Requests pith answered itself (outcome `local`).
    pub local: u64,
    /// Requests some stage changed.
    pub transformed: u64,
    /// Stage failures, summed (one request may count several).
    pub transform_failures: u64,
    /// Arrival of the group's first request, ms since the Unix epoch.
    pub first_ms: i64,
    /// Arrival of the group's last request, ms since the Unix epoch.
    pub last_ms: i64,
}

/// Totals of the rows sharing one (account, model) pair: a [`Group`] whose `session` is
/// `None` and whose `client` is the first by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AccountGroup {
    /// The account; `None` for rows written before accounts were kept (the ledger's own).
    pub account: Option<String>,
    /// The totals.
    pub totals: Group,
}

/// What one stage did over the rows a filter covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StageTotals {
    /// The stage's name.
    pub stage: String,
    /// Requests it changed.
    pub applied: u64,
    /// Requests on which it failed.
    pub failed: u64,
    /// Requests it left unchanged, by reason, reasons sorted.
    pub unchanged: Vec<(String, u64)>,
    /// Its facts summed over the requests it changed: (name, kind, sum), sorted by name.
    pub facts: Vec<(String, String, u64)>,
}

/// Upper bounds (ms) of the latency histograms' buckets.
pub const LATENCY_BUCKETS_MS: [u64; 10] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 120_000,
];

/// The bucket of `ms` in `latency_totals`: the index of the first bound at or above it.
pub(super) fn latency_bucket(ms: f64) -> i64 {
    LATENCY_BUCKETS_MS
        .iter()
        .position(|b| ms <= *b as f64)
        .unwrap_or(LATENCY_BUCKETS_MS.len()) as i64
}

/// Latency histograms over the filtered requests.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Latency {
    /// The whole exchange, arrival to the last byte out.
    pub total_ms: Histogram,
    /// Arrival to the provider's first body byte.
    pub ttfb_ms: Histogram,
}

/// One histogram: cumulative counts at each of [`LATENCY_BUCKETS_MS`], the count and the sum.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Histogram {
    /// Requests at or under each bound, in bound order.
    pub cumulative: Vec<u64>,
    /// Requests counted.
    pub count: u64,
    /// Their sum, ms.
    pub sum_ms: f64,
}

/// One request as a live view shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Recent {
    /// The row's id: increasing, so a view asks for what came after the last one it has.
    pub id: i64,
    /// When it arrived (ms since the Unix epoch).
    pub ts_ms: i64,
    /// Short client name.
    pub client: String,
    /// Its session.
    pub session: Option<String>,
    /// `anthropic`, `chat`, `responses`.
    pub wire: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The request path.
    pub path: String,
    /// The status the client got.
    pub status: Option<u16>,
    /// How it ended (`RequestOutcome` name).
    pub outcome: String,
    /// Its tokens (all 0 without usage).
    #[serde(flatten)]
    pub usage: Usage,
    /// Milliseconds to the provider's first byte.
    pub ttfb_ms: Option<f64>,
    /// Milliseconds until the exchange ended.
    pub total_ms: f64,
    /// The client body's anatomy: bytes of tools, system prompt, history, the rest.
    pub tools_bytes: u64,
    /// See `tools_bytes`.
    pub system_bytes: u64,
    /// See `tools_bytes`.
    pub messages_bytes: u64,
    /// See `tools_bytes`.
    pub other_bytes: u64,
    /// The stages that changed it, in order.
    pub transforms: Vec<String>,
}

/// The requests of one time bucket and one model (a chart over time prices each model apart).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimeBucket {
    /// The bucket's start, ms since the Unix epoch (a multiple of the bucket's width).
    pub start_ms: i64,
    /// The model; `None` for rows without one.
    pub model: Option<String>,
    /// Requests that arrived in it.
    pub requests: u64,
    /// Their tokens, summed.
    pub usage: Usage,
}

/// Prompt-cache busts: a request whose prompt differs from the previous request of its
/// session and model at or before the segment that one was cached through.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheBusts {
    /// Requests compared with a previous one.
    pub pairs: u64,
    /// Busts only in what pith sent (the client's own prompts kept their prefix).
    pub by_pith: u64,
    /// Busts the client's own prompts show too.
    pub by_client: u64,
    /// The newest busts, newest first (at most 100).
    pub busts: Vec<Bust>,
}

/// One bust.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Bust {
    /// The busting request's row id (`/pith/api/request?id=`).
    pub id: i64,
    /// Its session.
    pub session: String,
    /// Its model.
    pub model: Option<String>,
    /// When the busting request arrived.
    pub ts_ms: i64,
    /// The first prompt segment that differs (0 is the model, then tools, system, messages).
    pub segment: u64,
    /// The last segment the previous request was cached through.
    pub cached_through: u64,
    /// `pith` or `client`.
    pub cause: String,
    /// The segment in words ("tool definition 3 of 40"), when the busting request's
    /// fingerprint keeps its layout.
    pub segment_words: Option<String>,
    /// The stage charged for it, when pith caused it.
    pub stage: Option<String>,
}
