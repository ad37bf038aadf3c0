//! Local-model ranking of search candidates, over Ollama's API or the OpenAI-compatible one
//! (llama.cpp's server, LM Studio, vLLM, Ollama's `/v1`); strict parse, fails open.
//!
//! [`ModelRanker`] implements [`pith_search::Ranker`]: it shows the model the matching files
//! (with a few of their lines), asks for the files that best answer the query, and returns
//! those files' lines, at most `want`, only if the answer is exactly the asked number of
//! distinct files; anything else is an `Err` with the reason, and `search_workspace` shows the
//! plain list with a line saying why it is not ranked.
//!
//! A cold model is the usual first call of a session, and loading one takes longer than a
//! ranking may wait. [`ModelRanker::warm_up`] (the MCP server calls it at start) checks that the
//! server lists the model and has it loaded, on a background thread, with its own longer
//! timeout; until it is done, searches are answered at once, unranked, saying the model is still
//! loading. A ranking that times out starts another warm-up (the server may have unloaded the
//! model). A server that could not be reached is tried again in the background at most every
//! [`RETRY_AFTER`]. Without a warm-up the first ranking probes the server itself.
//!
//! Calls block for up to [`PrefilterConfig::timeout`]; from async code, call through
//! `spawn_blocking`.
//!
//! [`embed::EmbedRanker`] ranks tool definitions for the defer stage by embedding similarity,
//! with BM25 as the fallback.
//!
//! Three rankers, one chosen by `[mcp] prefilter_ranker` ([`RankerKind`]; [`PrefilterRanker`]
//! is the one `pith mcp` holds): this [`ModelRanker`] over a server, [`fusion::LexicalRanker`]
//! (no model at all), and [`local::LocalModelRanker`] (the in-process model). The library reads
//! no environment: the binary resolves `[mcp]` and the `PITH_PREFILTER_*` variables into a
//! [`PrefilterConfig`]. `examples/prefilter_eval.rs` measures a ranking against hand-marked
//! answers through the path `pith mcp` takes (figures in BENCHMARKS.md).

pub mod api;
mod client;
pub mod embed;
pub mod fusion;
pub mod local;
mod prompt;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use pith_search::{Candidate, DEFAULT_MAX_RANK_CANDIDATES, Ranker};

pub use api::{Api, EnvelopeError, ResponseFormat};
pub use client::{BadUrl, HttpError};
pub use embed::{DEFAULT_EMBED_TIMEOUT, EmbedConfig, EmbedError, EmbedRanker};
pub use prompt::ReplyError;

use crate::client::Client;

/// A small instruction-tuned code model (Ollama's name for it). Not measured: no registry here
/// ships it (BENCHMARKS.md, "Local prefilter").
pub const DEFAULT_MODEL: &str = "qwen2.5-coder:1.5b";
/// Per-ranking timeout: the cap on what trying costs a broad search. The evaluated model took
/// 6-109 s per ranking on 2 CPU cores (BENCHMARKS.md), so no wait an agent would accept lets a
/// CPU rank; a faster setup answers within it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long loading the model may take (the warm-up's timeout).
pub const DEFAULT_LOAD_TIMEOUT: Duration = Duration::from_secs(120);
/// How soon a server that could not be reached is tried again (in the background).
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// Prefilter settings. Off by default: a wrong ranking can hide the right answer, so the user
/// chooses the trade.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefilterConfig {
    /// Rank at all.
    pub enabled: bool,
    /// Which ranker: a local model over its server's API, or the lexical file ranking.
    pub ranker: RankerKind,
    /// Which API the server speaks.
    pub api: Api,
    /// The server's base URL (`http(s)://host:port`, optional path prefix; for the OpenAI API
    /// a trailing `/v1` is accepted); `None` is the API's default ([`Api::default_url`]).
    pub url: Option<String>,
    /// Model name as the server lists it (`ollama list`, `/v1/models`).
    pub model: String,
    /// Which searches are ranked and how much is shown.
    pub policy: pith_search::RankPolicy,
    /// Timeout for each ranking request.
    pub timeout: Duration,
    /// Timeout for loading the model ([`ModelRanker::warm_up`]).
    pub load_timeout: Duration,
    /// The in-process model's directory ([`RankerKind::Local`]; `pith model install` writes
    /// one); `None` leaves that ranker off.
    pub local_model: Option<std::path::PathBuf>,
}

