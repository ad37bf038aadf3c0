//! pith-store's behaviour over its real backends: the ledger's tests run once per backend
//! (embedded SQLite, and the team ledger in a real PostgreSQL that the test kit starts); the
//! team ledger's shipping, the team brain's sync and the shared tool search blocks against that
//! PostgreSQL.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a failed step fails the test"
)]

mod backend;
mod brain_sync;
mod ledger;
mod search_blocks;
mod team;
