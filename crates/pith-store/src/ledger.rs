//! The request ledger: one row per request that passed through the proxy, with what each
//! transform stage did to it (`transform_results`, `transform_facts`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rusqlite::OptionalExtension;
use rusqlite::{Connection, params};

use crate::sqlite::{self, StoreError};

const MIGRATIONS: &[&str] = &["
CREATE TABLE requests (
    id                  INTEGER PRIMARY KEY,
    ts_ms               INTEGER NOT NULL,
    client              TEXT NOT NULL,
    session             TEXT,
    wire                TEXT,
    provider            TEXT NOT NULL,
    model               TEXT,
    method              TEXT NOT NULL,
    path                TEXT NOT NULL,
    status              INTEGER,
    outcome             TEXT NOT NULL,
    error               TEXT,
    bytes_client        INTEGER NOT NULL,
    bytes_upstream      INTEGER NOT NULL,
    bytes_response      INTEGER NOT NULL,
    tools_bytes         INTEGER NOT NULL,
    system_bytes        INTEGER NOT NULL,
    messages_bytes      INTEGER NOT NULL,
    other_bytes         INTEGER NOT NULL,
    input_tokens        INTEGER,
    output_tokens       INTEGER,
    cache_write_tokens  INTEGER,
    cache_read_tokens   INTEGER,
    ttfb_ms             REAL,
    total_ms            REAL NOT NULL,
    transforms          TEXT,
    transform_skips     TEXT,
    transform_failures  INTEGER NOT NULL,
    local               INTEGER NOT NULL
);
CREATE INDEX requests_ts ON requests (ts_ms);
CREATE INDEX requests_session ON requests (session, ts_ms);
CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
", "
-- What each transform stage did to a request, as data instead of header text.
CREATE TABLE transform_results (
    request_id INTEGER NOT NULL REFERENCES requests (id),
    stage      TEXT NOT NULL,
    position   INTEGER NOT NULL, -- the stage's place in the pipeline
    result     TEXT NOT NULL,   -- applied, unchanged, failed
    detail     TEXT,            -- the named reason (unchanged) or the error (failed)
    PRIMARY KEY (request_id, stage)
) WITHOUT ROWID;
CREATE TABLE transform_facts (
    request_id INTEGER NOT NULL REFERENCES requests (id),
    stage      TEXT NOT NULL,
    position   INTEGER NOT NULL,
    name       TEXT NOT NULL,
    kind       TEXT NOT NULL,   -- count, chars_kept_out
    value      INTEGER NOT NULL,
    PRIMARY KEY (request_id, stage, position)
) WITHOUT ROWID;

-- Rows written by schema 1 kept this as text: `stage:reason` joined by `,` ...
WITH RECURSIVE skips (id, entry, rest) AS (
    SELECT id, NULL, transform_skips || ',' FROM requests WHERE transform_skips IS NOT NULL
    UNION ALL
    SELECT id, substr(rest, 1, instr(rest, ',') - 1), substr(rest, instr(rest, ',') + 1)
    FROM skips WHERE rest != ''
)
INSERT OR IGNORE INTO transform_results (request_id, stage, position, result, detail)
SELECT id, substr(entry, 1, instr(entry, ':') - 1), 0, 'unchanged', substr(entry, instr(entry, ':') + 1)
FROM skips WHERE instr(entry, ':') > 1;

-- ... and the header value: `stage;name=value;...` joined by `, `. Only `defer` existed then,
-- and its `chars` fact counted characters kept out of context.
WITH RECURSIVE applied (id, entry, rest) AS (
    SELECT id, NULL, transforms || ', ' FROM requests WHERE transforms IS NOT NULL
    UNION ALL
    SELECT id, substr(rest, 1, instr(rest, ', ') - 1), substr(rest, instr(rest, ', ') + 2)
    FROM applied WHERE rest != ''
),
stages (id, stage, rest, position, fact) AS (
    SELECT id, substr(entry, 1, instr(entry || ';', ';') - 1),
           substr(entry, instr(entry || ';', ';') + 1) || ';', 0, NULL
    FROM applied WHERE entry IS NOT NULL AND entry != ''
    UNION ALL
    SELECT id, stage, substr(rest, instr(rest, ';') + 1), position + 1,
           substr(rest, 1, instr(rest, ';') - 1)
    FROM stages WHERE rest != '' AND rest != ';'
)
INSERT OR IGNORE INTO transform_facts (request_id, stage, position, name, kind, value)
SELECT id, stage, position - 1, substr(fact, 1, instr(fact, '=') - 1),
       CASE WHEN stage = 'defer' AND substr(fact, 1, instr(fact, '=') - 1) = 'chars'
            THEN 'chars_kept_out' ELSE 'count' END,
       CAST(substr(fact, instr(fact, '=') + 1) AS INTEGER)
FROM stages WHERE fact IS NOT NULL AND instr(fact, '=') > 1;

WITH RECURSIVE applied (id, entry, rest) AS (
    SELECT id, NULL, transforms || ', ' FROM requests WHERE transforms IS NOT NULL
    UNION ALL
    SELECT id, substr(rest, 1, instr(rest, ', ') - 1), substr(rest, instr(rest, ', ') + 2)
    FROM applied WHERE rest != ''
)
INSERT OR IGNORE INTO transform_results (request_id, stage, position, result, detail)
SELECT id, substr(entry, 1, instr(entry || ';', ';') - 1), 0, 'applied', NULL
FROM applied WHERE entry IS NOT NULL AND entry != '';

-- Failures were only counted; their stage was not kept.
INSERT OR IGNORE INTO transform_results (request_id, stage, position, result, detail)
SELECT id, 'unknown', 1, 'failed', transform_failures || ' stage(s) failed (recorded before schema 2)'
FROM requests WHERE transform_failures > 0;

-- pith answered without the provider: now its own outcome. Nothing ever set the column.
UPDATE requests SET outcome = 'local' WHERE local != 0 AND outcome = 'ok';
ALTER TABLE requests DROP COLUMN transforms;
ALTER TABLE requests DROP COLUMN transform_skips;
ALTER TABLE requests DROP COLUMN transform_failures;
ALTER TABLE requests DROP COLUMN local;
", "
-- Schema 3: each request's prompt fingerprint (pith_wire::fingerprint), for cache-bust
-- detection without keeping bodies: as sent upstream, and as the client sent it when that
-- differs (NULL: the same). In a table of their own: they are the widest thing a row has, and
-- every aggregate scans `requests`.
CREATE TABLE prompts (
    request_id INTEGER PRIMARY KEY REFERENCES requests(id),
    session    TEXT NOT NULL,
    model      TEXT,
    sent       BLOB NOT NULL,
    as_client  BLOB
);
CREATE INDEX prompts_session_model ON prompts (session, model, request_id);
-- Decided when the row is written, against the session's previous request of the same model:
-- checked (1 when there was one), the first differing segment of a bust, the segment the
-- previous request was cached through, and who caused it ('pith' or 'client').
ALTER TABLE requests ADD COLUMN bust_checked INTEGER NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN bust_at INTEGER;
ALTER TABLE requests ADD COLUMN bust_cached_through INTEGER;
ALTER TABLE requests ADD COLUMN bust_cause TEXT;
CREATE INDEX requests_busts ON requests (id) WHERE bust_cause IS NOT NULL;

-- Totals kept up to date as rows are written, so a report over the whole ledger reads a row
-- per (session, model) and per stage instead of scanning every request. `k` is the group's
-- key (session and model, NULL marked), `detail` '' for none.
CREATE TABLE group_totals (
    k           TEXT PRIMARY KEY,
    session     TEXT,
    model       TEXT,
    client      TEXT NOT NULL,
    requests    INTEGER NOT NULL,
    with_usage  INTEGER NOT NULL,
    input       INTEGER NOT NULL,
    output      INTEGER NOT NULL,
    cache_write INTEGER NOT NULL,
    cache_read  INTEGER NOT NULL,
    errors      INTEGER NOT NULL,
    local       INTEGER NOT NULL,
    transformed INTEGER NOT NULL,
    failures    INTEGER NOT NULL,
    first_ms    INTEGER NOT NULL,
    last_ms     INTEGER NOT NULL,
    bust_pairs  INTEGER NOT NULL,
    busts_pith  INTEGER NOT NULL,
    busts_client INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE stage_result_totals (
    stage  TEXT NOT NULL,
    result TEXT NOT NULL,
    detail TEXT NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (stage, result, detail)
) WITHOUT ROWID;
CREATE TABLE stage_fact_totals (
    stage TEXT NOT NULL,
    name  TEXT NOT NULL,
    kind  TEXT NOT NULL,
    total INTEGER NOT NULL,
    PRIMARY KEY (stage, name, kind)
) WITHOUT ROWID;
INSERT INTO group_totals
SELECT coalesce('s' || session, '-') || char(31) || coalesce('m' || model, '-'), session, model,
       min(client), count(*), count(input_tokens), coalesce(sum(input_tokens), 0),
       coalesce(sum(output_tokens), 0), coalesce(sum(cache_write_tokens), 0),
       coalesce(sum(cache_read_tokens), 0), sum(outcome NOT IN ('ok', 'local')),
       sum(outcome = 'local'),
       sum(EXISTS (SELECT 1 FROM transform_results t
                   WHERE t.request_id = requests.id AND t.result = 'applied')),
       sum((SELECT count(*) FROM transform_results t
            WHERE t.request_id = requests.id AND t.result = 'failed')),
       min(ts_ms), max(ts_ms), 0, 0, 0
FROM requests GROUP BY session, model;
INSERT INTO stage_result_totals
SELECT stage, result, CASE WHEN result = 'unchanged' THEN coalesce(detail, '') ELSE '' END, count(*)
FROM transform_results GROUP BY 1, 2, 3;
INSERT INTO stage_fact_totals SELECT stage, name, kind, sum(value) FROM transform_facts GROUP BY 1, 2, 3;
", "
-- Schema 4: cache writes by lifetime (the one-hour part of cache_write_tokens; the rest are
-- five-minute writes), and what each transform's edits are estimated to have saved, in tokens
-- by the rate they would have been billed at (`pith_wire::usage::Band`): the cache state the
-- real request had where the characters sit. Negative when an edit added more than it kept
-- out. Prices are applied when read, so a changed price list reprices the past.
ALTER TABLE requests ADD COLUMN cache_write_1h_tokens INTEGER;
ALTER TABLE group_totals ADD COLUMN cache_write_1h INTEGER NOT NULL DEFAULT 0;
CREATE TABLE savings (
    request_id INTEGER NOT NULL REFERENCES requests (id),
    stage      TEXT NOT NULL,
    band       TEXT NOT NULL,  -- cache_read, cache_write_5m, cache_write_1h, input
    tokens     INTEGER NOT NULL,
    PRIMARY KEY (request_id, stage, band)
) WITHOUT ROWID;
CREATE TABLE saving_totals (
    k       TEXT NOT NULL,     -- group_totals' key
    session TEXT,
    model   TEXT,
    stage   TEXT NOT NULL,
    band    TEXT NOT NULL,
    tokens  INTEGER NOT NULL,
    PRIMARY KEY (k, stage, band)
) WITHOUT ROWID;

-- Before schema 4 only defer kept characters out (of the tools, which sit at the start of the
-- prompt, after the instructions on Responses) and nothing added was recorded; no one-hour
-- split was kept either.
WITH kept (request_id, stage, tokens, rd, wr, last, p) AS (
    SELECT f.request_id, f.stage, (f.value + 3) / 4, coalesce(r.cache_read_tokens, 0),
           coalesce(r.cache_write_tokens, 0),
           max(r.input_tokens + coalesce(r.cache_write_tokens, 0)
               + coalesce(r.cache_read_tokens, 0) - 1, 0),
           CASE WHEN r.wire = 'responses' AND r.tools_bytes + r.system_bytes + r.messages_bytes > 0
                THEN (r.input_tokens + coalesce(r.cache_write_tokens, 0)
                      + coalesce(r.cache_read_tokens, 0)) * r.system_bytes
                     / (r.tools_bytes + r.system_bytes + r.messages_bytes)
                ELSE 0 END
    FROM transform_facts f JOIN requests r ON r.id = f.request_id
    WHERE f.kind = 'chars_kept_out' AND r.input_tokens IS NOT NULL
)
INSERT INTO savings
SELECT request_id, stage,
       CASE WHEN min(p, last) < rd THEN 'cache_read'
            WHEN min(p, last) < rd + wr THEN 'cache_write_5m'
            ELSE 'input' END,
       sum(tokens)
FROM kept GROUP BY 1, 2, 3;
INSERT INTO saving_totals
SELECT coalesce('s' || r.session, '-') || char(31) || coalesce('m' || r.model, '-'), r.session,
       r.model, s.stage, s.band, sum(s.tokens)
FROM savings s JOIN requests r ON r.id = s.request_id
GROUP BY r.session, r.model, s.stage, s.band;
", "
-- Schema 5: the latency histograms kept on write (a report over the whole ledger read every
-- row twice for them). `bucket` is the index of the first bound of LATENCY_BUCKETS_MS at or
-- above the value, 10 past the last: changing those bounds needs a migration.
CREATE TABLE latency_totals (
    metric TEXT NOT NULL,    -- total_ms, ttfb_ms
    bucket INTEGER NOT NULL,
    n      INTEGER NOT NULL,
    sum_ms REAL NOT NULL,
    PRIMARY KEY (metric, bucket)
) WITHOUT ROWID;
INSERT INTO latency_totals
SELECT 'total_ms', CASE WHEN total_ms <= 50 THEN 0 WHEN total_ms <= 100 THEN 1 WHEN total_ms <= 250 THEN 2 WHEN total_ms <= 500 THEN 3 WHEN total_ms <= 1000 THEN 4 WHEN total_ms <= 2500 THEN 5 WHEN total_ms <= 5000 THEN 6 WHEN total_ms <= 10000 THEN 7 WHEN total_ms <= 30000 THEN 8 WHEN total_ms <= 120000 THEN 9 ELSE 10 END, count(*), sum(total_ms)
FROM requests GROUP BY 2;
INSERT INTO latency_totals
SELECT 'ttfb_ms', CASE WHEN ttfb_ms <= 50 THEN 0 WHEN ttfb_ms <= 100 THEN 1 WHEN ttfb_ms <= 250 THEN 2 WHEN ttfb_ms <= 500 THEN 3 WHEN ttfb_ms <= 1000 THEN 4 WHEN ttfb_ms <= 2500 THEN 5 WHEN ttfb_ms <= 5000 THEN 6 WHEN ttfb_ms <= 10000 THEN 7 WHEN ttfb_ms <= 30000 THEN 8 WHEN ttfb_ms <= 120000 THEN 9 ELSE 10 END, count(*), sum(ttfb_ms)
FROM requests WHERE ttfb_ms IS NOT NULL GROUP BY 2;
", "
-- Schema 6: the account each request belongs to (a shared gateway maps each request to one by
-- the key it sent). NULL for the rows written before: they belong to the ledger's own account
-- (the proxy's `[account] id`), which readers and the team ledger's shipper fill in. Totals per
-- (account, model) kept on write like group_totals (same columns, `account` for `session`), and
-- the savings per (account, model, stage, band) like saving_totals.
ALTER TABLE requests ADD COLUMN account TEXT;
CREATE TABLE account_totals (
    k           TEXT PRIMARY KEY,
    account     TEXT,
    model       TEXT,
    client      TEXT NOT NULL,
    requests    INTEGER NOT NULL,
    with_usage  INTEGER NOT NULL,
    input       INTEGER NOT NULL,
    output      INTEGER NOT NULL,
    cache_write INTEGER NOT NULL,
    cache_read  INTEGER NOT NULL,
    errors      INTEGER NOT NULL,
    local       INTEGER NOT NULL,
    transformed INTEGER NOT NULL,
    failures    INTEGER NOT NULL,
    first_ms    INTEGER NOT NULL,
    last_ms     INTEGER NOT NULL,
    bust_pairs  INTEGER NOT NULL,
    busts_pith  INTEGER NOT NULL,
    busts_client INTEGER NOT NULL,
    cache_write_1h INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE account_saving_totals (
    k       TEXT NOT NULL,     -- account_totals' key
    account TEXT,
    model   TEXT,
    stage   TEXT NOT NULL,
    band    TEXT NOT NULL,
    tokens  INTEGER NOT NULL,
    PRIMARY KEY (k, stage, band)
) WITHOUT ROWID;
INSERT INTO account_totals
SELECT '-' || char(31) || coalesce('m' || model, '-'), NULL, model,
       min(client), count(*), count(input_tokens), coalesce(sum(input_tokens), 0),
       coalesce(sum(output_tokens), 0), coalesce(sum(cache_write_tokens), 0),
       coalesce(sum(cache_read_tokens), 0), sum(outcome NOT IN ('ok', 'local')),
       sum(outcome = 'local'),
       sum(EXISTS (SELECT 1 FROM transform_results t
                   WHERE t.request_id = requests.id AND t.result = 'applied')),
       sum((SELECT count(*) FROM transform_results t
            WHERE t.request_id = requests.id AND t.result = 'failed')),
       min(ts_ms), max(ts_ms), sum(bust_checked), coalesce(sum(bust_cause = 'pith'), 0),
       coalesce(sum(bust_cause = 'client'), 0), coalesce(sum(cache_write_1h_tokens), 0)
FROM requests GROUP BY model;
INSERT INTO account_saving_totals
SELECT '-' || char(31) || coalesce('m' || r.model, '-'), NULL, r.model, s.stage, s.band,
       sum(s.tokens)
FROM savings s JOIN requests r ON r.id = s.request_id
GROUP BY r.model, s.stage, s.band;
"];

/// Name of the counter of ledger rows dropped because the write queue was full.
pub const DROPPED_ROWS: &str = "dropped_rows";

/// Who caused a request to end the way it did, when it did not end well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Party {
    /// The client: a request pith could not forward, or it went away before the answer ended.
    Client,
    /// The provider: unreachable, an error status, or a stream that broke off or reported an error.
    Upstream,
    /// pith itself.
    Pith,
}

/// How a request ended. Stored by [`RequestOutcome::as_str`]; each failure names who caused it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum RequestOutcome {
    /// The provider answered and the answer reached the client.
    #[default]
    Ok,
    /// pith answered without contacting the provider (its own reply, marked as such).
    Local,
    /// The client went away before the answer was complete (the upstream request was cancelled).
    ClientClosed,
    /// The client's request could not be forwarded: unreadable or too large a body, a target
    /// that makes no upstream URL, a method pith does not proxy, a missing access token. pith
    /// answered in the provider's error shape.
    ClientError,
    /// The client stopped sending its request body for longer than the proxy waits.
    ClientTimeout,
    /// No connection to the provider. pith answered with a 502 in the provider's error shape.
    UpstreamUnreachable,
    /// The provider answered with a 4xx or 5xx status (forwarded unchanged).
    UpstreamError,
    /// The provider's answer broke off mid-body (connection reset, protocol error).
    UpstreamBroken,
    /// The provider reported an error event inside a successful stream.
    StreamError,
    /// The provider sent no response headers, or went silent mid-body, for longer than the
    /// proxy waits; pith ended the request with an error naming the limit.
    UpstreamTimeout,
    /// The proxy shut down with the request still open (after its grace period).
    Shutdown,
    /// pith itself failed to handle the request.
    PithError,
}

impl RequestOutcome {
    const ALL: [RequestOutcome; 12] = [
        RequestOutcome::Ok,
        RequestOutcome::Local,
        RequestOutcome::ClientClosed,
        RequestOutcome::ClientError,
        RequestOutcome::ClientTimeout,
        RequestOutcome::UpstreamUnreachable,
        RequestOutcome::UpstreamError,
        RequestOutcome::UpstreamBroken,
        RequestOutcome::StreamError,
        RequestOutcome::UpstreamTimeout,
        RequestOutcome::Shutdown,
        RequestOutcome::PithError,
    ];

    /// The stable name stored in the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestOutcome::Ok => "ok",
            RequestOutcome::Local => "local",
            RequestOutcome::ClientClosed => "client_closed",
            RequestOutcome::ClientError => "client_error",
            RequestOutcome::ClientTimeout => "client_timeout",
            RequestOutcome::UpstreamUnreachable => "upstream_unreachable",
            RequestOutcome::UpstreamError => "upstream_error",
            RequestOutcome::UpstreamBroken => "upstream_broken",
            RequestOutcome::StreamError => "stream_error",
            RequestOutcome::UpstreamTimeout => "upstream_timeout",
            RequestOutcome::Shutdown => "shutdown",
            RequestOutcome::PithError => "pith_error",
        }
    }

    /// The outcome stored as `name`; an unknown name (a newer pith wrote it) reads as a pith
    /// error rather than as success.
    pub fn parse(name: &str) -> RequestOutcome {
        RequestOutcome::ALL
            .into_iter()
            .find(|o| o.as_str() == name)
            .unwrap_or(RequestOutcome::PithError)
    }

    /// Who caused it, when the request did not end well.
    pub fn caused_by(self) -> Option<Party> {
        match self {
            RequestOutcome::Ok | RequestOutcome::Local => None,
            RequestOutcome::ClientClosed
            | RequestOutcome::ClientError
            | RequestOutcome::ClientTimeout => Some(Party::Client),
            RequestOutcome::UpstreamUnreachable
            | RequestOutcome::UpstreamError
            | RequestOutcome::UpstreamBroken
            | RequestOutcome::StreamError
            | RequestOutcome::UpstreamTimeout => Some(Party::Upstream),
            RequestOutcome::Shutdown | RequestOutcome::PithError => Some(Party::Pith),
        }
    }
}

