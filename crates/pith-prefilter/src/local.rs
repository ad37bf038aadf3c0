//! Ranking with a small embedding model in pith's own process ([`pith_model`]): the query and
//! each matched line (with its path) are embedded, each file scores its best line's cosine, and
//! that order joins the lexical signals in [`fusion::rank_files`] as one more list. The model
//! never decides alone: published rerankers rank text with no word of the query high, which the
//! lexical lists hold down.
//!
//! Loading (checksums, then ONNX Runtime and the model: about a quarter of a second) happens on
//! a background thread at warm-up. A ranking waits for a load or another ranking to end within
//! its timeout; past it, and whenever the model errs, the search is answered with the plain
//! page and says why.
//!
//! The evidence for fusing (arXiv 2411.11767: rerankers also get worse as they score more
//! documents), measured on the three query sets as the share of answer files in the lines
//! shown: fused 1.00, 0.97 and 1.00; the model alone 0.97, 1.00 and 0.97; the lexical ranking
//! alone 0.99, 1.00 and 0.94 (BENCHMARKS.md, "The in-process model"). Unlike
//! [`crate::ModelRanker`], a ranking waits for the load: a server's model loads in seconds to
//! minutes, this one in a quarter of a second, well inside a ranking's timeout, and answering
//! a session's first search unranked would waste the load.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pith_model::Encoder;
use pith_search::{Candidate, Ranker};

use crate::fusion::{self, LexicalRanker};

/// The state of the model.
enum State {
    /// Not asked for yet.
    Cold,
    /// A warm-up is loading it.
    Loading,
    /// Loaded; `None` while a ranking holds it.
    Ready(Option<Box<Encoder>>),
    /// The load failed (not retried: the files are checked and will not change by themselves).
    Failed(String),
}

struct Inner {
    dir: PathBuf,
    threads: usize,
    timeout: Duration,
    /// The lexical ranking the model's order joins, and how many lines a file it shows.
    lexical: LexicalRanker,
    name: Mutex<String>,
    state: Mutex<State>,
    /// Signalled when the state changes: a load ends, a ranking gives the model back.
    changed: Condvar,
}

/// The prefilter's ranker with an in-process embedding model; cheap to clone (clones share the
/// model).
#[derive(Clone)]
pub struct LocalModelRanker {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LocalModelRanker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModelRanker")
            .field("dir", &self.inner.dir)
            .finish_non_exhaustive()
    }
}

/// ONNX Runtime's threads for a ranking: the cores there are, at most four (the agent and the
/// editor run beside it).
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

impl LocalModelRanker {
    /// A ranker over the model installed in `dir`, each ranking given `timeout`. Nothing is
    /// loaded until [`LocalModelRanker::warm_up`] or the first ranking.
    pub fn new(dir: PathBuf, timeout: Duration) -> Self {
        Self::with(dir, timeout, default_threads(), LexicalRanker::default())
    }

