//! pith's own pages on the proxy's address: the dashboard (`/`, one page embedded in the
//! binary, no network), its JSON API under `/pith/api/`, `/pith/health` and `/metrics`. The
//! numbers come from the same report as `pith stats --json`, so they agree.
//!
//! The report keeps codes (stage names, reasons, outcomes, rate bands) as its JSON keys; the
//! page and `pith stats` say them in words, carried in the report's `words` and gathered from
//! where each code is defined (`pith_transform::words`, `pith_proxy::words`, `Band::words`,
//! `RequestOutcome::describe`; a test checks that every reason a stage defines has words).
//! The report sums per client as well as per model, savings included; requests without a
//! session are grouped per client that sent them (`Ledger::sessionless_by_client`).
//!
//! Every read goes through the proxy's shared `ledger::Readers` (closing a descriptor of the
//! ledger inside the process that writes it would drop the writer's locks), and at most
//! [`MAX_VIEWERS`] live streams run at once, each freeing its place when its viewer goes. The
//! page fits a phone: wide tables scroll inside their own box, and below 700 px the chart's
//! labels give way to a line of text, so no text is drawn under 9 px.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use pith_ledger::LedgerSink;
use pith_proxy::own_pages::{OwnBody, OwnPage, OwnPages};
use pith_store::ledger::{Filter, Readers};
use pith_store::postgres::StoreUrl;
use serde_json::json;

use crate::team::{TeamInfo, TeamReport};
use pith_ledger::report;
use pith_ledger::report::prices::Prices;

mod session;
mod timeline;

const PAGE: &str = include_str!("page.html");

/// The pages, over the ledger the proxy writes (or, in team mode, the team's).
pub struct Dashboard {
    ledger: Option<PathBuf>,
    /// The history the proxy records, for a request's turn text (`None`: it records none).
    history: Option<PathBuf>,
    /// Whether the proxy serves several accounts by key (no turn text on the pages then).
    gateway: bool,
    prices: Prices,
    upstreams: Upstreams,
    team: Option<Team>,
    /// The proxy's own account: the account of rows written before accounts were kept.
    own_account: String,
    /// Read connections opened once and kept for the proxy's life: a page view never opens
    /// and closes the ledger file inside the process that writes it (see `Readers`).
    readers: Arc<Readers>,
    /// Live streams open now (`/pith/api/events`), each a thread: at most [`MAX_VIEWERS`].
    viewers: Arc<AtomicUsize>,
    /// The proxy's ledger writers, for `/pith/api/flush`.
    sink: Option<LedgerSink>,
    /// This instance's name, as `/pith/health` tells it (set once the proxy listens).
    instance: Arc<std::sync::OnceLock<String>>,
    /// Set when the proxy is stopping: `/pith/health` answers 503 so a load balancer takes
    /// this instance out while it still serves what comes.
    draining: Arc<AtomicBool>,
}

/// How long `/pith/api/flush` waits unless asked (`timeout_ms`), and at most.
const FLUSH_WAIT: Duration = Duration::from_secs(10);
const FLUSH_WAIT_MAX: Duration = Duration::from_secs(60);

/// Live streams open at once. Each holds a thread; past this a new one is refused with a 503
/// saying so, so that viewers left open cannot starve the proxy of threads or descriptors.
pub const MAX_VIEWERS: usize = 16;

/// Where the proxy sends each provider's traffic, as `/pith/health` tells it (`pith run` runs
/// a client through a proxy only when it goes where the client would have gone).
#[derive(Debug, Clone)]
pub struct Upstreams {
    pub anthropic: String,
    pub openai: String,
    pub chatgpt: String,
}

/// Team mode: the pages read the replica, synced at most every [`TEAM_SYNC_EVERY`].
struct Team {
    url: StoreUrl,
    replica: PathBuf,
    last: Mutex<Option<(Instant, TeamInfo)>>,
}

/// How stale the team view may get: the page polls every few seconds, and several viewers
/// share one sync.
const TEAM_SYNC_EVERY: Duration = Duration::from_secs(2);