impl std::fmt::Display for RequestOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One number a transform reported, e.g. `tools = 48` of kind `count`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    /// Short stable name, e.g. `tools`.
    pub name: String,
    /// What the number measures (`pith_transform::FactKind::as_str`), e.g. `chars_kept_out`.
    pub kind: String,
    /// The number, in what `kind` says it measures.
    pub value: u64,
}

/// What one transform stage did to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransformResult {
    /// It changed the request; its facts in the order the `pith-transforms` header lists them.
    Applied(Vec<Fact>),
    /// It left the request unchanged, for this named reason (e.g. `already_deferring`).
    Unchanged(String),
    /// It failed and its edit was dropped (the request went on without it); the error.
    Failed(String),
}

impl TransformResult {
    fn as_str(&self) -> &'static str {
        match self {
            TransformResult::Applied(_) => "applied",
            TransformResult::Unchanged(_) => "unchanged",
            TransformResult::Failed(_) => "failed",
        }
    }
}

/// One stage's entry for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transform {
    /// The stage's name (`Stage::name`), e.g. `defer`.
    pub stage: String,
    /// What the stage did.
    pub result: TransformResult,
}

/// One request as the ledger records it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    /// When the request arrived, in milliseconds since the Unix epoch.
    pub ts_ms: i64,
    /// Short client name from the user-agent, e.g. `claude-code`; `unknown` when it has none.
    pub client: String,
    /// Session id: from a session header, else `metadata.user_id`, else `h-` and a hash of the
    /// first user message; `None` when none of them is there.
    pub session: Option<String>,
    /// `anthropic`, `chat`, `responses`; `None` for pass-through paths.
    pub wire: Option<String>,
    /// The upstream the request went to: `anthropic` or `openai`.
    pub provider: String,
    /// The model the request asked for, else the one the response named; `None` when neither did.
    pub model: Option<String>,
    /// HTTP method, e.g. `POST`.
    pub method: String,
    /// Request path without the query, e.g. `/v1/messages`.
    pub path: String,
    /// HTTP status returned to the client; `None` if it went away first.
    pub status: Option<u16>,
    /// How the request ended.
    pub outcome: RequestOutcome,
    /// What went wrong, in words: pith's own fault message, a broken stream, or the error a stream
    /// reported; `None` otherwise (an upstream error status is in `status`).
    pub error: Option<String>,
    /// Length of the request body the client sent.
    pub bytes_client: u64,
    /// Length of the request body sent upstream (differs from `bytes_client` when a stage changed
    /// it; 0 when the request never got that far).
    pub bytes_upstream: u64,
    /// Bytes of response body the provider sent, as encoded on the wire; 0 when pith answered.
    pub bytes_response: u64,
    /// Bytes of the client's body in `tools`.
    pub tools_bytes: u64,
    /// Bytes of the client's body in the system prompt (Anthropic `system`, Responses
    /// `instructions`).
    pub system_bytes: u64,
    /// Bytes of the client's body in the history (`messages`, Responses `input`).
    pub messages_bytes: u64,
    /// Every other byte of the client's body (all of it on pass-through paths).
    pub other_bytes: u64,
    /// Billed tokens the response reported; `None` when it reported none or was not read (an
    /// error status, `count_tokens`, a pass-through path, a body too large to keep).
    pub usage: Option<RowUsage>,
    /// Milliseconds from arrival to the provider's first body chunk; `None` if none came.
    pub ttfb_ms: Option<f64>,
    /// Milliseconds from arrival until the exchange ended (last byte out, a failure, or the client
    /// going away).
    pub total_ms: f64,
    /// What each stage of the pipeline did, in pipeline order.
    pub transforms: Vec<Transform>,
    /// The prompt as sent upstream, fingerprinted (`pith_wire::fingerprint::Fingerprint`
    /// bytes); `None` off the three wires or for a body that is not JSON.
    pub fingerprint: Option<Vec<u8>>,
    /// The prompt as the client sent it, when a stage changed it (else `None`: the same).
    pub client_fingerprint: Option<Vec<u8>>,
    /// What the stages' edits are estimated to have saved, per (stage, rate); empty without
    /// usage (nothing to price by).
    pub savings: Vec<Saving>,
    /// The account the request belongs to (a gateway's key maps each request to one); `None`
    /// for rows written before ledger schema 6, which belong to the ledger's own account (the
    /// proxy's `[account] id`).
    pub account: Option<String>,
}

