//! One request, from the socket to the ledger row, in named phases run top to bottom by
//! [`serve`]: route → admit → (pith's own pages) → attribute → read body → answer locally →
//! transform request → forward → respond; the record is finished when the answer's last byte
//! has gone out (`tee::Pending::finish`), or when the request is cut short (`Context`'s drop).
//!
//! Each phase is a function with one job that reads and fills the request's [`Context`]. A
//! phase that cannot go on returns a [`Fault`] (tagged by who caused it, answered in the
//! provider's own error shape), and the request ends there with its ledger row. Every wait on
//! a peer is bounded by a [`crate::Timeouts`] limit.
//!
//! A body on one of the three wires sent compressed is decoded for the phases to read
//! (`Context::whole_prompt`, within one process-wide [`budget::DecodeBudget`]); the client's
//! bytes still go up unless a stage changes them, and a changed body goes up uncompressed.

pub(crate) mod budget;
mod context;
pub(crate) mod headers;
pub(crate) mod token;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use pith_outcome::{Refusal, RequestOutcome};
use pith_transform::pins::LocalAnswer;
use pith_transform::{Fact, Pipeline, PipelineResult, StageReport, StageResult};
use pith_wire::{Provider, Wire, reply};

use crate::fault::Fault;
use crate::last_check;
use crate::own_headers::ACCOUNT_KEY_HEADER;
use crate::own_headers::TOKEN_HEADER;
use crate::own_pages;
use crate::rewrite::ResponseInfo;
use crate::state::State;
pub(crate) use crate::tee::Recorder;
use crate::tee::{End, Idle, ProxyBody, Tee};
pub(crate) use context::Context;
use pith_transform::pins::ANSWERED_FACT;

/// Response header naming what pith changed in the request.
pub const TRANSFORMS_HEADER: &str = "pith-transforms";

/// Serve one request: the phases, in order.
pub(crate) async fn serve(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let (parts, body) = req.into_parts();
    let mut ctx = route(&state, parts);
    if let Some(answer) = liveness(&state, &ctx) {
        // A load balancer's check: not traffic, not refused.
        ctx.forget();
        return Ok(answer);
    }
    if let Err((reason, fault)) = admit(&state, &ctx) {
        return Ok(refuse(&state, ctx, reason, &fault));
    }
    if let Some(page) = own_page(&state, &ctx).await {
        // pith's own pages are not traffic: no ledger row (a dashboard polls).
        ctx.forget();
        return Ok(page);
    }
    match account_of(&state, &ctx.headers) {
        Ok(account) => ctx.account = account,
        Err((reason, fault)) => return Ok(refuse(&state, ctx, reason, &fault)),
    }
    ctx.body = match read_body(&state, body).await {
        Ok(body) => body,
        Err(fault) => return Ok(answer_fault(ctx, &fault)),
    };
    decode_body(&state, &mut ctx).await;
    if let Some(reply) = answer_locally(&state, &mut ctx) {
        return Ok(answer_local(ctx, reply));
    }
    let upstream = transform_request(&state, &mut ctx).await;
    let changed = !last_check::applied(&ctx.transforms).is_empty();
    let mut response = match forward(&state, &ctx, upstream).await {
        Ok(response) => response,
        Err(fault) => return Ok(answer_fault(ctx, &fault)),
    };
    if changed && last_check::is_refusal(response.status()) {
        response = match resend_as_sent(&state, &mut ctx, response).await {
            Ok(response) => response,
            Err(fault) => return Ok(answer_fault(ctx, &fault)),
        };
    }
    if changed && response.status().is_success() {
        ask_for_count(&state, &mut ctx);
    }
    Ok(respond(&state, ctx, response))
}

/// Route: which wire (by path, POST only) and which provider the request is for.
fn route(state: &State, parts: http::request::Parts) -> Context {
    let path = parts.uri.path().to_owned();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| path.clone());
    let mut ctx = Context::new(
        parts.method,
        path,
        path_and_query,
        parts.headers,
        state.config.accounts.own.clone(),
        recorder(state),
    );
    ctx.wire = (ctx.method == Method::POST)
        .then(|| Wire::from_path(&ctx.path))
        .flatten();
    ctx.provider = provider_for(ctx.wire, &ctx.headers);
    ctx
}

