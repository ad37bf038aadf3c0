//! A scripted HTTP/1.1 upstream on loopback: the stand-in for Anthropic and OpenAI that pith's
//! proxy is tested and benchmarked against.
//!
//! It runs on its own thread with its own single-threaded tokio runtime so that sync tests,
//! async tests on any runtime and benchmarks can all use it the same way. It is also the
//! baseline of the proxy latency benchmark, so the request path does as little as it can:
//! replies are prepared once (status and headers parsed when pushed), bodies are shared
//! `Bytes`, and nothing is logged.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, Request, Response, StatusCode, Uri};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{Notify, oneshot};

use crate::fixtures::{self, DEFAULT_DELTAS, DEFAULT_USAGE};
use crate::stream_flags::stream_flags;

/// One request exactly as the mock received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// HTTP method, e.g. `POST`.
    pub method: String,
    /// Path plus `?query` as sent on the request line (e.g. `/v1/messages?beta=true`).
    pub path_and_query: String,
    /// The headers, as received.
    pub headers: HeaderMap,
    /// The complete request body, byte for byte.
    pub body: Bytes,
}

impl Recorded {
    /// The path without the query string.
    pub fn path(&self) -> &str {
        self.path_and_query
            .split_once('?')
            .map_or(self.path_and_query.as_str(), |(path, _)| path)
    }

    /// A header's value when present and valid UTF-8 (names are case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The body parsed as JSON (tests assert on fields the proxy forwarded).
    pub fn body_json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::from_slice(&self.body)
    }
}

/// What the mock answers to one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A complete body with `content-type: application/json` (unless `headers` sets one).
    Json {
        /// HTTP status; an invalid one makes the mock answer 500 saying so.
        status: u16,
        /// Extra response headers, in order; a name given here replaces the mock's default.
        headers: Vec<(String, String)>,
        /// The whole body.
        body: Bytes,
    },
    /// Sent with content-type `text/event-stream; charset=utf-8` (unless `headers` sets one) and
    /// chunked transfer encoding; each chunk is written and flushed separately after its delay.
    Stream {
        /// HTTP status; an invalid one makes the mock answer 500 saying so.
        status: u16,
        /// Extra response headers, in order; a name given here replaces the mock's default.
        headers: Vec<(String, String)>,
        /// The body, in the chunks it is written in.
        chunks: Vec<Chunk>,
    },
}

impl Reply {
    /// 200 with a JSON body.
    pub fn json(body: impl Into<Bytes>) -> Reply {
        Reply::json_status(200, body)
    }

    /// A JSON body with any status (error replies).
    pub fn json_status(status: u16, body: impl Into<Bytes>) -> Reply {
        Reply::Json {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// 200 event stream from pre-split chunks (see [`fixtures::split_every`] and friends).
    pub fn stream(chunks: Vec<Chunk>) -> Reply {
        Reply::Stream {
            status: 200,
            headers: Vec::new(),
            chunks,
        }
    }

    /// 200 event stream of a whole SSE body, one chunk per event, no delays.
    pub fn sse(body: impl AsRef<[u8]>) -> Reply {
        Reply::stream(fixtures::split_at_events(body.as_ref(), Duration::ZERO))
    }

    /// Adds a response header; a name given here replaces the mock's default for that name.
    #[must_use]
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        match &mut self {
            Reply::Json { headers, .. } | Reply::Stream { headers, .. } => {
                headers.push((name.to_owned(), value.to_owned()));
            }
        }
        self
    }
}

/// One piece of a streamed reply: wait `delay`, then write and flush `bytes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// How long to wait after the previous chunk (the response head, for the first).
    pub delay: Duration,
    /// The bytes to write.
    pub bytes: Bytes,
}

/// A [`Reply`] validated and turned into hyper's types once, so serving it is cheap.
#[derive(Debug)]
struct Prepared {
    status: StatusCode,
    headers: HeaderMap,
    payload: Payload,
}

#[derive(Debug)]
enum Payload {
    Full(Bytes),
    Chunks(Vec<Chunk>),
}

