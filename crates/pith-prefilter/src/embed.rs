//! Semantic tool ranking for the defer stage: cosine similarity of embedding vectors from
//! Ollama's `/api/embed` or an OpenAI-compatible `/v1/embeddings`.
//!
//! [`EmbedRanker`] implements [`pith_rank::ToolRanker`]. The defer stage needs the
//! loaded tool set to be identical on every turn of a session (it is the start of the cached
//! prompt prefix), so the ranker decides once per (model, task text, ordered tool definitions)
//! and then always gives that same answer: the scores, or `None` (BM25) when the first attempt
//! failed. Decisions and tool vectors are kept in memory and on disk under
//! [`EmbedConfig::cache_dir`], so a restart or the server going down or coming back changes nothing
//! for a session already decided: session stability beats freshness.
//!
//! Disk layout: `vectors/<sha256>.json` (one tool's vector, keyed by model and definition) and
//! `decisions/<sha256>.json`. Files are written to a temporary name and renamed, mode 0600; an
//! unreadable file is ignored and rewritten, never an error.
//!
//! The HTTP call blocks the calling thread for at most [`EmbedConfig::timeout`] in total, and
//! happens only on the first sight of a (task, tool list) in this process and cache directory.

use std::collections::HashMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use pith_rank::{ToolRanker, ToolText};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::api::{Api, EnvelopeError};
use crate::client::{BadUrl, Client, HttpError};

/// Total time one ranking decision may spend on HTTP (all batches together).
pub const DEFAULT_EMBED_TIMEOUT: Duration = Duration::from_secs(2);

/// Inputs per embeddings request, so a reply stays well under the client's size limit.
const BATCH: usize = 32;

/// Characters of one input sent for embedding; embedding models read a few thousand tokens at
/// most, and a first prompt with a pasted file should not make a multi-megabyte request.
const MAX_INPUT_CHARS: usize = 8_000;

/// Bumped when what is embedded or how it is scored changes, so old cache entries stop matching.
const CACHE_VERSION: &[u8] = b"pith-embed-v1";

/// Where and how to embed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbedConfig {
    /// Which API the server speaks.
    pub api: Api,
    /// The server's base URL (`http(s)://host:port`, optional path prefix; a trailing `/v1`
    /// is accepted for the OpenAI API).
    pub url: String,
    /// Embedding model as the server lists it (e.g. `nomic-embed-text`).
    pub model: String,
    /// Total HTTP time per decision (default [`DEFAULT_EMBED_TIMEOUT`]).
    pub timeout: Duration,
    /// Cache directory (the binary uses `$PITH_HOME/embeddings`); created on first write.
    pub cache_dir: PathBuf,
}