/// Where a request's record goes, when a ledger is kept.
pub(crate) fn recorder(state: &State) -> Option<Recorder> {
    state.config.ledger.as_ref().map(|sink| Recorder {
        sink: sink.clone(),
        shutting_down: Arc::clone(&state.shutting_down),
    })
}

/// Anthropic when the request carries Anthropic's headers, else OpenAI (for pass-through paths).
pub(crate) fn provider_for(wire: Option<Wire>, headers: &HeaderMap) -> Provider {
    match wire {
        Some(w) => w.provider(),
        None if headers.contains_key("anthropic-version") || headers.contains_key("x-api-key") => {
            Provider::Anthropic
        }
        None => Provider::OpenAi,
    }
}

/// Refuse: the client gets the fault in its provider's shape; the ledger counts the reason,
/// and writes no row (a refused request was not served).
fn refuse(state: &State, mut ctx: Context, reason: Refusal, fault: &Fault) -> Response<ProxyBody> {
    ctx.forget();
    count_refusal(state, reason);
    fault.response(ctx.provider)
}

/// Count a refused request's reason in the ledger, when one is kept.
pub(crate) fn count_refusal(state: &State, reason: Refusal) {
    if let Some(sink) = &state.config.ledger {
        sink.refused(reason);
    }
}

/// Admit: a method pith proxies, and the access token when the proxy has one.
fn admit(state: &State, ctx: &Context) -> Result<(), (Refusal, Fault)> {
    if ctx.method == Method::CONNECT || ctx.method == Method::TRACE {
        return Err((
            Refusal::Method,
            Fault::client(
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                format!(
                    "pith: {} is not proxied; pith forwards API requests (POST /v1/messages, \
                 /v1/chat/completions, /v1/responses, and other paths as they are)",
                    ctx.method
                ),
            ),
        ));
    }
    match state.config.token.as_deref() {
        Some(expected) if !token::matches(&ctx.headers, expected) => Err((
            Refusal::AccessToken,
            Fault::client(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                format!(
                    "pith: this proxy needs its access token in the {TOKEN_HEADER} header \
                     (the [proxy] token or PITH_PROXY_TOKEN it was started with)"
                ),
            ),
        )),
        _ => Ok(()),
    }
}

/// Attribute: the account a forwarded request belongs to. Without keys, the proxy's own (an
/// account key sent anyway is ignored, and stripped like every pith header); with keys, the
/// account of the key in [`ACCOUNT_KEY_HEADER`], and a request without a known key is refused
/// (401 in the provider's shape, saying which header to send and where keys come from).
/// pith's own pages are not traffic and need no key. Neither the key nor its absence is
/// logged; a refusal is counted by its reason, not written as a row.
pub(crate) fn account_of(state: &State, headers: &HeaderMap) -> Result<String, (Refusal, Fault)> {
    let accounts = &state.config.accounts;
    if accounts.keys.is_empty() {
        return Ok(accounts.own.clone());
    }
    let Some(presented) = headers.get(ACCOUNT_KEY_HEADER) else {
        return Err((
            Refusal::AccountKeyMissing,
            Fault::client(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                format!(
                    "pith: this gateway maps each request to an account by its key: send yours in the \
                 {ACCOUNT_KEY_HEADER} header (the gateway's operator hands out the keys of \
                 [account.keys] in its config, or of the file PITH_ACCOUNT_KEYS names)"
                ),
            ),
        ));
    };
    match accounts.keys.account_for(presented.as_bytes()) {
        Some(account) => Ok(account.to_owned()),
        None => Err((
            Refusal::AccountKeyUnknown,
            Fault::client(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                format!(
                    "pith: the key in the {ACCOUNT_KEY_HEADER} header is not one of this \
                     gateway's account keys ([account.keys] in its config, or the file \
                     PITH_ACCOUNT_KEYS names): ask its operator for yours"
                ),
            ),
        )),
    }
}