impl Prepared {
    fn new(reply: Reply) -> Arc<Prepared> {
        let (status, extra, default_type, payload) = match reply {
            Reply::Json {
                status,
                headers,
                body,
            } => (status, headers, "application/json", Payload::Full(body)),
            Reply::Stream {
                status,
                headers,
                chunks,
            } => (
                status,
                headers,
                "text/event-stream; charset=utf-8",
                Payload::Chunks(chunks),
            ),
        };
        match Self::build(status, &extra, default_type, payload) {
            Ok(prepared) => Arc::new(prepared),
            Err(problem) => Arc::new(Prepared::mock_error(&problem)),
        }
    }

    fn build(
        status: u16,
        extra: &[(String, String)],
        default_type: &'static str,
        payload: Payload,
    ) -> Result<Prepared, String> {
        let status = StatusCode::from_u16(status)
            .map_err(|_| format!("scripted reply has invalid status {status}"))?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(default_type));
        if matches!(payload, Payload::Chunks(_)) {
            headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        }
        let mut replaced: Vec<HeaderName> = Vec::new();
        for (name, value) in extra {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("scripted reply has invalid header name {name:?}"))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| format!("scripted reply has invalid header value {value:?}"))?;
            if replaced.contains(&name) {
                headers.append(name, value);
            } else {
                headers.insert(name.clone(), value);
                replaced.push(name);
            }
        }
        Ok(Prepared {
            status,
            headers,
            payload,
        })
    }

    /// A broken script is a bug in the test: answer 500 with a body saying what is wrong.
    fn mock_error(problem: &str) -> Prepared {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let body = serde_json::json!({ "mock_error": problem }).to_string();
        Prepared {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            headers,
            payload: Payload::Full(Bytes::from(body)),
        }
    }
}

/// The replies used when nothing is queued and no default was set, built once per mock.
struct BuiltinDefaults {
    messages: Arc<Prepared>,
    messages_stream: Arc<Prepared>,
    count_tokens: Arc<Prepared>,
    input_tokens: Arc<Prepared>,
    chat: Arc<Prepared>,
    chat_stream: Arc<Prepared>,
    chat_stream_usage: Arc<Prepared>,
    responses: Arc<Prepared>,
    responses_stream: Arc<Prepared>,
}

impl BuiltinDefaults {
    fn new() -> BuiltinDefaults {
        let text = DEFAULT_DELTAS.concat();
        BuiltinDefaults {
            messages: Prepared::new(Reply::json(fixtures::anthropic::message(
                &text,
                DEFAULT_USAGE,
            ))),
            messages_stream: Prepared::new(Reply::sse(fixtures::anthropic::stream(
                DEFAULT_DELTAS,
                DEFAULT_USAGE,
            ))),
            count_tokens: Prepared::new(Reply::json(fixtures::anthropic::count_tokens(
                DEFAULT_USAGE.prompt_total(),
            ))),
            input_tokens: Prepared::new(Reply::json(fixtures::responses::input_tokens(
                DEFAULT_USAGE.prompt_total(),
            ))),
            chat: Prepared::new(Reply::json(fixtures::chat::completion(
                &text,
                DEFAULT_USAGE,
            ))),
            chat_stream: Prepared::new(Reply::sse(fixtures::chat::stream(DEFAULT_DELTAS, None))),
            chat_stream_usage: Prepared::new(Reply::sse(fixtures::chat::stream(
                DEFAULT_DELTAS,
                Some(DEFAULT_USAGE),
            ))),
            responses: Prepared::new(Reply::json(fixtures::responses::response(
                &text,
                DEFAULT_USAGE,
            ))),
            responses_stream: Prepared::new(Reply::sse(fixtures::responses::stream(
                DEFAULT_DELTAS,
                DEFAULT_USAGE,
            ))),
        }
    }
}

enum Wire {
    Messages,
    CountTokens,
    Chat,
    Responses,
    InputTokens,
}

impl Wire {
    fn of(path: &str) -> Option<Wire> {
        match path {
            "/v1/messages" => Some(Wire::Messages),
            "/v1/messages/count_tokens" => Some(Wire::CountTokens),
            "/v1/chat/completions" => Some(Wire::Chat),
            "/v1/responses" => Some(Wire::Responses),
            "/v1/responses/input_tokens" => Some(Wire::InputTokens),
            _ => None,
        }
    }
}

