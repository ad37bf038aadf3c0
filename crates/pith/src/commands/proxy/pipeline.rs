//! The transform stages, in order, as the plan switches them: pins, then the tool search
//! round trip's restore, then deferral, then tool output excerpts (each one's reason for its
//! place is beside it).

use std::sync::Arc;

use anyhow::Context;
use pith_prefilter::EmbedRanker;
use pith_proxy::search_trip::StoredSearches;
use pith_store::search_blocks::SearchBlocks;
use pith_transform::outputs::OutputsStage;
use pith_transform::search_trip::SearchMemory;
use pith_transform::search_trip::restore::RestoreStage;
use pith_transform::{DeferStage, PinsStage, Pipeline};

use super::plan::Plan;

pub fn build(plan: &Plan, searches: Option<&SearchBlocks>) -> anyhow::Result<Pipeline> {
    let mut pipeline = Pipeline::new().with_holdout(plan.holdout);
    // Pins first: deferral then ranks tools by the task with the command lines gone.
    if plan.pins {
        pipeline = pipeline.with_stage(Box::new(PinsStage::new()));
    }
    // Hidden searches back before deferral reads the history: a tool found by a search pith
    // hid is then a tool found by a search, not a sign of a session joined midway.
    if let Some(searches) = searches {
        let memory: Arc<dyn SearchMemory> = Arc::new(StoredSearches(searches.clone()));
        pipeline = pipeline.with_stage(Box::new(RestoreStage::new(memory)));
    }
    if let Some(options) = &plan.defer {
        let mut stage = DeferStage::new(options.clone());
        if let Some(embeddings) = &plan.embeddings {
            // The ranker blocks for at most its timeout, and only on the first sight of a
            // (task, tool list); the proxy then runs the pipeline on its blocking pool.
            pipeline = pipeline.blocking();
            let ranker =
                EmbedRanker::new(embeddings.clone()).context("transforms.embeddings_url")?;
            stage = stage.with_ranker(Arc::new(ranker));
        }
        pipeline = pipeline.with_stage(Box::new(stage));
    }
    // Last: it reads the history as the client sent it, which the stages above leave alone
    // but for pins' command lines (never in a tool output) and restore's blocks before a
    // `tool_use` (never inside one).
    if let Some(options) = &plan.trim_outputs {
        pipeline = pipeline.with_stage(Box::new(OutputsStage::new(options.clone())));
    }
    Ok(pipeline)
}