/// Whether a request may read pith's own pages: with the proxy's access token when it has
/// one, else under a loopback host name (see [`own_pages::host_is_loopback`]).
fn pages_admitted(state: &State, headers: &HeaderMap) -> bool {
    match state.config.token.as_deref() {
        Some(expected) => token::matches(headers, expected),
        None => own_pages::host_is_loopback(headers),
    }
}

/// Liveness: `GET /pith/health` from a caller the page rules do not admit (HAProxy's
/// `option httpchk GET /pith/health` sends no Host header; a Kubernetes probe names the pod's
/// IP; neither carries the token) gets whether the instance is up, and nothing more. A
/// caller the rules admit gets the whole health page from [`own_page`].
fn liveness(state: &State, ctx: &Context) -> Option<Response<ProxyBody>> {
    let pages = state.config.own_pages.as_ref()?;
    if ctx.path != own_pages::HEALTH_PATH
        || !own_pages::is_served(&ctx.method)
        || pages_admitted(state, &ctx.headers)
    {
        return None;
    }
    Some(own_response(pages.liveness(), None))
}

/// Own pages: the dashboard, its API and `/metrics`, answered by pith (read on the blocking
/// pool: they read the ledger).
async fn own_page(state: &Arc<State>, ctx: &Context) -> Option<Response<ProxyBody>> {
    let pages = state.config.own_pages.as_ref()?;
    if !own_pages::is_own_path(&ctx.path) {
        return None;
    }
    if !own_pages::is_served(&ctx.method) {
        let mut response = own_error(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("pith serves {} with GET only", ctx.path),
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return Some(response);
    }
    if !pages_admitted(state, &ctx.headers) {
        return Some(own_error(
            StatusCode::FORBIDDEN,
            "pith serves its pages to loopback host names only (localhost, 127.0.0.1, [::1]) \
             while it has no access token: set [proxy] token (or PITH_PROXY_TOKEN) to reach \
             them under another name"
                .to_owned(),
        ));
    }
    let csp = pages.content_security_policy().map(str::to_owned);
    let pages = Arc::clone(pages);
    let path = ctx.path.clone();
    let query = ctx
        .path_and_query
        .split_once('?')
        .map(|(_, q)| q.to_owned())
        .unwrap_or_default();
    let page = tokio::task::spawn_blocking(move || pages.get(&path, &query))
        .await
        .ok()??;
    Some(own_response(page, csp))
}

/// An answer of pith's own, with its headers ([`own_headers`]; `csp` on an HTML page).
fn own_response(page: own_pages::OwnPage, csp: Option<String>) -> Response<ProxyBody> {
    let body = match page.body {
        own_pages::OwnBody::Full(bytes) => ProxyBody::full(bytes),
        own_pages::OwnBody::Stream(rx) => ProxyBody::Events(rx),
    };
    let mut response = Response::new(body);
    *response.status_mut() = page.status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(page.content_type),
    );
    own_headers(response.headers_mut());
    if page.content_type.starts_with("text/html")
        && let Some(csp) = csp.and_then(|c| HeaderValue::from_str(&c).ok())
    {
        response
            .headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    response
}

/// The headers every answer on pith's own paths carries: never cached, never sniffed as
/// another type, never framed by another page.
fn own_headers(headers: &mut http::HeaderMap) {
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

/// pith's own refusal on its own paths, as JSON.
fn own_error(status: StatusCode, message: String) -> Response<ProxyBody> {
    let body = serde_json::json!({ "error": message }).to_string();
    let mut response = Response::new(ProxyBody::full(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    own_headers(response.headers_mut());
    response
}

/// Read body: the whole client body, up to the proxy's limit, each chunk within the client
/// idle timeout.
async fn read_body(state: &State, body: Incoming) -> Result<Bytes, Fault> {
    let limit = state.config.max_body;
    let idle = state.config.timeouts.client_idle;
    let mut body = Limited::new(body, limit);
    let mut chunks = Vec::new();
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(_) => {
                return Err(Fault {
                    outcome: RequestOutcome::ClientTimeout,
                    status: StatusCode::REQUEST_TIMEOUT,
                    kind: "invalid_request_error",
                    message: format!(
                        "pith: the request body stalled for {} s (proxy.client_idle_timeout)",
                        idle.as_secs()
                    ),
                });
            }
        };
        match frame {
            Ok(frame) => chunks.extend(frame.into_data().ok()),
            Err(e)
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                return Err(Fault::client(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request_too_large",
                    format!("pith: request body is larger than the proxy's limit of {limit} bytes"),
                ));
            }
            Err(e) => {
                return Err(Fault::client(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    format!("pith: could not read the request body: {e}"),
                ));
            }
        }
    }
    // A body that came in one chunk is kept as it came, without a copy.
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => chunks.concat().into(),
    })
}