/// The reply of a mock that counts ([`MockUpstream::count_prompts`],
/// [`MockUpstream::refuse_counts`], [`MockUpstream::delay_counts`]) to a request it answers
/// itself: a counter's count by the mock's tokenizer (or its refusal), an answer whose usage is
/// the prompt's tokens; `None` for what the built-in defaults answer.
fn counted_reply(state: &Counting, uri: &Uri, body: &[u8]) -> Option<Arc<Prepared>> {
    let wire = Wire::of(uri.path())?;
    let counter = matches!(wire, Wire::CountTokens | Wire::InputTokens);
    if counter && !state.counters() {
        // The built-in default counts.
        return None;
    }
    let tokens = fixtures::tokens::prompt_tokens(body);
    if counter {
        let (status, answer) = match (state.refuse, &wire) {
            (Some(status), Wire::CountTokens) => (
                status,
                fixtures::anthropic::error_body(status, "mock upstream: the counter refused"),
            ),
            (Some(status), _) => (
                status,
                fixtures::openai_error_body(status, "mock upstream: the counter refused"),
            ),
            (None, Wire::CountTokens) => (200, fixtures::anthropic::count_tokens(tokens)),
            (None, _) => (200, fixtures::responses::input_tokens(tokens)),
        };
        let mut reply = Reply::Stream {
            status,
            headers: vec![("content-type".to_owned(), "application/json".to_owned())],
            chunks: vec![Chunk {
                delay: state.delay,
                bytes: answer,
            }],
        };
        if status == 429 {
            reply = reply.with_header("retry-after", "30");
        }
        return Some(Prepared::new(reply));
    }
    if !state.prompts {
        return None;
    }
    let usage = fixtures::Usage {
        input: tokens,
        output: 9,
        cache_write: 0,
        cache_write_1h: 0,
        cache_read: 0,
    };
    let stream = stream_flags(body)?.stream;
    let text = DEFAULT_DELTAS.concat();
    let reply = match wire {
        Wire::Messages if stream => Reply::sse(fixtures::anthropic::stream(DEFAULT_DELTAS, usage)),
        Wire::Messages => Reply::json(fixtures::anthropic::message(&text, usage)),
        Wire::Responses if stream => Reply::sse(fixtures::responses::stream(DEFAULT_DELTAS, usage)),
        Wire::Responses => Reply::json(fixtures::responses::response(&text, usage)),
        _ => return None,
    };
    Some(Prepared::new(reply))
}

fn default_reply(builtin: &BuiltinDefaults, method: &str, uri: &Uri, body: &[u8]) -> Arc<Prepared> {
    let Some(wire) = Wire::of(uri.path()) else {
        let path = uri.path_and_query().map_or(uri.path(), |pq| pq.as_str());
        let echo = serde_json::json!({ "method": method, "path": path }).to_string();
        return Prepared::new(Reply::json(echo));
    };
    let Some(flags) = stream_flags(body) else {
        // What the real APIs do with a body that is not JSON (checked structurally only); it
        // also makes a proxy that corrupts a body fail loudly instead of getting a default.
        let message = "mock upstream: request body is not valid JSON";
        let error = match wire {
            Wire::Messages | Wire::CountTokens => fixtures::anthropic::error_body(400, message),
            Wire::Chat | Wire::Responses | Wire::InputTokens => {
                fixtures::openai_error_body(400, message)
            }
        };
        return Prepared::new(Reply::json_status(400, error));
    };
    let stream = flags.stream;
    match wire {
        Wire::Messages if stream => Arc::clone(&builtin.messages_stream),
        Wire::Messages => Arc::clone(&builtin.messages),
        Wire::CountTokens => Arc::clone(&builtin.count_tokens),
        Wire::InputTokens => Arc::clone(&builtin.input_tokens),
        Wire::Chat if !stream => Arc::clone(&builtin.chat),
        Wire::Chat => {
            if flags.include_usage {
                Arc::clone(&builtin.chat_stream_usage)
            } else {
                Arc::clone(&builtin.chat_stream)
            }
        }
        Wire::Responses if stream => Arc::clone(&builtin.responses_stream),
        Wire::Responses => Arc::clone(&builtin.responses),
    }
}

