//! `pith mcp`: the MCP server on stdio. Stdout is protocol only; logs go to stderr
//! (`PITH_LOG`, default `warn`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use pith_prefilter::PrefilterConfig;

use crate::config::{Config, McpConfig, env_flag};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workspace root. Default: the nearest ancestor of the current directory holding `.git`
    /// or `.pith`, else the current directory.
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

pub fn run(args: Args, config: &Config) -> anyhow::Result<()> {
    // No colour: the client reads this stderr, not a person.
    crate::logging::init_with("warn", false);
    let workspace = crate::workspace::workspace_from(args.workspace.as_deref())?;
    let options = pith_mcp::ServerOptions {
        workspace,
        prefilter: prefilter_config(&config.mcp)?,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(pith_mcp::serve_stdio(options))?;
    Ok(())
}

/// `[mcp]` settings, then the environment over them (`PITH_LOCAL_PREFILTER=1` turns ranking on
/// without a config file; see `PrefilterConfig::with_env` for the other variables).
fn prefilter_config(mcp: &McpConfig) -> anyhow::Result<PrefilterConfig> {
    let defaults = PrefilterConfig::default();
    // Checked here first so that a typo is an error naming the variable, not a silent "off".
    let enabled = env_flag("PITH_LOCAL_PREFILTER")?
        .or(mcp.local_prefilter)
        .unwrap_or(false);
    let from_file = PrefilterConfig {
        enabled,
        url: mcp.ollama_url.clone().unwrap_or(defaults.url),
        model: mcp.model.clone().unwrap_or(defaults.model),
        threshold: mcp.prefilter_threshold.unwrap_or(defaults.threshold),
        timeout: mcp
            .prefilter_timeout_ms
            .map_or(defaults.timeout, Duration::from_millis),
    };
    Ok(from_file.with_env())
}
