//! The environment, read in one place: every variable pith reads is a [`Var`], read once into a
//! snapshot the first time any is asked for, with one grammar per kind of value (a switch, a
//! whole number, a duration) and errors that name the variable. A value set to the empty
//! string counts as unset, except for a switch, where empty means off.
//!
//! The coding agents' own variables (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`, `ANTHROPIC_BASE_URL`,
//! ...) are read by `pith-clients`' rules through [`client_var`] and `Places::from_env`.
//!
//! One of pith's own is not a [`Var`]: `PITH_CONFIG`, the config file, which `main.rs` reads
//! as clap's `env` for `--config` and, for the bare `pith hook`, directly (that path skips the
//! parser). `PITH_BUILD_PIE` is the build script's. No library crate reads pith's settings
//! from the environment: the binary resolves them and hands them in.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::bail;

/// A variable pith reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Var {
    /// pith's data directory.
    Home,
    /// The proxy's address.
    Listen,
    /// The Anthropic upstream origin.
    AnthropicUpstream,
    /// The OpenAI upstream origin.
    OpenaiUpstream,
    /// The ChatGPT backend's origin (Codex signed in with ChatGPT).
    ChatgptUpstream,
    /// The proxy's access token.
    ProxyToken,
    /// The shared proxy's idle stop.
    IdleStop,
    /// The proxy's timeouts.
    UpstreamHeadersTimeout,
    UpstreamIdleTimeout,
    ClientHeaderTimeout,
    ClientIdleTimeout,
    PoolIdleTimeout,
    /// The instance's name in the ledger, and how it stops.
    Instance,
    Drain,
    ShutdownGrace,
    /// Transform switches and sizes.
    DeferTools,
    ToolSearchRoundTrip,
    Pins,
    TrimOutputs,
    Holdout,
    ProviderCounts,
    SmallToolChars,
    MinDeferredChars,
    /// Team mode and the gateway.
    Account,
    AccountKeys,
    StoreUrl,
    StoreTimeout,
    /// The conversation history.
    History,
    HistoryPath,
    HistoryTokenKey,
    HistoryTokenTtl,
    /// The local model behind `search_workspace`.
    LocalPrefilter,
    PrefilterRanker,
    PrefilterApi,
    PrefilterUrl,
    /// The older name of [`Var::PrefilterUrl`].
    OllamaUrl,
    PrefilterModel,
    /// The in-process model's name or directory.
    PrefilterLocalModel,
    PrefilterThreshold,
    PrefilterShown,
    PrefilterTimeoutMs,
    /// The log filter.
    Log,
    /// Where a user's service units go (systemd).
    XdgConfigHome,
}

impl Var {
    /// Every variable, for the snapshot.
    const ALL: [Var; 43] = [
        Var::Home,
        Var::Listen,
        Var::AnthropicUpstream,
        Var::OpenaiUpstream,
        Var::ChatgptUpstream,
        Var::ProxyToken,
        Var::IdleStop,
        Var::UpstreamHeadersTimeout,
        Var::UpstreamIdleTimeout,
        Var::ClientHeaderTimeout,
        Var::ClientIdleTimeout,
        Var::PoolIdleTimeout,
        Var::Instance,
        Var::Drain,
        Var::ShutdownGrace,
        Var::DeferTools,
        Var::ToolSearchRoundTrip,
        Var::Pins,
        Var::TrimOutputs,
        Var::Holdout,
        Var::ProviderCounts,
        Var::SmallToolChars,
        Var::MinDeferredChars,
        Var::Account,
        Var::AccountKeys,
        Var::StoreUrl,
        Var::StoreTimeout,
        Var::History,
        Var::HistoryPath,
        Var::HistoryTokenKey,
        Var::HistoryTokenTtl,
        Var::LocalPrefilter,
        Var::PrefilterRanker,
        Var::PrefilterApi,
        Var::PrefilterUrl,
        Var::OllamaUrl,
        Var::PrefilterModel,
        Var::PrefilterLocalModel,
        Var::PrefilterThreshold,
        Var::PrefilterShown,
        Var::PrefilterTimeoutMs,
        Var::Log,
        Var::XdgConfigHome,
    ];

