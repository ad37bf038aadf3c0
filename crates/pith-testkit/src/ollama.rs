//! A mock model server on 127.0.0.1 (random port) for the local-prefilter tests, speaking both
//! APIs Ollama serves: its own and the OpenAI-compatible one (which llama.cpp's server, LM
//! Studio and vLLM serve too).
//!
//! Ollama's API: `GET /api/tags`, non-streaming `POST /api/chat` (an empty `messages` is the
//! load request, answered with `done_reason: "load"`) and `POST /api/embed`. The OpenAI API:
//! `GET /v1/models`, non-streaming `POST /v1/chat/completions` and `POST /v1/embeddings`. Both in
//! the servers' real response shapes. Chat is answered with a scripted [`ChatReply`] (success,
//! prose, bad indices, slow, HTTP error), embeddings with an [`EmbedReply`] (a deterministic
//! bag-of-words embedding, or a failure); a model it does not list gets a 404 (as a model not
//! pulled does); [`MockOllama::set_load_time`] makes the model cold, so the first request that
//! needs it waits for it to load. Every request is recorded so tests can check what was sent
//! (e.g. `options.num_ctx`) and how often (caching).
//! It runs on its own thread and runtime, so sync tests can use it; dropping it stops it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// How the mock answers a chat request (either API) for a listed model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChatReply {
    /// Message content `{"files": [...]}` with these file numbers, as given (a valid pick, or
    /// one with a duplicate, too few, or an invented number).
    Pick(Vec<i64>),
    /// This exact message content.
    Content(String),
    /// Wait, then answer as the inner reply.
    Delayed(Duration, Box<ChatReply>),
    /// This HTTP status with the API's error body.
    Error(u16, String),
}

impl ChatReply {
    /// A valid pick of `pick` of `files` files: the last ones, last first.
    pub fn last(files: usize, pick: usize) -> Self {
        Self::Pick((0..files as i64).rev().take(pick).collect())
    }

    /// A valid pick wrapped in prose, as chatty models answer.
    pub fn prose(files: usize, pick: usize) -> Self {
        let picked: Vec<String> = (0..files).rev().take(pick).map(|i| i.to_string()).collect();
        Self::Content(format!(
            "Sure! Here are the most relevant files:\n{{\"files\": [{}]}}",
            picked.join(", ")
        ))
    }

    /// `pick` file numbers where one appears twice.
    pub fn duplicate_index(pick: usize) -> Self {
        let mut picked: Vec<i64> = (0..pick as i64).collect();
        if let Some(last) = picked.last_mut() {
            *last = 0;
        }
        Self::Pick(picked)
    }

    /// One file fewer than asked for.
    pub fn too_few(pick: usize) -> Self {
        Self::Pick((0..pick.saturating_sub(1) as i64).collect())
    }

    /// `pick` file numbers, the first of which is not a file.
    pub fn invented_index(files: usize, pick: usize) -> Self {
        Self::Pick(
            (0..pick as i64)
                .map(|i| if i == 0 { files as i64 } else { i })
                .collect(),
        )
    }

    /// A valid pick, after `delay`.
    pub fn slow(files: usize, pick: usize, delay: Duration) -> Self {
        Self::Delayed(delay, Box::new(Self::last(files, pick)))
    }

    /// HTTP 500 with a runner crash message.
    pub fn server_error() -> Self {
        Self::Error(
            500,
            "llama runner process has terminated: exit status 2".to_owned(),
        )
    }
}

/// How the mock answers an embeddings request (either API) for a listed model.
#[derive(Clone, Debug, PartialEq)]
pub enum EmbedReply {
    /// A bag-of-words embedding of each input: every word (lowercased alphanumeric run) is
    /// replaced by its alias if it has one, then hashed into one of [`EMBED_DIMENSIONS`]
    /// buckets; the vector is L2-normalized as Ollama's are. Texts sharing words, or words
    /// aliased to the same concept, point the same way, so tests control what is "related".
    BagOfWords {
        /// `(word, concept)` pairs, e.g. `("compiler", "build")`.
        aliases: Vec<(String, String)>,
    },
    /// These embeddings whatever the input (wrong count, ragged dimensions, zero vectors).
    Fixed(Vec<Vec<f64>>),
    /// Wait, then answer as the inner reply.
    Delayed(Duration, Box<EmbedReply>),
    /// This HTTP status with the API's error body.
    Error(u16, String),
}

