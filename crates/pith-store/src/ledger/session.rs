//! Reading one session, request by request, for the dashboard's session page: each request's
//! record, every stage's entry, its savings and its cache bust with the segment named.

use pith_wire::Wire;
use pith_wire::fingerprint::Fingerprint;

use super::query::{RECENT_WITHOUT_STAGES, recent_row};
use super::*;

/// At most this many of a session's requests are read at once (the newest).
pub const SESSION_REQUESTS_MAX: usize = 2_000;

/// A session's requests, oldest first.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SessionRequests {
    /// The session.
    pub session: String,
    /// Its requests in the ledger, all of them.
    pub total: u64,
    /// The newest of them (at most the limit asked for), in arrival order.
    pub requests: Vec<SessionRequest>,
}

/// One request as the session page shows it: the live view's columns and the rest of its
/// record.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SessionRequest {
    /// What the live view shows of it.
    #[serde(flatten)]
    pub request: Recent,
    /// When it arrived, in µs (the order its session's requests are paired in); `None` in
    /// rows written before it was kept.
    pub arrival_us: Option<i64>,
    /// `POST`, `GET`, or `WEBSOCKET` for a socket's turn.
    pub method: String,
    /// The error, when it did not end `ok`.
    pub error: Option<String>,
    /// Bytes the client sent, pith sent on, and the response.
    pub bytes_client: u64,
    /// See `bytes_client`.
    pub bytes_upstream: u64,
    /// See `bytes_client`.
    pub bytes_response: u64,
    /// Its account (`None`: written before accounts were kept).
    pub account: Option<String>,
    /// The instance that served it.
    pub instance: Option<String>,
    /// Every stage's entry, in pipeline order.
    pub stages: Vec<StageEntry>,
    /// What the stages' edits are estimated to have saved, per stage and rate; a cache bust
    /// pith caused is charged here to the stage that caused it (`bust:<stage>`).
    pub savings: Vec<SavingEntry>,
    /// Whether it was compared with the session's previous request of its model.
    pub compared: bool,
    /// The cache bust it met, if any.
    pub bust: Option<SessionBust>,
}

/// One stage's entry for one request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StageEntry {
    /// The stage's name.
    pub stage: String,
    /// `applied`, `unchanged` or `failed`.
    pub result: String,
    /// What it reported, in its order (applied).
    pub facts: Vec<(String, u64)>,
    /// The named reason (unchanged) or the error (failed).
    pub detail: Option<String>,
}

/// One saving of one request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SavingEntry {
    /// The stage, or `bust:<stage>` for a bust's charge.
    pub stage: String,
    /// The rate (`Band::as_str`).
    pub band: String,
    /// Tokens moved to a cheaper rate (negative: to a dearer one).
    pub tokens: i64,
}

/// Where a request's prompt left the previous one's cache, and who changed it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SessionBust {
    /// The first prompt segment that differed.
    pub segment: u64,
    /// The last segment the previous request was cached through.
    pub cached_through: u64,
    /// `pith` or `client`.
    pub cause: String,
    /// Where the prompt changed, in words ("tool definition 3 of 40", "tool definitions: 40,
    /// then 39"), when both prompts' fingerprints keep their layout.
    pub segment_words: Option<String>,
    /// The stage charged for it, when pith caused it.
    pub stage: Option<String>,
}

/// A prompt as `prompts` keeps it: the fingerprint sent, its session, model and arrival.
type KeptPrompt = (Vec<u8>, String, Option<String>, Option<i64>);

const SESSION_COLUMNS: &str = "r.arrival_us, r.method, r.error, r.bytes_client,
    r.bytes_upstream, r.bytes_response, r.account, r.instance, r.bust_checked, r.bust_at,
    r.bust_cached_through, r.bust_cause";

