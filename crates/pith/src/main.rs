//! `pith`: the binary. Parses the command line, loads config, wires the library crates
//! together; the only crate that exits or prints command output (the libraries return errors,
//! which `main` prints once with their causes, `pith: error: {e:#}`; under `pith mcp` stdout
//! carries the protocol, which `pith-mcp` writes, and nothing else).
//!
//! Two answers come before the usual path. `pith hook` is answered apart from every other
//! command, because a host runs it on every tool call and records a failing status or any
//! stderr as a hook error: a bad flag or config file means defaults, a panic means silence,
//! the exit status is always 0, and the bare `pith hook` that `pith setup` writes is
//! recognised before clap's tree of every subcommand is built (its config path then comes from
//! `PITH_CONFIG` as clap would read it). And any command whose stdout reader goes away
//! (`pith stats | head`) ends quietly with status 0 instead of a panic message.
#![expect(
    clippy::print_stdout,
    reason = "the binary is the one place that prints: command output and protocol"
)]

mod background;
mod client_files;
mod commands;
mod config;
mod dashboard;
mod duration;
mod env;
mod history_settings;
mod logging;
mod switch;
mod team;
mod workspace;

use std::io::Write as _;
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
    /// Search, import and clean up the conversation history (recorded by the proxy).
    History(commands::history::Args),
    /// Run a coding agent (claude-code or claude, opencode, codex) through pith's proxy,
    /// starting a shared one in the background when none is running.
    Run(commands::run::Args),
    /// Keep `pith proxy` running as your user's service (systemd on Linux, launchd on macOS).
    Service(commands::service::Args),
    /// Install, check or list the embedding model the search prefilter can run in-process.
    Model(commands::model::Args),
    /// Check pith's setup: config, proxy, each client's wiring, ledger, brain, local model.
    Doctor(commands::doctor::Args),
    /// Register pith with a coding agent (claude-code or claude, opencode, codex).
    Setup(commands::setup::Args),
    /// Answer a coding agent's tool-call hook (run by Claude Code and Codex; reads stdin).
    Hook(commands::hook::Args),
    /// One status line for Claude Code (its statusLine command): the session's tokens, cost,
    /// cache hit share and what pith kept out, from the ledger. Reads the payload on stdin.
    Statusline(commands::statusline::Args),
}

/// `pith stats --json | head`: when the reader of stdout goes away, a command ends quietly
/// (status 0, nothing on stderr), as other command-line tools do, instead of panicking with
/// "failed printing to stdout: Broken pipe" and a backtrace. Every other panic is reported as
/// before.
fn quiet_on_closed_pipe() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        report(info);
    }));
}

fn main() -> ExitCode {
    // A host runs `pith hook` on every tool call: its bare form skips building the command
    // line's parser, which took a quarter of a millisecond, a tenth of the whole call.
    if is_bare_hook() {
        let config = std::env::var_os("PITH_CONFIG").filter(|v| !v.is_empty());
        return hook(config.map(PathBuf::from));
    }
    quiet_on_closed_pipe();
    let parsed = Cli::try_parse();
    // The hook is answered apart from the other commands: it never exits non-zero and never
    // prints an error (a bad flag, a broken config file) or a stack trace.
    let is_hook = match &parsed {
        Ok(cli) => matches!(cli.command, Command::Hook(_)),
        // `pith hook --help` is a person asking.
        Err(e) if e.use_stderr() => subcommand_is_hook(),
        Err(_) => false,
    };
    if is_hook {
        return hook(parsed.ok().and_then(|cli| cli.config));
    }
    let cli = parsed.unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        // The doctor reports a config that does not parse as one of its checks.
        Command::Doctor(args) => commands::doctor::run(args, cli.config.as_deref()),
        // A status line is never an error: a config it cannot read means the defaults.
        Command::Statusline(args) => commands::statusline::run(
            args,
            &config::Config::load(cli.config.as_deref()).unwrap_or_default(),
        )
        .map(|()| ExitCode::SUCCESS),
        command => {
            config::Config::load(cli.config.as_deref()).and_then(|config| run(command, &config))
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // An error quotes what it was given (an id, a query, a path, a database's own
            // names): escaped, and written even when nobody reads stderr (a closed pipe).
            let message = pith_brain::render::printable(&format!("{e:#}"));
            let _ = writeln!(std::io::stderr().lock(), "pith: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Every command but the doctor and the hook, with its config loaded.
fn run(command: Command, config: &config::Config) -> anyhow::Result<ExitCode> {
    let done = match command {
        // The client's own exit code (when it could not `exec` in its place).
        Command::Run(args) => return commands::run::run(args, config),
        Command::Doctor(args) => return commands::doctor::run(args, config.source.as_deref()),
        Command::Proxy(args) => commands::proxy::run(args, config),
        Command::Stats(args) => commands::stats::run(args, config),
        Command::Mcp(args) => commands::mcp::run(args, config),
        Command::Memory(cmd) => commands::memory::run(cmd, config),
        Command::Model(args) => commands::model::run(args, config),
        Command::History(args) => commands::history::run(args, config),
        Command::Setup(args) => commands::setup::run(args, config),
        Command::Service(args) => commands::service::run(args, config),
        Command::Hook(args) => {
            commands::hook::run(args, Some(&config.hook));
            Ok(())
        }
        Command::Statusline(args) => commands::statusline::run(args, config),
    };
    done.map(|()| ExitCode::SUCCESS)
}

/// `pith hook` with the config file named by `--config` or `PITH_CONFIG`: exit 0 whatever
/// happens. A bad flag or config file means defaults, a panic means silence (the panic message
/// is not printed: the host would show it as a hook error).
fn hook(config: Option<PathBuf>) -> ExitCode {
    std::panic::set_hook(Box::new(|_| {}));
    let _ = std::panic::catch_unwind(move || {
        let config = config::Config::load(config.as_deref()).ok();
        commands::hook::run(commands::hook::Args {}, config.as_ref().map(|c| &c.hook));
    });
    ExitCode::SUCCESS
}

/// Whether the command line is exactly `pith hook`, as `pith setup` writes it into a host's
/// hooks (anything more goes through the parser).
fn is_bare_hook() -> bool {
    let mut args = std::env::args_os().skip(1);
    args.next().is_some_and(|arg| arg == "hook") && args.next().is_none()
}

/// Whether the subcommand on the command line is `hook` (the first word that is neither a flag
/// nor the value of `--config`).
fn subcommand_is_hook() -> bool {
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--config" {
            args.next();
        } else if !arg.to_string_lossy().starts_with('-') {
            return arg == "hook";
        }
    }
    false
}
