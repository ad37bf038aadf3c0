//! The proxy with test stages in its pipeline: failing stages leave the bytes alone and are
//! counted; a working stage's edit reaches the upstream and is disclosed to the client.
#![expect(
    clippy::unwrap_used,
    reason = "test harness: a panic is the failure report"
)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;

use pith_ledger::LedgerSink;
use pith_proxy::rewrite::{EventRewriter, ResponseInfo, ResponseRewrites, Rewrite, Rewriter};
use pith_proxy::{Proxy, ProxyConfig, TRANSFORMS_HEADER, UpstreamUrl};
use pith_store::clock::Clock;
use pith_store::ledger::{self, Fact, Filter, Ledger, Transform, TransformResult};
use pith_testkit::fixtures::{self, Usage};
use pith_testkit::{MockUpstream, Reply};
use pith_transform::{Edit, Outcome, Pipeline, Request, Splice, Stage, StageError};

struct Panics;
impl Stage for Panics {
    fn name(&self) -> &'static str {
        "panics"
    }
    fn apply(&self, _: &Request<'_>) -> Result<Outcome, StageError> {
        panic!("stage bug")
    }
}

struct Errors;
impl Stage for Errors {
    fn name(&self) -> &'static str {
        "errors"
    }
    fn apply(&self, _: &Request<'_>) -> Result<Outcome, StageError> {
        Err(StageError("cannot".into()))
    }
}

/// Breaks the JSON: the pipeline must reject its edit.
struct Corrupts;
impl Stage for Corrupts {
    fn name(&self) -> &'static str {
        "corrupts"
    }
    fn apply(&self, _: &Request<'_>) -> Result<Outcome, StageError> {
        Ok(Outcome::Edited(Edit {
            splices: vec![Splice {
                range: 0..1,
                replacement: "[".into(),
            }],
            ..Edit::default()
        }))
    }
}

/// Renames the model: a real edit, one span.
struct RenamesModel;
impl Stage for RenamesModel {
    fn name(&self) -> &'static str {
        "rename"
    }
    fn apply(&self, r: &Request<'_>) -> Result<Outcome, StageError> {
        let text = std::str::from_utf8(r.body).map_err(|e| StageError(e.to_string()))?;
        let at = text
            .find("\"claude-haiku-4-5\"")
            .ok_or_else(|| StageError("no model".into()))?;
        Ok(Outcome::Edited(Edit {
            splices: vec![Splice {
                range: at..at + "\"claude-haiku-4-5\"".len(),
                replacement: "\"claude-other\"".into(),
            }],
            facts: vec![pith_transform::Fact::count("n", 1)],
            ..Edit::default()
        }))
    }
}

async fn start(
    pipeline: Pipeline,
    mock: &MockUpstream,
    ledger: &std::path::Path,
) -> (SocketAddr, LedgerSink) {
    start_with(pipeline, None, mock, ledger, Clock::system()).await
}

async fn start_with(
    pipeline: Pipeline,
    rewrites: Option<Arc<dyn ResponseRewrites>>,
    mock: &MockUpstream,
    ledger: &std::path::Path,
    clock: Clock,
) -> (SocketAddr, LedgerSink) {
    let upstream = UpstreamUrl::parse(&mock.url()).unwrap();
    let spool = pith_ledger::SpoolConfig {
        dir: ledger.with_extension("db-spool"),
        limit: pith_ledger::DEFAULT_SPOOL_LIMIT,
    };
    let sink =
        LedgerSink::start_with_history(Ledger::open(ledger).unwrap(), &spool, None, None, clock)
            .unwrap();
    let proxy = Proxy::bind(ProxyConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        anthropic: upstream.clone(),
        chatgpt: upstream.clone(),
        openai: upstream,
        pipeline,
        pins: None,
        own_pages: None,
        rewrites,
        searches: None,
        ledger: Some(sink.clone()),
        max_body: pith_proxy::DEFAULT_MAX_BODY,
        max_sockets: pith_proxy::MAX_SOCKETS,
        timeouts: pith_proxy::Timeouts::default(),
        token: None,
        accounts: pith_proxy::Accounts::default(),
        provider_counts: 0.0,
    })
    .await
    .unwrap();
    let addr = proxy.local_addr().unwrap();
    tokio::spawn(proxy.serve(std::future::pending(), Duration::from_secs(1)));
    (addr, sink)
}

const BODY: &str =
    r#"{"model":"claude-haiku-4-5","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;

