//! Storage for pith: the request ledger and the project memory (brain) in embedded SQLite,
//! and the team ledger in PostgreSQL ([`postgres`]).
//!
//! Every database is opened through [`sqlite::open`], which applies the same rules everywhere:
//! WAL journal, a busy timeout so several processes can share a file, file mode 0600, and
//! schema migrations versioned by `PRAGMA user_version`. The brain's types and its storage
//! trait belong to `pith-brain`; [`brain`] implements that trait here.

pub mod brain;
pub mod clock;
pub mod history;
pub mod ledger;
pub mod postgres;
pub mod priority;
pub mod search_blocks;
pub mod sqlite;

pub use sqlite::{StoreError, open};