impl Dashboard {
    /// Pages over the ledger at `ledger` (`None`: the proxy keeps none).
    pub fn new(ledger: Option<PathBuf>, prices: Prices, upstreams: Upstreams) -> Dashboard {
        Dashboard {
            ledger,
            history: None,
            gateway: false,
            prices,
            upstreams,
            team: None,
            own_account: pith_history::LOCAL_ACCOUNT.to_owned(),
            readers: Arc::new(Readers::new()),
            viewers: Arc::new(AtomicUsize::new(0)),
            sink: None,
            instance: Arc::new(std::sync::OnceLock::new()),
            draining: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The ledger's writers, which `/pith/api/flush` waits for.
    pub fn with_sink(mut self, sink: Option<LedgerSink>) -> Dashboard {
        self.sink = sink;
        self
    }

    /// Name the instance in `/pith/health` (once `instance` is set), which answers 503 once
    /// `draining` is set.
    pub fn with_instance(
        mut self,
        instance: Arc<std::sync::OnceLock<String>>,
        draining: Arc<AtomicBool>,
    ) -> Dashboard {
        self.instance = instance;
        self.draining = draining;
        self
    }

    /// `/pith/api/flush`: answers once nothing waits to be written to the ledger (every
    /// request answered before is a row, with its history), or after `timeout_ms` (default
    /// 10 s, at most 60 s), saying which. A script reading the ledger right after a burst of
    /// requests asks this first.
    fn flush(&self, query: &str) -> OwnPage {
        let Some(sink) = &self.sink else {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "this proxy keeps no ledger (started with --no-ledger)".into(),
            );
        };
        let wait = match query_value(query, "timeout_ms").map(|t| t.parse::<u64>()) {
            None => FLUSH_WAIT,
            Some(Ok(ms)) => Duration::from_millis(ms).min(FLUSH_WAIT_MAX),
            Some(Err(_)) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "timeout_ms must be a whole number of milliseconds".into(),
                );
            }
        };
        let flushed = sink.flush(wait);
        json_page(
            StatusCode::OK,
            &json!({"flushed": flushed, "waiting": sink.stats().backlog}),
        )
    }

    /// Read a request's turn text from the history at `path` (what the proxy records); a
    /// `gateway` (account keys) shows none, since every account's client holds the pages' token.
    pub fn with_history(mut self, path: Option<PathBuf>, gateway: bool) -> Dashboard {
        self.history = path;
        self.gateway = gateway;
        self
    }

    /// Rows that name no account (written before accounts were kept) are `account`'s.
    pub fn with_own_account(mut self, account: String) -> Dashboard {
        self.own_account = account;
        self
    }

    /// Show the team ledger at `url` instead, through the replica at `replica`.
    pub fn with_team(mut self, url: StoreUrl, replica: PathBuf) -> Dashboard {
        self.team = Some(Team {
            url,
            replica,
            last: Mutex::new(None),
        });
        self
    }

    /// The ledger the pages read, and the team's state in team mode.
    fn source(&self) -> (Option<PathBuf>, Option<TeamInfo>) {
        let Some(team) = &self.team else {
            return (self.ledger.clone(), None);
        };
        let mut last = team.last.lock().unwrap_or_else(PoisonError::into_inner);
        let fresh = last
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < TEAM_SYNC_EVERY);
        if !fresh {
            let info = crate::team::sync(&team.url, &team.replica, self.ledger.as_deref(), None);
            *last = Some((Instant::now(), info));
        }
        (
            Some(team.replica.clone()),
            last.as_ref().map(|(_, info)| info.clone()),
        )
    }
}

/// `value` as a JSON page, serialized straight to text (through a `serde_json::Value` tree a
/// 1.7 MB session page took 25 ms instead of 3.5).
fn json_page<T: serde::Serialize + ?Sized>(status: StatusCode, value: &T) -> OwnPage {
    match serde_json::to_string(value) {
        Ok(text) => OwnPage {
            status,
            content_type: "application/json",
            body: Bytes::from(text).into(),
        },
        Err(e) => OwnPage {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            content_type: "application/json",
            body: Bytes::from(json!({"error": e.to_string()}).to_string()).into(),
        },
    }
}

fn error(status: StatusCode, message: String) -> OwnPage {
    json_page(status, &json!({"error": message}))
}

