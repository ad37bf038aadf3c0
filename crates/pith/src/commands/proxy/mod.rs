//! `pith proxy`: run the proxy in the foreground until Ctrl-C or SIGTERM.

mod banner;
mod pipeline;
mod plan;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context;
use pith_ledger::{HistorySink, LedgerSink};
use pith_proxy::own_pages::OwnPages;
use pith_proxy::rewrite::ResponseRewrites;
use pith_proxy::search_trip::SearchTrip;
use pith_proxy::{Proxy, ProxyConfig};
use pith_store::history::History;
use pith_store::ledger::Ledger;
use pith_store::postgres::ship::Shipper;
use pith_store::search_blocks::{Limits, SearchBlocks};
use pith_transform::PinsStage;

pub use plan::listen_addr;

use crate::config::{Config, pith_home};
use crate::dashboard::{Dashboard, Upstreams};
use pith_ledger::report::prices::Prices;
use plan::Plan;

#[derive(Debug, clap::Args)]
#[command(after_help = "Point your agent at the proxy:
  Claude Code:  ANTHROPIC_BASE_URL=http://127.0.0.1:8787 claude
  OpenCode:     provider.<id>.options.baseURL = \"http://127.0.0.1:8787/v1\" in opencode.json
  Codex:        [model_providers.pith] base_url = \"http://127.0.0.1:8787/v1\", wire_api = \"responses\"

Tool deferral is on by default (PITH_DEFER_TOOLS=0 turns it off) for tool lists with at least
16,000 characters of deferrable definitions (PITH_MIN_DEFERRED_CHARS); every rewrite is named in
the pith-transforms response header, and `pith stats` shows what was deferred and why other
requests were left alone. Logs go to stderr (PITH_LOG=debug).

