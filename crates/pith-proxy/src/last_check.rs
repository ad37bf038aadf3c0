//! The provider as the last check. When the provider refuses (400, 422) a request pith's
//! transforms changed, pith sends the client's own request instead, once, and the client gets
//! that answer: no client ever sees an error pith caused. The refused stages stay off for the
//! rest of the session, so its later requests go as the client sent them and its prompt cache
//! stays whole.
//!
//! Only when the client's own request is answered are the stages put off (reported
//! `refused_by_provider`): when it is refused too, the refusal was the request's own, and they
//! stay on. The refusal is read (at most [`MAX_REFUSAL_BODY`]) for its words, which the row
//! keeps; one request, one row. A 401, 429 or 5xx is no refusal of pith's edit (the client's
//! own request would meet it too) and passes on as it came.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use http::StatusCode;
use pith_transform::{StageReport, StageResult};

/// Sessions remembered with their refused stages; the oldest is forgotten past this.
const MAX_SESSIONS: usize = 10_000;

/// The most of a refusal's body read for its message.
pub(crate) const MAX_REFUSAL_BODY: usize = 64 << 10;

/// Per session, the stages the provider refused.
#[derive(Default)]
pub(crate) struct Refused {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    stages: HashMap<String, Vec<&'static str>>,
    order: VecDeque<String>,
}

impl Refused {
    /// The stages to leave out for `session`.
    pub fn off(&self, session: Option<&str>) -> Vec<&'static str> {
        let Some(session) = session else {
            return Vec::new();
        };
        let inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        inner.stages.get(session).cloned().unwrap_or_default()
    }

    /// Leave `stages` out of `session` from now on.
    pub fn refuse(&self, session: Option<&str>, stages: &[&'static str]) {
        let Some(session) = session else { return };
        let mut inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !inner.stages.contains_key(session) {
            inner.order.push_back(session.to_owned());
            if inner.order.len() > MAX_SESSIONS
                && let Some(oldest) = inner.order.pop_front()
            {
                inner.stages.remove(&oldest);
            }
        }
        let off = inner.stages.entry(session.to_owned()).or_default();
        for stage in stages {
            if !off.contains(stage) {
                off.push(stage);
            }
        }
    }
}

/// Whether a provider's answer says the request itself was refused (as opposed to an
/// authentication, rate or server error, which the client's own request would meet too).
pub(crate) fn is_refusal(status: StatusCode) -> bool {
    status == StatusCode::BAD_REQUEST || status == StatusCode::UNPROCESSABLE_ENTITY
}

/// The stages that changed the request.
pub(crate) fn applied(reports: &[StageReport]) -> Vec<&'static str> {
    reports
        .iter()
        .filter(|r| matches!(r.result, StageResult::Applied(_)))
        .map(|r| r.stage)
        .collect()
}

/// The reports once the provider refused the changed request: each stage that changed it
/// failed, with the provider's words, and whether it stays on (the client's own request was
/// refused too: the refusal is the request's, not the stage's); the others as they were.
pub(crate) fn refused_reports(
    reports: &mut [StageReport],
    status: StatusCode,
    message: &str,
    own_refused: bool,
) {
    let then = if own_refused {
        "the client's own request was refused too, so the stage stays on"
    } else {
        "the client's own request was sent instead, and this stage is off for the session"
    };
    failed_reports(reports, status, message, then);
}

/// The reports when the client's own request went up in place of a refused change and the
/// connection ended before its answer: whether the client's own is refused too is not known,
/// so the stages stay on; the refusal is counted.
pub(crate) fn unanswered_resend(
    failures: &std::sync::atomic::AtomicU64,
    reports: &mut [StageReport],
    status: StatusCode,
    message: &str,
) {
    failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let then = "the client's own request was sent instead and the connection ended before its \
                answer, so the stage stays on";
    failed_reports(reports, status, message, then);
}

/// Each stage that changed the request failed, with the provider's words and what followed.
fn failed_reports(reports: &mut [StageReport], status: StatusCode, message: &str, then: &str) {
    for r in reports {
        if matches!(r.result, StageResult::Applied(_)) {
            r.result = StageResult::Failed(format!(
                "the provider refused the request as pith changed it ({}: {message}); {then}",
                status.as_u16()
            ));
        }
    }
}

/// After the client's own request was sent in place of a refused change: the refusal logged
/// and counted, the stages that changed it off for the session unless the client's own was
/// refused too (`own_refused`), and the reports saying so.
pub(crate) fn settle(
    refused: &Refused,
    failures: &std::sync::atomic::AtomicU64,
    session: Option<&str>,
    reports: &mut [StageReport],
    status: StatusCode,
    message: &str,
    own_refused: bool,
) {
    let stages = applied(reports);
    tracing::warn!(
        status = status.as_u16(),
        stages = ?stages,
        message,
        own_refused,
        "the provider refused the request as pith changed it; sent the client's own"
    );
    failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if !own_refused {
        refused.refuse(session, &stages);
    }
    refused_reports(reports, status, message, own_refused);
}

/// The provider's message in a refusal body (Anthropic's `error.message`, OpenAI's
/// `error.message`), else the body's start.
pub(crate) fn message_of(body: &[u8]) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let text = parsed
        .as_ref()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
    text.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_keeps_its_refused_stages_and_the_oldest_is_forgotten() {
        let refused = Refused::default();
        assert!(refused.off(Some("s")).is_empty());
        refused.refuse(Some("s"), &["defer"]);
        refused.refuse(Some("s"), &["defer", "pins"]);
        assert_eq!(refused.off(Some("s")), ["defer", "pins"]);
        refused.refuse(None, &["defer"]);
        assert!(refused.off(None).is_empty());
        for i in 0..MAX_SESSIONS {
            refused.refuse(Some(&format!("x{i}")), &["defer"]);
        }
        assert!(refused.off(Some("s")).is_empty(), "the oldest is forgotten");
        assert_eq!(
            message_of(br#"{"type":"error","error":{"type":"invalid_request_error","message":"tools.3.defer_loading: Extra inputs are not permitted"}}"#),
            "tools.3.defer_loading: Extra inputs are not permitted"
        );
        assert!(is_refusal(StatusCode::BAD_REQUEST));
        assert!(!is_refusal(StatusCode::TOO_MANY_REQUESTS));
    }
}