    /// Its name in the environment.
    pub fn name(self) -> &'static str {
        match self {
            Var::Home => "PITH_HOME",
            Var::Listen => "PITH_LISTEN",
            Var::AnthropicUpstream => "PITH_ANTHROPIC_UPSTREAM",
            Var::OpenaiUpstream => "PITH_OPENAI_UPSTREAM",
            Var::ChatgptUpstream => "PITH_CHATGPT_UPSTREAM",
            Var::ProxyToken => "PITH_PROXY_TOKEN",
            Var::IdleStop => "PITH_IDLE_STOP",
            Var::UpstreamHeadersTimeout => "PITH_UPSTREAM_HEADERS_TIMEOUT",
            Var::UpstreamIdleTimeout => "PITH_UPSTREAM_IDLE_TIMEOUT",
            Var::ClientHeaderTimeout => "PITH_CLIENT_HEADER_TIMEOUT",
            Var::ClientIdleTimeout => "PITH_CLIENT_IDLE_TIMEOUT",
            Var::PoolIdleTimeout => "PITH_POOL_IDLE_TIMEOUT",
            Var::Instance => "PITH_INSTANCE",
            Var::Drain => "PITH_DRAIN",
            Var::ShutdownGrace => "PITH_SHUTDOWN_GRACE",
            Var::DeferTools => "PITH_DEFER_TOOLS",
            Var::ToolSearchRoundTrip => "PITH_TOOL_SEARCH_ROUND_TRIP",
            Var::Pins => "PITH_PINS",
            Var::TrimOutputs => "PITH_TRIM_OUTPUTS",
            Var::Holdout => "PITH_HOLDOUT",
            Var::ProviderCounts => "PITH_PROVIDER_COUNTS",
            Var::SmallToolChars => "PITH_SMALL_TOOL_CHARS",
            Var::MinDeferredChars => "PITH_MIN_DEFERRED_CHARS",
            Var::Account => "PITH_ACCOUNT",
            Var::AccountKeys => "PITH_ACCOUNT_KEYS",
            Var::StoreUrl => "PITH_STORE_URL",
            Var::StoreTimeout => "PITH_STORE_TIMEOUT",
            Var::History => "PITH_HISTORY",
            Var::HistoryPath => "PITH_HISTORY_PATH",
            Var::HistoryTokenKey => "PITH_HISTORY_TOKEN_KEY",
            Var::HistoryTokenTtl => "PITH_HISTORY_TOKEN_TTL",
            Var::LocalPrefilter => "PITH_LOCAL_PREFILTER",
            Var::PrefilterRanker => "PITH_PREFILTER_RANKER",
            Var::PrefilterApi => "PITH_PREFILTER_API",
            Var::PrefilterUrl => "PITH_PREFILTER_URL",
            Var::OllamaUrl => "PITH_OLLAMA_URL",
            Var::PrefilterModel => "PITH_PREFILTER_MODEL",
            Var::PrefilterLocalModel => "PITH_PREFILTER_LOCAL_MODEL",
            Var::PrefilterThreshold => "PITH_PREFILTER_THRESHOLD",
            Var::PrefilterShown => "PITH_PREFILTER_SHOWN",
            Var::PrefilterTimeoutMs => "PITH_PREFILTER_TIMEOUT_MS",
            Var::Log => "PITH_LOG",
            Var::XdgConfigHome => "XDG_CONFIG_HOME",
        }
    }
}

/// What the process environment held for every [`Var`] when pith first asked: as text, and
/// as it was (a path need not be UTF-8).
fn snapshot() -> &'static BTreeMap<Var, (String, OsString)> {
    static SNAPSHOT: OnceLock<BTreeMap<Var, (String, OsString)>> = OnceLock::new();
    SNAPSHOT.get_or_init(|| {
        Var::ALL
            .into_iter()
            .filter_map(|v| {
                let value = std::env::var_os(v.name())?;
                Some((v, (value.to_string_lossy().into_owned(), value)))
            })
            .collect()
    })
}