/// Read body, continued: a body on one of the three wires that came compressed (Codex signed in
/// with ChatGPT sends zstd) is decoded for the phases to read, on the blocking pool, up to the
/// body limit, through at most [`MAX_CODINGS`] codings, and within the proxy's decode budget
/// (`budget.rs`): the decoded body holds its bytes of it while it lives. The client's bytes
/// are still what goes up while no stage changes them, and what the ledger keeps (its writer
/// decodes them again: a decoded body is never spooled). A body pith cannot decode, or cannot
/// afford to now, is forwarded as it came (the stages find it unreadable and leave it).
async fn decode_body(state: &State, ctx: &mut Context) {
    let Some(encoding) = ctx
        .wire
        .and(ctx.headers.get(header::CONTENT_ENCODING))
        .and_then(|v| v.to_str().ok())
        .filter(|e| !e.trim().eq_ignore_ascii_case("identity"))
        .map(str::to_owned)
    else {
        return;
    };
    if encoding.split(',').count() > MAX_CODINGS {
        tracing::warn!(
            encoding,
            "a request body compressed more than twice; forwarded unread"
        );
        return;
    }
    ctx.request_encoding = Some(encoding.clone());
    let limit = state.config.max_body;
    let body = ctx.body.clone();
    let mut held = state.decode_budget.hold();
    let decode = tokio::task::spawn_blocking(move || {
        let decoded =
            pith_wire::encoding::decode_within(&encoding, &body, limit as u64 + 1, &mut |n| {
                held.grow(n)
            });
        (encoding, decoded.map(|d| (d.len(), held.into_bytes(d))))
    });
    match decode.await {
        Ok((_, Ok((len, decoded)))) if len <= limit => ctx.whole_prompt = Some(decoded),
        Ok((encoding, Ok(_))) => tracing::warn!(
            encoding,
            limit,
            "a compressed request body decodes past the body limit; forwarded unread"
        ),
        Ok((encoding, Err(pith_wire::encoding::DecodeError::OverBudget))) => tracing::warn!(
            encoding,
            budget = state.decode_budget.total(),
            "the bodies being decoded hold the proxy's decode budget (4 times proxy.max_body): \
             this compressed request body is forwarded as it came, unread by pith's stages"
        ),
        Ok((_, Err(e))) => {
            tracing::warn!(%e, "a compressed request body does not decode; forwarded unread");
        }
        Err(e) => tracing::warn!(%e, "decoding a request body failed; forwarded unread"),
    }
}

/// The most codings a request body may name for pith to read it (each is undone up to the body
/// limit, so a chain of them would cost that many times over).
const MAX_CODINGS: usize = 2;

/// Answer locally: a turn of nothing but pin commands is answered by pith, in the wire and
/// mode the client asked for, without a call upstream.
fn answer_locally(state: &State, ctx: &mut Context) -> Option<Response<ProxyBody>> {
    let wire = ctx.wire?;
    let answer = local_answer(state, ctx)?;
    let id = short_id(&ctx.body);
    let rendered = reply::render(
        wire,
        &reply::LocalReply {
            text: &answer.text,
            model: &answer.model,
            stream: answer.stream,
            include_usage: answer.include_usage,
            id: &id,
            created: u64::try_from(ctx.ts_ms / 1000).unwrap_or(0),
        },
    );
    ctx.response_is_sse = answer.stream;
    let mut response = Response::new(ProxyBody::full(Bytes::from(rendered.body)));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(rendered.content_type),
    );
    if let Some(t) = ctx
        .transforms_header
        .as_deref()
        .and_then(|t| HeaderValue::from_str(t).ok())
    {
        headers.insert(HeaderName::from_static(TRANSFORMS_HEADER), t);
    }
    Some(response)
}