/// `key=value&...`, values percent-decoded.
fn query_value(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| percent_decode(v))
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn filter_of(query: &str) -> Result<Filter, String> {
    let since_ms = match query_value(query, "since") {
        None => None,
        Some(text) => {
            let age = crate::duration::parse(&text).map_err(|e| format!("since={text}: {e}"))?;
            let now = pith_store::clock::now_ms();
            Some(now.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX)))
        }
    };
    Ok(Filter {
        since_ms,
        session: query_value(query, "session").filter(|s| !s.is_empty()),
    })
}

/// The page's `Content-Security-Policy`: its one inline script by its SHA-256, styles inline,
/// requests to this origin only, no frames, forms, plugins or other origins. A value that
/// reached the page unescaped could so run no script of its own.
fn page_policy() -> &'static str {
    static POLICY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    POLICY.get_or_init(|| {
        use base64::Engine as _;
        use sha2::Digest as _;
        let script = PAGE
            .split_once("<script>")
            .and_then(|(_, rest)| rest.split_once("</script>"))
            .map_or("", |(script, _)| script);
        let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(script));
        format!(
            "default-src 'none'; script-src 'sha256-{hash}'; style-src 'unsafe-inline'; \
             connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
             frame-ancestors 'none'"
        )
    })
}

impl OwnPages for Dashboard {
    fn content_security_policy(&self) -> Option<&str> {
        Some(page_policy())
    }

    fn liveness(&self) -> OwnPage {
        let (status, word) = self.draining_status();
        json_page(status, &json!({ "status": word }))
    }

    fn get(&self, path: &str, query: &str) -> Option<OwnPage> {
        let route = ROUTES.iter().find(|(p, _)| *p == path).map(|&(_, r)| r);
        let over_ledger = match route {
            Some(Route::Open(page)) => return Some(self.open_page(page, query)),
            Some(Route::OverLedger(page)) => Some(page),
            None => None,
        };
        let (source, team) = self.source();
        let Some(ledger) = source.as_deref().filter(|p| p.exists()) else {
            return Some(error(
                StatusCode::SERVICE_UNAVAILABLE,
                "pith keeps no ledger yet (started with --no-ledger, or no request has \
                 come through)"
                    .into(),
            ));
        };
        Some(match over_ledger {
            Some(page) => self.ledger_page(page, ledger, team, query),
            None => error(
                StatusCode::NOT_FOUND,
                format!(
                    "no pith page {path}: the dashboard is /, its API /pith/api/stats, \
                     /pith/api/timeline, /pith/api/requests, /pith/api/session?id= and \
                     /pith/api/request?id=, the metrics /metrics"
                ),
            ),
        })
    }
}

/// A page the dashboard answers whether or not there is a ledger.
#[derive(Clone, Copy)]
enum OpenPage {
    /// The dashboard itself.
    Dashboard,
    Favicon,
    Health,
    Flush,
}

/// A page read from the ledger.
#[derive(Clone, Copy)]
enum LedgerPage {
    Stats,
    Metrics,
    Events,
    Timeline,
    Requests,
    Session,
    Request,
}

#[derive(Clone, Copy)]
enum Route {
    Open(OpenPage),
    OverLedger(LedgerPage),
}

/// Every path the dashboard answers. The page is at `/`, and where a person looks for it
/// beside its API (`/pith/`).
const ROUTES: [(&str, Route); 13] = [
    ("/", Route::Open(OpenPage::Dashboard)),
    ("/pith/", Route::Open(OpenPage::Dashboard)),
    ("/pith", Route::Open(OpenPage::Dashboard)),
    ("/favicon.ico", Route::Open(OpenPage::Favicon)),
    ("/pith/health", Route::Open(OpenPage::Health)),
    ("/pith/api/flush", Route::Open(OpenPage::Flush)),
    ("/pith/api/stats", Route::OverLedger(LedgerPage::Stats)),
    ("/metrics", Route::OverLedger(LedgerPage::Metrics)),
    ("/pith/api/events", Route::OverLedger(LedgerPage::Events)),
    (
        "/pith/api/timeline",
        Route::OverLedger(LedgerPage::Timeline),
    ),
    (
        "/pith/api/requests",
        Route::OverLedger(LedgerPage::Requests),
    ),
    ("/pith/api/session", Route::OverLedger(LedgerPage::Session)),
    ("/pith/api/request", Route::OverLedger(LedgerPage::Request)),
];

