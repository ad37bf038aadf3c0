//! How tool deferral asks for a ranking of tools by relevance to the task: the stage ranks with
//! BM25 itself (`pith-transform`), and a local embedding model can stand in
//! (`pith-prefilter`'s `EmbedRanker`). The interface lives in this leaf so that the model's
//! crate does not link the transform stages to implement it.

/// One tool as a ranker sees it.
#[derive(Debug, Clone, Copy)]
pub struct ToolText<'a> {
    /// The tool's name (empty when it has none).
    pub name: &'a str,
    /// Its description (empty when it has none).
    pub description: &'a str,
    /// The names and descriptions of its arguments, one per line (from its JSON Schema).
    pub arguments: &'a str,
    /// The definition's JSON exactly as the client sent it (a stable key for caching vectors).
    pub definition: &'a str,
}

/// A relevance ranking injected into the stage (e.g. embeddings). The stage itself does no I/O;
/// an implementation may (a bounded call on the first sight of a task and tool list), but it
/// must remember its answer: the same inputs must give the same scores on every turn of a
/// session, because the loaded set, and with it the cached prompt prefix, must not change.
pub trait ToolRanker: Send + Sync {
    /// One score per tool, higher is more relevant; `None` falls back to BM25.
    fn scores(&self, task: &str, tools: &[ToolText<'_>]) -> Option<Vec<f64>>;
}