    /// The same with ONNX Runtime's thread count and the lexical ranking the model's order
    /// joins given (its lines a file and weights; the model's order is
    /// [`fusion::Fusion::more`], and the lexical weights at 0 leave the model alone).
    pub fn with(dir: PathBuf, timeout: Duration, threads: usize, lexical: LexicalRanker) -> Self {
        Self {
            inner: Arc::new(Inner {
                name: Mutex::new(manifest_name(&dir).map_or_else(
                    || format!("local model in {}", dir.display()),
                    |name| format!("local model {name} (in-process)"),
                )),
                dir,
                threads,
                timeout,
                lexical,
                state: Mutex::new(State::Cold),
                changed: Condvar::new(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Start loading the model on a background thread, unless it is loading or loaded.
    pub fn warm_up(&self) {
        let ranker = self.clone();
        crate::warm_in_background(
            "pith-model-load",
            || {
                let mut state = self.state();
                let cold = matches!(*state, State::Cold);
                if cold {
                    *state = State::Loading;
                }
                cold
            },
            move || {
                let _ = ranker.load();
            },
            |err| {
                *self.state() = State::Failed(format!("cannot start the loading thread: {err}"));
                self.inner.changed.notify_all();
            },
        );
    }

    /// Load the model now, blocking (what the warm-up runs); the error says why not.
    pub fn load(&self) -> Result<(), String> {
        let started = Instant::now();
        match Encoder::load(&self.inner.dir, self.inner.threads) {
            Ok(encoder) => {
                *self
                    .inner
                    .name
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) =
                    format!("local model {} (in-process)", encoder.name());
                tracing::info!(model = encoder.name(), dir = %self.inner.dir.display(),
                    elapsed_ms = started.elapsed().as_millis() as u64, "local prefilter: model loaded");
                *self.state() = State::Ready(Some(Box::new(encoder)));
                self.inner.changed.notify_all();
                Ok(())
            }
            Err(err) => {
                let why = err.to_string();
                tracing::warn!(error = %why, "local prefilter: model not available; searches are shown unranked");
                *self.state() = State::Failed(why.clone());
                self.inner.changed.notify_all();
                Err(why)
            }
        }
    }

    /// Take the model for one ranking, waiting until `deadline` for a load or another ranking
    /// to end; or say why the plain page is shown instead.
    fn take(&self, deadline: Instant) -> Result<Box<Encoder>, String> {
        self.warm_up();
        let mut state = self.state();
        loop {
            let busy = match &mut *state {
                State::Ready(slot) => match slot.take() {
                    Some(encoder) => return Ok(encoder),
                    None => "the local model is ranking another search",
                },
                State::Failed(why) => {
                    return Err(format!("the local model could not be loaded: {why}"));
                }
                State::Loading | State::Cold => "the local model is still loading",
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(busy.to_owned());
            }
            state = self
                .inner
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn give_back(&self, encoder: Box<Encoder>) {
        let mut state = self.state();
        if let State::Ready(slot) = &mut *state {
            *slot = Some(encoder);
        }
        drop(state);
        self.inner.changed.notify_all();
    }
}

/// The model's name as its manifest gives it (read, not checked: the load checks it), so the
/// disclosure names the model before it is loaded.
fn manifest_name(dir: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(pith_model::install::MANIFEST)).ok()?;
    serde_json::from_str::<pith_model::install::Manifest>(&text)
        .ok()
        .map(|m| m.name)
}

/// The files of `candidates` in the order of their best line's cosine with the query.
fn model_order<'a>(
    encoder: &mut Encoder,
    query: &str,
    candidates: &'a [Candidate],
) -> Result<Vec<&'a str>, String> {
    let query: String = query.chars().take(fusion::MAX_QUERY_CHARS).collect();
    let mut texts: Vec<String> = Vec::with_capacity(candidates.len() + 1);
    texts.push(query);
    texts.extend(
        candidates
            .iter()
            .map(|c| format!("{} {}", c.path, fusion::line_text(c).trim())),
    );
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vectors = encoder.embed(&refs).map_err(|e| e.to_string())?;
    let Some((q, lines)) = vectors.split_first() else {
        return Err("the model returned no vectors".to_owned());
    };
    let mut best: Vec<(&str, f32)> = Vec::new();
    for (c, v) in candidates.iter().zip(lines) {
        let score = pith_model::cosine(q, v);
        match best.iter_mut().find(|(p, _)| *p == c.path) {
            Some((_, s)) => *s = s.max(score),
            None => best.push((&c.path, score)),
        }
    }
    best.sort_by(|a, b| b.1.total_cmp(&a.1));
    Ok(best.into_iter().map(|(p, _)| p).collect())
}

impl Ranker for LocalModelRanker {
    fn name(&self) -> String {
        self.inner
            .name
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn rank(
        &self,
        query: &str,
        candidates: &[Candidate],
        want: usize,
    ) -> Result<Vec<usize>, String> {
        fusion::check_wanted(candidates, want)?;
        let deadline = Instant::now() + self.inner.timeout;
        let mut encoder = self.take(deadline)?;
        let (tx, rx) = mpsc::channel();
        let query_owned = query.to_owned();
        let owned: Vec<Candidate> = candidates.to_vec();
        let ranker = self.clone();
        // The model runs on its own thread so the search can stop waiting at the timeout; the
        // thread finishes its batch and gives the model back either way.
        let spawned = std::thread::Builder::new()
            .name("pith-model-rank".to_owned())
            .spawn(move || {
                let order = model_order(&mut encoder, &query_owned, &owned)
                    .map(|o| o.into_iter().map(str::to_owned).collect::<Vec<String>>());
                ranker.give_back(encoder);
                let _ = tx.send(order);
            });
        if let Err(err) = spawned {
            return Err(format!("cannot start the ranking thread: {err}"));
        }
        let order = match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(order) => order?,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(format!(
                    "the local model took longer than {} ms",
                    self.inner.timeout.as_millis()
                ));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err("the ranking thread stopped".to_owned());
            }
        };
        let order: Vec<&str> = order.iter().map(String::as_str).collect();
        Ok(self.inner.lexical.pick(query, candidates, &[order], want))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With no model installed, a ranking says so and the search is shown plain; the error
    /// names the directory and the command that installs one.
    #[test]
    fn no_model_means_the_plain_page_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let ranker = LocalModelRanker::new(dir.path().join("minilm"), Duration::from_secs(1));
        let err = ranker.load().unwrap_err();
        assert!(err.contains("pith model install"), "{err}");
        let candidates = vec![Candidate {
            id: 0,
            path: "a.rs".into(),
            summary: "a.rs:1: x".into(),
        }];
        let why = ranker.rank("x", &candidates, 1).unwrap_err();
        assert!(why.contains("could not be loaded"), "{why}");
    }
}
