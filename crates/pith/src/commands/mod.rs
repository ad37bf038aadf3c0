//! One module per subcommand (`pith <name>` lives in `<name>.rs`).

pub mod doctor;
pub mod history;
pub mod hook;
pub mod mcp;
pub mod memory;
pub mod model;
pub mod proxy;
pub mod run;
pub mod service;
pub mod setup;
pub mod stats;
pub mod statusline;
