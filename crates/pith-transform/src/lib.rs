//! Pure request transforms over raw JSON bodies. No I/O.
//!
//! A transform is a [`Stage`]: a pure function from a [`Request`] (wire, path, headers, raw
//! body bytes) to [`Outcome::Unchanged`] or an [`Edit`]. An edit is a list of [`Splice`]s into
//! the original bytes plus header edits: a client body is never re-serialized, so every byte a
//! stage did not mean to touch reaches the provider as the client sent it (prompt caches match
//! byte prefixes). The [`Pipeline`] runs stages in order and fails open: a stage that errors,
//! panics or produces invalid JSON leaves the request as it was and is reported as failed.

mod checked;
pub mod defer;
pub mod holdout;
pub mod outputs;
pub mod pins;
mod pipeline;
pub mod search_trip;
mod splice;
mod stage;
mod stopwords;
pub mod words;

pub use defer::{DeferOptions, DeferStage, SearchVariant, ToolRanker, ToolText};
pub use pins::{LocalAnswer, PinsStage};
pub use pipeline::{
    Applied, Pipeline, PipelineResult, REFUSED_BY_PROVIDER, StageReport, StageResult,
};
pub use splice::{SpliceError, apply_splices, span_of};
pub use stage::{
    Edit, Fact, FactKind, HeaderEdit, Outcome, Request, Site, Splice, Stage, StageError,
    append_list_value, estimated_tokens,
};
