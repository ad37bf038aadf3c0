//! `pith stats`.

use crate::config::Config;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args, _config: &Config) -> anyhow::Result<()> {
    anyhow::bail!("`pith stats` is not built yet")
}
