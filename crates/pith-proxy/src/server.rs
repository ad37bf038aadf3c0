//! Listening, accepting and shutting down.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use pith_transform::{PinsStage, Pipeline};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::ledger::LedgerSink;
use crate::own_pages::OwnPages;
use crate::request;
use crate::rewrite::ResponseRewrites;
use crate::upstream::{self, HttpClient, UpstreamError, UpstreamUrl};

/// Largest request body accepted (the Messages API's own limit is 32 MB).
pub const DEFAULT_MAX_BODY: usize = 64 << 20;

/// Why a proxy could not start, or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The upstream HTTP client could not be set up.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// Listening beyond loopback without an access token would let anyone who can reach the
    /// address spend the user's provider credits.
    #[error(
        "refusing to listen on {addr} without an access token: anyone who can reach it could use your provider credentials. Set [proxy] token in config or PITH_PROXY_TOKEN (clients then send it in the x-pith-token header), or listen on 127.0.0.1"
    )]
    NeedsToken {
        /// The non-loopback address asked for.
        addr: SocketAddr,
    },
    /// Accepting connections failed with an error that is not transient.
    #[error("accept failed: {0}")]
    Accept(std::io::Error),
}

/// How long the proxy waits, at each point where a peer can go silent. The defaults suit LLM
/// traffic: a long generation is not a hang, a silent socket is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From sending the request to the provider's response headers. A non-streamed answer
    /// arrives whole, so this bounds the longest generation: 10 minutes, the official SDKs'
    /// own default request timeout.
    pub upstream_headers: Duration,
    /// Longest silence between two chunks of the provider's body. Streams carry events (and
    /// Anthropic's pings) while the model works; 5 minutes of nothing is a dead connection.
    pub upstream_idle: Duration,
    /// Longest time a client may take to send its request headers (slow clients that never
    /// finish hold a connection each): 30 s.
    pub client_headers: Duration,
    /// Longest silence between two chunks of a client's request body: 60 s.
    pub client_idle: Duration,
    /// How long an idle upstream connection stays pooled for reuse: 90 s.
    pub pool_idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            upstream_headers: Duration::from_secs(600),
            upstream_idle: Duration::from_secs(300),
            client_headers: Duration::from_secs(30),
            client_idle: Duration::from_secs(60),
            pool_idle: Duration::from_secs(90),
        }
    }
}

/// Everything a proxy needs; the binary builds it from config and flags.
pub struct ProxyConfig {
    /// Address to listen on, e.g. `127.0.0.1:8787` (port 0 picks a free one).
    pub listen: SocketAddr,
    /// Where Anthropic Messages requests go, and pass-through requests carrying Anthropic's
    /// headers (`anthropic-version`, `x-api-key`).
    pub anthropic: UpstreamUrl,
    /// Where Chat Completions and Responses requests go, and every other pass-through request.
    pub openai: UpstreamUrl,
    /// Request transforms.
    pub pipeline: Pipeline,
    /// pith's own pages (dashboard, its API, `/metrics`); `None`: those paths go upstream.
    pub own_pages: Option<Arc<dyn OwnPages>>,
    /// Answers a turn of nothing but pin commands itself, without the provider (the pins
    /// stage in `pipeline` moves the pins on every other request). `None`: every turn goes up.
    pub pins: Option<PinsStage>,
    /// Response transforms: chooses a rewriter for a streamed answer (none by default).
    pub rewrites: Option<Arc<dyn ResponseRewrites>>,
    /// Where each request's record goes; `None` keeps no ledger.
    pub ledger: Option<LedgerSink>,
    /// Largest client request body accepted, in bytes (a larger one is answered 413);
    /// usually [`DEFAULT_MAX_BODY`].
    pub max_body: usize,
    /// Where the proxy stops waiting.
    pub timeouts: Timeouts,
    /// When set, every request must carry it in the [`TOKEN_HEADER`] header (the header is
    /// not forwarded). Required to listen on anything but loopback.
    pub token: Option<String>,
    /// Who each request belongs to: the proxy's own account, or, with keys (a gateway), the
    /// account of the key in its [`crate::ACCOUNT_KEY_HEADER`] header (required then).
    pub accounts: crate::Accounts,
}