impl Dashboard {
    fn open_page(&self, page: OpenPage, query: &str) -> OwnPage {
        match page {
            OpenPage::Dashboard => OwnPage {
                status: StatusCode::OK,
                content_type: "text/html; charset=utf-8",
                body: Bytes::from_static(PAGE.as_bytes()).into(),
            },
            OpenPage::Favicon => OwnPage {
                status: StatusCode::NO_CONTENT,
                content_type: "image/x-icon",
                body: Bytes::new().into(),
            },
            OpenPage::Health => {
                let (status, word) = self.draining_status();
                json_page(
                    status,
                    &json!({
                        "status": word,
                        "instance": self.instance.get(),
                        "pith": env!("CARGO_PKG_VERSION"),
                        "pid": std::process::id(),
                        "ledger": self.ledger.is_some(),
                        "anthropic": self.upstreams.anthropic,
                        "openai": self.upstreams.openai,
                        "chatgpt": self.upstreams.chatgpt,
                    }),
                )
            }
            OpenPage::Flush => self.flush(query),
        }
    }

    /// 503 `draining` once the proxy drains, else 200 `ok`.
    fn draining_status(&self) -> (StatusCode, &'static str) {
        if self.draining.load(Ordering::SeqCst) {
            (StatusCode::SERVICE_UNAVAILABLE, "draining")
        } else {
            (StatusCode::OK, "ok")
        }
    }

    fn ledger_page(
        &self,
        page: LedgerPage,
        ledger: &Path,
        team: Option<TeamInfo>,
        query: &str,
    ) -> OwnPage {
        match page {
            LedgerPage::Stats | LedgerPage::Metrics => {
                self.report_page(ledger, team, query, matches!(page, LedgerPage::Metrics))
            }
            LedgerPage::Events => match Viewer::admit(&self.viewers) {
                Some(viewer) => events(
                    viewer,
                    Arc::clone(&self.readers),
                    Arc::clone(&self.draining),
                    ledger.to_owned(),
                    query,
                ),
                None => error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "{MAX_VIEWERS} live views of this proxy are open already: close one \
                         (each dashboard tab keeps one), or read /pith/api/requests?after=ID"
                    ),
                ),
            },
            LedgerPage::Timeline => self.timeline_page(ledger, query),
            LedgerPage::Requests => {
                let limit = query_value(query, "limit")
                    .and_then(|l| l.parse::<usize>().ok())
                    .unwrap_or(100)
                    .min(1000);
                let after = query_value(query, "after").and_then(|a| a.parse::<i64>().ok());
                match self.readers.with(ledger, |l| l.recent(limit, after)) {
                    Ok(rows) => json_page(StatusCode::OK, &json!({"requests": rows})),
                    Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
                }
            }
            LedgerPage::Session => session::session(&self.readers, ledger, query),
            LedgerPage::Request => session::request(
                &self.readers,
                ledger,
                self.history.as_deref(),
                &self.own_account,
                self.gateway,
                query,
            ),
        }
    }

    /// `/pith/api/stats` (the report as JSON) and `/metrics` (the same, for Prometheus).
    fn report_page(
        &self,
        ledger: &Path,
        team: Option<TeamInfo>,
        query: &str,
        as_metrics: bool,
    ) -> OwnPage {
        let filter = match filter_of(query) {
            Ok(f) => f,
            Err(e) => return error(StatusCode::BAD_REQUEST, e),
        };
        let report = self.readers.with(ledger, |l| {
            report::report_over(
                l,
                ledger,
                &filter,
                &self.prices,
                &self.own_account,
                pith_proxy::words::report_words(),
            )
        });
        match report {
            Ok(report) if as_metrics => OwnPage {
                status: StatusCode::OK,
                content_type: "text/plain; version=0.0.4; charset=utf-8",
                body: Bytes::from(report::metrics::metrics(&report)).into(),
            },
            Ok(report) => json_page(StatusCode::OK, &TeamReport { report, team }),
            Err(e) => error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot read the ledger: {e}"),
            ),
        }
    }

    /// `/pith/api/timeline?bucket=1h`: the chart's bars.
    fn timeline_page(&self, ledger: &Path, query: &str) -> OwnPage {
        let filter = match filter_of(query) {
            Ok(f) => f,
            Err(e) => return error(StatusCode::BAD_REQUEST, e),
        };
        let width = match query_value(query, "bucket") {
            None => None,
            Some(text) => match crate::duration::parse(&text) {
                Ok(d) if !d.is_zero() => Some(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
                Ok(_) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "bucket=0: a bucket needs a width, e.g. bucket=1h".into(),
                    );
                }
                Err(e) => return error(StatusCode::BAD_REQUEST, format!("bucket={text}: {e}")),
            },
        };
        let read = self.readers.with(ledger, |l| {
            timeline::timeline(l, &filter, width, &self.prices)
        });
        match read {
            Ok(t) => json_page(StatusCode::OK, &t),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    }
}

