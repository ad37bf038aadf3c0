//! `pith mcp`: the MCP server on stdio. Stdout is protocol only; logs go to stderr
//! (`PITH_LOG`, default `warn`).

use std::path::PathBuf;

use anyhow::Context;

use crate::config::Config;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workspace root. Default: the nearest ancestor of the current directory holding `.git`
    /// or `.pith`, else the current directory.
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

pub fn run(args: Args, _config: &Config) -> anyhow::Result<()> {
    init_stderr_logging();
    let workspace = super::memory::workspace_from(args.workspace.as_deref())?;
    let options = pith_mcp::ServerOptions { workspace };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(pith_mcp::serve_stdio(options))?;
    Ok(())
}

fn init_stderr_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PITH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // A second subscriber (tests calling run twice) is harmless; ignore that error.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}