/// Why embedding gave no scores (logged; the stage only sees `None` and uses BM25).
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The configured URL is not one the client speaks to.
    #[error("bad embeddings URL")]
    BadUrl(#[from] BadUrl),
    /// The request failed (refused, timed out, malformed HTTP), or the server answered with an
    /// error status (e.g. 404 for a model not pulled).
    #[error("embeddings request failed")]
    Http(#[from] HttpError),
    /// The body is not a list of embeddings in the API's shape.
    #[error("reply is not a list of embeddings")]
    Malformed(#[from] EnvelopeError),
    /// Not one embedding per input.
    #[error("{got} embeddings for {sent} inputs")]
    WrongCount {
        /// Inputs sent.
        sent: usize,
        /// Embeddings received.
        got: usize,
    },
    /// Vectors of different lengths cannot be compared.
    #[error("embeddings of {0} and {1} dimensions")]
    WrongDimensions(usize, usize),
    /// An empty or all-zero vector, or a score that is not a finite number.
    #[error("an embedding is empty or zero, or a score is not finite")]
    Degenerate,
}

/// Ranks tool definitions by embedding similarity to the task; see the module docs.
pub struct EmbedRanker {
    config: EmbedConfig,
    client: Client,
    memory: Mutex<Memory>,
}

#[derive(Default)]
struct Memory {
    /// Tool vectors by cache key.
    vectors: HashMap<String, Vec<f64>>,
    /// Decisions by cache key: scores, or `None` for BM25.
    decisions: HashMap<String, Option<Vec<f64>>>,
}

/// A decision as stored on disk. Scores are f64 bit patterns: decimal JSON floats do not
/// always parse back to the same bits, and a one-ulp change could reorder near-ties and so
/// change the loaded set after a restart.
#[derive(Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
enum DecisionFile {
    Scores { bits: Vec<u64> },
    Bm25,
}

impl EmbedRanker {
    /// A ranker for `config`; an error only if the URL is not `http(s)://host...`.
    pub fn new(config: EmbedConfig) -> Result<Self, EmbedError> {
        let url = if config.url.trim().is_empty() {
            config.api.default_url()
        } else {
            config.url.trim().trim_end_matches('/')
        };
        let url = match config.api {
            Api::OpenAi => url.strip_suffix("/v1").unwrap_or(url),
            Api::Ollama => url,
        };
        let client = Client::new(url)?;
        Ok(Self {
            config,
            client,
            memory: Mutex::default(),
        })
    }

    /// The configuration this ranker uses.
    pub fn config(&self) -> &EmbedConfig {
        &self.config
    }

    fn memory(&self) -> MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tool_key(&self, definition: &str) -> String {
        digest(&[
            CACHE_VERSION,
            b"tool",
            self.config.model.as_bytes(),
            definition.as_bytes(),
        ])
    }

    fn decision_key(&self, task: &str, tool_keys: &[String]) -> String {
        let mut parts: Vec<&[u8]> = vec![
            CACHE_VERSION,
            b"decision",
            self.config.model.as_bytes(),
            task.as_bytes(),
        ];
        parts.extend(tool_keys.iter().map(|k| k.as_bytes()));
        digest(&parts)
    }

    fn decision_path(&self, key: &str) -> PathBuf {
        self.config
            .cache_dir
            .join("decisions")
            .join(format!("{key}.json"))
    }

    fn vector_path(&self, key: &str) -> PathBuf {
        self.config
            .cache_dir
            .join("vectors")
            .join(format!("{key}.json"))
    }

    /// A decision stored on disk for `tools` tools; `None` if absent or unusable.
    fn read_decision(&self, key: &str, tools: usize) -> Option<Option<Vec<f64>>> {
        match read_json::<DecisionFile>(&self.decision_path(key))? {
            DecisionFile::Bm25 => Some(None),
            DecisionFile::Scores { bits } if bits.len() == tools => {
                let scores: Vec<f64> = bits.into_iter().map(f64::from_bits).collect();
                scores.iter().all(|s| s.is_finite()).then_some(Some(scores))
            }
            DecisionFile::Scores { .. } => None,
        }
    }

    fn write_decision(&self, key: &str, decision: Option<&[f64]>) {
        let file = match decision {
            Some(scores) => DecisionFile::Scores {
                bits: scores.iter().map(|s| s.to_bits()).collect(),
            },
            None => DecisionFile::Bm25,
        };
        write_json(&self.decision_path(key), &file);
    }

    /// A tool vector from memory or disk; a vector that is empty, zero or not finite is
    /// treated as absent (and rewritten once fetched again).
    fn cached_vector(&self, key: &str) -> Option<Vec<f64>> {
        if let Some(vector) = self.memory().vectors.get(key) {
            return Some(vector.clone());
        }
        let vector = read_json::<Vec<f64>>(&self.vector_path(key)).filter(|v| usable(v))?;
        self.memory().vectors.insert(key.to_owned(), vector.clone());
        Some(vector)
    }

    fn store_vector(&self, key: &str, vector: &[f64]) {
        write_json(&self.vector_path(key), &vector);
        self.memory()
            .vectors
            .insert(key.to_owned(), vector.to_vec());
    }

    /// Cosine similarity of the task to each tool, fetching the vectors not cached; no
    /// decision is read or stored (diagnostics and tests; the stage calls [`ToolRanker::scores`]).
    pub fn try_scores(&self, task: &str, tools: &[ToolText<'_>]) -> Result<Vec<f64>, EmbedError> {
        let keys: Vec<String> = tools.iter().map(|t| self.tool_key(t.definition)).collect();
        self.compute(task, tools, &keys)
    }

    fn compute(
        &self,
        task: &str,
        tools: &[ToolText<'_>],
        keys: &[String],
    ) -> Result<Vec<f64>, EmbedError> {
        let deadline = Instant::now() + self.config.timeout;
        let mut vectors: Vec<Option<Vec<f64>>> =
            keys.iter().map(|k| self.cached_vector(k)).collect();
        let missing: Vec<usize> = (0..tools.len()).filter(|&i| vectors[i].is_none()).collect();
        let mut inputs = vec![clip(task).to_owned()];
        inputs.extend(missing.iter().map(|&i| tool_text(&tools[i])));
        let mut fresh = self.embed(&inputs, deadline)?.into_iter();
        let task_vector = fresh.next().ok_or(EmbedError::WrongCount {
            sent: inputs.len(),
            got: 0,
        })?;
        let dims = task_vector.len();
        let mut fetched = Vec::with_capacity(missing.len());
        for (&i, vector) in missing.iter().zip(fresh) {
            same_dims(dims, &vector)?;
            vectors[i] = Some(vector);
            fetched.push(i);
        }
        // A cached vector of another length predates a model change under the same name (or
        // the file is damaged): fetch it again rather than give up.
        let stale: Vec<usize> = (0..tools.len())
            .filter(|&i| vectors[i].as_ref().is_some_and(|v| v.len() != dims))
            .collect();
        if !stale.is_empty() {
            let texts: Vec<String> = stale.iter().map(|&i| tool_text(&tools[i])).collect();
            for (&i, vector) in stale.iter().zip(self.embed(&texts, deadline)?) {
                same_dims(dims, &vector)?;
                vectors[i] = Some(vector);
                fetched.push(i);
            }
        }
        let mut scores = Vec::with_capacity(tools.len());
        for vector in &vectors {
            let vector = vector.as_deref().ok_or(EmbedError::Degenerate)?;
            let score = cosine(&task_vector, vector);
            if !score.is_finite() {
                return Err(EmbedError::Degenerate);
            }
            scores.push(score);
        }
        for i in fetched {
            if let Some(vector) = &vectors[i] {
                self.store_vector(&keys[i], vector);
            }
        }
        Ok(scores)
    }

    /// One vector per input, in order, in batches, all before `deadline`.
    fn embed(&self, inputs: &[String], deadline: Instant) -> Result<Vec<Vec<f64>>, EmbedError> {
        let mut out = Vec::with_capacity(inputs.len());
        for batch in inputs.chunks(BATCH) {
            let body = self.config.api.embed_body(&self.config.model, batch);
            let timeout = deadline.saturating_duration_since(Instant::now());
            if timeout.is_zero() {
                return Err(HttpError::Timeout(self.config.timeout).into());
            }
            let reply = self
                .client
                .post_json(self.config.api.embed_path(), &body, timeout)
                .map_err(|err| match err {
                    // The budget is for the whole decision, so say so rather than what was left.
                    HttpError::Timeout(_) => HttpError::Timeout(self.config.timeout),
                    other => other,
                })?;
            let embeddings = self.config.api.embeddings(&reply)?;
            if embeddings.len() != batch.len() {
                return Err(EmbedError::WrongCount {
                    sent: batch.len(),
                    got: embeddings.len(),
                });
            }
            for vector in embeddings {
                if !usable(&vector) {
                    return Err(EmbedError::Degenerate);
                }
                out.push(vector);
            }
        }
        Ok(out)
    }
}

impl ToolRanker for EmbedRanker {
    /// The decision for (model, task, tool definitions): from memory, else from disk, else
    /// computed now (blocking up to the timeout) and stored. Failures are stored too, as
    /// `None`, so the session keeps BM25 even if the server comes back.
    fn scores(&self, task: &str, tools: &[ToolText<'_>]) -> Option<Vec<f64>> {
        if tools.is_empty() {
            return Some(Vec::new());
        }
        if task.trim().is_empty() {
            // Nothing to compare against; BM25 keeps the original order, deterministically.
            return None;
        }
        let keys: Vec<String> = tools.iter().map(|t| self.tool_key(t.definition)).collect();
        let key = self.decision_key(task, &keys);
        if let Some(decided) = self.memory().decisions.get(&key) {
            return decided.clone();
        }
        let (decision, computed) = match self.read_decision(&key, tools.len()) {
            Some(stored) => (stored, false),
            None => {
                let started = Instant::now();
                match self.compute(task, tools, &keys) {
                    Ok(scores) => {
                        tracing::debug!(tools = tools.len(), model = %self.config.model,
                            elapsed_ms = started.elapsed().as_millis() as u64,
                            "tool ranking: embedded");
                        (Some(scores), true)
                    }
                    Err(err) => {
                        tracing::warn!(error = &err as &dyn std::error::Error, tools = tools.len(), model = %self.config.model,
                            url = %self.config.url,
                            "tool ranking: embeddings failed; this session ranks with BM25");
                        (None, true)
                    }
                }
            }
        };
        let mut memory = self.memory();
        // Another thread may have decided the same key meanwhile: the first decision wins,
        // and only the winner writes it, so memory and disk agree.
        if let Some(first) = memory.decisions.get(&key) {
            return first.clone();
        }
        if computed {
            self.write_decision(&key, decision.as_deref());
        }
        memory.decisions.insert(key, decision.clone());
        decision
    }
}

/// What is embedded for a tool: name and description, the text a model chooses tools by. The
/// full definition would add the JSON schema, whose structural words (`type`, `object`,
/// `properties`) make every tool look alike and which can exceed an embedding model's context.
/// BM25 also reads the arguments' names and descriptions; embedding them too was measured
/// worse (all-MiniLM-L6-v2 on the OpenCode mcp40 session: `edit` fell out of the loaded set
/// and the saving dropped from 44% to 28%, BENCHMARKS.md), so `ToolText::arguments` is unused.
fn tool_text(tool: &ToolText<'_>) -> String {
    let text = if tool.description.is_empty() {
        tool.name.to_owned()
    } else {
        format!("{}: {}", tool.name, tool.description)
    };
    clip(&text).to_owned()
}

/// At most [`MAX_INPUT_CHARS`] characters of `text`.
fn clip(text: &str) -> &str {
    match text.char_indices().nth(MAX_INPUT_CHARS) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// Non-empty, finite, not all zero.
fn usable(vector: &[f64]) -> bool {
    !vector.is_empty() && vector.iter().all(|x| x.is_finite()) && vector.iter().any(|&x| x != 0.0)
}

fn same_dims(dims: usize, vector: &[f64]) -> Result<(), EmbedError> {
    if vector.len() == dims {
        Ok(())
    } else {
        Err(EmbedError::WrongDimensions(dims, vector.len()))
    }
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// SHA-256 of length-prefixed parts, as lowercase hex.
fn digest(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The file parsed as `T`; `None` if absent or unreadable (logged: the caller rewrites it).
fn read_json<T: DeserializeOwned>(path: &Path) -> Option<T> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return None,
        Err(err) => {
            tracing::debug!(%err, path = %path.display(), "embedding cache: cannot read; ignored");
            return None;
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(value) => Some(value),
        Err(err) => {
            tracing::warn!(%err, path = %path.display(),
                "embedding cache: damaged file ignored; it will be rewritten");
            None
        }
    }
}

/// Writes `value` as JSON to `path` through a temporary file and a rename, so readers never
/// see half a file. Failures are logged: the cache is an optimization and memory still holds
/// the value for this process.
fn write_json<T: Serialize>(path: &Path, value: &T) {
    let result = serde_json::to_vec(value)
        .map_err(std::io::Error::other)
        .and_then(|bytes| write_atomic(path, &bytes));
    if let Err(err) = result {
        tracing::warn!(%err, path = %path.display(), "embedding cache: cannot write");
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("cache path has no directory"))?;
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)?;
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options
        .open(&tmp)
        .and_then(|mut file| file.write_all(bytes))
        .and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_and_usable_vectors() {
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-12);
        assert!(cosine(&[1.0, 0.0], &[0.0, 3.0]).abs() < 1e-12);
        assert!(!usable(&[]));
        assert!(!usable(&[0.0, 0.0]));
        assert!(!usable(&[1.0, f64::NAN]));
        assert!(usable(&[0.0, -0.5]));
    }

    #[test]
    fn digest_separates_parts() {
        assert_ne!(digest(&[b"ab", b"c"]), digest(&[b"a", b"bc"]));
        assert_eq!(digest(&[b"x"]).len(), 64);
    }

    #[test]
    fn clip_respects_char_boundaries() {
        let long = "é".repeat(MAX_INPUT_CHARS + 3);
        assert_eq!(clip(&long).chars().count(), MAX_INPUT_CHARS);
        assert_eq!(clip("short"), "short");
    }
}