/// Which requests a queued reply is for: any, or those whose body passes a test.
type BodyTest = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

struct Queued {
    when: Option<BodyTest>,
    reply: Arc<Prepared>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Queued>,
    custom_default: Option<Arc<Prepared>>,
    received: Vec<Recorded>,
    request_count: usize,
    aborted_streams: usize,
    not_recording: bool,
    counting: Counting,
}

/// How the mock counts tokens, when a test asks it to.
#[derive(Default, Clone, Copy)]
struct Counting {
    /// The default answers report the prompt's own tokens as their usage.
    prompts: bool,
    /// The token counters answer this error status instead.
    refuse: Option<u16>,
    /// The token counters answer after this long.
    delay: Duration,
}

impl Counting {
    /// The counters are the mock's own to answer.
    fn counters(&self) -> bool {
        self.prompts || self.refuse.is_some() || !self.delay.is_zero()
    }
}

/// State shared between the test thread and the server thread. A std mutex (not tokio's) so
/// that the sync API and `Drop` of a stream body can use it without a runtime.
struct Shared {
    state: Mutex<State>,
    /// Wakes blocking waiters.
    changed: Condvar,
    /// Wakes async waiters (who must not block their runtime's thread).
    changed_async: Notify,
    builtin: BuiltinDefaults,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn notify(&self) {
        self.changed.notify_all();
        self.changed_async.notify_waiters();
    }