impl Row {
    /// What `stage` did to this request, if it looked at it.
    pub fn transform(&self, stage: &str) -> Option<&TransformResult> {
        self.transforms
            .iter()
            .find(|t| t.stage == stage)
            .map(|t| &t.result)
    }
}

/// Disjoint token counters (see `pith_wire::usage::Usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowUsage {
    /// Uncached prompt tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Prompt tokens written to the cache.
    pub cache_write: u64,
    /// The part of `cache_write` written with the one-hour lifetime.
    pub cache_write_1h: u64,
    /// Prompt tokens read from the cache.
    pub cache_read: u64,
}

/// What one stage's edits of one request are estimated to have saved at one rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saving {
    /// The stage's name.
    pub stage: String,
    /// The rate the tokens would have been billed at (`pith_wire::usage::Band::as_str`).
    pub band: String,
    /// Estimated prompt tokens kept out, less those added; negative when it added more.
    pub tokens: i64,
}

/// A [`Saving`] summed over the rows of one (session, model) pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavingTotal {
    /// The session; `None` for rows without one.
    pub session: Option<String>,
    /// The model (what prices the tokens); `None` for rows without one.
    pub model: Option<String>,
    /// The stage.
    pub stage: String,
    /// The rate (`pith_wire::usage::Band::as_str`).
    pub band: String,
    /// The tokens, summed (signed).
    pub tokens: i64,
}

/// Which rows a summary covers.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only rows that arrived at or after this time (ms since the Unix epoch); `None` for all.
    pub since_ms: Option<i64>,
    /// Only the rows of this session; `None` for every session.
    pub session: Option<String>,
}

/// Totals of the rows sharing one (session, model) pair.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Group {
    /// The session; `None` for rows without one.
    pub session: Option<String>,
    /// The client of the group's rows (the first by name, should they differ).
    pub client: String,
    /// The model; `None` for rows without one.
    pub model: Option<String>,
    /// Rows in the group.
    pub requests: u64,
    /// Requests whose response carried usage.
    pub with_usage: u64,
    /// Uncached prompt tokens, summed.
    pub input: u64,
    /// Output tokens, summed.
    pub output: u64,
    /// Prompt tokens written to the cache, summed.
    pub cache_write: u64,
    /// The one-hour part of `cache_write`, summed.
    pub cache_write_1h: u64,
    /// Prompt tokens read from the cache, summed.
    pub cache_read: u64,
    /// Requests compared with the previous one of the group for a cache bust.
    pub bust_pairs: u64,
    /// Busts only in what pith sent.
    pub busts_pith: u64,
    /// Busts the client's own prompts show too.
    pub busts_client: u64,
    /// Requests that did not end `ok` or `local`.
    pub errors: u64,
    /// Requests pith answered itself (outcome `local`).
    pub local: u64,
    /// Requests some stage changed.
    pub transformed: u64,
    /// Stage failures, summed (one request may count several).
    pub transform_failures: u64,
    /// Arrival of the group's first request, ms since the Unix epoch.
    pub first_ms: i64,
    /// Arrival of the group's last request, ms since the Unix epoch.
    pub last_ms: i64,
}

/// Totals of the rows sharing one (account, model) pair: a [`Group`] whose `session` is
/// `None` and whose `client` is the first by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AccountGroup {
    /// The account; `None` for rows written before accounts were kept (the ledger's own).
    pub account: Option<String>,
    /// The totals.
    pub totals: Group,
}

/// A [`Saving`] summed over the rows of one (account, model) pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountSaving {
    /// The account; `None` for rows written before accounts were kept (the ledger's own).
    pub account: Option<String>,
    /// The model (what prices the tokens); `None` for rows without one.
    pub model: Option<String>,
    /// The stage.
    pub stage: String,
    /// The rate (`pith_wire::usage::Band::as_str`).
    pub band: String,
    /// The tokens, summed (signed).
    pub tokens: i64,
}

/// What one stage did over the rows a filter covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StageTotals {
    /// The stage's name.
    pub stage: String,
    /// Requests it changed.
    pub applied: u64,
    /// Requests on which it failed.
    pub failed: u64,
    /// Requests it left unchanged, by reason, reasons sorted.
    pub unchanged: Vec<(String, u64)>,
    /// Its facts summed over the requests it changed: (name, kind, sum), sorted by name.
    pub facts: Vec<(String, String, u64)>,
}

/// Upper bounds (ms) of the latency histograms' buckets.
pub const LATENCY_BUCKETS_MS: [u64; 10] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 120_000,
];

