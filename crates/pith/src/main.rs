//! `pith`: the binary. Parses the command line, loads config, wires the library crates
//! together; the only crate that prints to stdout or exits.
#![expect(
    clippy::print_stdout,
    reason = "the binary is the one place that prints: command output and protocol"
)]

mod commands;
mod config;
mod dashboard;
mod duration;
mod logging;
mod prices;
mod workspace;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Local context engineering for AI coding agents.
///
/// pith sits between your coding agent (Claude Code, OpenCode, Codex, any client of the
/// Anthropic Messages, OpenAI Chat Completions or Responses APIs) and its provider, keeps a
/// project memory the agent can use through MCP, and accounts every token.
#[derive(Debug, Parser)]
#[command(name = "pith", version, propagate_version = true)]
struct Cli {
    /// Config file (TOML). Default: $PITH_HOME/config.toml when it exists.
    #[arg(long, global = true, env = "PITH_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the proxy between your agent and its provider.
    Proxy(commands::proxy::Args),
    /// Token and cost totals from the ledger, per session and per model.
    Stats(commands::stats::Args),
    /// Run the MCP server (stdio) with workspace search and the project memory.
    Mcp(commands::mcp::Args),
    /// Read and write the project memory.
    Memory(commands::memory::Args),
    /// Register pith with a coding agent (claude-code, opencode, codex).
    Setup(commands::setup::Args),
    /// One status line for Claude Code (its statusLine command): the session's tokens, cost,
    /// cache hit share and what pith kept out, from the ledger. Reads the payload on stdin.
    Statusline(commands::statusline::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = config::Config::load(cli.config.as_deref()).and_then(|config| match cli.command {
        Command::Proxy(args) => commands::proxy::run(args, &config),
        Command::Stats(args) => commands::stats::run(args, &config),
        Command::Mcp(args) => commands::mcp::run(args, &config),
        Command::Memory(cmd) => commands::memory::run(cmd, &config),
        Command::Setup(args) => commands::setup::run(args, &config),
        Command::Statusline(args) => commands::statusline::run(args, &config),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pith: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