/// pith's answer to a turn of nothing but pin commands (the pins stage's, over the request's
/// prompt), with the request's transforms saying so; `None` to forward it. A prompt the pins
/// stage cannot read is forwarded, never answered; like the pipeline, a panic fails open.
pub(crate) fn local_answer(state: &State, ctx: &mut Context) -> Option<LocalAnswer> {
    let pins = state.config.pins.as_ref()?;
    let wire = ctx.wire?;
    let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pins.answer(&pith_transform::Request {
            wire,
            path: &ctx.path,
            headers: &ctx.headers,
            body: ctx.prompt(),
        })
    }));
    let answer = match answered {
        Ok(answer) => answer?,
        Err(_) => {
            state.transform_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("the pins answer panicked; request forwarded");
            return None;
        }
    };
    let facts = vec![
        Fact::count(ANSWERED_FACT, 1),
        Fact::level("pins", answer.pins.len()),
    ];
    let report = StageReport {
        stage: pith_transform::pins::NAME,
        result: StageResult::Applied(facts),
    };
    let applied = PipelineResult {
        reports: vec![report],
        ..PipelineResult::default()
    };
    ctx.transforms_header = applied.transforms_header();
    ctx.transforms = applied.reports;
    Some(answer)
}

/// A short id for pith's own answer: the same request gets the same id.
pub(crate) fn short_id(body: &[u8]) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// What goes upstream: the body and headers after the transforms.
struct Upstream {
    body: Bytes,
    headers: HeaderMap,
}

/// Transform request: run the pipeline on the three wires and apply its edits.
async fn transform_request(state: &Arc<State>, ctx: &mut Context) -> Upstream {
    let result = transform(state, ctx).await;
    let mut headers = headers::end_to_end(&ctx.headers);
    if ctx.upstream_body.is_some() && ctx.whole_prompt.is_some() {
        // A stage changed a body that came compressed: it goes up as the stages left it.
        headers.remove(header::CONTENT_ENCODING);
    }
    Pipeline::apply_header_edits(&result, &mut headers);
    if let (Some(rewrites), Some(wire)) = (&state.config.rewrites, ctx.wire)
        && rewrites.reads_answer(wire, &ctx.transforms)
    {
        // A rewriter has to read the answer: ask for it uncompressed.
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    let body = ctx
        .upstream_body
        .clone()
        .unwrap_or_else(|| ctx.body.clone());
    Upstream { body, headers }
}

/// A changed request sampled for the provider's count: the count is asked once the provider's
/// answer has started (so it never competes with sending the request; a model's answer takes
/// far longer than a count), beside the answer (`crate::provider_count`), and the record
/// waits for it. Only an answered request is counted (a refused one has no usage to compare
/// with), only when a ledger keeps the count, and not one resent as the client sent it (it
/// went up unchanged). Off (the default), one comparison.
fn ask_for_count(state: &State, ctx: &mut Context) {
    if !state.counter.is_on() || ctx.upstream_body.is_none() || !ctx.recorded() {
        return;
    }
    // A wire is a POST's.
    let Some(wire) = ctx.wire else {
        return;
    };
    let (base, path) = state.config.upstream_for(ctx.provider, &ctx.path_and_query);
    ctx.provider_count = crate::provider_count::start(
        &state.counter,
        &state.client,
        base,
        wire,
        &path,
        &ctx.headers,
        ctx.prompt().clone(),
    );
}

/// The pipeline over the request's prompt (on the three wires): its failures logged and
/// counted, the body it made (when a stage changed the request) in `ctx.upstream_body`, its
/// reports in `ctx.transforms`. What is left of the result is its header edits.
pub(crate) async fn transform(state: &Arc<State>, ctx: &mut Context) -> PipelineResult {
    let fetched = match (&state.config.searches, ctx.wire) {
        (Some(memory), Some(wire)) => {
            let session = ctx.session.as_deref().unwrap_or_default();
            crate::search_trip::fetch(memory, wire, session, ctx.prompt()).await
        }
        _ => None,
    };
    let mut result = match ctx.wire {
        Some(wire) if !state.config.pipeline.is_empty() => run_pipeline(state, wire, ctx).await,
        _ => PipelineResult::default(),
    };
    for (stage, error) in result.failures() {
        state.transform_failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            stage,
            error,
            "transform failed; request left unchanged by it"
        );
    }
    ctx.upstream_body = result.body.take().map(Bytes::from);
    ctx.bytes_upstream = ctx.upstream_body.as_ref().unwrap_or(&ctx.body).len() as u64;
    ctx.transforms_header = result.transforms_header();
    ctx.transforms = std::mem::take(&mut result.reports);
    if let Some(fetched) = fetched {
        ctx.transforms.insert(0, fetched);
    }
    result
}

