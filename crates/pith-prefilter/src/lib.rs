//! Local-model ranking of search candidates through Ollama; strict parse, fails open.
//!
//! [`OllamaRanker`] implements [`pith_search::Ranker`]. It only ever returns a complete ordering
//! of the candidates or `None`; `search_workspace` turns `None` into the plain result list with
//! nothing withheld. Every failure (server down, model not pulled, timeout, HTTP error, a reply
//! that is not exactly `{"order": [...]}` with each index once) is logged and ends there.
//!
//! Calls block for up to [`PrefilterConfig::timeout`] per HTTP request (the availability probe
//! and the ranking each get their own timeout); from async code, call through `spawn_blocking`.
//!
//! [`embed::OllamaEmbedRanker`] ranks tool definitions for the defer stage by embedding
//! similarity, with BM25 as the fallback.

pub mod embed;
mod http;
mod prompt;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use pith_search::{Candidate, DEFAULT_MAX_RANK_CANDIDATES, DEFAULT_RANK_THRESHOLD, Ranker};

pub use embed::{DEFAULT_EMBED_TIMEOUT, EmbedConfig, EmbedError, OllamaEmbedRanker};
pub use http::HttpError;
pub use prompt::ReplyError;

use crate::http::{Endpoint, exchange};

/// Where Ollama listens by default.
pub const DEFAULT_OLLAMA_URL: &str = "http://127.0.0.1:11434";
/// A small code model that ranks a few hundred lines well within the timeout on a laptop.
pub const DEFAULT_MODEL: &str = "qwen2.5-coder:1.5b";
/// Per-request timeout (issue 3).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

/// Prefilter settings. Off by default: a wrong ranking can hide the right answer, so the user
/// chooses the trade.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefilterConfig {
    /// Rank at all.
    pub enabled: bool,
    /// Ollama base URL (plain `http://host:port`, optional path prefix).
    pub url: String,
    /// Model name as `ollama list` shows it.
    pub model: String,
    /// Rank searches with more matches than this; show the best this many.
    pub threshold: usize,
    /// Timeout for each HTTP request to Ollama.
    pub timeout: Duration,
}

impl Default for PrefilterConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            url: DEFAULT_OLLAMA_URL.to_owned(),
            model: DEFAULT_MODEL.to_owned(),
            threshold: DEFAULT_RANK_THRESHOLD,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl PrefilterConfig {
    /// Defaults overridden by the environment (see [`PrefilterConfig::with_env`]).
    pub fn from_env() -> Self {
        Self::default().with_env()
    }

    /// `self` (e.g. from the config file) overridden by the process environment:
    /// `PITH_LOCAL_PREFILTER` (`1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`),
    /// `PITH_OLLAMA_URL`, `PITH_PREFILTER_MODEL`, `PITH_PREFILTER_THRESHOLD`,
    /// `PITH_PREFILTER_TIMEOUT_MS`. Unparsable values are ignored with a warning.
    pub fn with_env(self) -> Self {
        self.with_env_from(|name| std::env::var(name).ok())
    }

    /// [`PrefilterConfig::with_env`] with the variables read through `lookup` (for tests).
    pub fn with_env_from(mut self, lookup: impl Fn(&str) -> Option<String>) -> Self {
        if let Some(value) = lookup("PITH_LOCAL_PREFILTER") {
            match value.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => self.enabled = true,
                "0" | "false" | "no" | "off" | "" => self.enabled = false,
                other => tracing::warn!(
                    value = other,
                    "PITH_LOCAL_PREFILTER: not a boolean; ignored"
                ),
            }
        }
        if let Some(url) = lookup("PITH_OLLAMA_URL").filter(|v| !v.trim().is_empty()) {
            self.url = url.trim().to_owned();
        }
        if let Some(model) = lookup("PITH_PREFILTER_MODEL").filter(|v| !v.trim().is_empty()) {
            self.model = model.trim().to_owned();
        }
        if let Some(value) = lookup("PITH_PREFILTER_THRESHOLD") {
            match value.trim().parse() {
                Ok(threshold) => self.threshold = threshold,
                Err(_) => tracing::warn!(%value, "PITH_PREFILTER_THRESHOLD: not a number; ignored"),
            }
        }
        if let Some(value) = lookup("PITH_PREFILTER_TIMEOUT_MS") {
            match value.trim().parse() {
                Ok(ms) => self.timeout = Duration::from_millis(ms),
                Err(_) => {
                    tracing::warn!(%value, "PITH_PREFILTER_TIMEOUT_MS: not a number; ignored")
                }
            }
        }
        self
    }
}