impl Default for PrefilterConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            ranker: RankerKind::default(),
            api: Api::default(),
            url: None,
            model: DEFAULT_MODEL.to_owned(),
            policy: pith_search::RankPolicy::default(),
            timeout: DEFAULT_TIMEOUT,
            load_timeout: DEFAULT_LOAD_TIMEOUT,
            local_model: None,
        }
    }
}

impl PrefilterConfig {
    /// The base URL requests go to.
    pub fn base_url(&self) -> String {
        let url = self
            .url
            .as_deref()
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .unwrap_or(self.api.default_url())
            .trim_end_matches('/');
        match self.api {
            // OpenAI clients take the base with `/v1`; pith appends `/v1/...` itself.
            Api::OpenAi => url.strip_suffix("/v1").unwrap_or(url).to_owned(),
            Api::Ollama => url.to_owned(),
        }
    }
}

/// Which ranker the prefilter uses (`[mcp] prefilter_ranker`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RankerKind {
    /// A local model over Ollama's or the OpenAI-compatible API ([`ModelRanker`]).
    #[default]
    Model,
    /// The query's words in each file's path and lines, fused by rank, in-process, no model
    /// ([`fusion::LexicalRanker`]).
    Lexical,
    /// A small embedding model in pith's process, its order fused with the lexical signals
    /// ([`local::LocalModelRanker`]).
    Local,
}

impl RankerKind {
    /// Every kind, in the order help text lists them.
    pub const ALL: [RankerKind; 3] = [RankerKind::Model, RankerKind::Lexical, RankerKind::Local];

    /// Its name in config.
    pub fn as_str(self) -> &'static str {
        match self {
            RankerKind::Model => "model",
            RankerKind::Lexical => "lexical",
            RankerKind::Local => "local",
        }
    }

    /// The kind called `name` in config.
    pub fn from_name(name: &str) -> Option<RankerKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == name.trim())
    }
}

/// The prefilter's ranker as configured: a local model, or the lexical file ranking.
#[derive(Clone)]
pub enum PrefilterRanker {
    /// A local model behind a server.
    Model(ModelRanker),
    /// In-process, no model.
    Lexical(fusion::LexicalRanker),
    /// An embedding model in-process.
    Local(local::LocalModelRanker),
}

impl PrefilterRanker {
    /// The ranker `config` asks for; `None` when the prefilter is off (or the model's URL is
    /// unusable, logged).
    pub fn from_config(config: &PrefilterConfig) -> Option<PrefilterRanker> {
        if !config.enabled {
            return None;
        }
        match config.ranker {
            RankerKind::Model => ModelRanker::from_config(config).map(PrefilterRanker::Model),
            RankerKind::Lexical => Some(PrefilterRanker::Lexical(fusion::LexicalRanker::default())),
            RankerKind::Local => match &config.local_model {
                Some(dir) => Some(PrefilterRanker::Local(local::LocalModelRanker::new(
                    dir.clone(),
                    config.timeout,
                ))),
                None => {
                    tracing::warn!("local prefilter: no model directory; ranking off");
                    None
                }
            },
        }
    }

    /// Load a model in the background ([`ModelRanker::warm_up`],
    /// [`local::LocalModelRanker::warm_up`]); the lexical ranking has nothing to load.
    pub fn warm_up(&self) {
        match self {
            PrefilterRanker::Model(model) => model.warm_up(),
            PrefilterRanker::Local(model) => model.warm_up(),
            PrefilterRanker::Lexical(_) => {}
        }
    }
}

impl Ranker for PrefilterRanker {
    fn name(&self) -> String {
        match self {
            PrefilterRanker::Model(m) => m.name(),
            PrefilterRanker::Lexical(l) => l.name(),
            PrefilterRanker::Local(l) => l.name(),
        }
    }

    fn max_candidates(&self) -> usize {
        match self {
            PrefilterRanker::Model(m) => m.max_candidates(),
            PrefilterRanker::Lexical(l) => l.max_candidates(),
            PrefilterRanker::Local(l) => l.max_candidates(),
        }
    }

    fn rank(
        &self,
        query: &str,
        candidates: &[Candidate],
        want: usize,
    ) -> Result<Vec<usize>, String> {
        match self {
            PrefilterRanker::Model(m) => m.rank(query, candidates, want),
            PrefilterRanker::Lexical(l) => l.rank(query, candidates, want),
            PrefilterRanker::Local(l) => l.rank(query, candidates, want),
        }
    }
}