impl Ledger {
    /// The newest `limit` (at most [`SESSION_REQUESTS_MAX`]) requests of `session`, oldest
    /// first (by arrival, as they are paired for busts); `None` when the ledger has none.
    pub fn session_requests(
        &self,
        session: &str,
        limit: usize,
    ) -> Result<Option<SessionRequests>, StoreError> {
        let total: i64 = self.conn.query_row(
            "SELECT count(*) FROM requests WHERE session = ?1",
            params![session],
            |r| r.get(0),
        )?;
        if total == 0 {
            return Ok(None);
        }
        let limit = i64::try_from(limit.min(SESSION_REQUESTS_MAX)).unwrap_or(i64::MAX);
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {RECENT_WITHOUT_STAGES}, {SESSION_COLUMNS} FROM requests r WHERE r.session = ?1
             ORDER BY coalesce(r.arrival_us, r.ts_ms * 1000) DESC, r.id DESC LIMIT ?2"
        ))?;
        let mut requests = stmt
            .query_map(params![session, limit], session_row)?
            .collect::<Result<Vec<_>, _>>()?;
        requests.reverse();
        self.complete(&mut requests)?;
        Ok(Some(SessionRequests {
            session: session.to_owned(),
            total: to_u64(total),
            requests,
        }))
    }

    /// The request with row id `id`, as [`Ledger::session_requests`] gives it.
    pub fn session_request(&self, id: i64) -> Result<Option<SessionRequest>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {RECENT_WITHOUT_STAGES}, {SESSION_COLUMNS} FROM requests r WHERE r.id = ?1"
        ))?;
        let Some(request) = stmt.query_row(params![id], session_row).optional()? else {
            return Ok(None);
        };
        let mut one = [request];
        self.complete(&mut one)?;
        let [request] = one;
        Ok(Some(request))
    }

    /// Add the requests' stages, savings and their busts' segments and stages: one query per
    /// table for all of them (the ids as a JSON array), not one per request.
    fn complete(&self, requests: &mut [SessionRequest]) -> Result<(), StoreError> {
        let ids: Vec<i64> = requests.iter().map(|r| r.request.id).collect();
        let all = serde_json::Value::from(ids).to_string();
        let mut facts: HashMap<(i64, String), Vec<(String, u64)>> = HashMap::new();
        let mut stmt = self.conn.prepare_cached(
            "SELECT request_id, stage, name, value FROM transform_facts
             WHERE request_id IN (SELECT value FROM json_each(?1))
             ORDER BY request_id, stage, position",
        )?;
        let mut rows = stmt.query(params![all])?;
        while let Some(r) = rows.next()? {
            facts
                .entry((r.get(0)?, r.get(1)?))
                .or_default()
                .push((r.get(2)?, to_u64(r.get(3)?)));
        }
        let mut stages: HashMap<i64, Vec<StageEntry>> = HashMap::new();
        let mut stmt = self.conn.prepare_cached(
            "SELECT request_id, stage, result, detail FROM transform_results
             WHERE request_id IN (SELECT value FROM json_each(?1))
             ORDER BY request_id, position",
        )?;
        let mut rows = stmt.query(params![all])?;
        while let Some(r) = rows.next()? {
            let id: i64 = r.get(0)?;
            let stage: String = r.get(1)?;
            stages.entry(id).or_default().push(StageEntry {
                facts: facts.remove(&(id, stage.clone())).unwrap_or_default(),
                stage,
                result: r.get(2)?,
                detail: r.get(3)?,
            });
        }
        let mut savings: HashMap<i64, Vec<SavingEntry>> = HashMap::new();
        let mut stmt = self.conn.prepare_cached(
            "SELECT s.request_id, s.stage, s.band, s.tokens FROM savings s
             LEFT JOIN transform_results t ON t.request_id = s.request_id AND t.stage = s.stage
             WHERE s.request_id IN (SELECT value FROM json_each(?1))
             ORDER BY s.request_id, t.position, s.stage, s.band",
        )?;
        let mut rows = stmt.query(params![all])?;
        while let Some(r) = rows.next()? {
            savings.entry(r.get(0)?).or_default().push(SavingEntry {
                stage: r.get(1)?,
                band: r.get(2)?,
                tokens: r.get(3)?,
            });
        }
        for request in requests {
            let id = request.request.id;
            request.stages = stages.remove(&id).unwrap_or_default();
            request.request.transforms = request
                .stages
                .iter()
                .filter(|e| e.result == "applied")
                .map(|e| e.stage.clone())
                .collect();
            request.savings = savings.remove(&id).unwrap_or_default();
            let Some(bust) = &mut request.bust else {
                continue;
            };
            bust.stage = request
                .savings
                .iter()
                .find_map(|s| s.stage.strip_prefix(BUST_CHARGE))
                .map(str::to_owned);
            bust.segment_words =
                self.bust_words(id, request.request.wire.as_deref(), bust.segment)?;
        }
        Ok(())
    }

    /// Where request `id`'s prompt first differed (segment `segment`) from the prompt before
    /// it in its session, in words ([`Fingerprint::change_words`], from both prompts as sent);
    /// `None` without both fingerprints, or with one kept without its layout.
    pub(super) fn bust_words(
        &self,
        id: i64,
        wire: Option<&str>,
        segment: u64,
    ) -> Result<Option<String>, StoreError> {
        let Some(wire) = wire.and_then(Wire::named) else {
            return Ok(None);
        };
        let kept: Option<KeptPrompt> = self
            .conn
            .prepare_cached(
                "SELECT sent, session, model, arrival_us FROM prompts WHERE request_id = ?1",
            )?
            .query_row(params![id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()?;
        let Some((sent, session, model, arrival)) = kept else {
            return Ok(None);
        };
        // The request it was paired with: the one before it in arrival order.
        let previous: Option<Vec<u8>> = self
            .conn
            .prepare_cached(
                "SELECT sent FROM prompts WHERE session = ?1 AND model IS ?2
                    AND (arrival_us < ?3 OR (arrival_us = ?3 AND request_id < ?4))
                 ORDER BY arrival_us DESC, request_id DESC LIMIT 1",
            )?
            .query_row(params![session, model, arrival, id], |r| r.get(0))
            .optional()?;
        let (Some(next), Ok(at)) = (Fingerprint::from_bytes(&sent), usize::try_from(segment))
        else {
            return Ok(None);
        };
        Ok(
            match previous.as_deref().and_then(Fingerprint::from_bytes) {
                Some(before) => before.change_words(&next, at, wire),
                None => next.segment(at).map(|s| s.words(wire)),
            },
        )
    }

    /// The stage a bust pith caused on request `id` was charged to.
    pub(super) fn bust_stage(&self, id: i64) -> Result<Option<String>, StoreError> {
        let stage: Option<String> = self
            .conn
            .prepare_cached(
                "SELECT stage FROM savings WHERE request_id = ?1
                    AND substr(stage, 1, length(?2)) = ?2 LIMIT 1",
            )?
            .query_row(params![id, BUST_CHARGE], |r| r.get(0))
            .optional()?;
        Ok(stage.and_then(|s| s.strip_prefix(BUST_CHARGE).map(str::to_owned)))
    }
}

/// A request from [`RECENT_WITHOUT_STAGES`] and [`SESSION_COLUMNS`], its stages and savings to come.
fn session_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionRequest> {
    let n = |name: &str| -> rusqlite::Result<u64> {
        Ok(to_u64(r.get::<_, Option<i64>>(name)?.unwrap_or(0)))
    };
    let cause: Option<String> = r.get("bust_cause")?;
    Ok(SessionRequest {
        request: recent_row(r)?,
        arrival_us: r.get("arrival_us")?,
        method: r.get("method")?,
        error: r.get("error")?,
        bytes_client: n("bytes_client")?,
        bytes_upstream: n("bytes_upstream")?,
        bytes_response: n("bytes_response")?,
        account: r.get("account")?,
        instance: r.get("instance")?,
        stages: Vec::new(),
        savings: Vec::new(),
        compared: r.get::<_, i64>("bust_checked")? != 0,
        bust: match cause {
            Some(cause) => Some(SessionBust {
                segment: n("bust_at")?,
                cached_through: n("bust_cached_through")?,
                cause,
                segment_words: None,
                stage: None,
            }),
            None => None,
        },
    })
}
