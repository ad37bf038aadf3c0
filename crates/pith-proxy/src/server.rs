//! Listening, accepting and shutting down.
//!
//! [`Proxy::serve_until`] stops accepting when asked, lets open connections finish within the
//! grace period, and cuts what is left at its end (or at once on a second signal), before it
//! returns, so the rows of cut requests are queued while the ledger can still write them. The
//! listen backlog is [`LISTEN_BACKLOG`], not tokio's default, so a burst of connections is not
//! reset by the kernel; when a burst is over, the memory it freed goes back to the OS
//! (`pith_alloc`).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::ProxyConfig;
use crate::request;
use crate::state::{Activity, State};
use crate::upstream::{self, UpstreamError};

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

/// A bound proxy, ready to serve.
pub struct Proxy {
    listener: TcpListener,
    state: Arc<State>,
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
        let decode_budget = crate::request::budget::DecodeBudget::new(
            config
                .max_body
                .saturating_mul(crate::request::budget::BODIES_AT_THE_LIMIT),
        );
        let config_counts = config.provider_counts;
        let state = Arc::new(State {
            decode_budget,
            client: upstream::client(config.timeouts.pool_idle)?,
            ws_client: upstream::http1_client(config.timeouts.pool_idle)?,
            config,
            transform_failures: AtomicU64::new(0),
            shutting_down: Arc::new(AtomicBool::new(false)),
            activity: Arc::new(Activity::new()),
            refused: crate::last_check::Refused::default(),
            relay_stop: tokio::sync::watch::Sender::new(crate::state::Stop::Running),
            counter: Arc::new(crate::provider_count::Counter::new(config_counts)),
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
        self.serve_until(shutdown, std::future::pending(), grace)
            .await
    }

    /// [`Proxy::serve`], and cut what is still open as soon as `cut` resolves, even within
    /// the grace period (a second signal).
    pub async fn serve_until(
        self,
        shutdown: impl Future<Output = ()>,
        cut: impl Future<Output = ()>,
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
                    self.spawn_connection(stream, &http, &stopping, &mut connections);
                    burst.opened(connections.len());
                    self.state.activity.set_open(connections.len());
                }
                () = &mut shutdown => break,
            }
        }
        drop(self.listener);
        let _ = stop.send(true);
        wind_down(&self.state, connections, cut, grace).await;
        Ok(())
    }

    /// Serve the accepted `stream` on a task of `connections` until it closes, or until
    /// `stopping` says so and its request in flight is answered.
    fn spawn_connection(
        &self,
        stream: TcpStream,
        http: &http1::Builder,
        stopping: &watch::Receiver<bool>,
        connections: &mut JoinSet<()>,
    ) {
        let _ = stream.set_nodelay(true);
        let state = Arc::clone(&self.state);
        let service = service_fn(move |req| {
            let state = Arc::clone(&state);
            // An upgrade to the Responses WebSocket, or a request of the phases.
            async move {
                // The target first: everything after routes on its path.
                if let Some(answer) =
                    crate::target::check(&state, req.method(), req.uri(), req.headers())
                {
                    return Ok(answer);
                }
                if crate::websocket::is_upgrade(&req) {
                    crate::websocket::serve(state, req).await
                } else {
                    request::serve(state, req).await
                }
            }
        });
        // Upgrades: the Responses API's WebSocket (`websocket.rs`).
        let conn = http
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        let mut stopping = stopping.clone();
        // Turns counted for the answers' bodies (`gather`: a burst goes on in one write).
        connections.spawn(crate::gather::counting_turns(async move {
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
        }));
    }
}

/// With the listener closed and `connections` told to stop: give them (and the WebSocket
/// relays with an answer open) up to `grace` to finish, or until `cut` resolves, then cut
/// what is still open.
async fn wind_down(
    state: &State,
    mut connections: JoinSet<()>,
    cut: impl Future<Output = ()>,
    grace: Duration,
) {
    // A socket between turns closes now; one with an answer open may finish it.
    state.relay_stop.send_replace(crate::state::Stop::Draining);
    let drained = async {
        while connections.join_next().await.is_some() {
            state.activity.set_open(connections.len());
        }
        // Relays with an answer open finish it too (the others closed on `Draining`).
        state.activity.relays_ended(grace).await;
    };
    tokio::select! {
        done = tokio::time::timeout(grace, drained) => {
            if done.is_err() {
                tracing::info!("grace period over; closing remaining connections");
            }
        }
        () = cut => tracing::info!("asked to stop now; closing remaining connections"),
    }
    // Cut what is still open here, before returning, so that each cut request's ledger
    // row is queued while the caller can still write it.
    state.shutting_down.store(true, Ordering::SeqCst);
    connections.abort_all();
    while connections.join_next().await.is_some() {}
    state.relay_stop.send_replace(crate::state::Stop::Cut);
    if !state.activity.relays_ended(RELAYS_CUT_WITHIN).await {
        tracing::warn!("a WebSocket relay did not end within {RELAYS_CUT_WITHIN:?} of the cut");
    }
}

/// How long the cut relays get to record their open requests and close their sockets.
const RELAYS_CUT_WITHIN: Duration = Duration::from_secs(2);

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