/// The bucket of `ms` in `latency_totals`: the index of the first bound at or above it.
fn latency_bucket(ms: f64) -> i64 {
    LATENCY_BUCKETS_MS
        .iter()
        .position(|b| ms <= *b as f64)
        .unwrap_or(LATENCY_BUCKETS_MS.len()) as i64
}

/// Latency histograms over the filtered requests.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Latency {
    /// The whole exchange, arrival to the last byte out.
    pub total_ms: Histogram,
    /// Arrival to the provider's first body byte.
    pub ttfb_ms: Histogram,
}

/// One histogram: cumulative counts at each of [`LATENCY_BUCKETS_MS`], the count and the sum.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Histogram {
    /// Requests at or under each bound, in bound order.
    pub cumulative: Vec<u64>,
    /// Requests counted.
    pub count: u64,
    /// Their sum, ms.
    pub sum_ms: f64,
}

/// One request as a live view shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Recent {
    /// The row's id: increasing, so a view asks for what came after the last one it has.
    pub id: i64,
    /// When it arrived (ms since the Unix epoch).
    pub ts_ms: i64,
    /// Short client name.
    pub client: String,
    /// Its session.
    pub session: Option<String>,
    /// `anthropic`, `chat`, `responses`.
    pub wire: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The request path.
    pub path: String,
    /// The status the client got.
    pub status: Option<u16>,
    /// How it ended (`RequestOutcome` name).
    pub outcome: String,
    /// Uncached prompt tokens (0 without usage).
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Prompt tokens written to the cache.
    pub cache_write_tokens: u64,
    /// Prompt tokens read from the cache.
    pub cache_read_tokens: u64,
    /// Milliseconds to the provider's first byte.
    pub ttfb_ms: Option<f64>,
    /// Milliseconds until the exchange ended.
    pub total_ms: f64,
    /// The client body's anatomy: bytes of tools, system prompt, history, the rest.
    pub tools_bytes: u64,
    /// See `tools_bytes`.
    pub system_bytes: u64,
    /// See `tools_bytes`.
    pub messages_bytes: u64,
    /// See `tools_bytes`.
    pub other_bytes: u64,
    /// The stages that changed it, in order.
    pub transforms: Vec<String>,
}

/// The requests of one time bucket and one model (a chart over time prices each model apart).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimeBucket {
    /// The bucket's start, ms since the Unix epoch (a multiple of the bucket's width).
    pub start_ms: i64,
    /// The model; `None` for rows without one.
    pub model: Option<String>,
    /// Requests that arrived in it.
    pub requests: u64,
    /// Uncached prompt tokens, summed.
    pub input: u64,
    /// Output tokens, summed.
    pub output: u64,
    /// Cache writes, summed (one-hour ones included).
    pub cache_write: u64,
    /// The one-hour part of `cache_write`.
    pub cache_write_1h: u64,
    /// Cache reads, summed.
    pub cache_read: u64,
}

/// Prompt-cache busts: a request whose prompt differs from the previous request of its
/// session and model at or before the segment that one was cached through.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheBusts {
    /// Requests compared with a previous one.
    pub pairs: u64,
    /// Busts only in what pith sent (the client's own prompts kept their prefix).
    pub by_pith: u64,
    /// Busts the client's own prompts show too.
    pub by_client: u64,
    /// The newest busts, newest first (at most 100).
    pub busts: Vec<Bust>,
}

/// One bust.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Bust {
    /// Its session.
    pub session: String,
    /// Its model.
    pub model: Option<String>,
    /// When the busting request arrived.
    pub ts_ms: i64,
    /// The first prompt segment that differs (0 is the model, then tools, system, messages).
    pub segment: u64,
    /// The last segment the previous request was cached through.
    pub cached_through: u64,
    /// `pith` or `client`.
    pub cause: String,
}

fn group_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Group> {
    Ok(Group {
        session: r.get(0)?,
        client: r.get(1)?,
        model: r.get(2)?,
        requests: to_u64(r.get(3)?),
        with_usage: to_u64(r.get(4)?),
        input: to_u64(r.get(5)?),
        output: to_u64(r.get(6)?),
        cache_write: to_u64(r.get(7)?),
        cache_read: to_u64(r.get(8)?),
        errors: to_u64(r.get(9)?),
        local: to_u64(r.get(10)?),
        transformed: to_u64(r.get(11)?),
        transform_failures: to_u64(r.get(12)?),
        first_ms: r.get(13)?,
        last_ms: r.get(14)?,
        cache_write_1h: to_u64(r.get(15)?),
        bust_pairs: to_u64(r.get(16)?),
        busts_pith: to_u64(r.get(17)?),
        busts_client: to_u64(r.get(18)?),
    })
}

/// The bust between two requests' stored fingerprints (as sent, as the client sent it when
/// different): `(first difference, cached through, cause)`, or `None`.
fn bust_between(
    previous: (&[u8], Option<&[u8]>),
    next: (&[u8], Option<&[u8]>),
) -> Option<(usize, usize, &'static str)> {
    use pith_wire::fingerprint::{Cause, Fingerprint, attribute};
    let read = |b: &[u8]| Fingerprint::from_bytes(b);
    let (prev_sent, next_sent) = (read(previous.0)?, read(next.0)?);
    let prev_client = previous.1.and_then(read);
    let next_client = next.1.and_then(read);
    let (bust, cause) = attribute(
        (&prev_sent, prev_client.as_ref()),
        (&next_sent, next_client.as_ref()),
    )?;
    Some((
        bust.at,
        bust.cached_through,
        match cause {
            Cause::Pith => "pith",
            Cause::Client => "client",
        },
    ))
}

/// The ledger database.
pub struct Ledger {
    conn: Connection,
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// The rows a [`Filter`] covers, as a condition on `requests` (parameters `?1`, `?2`).
const FILTERED: &str =
    "(?1 IS NULL OR requests.ts_ms >= ?1) AND (?2 IS NULL OR requests.session = ?2)";

impl Ledger {
    /// Open the ledger at `path`, creating it and bringing it to the newest schema as needed.
    pub fn open(path: &Path) -> Result<Ledger, StoreError> {
        Ok(Ledger {
            conn: sqlite::open(path, MIGRATIONS)?,
        })
    }

    /// Open the ledger at `path` to read it, changing nothing (`pith stats`): see
    /// [`sqlite::open_read_only`]. A ledger an older pith wrote is refused with the command that
    /// upgrades it, rather than migrated by a reader.
    pub fn open_read_only(path: &Path) -> Result<Ledger, StoreError> {
        Ok(Ledger {
            conn: sqlite::open_read_only(path, MIGRATIONS, "run `pith proxy` once to upgrade it")?,
        })
    }

    /// A new, empty ledger that lives in memory only (tests).
    pub fn open_in_memory() -> Result<Ledger, StoreError> {
        Ok(Ledger {
            conn: sqlite::open_in_memory(MIGRATIONS)?,
        })
    }

    /// Insert rows, with their transform entries, in one transaction.
    pub fn insert(&mut self, rows: &[Row]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        insert_rows(&tx, rows)?;
        tx.commit()?;
        Ok(())
    }

    /// Insert rows and set the counter `name` to `value` in the same transaction: a replica
    /// records how far it has read its source together with what it read, so a crash between
    /// the two cannot make it read a row twice.
    pub fn insert_and_set_counter(
        &mut self,
        rows: &[Row],
        name: &str,
        value: u64,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        insert_rows(&tx, rows)?;
        set_counter(&tx, name, value)?;
        tx.commit()?;
        Ok(())
    }

    /// Set the named counter to `value`.
    pub fn set_counter(&mut self, name: &str, value: u64) -> Result<(), StoreError> {
        set_counter(&self.conn, name, value)
    }

    /// Rows that name no account: written before ledger schema 6.
    pub fn rows_without_account(&self) -> Result<u64, StoreError> {
        let n: i64 = self.conn.query_row(
            "SELECT count(*) FROM requests WHERE account IS NULL",
            [],
            |r| r.get(0),
        )?;
        Ok(to_u64(n))
    }

    /// Empty the ledger: every row, total and counter, in one transaction. For a replica only
    /// (it is pulled again from its source); a proxy's own ledger is never emptied.
    pub fn clear_replica(&mut self) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.execute_batch(
            "DELETE FROM transform_facts; DELETE FROM transform_results; DELETE FROM prompts;
             DELETE FROM savings; DELETE FROM requests; DELETE FROM group_totals;
             DELETE FROM stage_result_totals; DELETE FROM stage_fact_totals;
             DELETE FROM saving_totals; DELETE FROM latency_totals; DELETE FROM account_totals;
             DELETE FROM account_saving_totals; DELETE FROM counters;",
        )?;
        tx.commit()?;
        Ok(())
    }

    /// The id of the newest row; 0 for an empty ledger. Ids only grow (rows are never deleted).
    pub fn last_id(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT coalesce(max(id), 0) FROM requests", [], |r| {
                r.get(0)
            })?)
    }
}

fn set_counter(conn: &Connection, name: &str, value: u64) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO counters (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        params![name, to_i64(value)],
    )?;
    Ok(())
}