    /// Waits without blocking the thread until `done(state)` holds or `timeout` passes.
    async fn wait_until_async(&self, timeout: Duration, done: impl Fn(&State) -> bool) -> bool {
        let wait = async {
            loop {
                let notified = self.changed_async.notified();
                tokio::pin!(notified);
                // Registered before the check, so a change right after it still wakes us.
                notified.as_mut().enable();
                if done(&self.lock()) {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }

    /// Blocks until `done(state)` holds or `timeout` passes; returns whether it held.
    fn wait_until(&self, timeout: Duration, done: impl Fn(&State) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        loop {
            if done(&state) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// A mock of the providers' HTTP APIs; see the module docs. Stops when dropped.
pub struct MockUpstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MockUpstream {
    /// Starts on 127.0.0.1 with a random port, served by its own background thread and tokio
    /// runtime, so it works from sync tests, async tests (any runtime) and benchmarks.
    pub fn start() -> std::io::Result<MockUpstream> {
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = {
            let _context = runtime.enter();
            TcpListener::from_std(std_listener)?
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            changed_async: Notify::new(),
            builtin: BuiltinDefaults::new(),
        });
        let (shutdown, stop) = oneshot::channel();
        let server_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("mock-upstream-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(serve(listener, server_shared, stop));
                // Dropping the runtime here cancels every open connection.
            })?;
        Ok(MockUpstream {
            addr,
            shared,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address it listens on (127.0.0.1 and its port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a scripted reply. Replies are used first in, first out, one per request; with the
    /// queue empty the default reply answers (see [`MockUpstream::set_default`]).
    pub fn push(&self, reply: Reply) {
        let reply = Prepared::new(reply);
        self.shared
            .lock()
            .queue
            .push_back(Queued { when: None, reply });
    }

    /// Queues a scripted reply for the first request whose body passes `when`; requests that
    /// it does not fit take the next reply that fits them, or the default. For clients that
    /// send side requests concurrently (OpenCode's title call races its first turn).
    pub fn push_when(&self, when: impl Fn(&[u8]) -> bool + Send + Sync + 'static, reply: Reply) {
        let reply = Prepared::new(reply);
        self.shared.lock().queue.push_back(Queued {
            when: Some(Arc::new(when)),
            reply,
        });
    }

    /// Scripted replies not used yet (a test can check that every one was asked for).
    pub fn queued_replies(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Replaces the built-in default for every later request that finds the queue empty.
    ///
    /// The built-in default depends on the path and the body's `"stream"` field: an Anthropic
    /// message or event stream for `/v1/messages`, `{"input_tokens": N}` for
    /// `/v1/messages/count_tokens` (and, with `"object"`, for `/v1/responses/input_tokens`), a completion or chunk stream for `/v1/chat/completions`
    /// (with the usage chunk only when `stream_options.include_usage` is true), a response or
    /// event stream for `/v1/responses`, all with [`DEFAULT_DELTAS`] and [`DEFAULT_USAGE`];
    /// a 400 in the provider's error shape when such a body is not JSON; and for any other path
    /// a 200 JSON echo `{"method": .., "path": ..}` (path including the query).
    pub fn set_default(&self, reply: Reply) {
        let prepared = Prepared::new(reply);
        self.shared.lock().custom_default = Some(prepared);
    }

    /// Count as a provider does: the token counters (`/v1/messages/count_tokens`,
    /// `/v1/responses/input_tokens`) answer by the mock's tokenizer
    /// ([`fixtures::tokens::prompt_tokens`]), never taking a scripted reply, and the default
    /// answers to Messages and Responses requests report that many uncached input tokens, so
    /// a count of a body and the usage of the same body agree.
    pub fn count_prompts(&self, on: bool) {
        self.shared.lock().counting.prompts = on;
    }

    /// The token counters answer `status` in the provider's error shape (429 with
    /// `retry-after: 30`, their own rate limit), until given `None`.
    pub fn refuse_counts(&self, status: Option<u16>) {
        self.shared.lock().counting.refuse = status;
    }

    /// The token counters (counting or refusing) answer after `delay`.
    pub fn delay_counts(&self, delay: Duration) {
        self.shared.lock().counting.delay = delay;
    }

    /// Every recorded request so far, in arrival order.
    pub fn received(&self) -> Vec<Recorded> {
        self.shared.lock().received.clone()
    }

    /// Forgets recorded requests and resets [`MockUpstream::request_count`].
    pub fn clear_received(&self) {
        let mut state = self.shared.lock();
        state.received.clear();
        state.request_count = 0;
    }

    /// Requests answered since start or the last [`MockUpstream::clear_received`], including
    /// those not recorded because recording was off.
    pub fn request_count(&self) -> usize {
        self.shared.lock().request_count
    }

    /// Turns recording of requests on (the default) or off. Benchmarks sending many large
    /// bodies turn it off so memory stays flat; requests are still counted.
    pub fn set_recording(&self, on: bool) {
        self.shared.lock().not_recording = !on;
    }

    /// Blocks until at least `n` requests were answered (see [`MockUpstream::request_count`]).
    /// From async code use [`MockUpstream::wait_requests_async`].
    pub fn wait_requests(&self, n: usize, timeout: Duration) -> bool {
        self.shared
            .wait_until(timeout, |state| state.request_count >= n)
    }

    /// [`MockUpstream::wait_requests`] for async code (any tokio runtime with time enabled).
    pub async fn wait_requests_async(&self, n: usize, timeout: Duration) -> bool {
        self.shared
            .wait_until_async(timeout, |state| state.request_count >= n)
            .await
    }

    /// Streamed replies whose client went away before the last chunk was written.
    pub fn aborted_streams(&self) -> usize {
        self.shared.lock().aborted_streams
    }

    /// Blocks until at least `n` streams were aborted; false if `timeout` passed first.
    ///
    /// This blocks the calling thread. In an async test on a current-thread runtime that also
    /// stalls whatever must hang up (a client task, an in-process proxy), so use
    /// [`MockUpstream::wait_aborted_streams_async`] there.
    pub fn wait_aborted_streams(&self, n: usize, timeout: Duration) -> bool {
        self.shared
            .wait_until(timeout, |state| state.aborted_streams >= n)
    }

    /// [`MockUpstream::wait_aborted_streams`] for async code (any tokio runtime with time
    /// enabled).
    pub async fn wait_aborted_streams_async(&self, n: usize, timeout: Duration) -> bool {
        self.shared
            .wait_until_async(timeout, |state| state.aborted_streams >= n)
            .await
    }
}

impl Drop for MockUpstream {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            // An error means the server already stopped, which is what we want.
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            // A panic on the server thread has nowhere better to go than here, in a destructor.
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for MockUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockUpstream")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>, mut stop: oneshot::Receiver<()>) {
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _peer)) = accepted else {
            // Out of file descriptors or similar: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        // Streams must leave as they are written, as from the real APIs.
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = service_fn(move |request| handle(request, Arc::clone(&shared)));
            // A client hanging up mid-request is normal in tests; nothing to report.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(
    request: Request<Incoming>,
    shared: Arc<Shared>,
) -> Result<Response<MockBody>, Infallible> {
    let (parts, incoming) = request.into_parts();
    let body = match incoming.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            // The client went away while sending; the reply will not reach anyone.
            let mut response = Response::new(MockBody::full(Bytes::new()));
            *response.status_mut() = StatusCode::BAD_REQUEST;
            return Ok(response);
        }
    };
    let scripted = {
        let mut state = shared.lock();
        state.request_count += 1;
        // A counter's request is the counter's to answer, never a scripted turn's.
        let counter = matches!(
            Wire::of(parts.uri.path()),
            Some(Wire::CountTokens | Wire::InputTokens)
        );
        let counting = state.counting;
        let scripted = if counter && counting.counters() {
            counted_reply(&counting, &parts.uri, &body)
        } else {
            state
                .queue
                .iter()
                .position(|q| q.when.as_ref().is_none_or(|when| when(&body)))
                .and_then(|at| state.queue.remove(at))
                .map(|q| q.reply)
                .or_else(|| state.custom_default.clone())
                .or_else(|| counted_reply(&counting, &parts.uri, &body))
        };
        if !state.not_recording {
            state.received.push(Recorded {
                method: parts.method.as_str().to_owned(),
                path_and_query: parts
                    .uri
                    .path_and_query()
                    .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned()),
                headers: parts.headers,
                body: body.clone(),
            });
        }
        shared.notify();
        scripted
    };
    let reply = scripted.unwrap_or_else(|| {
        default_reply(&shared.builtin, parts.method.as_str(), &parts.uri, &body)
    });

    let mut response = Response::new(match &reply.payload {
        Payload::Full(bytes) => MockBody::full(bytes.clone()),
        Payload::Chunks(_) => MockBody::Stream(ChunkStream::new(Arc::clone(&reply), shared)),
    });
    *response.status_mut() = reply.status;
    *response.headers_mut() = reply.headers.clone();
    Ok(response)
}

/// The response body: a complete buffer, or a paced stream of chunks.
enum MockBody {
    Full(Option<Bytes>),
    Stream(ChunkStream),
}

impl MockBody {
    fn full(bytes: Bytes) -> MockBody {
        MockBody::Full(Some(bytes))
    }
}

impl http_body::Body for MockBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            MockBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Stream(stream) => stream.poll_next(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            MockBody::Full(bytes) => bytes.is_none(),
            MockBody::Stream(stream) => stream.next >= stream.len(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            MockBody::Full(None) => SizeHint::with_exact(0),
            MockBody::Stream(_) => SizeHint::default(),
        }
    }
}

/// Yields a prepared reply's chunks after their delays. Between two chunks it returns
/// `Pending` once, which makes hyper flush the previous chunk before taking the next: without
/// that, chunks with no delay would be coalesced into one write. Dropped before the last chunk
/// was handed over means the client went away: that counts as an aborted stream.
struct ChunkStream {
    reply: Arc<Prepared>,
    shared: Arc<Shared>,
    next: usize,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    flushed: bool,
}

impl ChunkStream {
    fn new(reply: Arc<Prepared>, shared: Arc<Shared>) -> ChunkStream {
        ChunkStream {
            reply,
            shared,
            next: 0,
            sleep: None,
            flushed: true,
        }
    }

    fn chunks(&self) -> &[Chunk] {
        match &self.reply.payload {
            Payload::Chunks(chunks) => chunks,
            Payload::Full(_) => &[],
        }
    }

    fn len(&self) -> usize {
        self.chunks().len()
    }

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let Some(chunk) = self.chunks().get(self.next) else {
            return Poll::Ready(None);
        };
        let (delay, bytes) = (chunk.delay, chunk.bytes.clone());
        if !self.flushed {
            self.flushed = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if !delay.is_zero() {
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(delay)));
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
        }
        self.next += 1;
        self.flushed = false;
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }
}

impl Drop for ChunkStream {
    fn drop(&mut self) {
        if self.next < self.len() {
            let mut state = self.shared.lock();
            state.aborted_streams += 1;
            self.shared.notify();
        }
    }
}
