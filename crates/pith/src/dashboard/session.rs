//! The session page's API: `/pith/api/session?id=` (a session's requests in arrival order,
//! each with its stages, savings and cache bust) and `/pith/api/request?id=` (one request's
//! record, the text its turn added to the history when the history holds it, and the tool
//! outputs it first sent as pith's excerpts, each beside its whole size).
//!
//! A session shows its newest requests ([`SESSION_REQUESTS`] unless `limit` asks, at most
//! `SESSION_REQUESTS_MAX`) in arrival order, the order the ledger pairs them for busts; a
//! bust names the part of the prompt that changed and who changed it, from the two requests'
//! stored fingerprints (`Fingerprint::change_words`). A request's turn is `History::turn`,
//! opened read-only per call (SQLite's own connections, so the proxy's writer keeps its
//! locks) and set as text on the page, never markup. A gateway (account keys) shows no turn
//! text: every account's client holds the pages' token, and history is kept per account.

use std::path::Path;

use http::StatusCode;
use pith_proxy::own_pages::OwnPage;
use pith_store::history::{History, ShortenedOutput, TurnMessage};
use pith_store::ledger::{Readers, SESSION_REQUESTS_MAX, SessionRequest};
use serde_json::json;

use super::{error, json_page, query_value};

/// Requests a session page shows unless asked (`limit`): the newest.
const SESSION_REQUESTS: usize = 500;

/// `/pith/api/session?id=SESSION[&limit=N]`.
pub(super) fn session(readers: &Readers, ledger: &Path, query: &str) -> OwnPage {
    let Some(id) = query_value(query, "id").filter(|s| !s.is_empty()) else {
        return error(
            StatusCode::BAD_REQUEST,
            "which session? /pith/api/session?id=SESSION (the ids are in /pith/api/stats' \
             sessions)"
                .into(),
        );
    };
    let limit = match query_value(query, "limit").map(|l| l.parse::<usize>()) {
        None => SESSION_REQUESTS,
        Some(Ok(n)) if (1..=SESSION_REQUESTS_MAX).contains(&n) => n,
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("limit must be a whole number from 1 to {SESSION_REQUESTS_MAX}"),
            );
        }
    };
    match readers.with(ledger, |l| l.session_requests(&id, limit)) {
        Ok(Some(page)) => json_page(StatusCode::OK, &page),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            format!(
                "the ledger has no request of session {}",
                serde_json::Value::from(id)
            ),
        ),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `/pith/api/request?id=ROW`: the record, and `turn` (the messages the request added to its
/// conversation and the reply, as the history keeps them) or `turn_missing` saying why not.
/// A `gateway` (account keys: every account's client holds the pages' token) shows no turn
/// text, which the history keeps per account.
pub(super) fn request(
    readers: &Readers,
    ledger: &Path,
    history: Option<&Path>,
    own_account: &str,
    gateway: bool,
    query: &str,
) -> OwnPage {
    let Some(Ok(id)) = query_value(query, "id").map(|i| i.parse::<i64>()) else {
        return error(
            StatusCode::BAD_REQUEST,
            "which request? /pith/api/request?id=N (a request's id, as /pith/api/requests and \
             /pith/api/session give it)"
                .into(),
        );
    };
    let request = match readers.with(ledger, |l| l.session_request(id)) {
        Ok(Some(r)) => r,
        Ok(None) => {
            return error(
                StatusCode::NOT_FOUND,
                format!("the ledger has no request {id}"),
            );
        }
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let turn = turn_of(&request, history, own_account, gateway);
    let (turn, shortened, missing) = match turn {
        Ok((messages, shortened)) => (Some(messages), shortened, None),
        Err(why) => (None, Vec::new(), Some(why)),
    };
    json_page(
        StatusCode::OK,
        &json!({"request": request, "turn": turn, "turn_missing": missing,
                "shortened": shortened}),
    )
}

/// The text request `request` added to its conversation and the tool outputs it first sent as
/// excerpts (each whole output's size beside the excerpt), or why the page shows none.
fn turn_of(
    request: &SessionRequest,
    history: Option<&Path>,
    own_account: &str,
    gateway: bool,
) -> Result<(Vec<TurnMessage>, Vec<ShortenedOutput>), String> {
    if gateway {
        return Err(
            "this proxy serves several accounts: a conversation's text is shown by \
                    `pith history` to its own account, not on these pages"
                .to_owned(),
        );
    }
    let Some(path) = history else {
        return Err("this proxy records no history ([history] record = false)".to_owned());
    };
    let Some(session) = &request.request.session else {
        return Err("the request has no session, so no conversation".to_owned());
    };
    if !path.exists() {
        return Err("no history has been recorded yet".to_owned());
    }
    let r = &request.request;
    let account = request.account.as_deref().unwrap_or(own_account);
    let (messages, shortened) = History::open_read_only(path)
        .and_then(|h| {
            let reply_ms = pith_history::reply_ms(r.ts_ms, r.total_ms);
            let messages = h.turn(account, &r.client, session, r.ts_ms, reply_ms)?;
            let shortened = h.shortened_by(account, &r.client, session, r.ts_ms)?;
            Ok((messages, shortened))
        })
        .map_err(|e| format!("the history cannot be read: {e}"))?;
    if messages.is_empty() && shortened.is_empty() {
        return Err(
            "the history holds no text of this request (it added nothing new, was not a \
                    conversation's turn, or its conversation was deleted)"
                .to_owned(),
        );
    }
    Ok((messages, shortened))
}