/// Why a ranking attempt gave no ordering (logged; the caller only sees `None`).
#[derive(Debug, thiserror::Error)]
pub enum RankError {
    /// The probe found no server, or a server without the model.
    #[error("model {model} is not available at {url}")]
    Unavailable {
        /// The configured model.
        model: String,
        /// The configured URL.
        url: String,
    },
    /// The candidate list would not fit the largest context we request.
    #[error("{0} candidates need more than the largest context window we request")]
    TooManyCandidates(usize),
    /// The request failed, or Ollama answered with an error status.
    #[error("Ollama request failed")]
    Http(#[from] HttpError),
    /// The reply is not a definitive ordering.
    #[error("reply rejected")]
    Reply(#[from] ReplyError),
}

/// Ranks search candidates with a local model served by Ollama.
#[derive(Clone, Debug)]
pub struct OllamaRanker {
    config: PrefilterConfig,
    endpoint: Endpoint,
}

/// Probe results per (url, model), for the life of the process: one /api/tags call, not one
/// per search. Negative results are cached too, so a missing server costs one timeout at most.
fn probe_cache() -> &'static Mutex<HashMap<(String, String), bool>> {
    static CACHE: OnceLock<Mutex<HashMap<(String, String), bool>>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// Forgets every availability probe result (tests start servers and models at will).
pub fn reset_availability_cache() {
    probe_cache()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clear();
}

impl OllamaRanker {
    /// A ranker for `config`, whether or not it is enabled; `None` if the URL is not a plain
    /// `http://` URL (logged).
    pub fn new(config: PrefilterConfig) -> Option<Self> {
        match Endpoint::parse(&config.url) {
            Some(endpoint) => Some(Self { config, endpoint }),
            None => {
                tracing::warn!(url = %config.url, "local prefilter: not a plain http:// URL; ranking off");
                None
            }
        }
    }

    /// The ranker to use for `config`: `None` when the prefilter is off or misconfigured.
    pub fn from_config(config: &PrefilterConfig) -> Option<Self> {
        if config.enabled {
            Self::new(config.clone())
        } else {
            None
        }
    }

    /// The configuration this ranker uses.
    pub fn config(&self) -> &PrefilterConfig {
        &self.config
    }

    /// Whether the server lists the model (probed once per process per url and model).
    pub fn is_available(&self) -> bool {
        let key = (self.config.url.clone(), self.config.model.clone());
        if let Some(&known) = probe_cache()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return known;
        }
        let available = self.probe();
        probe_cache()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, available);
        available
    }

    fn probe(&self) -> bool {
        let deadline = Instant::now() + self.config.timeout;
        match exchange(&self.endpoint, "GET", "/api/tags", None, deadline) {
            Ok(response) if response.status == 200 => {
                let listed = prompt::tags_list_model(&response.body, &self.config.model);
                if !listed {
                    tracing::warn!(model = %self.config.model, url = %self.config.url,
                        "local prefilter: model not listed by /api/tags (ollama pull it); ranking off");
                }
                listed
            }
            Ok(response) => {
                tracing::warn!(status = response.status, url = %self.config.url,
                    "local prefilter: /api/tags failed; ranking off");
                false
            }
            Err(err) => {
                tracing::warn!(%err, url = %self.config.url,
                    "local prefilter: no Ollama server; ranking off");
                false
            }
        }
    }