Tool output excerpts are off by default (PITH_TRIM_OUTPUTS=1 or [proxy] trim_outputs = true; all
three APIs and Codex's WebSocket): a tool output of at least trim_outputs_min_chars (4,000)
reaches the provider whole in its own turn and from the next as a ranked excerpt that says so;
the history keeps it whole for `pith mcp`'s tool_output; a repeated call is answered whole;
trim_outputs_except = [\"Read\"] keeps a tool's outputs whole.

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
    /// Address to listen on [default: PITH_LISTEN, else proxy.listen, else 127.0.0.1:8787].
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,

    /// Stop after this long with no connection open and no client of `pith run` left (e.g.
    /// `30m`) [default: never].
    #[arg(long, value_name = "DURATION")]
    idle_stop: Option<String>,

    /// Start the proxy in the background (its own process group, stderr appended to
    /// $PITH_HOME/logs/proxy.log) and return at once (how `pith run` starts its shared proxy).
    #[arg(long)]
    detach: bool,

    /// Anthropic API origin [default: PITH_ANTHROPIC_UPSTREAM, else upstreams.anthropic, else
    /// https://api.anthropic.com].
    #[arg(long, value_name = "URL")]
    anthropic_upstream: Option<String>,

    /// OpenAI API origin [default: PITH_OPENAI_UPSTREAM, else upstreams.openai, else
    /// https://api.openai.com].
    #[arg(long, value_name = "URL")]
    openai_upstream: Option<String>,

    /// ChatGPT backend origin, for Codex signed in with ChatGPT (its requests under
    /// /backend-api/codex) [default: PITH_CHATGPT_UPSTREAM, else upstreams.chatgpt, else
    /// https://chatgpt.com].
    #[arg(long, value_name = "URL")]
    chatgpt_upstream: Option<String>,

    /// Ledger database [default: $PITH_HOME/ledger.db; config: ledger.path].
    #[arg(long, value_name = "FILE")]
    ledger: Option<PathBuf>,

    /// Do not record requests in the ledger.
    #[arg(long, conflicts_with = "ledger")]
    no_ledger: bool,
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

/// Whether a proxy would start with `config` and this process's environment: every setting it
/// resolves (the config's and the `PITH_*` variables'), nothing opened or bound. `pith doctor`
/// and `pith run` check it first, so a setting the proxy would refuse is named where the user
/// looks, not only in the background proxy's log.
pub fn check_settings(config: &Config) -> anyhow::Result<()> {
    #[derive(clap::Parser)]
    struct Defaults {
        #[command(flatten)]
        args: Args,
    }
    let defaults = <Defaults as clap::Parser>::try_parse_from(["pith"])?;
    Plan::resolve(&defaults.args, config).map(drop)
}

/// `pith proxy` in three phases: resolve every setting ([`Plan`]), open what the proxy writes
/// to ([`Started`]), serve until a signal or the idle stop; then stop each part in turn.
pub fn run(args: Args, config: &Config) -> anyhow::Result<()> {
    if args.detach {
        return detach();
    }
    crate::logging::init();
    raise_descriptor_limit();
    // Bodies of megabytes one after another: the allocator keeps their pages between requests.
    pith_alloc::steady_thresholds();
    let plan = Plan::resolve(&args, config)?;
    let started = Started::open(&plan)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = runtime.block_on(serve(&plan, &started, config));
    // Records whose spool appends still wait on the runtime are appended as it shuts down
    // (`LedgerSink::submit`), before the writers' last drain.
    runtime.shutdown_timeout(Duration::from_secs(5));
    served?;
    started.stop();
    Ok(())
}

/// What a running proxy writes to, opened before it listens.
struct Started {
    ledger: Option<LedgerSink>,
    /// Why the history is not recorded after all, for the startup lines.
    history_error: Option<String>,
    shipper: Option<Shipper>,
    /// Search blocks hidden from answers wait here for the session's next requests.
    searches: Option<SearchBlocks>,
}

impl Started {
    fn open(plan: &Plan) -> anyhow::Result<Started> {
        let mut history_error = None;
        let ledger = match (&plan.ledger, &plan.spool) {
            (Some(path), Some(spool)) => {
                let ledger = Ledger::open(path)?;
                // Fail open: a history that cannot be opened leaves the proxy running without it.
                let sink = match plan.history_path().map(|p| (p, History::open(p))) {
                    Some((_, Ok(store))) => {
                        let sink = HistorySink::new(store, plan.history.agent_types.clone());
                        // What the outputs stage shortens is kept whole for `pith mcp`.
                        Some(match &plan.trim_outputs {
                            Some(options) => sink.keeping_outputs_from(options.min_chars),
                            None => sink,
                        })
                    }
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
                // Named now when the port is known (it is unless the port is 0); else once the
                // proxy listens.
                let name = (plan.listen.port() != 0).then(|| plan.instance_name(plan.listen));
                Some(LedgerSink::start_with_history(
                    ledger,
                    spool,
                    sink,
                    name.as_deref(),
                    pith_store::clock::Clock::system(),
                )?)
            }
            _ => None,
        };
        // Team mode: the local ledger is the queue; a thread of its own sends its rows on, so
        // the database being down or slow never reaches a request. The history ships with it
        // when it is being recorded.
        let shipped_history = history_error
            .is_none()
            .then(|| plan.history_path().map(PathBuf::from))
            .flatten();
        let shipper = match (&plan.store, &plan.ledger) {
            (Some(url), Some(path)) => Some(
                Shipper::start(
                    path.clone(),
                    shipped_history,
                    url.clone(),
                    plan.account.clone(),
                )
                .context("cannot start the team ledger's shipper thread")?,
            ),
            _ => None,
        };
        let searches = plan.searches.as_ref().map(|path| {
            SearchBlocks::open(path, Limits::default()).unwrap_or_else(|e| {
                // Fail open: the round trip still works until pith stops.
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "cannot open {}; hidden tool searches are kept in memory only",
                    path.display()
                );
                SearchBlocks::in_memory(Limits::default())
            })
        });
        Ok(Started {
            ledger,
            history_error,
            shipper,
            searches,
        })
    }

    /// Write out what waits, then say what was kept.
    fn stop(self) {
        if let Some(searches) = &self.searches {
            searches.flush();
        }
        if let Some(sink) = self.ledger {
            sink.shutdown(Duration::from_secs(5));
            let s = ledger_stats_line(&sink);
            eprintln!("pith proxy stopped; {s}");
        }
        if let Some(shipper) = self.shipper {
            let s = shipper.stop();
            eprintln!(
                "team ledger: {} rows shipped, {} waiting in the local ledger for the next start",
                s.shipped, s.backlog
            );
        }
    }
}

/// Bind, say what runs, and serve until Ctrl-C, SIGTERM or the idle stop. One event-loop
/// thread: an agent sends a few requests a second, and on one thread every streamed chunk goes
/// from the upstream connection to the client without a cross-thread wake-up (measured in
/// BENCHMARKS.md). Blocking stages run on tokio's blocking pool.
async fn serve(plan: &Plan, started: &Started, config: &Config) -> anyhow::Result<()> {
    share_searches(plan, started)?;
    let pipeline = pipeline::build(plan, started.searches.as_ref())?;
    let draining = Arc::new(AtomicBool::new(false));
    // Named once the port is bound (the default name has it).
    let instance = Arc::new(std::sync::OnceLock::new());
    let stages = pipeline.stage_names();
    let dashboard = own_pages(plan, started, config)
        .with_instance(Arc::clone(&instance), Arc::clone(&draining));
    let proxy = Proxy::bind(ProxyConfig {
        listen: plan.listen,
        anthropic: plan.anthropic.clone(),
        openai: plan.openai.clone(),
        chatgpt: plan.chatgpt.clone(),
        pipeline,
        pins: plan.pins.then(PinsStage::new),
        own_pages: Some(Arc::new(dashboard) as Arc<dyn OwnPages>),
        ledger: started.ledger.clone(),
        rewrites: started
            .searches
            .clone()
            .map(|s| Arc::new(SearchTrip::new(s)) as Arc<dyn ResponseRewrites>),
        searches: started.searches.clone().filter(SearchBlocks::is_shared),
        max_body: pith_proxy::DEFAULT_MAX_BODY,
        max_sockets: pith_proxy::max_sockets(descriptor_limit()),
        timeouts: plan.timeouts,
        token: plan.token.clone(),
        accounts: pith_proxy::Accounts {
            own: plan.account.clone(),
            keys: plan.keys.clone(),
        },
        provider_counts: plan.provider_counts,
    })
    .await?;
    let addr = proxy.local_addr()?;
    let name = plan.instance_name(addr);
    if let Some(sink) = &started.ledger {
        sink.name_instance(&name);
    }
    banner::print(plan, started, addr, &name, &stages);
    let _ = instance.set(name);
    let activity = proxy.activity();
    let clients = crate::background::clients_lock_path(&pith_home()?);
    // Held from the idle decision until the process ends: a `pith run` starting meanwhile
    // waits for it, then finds no proxy and starts one.
    let mut stop_lock = None;
    let idle = async {
        match plan.idle_stop {
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
    let signals = Signals::listen();
    let stop = async {
        tokio::select! {
            () = signals.received(1) => drain(plan, &draining, &signals).await,
            () = idle => {}
        }
        if !plan.grace.is_zero() {
            eprintln!(
                "pith proxy stopping: no new connections; open requests get {} to finish \
                 (a second Ctrl-C or SIGTERM cuts them now)",
                crate::duration::format(plan.grace)
            );
        }
    };
    proxy
        .serve_until(stop, signals.received(2), plan.grace)
        .await?;
    Ok(())
}

/// Team mode: the round trip's blocks are shared, so any instance behind a load balancer can
/// serve a session's next request (on the proxy's runtime: the store is read and written on
/// the request path, bounded by `[store] timeout`).
fn share_searches(plan: &Plan, started: &Started) -> anyhow::Result<()> {
    if let (Some(searches), Some(url)) = (&started.searches, &plan.store) {
        let store = pith_store::search_blocks::postgres::TeamSearchBlocks::new(url)
            .context("cannot set up the team store for tool search blocks")?;
        searches.share_with(store, plan.store_timeout);
    }
    Ok(())
}

/// pith's own pages over what this proxy writes (the team's, in team mode).
fn own_pages(plan: &Plan, started: &Started, config: &Config) -> Dashboard {
    let dashboard = Dashboard::new(
        plan.ledger.clone(),
        Prices::new(&config.prices),
        Upstreams {
            anthropic: plan.anthropic.to_string(),
            openai: plan.openai.to_string(),
            chatgpt: plan.chatgpt.to_string(),
        },
    )
    .with_own_account(plan.account.clone())
    .with_history(
        plan.history_path().map(PathBuf::from),
        !plan.keys.is_empty(),
    )
    .with_sink(started.ledger.clone());
    match (&plan.store, &plan.team_replica) {
        (Some(url), Some(replica)) => dashboard.with_team(url.clone(), replica.clone()),
        _ => dashboard,
    }
}

/// The drain: `/pith/health` answers 503 for `plan.drain` while requests are still served, so
/// a load balancer's health check takes this instance out before it stops accepting (a second
/// signal ends it early).
async fn drain(plan: &Plan, draining: &AtomicBool, signals: &Signals) {
    draining.store(true, std::sync::atomic::Ordering::SeqCst);
    if plan.drain.is_zero() {
        return;
    }
    eprintln!(
        "pith proxy draining: /pith/health answers 503 for {} while requests are still served",
        crate::duration::format(plan.drain)
    );
    tokio::select! {
        () = tokio::time::sleep(plan.drain) => {}
        () = signals.received(2) => {}
    }
}

/// Raise the soft limit on open descriptors to the hard one: every connection, upstream
/// connection and live view holds one, and a default soft limit of 1,024 is reached by a
/// burst of agents long before the machine's own limit.
fn raise_descriptor_limit() {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        // No hard limit: a generous one (the kernel's `nr_open` refuses more).
        let want = limit.maximum.unwrap_or(1 << 20);
        if limit.current.is_some_and(|current| current < want) {
            let raised = Rlimit {
                current: Some(want),
                maximum: limit.maximum,
            };
            // macOS refuses more than its per-process maximum even under an unlimited hard
            // limit: then the most it commonly takes.
            let done = setrlimit(Resource::Nofile, raised).or_else(|_| {
                setrlimit(
                    Resource::Nofile,
                    Rlimit {
                        current: Some(want.min(10_240)),
                        maximum: limit.maximum,
                    },
                )
            });
            match done {
                Ok(()) => {
                    tracing::debug!(from = limit.current, to = want, "descriptor limit raised")
                }
                Err(e) => tracing::debug!(error = %e, "descriptor limit left as it is"),
            }
        }
    }
}

/// The soft limit on open descriptors (after [`raise_descriptor_limit`]); unlimited reads as
/// `u64::MAX`.
fn descriptor_limit() -> u64 {
    #[cfg(unix)]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX)
    }
    #[cfg(not(unix))]
    {
        u64::MAX
    }
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

fn ledger_stats_line(sink: &LedgerSink) -> String {
    let s = sink.stats();
    let waiting = match s.backlog {
        0 => String::new(),
        n => format!(", {n} left in the spool for the next start"),
    };
    format!(
        "ledger: {} rows written, {} lost, {} damaged in the spool, {} write errors, {} rows \
         kept without their derivations{waiting}; history: {} write errors",
        s.written, s.lost, s.damaged, s.write_errors, s.derivation_errors, s.history_errors
    )
}

/// Ctrl-C and SIGTERM, counted from start: the first stops the proxy (drain, then the grace
/// period), the second cuts what is still open.
struct Signals {
    count: tokio::sync::watch::Receiver<u32>,
}

impl Signals {
    /// Listen from now on (a task counts each signal).
    fn listen() -> Signals {
        let (tx, count) = tokio::sync::watch::channel(0u32);
        tokio::spawn(async move {
            #[cfg(unix)]
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            loop {
                #[cfg(unix)]
                let term_recv = async {
                    match term.as_mut() {
                        Some(t) => {
                            t.recv().await;
                        }
                        None => std::future::pending().await,
                    }
                };
                #[cfg(not(unix))]
                let term_recv = std::future::pending::<()>();
                // Without a Ctrl-C handler, SIGTERM alone.
                let ctrl_c = async {
                    if tokio::signal::ctrl_c().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                };
                tokio::select! {
                    () = ctrl_c => {}
                    () = term_recv => {}
                }
                tx.send_modify(|n| *n += 1);
            }
        });
        Signals { count }
    }

    /// Resolves once `n` signals have come.
    async fn received(&self, n: u32) {
        let mut count = self.count.clone();
        let _ = count.wait_for(|got| *got >= n).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The idle rule on tokio's paused clock: no wall time passes, the clock jumps to each
    /// timer as soon as nothing else can run.
    #[tokio::test(start_paused = true)]
    async fn an_idle_proxy_stops_only_once_no_client_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let clients = dir.path().join("clients.lock");
        let activity = pith_proxy::Activity::new();
        let idle = Duration::from_secs(30 * 60);
        let client = crate::background::open_private(&clients, false).unwrap();
        assert!(
            crate::background::lock_until(
                &client,
                true,
                std::time::Instant::now() + Duration::from_secs(1)
            )
            .unwrap()
        );
        // Idle ten times over, a `pith run` client still holding the lock: still serving.
        let held = tokio::time::timeout(idle * 10, idle_stopped(&activity, idle, &clients)).await;
        assert!(held.is_err(), "stopped under a running client");
        drop(client);
        let start = tokio::time::Instant::now();
        let _stop_lock = idle_stopped(&activity, idle, &clients).await;
        // Idle long ago, so it stops at the first check after the client left.
        assert!(
            start.elapsed() <= (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5))
        );
    }
}