async fn post(addr: SocketAddr) -> http::Response<hyper::body::Incoming> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = http::Request::post(format!("http://{addr}/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .body(Full::new(Bytes::from_static(BODY.as_bytes())))
        .unwrap();
    client.request(req).await.unwrap()
}

#[tokio::test]
async fn failing_stages_leave_the_request_byte_identical_and_are_counted() {
    let mock = MockUpstream::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pipeline = Pipeline::new()
        .with_stage(Box::new(Panics))
        .with_stage(Box::new(Errors))
        .with_stage(Box::new(Corrupts));
    let (addr, sink) = start(pipeline, &mock, &dir.path().join("l.db")).await;
    let resp = post(addr).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get(TRANSFORMS_HEADER).is_none());
    resp.into_body().collect().await.unwrap();
    assert_eq!(&mock.received()[0].body[..], BODY.as_bytes());
    sink.shutdown(Duration::from_secs(5));
    let rows = Ledger::open(&dir.path().join("l.db"))
        .unwrap()
        .rows()
        .unwrap();
    assert_eq!(rows.len(), 1);
    let failed: Vec<&str> = rows[0]
        .transforms
        .iter()
        .filter(|t| matches!(t.result, TransformResult::Failed(_)))
        .map(|t| t.stage.as_str())
        .collect();
    assert_eq!(failed, ["panics", "errors", "corrupts"]);
    let groups = Ledger::open(&dir.path().join("l.db"))
        .unwrap()
        .groups(&Default::default())
        .unwrap();
    assert_eq!(
        (groups[0].transform_failures, groups[0].transformed),
        (3, 0)
    );
}

#[tokio::test]
async fn an_edit_changes_only_its_span_and_is_disclosed() {
    let mock = MockUpstream::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pipeline = Pipeline::new()
        .with_stage(Box::new(Panics))
        .with_stage(Box::new(RenamesModel));
    let (addr, sink) = start(pipeline, &mock, &dir.path().join("l.db")).await;
    let resp = post(addr).await;
    assert_eq!(resp.headers()[TRANSFORMS_HEADER], "rename;n=1");
    resp.into_body().collect().await.unwrap();
    let got = mock.received();
    assert_eq!(
        &got[0].body[..],
        BODY.replace("claude-haiku-4-5", "claude-other").as_bytes()
    );
    assert_eq!(
        got[0].header("content-length"),
        Some(got[0].body.len().to_string().as_str())
    );
    sink.shutdown(Duration::from_secs(5));
    let rows = Ledger::open(&dir.path().join("l.db"))
        .unwrap()
        .rows()
        .unwrap();
    assert_eq!(
        rows[0].transforms,
        [
            Transform {
                stage: "panics".into(),
                result: TransformResult::Failed("panicked: stage bug".into()),
            },
            Transform {
                stage: "rename".into(),
                result: TransformResult::Applied(vec![Fact {
                    name: "n".into(),
                    kind: "count".into(),
                    value: 1,
                }]),
            },
        ]
    );
    assert_eq!(rows[0].bytes_client, BODY.len() as u64);
    assert_eq!(rows[0].bytes_upstream, got[0].body.len() as u64);
}

/// Holds its request until the test releases it, and says whether it had to give up waiting.
struct Gate {
    entered: std::sync::Mutex<std::sync::mpsc::Sender<()>>,
    release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
    timed_out: std::sync::Arc<std::sync::atomic::AtomicBool>,
}
impl Stage for Gate {
    fn name(&self) -> &'static str {
        "gate"
    }
    fn apply(&self, _: &Request<'_>) -> Result<Outcome, StageError> {
        let _ = self.entered.lock().unwrap().send(());
        let waited = self
            .release
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(10));
        if waited.is_err() {
            self.timed_out
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(Outcome::Unchanged("released"))
    }
}

