//! `pith proxy`: run the proxy in the foreground until Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use pith_prefilter::{Api, DEFAULT_EMBED_TIMEOUT, EmbedConfig, EmbedRanker};
use pith_proxy::own_pages::OwnPages;
use pith_proxy::rewrite::ResponseRewrites;
use pith_proxy::search_trip::{SearchTrip, StoredSearches};
use pith_proxy::{
    DEFAULT_SPOOL_LIMIT, HistorySink, LedgerSink, Proxy, ProxyConfig, SpoolConfig, Timeouts,
    UpstreamUrl,
};
use pith_store::history::History;
use pith_store::ledger::Ledger;
use pith_store::postgres::ship::Shipper;
use pith_store::search_blocks::{Limits, SearchBlocks};
use pith_transform::search_trip::SearchMemory;
use pith_transform::search_trip::restore::RestoreStage;
use pith_transform::{DeferOptions, DeferStage, PinsStage, Pipeline, SearchVariant};

use crate::config::{Config, env_flag, pith_home};
use crate::dashboard::{Dashboard, Upstreams};
use crate::history_settings::HistorySettings;
use crate::prices::Prices;

const DEFAULT_LISTEN: &str = "127.0.0.1:8787";

#[derive(Debug, clap::Args)]
#[command(after_help = "Point your agent at the proxy:
  Claude Code:  ANTHROPIC_BASE_URL=http://127.0.0.1:8787 claude
  OpenCode:     provider.<id>.options.baseURL = \"http://127.0.0.1:8787/v1\" in opencode.json
  Codex:        [model_providers.pith] base_url = \"http://127.0.0.1:8787/v1\", wire_api = \"responses\"

Tool deferral is on by default (PITH_DEFER_TOOLS=0 turns it off) for tool lists with at least
20,000 characters of deferrable definitions (PITH_MIN_DEFERRED_CHARS); every rewrite is named in
the pith-transforms response header, and `pith stats` shows what was deferred and why other
requests were left alone. Logs go to stderr (PITH_LOG=debug).

The conversations that pass through are recorded in $PITH_HOME/history.db (mode 0600; [history]
record = false or PITH_HISTORY=0 turns that off; `pith history --help` says what is kept).