/// Why a ranking attempt gave no answer (logged, and its chain is the reason the reply shows).
#[derive(Debug, thiserror::Error)]
pub enum RankError {
    /// The model is still loading (a warm-up is running).
    #[error("the model is still loading")]
    Loading,
    /// The server does not list the model.
    #[error("{api} at {url} does not list model {model}")]
    ModelMissing {
        /// The configured model.
        model: String,
        /// The server's base URL.
        url: String,
        /// The API's name.
        api: &'static str,
    },
    /// The server could not be asked (recently; it is tried again in the background).
    #[error("the model server is unavailable")]
    Unavailable(#[source] Arc<RankError>),
    /// The candidate list would not fit the largest context we request.
    #[error("{0} results need more than the largest context window pith requests")]
    TooManyCandidates(usize),
    /// The request failed, or the server answered with an error status.
    #[error("request failed")]
    Http(#[from] HttpError),
    /// The reply is not a complete answer of the API.
    #[error("reply rejected")]
    Envelope(#[from] EnvelopeError),
    /// The answer is not a definitive pick.
    #[error("answer rejected")]
    Reply(#[from] ReplyError),
}

/// What the ranker knows about the model server.
#[derive(Debug)]
enum Readiness {
    /// Nothing asked yet.
    Unknown,
    /// A warm-up is running.
    Loading,
    /// Listed and loaded.
    Ready,
    /// The last probe or warm-up failed.
    Failed { error: Arc<RankError>, at: Instant },
}

struct Inner {
    config: PrefilterConfig,
    client: Client,
    readiness: Mutex<Readiness>,
    /// How an OpenAI-compatible server is asked for the schema (found by the warm-up).
    format: Mutex<ResponseFormat>,
}

/// The one warm-up both model rankers use: when `claim` marks the model as loading (it says
/// no while a load runs or is done), `load` runs on a thread of its own named `name`, so the
/// caller returns at once; `failed` takes the claim back when no thread could start.
pub(crate) fn warm_in_background(
    name: &str,
    claim: impl FnOnce() -> bool,
    load: impl FnOnce() + Send + 'static,
    failed: impl FnOnce(std::io::Error),
) {
    if !claim() {
        return;
    }
    if let Err(err) = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(load)
    {
        failed(err);
    }
}

/// Ranks search candidates with a local model; cheap to clone (clones share what they know
/// about the server).
#[derive(Clone)]
pub struct ModelRanker {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ModelRanker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRanker")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl ModelRanker {
    /// A ranker for `config`, whether or not it is enabled; refused if the URL is not
    /// `http(s)://host...`.
    pub fn new(config: PrefilterConfig) -> Result<Self, BadUrl> {
        let client = Client::new(&config.base_url())?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                client,
                readiness: Mutex::new(Readiness::Unknown),
                format: Mutex::new(ResponseFormat::default()),
            }),
        })
    }

    /// The ranker to use for `config`: `None` when the prefilter is off, or its URL is not one
    /// the client speaks to (logged).
    pub fn from_config(config: &PrefilterConfig) -> Option<Self> {
        if !config.enabled {
            return None;
        }
        match Self::new(config.clone()) {
            Ok(ranker) => Some(ranker),
            Err(err) => {
                tracing::warn!(
                    error = &err as &dyn std::error::Error,
                    "local prefilter: ranking off"
                );
                None
            }
        }
    }

    /// The configuration this ranker uses.
    pub fn config(&self) -> &PrefilterConfig {
        &self.inner.config
    }

    fn readiness(&self) -> MutexGuard<'_, Readiness> {
        self.inner
            .readiness
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts loading the model on a background thread unless a warm-up is running or the
    /// model is known to be loaded; returns at once. Searches meanwhile are answered unranked,
    /// saying the model is still loading.
    pub fn warm_up(&self) {
        let ranker = self.clone();
        warm_in_background(
            "pith-prefilter-warm-up",
            || {
                let mut readiness = self.readiness();
                let idle = !matches!(*readiness, Readiness::Loading | Readiness::Ready);
                if idle {
                    *readiness = Readiness::Loading;
                }
                idle
            },
            move || {
                let _ = ranker.load();
            },
            |err| {
                tracing::warn!(%err, "local prefilter: cannot start the warm-up thread");
                *self.readiness() = Readiness::Unknown;
            },
        );
    }