/// The request header that carries the proxy's access token.
pub const TOKEN_HEADER: &str = "x-pith-token";

/// Shared by every request of one proxy: its configuration and what it set up from it.
pub(crate) struct State {
    pub config: ProxyConfig,
    pub client: HttpClient,
    /// Transform stages that failed (and were skipped) since start.
    pub transform_failures: AtomicU64,
    /// Set when the grace period is over and open requests are being cut: their ledger rows
    /// say `shutdown`, not `client_closed`.
    pub shutting_down: Arc<AtomicBool>,
    /// HTTP/1.1 only, for WebSocket upgrades (which HTTP/2 has no form of here).
    pub ws_client: HttpClient,
    /// Open connections and WebSocket relays.
    pub activity: Arc<Activity>,
}

/// A bound proxy, ready to serve.
pub struct Proxy {
    listener: TcpListener,
    state: Arc<State>,
}

/// How busy a proxy is: its open client connections, and since when none has been open. A
/// proxy that stops itself when idle (`pith run`'s shared one) reads it; an open connection
/// (a client between two turns keeps one) always counts as busy.
#[derive(Debug)]
pub struct Activity {
    open: AtomicUsize,
    /// WebSocket sessions being relayed (their connection left the accept loop's set).
    relays: AtomicUsize,
    /// Milliseconds after `started` when the last connection closed.
    idle_since_ms: AtomicU64,
    started: Instant,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            open: AtomicUsize::new(0),
            relays: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    fn mark_idle_now(&self) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.idle_since_ms.store(now, Ordering::Relaxed);
    }

    fn set_open(&self, open: usize) {
        if open == 0 && self.open.load(Ordering::Relaxed) != 0 {
            self.mark_idle_now();
        }
        self.open.store(open, Ordering::Relaxed);
    }

    pub(crate) fn relay_started(&self) {
        self.relays.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn relay_ended(&self) {
        if self.relays.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.mark_idle_now();
        }
    }

    /// How long no connection has been open (since start, when none ever was); `None` while
    /// one is (a WebSocket being relayed included).
    pub fn idle_for(&self) -> Option<Duration> {
        if self.open.load(Ordering::Relaxed) != 0 || self.relays.load(Ordering::Relaxed) != 0 {
            return None;
        }
        let since = Duration::from_millis(self.idle_since_ms.load(Ordering::Relaxed));
        Some(self.started.elapsed().saturating_sub(since))
    }
}

/// Connections the kernel may hold for pith before it accepts them. A burst of agents (or
/// a gateway's clients) opening 2,000 connections at once must all reach pith: tokio's default
/// of 1,024 let the kernel reset the rest. 4,096 is Linux's default `net.core.somaxconn`
/// since 5.4, which clamps whatever is asked.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Bind `addr` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`, as tokio's `bind` sets it, so a
/// restarted proxy can take its port back at once).
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

impl Proxy {
    /// Bind the listen address and set up the upstream client; [`Proxy::serve`] starts serving.
    pub async fn bind(config: ProxyConfig) -> Result<Proxy, ProxyError> {
        if !config.listen.ip().is_loopback() && config.token.as_deref().is_none_or(str::is_empty) {
            return Err(ProxyError::NeedsToken {
                addr: config.listen,
            });
        }
        let listener = listen(config.listen).map_err(|source| ProxyError::Bind {
            addr: config.listen,
            source,
        })?;
        let state = Arc::new(State {
            client: upstream::client(config.timeouts.pool_idle)?,
            ws_client: upstream::http1_client(config.timeouts.pool_idle)?,
            config,
            transform_failures: AtomicU64::new(0),
            shutting_down: Arc::new(AtomicBool::new(false)),
            activity: Arc::new(Activity::new()),
        });
        Ok(Proxy { listener, state })
    }

    /// The address bound (the port chosen, when `listen` asked for port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The proxy's open connections, for a caller that stops it when idle.
    pub fn activity(&self) -> Arc<Activity> {
        Arc::clone(&self.state.activity)
    }

    /// Transform stages that failed (and were skipped) since start.
    pub fn transform_failures(&self) -> u64 {
        self.state.transform_failures.load(Ordering::Relaxed)
    }