/// The variable's text, `None` when unset or empty.
pub fn text(var: Var) -> Option<&'static str> {
    snapshot()
        .get(&var)
        .map(|(text, _)| text.as_str())
        .filter(|v| !v.trim().is_empty())
}

/// The variable as it is set, the empty string included (a switch reads empty as off).
pub fn raw(var: Var) -> Option<&'static str> {
    snapshot().get(&var).map(|(text, _)| text.as_str())
}

/// Whether the variable is set at all (even to the empty string).
pub fn is_set(var: Var) -> bool {
    snapshot().contains_key(&var)
}

/// The variable as a path, byte for byte as it was set.
pub fn path(var: Var) -> Option<PathBuf> {
    snapshot()
        .get(&var)
        .filter(|(_, raw)| !raw.is_empty())
        .map(|(_, raw)| PathBuf::from(raw))
}

/// The variable as a path that must be absolute: pith runs in directories the user did not
/// write (a cloned project), and a relative `PITH_HOME` or key file would be found there.
pub fn absolute_path(var: Var) -> anyhow::Result<Option<PathBuf>> {
    let Some(path) = path(var) else {
        return Ok(None);
    };
    anyhow::ensure!(
        path.is_absolute(),
        "{} is a relative path ({:?}): set it to an absolute one (a relative one would be \
         found in whatever directory pith runs in, a cloned project's too)",
        var.name(),
        path
    );
    Ok(Some(path))
}

pub use crate::switch::parse_switch;

/// A switch; anything else is an error naming the variable.
pub fn flag(var: Var) -> anyhow::Result<Option<bool>> {
    let Some((value, _)) = snapshot().get(&var) else {
        return Ok(None);
    };
    match parse_switch(value) {
        Some(on) => Ok(Some(on)),
        None => bail!(
            "{}={value:?} is not a switch; use 1 or 0 (or true/false, yes/no, on/off)",
            var.name()
        ),
    }
}

/// A whole number; anything else is an error naming the variable.
pub fn number(var: Var) -> anyhow::Result<Option<u64>> {
    match text(var) {
        None => Ok(None),
        Some(v) => match v.trim().parse() {
            Ok(n) => Ok(Some(n)),
            Err(_) => bail!("{}={v:?} is not a whole number", var.name()),
        },
    }
}

/// A duration longer than zero (`30s`, `5m`); anything else is an error naming the variable.
pub fn duration(var: Var) -> anyhow::Result<Option<Duration>> {
    match text(var) {
        None => Ok(None),
        Some(v) => positive_duration(v, var.name()).map(Some),
    }
}

/// `text` as a duration, zero allowed; errors name `source`.
pub fn any_duration(text: &str, source: &str) -> anyhow::Result<Duration> {
    crate::duration::parse(text).map_err(|e| anyhow::anyhow!("{source}: {e}"))
}

/// `text` as a duration longer than zero; errors name `source` (a variable or config key).
pub fn positive_duration(text: &str, source: &str) -> anyhow::Result<Duration> {
    match crate::duration::parse(text) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => bail!("{source} must be longer than 0"),
        Err(e) => bail!("{source}: {e}"),
    }
}

/// A variable of another program's that pith passes on or compares (a coding agent's own,
/// e.g. `ANTHROPIC_BASE_URL`), when set and not empty. Read when asked: it is the client's.
pub fn client_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_is_in_the_snapshot_once_and_switches_have_one_grammar() {
        let names: std::collections::BTreeSet<&str> = Var::ALL.iter().map(|v| v.name()).collect();
        assert_eq!(names.len(), Var::ALL.len());
        for (text, want) in [
            ("1", Some(true)),
            ("Yes", Some(true)),
            (" on ", Some(true)),
            ("0", Some(false)),
            ("off", Some(false)),
            ("", Some(false)),
            ("2", None),
        ] {
            assert_eq!(parse_switch(text), want, "{text:?}");
        }
        assert!(positive_duration("0s", "x").is_err());
        assert_eq!(
            positive_duration("90s", "x").unwrap(),
            Duration::from_secs(90)
        );
    }
}