    /// Probes and loads the model now, blocking (up to the request and load timeouts); what
    /// [`ModelRanker::warm_up`] runs in the background.
    pub fn load(&self) -> Result<(), Arc<RankError>> {
        let started = Instant::now();
        let config = &self.inner.config;
        let result = self.probe().and_then(|()| self.warm_request());
        match result {
            Ok(()) => {
                tracing::info!(model = %config.model, url = %self.inner.client.base(),
                    elapsed_ms = started.elapsed().as_millis() as u64, "local prefilter: model loaded");
                *self.readiness() = Readiness::Ready;
                Ok(())
            }
            Err(err) => {
                let error = Arc::new(err);
                tracing::warn!(error = &*error as &dyn std::error::Error, model = %config.model,
                    "local prefilter: model not available; searches are shown unranked");
                *self.readiness() = Readiness::Failed {
                    error: Arc::clone(&error),
                    at: Instant::now(),
                };
                Err(error)
            }
        }
    }

    /// The load request; for the OpenAI API, the first response format the server accepts is
    /// kept for the rankings (an error status refuses one).
    fn warm_request(&self) -> Result<(), RankError> {
        let config = &self.inner.config;
        let formats: &[ResponseFormat] = match config.api {
            Api::Ollama => &[ResponseFormat::JsonSchema],
            Api::OpenAi => &ResponseFormat::ALL,
        };
        let mut refused = None;
        for &format in formats {
            let body = config.api.warm_up_body(&config.model, format);
            match self
                .inner
                .client
                .post_json(config.api.chat_path(), &body, config.load_timeout)
            {
                Ok(_) => {
                    if refused.is_some() {
                        tracing::info!(
                            ?format,
                            "local prefilter: the server takes this response format"
                        );
                    }
                    *self
                        .inner
                        .format
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = format;
                    return Ok(());
                }
                // llama-cpp-python's server refuses `json_schema` with a 500 (its validation
                // error), others with a 400 or 422: any error status means try the next one.
                Err(err @ HttpError::Status { .. }) => refused = Some(err),
                Err(err) => return Err(err.into()),
            }
        }
        Err(refused.map_or(RankError::Loading, RankError::from))
    }

    /// Whether the server lists the model (one request, within the ranking timeout).
    fn probe(&self) -> Result<(), RankError> {
        let config = &self.inner.config;
        let body = self
            .inner
            .client
            .get(config.api.models_path(), config.timeout)?;
        if config.api.lists_model(&body, &config.model) {
            Ok(())
        } else {
            Err(RankError::ModelMissing {
                model: config.model.clone(),
                url: self.inner.client.base().to_owned(),
                api: config.api.label(),
            })
        }
    }

    /// Decides whether to ask the model now: `Ok` when it is known to be ready (or a first
    /// probe without warm-up found it), else why not, starting a retry in the background when
    /// one is due.
    fn ready(&self) -> Result<(), RankError> {
        let mut readiness = self.readiness();
        match &*readiness {
            Readiness::Ready => Ok(()),
            Readiness::Loading => Err(RankError::Loading),
            Readiness::Failed { error, at } => {
                let error = Arc::clone(error);
                if at.elapsed() >= RETRY_AFTER {
                    drop(readiness);
                    self.warm_up();
                }
                Err(RankError::Unavailable(error))
            }
            Readiness::Unknown => {
                // Concurrent searches do not wait for this probe: they are told it is loading.
                *readiness = Readiness::Loading;
                drop(readiness);
                match self.probe() {
                    Ok(()) => {
                        *self.readiness() = Readiness::Ready;
                        Ok(())
                    }
                    Err(err) => Err(self.failed(err)),
                }
            }
        }
    }

    /// Remembers `err` as why the server is unavailable (retried after [`RETRY_AFTER`]).
    fn failed(&self, err: RankError) -> RankError {
        let error = Arc::new(err);
        *self.readiness() = Readiness::Failed {
            error: Arc::clone(&error),
            at: Instant::now(),
        };
        RankError::Unavailable(error)
    }

