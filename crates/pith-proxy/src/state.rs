//! What every request of one proxy shares: its configuration, the upstream clients, and how
//! busy it is.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

// tokio's clock, so a test can run the idle rule on a paused one.
use tokio::time::Instant;

use crate::config::ProxyConfig;
use crate::upstream::HttpClient;

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
    /// Per session, the stages the provider refused a request of (off from then on).
    pub refused: crate::last_check::Refused,
    /// Tells the WebSocket relays where the shutdown is.
    pub relay_stop: tokio::sync::watch::Sender<Stop>,
    /// The memory compressed request bodies may take decoded, all at once.
    pub decode_budget: Arc<crate::request::budget::DecodeBudget>,
    /// Which changed requests the provider is asked to count, and its pause after a 429.
    pub counter: Arc<crate::provider_count::Counter>,
}

/// One relayed WebSocket, counted among the open ones ([`Activity::admit_relay`]) while it
/// lives.
pub(crate) struct RelayPlace(Arc<Activity>);

impl Drop for RelayPlace {
    fn drop(&mut self) {
        self.0.relay_ended();
    }
}

/// Where the proxy's shutdown is, as the WebSocket relays hear it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Stop {
    #[default]
    Running,
    /// Shutting down: a socket between turns closes now, an open answer may finish.
    Draining,
    /// The grace period is over: open answers are cut.
    Cut,
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
    /// Woken when the last relay ends.
    no_relays: tokio::sync::Notify,
}

impl Default for Activity {
    fn default() -> Activity {
        Activity::new()
    }
}

impl Activity {
    /// No connection open yet: idle since now.
    pub fn new() -> Activity {
        Activity {
            open: AtomicUsize::new(0),
            relays: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
            started: Instant::now(),
            no_relays: tokio::sync::Notify::new(),
        }
    }

    fn mark_idle_now(&self) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.idle_since_ms.store(now, Ordering::Relaxed);
    }

    pub(crate) fn set_open(&self, open: usize) {
        if open == 0 && self.open.load(Ordering::Relaxed) != 0 {
            self.mark_idle_now();
        }
        self.open.store(open, Ordering::Relaxed);
    }

    /// A place for one more relayed socket, when fewer than `max` are open: counted until the
    /// place is dropped.
    pub(crate) fn admit_relay(self: &Arc<Self>, max: usize) -> Option<RelayPlace> {
        self.relays
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| RelayPlace(Arc::clone(self)))
    }

    fn relay_ended(&self) {
        if self.relays.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.mark_idle_now();
            self.no_relays.notify_waiters();
        }
    }

    /// Until no relay is open, or `within` has passed: whether none is.
    pub(crate) async fn relays_ended(&self, within: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.no_relays.notified();
                tokio::pin!(notified);
                // Registered before the count is read, so an end in between is not missed.
                notified.as_mut().enable();
                if self.relays.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(within, wait).await.is_ok()
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