/// Length of the [`EmbedReply::BagOfWords`] vectors.
pub const EMBED_DIMENSIONS: usize = 64;

impl EmbedReply {
    /// Bag of words with no aliases.
    pub fn bag_of_words() -> Self {
        Self::with_aliases(&[])
    }

    /// Bag of words where each `(word, concept)` word counts as its concept.
    pub fn with_aliases(aliases: &[(&str, &str)]) -> Self {
        Self::BagOfWords {
            aliases: aliases
                .iter()
                .map(|(w, c)| ((*w).to_owned(), (*c).to_owned()))
                .collect(),
        }
    }

    /// The embedding [`EmbedReply::BagOfWords`] gives `text`.
    pub fn embed(aliases: &[(String, String)], text: &str) -> Vec<f64> {
        let mut vector = vec![0.0; EMBED_DIMENSIONS];
        let lower = text.to_lowercase();
        for word in lower.split(|c: char| !c.is_alphanumeric()) {
            if word.is_empty() {
                continue;
            }
            let concept = aliases
                .iter()
                .find(|(w, _)| w == word)
                .map_or(word, |(_, c)| c.as_str());
            // FNV-1a: fixed across runs and platforms, unlike std's RandomState.
            let hash = concept.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            vector[(hash % EMBED_DIMENSIONS as u64) as usize] += 1.0;
        }
        let norm = vector.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm > 0.0 {
            vector.iter_mut().for_each(|x| *x /= norm);
        }
        vector
    }
}

/// A request the mock received.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// The body parsed as JSON (`Null` when empty or not JSON).
    pub body: Value,
}

struct State {
    models: Vec<String>,
    reply: ChatReply,
    embed: EmbedReply,
    requests: Vec<RecordedRequest>,
    /// How long the model takes to load, and when it started loading (the first request that
    /// needed it); `None`: loaded.
    load: Option<(Duration, Option<Instant>)>,
    refuse_json_schema: bool,
}

type Shared = Arc<Mutex<State>>;

fn lock(state: &Shared) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running mock Ollama; stops when dropped.
pub struct MockOllama {
    addr: SocketAddr,
    state: Shared,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MockOllama {
    /// Starts a server that lists `models` in /api/tags, answers chat with `reply` and embed
    /// with [`EmbedReply::bag_of_words`].
    pub fn start(models: &[&str], reply: ChatReply) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state: Shared = Arc::new(Mutex::new(State {
            models: models.iter().map(|m| (*m).to_owned()).collect(),
            reply,
            embed: EmbedReply::bag_of_words(),
            requests: Vec::new(),
            load: None,
            refuse_json_schema: false,
        }));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (shutdown, stop) = oneshot::channel();
        let served = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("mock-ollama".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => {
                            tokio::select! {
                                _ = stop => {}
                                () = serve(listener, served) => {}
                            }
                        }
                        Err(err) => eprintln!("mock ollama: cannot listen: {err}"),
                    }
                });
                // Slow replies may still be sleeping: drop them rather than wait.
                runtime.shutdown_background();
            })?;
        Ok(Self {
            addr,
            state,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Changes the chat reply for later requests.
    pub fn set_reply(&self, reply: ChatReply) {
        lock(&self.state).reply = reply;
    }

    /// Changes the embed reply for later requests.
    pub fn set_embed_reply(&self, reply: EmbedReply) {
        lock(&self.state).embed = reply;
    }

    /// Makes the model cold: the first request that needs it starts loading it, and every
    /// request that needs it waits until `load_time` after that.
    pub fn set_load_time(&self, load_time: Duration) {
        lock(&self.state).load = Some((load_time, None));
    }

    /// The embeddings requests (either API) received so far.
    pub fn embed_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.path == "/api/embed" || r.path == "/v1/embeddings")
            .collect()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state).requests.clone()
    }

    /// The ranking requests (either API) received so far: chat requests that are not
    /// warm-ups.
    pub fn chat_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| is_chat(&r.path) && !is_warm_up(&r.body))
            .collect()
    }

    /// The warm-up requests (either API) received so far: Ollama's load request (no
    /// messages), or a one-token completion.
    pub fn warm_up_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| is_chat(&r.path) && is_warm_up(&r.body))
            .collect()
    }

    /// Refuses OpenAI's `response_format` type `json_schema` with a 500 and its validation
    /// error, as llama-cpp-python's server (0.3.36) does (it takes `json_object` with a
    /// `schema`).
    pub fn refuse_json_schema(&self) {
        lock(&self.state).refuse_json_schema = true;
    }

    /// The model-list requests (either API) received so far.
    pub fn probe_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "GET" && (r.path == "/api/tags" || r.path == "/v1/models"))
            .collect()
    }
}