    /// Asks the model for the files that best answer `query`; their candidates, at most
    /// `want`.
    pub fn try_rank(
        &self,
        query: &str,
        candidates: &[Candidate],
        want: usize,
    ) -> Result<Vec<usize>, RankError> {
        self.ready()?;
        let config = &self.inner.config;
        let prompt = prompt::prompt(query, candidates, want)
            .ok_or(RankError::TooManyCandidates(candidates.len()))?;
        tracing::debug!(
            candidates = candidates.len(),
            want,
            num_ctx = prompt.num_ctx,
            "local prefilter: asking for a ranking"
        );
        let format = *self
            .inner
            .format
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let body = config.api.chat_body(
            &config.model,
            prompt.system,
            &prompt.user,
            &prompt.schema,
            format,
            prompt.num_ctx,
            prompt.num_predict,
        );
        let reply = match self
            .inner
            .client
            .post_json(config.api.chat_path(), &body, config.timeout)
        {
            Ok(reply) => reply,
            Err(err @ HttpError::Timeout(_)) => {
                // The server may have unloaded the model: load it again before the next search
                // waits a whole timeout too.
                *self.readiness() = Readiness::Unknown;
                self.warm_up();
                return Err(err.into());
            }
            Err(err @ HttpError::Unreachable { .. }) => return Err(self.failed(err.into())),
            Err(err @ HttpError::Status { .. }) => return Err(err.into()),
        };
        let content = config.api.chat_content(&reply)?;
        Ok(prompt.parse(&content)?)
    }
}

/// `err` and its causes, joined by `: ` (the reason shown in a reply).
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl Ranker for ModelRanker {
    fn name(&self) -> String {
        let config = &self.inner.config;
        format!("local model {} ({})", config.model, config.api.label())
    }

    fn max_candidates(&self) -> usize {
        DEFAULT_MAX_RANK_CANDIDATES
    }

    fn rank(
        &self,
        query: &str,
        candidates: &[Candidate],
        want: usize,
    ) -> Result<Vec<usize>, String> {
        let started = Instant::now();
        let model = &self.inner.config.model;
        match self.try_rank(query, candidates, want) {
            Ok(picked) => {
                tracing::debug!(candidates = candidates.len(), want, elapsed_ms = started.elapsed().as_millis() as u64,
                    %model, "local prefilter: ranked");
                Ok(picked)
            }
            Err(err) => {
                tracing::info!(error = &err as &dyn std::error::Error, candidates = candidates.len(), %model,
                    "local prefilter: no ranking; showing results unranked");
                Err(error_chain(&err))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_by_api() {
        let config = |api, url: Option<&str>| PrefilterConfig {
            api,
            url: url.map(str::to_owned),
            ..PrefilterConfig::default()
        };
        assert_eq!(
            config(Api::Ollama, None).base_url(),
            "http://127.0.0.1:11434"
        );
        assert_eq!(
            config(Api::OpenAi, None).base_url(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            config(Api::OpenAi, Some("https://models.example/v1/")).base_url(),
            "https://models.example"
        );
        assert_eq!(
            config(Api::Ollama, Some("http://host/ollama/")).base_url(),
            "http://host/ollama"
        );
    }

    #[test]
    fn disabled_or_unusable_config_gives_no_ranker() {
        assert!(ModelRanker::from_config(&PrefilterConfig::default()).is_none());
        let ftp = PrefilterConfig {
            enabled: true,
            url: Some("ftp://127.0.0.1:11434".into()),
            ..PrefilterConfig::default()
        };
        assert!(ModelRanker::from_config(&ftp).is_none());
        let on = PrefilterConfig {
            enabled: true,
            ..PrefilterConfig::default()
        };
        let ranker = ModelRanker::from_config(&on).unwrap();
        assert_eq!(ranker.name(), "local model qwen2.5-coder:1.5b (Ollama)");
        let tls = PrefilterConfig {
            enabled: true,
            api: Api::OpenAi,
            url: Some("https://models.example/v1".into()),
            model: "m".into(),
            ..PrefilterConfig::default()
        };
        let ranker = ModelRanker::from_config(&tls).unwrap();
        assert_eq!(ranker.name(), "local model m (OpenAI-compatible API)"); // The lexical ranking needs no server: on whenever the prefilter is.
        let lexical = PrefilterConfig {
            enabled: true,
            ranker: RankerKind::Lexical,
            ..PrefilterConfig::default()
        };
        assert!(matches!(
            PrefilterRanker::from_config(&lexical),
            Some(PrefilterRanker::Lexical(_))
        ));
        assert!(
            PrefilterRanker::from_config(&PrefilterConfig {
                enabled: false,
                ..lexical
            })
            .is_none()
        );
        assert_eq!(
            RankerKind::from_name(" lexical "),
            Some(RankerKind::Lexical)
        );
        assert_eq!(RankerKind::from_name("bm25"), None);
    }

    #[test]
    fn reasons_name_each_cause() {
        let err = RankError::Unavailable(Arc::new(RankError::Http(HttpError::Timeout(
            Duration::from_millis(1500),
        ))));
        assert_eq!(
            error_chain(&err),
            "the model server is unavailable: request failed: timed out after 1500 ms"
        );
    }
}