Timeouts and their defaults (env, or the [proxy] key in lower case without PITH_, e.g.
upstream_idle_timeout = \"5m\"):
  PITH_UPSTREAM_HEADERS_TIMEOUT  10m  wait for the provider's response headers
  PITH_UPSTREAM_IDLE_TIMEOUT      5m  silence inside the provider's answer
  PITH_CLIENT_HEADER_TIMEOUT     30s  a client sending its request headers
  PITH_CLIENT_IDLE_TIMEOUT       60s  silence inside a client's request body
  PITH_POOL_IDLE_TIMEOUT         90s  idle upstream connections kept for reuse
A timed-out request ends with an error in the provider's own shape naming the limit.

Listening beyond loopback needs an access token ([proxy] token or PITH_PROXY_TOKEN); clients
send it in the x-pith-token header (Claude Code: ANTHROPIC_CUSTOM_HEADERS=\"x-pith-token: ...\").

A gateway shared by a team maps each request to an account by its key: list them by account in
[account.keys] (alice = \"<key of 16+ characters>\" or \"sha256:<hex>\"), or in a file named by
PITH_ACCOUNT_KEYS; each client then sends its key in the pith-account-key header (Claude Code:
ANTHROPIC_CUSTOM_HEADERS=\"pith-account-key: ...\"; Codex: model_providers.<id>.http_headers;
OpenCode: provider.<id>.options.headers). A request without a known key is refused (401); its
account goes on its ledger row and history turn, and `pith stats` totals each account.")]
pub struct Args {
    /// Address to listen on [default: 127.0.0.1:8787; config: proxy.listen].
    #[arg(long, env = "PITH_LISTEN", value_name = "ADDR")]
    listen: Option<SocketAddr>,

    /// Stop after this long with no connection open and no client of `pith run` left (e.g.
    /// `30m`) [default: never].
    #[arg(long, value_name = "DURATION")]
    idle_stop: Option<String>,

    /// Start the proxy in the background (its own process group, stderr appended to
    /// $PITH_HOME/logs/proxy.log) and return at once; `pith run` starts its shared proxy so.
    #[arg(long)]
    detach: bool,

    /// Anthropic API origin [default: https://api.anthropic.com; config: upstreams.anthropic].
    #[arg(long, env = "PITH_ANTHROPIC_UPSTREAM", value_name = "URL")]
    anthropic_upstream: Option<String>,

    /// OpenAI API origin [default: https://api.openai.com; config: upstreams.openai].
    #[arg(long, env = "PITH_OPENAI_UPSTREAM", value_name = "URL")]
    openai_upstream: Option<String>,

    /// Ledger database [default: $PITH_HOME/ledger.db; config: ledger.path].
    #[arg(long, value_name = "FILE")]
    ledger: Option<PathBuf>,

    /// Do not record requests in the ledger.
    #[arg(long, conflicts_with = "ledger")]
    no_ledger: bool,
}

/// The address the proxy listens on: the flag (or `PITH_LISTEN`), else `proxy.listen`, else
/// 127.0.0.1:8787.
pub fn listen_addr(flag: Option<SocketAddr>, config: &Config) -> anyhow::Result<SocketAddr> {
    if let Some(a) = flag {
        return Ok(a);
    }
    if let Ok(text) = std::env::var("PITH_LISTEN") {
        return text.parse().with_context(|| {
            format!("PITH_LISTEN={text:?} is not an address like 127.0.0.1:8787")
        });
    }
    let text = config.proxy.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
    text.parse()
        .with_context(|| format!("proxy.listen {text:?} is not an address like 127.0.0.1:8787"))
}

/// Where the proxy sends Anthropic and OpenAI traffic: flag or env, else config, else the
/// providers' own APIs.
pub fn upstreams(
    anthropic_flag: Option<&str>,
    openai_flag: Option<&str>,
    config: &Config,
) -> anyhow::Result<(UpstreamUrl, UpstreamUrl)> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let anthropic_env = env("PITH_ANTHROPIC_UPSTREAM");
    let openai_env = env("PITH_OPENAI_UPSTREAM");
    Ok((
        upstream(
            anthropic_flag.or(anthropic_env.as_deref()),
            config.upstreams.anthropic.as_deref(),
            pith_proxy::upstream::ANTHROPIC_DEFAULT,
        )?,
        upstream(
            openai_flag.or(openai_env.as_deref()),
            config.upstreams.openai.as_deref(),
            pith_proxy::upstream::OPENAI_DEFAULT,
        )?,
    ))
}

/// `pith proxy --detach`: this command line again without `--detach`, in its own process
/// group (a Ctrl-C in the terminal that started it does not reach it), stdin closed, stdout
/// and stderr appended to `$PITH_HOME/logs/proxy.log`. Returns once it is started, not
/// listening: the caller asks `/pith/health`.
fn detach() -> anyhow::Result<()> {
    let log_path = crate::background::log_path(&pith_home()?);
    let log = crate::background::open_private(&log_path, true)?;
    let exe = std::env::current_exe().context("cannot find the pith binary to start")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(std::env::args_os().skip(1).filter(|a| a != "--detach"))
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().context("cannot share the log file")?)
        .stderr(log);
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.spawn()
        .with_context(|| format!("cannot start pith proxy (log: {})", log_path.display()))?;
    Ok(())
}

pub fn run(args: Args, config: &Config) -> anyhow::Result<()> {
    if args.detach {
        return detach();
    }
    crate::logging::init();
    let listen = listen_addr(args.listen, config)?;
    let idle_stop = match args.idle_stop.as_deref() {
        None => None,
        Some(text) => match crate::duration::parse(text) {
            Ok(d) if !d.is_zero() => Some(d),
            Ok(_) => anyhow::bail!("--idle-stop must be longer than 0"),
            Err(e) => anyhow::bail!("--idle-stop: {e}"),
        },
    };
    let (anthropic, openai) = upstreams(
        args.anthropic_upstream.as_deref(),
        args.openai_upstream.as_deref(),
        config,
    )?;
    let ledger_path = if args.no_ledger {
        None
    } else {
        Some(match args.ledger.or_else(|| config.ledger.path.clone()) {
            Some(p) => p,
            None => pith_home()?.join("ledger.db"),
        })
    };
    let history = HistorySettings::resolve(config)?;
    // The account this proxy's requests belong to (checked even outside team mode, so a typo
    // shows before it matters), and a gateway's account keys.
    let account = config.account_id()?;
    let keys = config.account_keys()?;
    // Conversations are recorded on the ledger's writer threads, from the records it gets.
    let history_path = (history.record && ledger_path.is_some()).then(|| history.path.clone());
    // Why the history is not recorded after all, for the startup lines.
    let mut history_error: Option<String> = None;
    let ledger = match &ledger_path {
        Some(path) => {
            let ledger = Ledger::open(path)?;
            // Fail open: a history that cannot be opened leaves the proxy running without it.
            let sink = match history_path.as_ref().map(|p| (p, History::open(p))) {
                Some((_, Ok(store))) => Some(HistorySink::new(store, history.agent_types.clone())),
                Some((path, Err(e))) => {
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "cannot open the history {}; conversations are not recorded",
                        path.display()
                    );
                    history_error = Some(e.to_string());
                    None
                }
                None => None,
            };
            if config.ledger.queue.is_some() {
                tracing::warn!(
                    "[ledger] queue is no longer used: records wait in the spool beside the \
                     ledger ([ledger] spool_limit_mb bounds it)"
                );
            }
            Some(LedgerSink::start_with_history(
                ledger,
                &spool_config(path, config),
                sink,
            )?)
        }
        None => None,
    };
    // Team mode: the local ledger is the queue; a thread of its own sends its rows on, so the
    // database being down or slow never reaches a request.
    let store_url = config.store_url()?;
    // The history ships with it when it is being recorded.
    let shipped_history = history_error
        .is_none()
        .then(|| history_path.clone())
        .flatten();
    let shipping = if shipped_history.is_some() {
        "ledger rows and conversation history"
    } else {
        "ledger rows"
    };
    let shipper = match (&store_url, &ledger_path) {
        (Some(url), Some(path)) => Some(
            Shipper::start(path.clone(), shipped_history, url.clone(), account.clone())
                .context("cannot start the team ledger's shipper thread")?,
        ),
        _ => None,
    };
    let pins = pins_on(config)?.then(PinsStage::new);
    // Search blocks hidden from answers wait here for the session's next requests.
    let searches_path = pith_home()?.join("search-blocks.db");
    let searches = if search_round_trip_on(config)? && defer_on(config)? {
        Some(
            match SearchBlocks::open(&searches_path, Limits::default()) {
                Ok(blocks) => blocks,
                Err(e) => {
                    // Fail open: the round trip still works until pith stops.
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "cannot open {}; hidden tool searches are kept in memory only",
                        searches_path.display()
                    );
                    SearchBlocks::in_memory(Limits::default())
                }
            },
        )
    } else {
        None
    };
    let pipeline = build_pipeline(config, searches.as_ref())?;
    let rewrites = searches
        .clone()
        .map(|s| Arc::new(SearchTrip::new(s)) as Arc<dyn ResponseRewrites>);
    let stages = pipeline.stage_names();
    let timeouts = timeouts(&config.proxy)?;
    let token = std::env::var("PITH_PROXY_TOKEN")
        .ok()
        .or_else(|| config.proxy.token.clone())
        .filter(|t| !t.is_empty());

    // One event-loop thread: an agent sends a few requests a second, and on one thread every
    // streamed chunk goes from the upstream connection to the client without a cross-thread
    // wake-up (measured in BENCHMARKS.md). Blocking stages run on tokio's blocking pool.
    let mut dashboard = Dashboard::new(
        ledger_path.clone(),
        Prices::new(&config.prices),
        Upstreams {
            anthropic: anthropic.to_string(),
            openai: openai.to_string(),
        },
    )
    .with_own_account(account.clone());
    if let Some(url) = &store_url {
        dashboard = dashboard.with_team(url.clone(), config.team_replica()?);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let proxy = Proxy::bind(ProxyConfig {
            listen,
            anthropic: anthropic.clone(),
            openai: openai.clone(),
            pipeline,
            pins,
            own_pages: Some(Arc::new(dashboard) as Arc<dyn OwnPages>),
            ledger: ledger.clone(),
            rewrites,
            max_body: pith_proxy::DEFAULT_MAX_BODY,
            timeouts,
            token: token.clone(),
            accounts: pith_proxy::Accounts {
                own: account.clone(),
                keys: keys.clone(),
            },
        })
        .await?;
        let addr = proxy.local_addr()?;
        eprintln!("pith proxy listening on http://{addr}");
        eprintln!("  dashboard -> http://{addr}/");
        eprintln!("  anthropic -> {anthropic}");
        eprintln!("  openai    -> {openai}");
        match (&ledger_path, &ledger) {
            (Some(p), Some(sink)) => {
                let waiting = match sink.stats().backlog {
                    0 => String::new(),
                    n => format!(" ({n} requests left in the spool are being written)"),
                };
                eprintln!("  ledger    -> {}{waiting}", p.display())
            }
            _ => eprintln!("  ledger    -> off"),
        }
        match (&history_path, &history_error) {
            (Some(p), Some(e)) => {
                eprintln!("  history   -> off (cannot open {}: {e})", p.display())
            }
            (Some(p), None) => eprintln!("  history   -> {}", p.display()),
            (None, _) => eprintln!("  history   -> off"),
        }
        match (&store_url, &shipper) {
            (Some(url), Some(_)) => {
                eprintln!(
                    "  team      -> {url} ({shipping} shipped in the background, account {account})"
                )
            }
            (Some(url), None) => {
                eprintln!("  team      -> {url} (nothing shipped: the ledger is off)")
            }
            _ => {}
        }
        if searches.is_some() {
            eprintln!("  searches  -> {}", searches_path.display());
        }
        if !keys.is_empty() {
            eprintln!(
                "  accounts  -> {} keys; clients must send theirs in the {} header (refused without)",
                keys.len(),
                pith_proxy::ACCOUNT_KEY_HEADER
            );
        }
        if token.is_some() {
            eprintln!(
                "  access    -> clients must send the {} header",
                pith_proxy::TOKEN_HEADER
            );
        }
        eprintln!(
            "  transforms: {}",
            if stages.is_empty() {
                "none".to_owned()
            } else {
                stages.join(", ")
            }
        );
        if let Some(idle) = idle_stop {
            eprintln!(
                "  idle stop : after {} with no connection and no `pith run` client",
                crate::duration::format(idle)
            );
        }
        let activity = proxy.activity();
        let clients = crate::background::clients_lock_path(&pith_home()?);
        // Held from the idle decision until the process ends: a `pith run` starting meanwhile
        // waits for it, then finds no proxy and starts one.
        let mut stop_lock = None;
        let idle = async {
            match idle_stop {
                Some(idle) => {
                    stop_lock = Some(idle_stopped(&activity, idle, &clients).await);
                    eprintln!(
                        "pith proxy idle for {}: stopping",
                        crate::duration::format(idle)
                    );
                }
                None => std::future::pending().await,
            }
        };
        proxy
            .serve(
                async {
                    tokio::select! {
                        () = shutdown_signal() => {}
                        () = idle => {}
                    }
                },
                Duration::from_secs(5),
            )
            .await?;
        anyhow::Ok(())
    })?;
    if let Some(searches) = &searches {
        searches.flush();
    }
    if let Some(sink) = ledger {
        sink.shutdown(Duration::from_secs(5));
        let s = ledger_stats_line(&sink);
        eprintln!("pith proxy stopped; {s}");
    }
    if let Some(shipper) = shipper {
        let s = shipper.stop();
        eprintln!(
            "team ledger: {} rows shipped, {} waiting in the local ledger for the next start",
            s.shipped, s.backlog
        );
    }
    Ok(())
}