/// The provider refused the request as pith changed it: send the client's own instead, once.
/// When that one is answered, the stages that changed the first stay off for the rest of the
/// session; when it is refused too, the refusal is the request's own, and the stages stay on.
/// The refusal is logged and the row's stage reports say what happened; the client gets the
/// second answer.
async fn resend_as_sent(
    state: &State,
    ctx: &mut Context,
    refusal: Response<Incoming>,
) -> Result<Response<Incoming>, Fault> {
    let status = refusal.status();
    let message = refusal_message(state, refusal).await;
    ctx.upstream_body = None;
    ctx.transforms_header = None;
    ctx.bytes_upstream = ctx.body.len() as u64;
    let as_sent = Upstream {
        body: ctx.body.clone(),
        headers: headers::end_to_end(&ctx.headers),
    };
    let resent = forward(state, ctx, as_sent).await?;
    last_check::settle(
        &state.refused,
        &state.transform_failures,
        ctx.session.as_deref(),
        &mut ctx.transforms,
        status,
        &message,
        last_check::is_refusal(resent.status()),
    );
    Ok(resent)
}

/// The provider's words in a refusal: its body read within the idle timeout and 64 KiB, when
/// it is not compressed.
async fn refusal_message(state: &State, refusal: Response<Incoming>) -> String {
    let encoded = refusal
        .headers()
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|e| !e.eq_ignore_ascii_case("identity"));
    if encoded {
        return "(its body is compressed)".to_owned();
    }
    let read =
        http_body_util::Limited::new(refusal.into_body(), last_check::MAX_REFUSAL_BODY).collect();
    match tokio::time::timeout(state.config.timeouts.upstream_idle, read).await {
        Ok(Ok(body)) => last_check::message_of(&body.to_bytes()),
        _ => "(its body could not be read)".to_owned(),
    }
}

/// Run the pipeline inline (pure CPU, tens of microseconds), or on the blocking pool when a
/// stage may wait on I/O, so one slow request never stalls the event loop. Stages the provider
/// refused in this session stay out.
async fn run_pipeline(state: &Arc<State>, wire: Wire, ctx: &Context) -> PipelineResult {
    let off = state.refused.off(ctx.session.as_deref());
    if !state.config.pipeline.may_block() {
        return state.config.pipeline.run_except(
            &pith_transform::Request {
                wire,
                path: &ctx.path,
                headers: &ctx.headers,
                body: ctx.prompt(),
            },
            &off,
        );
    }
    let (state, path, headers, body) = (
        Arc::clone(state),
        ctx.path.clone(),
        ctx.headers.clone(),
        ctx.prompt().clone(),
    );
    let run = tokio::task::spawn_blocking(move || {
        state.config.pipeline.run_except(
            &pith_transform::Request {
                wire,
                path: &path,
                headers: &headers,
                body: &body,
            },
            &off,
        )
    });
    match run.await {
        Ok(result) => result,
        Err(e) => PipelineResult::failed("pipeline", format!("blocking task failed: {e}")),
    }
}