    /// Serve until `shutdown` resolves, then stop accepting and give open connections up to
    /// `grace` to finish.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()>,
        grace: Duration,
    ) -> Result<(), ProxyError> {
        // Tells every connection to finish its request in flight and close (hyper-util's
        // GracefulShutdown does not take a connection with upgrades).
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let mut http = http1::Builder::new();
        http.keep_alive(true)
            .timer(TokioTimer::new())
            .header_read_timeout(self.state.config.timeouts.client_headers);
        let mut connections = JoinSet::new();
        let mut burst = Burst::default();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                // Reap finished connections so the set holds only open ones.
                Some(_) = connections.join_next(), if !connections.is_empty() => {
                    self.state.activity.set_open(connections.len());
                    if burst.is_over(connections.len()) {
                        // Off the event loop: the call walks and locks the allocator's arenas.
                        tokio::task::spawn_blocking(pith_alloc::release_free_memory);
                    }
                }
                accepted = self.listener.accept() => {
                    let (stream, _peer) = match accepted {
                        Ok(a) => a,
                        Err(e) if is_transient(&e) => {
                            tracing::warn!(error = %e, "accept failed; continuing");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                        Err(e) => return Err(ProxyError::Accept(e)),
                    };
                    let _ = stream.set_nodelay(true);
                    let state = Arc::clone(&self.state);
                    let service = service_fn(move |req| request::serve(Arc::clone(&state), req));
                    // Upgrades: the Responses API's WebSocket (`websocket.rs`).
                    let conn = http.serve_connection(TokioIo::new(stream), service).with_upgrades();
                    let mut stopping = stopping.clone();
                    connections.spawn(async move {
                        let mut conn = std::pin::pin!(conn);
                        let ended = tokio::select! {
                            ended = conn.as_mut() => ended,
                            Ok(()) = stopping.changed() => {
                                conn.as_mut().graceful_shutdown();
                                conn.await
                            }
                        };
                        if let Err(e) = ended {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                    });
                    burst.opened(connections.len());
                    self.state.activity.set_open(connections.len());
                }
                () = &mut shutdown => break,
            }
        }
        drop(self.listener);
        let _ = stop.send(true);
        let drained = async {
            while connections.join_next().await.is_some() {
                self.state.activity.set_open(connections.len());
            }
        };
        if tokio::time::timeout(grace, drained).await.is_err() {
            tracing::info!("grace period over; closing remaining connections");
        }
        // Cut what is still open here, before returning, so that each cut request's ledger
        // row is queued while the caller can still write it.
        self.state.shutting_down.store(true, Ordering::SeqCst);
        connections.abort_all();
        while connections.join_next().await.is_some() {}
        Ok(())
    }
}

/// Connections open at once, to tell when a burst is over: then the memory it freed is handed
/// back to the OS (the allocator would keep it resident; measured in BENCHMARKS.md).
#[derive(Default)]
struct Burst {
    /// Most connections open at once since memory was last handed back.
    peak: usize,
}

/// A burst worth handing memory back after: this many connections open at once (an agent
/// keeps a handful).
const BURST: usize = 64;

impl Burst {
    fn opened(&mut self, open: usize) {
        self.peak = self.peak.max(open);
    }

    /// Whether `open` connections, after a peak of a burst, mean the burst is over (a quarter
    /// of the peak or fewer); the next burst is measured from here.
    fn is_over(&mut self, open: usize) -> bool {
        let over = self.peak >= BURST && open * 4 <= self.peak;
        if over {
            self.peak = open;
        }
        over
    }
}

/// Errors after which accepting can go on (a client reset, too many open files for a moment).
fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    ) || e.raw_os_error() == Some(24)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_over_when_a_quarter_of_its_peak_is_left() {
        let mut b = Burst::default();
        // An agent's few connections never count as a burst.
        for open in [1, 2, 3, 2, 1, 0] {
            b.opened(open);
            assert!(!b.is_over(open));
        }
        for open in 1..=2000 {
            b.opened(open);
        }
        assert!(!b.is_over(1999));
        assert!(!b.is_over(501));
        assert!(b.is_over(500));
        // Measured afresh from there: the 500 left closing is worth handing back too, and
        // then nothing is left to hand back.
        assert!(!b.is_over(200));
        assert!(b.is_over(0));
        assert!(!b.is_over(0));
    }
}