/// Resolves when no connection has been open for `idle` and no `pith run` client holds the
/// clients lock, with that lock taken.
async fn idle_stopped(
    activity: &pith_proxy::Activity,
    idle: Duration,
    clients: &std::path::Path,
) -> std::fs::File {
    let tick = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    loop {
        tokio::time::sleep(tick).await;
        if activity.idle_for().is_some_and(|d| d >= idle)
            && let Some(lock) = crate::background::no_clients(clients)
        {
            return lock;
        }
    }
}

/// The proxy's timeouts: env over config over the defaults, each named in its error.
fn timeouts(proxy: &crate::config::ProxyConfig) -> anyhow::Result<Timeouts> {
    let defaults = Timeouts::default();
    let pick = |env: &str, key: &str, configured: &Option<String>, default: Duration| {
        let (text, source) = match std::env::var(env) {
            Ok(v) => (v, env.to_owned()),
            Err(_) => match configured {
                Some(v) => (v.clone(), format!("proxy.{key}")),
                None => return Ok(default),
            },
        };
        match crate::duration::parse(&text) {
            Ok(d) if !d.is_zero() => Ok(d),
            Ok(_) => anyhow::bail!("{source} must be longer than 0"),
            Err(e) => anyhow::bail!("{source}: {e}"),
        }
    };
    Ok(Timeouts {
        upstream_headers: pick(
            "PITH_UPSTREAM_HEADERS_TIMEOUT",
            "upstream_headers_timeout",
            &proxy.upstream_headers_timeout,
            defaults.upstream_headers,
        )?,
        upstream_idle: pick(
            "PITH_UPSTREAM_IDLE_TIMEOUT",
            "upstream_idle_timeout",
            &proxy.upstream_idle_timeout,
            defaults.upstream_idle,
        )?,
        client_headers: pick(
            "PITH_CLIENT_HEADER_TIMEOUT",
            "client_header_timeout",
            &proxy.client_header_timeout,
            defaults.client_headers,
        )?,
        client_idle: pick(
            "PITH_CLIENT_IDLE_TIMEOUT",
            "client_idle_timeout",
            &proxy.client_idle_timeout,
            defaults.client_idle,
        )?,
        pool_idle: pick(
            "PITH_POOL_IDLE_TIMEOUT",
            "pool_idle_timeout",
            &proxy.pool_idle_timeout,
            defaults.pool_idle,
        )?,
    })
}

