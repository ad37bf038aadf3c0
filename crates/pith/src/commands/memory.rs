//! `pith memory ...`.

use crate::config::Config;

#[derive(Debug, clap::Subcommand)]
pub enum MemoryCommand {
    /// List memories.
    List,
}

pub fn run(_cmd: MemoryCommand, _config: &Config) -> anyhow::Result<()> {
    anyhow::bail!("`pith memory` is not built yet")
}
