//! What the request path hands the ledger: one [`Record`] per request, unparsed, every field
//! owned, so a record can wait in the spool file and come back the same.

use bytes::Bytes;
use pith_outcome::RequestOutcome;
use pith_transform::{FactKind, Site, StageReport, StageResult};
use pith_wire::request::RequestFacts;
use pith_wire::{Provider, Wire};

/// Everything the request path knows about one request, unparsed. Built in one place
/// (`pith-proxy`'s `request::Context::take_pending`) and finished in one place (its
/// `tee::Pending::finish`).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Record {
    /// When the request arrived, in ms since the epoch.
    pub ts_ms: i64,
    /// When the request arrived, in microseconds since the epoch, unique and increasing within
    /// the process ([`pith_store::clock::Clock::arrival_us`]): a session's requests are paired for cache busts in this
    /// order, whatever order their rows are written in.
    pub arrival_us: i64,
    /// The client, by its short name.
    pub client: String,
    /// The session its headers named, if any.
    pub header_session: Option<String>,
    /// The `pith-agent-type` header's value, for history.
    pub agent_type: Option<String>,
    /// The account the request belongs to: its key's, else the proxy's own.
    pub account: String,
    /// Which API it spoke, when it is one of the three wires.
    pub wire: Option<Wire>,
    /// The provider it went to.
    pub provider: Option<Provider>,
    /// `POST`, `GET`, or `WEBSOCKET` for a socket's turn.
    pub method: String,
    /// The request path.
    pub path: String,
    /// The status the client got.
    pub status: Option<u16>,
    /// `Ok` while the provider's answer streams; what pith answered with otherwise.
    pub outcome: RequestOutcome,
    /// What went wrong, when it did not end `ok`.
    pub error: Option<String>,
    /// The client's original body (shared with the forwarding path, not copied).
    pub request_body: Bytes,
    /// The body sent upstream when a stage changed it (shared, not copied).
    pub upstream_body: Option<Bytes>,
    /// The prompt as the client means it, when the request's own body is not it (a WebSocket
    /// create's whole conversation, a chained one carrying only its newest part; a body sent
    /// compressed is not here but decoded by the writer, see `request_encoding`): history, the
    /// request's facts and the prompt fingerprint read it instead of `request_body`.
    pub conversation_body: Option<Bytes>,
    /// The `content-encoding` of a `request_body` on one of the wires that came compressed:
    /// the writer decodes it to read the prompt (`row::prompt_of`).
    pub request_encoding: Option<String>,
    /// The prompt's facts, read when the request was answered, for a record that does not
    /// carry its prompt (`row::keep_conversation_facts`): the row reads these instead.
    pub prompt_facts: Option<RequestFacts>,
    /// Bytes sent to the provider.
    pub bytes_upstream: u64,
    /// The answer as it came, as far as it is kept.
    pub response_chunks: Vec<Bytes>,
    /// Bytes of the answer, as encoded on the wire.
    pub response_bytes: u64,
    /// Chunks were dropped from `response_chunks` because the response was too large to keep.
    pub response_truncated: bool,
    /// The answer is an event stream.
    pub response_is_sse: bool,
    /// The answer's `content-encoding`.
    pub content_encoding: Option<String>,
    /// Milliseconds to the provider's first body chunk.
    pub ttfb_ms: Option<f64>,
    /// Milliseconds until the exchange ended.
    pub total_ms: f64,
    /// What each transform stage did, in pipeline order.
    pub transforms: Vec<Report>,
    /// What the provider's token counter said of the client's own body, for a request a stage
    /// changed that was sampled for counting (`[proxy] provider_counts`).
    pub provider_count: Option<ProviderCount>,
}

/// The provider's own count of a client's body (its free token counter: Anthropic
/// `count_tokens`, OpenAI `responses/input_tokens`), asked beside the request, never on its
/// path: how pith's estimate of what a stage kept out is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderCount {
    /// The counter said the client's body is this many input tokens.
    Counted(u64),
    /// The counter answered 429 (its own rate limit): counted here, never retried.
    RateLimited,
    /// The counter failed otherwise: another error status, no answer within its bound, or an
    /// answer without a count.
    Failed,
    /// Sampled, but not asked: the counter had said 429 and its wait had not passed.
    Paused,
}

impl ProviderCount {
    /// The name the ledger keeps (`requests.provider_count_outcome`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderCount::Counted(_) => "counted",
            ProviderCount::RateLimited => "rate_limited",
            ProviderCount::Failed => "failed",
            ProviderCount::Paused => "paused",
        }
    }

    /// The tokens counted, when the counter counted.
    pub fn tokens(self) -> Option<u64> {
        match self {
            ProviderCount::Counted(n) => Some(n),
            _ => None,
        }
    }

    /// The count an outcome name and a token count stand for ([`ProviderCount::as_str`]'s
    /// inverse); `None` for a name pith does not write.
    pub fn parse(outcome: &str, tokens: Option<u64>) -> Option<ProviderCount> {
        Some(match outcome {
            "counted" => ProviderCount::Counted(tokens?),
            "rate_limited" => ProviderCount::RateLimited,
            "failed" => ProviderCount::Failed,
            "paused" => ProviderCount::Paused,
            _ => return None,
        })
    }
}

impl Record {
    /// The bytes its bodies take (what freeing it gives back: `pith_alloc::release`).
    pub fn body_bytes(&self) -> usize {
        self.request_body.len()
            + self.upstream_body.as_ref().map_or(0, |b| b.len())
            + self.conversation_body.as_ref().map_or(0, |b| b.len())
            + self.response_chunks.iter().map(|c| c.len()).sum::<usize>()
    }

    /// The provider answered with a 4xx or 5xx.
    pub fn upstream_status_failed(&self) -> bool {
        self.status.is_some_and(|s| !(200..300).contains(&s))
    }
}

/// A stage's report as the ledger keeps it: [`StageReport`] with owned names, so it can be
/// written to the spool and read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The stage's name.
    pub stage: String,
    /// What it did.
    pub result: ReportResult,
}

/// [`StageResult`], owned.
#[derive(Debug, Clone, PartialEq)]
pub enum ReportResult {
    /// It changed the request; what it reported.
    Applied(Vec<ReportFact>),
    /// It left the request alone, for this reason.
    Unchanged(String),
    /// It failed with this error (the request went on without it).
    Failed(String),
}

/// [`pith_transform::Fact`], owned.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportFact {
    /// The fact's name.
    pub name: String,
    /// Its value.
    pub value: u64,
    /// What kind of quantity it is.
    pub kind: FactKind,
    /// Where in the prompt it applies, if it says.
    pub site: Option<Site>,
}

impl From<&StageReport> for Report {
    fn from(report: &StageReport) -> Report {
        let result = match &report.result {
            StageResult::Applied(facts) => ReportResult::Applied(
                facts
                    .iter()
                    .map(|f| ReportFact {
                        name: f.name.to_owned(),
                        value: f.value,
                        kind: f.kind,
                        site: f.site,
                    })
                    .collect(),
            ),
            StageResult::Unchanged(reason) => ReportResult::Unchanged((*reason).to_owned()),
            StageResult::Failed(error) => ReportResult::Failed(error.clone()),
        };
        Report {
            stage: report.stage.to_owned(),
            result,
        }
    }
}