impl Drop for MockOllama {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A loopback URL where nothing listens (connection refused): a port bound and released.
pub fn closed_port_url() -> std::io::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    drop(listener);
    Ok(format!("http://{addr}"))
}

async fn serve(listener: tokio::net::TcpListener, state: Shared) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(req, Arc::clone(&state)));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn is_chat(path: &str) -> bool {
    path == "/api/chat" || path == "/v1/chat/completions"
}

fn is_warm_up(body: &Value) -> bool {
    body.get("messages")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
        || body.get("max_tokens").and_then(Value::as_u64) == Some(1)
}

/// Which API a path belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Ollama,
    OpenAi,
}

async fn handle(
    req: Request<Incoming>,
    state: Shared,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().to_string();
    let path = req.uri().path().to_owned();
    let body = match req.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let inputs = embed_inputs(&body);
    let warm_up = is_warm_up(&body);
    let json_schema = body
        .get("response_format")
        .and_then(|f| f.get("type"))
        .and_then(Value::as_str)
        == Some("json_schema");
    let (models, reply, embed_reply, loaded_at, refuse_json_schema) = {
        let mut state = lock(&state);
        state.requests.push(RecordedRequest {
            method: method.clone(),
            path: path.clone(),
            body,
        });
        let needs_model = method == "POST" && state.models.contains(&model);
        let loaded_at = match &mut state.load {
            Some((load_time, started)) if needs_model => {
                let started = *started.get_or_insert_with(Instant::now);
                Some(started + *load_time)
            }
            _ => None,
        };
        (
            state.models.clone(),
            state.reply.clone(),
            state.embed.clone(),
            loaded_at,
            state.refuse_json_schema,
        )
    };
    if let Some(at) = loaded_at {
        tokio::time::sleep_until(at.into()).await;
    }
    let api = if path.starts_with("/v1/") {
        Api::OpenAi
    } else {
        Api::Ollama
    };
    Ok(match (method.as_str(), path.as_str()) {
        ("GET", "/api/tags") => json_response(200, &tags(&models)),
        ("GET", "/v1/models") => json_response(200, &model_list(&models)),
        ("POST", "/v1/chat/completions") if refuse_json_schema && json_schema => json_response(
            500,
            &openai_error(
                "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', \
                 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}",
                "internal_server_error",
            ),
        ),
        ("POST", "/api/chat") if models.contains(&model) && warm_up => {
            json_response(200, &loaded_body(&model))
        }
        ("POST", "/v1/chat/completions") if models.contains(&model) && warm_up => {
            json_response(200, &chat_body(api, &model, "{"))
        }
        ("POST", "/api/chat" | "/v1/chat/completions") if models.contains(&model) => {
            chat(api, &model, reply).await
        }
        ("POST", "/api/embed" | "/v1/embeddings") if models.contains(&model) => {
            embed(api, &model, &inputs, embed_reply).await
        }
        ("POST", "/api/chat" | "/api/embed") => json_response(
            404,
            &json!({"error": format!("model \"{model}\" not found, try pulling it first")}),
        ),
        ("POST", "/v1/chat/completions" | "/v1/embeddings") => json_response(
            404,
            &openai_error(&format!("model \"{model}\" not found"), "not_found_error"),
        ),
        _ => text_response(404, "404 page not found"),
    })
}

async fn chat(api: Api, model: &str, mut reply: ChatReply) -> Response<Full<Bytes>> {
    loop {
        match reply {
            ChatReply::Delayed(delay, inner) => {
                tokio::time::sleep(delay).await;
                reply = *inner;
            }
            ChatReply::Error(status, message) => {
                return match api {
                    Api::Ollama => json_response(status, &json!({ "error": message })),
                    Api::OpenAi => json_response(status, &openai_error(&message, "server_error")),
                };
            }
            ChatReply::Pick(picked) => {
                let content = json!({ "files": picked }).to_string();
                return json_response(200, &chat_body(api, model, &content));
            }
            ChatReply::Content(content) => {
                return json_response(200, &chat_body(api, model, &content));
            }
        }
    }
}

/// `input` of an /api/embed request: one string or an array of them.
fn embed_inputs(body: &Value) -> Vec<String> {
    match body.get("input") {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_owned())
            .collect(),
        _ => Vec::new(),
    }
}

