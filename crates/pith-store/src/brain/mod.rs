//! The project memory's storage: `pith-brain`'s [`BrainStore`] trait implemented on SQLite
//! ([`SqliteBrain`]), and the one function callers open a workspace's brain with.
//!
//! The brain defines the trait and the types; this crate only keeps what it is given.

mod excerpt;
pub mod postgres;
mod schema;
mod sqlite;

use std::path::Path;
use std::time::Duration;

use pith_brain::recall::Access;
use pith_brain::{Brain, BrainError, BrainStore, Workspace};

pub use schema::{MIGRATIONS, OBJECTS};
pub use sqlite::{Applied, HOOK_STATEMENT_LIMIT, STATEMENT_LIMIT, SqliteBrain, Versioned};

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

/// The workspace's brain for the hook, only if it already has one: read-only (creating,
/// migrating and chmodding nothing) with `Access::Read`, else a writer of the existing file;
/// either way waiting at most `busy` for another process's lock, so a locked brain costs the
/// hook milliseconds, not seconds.
pub fn open_workspace_brain_for_hook(
    ws: Workspace,
    access: Access,
    busy: Duration,
) -> Result<Option<Brain>, BrainError> {
    Brain::open_existing_with(ws, |path| {
        let store = match access {
            Access::Read => SqliteBrain::open_read_only(path, busy)?,
            Access::Write => SqliteBrain::open_existing_waiting(path, busy)?,
        };
        Ok(Box::new(store) as Box<dyn BrainStore>)
    })
}

/// The workspace's SQLite brain itself, created as a first save creates it (`.pith/` with its
/// `.gitignore`): the team brain's sync reads and writes it directly.
pub fn open_workspace_sqlite(ws: Workspace) -> Result<SqliteBrain, BrainError> {
    let db = Brain::db_path(ws.root());
    drop(open_workspace_brain(ws)?);
    Ok(SqliteBrain::open_existing(&db).map_err(pith_brain::StoreError::from)?)
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
