//! Sentence embeddings from an installed model directory: WordPiece ids, one ONNX Runtime run
//! per batch, the hidden states averaged over each text's tokens and scaled to unit length
//! (sentence-transformers' mean pooling and normalisation, which all-MiniLM-L6-v2 was trained
//! with). ONNX Runtime is the library in the directory, loaded on first use; a process holds
//! one (ONNX Runtime allows one environment per process).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::Tensor;

use crate::ModelError;
use crate::install::{self, ModelDir};
use crate::wordpiece::WordPiece;

/// Tokens read of each text: the tokenizer file's own truncation for this model. A line of code
/// is rarely half of it.
pub const MAX_TOKENS: usize = 128;
/// Texts embedded in one run: padding is to the longest in the batch, and texts are batched in
/// length order, so little of a batch is padding.
const BATCH: usize = 32;

/// The loaded runtime, or why it could not be loaded; the first library loaded is the one the
/// process keeps.
static RUNTIME: OnceLock<Result<(PathBuf, ort::environment::Environment), String>> =
    OnceLock::new();

fn runtime(library: &Path) -> Result<ort::environment::Environment, ModelError> {
    let loaded = RUNTIME.get_or_init(|| {
        let env = ort::init_from(library)
            .map_err(|e| e.to_string())?
            .with_name("pith")
            .build()
            .map_err(|e| e.to_string())?;
        Ok((library.to_owned(), env))
    });
    match loaded {
        Ok((path, env)) if path == library => Ok(env.clone()),
        Ok((path, _)) => Err(ModelError::Runtime(format!(
            "this process already loaded ONNX Runtime from {}; restart it to use {}",
            path.display(),
            library.display()
        ))),
        Err(why) => Err(ModelError::Runtime(why.clone())),
    }
}

/// A loaded embedding model. `embed` needs `&mut self` (a session runs one batch at a time);
/// share it behind a lock.
pub struct Encoder {
    session: Session,
    tokenizer: WordPiece,
    /// Whether the graph takes `token_type_ids` (BERT exports usually do).
    token_types: bool,
    name: String,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Encoder {
    /// Load the model in `dir`, after checking every file against its manifest's checksum
    /// ([`install::verify`]). `threads` is ONNX Runtime's intra-op thread count (0: its
    /// default, one per core).
    pub fn load(dir: &Path, threads: usize) -> Result<Encoder, ModelError> {
        let model = install::verify(dir)?;
        Self::load_verified(&model, threads)
    }

    /// Load a directory [`install::verify`] has passed, its runtime library only if it may run
    /// here ([`install::check_runtime`]).
    pub fn load_verified(model: &ModelDir, threads: usize) -> Result<Encoder, ModelError> {
        install::check_runtime(model)?;
        let text = std::fs::read_to_string(&model.tokenizer).map_err(|source| ModelError::Io {
            path: model.tokenizer.clone(),
            source,
        })?;
        let tokenizer = WordPiece::from_json(&text).map_err(|source| ModelError::Tokenizer {
            path: model.tokenizer.clone(),
            source,
        })?;
        let env = runtime(&model.runtime)?;
        let ort_err = |e: ort::Error<_>| ModelError::Runtime(e.to_string());
        let mut builder = Session::builder(&env)
            .map_err(|e| ModelError::Runtime(e.to_string()))?
            .with_optimization_level(GraphOptimizationLevel::All)
            .map_err(ort_err)?;
        if threads > 0 {
            builder = builder.with_intra_threads(threads).map_err(ort_err)?;
        }
        let session = builder
            .commit_from_file(&model.model)
            .map_err(|e| ModelError::Runtime(format!("{}: {e}", model.model.display())))?;
        let names: Vec<&str> = session.inputs().iter().map(|i| i.name()).collect();
        for needed in ["input_ids", "attention_mask"] {
            if !names.contains(&needed) {
                return Err(ModelError::Runtime(format!(
                    "{} takes no {needed} (its inputs: {})",
                    model.model.display(),
                    names.join(", ")
                )));
            }
        }
        let token_types = names.contains(&"token_type_ids");
        Ok(Encoder {
            session,
            tokenizer,
            token_types,
            name: model.name.clone(),
        })
    }

    /// The model's name (from its manifest).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Each text's embedding, unit length, in the order given.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        let ids: Vec<Vec<i64>> = texts
            .iter()
            .map(|t| self.tokenizer.encode(t, MAX_TOKENS))
            .collect();
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| ids[i].len());
        let mut out = vec![Vec::new(); texts.len()];
        for batch in order.chunks(BATCH) {
            let rows: Vec<&[i64]> = batch.iter().map(|&i| ids[i].as_slice()).collect();
            for (&i, v) in batch.iter().zip(self.run(&rows)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// One run over a batch of id sequences, padded to the longest; each row's vector is the
    /// mean of its own tokens' hidden states (the padding is masked out), at unit length.
    fn run(&mut self, rows: &[&[i64]]) -> Result<Vec<Vec<f32>>, ModelError> {
        let width = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        if rows.is_empty() || width == 0 {
            return Ok(Vec::new());
        }
        let mut input = vec![0_i64; rows.len() * width];
        let mut mask = vec![0_i64; rows.len() * width];
        for (r, ids) in rows.iter().enumerate() {
            input[r * width..r * width + ids.len()].copy_from_slice(ids);
            mask[r * width..r * width + ids.len()].fill(1);
        }
        let shape = [rows.len() as i64, width as i64];
        let err = |e: ort::Error| ModelError::Runtime(e.to_string());
        let mut inputs = ort::inputs![
            "input_ids" => Tensor::from_array((shape, input)).map_err(err)?,
            "attention_mask" => Tensor::from_array((shape, mask)).map_err(err)?,
        ];
        if self.token_types {
            inputs.push((
                "token_type_ids".into(),
                Tensor::from_array((shape, vec![0_i64; rows.len() * width]))
                    .map_err(err)?
                    .into(),
            ));
        }
        let outputs = self.session.run(inputs).map_err(err)?;
        let (out_shape, hidden) = outputs[0].try_extract_tensor::<f32>().map_err(err)?;
        let dims: Vec<i64> = out_shape.iter().copied().collect();
        let [r, w, d] = dims[..] else {
            return Err(ModelError::Runtime(format!(
                "the model's first output has shape {dims:?}, not [batch, tokens, dimension]"
            )));
        };
        if r as usize != rows.len() || w as usize != width || d <= 0 {
            return Err(ModelError::Runtime(format!(
                "the model's first output has shape {dims:?} for a batch of {} x {width}",
                rows.len()
            )));
        }
        let d = d as usize;
        Ok(rows
            .iter()
            .enumerate()
            .map(|(row, ids)| {
                let mut pooled = vec![0.0_f32; d];
                for t in 0..ids.len() {
                    let at = (row * width + t) * d;
                    for (p, h) in pooled.iter_mut().zip(&hidden[at..at + d]) {
                        *p += h;
                    }
                }
                let count = ids.len().max(1) as f32;
                pooled.iter_mut().for_each(|p| *p /= count);
                let norm = pooled.iter().map(|p| p * p).sum::<f32>().sqrt().max(1e-12);
                pooled.iter_mut().for_each(|p| *p /= norm);
                pooled
            })
            .collect())
    }
}

/// The cosine of two unit vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