fn ledger_stats_line(sink: &LedgerSink) -> String {
    let s = sink.stats();
    let waiting = match s.backlog {
        0 => String::new(),
        n => format!(", {n} left in the spool for the next start"),
    };
    format!(
        "ledger: {} rows written, {} lost, {} write errors{waiting}; history: {} write errors",
        s.written, s.lost, s.write_errors, s.history_errors
    )
}

/// Where records wait for the ledger's writers: a directory beside the ledger, named after it
/// (`ledger.db-spool`, as SQLite names its `-wal`), bounded by `[ledger] spool_limit_mb`.
pub(crate) fn spool_config(ledger: &std::path::Path, config: &Config) -> SpoolConfig {
    SpoolConfig {
        dir: spool_dir(ledger),
        limit: config
            .ledger
            .spool_limit_mb
            .map_or(DEFAULT_SPOOL_LIMIT, |mb| mb.saturating_mul(1 << 20)),
    }
}

/// The spool directory of the ledger at `ledger`.
pub(crate) fn spool_dir(ledger: &std::path::Path) -> std::path::PathBuf {
    let mut name = ledger.as_os_str().to_owned();
    name.push("-spool");
    std::path::PathBuf::from(name)
}

fn upstream(
    flag: Option<&str>,
    config: Option<&str>,
    default: &str,
) -> anyhow::Result<UpstreamUrl> {
    let url = flag.or(config).unwrap_or(default);
    Ok(UpstreamUrl::parse(url)?)
}

