//! `pith mcp`: the MCP server on stdio. Stdout is protocol only; logs go to stderr
//! (`PITH_LOG`, default `warn`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use pith_prefilter::{Api, PrefilterConfig};
use pith_search::RankPolicy;

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
    // Team mode: the workspace's brain (which the hook reads locally) is kept fresh from the
    // team brain in the background.
    if let Some(url) = config.store_url()? {
        crate::team::spawn_brain_sync(url, workspace.root().to_path_buf())
            .context("cannot start the team brain's sync thread")?;
    }
    let options = pith_mcp::ServerOptions {
        workspace,
        prefilter: prefilter_config(&config.mcp)?,
        history: crate::history_settings::HistorySettings::resolve(config)?.mcp_options(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(pith_mcp::serve_stdio(options))?;
    Ok(())
}

/// `[mcp]` settings, then the environment over them (`PITH_LOCAL_PREFILTER=1` turns ranking on
/// without a config file; see `PrefilterConfig::with_env` for the other variables). Values that
/// cannot mean anything are errors naming the key or variable, not a silent default.
pub(crate) fn prefilter_config(mcp: &McpConfig) -> anyhow::Result<PrefilterConfig> {
    let defaults = PrefilterConfig::default();
    let enabled = env_flag("PITH_LOCAL_PREFILTER")?
        .or(mcp.local_prefilter)
        .unwrap_or(false);
    let api = match mcp.prefilter_api.as_deref() {
        None => defaults.api,
        Some(name) => api_named(name).context("mcp.prefilter_api")?,
    };
    if let Ok(name) = std::env::var("PITH_PREFILTER_API") {
        api_named(&name).context("PITH_PREFILTER_API")?;
    }
    for name in [
        "PITH_PREFILTER_THRESHOLD",
        "PITH_PREFILTER_SHOWN",
        "PITH_PREFILTER_TIMEOUT_MS",
    ] {
        if let Ok(value) = std::env::var(name) {
            value
                .trim()
                .parse::<u64>()
                .with_context(|| format!("{name}={value:?} is not a whole number"))?;
        }
    }
    let from_file = PrefilterConfig {
        enabled,
        api,
        url: mcp.prefilter_url.clone(),
        model: mcp.model.clone().unwrap_or(defaults.model),
        policy: RankPolicy {
            threshold: mcp.prefilter_threshold.unwrap_or(defaults.policy.threshold),
            shown: mcp.prefilter_shown.unwrap_or(defaults.policy.shown),
        },
        timeout: mcp
            .prefilter_timeout_ms
            .map_or(defaults.timeout, Duration::from_millis),
        load_timeout: defaults.load_timeout,
    };
    let config = from_file.with_env();
    anyhow::ensure!(
        config.policy.shown > 0,
        "mcp.prefilter_shown (or PITH_PREFILTER_SHOWN) must be at least 1"
    );
    Ok(config)
}

/// The API called `name` in config: `ollama` or `openai`.
pub(crate) fn api_named(name: &str) -> anyhow::Result<Api> {
    Api::from_name(name).with_context(|| {
        format!("{name:?} is not an API pith speaks: use \"ollama\" or \"openai\"")
    })
}
