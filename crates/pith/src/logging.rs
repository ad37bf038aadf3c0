//! Logs go to stderr (stdout belongs to command output, and to the protocol under `pith mcp`).

/// Install the stderr logger; level from `PITH_LOG` (e.g. `debug`, `pith_proxy=trace`), default
/// `info`. Calling it twice is harmless.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PITH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