/// The transform stages, in order, as config and environment switch them. Environment wins
/// over config so a single run can be switched without editing files.
fn build_pipeline(config: &Config, searches: Option<&SearchBlocks>) -> anyhow::Result<Pipeline> {
    let mut pipeline = Pipeline::new();
    let t = &config.transforms;
    // Pins first: deferral then ranks tools by the task with the command lines gone.
    if pins_on(config)? {
        pipeline = pipeline.with_stage(Box::new(PinsStage::new()));
    }
    // Hidden searches back before deferral reads the history: a tool found by a search pith
    // hid is then a tool found by a search, not a sign of a session joined midway.
    if let Some(searches) = searches {
        let memory: Arc<dyn SearchMemory> = Arc::new(StoredSearches(searches.clone()));
        pipeline = pipeline.with_stage(Box::new(RestoreStage::new(memory)));
    }
    if defer_on(config)? {
        let defaults = DeferOptions::default();
        let search = match t.tool_search.as_deref() {
            None => defaults.search,
            Some(name) => SearchVariant::from_name(name).with_context(|| {
                format!("transforms.tool_search = {name:?}: use \"regex\" or \"bm25\"")
            })?,
        };
        let small_tool_chars = match env_usize("PITH_SMALL_TOOL_CHARS")? {
            Some(n) => n,
            None => t.small_tool_chars.unwrap_or(defaults.small_tool_chars),
        };
        let stage = DeferStage::new(DeferOptions {
            keep_relevant: t.keep_relevant.unwrap_or(defaults.keep_relevant),
            small_tool_chars,
            search,
            min_deferred_chars: match env_usize("PITH_MIN_DEFERRED_CHARS")? {
                Some(n) => n,
                None => t.min_deferred_chars.unwrap_or(defaults.min_deferred_chars),
            },
        });
        let stage = match (&t.embeddings_url, &t.embeddings_model) {
            (None, None) if t.embeddings_api.is_some() => anyhow::bail!(
                "transforms.embeddings_api is set but transforms.embeddings_url and \
                 transforms.embeddings_model are not: set them too, or remove it"
            ),
            (None, None) => stage,
            (Some(url), Some(model)) => {
                // The ranker blocks for at most the timeout, and only on the first sight of a
                // (task, tool list); the proxy then runs the pipeline on its blocking pool.
                pipeline = pipeline.blocking();
                let api = match t.embeddings_api.as_deref() {
                    None => Api::default(),
                    Some(name) => {
                        super::mcp::api_named(name).context("transforms.embeddings_api")?
                    }
                };
                let ranker = EmbedRanker::new(EmbedConfig {
                    api,
                    url: url.clone(),
                    model: model.clone(),
                    timeout: DEFAULT_EMBED_TIMEOUT,
                    cache_dir: pith_home()?.join("embeddings"),
                })
                .context("transforms.embeddings_url")?;
                stage.with_ranker(Arc::new(ranker))
            }
            (Some(_), None) => anyhow::bail!(
                "transforms.embeddings_url is set but transforms.embeddings_model is missing: \
                 name the embedding model (e.g. \"nomic-embed-text\")"
            ),
            (None, Some(_)) => anyhow::bail!(
                "transforms.embeddings_model is set but transforms.embeddings_url is missing: \
                 give the embedding server's base URL (e.g. \"http://127.0.0.1:11434\")"
            ),
        };
        pipeline = pipeline.with_stage(Box::new(stage));
    }
    Ok(pipeline)
}