/// Forward: send the request to its provider and wait for the response head, up to the
/// headers timeout.
async fn forward(
    state: &State,
    ctx: &Context,
    upstream: Upstream,
) -> Result<Response<Incoming>, Fault> {
    let (base, path) = state.config.upstream_for(ctx.provider, &ctx.path_and_query);
    let uri = base.join(&path).map_err(|e| {
        Fault::client(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!(
                "pith: cannot build the upstream URL from {base} and {}: {e}",
                ctx.path_and_query
            ),
        )
    })?;
    let mut req = Request::new(Full::new(upstream.body));
    *req.method_mut() = ctx.method.clone();
    *req.uri_mut() = uri;
    *req.headers_mut() = upstream.headers;
    let provider = ctx.provider;
    // Named as the configuration names it.
    let upstream_name = if std::ptr::eq(base, &state.config.chatgpt) {
        "chatgpt".to_owned()
    } else {
        provider.to_string()
    };
    let limit = state.config.timeouts.upstream_headers;
    let Ok(sent) = tokio::time::timeout(limit, state.client.request(req)).await else {
        let message = format!(
            "pith: the {upstream_name} upstream {base} sent no response headers within {} s \
             (proxy.upstream_headers_timeout)",
            limit.as_secs()
        );
        tracing::warn!("{message}");
        return Err(Fault::upstream_timeout(provider, message));
    };
    sent.map_err(|e| {
        let cause = crate::fault::with_causes(&e);
        if e.is_connect() {
            let message =
                format!("pith could not reach the {upstream_name} upstream {base}: {cause}");
            tracing::warn!("{message}");
            Fault::unreachable(message)
        } else {
            let message = format!(
                "pith: the {upstream_name} upstream {base} did not answer in HTTP: {cause}"
            );
            tracing::warn!("{message}");
            Fault::upstream_broken(message)
        }
    })
}

/// Respond: the provider's status and end-to-end headers, plus the disclosure of what pith
/// changed; the body streams through the tee (and the response rewriter, when one applies).
fn respond(state: &State, mut ctx: Context, response: Response<Incoming>) -> Response<ProxyBody> {
    let (mut parts, incoming) = response.into_parts();
    let mut headers = headers::end_to_end(&parts.headers);
    if let Some(len) = parts.headers.get(header::CONTENT_LENGTH) {
        headers.insert(header::CONTENT_LENGTH, len.clone());
    }
    if let Some(t) = ctx
        .transforms_header
        .as_deref()
        .and_then(|t| HeaderValue::from_str(t).ok())
    {
        headers.insert(HeaderName::from_static(TRANSFORMS_HEADER), t);
    }
    ctx.status = Some(parts.status);
    ctx.response_is_sse = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    ctx.content_encoding = parts
        .headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let rewriter = match (ctx.wire, &state.config.rewrites) {
        (Some(wire), Some(rewrites)) => rewrites.for_response(&ResponseInfo {
            wire,
            path: &ctx.path,
            session: ctx.session.as_deref(),
            status: parts.status,
            sse: ctx.response_is_sse,
            content_encoding: ctx.content_encoding.as_deref(),
            transforms: &ctx.transforms,
        }),
        _ => None,
    };
    if rewriter.is_some() {
        // The rewritten body's length is not the provider's.
        headers.remove(header::CONTENT_LENGTH);
    }
    parts.headers = headers;
    let sse_wire = ctx.wire.filter(|_| ctx.response_is_sse);
    let idle = Idle::new(state.config.timeouts.upstream_idle, ctx.provider, sse_wire);
    let pending = ctx.take_pending(RequestOutcome::Ok).map(Box::new);
    if let Some(p) = &pending {
        // The client gets the headers now: the ledger hears of the request before its end.
        p.recorder.sink.opened(&p.record);
    }
    let tee = Tee::new(incoming, pending, rewriter, idle);
    Response::from_parts(parts, ProxyBody::tee(tee))
}

/// The request ends with a fault pith answers in the provider's shape.
fn answer_fault(mut ctx: Context, fault: &Fault) -> Response<ProxyBody> {
    let response = fault.response(ctx.provider);
    ctx.status = Some(fault.status);
    if let Some(pending) = ctx.take_pending(fault.outcome) {
        pending.finish(End::Complete, Some(fault.message.clone()));
    }
    response
}

/// The request ends with pith's own answer.
fn answer_local(mut ctx: Context, reply: Response<ProxyBody>) -> Response<ProxyBody> {
    ctx.status = Some(reply.status());
    if let Some(pending) = ctx.take_pending(RequestOutcome::Local) {
        pending.finish(End::Complete, None);
    }
    reply
}
