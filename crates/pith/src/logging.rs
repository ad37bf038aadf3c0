//! Logs go to stderr (stdout belongs to command output, and to the protocol under `pith mcp`).

/// Install the stderr logger at level `info` unless `PITH_LOG` says otherwise, coloured when
/// stderr is a terminal (`pith proxy`).
pub fn init() {
    init_with("info", std::io::IsTerminal::is_terminal(&std::io::stderr()));
}

/// Install the stderr logger; level from `PITH_LOG` (e.g. `debug`, `pith_proxy=trace`), else
/// `default_level`; `ansi` colours it. Calling it twice is harmless (tests run commands more
/// than once in a process), so that error is ignored.
pub fn init_with(default_level: &str, ansi: bool) {
    let filter = crate::env::text(crate::env::Var::Log)
        .and_then(|directives| tracing_subscriber::EnvFilter::try_new(directives).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default_level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .try_init();
}
