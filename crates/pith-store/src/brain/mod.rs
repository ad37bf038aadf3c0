//! The project memory's storage: `pith-brain`'s [`BrainStore`] trait implemented on SQLite
//! ([`SqliteBrain`]), and the one function callers open a workspace's brain with.
//!
//! The brain defines the trait and the types; this crate only keeps what it is given.

mod excerpt;
mod schema;
mod sqlite;

use std::path::Path;

use pith_brain::{Brain, BrainError, BrainStore, Workspace};

pub use schema::MIGRATIONS;
pub use sqlite::SqliteBrain;

use crate::StoreError;

/// The workspace's brain on its SQLite file (`.pith/brain.db`), created on first use: the one
/// place the CLI and the MCP server choose the backend.
pub fn open_workspace_brain(ws: Workspace) -> Result<Brain, BrainError> {
    Brain::open_with(ws, open_store)
}

/// The workspace's brain only if it already has one: for reads, which never create or chmod a
/// file.
pub fn open_existing_workspace_brain(ws: Workspace) -> Result<Option<Brain>, BrainError> {
    Brain::open_existing_with(ws, open_existing_store)
}

fn open_store(path: &Path) -> Result<Box<dyn BrainStore>, pith_brain::StoreError> {
    Ok(Box::new(SqliteBrain::open(path)?))
}

fn open_existing_store(path: &Path) -> Result<Box<dyn BrainStore>, pith_brain::StoreError> {
    Ok(Box::new(SqliteBrain::open_existing(path)?))
}

/// SQLite failures reach the brain whole: same message, same causes.
impl From<StoreError> for pith_brain::StoreError {
    fn from(e: StoreError) -> Self {
        pith_brain::StoreError::new(e)
    }
}
