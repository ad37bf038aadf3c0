//! What a proxy is configured with: the binary builds a [`ProxyConfig`] from its settings.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pith_transform::{PinsStage, Pipeline};

use crate::own_pages::OwnPages;
use crate::rewrite::ResponseRewrites;
use crate::upstream::UpstreamUrl;
use pith_ledger::LedgerSink;

/// Largest request body accepted (the Messages API's own limit is 32 MB).
pub const DEFAULT_MAX_BODY: usize = 64 << 20;

/// How long the proxy waits, at each point where a peer can go silent. The defaults suit LLM
/// traffic: a long generation is not a hang, a silent socket is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From sending the request to the provider's response headers. A non-streamed answer
    /// arrives whole, so this bounds the longest generation: 10 minutes, the official SDKs'
    /// own default request timeout.
    pub upstream_headers: Duration,
    /// Longest silence between two chunks of the provider's body. Streams carry events (and
    /// Anthropic's pings) while the model works; 5 minutes of nothing is a dead connection.
    pub upstream_idle: Duration,
    /// Longest time a client may take to send its request headers (slow clients that never
    /// finish hold a connection each): 30 s.
    pub client_headers: Duration,
    /// Longest silence between two chunks of a client's request body: 60 s.
    pub client_idle: Duration,
    /// How long an idle upstream connection stays pooled for reuse: 90 s.
    pub pool_idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            upstream_headers: Duration::from_secs(600),
            upstream_idle: Duration::from_secs(300),
            client_headers: Duration::from_secs(30),
            client_idle: Duration::from_secs(60),
            pool_idle: Duration::from_secs(90),
        }
    }
}

/// The most WebSockets relayed at once, whatever the descriptor limit: each holds a task, two
/// connections and its transcripts.
pub const MAX_SOCKETS: usize = 1024;

/// The most WebSockets relayed at once under a limit of `descriptors` open descriptors: each
/// holds two (the client's and the upstream's), and together they take at most a quarter of
/// the limit, so held sockets never leave an ordinary request without a descriptor (500 held
/// sockets under 1,024 made agent requests fail with "Too many open files"). At least one;
/// at most [`MAX_SOCKETS`].
pub fn max_sockets(descriptors: u64) -> usize {
    usize::try_from(descriptors / 8)
        .unwrap_or(MAX_SOCKETS)
        .clamp(1, MAX_SOCKETS)
}

/// Everything a proxy needs; the binary builds it from config and flags.
pub struct ProxyConfig {
    /// Address to listen on, e.g. `127.0.0.1:8787` (port 0 picks a free one).
    pub listen: SocketAddr,
    /// Where Anthropic Messages requests go, and pass-through requests carrying Anthropic's
    /// headers (`anthropic-version`, `x-api-key`).
    pub anthropic: UpstreamUrl,
    /// Where Chat Completions and Responses requests go, and every other pass-through request.
    pub openai: UpstreamUrl,
    /// Where requests under `pith_clients::codex::PITH_CHATGPT_PATH` go, whatever their
    /// provider headers (Codex signed in with ChatGPT: the person's own credentials pass through
    /// as they came and are never stored; the requests are read and transformed like any).
    pub chatgpt: UpstreamUrl,
    /// Request transforms.
    pub pipeline: Pipeline,
    /// pith's own pages (dashboard, its API, `/metrics`); `None`: those paths go upstream.
    pub own_pages: Option<Arc<dyn OwnPages>>,
    /// Answers a turn of nothing but pin commands itself, without the provider (the pins
    /// stage in `pipeline` moves the pins on every other request). `None`: every turn goes up.
    pub pins: Option<PinsStage>,
    /// Response transforms: chooses a rewriter for a streamed answer (none by default).
    pub rewrites: Option<Arc<dyn ResponseRewrites>>,
    /// The tool search round trip's memory, when it is shared through a team store: before
    /// the pipeline, a request naming `tool_use`s this instance has not seen asks the store
    /// for their blocks (`crate::search_trip::fetch`). `None`, or a memory not shared: no phase.
    pub searches: Option<pith_store::search_blocks::SearchBlocks>,
    /// Where each request's record goes; `None` keeps no ledger.
    pub ledger: Option<LedgerSink>,
    /// Largest client request body accepted, in bytes (a larger one is answered 413);
    /// usually [`DEFAULT_MAX_BODY`].
    pub max_body: usize,
    /// Most WebSockets relayed at once; an upgrade past it is refused with `426` (the client
    /// falls back to HTTP). Usually [`max_sockets`] of the process's descriptor limit.
    pub max_sockets: usize,
    /// Where the proxy stops waiting.
    pub timeouts: Timeouts,
    /// When set, every request must carry it in the [`TOKEN_HEADER`] header (the header is
    /// not forwarded). Required to listen on anything but loopback.
    pub token: Option<String>,
    /// Who each request belongs to: the proxy's own account, or, with keys (a gateway), the
    /// account of the key in its [`crate::own_headers::ACCOUNT_KEY_HEADER`] header (required then).
    pub accounts: crate::Accounts,
    /// The share (0 to 1) of the requests a stage changed whose client body the provider's
    /// own token counter is asked to count, beside the request (`crate::provider_count`);
    /// 0: never.
    pub provider_counts: f64,
}

impl ProxyConfig {
    /// Where a request for `provider` on `path_and_query` goes, and its path there: one under
    /// pith's ChatGPT path to the ChatGPT backend (under the backend's own path), any other to
    /// the provider's upstream as it came.
    pub(crate) fn upstream_for<'a>(
        &self,
        provider: pith_wire::Provider,
        path_and_query: &'a str,
    ) -> (&UpstreamUrl, std::borrow::Cow<'a, str>) {
        if let Some(path) = pith_clients::codex::chatgpt_backend_path(path_and_query) {
            return (&self.chatgpt, std::borrow::Cow::Owned(path));
        }
        let base = match provider {
            pith_wire::Provider::Anthropic => &self.anthropic,
            pith_wire::Provider::OpenAi => &self.openai,
        };
        (base, std::borrow::Cow::Borrowed(path_and_query))
    }
}
