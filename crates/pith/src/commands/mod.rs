//! One module per subcommand (`pith <name>` lives in `<name>.rs`).

pub mod history;
pub mod hook;
pub mod mcp;
pub mod memory;
pub mod proxy;
pub mod setup;
pub mod stats;
pub mod statusline;