    /// Asks the model for an ordering of every candidate, most relevant to `query` first.
    pub fn try_rank(&self, query: &str, candidates: &[Candidate]) -> Result<Vec<usize>, RankError> {
        if !self.is_available() {
            return Err(RankError::Unavailable {
                model: self.config.model.clone(),
                url: self.config.url.clone(),
            });
        }
        let request = prompt::chat_request(&self.config.model, query, candidates)
            .ok_or(RankError::TooManyCandidates(candidates.len()))?;
        tracing::debug!(
            candidates = candidates.len(),
            num_ctx = request.num_ctx,
            "local prefilter: asking for a ranking"
        );
        let deadline = Instant::now() + self.config.timeout;
        let response = exchange(
            &self.endpoint,
            "POST",
            "/api/chat",
            Some(&request.body),
            deadline,
        )?
        .ok()?;
        Ok(prompt::parse_reply(&response.body, candidates.len())?)
    }
}

impl Ranker for OllamaRanker {
    fn name(&self) -> String {
        format!("{} (Ollama)", self.config.model)
    }

    fn max_candidates(&self) -> usize {
        DEFAULT_MAX_RANK_CANDIDATES
    }

    fn rank(&self, query: &str, candidates: &[Candidate]) -> Option<Vec<usize>> {
        let started = Instant::now();
        match self.try_rank(query, candidates) {
            Ok(order) => {
                tracing::debug!(candidates = candidates.len(), elapsed_ms = started.elapsed().as_millis() as u64,
                    model = %self.config.model, "local prefilter: ranked");
                Some(order)
            }
            Err(err) => {
                tracing::info!(error = &err as &dyn std::error::Error, candidates = candidates.len(), model = %self.config.model,
                    "local prefilter: no ranking; showing results unranked");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_overrides_the_config_file_values() {
        let env = |name: &str| {
            match name {
                "PITH_LOCAL_PREFILTER" => Some("1"),
                "PITH_OLLAMA_URL" => Some("http://127.0.0.1:9"),
                "PITH_PREFILTER_MODEL" => Some("tiny:1b"),
                "PITH_PREFILTER_THRESHOLD" => Some("12"),
                "PITH_PREFILTER_TIMEOUT_MS" => Some("250"),
                _ => None,
            }
            .map(str::to_owned)
        };
        let config = PrefilterConfig::default().with_env_from(env);
        assert_eq!(
            config,
            PrefilterConfig {
                enabled: true,
                url: "http://127.0.0.1:9".into(),
                model: "tiny:1b".into(),
                threshold: 12,
                timeout: Duration::from_millis(250),
            }
        );
        let from_file = PrefilterConfig {
            enabled: true,
            threshold: 7,
            ..PrefilterConfig::default()
        };
        let off = |name: &str| (name == "PITH_LOCAL_PREFILTER").then(|| "off".to_owned());
        let merged = from_file.with_env_from(off);
        assert!(!merged.enabled);
        assert_eq!(merged.threshold, 7);
        let junk = |_: &str| Some("junk".to_owned());
        assert_eq!(
            PrefilterConfig::default().with_env_from(junk).threshold,
            DEFAULT_RANK_THRESHOLD
        );
    }

    #[test]
    fn disabled_or_non_http_config_gives_no_ranker() {
        assert!(OllamaRanker::from_config(&PrefilterConfig::default()).is_none());
        let tls = PrefilterConfig {
            enabled: true,
            url: "https://127.0.0.1:11434".into(),
            ..PrefilterConfig::default()
        };
        assert!(OllamaRanker::from_config(&tls).is_none());
        let on = PrefilterConfig {
            enabled: true,
            ..PrefilterConfig::default()
        };
        let ranker = OllamaRanker::from_config(&on).unwrap();
        assert_eq!(ranker.name(), "qwen2.5-coder:1.5b (Ollama)");
    }
}