/// Insert rows, with their transform entries and the totals they move, inside `tx`.
fn insert_rows(tx: &Connection, rows: &[Row]) -> Result<(), StoreError> {
    let mut request = tx.prepare_cached(
        "INSERT INTO requests (ts_ms, client, session, wire, provider, model, method, path,
                    status, outcome, error, bytes_client, bytes_upstream, bytes_response,
                    tools_bytes, system_bytes, messages_bytes, other_bytes, input_tokens,
                    output_tokens, cache_write_tokens, cache_read_tokens, ttfb_ms, total_ms,
                    bust_checked, bust_at, bust_cached_through, bust_cause, cache_write_1h_tokens,
                    account)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                    ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30)",
    )?;
    let mut result = tx.prepare_cached(
        "INSERT INTO transform_results (request_id, stage, position, result, detail)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let mut fact = tx.prepare_cached(
        "INSERT INTO transform_facts (request_id, stage, position, name, kind, value)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    let mut previous = tx.prepare_cached(
        "SELECT sent, as_client FROM prompts WHERE session = ?1 AND model IS ?2
                 ORDER BY request_id DESC LIMIT 1",
    )?;
    let mut prompt = tx.prepare_cached(
        "INSERT INTO prompts (request_id, session, model, sent, as_client)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let mut saving = tx.prepare_cached(
        "INSERT INTO savings (request_id, stage, band, tokens) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (request_id, stage, band) DO UPDATE SET
                    tokens = tokens + excluded.tokens",
    )?;
    let saving_total_sql = |table: &str| {
        format!(
            "INSERT INTO {table} VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (k, stage, band) DO UPDATE SET tokens = tokens + excluded.tokens"
        )
    };
    let mut saving_total = tx.prepare_cached(&saving_total_sql("saving_totals"))?;
    let mut account_saving_total = tx.prepare_cached(&saving_total_sql("account_saving_totals"))?;
    let mut latency = tx.prepare_cached(
        "INSERT INTO latency_totals VALUES (?1, ?2, 1, ?3)
                 ON CONFLICT (metric, bucket) DO UPDATE SET
                    n = n + 1, sum_ms = sum_ms + excluded.sum_ms",
    )?;
    // group_totals and account_totals have the same columns (account in session's place).
    let group_sql = |table: &str| {
        format!(
            "INSERT INTO {table} VALUES
                    (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14, ?15, ?16,
                     ?17, ?18)
                 ON CONFLICT (k) DO UPDATE SET
                    client = min(client, excluded.client),
                    requests = requests + 1,
                    with_usage = with_usage + excluded.with_usage,
                    input = input + excluded.input,
                    output = output + excluded.output,
                    cache_write = cache_write + excluded.cache_write,
                    cache_read = cache_read + excluded.cache_read,
                    errors = errors + excluded.errors,
                    local = local + excluded.local,
                    transformed = transformed + excluded.transformed,
                    failures = failures + excluded.failures,
                    first_ms = min(first_ms, excluded.first_ms),
                    last_ms = max(last_ms, excluded.last_ms),
                    bust_pairs = bust_pairs + excluded.bust_pairs,
                    busts_pith = busts_pith + excluded.busts_pith,
                    busts_client = busts_client + excluded.busts_client,
                    cache_write_1h = cache_write_1h + excluded.cache_write_1h"
        )
    };
    let mut group = tx.prepare_cached(&group_sql("group_totals"))?;
    let mut account_group = tx.prepare_cached(&group_sql("account_totals"))?;
    let mut result_total = tx.prepare_cached(
        "INSERT INTO stage_result_totals VALUES (?1, ?2, ?3, 1)
                 ON CONFLICT (stage, result, detail) DO UPDATE SET n = n + 1",
    )?;
    let mut fact_total = tx.prepare_cached(
        "INSERT INTO stage_fact_totals VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (stage, name, kind) DO UPDATE SET total = total + excluded.total",
    )?;
    for r in rows {
        let u = r.usage;
        let bust = match (&r.session, &r.fingerprint) {
            (Some(session), Some(fp)) => {
                let before: Option<(Vec<u8>, Option<Vec<u8>>)> = previous
                    .query_row(params![session, r.model], |p| Ok((p.get(0)?, p.get(1)?)))
                    .optional()?;
                before.map(|(sent, client)| {
                    bust_between(
                        (&sent, client.as_deref()),
                        (fp, r.client_fingerprint.as_deref()),
                    )
                })
            }
            _ => None,
        };
        let (checked, bust) = match bust {
            Some(b) => (1i64, b),
            None => (0, None),
        };
        let id = request.insert(params![
            r.ts_ms,
            r.client,
            r.session,
            r.wire,
            r.provider,
            r.model,
            r.method,
            r.path,
            r.status,
            r.outcome.as_str(),
            r.error,
            to_i64(r.bytes_client),
            to_i64(r.bytes_upstream),
            to_i64(r.bytes_response),
            to_i64(r.tools_bytes),
            to_i64(r.system_bytes),
            to_i64(r.messages_bytes),
            to_i64(r.other_bytes),
            u.map(|u| to_i64(u.input)),
            u.map(|u| to_i64(u.output)),
            u.map(|u| to_i64(u.cache_write)),
            u.map(|u| to_i64(u.cache_read)),
            r.ttfb_ms,
            r.total_ms,
            checked,
            bust.map(|b| to_i64(b.0 as u64)),
            bust.map(|b| to_i64(b.1 as u64)),
            bust.map(|b| b.2),
            u.map(|u| to_i64(u.cache_write_1h)),
            r.account,
        ])?;
        if let (Some(session), Some(fp)) = (&r.session, &r.fingerprint) {
            prompt.execute(params![id, session, r.model, fp, r.client_fingerprint])?;
        }
        let applied = r
            .transforms
            .iter()
            .any(|t| matches!(t.result, TransformResult::Applied(_)));
        let failures = r
            .transforms
            .iter()
            .filter(|t| matches!(t.result, TransformResult::Failed(_)))
            .count();
        let key = totals_key('s', r.session.as_deref(), r.model.as_deref());
        let account_key = totals_key('a', r.account.as_deref(), r.model.as_deref());
        let cause = bust.map(|b| b.2);
        let add_to =
            |totals: &mut rusqlite::CachedStatement<'_>, key: &str, first: &Option<String>| {
                totals.execute(params![
                    key,
                    first,
                    r.model,
                    r.client,
                    i64::from(u.is_some()),
                    u.map_or(0, |u| to_i64(u.input)),
                    u.map_or(0, |u| to_i64(u.output)),
                    u.map_or(0, |u| to_i64(u.cache_write)),
                    u.map_or(0, |u| to_i64(u.cache_read)),
                    i64::from(!matches!(
                        r.outcome,
                        RequestOutcome::Ok | RequestOutcome::Local
                    )),
                    i64::from(r.outcome == RequestOutcome::Local),
                    i64::from(applied),
                    failures as i64,
                    r.ts_ms,
                    checked,
                    i64::from(cause == Some("pith")),
                    i64::from(cause == Some("client")),
                    u.map_or(0, |u| to_i64(u.cache_write_1h)),
                ])
            };
        add_to(&mut group, &key, &r.session)?;
        add_to(&mut account_group, &account_key, &r.account)?;
        latency.execute(params!["total_ms", latency_bucket(r.total_ms), r.total_ms])?;
        if let Some(ttfb) = r.ttfb_ms {
            latency.execute(params!["ttfb_ms", latency_bucket(ttfb), ttfb])?;
        }
        for sv in &r.savings {
            saving.execute(params![id, sv.stage, sv.band, sv.tokens])?;
            saving_total.execute(params![
                key, r.session, r.model, sv.stage, sv.band, sv.tokens
            ])?;
            account_saving_total.execute(params![
                account_key,
                r.account,
                r.model,
                sv.stage,
                sv.band,
                sv.tokens
            ])?;
        }
        for t in &r.transforms {
            let detail = match &t.result {
                TransformResult::Unchanged(d) => d.as_str(),
                _ => "",
            };
            result_total.execute(params![t.stage, t.result.as_str(), detail])?;
            if let TransformResult::Applied(facts) = &t.result {
                for f in facts {
                    fact_total.execute(params![t.stage, f.name, f.kind, to_i64(f.value)])?;
                }
            }
        }
        for (position, t) in r.transforms.iter().enumerate() {
            let detail = match &t.result {
                TransformResult::Applied(facts) => {
                    for (n, f) in facts.iter().enumerate() {
                        fact.execute(params![
                            id,
                            t.stage,
                            n as i64,
                            f.name,
                            f.kind,
                            to_i64(f.value)
                        ])?;
                    }
                    None
                }
                TransformResult::Unchanged(d) | TransformResult::Failed(d) => Some(d),
            };
            result.execute(params![
                id,
                t.stage,
                position as i64,
                t.result.as_str(),
                detail
            ])?;
        }
    }
    Ok(())
}

/// The key of a row of `group_totals` (`s`: by session) or `account_totals` (`a`: by
/// account): the two columns with `NULL` marked, as the migrations that fill them write it.
fn totals_key(tag: char, first: Option<&str>, model: Option<&str>) -> String {
    format!(
        "{}\u{1f}{}",
        first.map_or("-".to_owned(), |s| format!("{tag}{s}")),
        model.map_or("-".to_owned(), |m| format!("m{m}"))
    )
}