/// How often the live stream looks for new requests, and sends a comment to keep the
/// connection (and any proxy between) from timing it out.
const EVENTS_EVERY: std::time::Duration = std::time::Duration::from_millis(500);
const KEEPALIVE_EVERY: u32 = 30;

/// `/pith/api/events`: each new request as a server-sent event (`event: request`, the row as
/// `/pith/api/requests` gives it), from `?after=ID` (default: from now). A thread per viewer
/// reads the ledger every half second through the shared connections; it ends when the viewer
/// goes away or the proxy stops (the browser's `EventSource` reconnects to the next one).
/// One open live stream, counted while it lives.
struct Viewer(Arc<AtomicUsize>);

impl Viewer {
    /// A place among the [`MAX_VIEWERS`], if one is free.
    fn admit(viewers: &Arc<AtomicUsize>) -> Option<Viewer> {
        viewers
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_VIEWERS).then_some(n + 1)
            })
            .ok()
            .map(|_| Viewer(Arc::clone(viewers)))
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn events(
    viewer: Viewer,
    readers: Arc<Readers>,
    draining: Arc<AtomicBool>,
    ledger: PathBuf,
    query: &str,
) -> OwnPage {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let start = query_value(query, "after").and_then(|a| a.parse::<i64>().ok());
    let spawned = std::thread::Builder::new()
        .name("pith-dashboard-events".into())
        .spawn(move || {
            // Counted until this thread ends (the viewer went away).
            let _viewer = viewer;
            let recent = |limit, after| readers.with(&ledger, |l| l.recent(limit, after));
            let mut last = match start {
                Some(id) => id,
                None => match recent(1, None) {
                    Ok(rows) => rows.first().map_or(0, |r| r.id),
                    Err(_) => return,
                },
            };
            if tx
                .blocking_send(Bytes::from_static(b": pith live requests\n\n"))
                .is_err()
            {
                return;
            }
            let mut quiet = 0;
            loop {
                std::thread::sleep(EVENTS_EVERY);
                // The viewer went away (hyper dropped the body): free its place now, not at
                // the next keep-alive. A proxy stopping ends the stream: an open dashboard tab
                // held every SIGTERM for the whole grace period.
                if tx.is_closed() || draining.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut rows) = recent(500, Some(last)) else {
                    return;
                };
                rows.reverse();
                for row in &rows {
                    last = last.max(row.id);
                    let Ok(data) = serde_json::to_string(row) else {
                        continue;
                    };
                    let event = format!("id: {}\nevent: request\ndata: {data}\n\n", row.id);
                    if tx.blocking_send(Bytes::from(event)).is_err() {
                        return;
                    }
                }
                quiet = if rows.is_empty() { quiet + 1 } else { 0 };
                if quiet >= KEEPALIVE_EVERY {
                    quiet = 0;
                    if tx
                        .blocking_send(Bytes::from_static(b": keep-alive\n\n"))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        });
    if spawned.is_err() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "pith could not start the live stream".into(),
        );
    }
    OwnPage {
        status: StatusCode::OK,
        content_type: "text/event-stream",
        body: OwnBody::Stream(rx),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_read_and_decoded() {
        assert_eq!(
            query_value("session=ses%20a&limit=5", "session").as_deref(),
            Some("ses a")
        );
        assert_eq!(query_value("limit=5", "session"), None);
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(
            percent_decode("%aé%zz"),
            "%aé%zz",
            "no panic inside a character"
        );
        assert!(filter_of("since=bogus").is_err());
        assert!(filter_of("since=1h").unwrap().since_ms.is_some());
    }
}
