//! The one integration-test binary: drives the real `pith` executable.

mod cli;
mod mcp;
mod memory;
mod setup;