/// Whether tool deferral is on: `PITH_DEFER_TOOLS`, else `transforms.defer_tools`, else on.
fn defer_on(config: &Config) -> anyhow::Result<bool> {
    Ok(env_flag("PITH_DEFER_TOOLS")?
        .or(config.transforms.defer_tools)
        .unwrap_or(true))
}

/// Whether pith hides the tool search blocks it caused and restores them later:
/// `PITH_TOOL_SEARCH_ROUND_TRIP`, else `transforms.tool_search_round_trip`, else on.
fn search_round_trip_on(config: &Config) -> anyhow::Result<bool> {
    Ok(env_flag("PITH_TOOL_SEARCH_ROUND_TRIP")?
        .or(config.transforms.tool_search_round_trip)
        .unwrap_or(true))
}

/// Whether pins are on: `PITH_PINS`, else `transforms.pins`, else on.
fn pins_on(config: &Config) -> anyhow::Result<bool> {
    Ok(env_flag("PITH_PINS")?
        .or(config.transforms.pins)
        .unwrap_or(true))
}

/// A whole-number environment variable; anything else is an error naming it.
fn env_usize(name: &str) -> anyhow::Result<Option<usize>> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) => v
            .trim()
            .parse()
            .map(Some)
            .with_context(|| format!("{name}={v:?} is not a whole number")),
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