#[tokio::test]
async fn a_blocking_stage_does_not_stall_other_requests() {
    let mock = MockUpstream::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (entered_tx, entered_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel();
    let timed_out = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pipeline = Pipeline::new()
        .with_stage(Box::new(Gate {
            entered: std::sync::Mutex::new(entered_tx),
            release: std::sync::Mutex::new(release_rx),
            timed_out: std::sync::Arc::clone(&timed_out),
        }))
        .blocking();
    // The proxy runs on this test's single-threaded runtime: had the stage run inline, the
    // runtime would be stuck inside it and nothing below could happen until it gave up.
    let (addr, sink) = start(pipeline, &mock, &dir.path().join("l.db")).await;
    let held = tokio::spawn(post(addr));
    tokio::task::spawn_blocking(move || entered_rx.recv().unwrap())
        .await
        .unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let other = client
        .request(
            http::Request::get(format!("http://{addr}/v1/models"))
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
    release_tx.send(()).unwrap();
    let held = held.await.unwrap();
    assert_eq!(held.status(), 200);
    assert!(!timed_out.load(std::sync::atomic::Ordering::SeqCst));
    sink.shutdown(Duration::from_secs(5));
}

/// Drops `ping` events and renames the text of the first delta; records the events it saw.
struct DropPings(Arc<std::sync::Mutex<Vec<Vec<u8>>>>);
impl EventRewriter for DropPings {
    fn event(&mut self, event: &[u8]) -> Rewrite {
        self.0.lock().unwrap().push(event.to_vec());
        let text = String::from_utf8_lossy(event);
        if text.starts_with("event: ping") {
            Rewrite::Drop
        } else if text.contains("\"text\":\"Hel\"") {
            Rewrite::Replace(Bytes::from(text.replace("\"Hel\"", "\"Jel\"")))
        } else {
            Rewrite::Keep
        }
    }
}

struct Rewrites(Arc<std::sync::Mutex<Vec<Vec<u8>>>>);
impl ResponseRewrites for Rewrites {
    fn reads_answer(&self, _: pith_wire::Wire, _: &[pith_transform::StageReport]) -> bool {
        true
    }
    fn for_response(&self, info: &ResponseInfo<'_>) -> Option<Rewriter> {
        assert_eq!(info.path, "/v1/messages");
        assert!(info.sse);
        Some(Rewriter::Events(Box::new(DropPings(Arc::clone(&self.0)))))
    }
}

#[tokio::test]
async fn a_response_rewriter_sees_each_event_whole_and_the_ledger_the_provider_bytes() {
    let mock = MockUpstream::start().unwrap();
    let stream = fixtures::anthropic::stream(
        &["Hel", "lo"],
        Usage {
            input: 10,
            output: 3,
            ..Usage::default()
        },
    );
    // Chunks of 7 bytes: every event arrives split across frames.
    mock.push(Reply::stream(fixtures::split_every(
        &stream,
        7,
        Duration::ZERO,
    )));
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let rewrites: Arc<dyn ResponseRewrites> = Arc::new(Rewrites(Arc::clone(&seen)));
    let (addr, sink) = start_with(
        Pipeline::new(),
        Some(rewrites),
        &mock,
        &dir.path().join("l.db"),
        Clock::system(),
    )
    .await;
    let resp = post(addr).await;
    assert!(resp.headers().get("content-length").is_none());
    let got = resp.into_body().collect().await.unwrap().to_bytes();

    // The rewriter saw the provider's events, each whole and exactly as sent.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.concat(), stream.to_vec());
    assert!(seen.iter().all(|e| e.ends_with(b"\n\n")), "{seen:?}");
    let text = String::from_utf8_lossy(&stream).into_owned();
    let expected = text
        .split_inclusive("\n\n")
        .filter(|e| !e.starts_with("event: ping"))
        .collect::<String>()
        .replace("\"Hel\"", "\"Jel\"");
    assert_ne!(expected, text);
    assert_eq!(String::from_utf8_lossy(&got), expected);

    sink.shutdown(Duration::from_secs(5));
    let rows = Ledger::open(&dir.path().join("l.db"))
        .unwrap()
        .rows()
        .unwrap();
    // Usage is the provider's; the row counts the bytes the provider sent.
    assert_eq!(rows[0].outcome, ledger::RequestOutcome::Ok);
    assert_eq!(rows[0].bytes_response, stream.len() as u64);
    assert_eq!(rows[0].usage.map(|u| (u.input, u.output)), Some((10, 3)));
}

/// A record is stamped from its ledger's clock (set by hand here, the system's in the
/// product): two requests a millisecond apart across an hour's edge are two rows at exactly
/// those times, in that arrival order, and two hours of the timeline, with no waiting for the
/// wall clock to get there.
#[tokio::test]
async fn records_are_stamped_from_the_ledgers_clock() {
    const HOUR_MS: i64 = 3_600_000;
    // 2026-01-01T00:00:00Z.
    let edge = 1_767_225_600_000;
    assert_eq!(edge % HOUR_MS, 0);
    let mock = MockUpstream::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let clock = Clock::by_hand(edge - 1);
    let (addr, sink) = start_with(Pipeline::new(), None, &mock, &path, clock.clone()).await;
    post(addr).await.into_body().collect().await.unwrap();
    clock.advance(Duration::from_millis(1));
    post(addr).await.into_body().collect().await.unwrap();
    sink.shutdown(Duration::from_secs(5));
    let ledger = Ledger::open(&path).unwrap();
    let stamps: Vec<(i64, Option<i64>)> = ledger
        .rows()
        .unwrap()
        .iter()
        .map(|r| (r.ts_ms, r.arrival_us))
        .collect();
    // The writers took the clock's first arrival when they started (a later one is this
    // process's request), so the first request's is one microsecond on.
    assert_eq!(
        stamps,
        [
            (edge - 1, Some((edge - 1) * 1000 + 1)),
            (edge, Some(edge * 1000))
        ]
    );
    let hours: Vec<(i64, u64)> = ledger
        .timeline(&Filter::default(), HOUR_MS)
        .unwrap()
        .iter()
        .map(|b| (b.start_ms, b.requests))
        .collect();
    assert_eq!(hours, [(edge - HOUR_MS, 1), (edge, 1)]);
}