impl Ledger {
    /// Add `delta` to the named counter.
    pub fn add_counter(&mut self, name: &str, delta: u64) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO counters (name, value) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
            params![name, to_i64(delta)],
        )?;
        Ok(())
    }

    /// The named counter's value; 0 if nothing was ever added to it.
    pub fn counter(&self, name: &str) -> Result<u64, StoreError> {
        let v: Option<i64> = self
            .conn
            .query_row(
                "SELECT value FROM counters WHERE name = ?1",
                params![name],
                |r| r.get(0),
            )
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?;
        Ok(v.map(to_u64).unwrap_or(0))
    }

    /// Totals per (session, model), oldest session first.
    pub fn groups(&self, filter: &Filter) -> Result<Vec<Group>, StoreError> {
        if filter.since_ms.is_some() {
            return self.groups_scanned("session", filter);
        }
        self.groups_kept("group_totals", "session", filter.session.as_deref())
    }

    /// Totals per (account, model), oldest account first; rows from before accounts were
    /// kept are the group with no account (the ledger's own).
    pub fn account_groups(&self, filter: &Filter) -> Result<Vec<AccountGroup>, StoreError> {
        let groups = if filter.since_ms.is_some() || filter.session.is_some() {
            self.groups_scanned("account", filter)?
        } else {
            self.groups_kept("account_totals", "account", None)?
        };
        Ok(groups
            .into_iter()
            .map(|mut totals| AccountGroup {
                account: totals.session.take(),
                totals,
            })
            .collect())
    }

    /// The totals kept as rows were written in `table`, grouped by `by` and model (`by` read
    /// into `Group::session`), only `by = only` when given: one row per group, not a scan.
    fn groups_kept(
        &self,
        table: &str,
        by: &str,
        only: Option<&str>,
    ) -> Result<Vec<Group>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {by}, client, model, requests, with_usage, input, output, cache_write,
                    cache_read, errors, local, transformed, failures, first_ms, last_ms,
                    cache_write_1h, bust_pairs, busts_pith, busts_client
             FROM {table} WHERE (?1 IS NULL OR {by} = ?1)
             ORDER BY first_ms, {by}, model",
        ))?;
        let rows = stmt.query_map(params![only], group_of)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// [`Ledger::groups`] (or by `account`) computed from the requests themselves (any
    /// filter); `by` is read into `Group::session`.
    fn groups_scanned(&self, by: &str, filter: &Filter) -> Result<Vec<Group>, StoreError> {
        let sql = format!(
            "SELECT {by}, min(client), model, count(*),
                    count(input_tokens),
                    coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
                    coalesce(sum(cache_write_tokens), 0), coalesce(sum(cache_read_tokens), 0),
                    sum(outcome NOT IN ('ok', 'local')), sum(outcome = 'local'),
                    sum(EXISTS (SELECT 1 FROM transform_results t
                                WHERE t.request_id = requests.id AND t.result = 'applied')),
                    sum((SELECT count(*) FROM transform_results t
                         WHERE t.request_id = requests.id AND t.result = 'failed')),
                    min(ts_ms), max(ts_ms), coalesce(sum(cache_write_1h_tokens), 0),
                    sum(bust_checked), coalesce(sum(bust_cause = 'pith'), 0),
                    coalesce(sum(bust_cause = 'client'), 0)
             FROM requests
             WHERE {FILTERED}
             GROUP BY {by}, model
             ORDER BY min(ts_ms), {by}, model"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params![filter.since_ms, filter.session], group_of)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// What each transform stage did over the rows `filter` covers, stages sorted by name.
    pub fn stage_totals(&self, filter: &Filter) -> Result<Vec<StageTotals>, StoreError> {
        if filter.since_ms.is_none() && filter.session.is_none() {
            // The totals kept as rows were written.
            return self.stage_totals_from(
                "SELECT stage, result, CASE WHEN result = 'unchanged' THEN detail END, n
                 FROM stage_result_totals WHERE ?1 IS NULL AND ?2 IS NULL ORDER BY 1, 2, 3"
                    .to_owned(),
                "SELECT stage, name, kind, total FROM stage_fact_totals
                 WHERE ?1 IS NULL AND ?2 IS NULL ORDER BY 1, 2, 3"
                    .to_owned(),
                filter,
            );
        }
        self.stage_totals_scanned(filter)
    }

    /// [`Ledger::stage_totals`] computed from the requests themselves (any filter).
    fn stage_totals_scanned(&self, filter: &Filter) -> Result<Vec<StageTotals>, StoreError> {
        // Both queries give (stage, text, text, count) per group: results first, then facts.
        let results = format!(
            "SELECT t.stage, t.result, CASE WHEN t.result = 'unchanged' THEN t.detail END, count(*)
             FROM transform_results t JOIN requests ON requests.id = t.request_id
             WHERE {FILTERED} GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
        );
        let facts = format!(
            "SELECT f.stage, f.name, f.kind, sum(f.value)
             FROM transform_facts f JOIN requests ON requests.id = f.request_id
             WHERE {FILTERED} GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
        );
        self.stage_totals_from(results, facts, filter)
    }

    fn stage_totals_from(
        &self,
        results: String,
        facts: String,
        filter: &Filter,
    ) -> Result<Vec<StageTotals>, StoreError> {
        let mut stages: BTreeMap<String, StageTotals> = BTreeMap::new();
        for (is_fact, sql) in [(false, results), (true, facts)] {
            let mut stmt = self.conn.prepare_cached(&sql)?;
            let mut rows = stmt.query(params![filter.since_ms, filter.session])?;
            while let Some(r) = rows.next()? {
                let stage: String = r.get(0)?;
                let (a, b, n): (String, Option<String>, i64) = (r.get(1)?, r.get(2)?, r.get(3)?);
                let (b, n) = (b.unwrap_or_default(), to_u64(n));
                let s = stages.entry(stage.clone()).or_insert_with(|| StageTotals {
                    stage,
                    ..StageTotals::default()
                });
                match (is_fact, a.as_str()) {
                    (true, _) => s.facts.push((a, b, n)),
                    (false, "applied") => s.applied += n,
                    (false, "failed") => s.failed += n,
                    (false, _) => s.unchanged.push((b, n)),
                }
            }
        }
        Ok(stages.into_values().collect())
    }

    /// Prompt-cache busts over the filtered rows: the pairs checked, busts by cause, and the
    /// newest busts (at most 100). Each row's bust was decided when it was written.
    pub fn cache_busts(&self, filter: &Filter) -> Result<CacheBusts, StoreError> {
        let totals = if filter.since_ms.is_none() {
            "SELECT coalesce(sum(bust_pairs), 0), coalesce(sum(busts_pith), 0),
                    coalesce(sum(busts_client), 0)
             FROM group_totals WHERE ?1 IS NULL AND (?2 IS NULL OR session = ?2)"
                .to_owned()
        } else {
            format!(
                "SELECT coalesce(sum(bust_checked), 0), coalesce(sum(bust_cause = 'pith'), 0),
                    coalesce(sum(bust_cause = 'client'), 0)
             FROM requests WHERE {FILTERED}"
            )
        };
        let (pairs, by_pith, by_client): (i64, i64, i64) =
            self.conn
                .query_row(&totals, params![filter.since_ms, filter.session], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?;
        let list = format!(
            "SELECT session, model, ts_ms, bust_at, bust_cached_through, bust_cause FROM requests
             WHERE bust_cause IS NOT NULL AND {FILTERED} ORDER BY id DESC LIMIT 100"
        );
        let mut stmt = self.conn.prepare_cached(&list)?;
        let busts = stmt
            .query_map(params![filter.since_ms, filter.session], |r| {
                Ok(Bust {
                    session: r.get::<_, Option<String>>(0)?.unwrap_or_default(),
                    model: r.get(1)?,
                    ts_ms: r.get(2)?,
                    segment: to_u64(r.get(3)?),
                    cached_through: to_u64(r.get(4)?),
                    cause: r.get(5)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CacheBusts {
            pairs: to_u64(pairs),
            by_pith: to_u64(by_pith),
            by_client: to_u64(by_client),
            busts,
        })
    }

    /// The filtered requests in buckets of `width_ms` by arrival, per model, oldest first.
    pub fn timeline(&self, filter: &Filter, width_ms: i64) -> Result<Vec<TimeBucket>, StoreError> {
        let width = width_ms.max(1);
        let sql = format!(
            "SELECT (ts_ms / ?3) * ?3, model, count(*), coalesce(sum(input_tokens), 0),
                    coalesce(sum(output_tokens), 0), coalesce(sum(cache_write_tokens), 0),
                    coalesce(sum(cache_write_1h_tokens), 0), coalesce(sum(cache_read_tokens), 0)
             FROM requests WHERE {FILTERED} GROUP BY 1, 2 ORDER BY 1, 2"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params![filter.since_ms, filter.session, width], |r| {
            Ok(TimeBucket {
                start_ms: r.get(0)?,
                model: r.get(1)?,
                requests: to_u64(r.get(2)?),
                input: to_u64(r.get(3)?),
                output: to_u64(r.get(4)?),
                cache_write: to_u64(r.get(5)?),
                cache_write_1h: to_u64(r.get(6)?),
                cache_read: to_u64(r.get(7)?),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The arrival times of the oldest and newest filtered request; `None` when there is none.
    pub fn span(&self, filter: &Filter) -> Result<Option<(i64, i64)>, StoreError> {
        let sql = format!("SELECT min(ts_ms), max(ts_ms) FROM requests WHERE {FILTERED}");
        let (first, last): (Option<i64>, Option<i64>) =
            self.conn
                .query_row(&sql, params![filter.since_ms, filter.session], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
        Ok(first.zip(last))
    }

    /// How long requests took: a histogram of `total_ms` (the whole exchange) and of `ttfb_ms`
    /// (to the provider's first byte, where there was one), over the filtered rows, with the
    /// bucket bounds in [`LATENCY_BUCKETS_MS`].
    pub fn latency(&self, filter: &Filter) -> Result<Latency, StoreError> {
        if filter.since_ms.is_none() && filter.session.is_none() {
            return self.latency_kept();
        }
        self.latency_scanned(filter)
    }

    /// [`Ledger::latency`] over the whole ledger, from the totals kept as rows were written.
    fn latency_kept(&self) -> Result<Latency, StoreError> {
        let mut out = Latency::default();
        for (metric, hist) in [
            ("total_ms", &mut out.total_ms),
            ("ttfb_ms", &mut out.ttfb_ms),
        ] {
            let mut per_bucket = [0u64; LATENCY_BUCKETS_MS.len() + 1];
            let mut stmt = self
                .conn
                .prepare_cached("SELECT bucket, n, sum_ms FROM latency_totals WHERE metric = ?1")?;
            let mut rows = stmt.query(params![metric])?;
            while let Some(r) = rows.next()? {
                let bucket = usize::try_from(r.get::<_, i64>(0)?).unwrap_or(usize::MAX);
                let n = to_u64(r.get(1)?);
                if let Some(slot) = per_bucket.get_mut(bucket) {
                    *slot += n;
                }
                hist.count += n;
                hist.sum_ms += r.get::<_, f64>(2)?;
            }
            let mut running = 0;
            for n in &per_bucket[..LATENCY_BUCKETS_MS.len()] {
                running += n;
                hist.cumulative.push(running);
            }
        }
        Ok(out)
    }

    /// [`Ledger::latency`] computed from the requests themselves (any filter).
    fn latency_scanned(&self, filter: &Filter) -> Result<Latency, StoreError> {
        let buckets: Vec<String> = LATENCY_BUCKETS_MS
            .iter()
            .map(|b| format!("coalesce(sum(COL <= {b}), 0)"))
            .collect();
        let mut out = Latency::default();
        for (column, hist) in [
            ("total_ms", &mut out.total_ms),
            ("ttfb_ms", &mut out.ttfb_ms),
        ] {
            let sql = format!(
                "SELECT count({column}), coalesce(sum({column}), 0), {}
                 FROM requests WHERE {column} IS NOT NULL AND {FILTERED}",
                buckets.join(", ").replace("COL", column)
            );
            self.conn
                .query_row(&sql, params![filter.since_ms, filter.session], |r| {
                    hist.count = to_u64(r.get(0)?);
                    hist.sum_ms = r.get(1)?;
                    for i in 0..LATENCY_BUCKETS_MS.len() {
                        hist.cumulative.push(to_u64(r.get(2 + i)?));
                    }
                    Ok(())
                })?;
        }
        Ok(out)
    }

    /// The newest requests, newest first, at most `limit`, only those after `after_id` when
    /// given (a live view polls with the last id it has).
    pub fn recent(&self, limit: usize, after_id: Option<i64>) -> Result<Vec<Recent>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT r.id, r.ts_ms, r.client, r.session, r.wire, r.model, r.path, r.status,
                    r.outcome, r.input_tokens, r.output_tokens, r.cache_write_tokens,
                    r.cache_read_tokens, r.ttfb_ms, r.total_ms, r.tools_bytes, r.system_bytes,
                    r.messages_bytes, r.other_bytes,
                    (SELECT group_concat(t.stage, ',') FROM transform_results t
                     WHERE t.request_id = r.id AND t.result = 'applied')
             FROM requests r WHERE (?1 IS NULL OR r.id > ?1) ORDER BY r.id DESC LIMIT ?2",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![after_id, limit], |r| {
            let n = |i: usize| -> rusqlite::Result<u64> {
                Ok(to_u64(r.get::<_, Option<i64>>(i)?.unwrap_or(0)))
            };
            let transforms: Option<String> = r.get(19)?;
            Ok(Recent {
                id: r.get(0)?,
                ts_ms: r.get(1)?,
                client: r.get(2)?,
                session: r.get(3)?,
                wire: r.get(4)?,
                model: r.get(5)?,
                path: r.get(6)?,
                status: r.get(7)?,
                outcome: r.get(8)?,
                input_tokens: n(9)?,
                output_tokens: n(10)?,
                cache_write_tokens: n(11)?,
                cache_read_tokens: n(12)?,
                ttfb_ms: r.get(13)?,
                total_ms: r.get(14)?,
                tools_bytes: n(15)?,
                system_bytes: n(16)?,
                messages_bytes: n(17)?,
                other_bytes: n(18)?,
                transforms: transforms
                    .map(|t| t.split(',').map(str::to_owned).collect())
                    .unwrap_or_default(),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every row, oldest first, with its transform entries (tests and export).
    pub fn rows(&self) -> Result<Vec<Row>, StoreError> {
        Ok(self
            .rows_after(0, usize::MAX)?
            .into_iter()
            .map(|(_, row)| row)
            .collect())
    }

    /// At most `limit` rows with an id above `after_id`, oldest first, each with its id: how
    /// the team ledger's shipper reads what it has not sent yet.
    pub fn rows_after(&self, after_id: i64, limit: usize) -> Result<Vec<(i64, Row)>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let last: Option<i64> = self.conn.query_row(
            "SELECT max(id) FROM (SELECT id FROM requests WHERE id > ?1 ORDER BY id LIMIT ?2)",
            params![after_id, limit],
            |r| r.get(0),
        )?;
        let Some(last) = last else {
            return Ok(Vec::new());
        };
        let mut transforms = self.transforms_by_request(after_id, last)?;
        let mut savings = self.savings_by_request(after_id, last)?;
        let mut stmt = self.conn.prepare_cached(
            "SELECT ts_ms, client, requests.session, wire, provider, requests.model, method, path,
                    status, outcome, error, bytes_client, bytes_upstream, bytes_response,
                    tools_bytes, system_bytes, messages_bytes, other_bytes, input_tokens,
                    output_tokens, cache_write_tokens, cache_read_tokens, ttfb_ms, total_ms,
                    requests.id,
                    prompts.sent, prompts.as_client, cache_write_1h_tokens, account
             FROM requests LEFT JOIN prompts ON prompts.request_id = requests.id
             WHERE requests.id > ?1 AND requests.id <= ?2
             ORDER BY requests.id",
        )?;
        let rows = stmt.query_map(params![after_id, last], |r| {
            let input: Option<i64> = r.get(18)?;
            let usage = match input {
                Some(input) => Some(RowUsage {
                    input: to_u64(input),
                    output: to_u64(r.get::<_, Option<i64>>(19)?.unwrap_or(0)),
                    cache_write: to_u64(r.get::<_, Option<i64>>(20)?.unwrap_or(0)),
                    cache_write_1h: to_u64(r.get::<_, Option<i64>>(27)?.unwrap_or(0)),
                    cache_read: to_u64(r.get::<_, Option<i64>>(21)?.unwrap_or(0)),
                }),
                None => None,
            };
            let id: i64 = r.get(24)?;
            Ok((
                id,
                Row {
                    ts_ms: r.get(0)?,
                    client: r.get(1)?,
                    session: r.get(2)?,
                    wire: r.get(3)?,
                    provider: r.get(4)?,
                    model: r.get(5)?,
                    method: r.get(6)?,
                    path: r.get(7)?,
                    status: r.get(8)?,
                    outcome: RequestOutcome::parse(&r.get::<_, String>(9)?),
                    error: r.get(10)?,
                    bytes_client: to_u64(r.get(11)?),
                    bytes_upstream: to_u64(r.get(12)?),
                    bytes_response: to_u64(r.get(13)?),
                    tools_bytes: to_u64(r.get(14)?),
                    system_bytes: to_u64(r.get(15)?),
                    messages_bytes: to_u64(r.get(16)?),
                    other_bytes: to_u64(r.get(17)?),
                    usage,
                    ttfb_ms: r.get(22)?,
                    total_ms: r.get(23)?,
                    transforms: transforms.remove(&id).unwrap_or_default(),
                    fingerprint: r.get(25)?,
                    client_fingerprint: r.get(26)?,
                    savings: savings.remove(&id).unwrap_or_default(),
                    account: r.get(28)?,
                },
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The savings of the requests with ids in `(after, last]`, in stage and rate order.
    fn savings_by_request(
        &self,
        after: i64,
        last: i64,
    ) -> Result<HashMap<i64, Vec<Saving>>, StoreError> {
        let mut out: HashMap<i64, Vec<Saving>> = HashMap::new();
        let mut stmt = self.conn.prepare_cached(
            "SELECT s.request_id, s.stage, s.band, s.tokens FROM savings s
             LEFT JOIN transform_results t ON t.request_id = s.request_id AND t.stage = s.stage
             WHERE s.request_id > ?1 AND s.request_id <= ?2
             ORDER BY s.request_id, t.position, s.stage, s.band",
        )?;
        let mut rows = stmt.query(params![after, last])?;
        while let Some(r) = rows.next()? {
            out.entry(r.get(0)?).or_default().push(Saving {
                stage: r.get(1)?,
                band: r.get(2)?,
                tokens: r.get(3)?,
            });
        }
        Ok(out)
    }

    /// What the stages saved over the rows `filter` covers, per (session, model, stage, rate),
    /// ordered by those.
    pub fn savings(&self, filter: &Filter) -> Result<Vec<SavingTotal>, StoreError> {
        let sql = if filter.since_ms.is_none() {
            // The totals kept as rows were written.
            "SELECT session, model, stage, band, tokens FROM saving_totals
             WHERE ?1 IS NULL AND (?2 IS NULL OR session = ?2)
             ORDER BY session, model, stage, band"
                .to_owned()
        } else {
            format!(
                "SELECT requests.session, requests.model, s.stage, s.band, sum(s.tokens)
                 FROM savings s JOIN requests ON requests.id = s.request_id
                 WHERE {FILTERED} GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
            )
        };
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params![filter.since_ms, filter.session], |r| {
            Ok(SavingTotal {
                session: r.get(0)?,
                model: r.get(1)?,
                stage: r.get(2)?,
                band: r.get(3)?,
                tokens: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// What the stages saved over the rows `filter` covers, per (account, model, stage,
    /// rate), ordered by those.
    pub fn account_savings(&self, filter: &Filter) -> Result<Vec<AccountSaving>, StoreError> {
        let sql = if filter.since_ms.is_none() && filter.session.is_none() {
            // The totals kept as rows were written.
            "SELECT account, model, stage, band, tokens FROM account_saving_totals
             WHERE ?1 IS NULL AND ?2 IS NULL ORDER BY account, model, stage, band"
                .to_owned()
        } else {
            format!(
                "SELECT requests.account, requests.model, s.stage, s.band, sum(s.tokens)
                 FROM savings s JOIN requests ON requests.id = s.request_id
                 WHERE {FILTERED} GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
            )
        };
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params![filter.since_ms, filter.session], |r| {
            Ok(AccountSaving {
                account: r.get(0)?,
                model: r.get(1)?,
                stage: r.get(2)?,
                band: r.get(3)?,
                tokens: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The transform entries of the requests with ids in `(after, last]`, stages in the order
    /// they were written.
    fn transforms_by_request(
        &self,
        after: i64,
        last: i64,
    ) -> Result<HashMap<i64, Vec<Transform>>, StoreError> {
        let mut facts: HashMap<(i64, String), Vec<Fact>> = HashMap::new();
        let mut stmt = self.conn.prepare_cached(
            "SELECT request_id, stage, name, kind, value FROM transform_facts
             WHERE request_id > ?1 AND request_id <= ?2
             ORDER BY request_id, stage, position",
        )?;
        let mut rows = stmt.query(params![after, last])?;
        while let Some(r) = rows.next()? {
            facts.entry((r.get(0)?, r.get(1)?)).or_default().push(Fact {
                name: r.get(2)?,
                kind: r.get(3)?,
                value: to_u64(r.get(4)?),
            });
        }
        let mut out: HashMap<i64, Vec<Transform>> = HashMap::new();
        let mut stmt = self.conn.prepare_cached(
            "SELECT request_id, stage, result, detail FROM transform_results
             WHERE request_id > ?1 AND request_id <= ?2
             ORDER BY request_id, position",
        )?;
        let mut rows = stmt.query(params![after, last])?;
        while let Some(r) = rows.next()? {
            let id: i64 = r.get(0)?;
            let stage: String = r.get(1)?;
            let result: String = r.get(2)?;
            let detail: Option<String> = r.get(3)?;
            let result = match result.as_str() {
                "applied" => {
                    TransformResult::Applied(facts.remove(&(id, stage.clone())).unwrap_or_default())
                }
                "unchanged" => TransformResult::Unchanged(detail.unwrap_or_default()),
                _ => TransformResult::Failed(detail.unwrap_or_default()),
            };
            out.entry(id).or_default().push(Transform { stage, result });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(stage: &str, facts: &[(&str, &str, u64)]) -> Transform {
        Transform {
            stage: stage.into(),
            result: TransformResult::Applied(
                facts
                    .iter()
                    .map(|(name, kind, value)| Fact {
                        name: (*name).into(),
                        kind: (*kind).into(),
                        value: *value,
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn counters_accumulate() {
        let mut l = Ledger::open_in_memory().unwrap();
        assert_eq!(l.counter(DROPPED_ROWS).unwrap(), 0);
        l.add_counter(DROPPED_ROWS, 3).unwrap();
        l.add_counter(DROPPED_ROWS, 4).unwrap();
        assert_eq!(l.counter(DROPPED_ROWS).unwrap(), 7);
    }

    #[test]
    fn outcomes_round_trip_by_name_and_name_who_caused_them() {
        for o in RequestOutcome::ALL {
            assert_eq!(RequestOutcome::parse(o.as_str()), o);
        }
        assert_eq!(
            RequestOutcome::parse("from_a_newer_pith"),
            RequestOutcome::PithError
        );
        assert_eq!(
            RequestOutcome::UpstreamBroken.caused_by(),
            Some(Party::Upstream)
        );
        assert_eq!(RequestOutcome::ClientError.caused_by(), Some(Party::Client));
        assert_eq!(RequestOutcome::Local.caused_by(), None);
    }

    /// Defer's rows from before schema 4 get savings priced at the cache state of the tools'
    /// place in their prompt; the one-hour split they never had reads as none.
    #[test]
    fn schema_three_defer_rows_get_their_savings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let old = sqlite::open(&path, &MIGRATIONS[..3]).unwrap();
        let insert = "INSERT INTO requests (id, ts_ms, client, session, wire, provider, model,
                method, path, outcome, bytes_client, bytes_upstream, bytes_response, tools_bytes,
                system_bytes, messages_bytes, other_bytes, input_tokens, output_tokens,
                cache_write_tokens, cache_read_tokens, total_ms)
            VALUES (?1, ?1, 'c', 's', ?2, 'p', 'm', 'POST', '/', 'ok', 0, 0, 0, ?3, ?4, ?5, 0, ?6, 1,
                ?7, ?8, 1.0)";
        let fact =
            "INSERT INTO transform_facts VALUES (?1, 'defer', 1, 'chars', 'chars_kept_out', 4000)";
        let result = "INSERT INTO transform_results VALUES (?1, 'defer', 0, 'applied', NULL)";
        // (wire, tools, system, messages bytes; input, cache write, cache read tokens)
        let requests = [
            ("anthropic", 100, 100, 800, 10, 0, 5000), // a warm cache: the tools were read
            ("anthropic", 100, 100, 800, 10, 700, 0),  // a cold one: they were written
            ("responses", 100, 800, 100, 900, 0, 100), // after long instructions, uncached
        ];
        for (i, (wire, t, sy, m, input, w, r)) in requests.into_iter().enumerate() {
            let id = i as i64 + 1;
            old.execute(insert, params![id, wire, t, sy, m, input, w, r])
                .unwrap();
            old.execute(fact, params![id]).unwrap();
            old.execute(result, params![id]).unwrap();
        }
        drop(old);
        let l = Ledger::open(&path).unwrap();
        let bands: Vec<(String, i64)> = l
            .rows()
            .unwrap()
            .into_iter()
            .flat_map(|r| r.savings)
            .map(|s| (s.band, s.tokens))
            .collect();
        assert_eq!(
            bands,
            [
                ("cache_read".to_owned(), 1000),
                ("cache_write_5m".to_owned(), 1000),
                ("input".to_owned(), 1000)
            ]
        );
        let totals = l.savings(&Filter::default()).unwrap();
        assert_eq!(totals.iter().map(|t| t.tokens).sum::<i64>(), 3000);
        // A row written after the upgrade adds to the same (session, model) totals the
        // migration made, as a scan sees it.
        let mut l = l;
        l.insert(&[Row {
            ts_ms: 10,
            session: Some("s".into()),
            model: Some("m".into()),
            usage: Some(RowUsage {
                input: 1,
                cache_write: 50,
                cache_write_1h: 20,
                ..RowUsage::default()
            }),
            savings: vec![Saving {
                stage: "defer".into(),
                band: "cache_read".into(),
                tokens: 7,
            }],
            ..Row::default()
        }])
        .unwrap();
        let scanned = Filter {
            since_ms: Some(0),
            ..Filter::default()
        };
        let kept = l.savings(&Filter::default()).unwrap();
        assert_eq!(kept, l.savings(&scanned).unwrap());
        assert_eq!(kept.len(), 3, "{kept:?}");
        assert_eq!(kept[0].tokens, 1007, "{kept:?}");
        assert_eq!(l.groups(&scanned).unwrap()[0].cache_write_1h, 20);
        // The latency histograms the migration made from the old rows, plus the new row.
        let (kept, scan) = (
            l.latency(&Filter::default()).unwrap(),
            l.latency(&scanned).unwrap(),
        );
        assert_eq!(kept, scan);
        assert_eq!(kept.total_ms.count, 4);
    }

    /// Rows from before schema 6 name no account (they are the ledger's own); the totals per
    /// account the migration made are theirs, and rows written since add to them as a scan
    /// sees it.
    #[test]
    fn schema_five_rows_are_the_ledgers_own_accounts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let at_five = Ledger {
            conn: sqlite::open(&path, &MIGRATIONS[..5]).unwrap(),
        };
        // Written as schema 5 wrote rows: the insert then had no account column.
        at_five
            .conn
            .execute_batch(
                "INSERT INTO requests (id, ts_ms, client, session, provider, model, method, path,
                    outcome, bytes_client, bytes_upstream, bytes_response, tools_bytes,
                    system_bytes, messages_bytes, other_bytes, input_tokens, output_tokens,
                    total_ms)
                 VALUES (1, 1, 'c', 's', 'anthropic', 'm', 'POST', '/', 'ok', 0, 0, 0, 0, 0, 0, 0,
                    10, 1, 1.0),
                        (2, 2, 'c', 's', 'anthropic', 'm', 'POST', '/', 'ok', 0, 0, 0, 0, 0, 0, 0,
                    20, 2, 1.0);
                 INSERT INTO savings VALUES (1, 'defer', 'input', 5);",
            )
            .unwrap();
        drop(at_five);
        let mut l = Ledger::open(&path).unwrap();
        let accounts: Vec<Option<String>> =
            l.rows().unwrap().into_iter().map(|r| r.account).collect();
        assert_eq!(accounts, [None, None]);
        let groups = l.account_groups(&Filter::default()).unwrap();
        assert_eq!(groups.len(), 1);
        assert_eq!(
            (
                groups[0].account.as_deref(),
                groups[0].totals.requests,
                groups[0].totals.input
            ),
            (None, 2, 30)
        );
        l.insert(&[Row {
            ts_ms: 3,
            model: Some("m".into()),
            account: Some("alice".into()),
            usage: Some(RowUsage {
                input: 7,
                ..RowUsage::default()
            }),
            savings: vec![Saving {
                stage: "defer".into(),
                band: "input".into(),
                tokens: 3,
            }],
            ..Row::default()
        }])
        .unwrap();
        let scanned = Filter {
            since_ms: Some(0),
            ..Filter::default()
        };
        let kept = l.account_groups(&Filter::default()).unwrap();
        assert_eq!(kept, l.account_groups(&scanned).unwrap());
        let by: Vec<(Option<&str>, u64)> = kept
            .iter()
            .map(|g| (g.account.as_deref(), g.totals.input))
            .collect();
        assert_eq!(by, [(None, 30), (Some("alice"), 7)]);
        let saved = l.account_savings(&Filter::default()).unwrap();
        assert_eq!(saved, l.account_savings(&scanned).unwrap());
        let saved: Vec<(Option<&str>, i64)> = saved
            .iter()
            .map(|s| (s.account.as_deref(), s.tokens))
            .collect();
        assert_eq!(saved, [(None, 5), (Some("alice"), 3)]);
    }

    /// A ledger written by schema 1 (transforms as header text) reads back as structured data.
    #[test]
    fn schema_one_rows_are_carried_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let old = sqlite::open(&path, &MIGRATIONS[..1]).unwrap();
        let insert = "INSERT INTO requests (ts_ms, client, provider, method, path, outcome,
                bytes_client, bytes_upstream, bytes_response, tools_bytes, system_bytes,
                messages_bytes, other_bytes, total_ms, transforms, transform_skips,
                transform_failures, local)
            VALUES (?1, 'c', 'anthropic', 'POST', '/v1/messages', 'ok', 0, 0, 0, 0, 0, 0, 0, 1.0,
                ?2, ?3, ?4, 0)";
        old.execute(
            insert,
            params![1, "defer;tools=48;chars=41707", None::<String>, 0],
        )
        .unwrap();
        old.execute(
            insert,
            params![2, None::<String>, "defer:already_deferring", 1],
        )
        .unwrap();
        old.execute(insert, params![3, None::<String>, None::<String>, 0])
            .unwrap();
        drop(old);

        // A reader does not upgrade it; it says what does.
        let err = Ledger::open_read_only(&path).err().unwrap().to_string();
        assert!(
            err.contains("written by an older pith")
                && err.ends_with("run `pith proxy` once to upgrade it"),
            "{err}"
        );
        let l = Ledger::open(&path).unwrap();
        let rows = l.rows().unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(Ledger::open_read_only(&path).unwrap().rows().unwrap(), rows);
        assert_eq!(
            rows[0].transforms,
            vec![applied(
                "defer",
                &[("tools", "count", 48), ("chars", "chars_kept_out", 41707)]
            )]
        );
        assert_eq!(
            rows[1].transform("defer"),
            Some(&TransformResult::Unchanged("already_deferring".into()))
        );
        assert!(matches!(
            rows[1].transform("unknown"),
            Some(TransformResult::Failed(_))
        ));
        assert!(rows[2].transforms.is_empty());
        let groups = l.groups(&Filter::default()).unwrap();
        assert_eq!(
            (groups[0].transformed, groups[0].transform_failures),
            (1, 1)
        );
    }
}