async fn embed(
    api: Api,
    model: &str,
    inputs: &[String],
    mut reply: EmbedReply,
) -> Response<Full<Bytes>> {
    loop {
        let embeddings = match reply {
            EmbedReply::Delayed(delay, inner) => {
                tokio::time::sleep(delay).await;
                reply = *inner;
                continue;
            }
            EmbedReply::Error(status, message) => {
                return match api {
                    Api::Ollama => json_response(status, &json!({ "error": message })),
                    Api::OpenAi => json_response(status, &openai_error(&message, "server_error")),
                };
            }
            EmbedReply::Fixed(embeddings) => embeddings,
            EmbedReply::BagOfWords { aliases } => inputs
                .iter()
                .map(|text| EmbedReply::embed(&aliases, text))
                .collect(),
        };
        let body = match api {
            Api::Ollama => json!({
                "model": model,
                "embeddings": embeddings,
                "total_duration": 14_143_917_u64,
                "load_duration": 1_019_500_u64,
                "prompt_eval_count": inputs.len() * 8,
            }),
            // OpenAI's shape, listed last first: a client must order by `index`.
            Api::OpenAi => {
                let data: Vec<Value> = embeddings
                    .into_iter()
                    .enumerate()
                    .rev()
                    .map(|(index, embedding)| {
                        json!({"object": "embedding", "index": index, "embedding": embedding})
                    })
                    .collect();
                json!({
                    "object": "list",
                    "data": data,
                    "model": model,
                    "usage": {"prompt_tokens": inputs.len() * 8, "total_tokens": inputs.len() * 8},
                })
            }
        };
        return json_response(200, &body);
    }
}

/// A non-streaming chat reply in the API's shape (Ollama's durations in nanoseconds).
fn chat_body(api: Api, model: &str, content: &str) -> Value {
    match api {
        Api::Ollama => json!({
            "model": model,
            "created_at": "2026-01-01T00:00:00.000000000Z",
            "message": {"role": "assistant", "content": content},
            "done_reason": "stop",
            "done": true,
            "total_duration": 412_345_678_u64,
            "load_duration": 12_345_678_u64,
            "prompt_eval_count": 1843,
            "prompt_eval_duration": 250_000_000_u64,
            "eval_count": 97,
            "eval_duration": 150_000_000_u64,
        }),
        Api::OpenAi => json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "created": 1_767_225_600_u64,
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": null,
                "finish_reason": "stop",
            }],
            "usage": {"prompt_tokens": 1843, "completion_tokens": 97, "total_tokens": 1940},
        }),
    }
}

/// Ollama's answer to its load request (a chat with no messages).
fn loaded_body(model: &str) -> Value {
    json!({
        "model": model,
        "created_at": "2026-01-01T00:00:00.000000000Z",
        "message": {"role": "assistant", "content": ""},
        "done_reason": "load",
        "done": true,
    })
}

/// An error in the OpenAI API's shape.
fn openai_error(message: &str, kind: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
}

/// /v1/models as an OpenAI-compatible server lists what it serves.
fn model_list(models: &[String]) -> Value {
    let data: Vec<Value> = models
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": 1_767_225_600_u64, "owned_by": "mock"}))
        .collect();
    json!({"object": "list", "data": data})
}

/// /api/tags as Ollama lists pulled models.
fn tags(models: &[String]) -> Value {
    let models: Vec<Value> = models
        .iter()
        .map(|name| {
            json!({
                "name": name,
                "model": name,
                "modified_at": "2026-01-01T00:00:00.000000000Z",
                "size": 986_061_892_u64,
                "digest": "6d3abb8d2d53d1f6e1f1d0b5c8a2e6b2a0d1a9e0f6c3b4a5d6e7f8091a2b3c4d",
                "details": {
                    "parent_model": "",
                    "format": "gguf",
                    "family": "qwen2",
                    "families": ["qwen2"],
                    "parameter_size": "1.5B",
                    "quantization_level": "Q4_K_M",
                },
            })
        })
        .collect();
    json!({ "models": models })
}

fn json_response(status: u16, body: &Value) -> Response<Full<Bytes>> {
    response(status, "application/json; charset=utf-8", body.to_string())
}

fn text_response(status: u16, body: &str) -> Response<Full<Bytes>> {
    response(status, "text/plain; charset=utf-8", body.to_owned())
}

fn response(status: u16, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
