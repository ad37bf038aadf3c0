//! One request: read the client body, run the pipeline, forward, stream the answer back.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use pith_transform::{Pipeline, PipelineResult};
use pith_wire::{Provider, Wire, session};

use crate::errors::error_body;
use crate::ledger::{self, LedgerSink, Record};
use crate::tee::{Pending, ProxyBody, Tee};
use crate::upstream::{HttpClient, UpstreamUrl};

/// Response header naming what pith changed in the request.
pub const TRANSFORMS_HEADER: &str = "pith-transforms";

/// Shared by every request of one proxy.
pub(crate) struct State {
    pub client: HttpClient,
    pub anthropic: UpstreamUrl,
    pub openai: UpstreamUrl,
    pub pipeline: Pipeline,
    pub ledger: Option<LedgerSink>,
    pub max_body: usize,
    pub transform_failures: AtomicU64,
}

/// Headers that describe one hop, not the request (RFC 9110 7.6.1), plus those pith recomputes.
fn is_hop_header(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "expect"
            | "host"
            | "content-length"
    )
}

/// Copy `headers` minus hop-by-hop ones (and any the `connection` header names).
fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let named_by_connection: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .collect();
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if is_hop_header(name) || named_by_connection.iter().any(|n| n == name.as_str()) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// Anthropic when the request carries Anthropic's headers, else OpenAI (for pass-through paths).
fn provider_for(wire: Option<Wire>, headers: &HeaderMap) -> Provider {
    match wire {
        Some(w) => w.provider(),
        None if headers.contains_key("anthropic-version") || headers.contains_key("x-api-key") => {
            Provider::Anthropic
        }
        None => Provider::OpenAi,
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn local_error(
    provider: Provider,
    status: StatusCode,
    kind: &str,
    message: &str,
) -> Response<ProxyBody> {
    let mut resp = Response::new(ProxyBody::full(error_body(provider, kind, message)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Run the pipeline inline (pure CPU, tens of microseconds), or on the blocking pool when a
/// stage may wait on I/O, so one slow request never stalls the event loop.
async fn run_pipeline(
    state: &Arc<State>,
    wire: Wire,
    path: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> PipelineResult {
    if !state.pipeline.may_block() {
        return state.pipeline.run(&pith_transform::Request {
            wire,
            path,
            headers,
            body,
        });
    }
    let (state, path, headers, body) = (
        Arc::clone(state),
        path.to_owned(),
        headers.clone(),
        body.clone(),
    );
    let run = tokio::task::spawn_blocking(move || {
        state.pipeline.run(&pith_transform::Request {
            wire,
            path: &path,
            headers: &headers,
            body: &body,
        })
    });
    match run.await {
        Ok(result) => result,
        Err(e) => PipelineResult {
            failed: vec![pith_transform::Failure {
                stage: "pipeline",
                error: format!("blocking task failed: {e}"),
            }],
            ..PipelineResult::default()
        },
    }
}

pub(crate) async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let started = Instant::now();
    let ts_ms = now_ms();
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| path.clone());
    let wire = (parts.method == Method::POST)
        .then(|| Wire::from_path(&path))
        .flatten();
    let provider = provider_for(wire, &parts.headers);

    let mut record = state.ledger.as_ref().map(|_| Record {
        ts_ms,
        client: session::client_from_user_agent(&parts.headers),
        header_session: ledger::header_session(&parts.headers),
        wire,
        provider: Some(provider),
        method: parts.method.to_string(),
        path: path.clone(),
        ..Record::default()
    });
    let finish_local = |record: Option<Record>, status: StatusCode, outcome, error: String| {
        if let (Some(mut r), Some(sink)) = (record, state.ledger.as_ref()) {
            r.status = Some(status.as_u16());
            r.outcome = outcome;
            r.error = Some(error);
            r.total_ms = started.elapsed().as_secs_f64() * 1000.0;
            sink.submit(r);
        }
    };

    let client_body: Bytes = match Limited::new(body, state.max_body).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            let too_large = e
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some();
            let (status, kind, message) = if too_large {
                (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request_too_large",
                    format!(
                        "pith: request body is larger than the proxy's limit of {} bytes",
                        state.max_body
                    ),
                )
            } else {
                (
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    format!("pith: could not read the request body: {e}"),
                )
            };
            finish_local(record, status, "client_error", message.clone());
            return Ok(local_error(provider, status, kind, &message));
        }
    };

    let mut result = match wire {
        Some(w) if !state.pipeline.is_empty() => {
            run_pipeline(&state, w, &path, &parts.headers, &client_body).await
        }
        _ => PipelineResult::default(),
    };
    if !result.failed.is_empty() {
        state
            .transform_failures
            .fetch_add(result.failed.len() as u64, Ordering::Relaxed);
        for f in &result.failed {
            tracing::warn!(stage = f.stage, error = %f.error, "transform failed; request left unchanged by it");
        }
    }

    let mut headers = end_to_end(&parts.headers);
    Pipeline::apply_header_edits(&result, &mut headers);
    let upstream_body = match result.body.take() {
        Some(b) => Bytes::from(b),
        None => client_body.clone(),
    };
    let transforms = result.transforms_header();
    if let Some(r) = record.as_mut() {
        r.request_body = client_body;
        r.bytes_upstream = upstream_body.len() as u64;
        r.transforms = transforms.clone();
        r.transform_failures = u32::try_from(result.failed.len()).unwrap_or(u32::MAX);
        if !result.skipped.is_empty() {
            r.transform_skips = Some(
                result
                    .skipped
                    .iter()
                    .map(|s| format!("{}:{}", s.stage, s.reason))
                    .collect::<Vec<_>>()
                    .join(","),
            );
        }
    }

    let base = match provider {
        Provider::Anthropic => &state.anthropic,
        Provider::OpenAi => &state.openai,
    };
    let uri = match base.join(&path_and_query) {
        Ok(u) => u,
        Err(e) => {
            let message = format!(
                "pith: cannot build the upstream URL from {base} and {path_and_query}: {e}"
            );
            finish_local(
                record,
                StatusCode::BAD_REQUEST,
                "client_error",
                message.clone(),
            );
            return Ok(local_error(
                provider,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &message,
            ));
        }
    };
    let mut upstream_req = Request::new(Full::new(upstream_body));
    *upstream_req.method_mut() = parts.method;
    *upstream_req.uri_mut() = uri;
    *upstream_req.headers_mut() = headers;

    let response = match state.client.request(upstream_req).await {
        Ok(r) => r,
        Err(e) => {
            let mut cause = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                cause.push_str(": ");
                cause.push_str(&s.to_string());
                source = s.source();
            }
            let message = format!("pith could not reach the {provider} upstream {base}: {cause}");
            tracing::warn!("{message}");
            finish_local(
                record,
                StatusCode::BAD_GATEWAY,
                "upstream_unreachable",
                message.clone(),
            );
            return Ok(local_error(
                provider,
                StatusCode::BAD_GATEWAY,
                "api_error",
                &message,
            ));
        }
    };

    let (mut resp_parts, incoming) = response.into_parts();
    let mut resp_headers = end_to_end(&resp_parts.headers);
    if let Some(len) = resp_parts.headers.get(header::CONTENT_LENGTH) {
        resp_headers.insert(header::CONTENT_LENGTH, len.clone());
    }
    if let Some(t) = transforms
        .as_deref()
        .and_then(|t| HeaderValue::from_str(t).ok())
    {
        resp_headers.insert(HeaderName::from_static(TRANSFORMS_HEADER), t);
    }
    let pending = match (record, state.ledger.as_ref()) {
        (Some(mut r), Some(sink)) => {
            r.status = Some(resp_parts.status.as_u16());
            r.response_is_sse = resp_parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
            r.content_encoding = resp_parts
                .headers
                .get(header::CONTENT_ENCODING)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            if !resp_parts.status.is_success() {
                r.outcome = "upstream_error";
            }
            Some(Box::new(Pending {
                record: r,
                sink: sink.clone(),
                started,
            }))
        }
        _ => None,
    };
    resp_parts.headers = resp_headers;
    Ok(Response::from_parts(
        resp_parts,
        ProxyBody::Tee(Tee::new(incoming, pending)),
    ))
}
