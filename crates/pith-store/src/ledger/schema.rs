//! The ledger's migrations, append-only: never edit a shipped one, add the next.
//!
//! What each one added (so a reader knows what an older row may lack):
//! 1. `requests` and `counters`;
//! 2. `transform_results` and `transform_facts`, schema 1's text columns carried over into
//!    them;
//! 3. `prompts` (each request's fingerprints) and the bust decided as a row is written; totals
//!    per (session, model) and per stage kept on write, so reports read them, not the rows;
//! 4. the one-hour part of cache writes, and `savings` per request and stage by rate band with
//!    their totals (defer's earlier rows were given theirs);
//! 5. `latency_totals`, per bucket of `LATENCY_BUCKETS_MS` (new bounds need a migration);
//! 6. each request's `account` (`NULL` before it: the ledger's own) and totals per account;
//! 7. each request's `arrival_us`, the order a session is paired in for busts; `hour_totals`
//!    for the chart; `open_requests`, the answers started when the writers last committed;
//! 8. each request's `instance`, and totals per instance;
//! 9. `derivations_pending`: a row may be written before its fingerprints and history turn.
//! 10. what the provider's token counter said of a sampled request's own body
//!     (`provider_count_outcome`, `provider_count_tokens`).

pub(super) const MIGRATIONS: &[&str] = &["
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
", "
-- Schema 7: when each request arrived (microseconds, unique within the proxy that wrote it),
-- so a session's requests are paired for cache busts in arrival order, whatever order two
-- writers committed them in. Rows before it (and rows that do not know) arrived at their
-- ts_ms: NULL in requests, that time in prompts, where pairing reads it.
ALTER TABLE requests ADD COLUMN arrival_us INTEGER;
ALTER TABLE prompts ADD COLUMN arrival_us INTEGER;
UPDATE prompts SET arrival_us = (SELECT r.ts_ms * 1000 FROM requests r WHERE r.id = prompts.request_id);
CREATE INDEX prompts_session_model_arrival ON prompts (session, model, arrival_us, request_id);
-- The timeline chart's totals per hour and model, kept on write (k: the model with NULL
-- marked, as totals_key writes it), so a chart of whole hours never scans the requests.
CREATE TABLE hour_totals (
    hour_ms        INTEGER NOT NULL,
    k              TEXT NOT NULL,
    model          TEXT,
    requests       INTEGER NOT NULL,
    input          INTEGER NOT NULL,
    output         INTEGER NOT NULL,
    cache_write    INTEGER NOT NULL,
    cache_write_1h INTEGER NOT NULL,
    cache_read     INTEGER NOT NULL,
    PRIMARY KEY (hour_ms, k)
) WITHOUT ROWID;
INSERT INTO hour_totals
SELECT (ts_ms / 3600000) * 3600000, coalesce('m' || model, '-'), model, count(*),
       coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
       coalesce(sum(cache_write_tokens), 0), coalesce(sum(cache_write_1h_tokens), 0),
       coalesce(sum(cache_read_tokens), 0)
FROM requests GROUP BY 1, 2;
-- Requests whose answer had started when the proxy last wrote (what it needs for their row if
-- they never end: the proxy's own encoding), until their row is written.
CREATE TABLE open_requests (
    arrival_us INTEGER PRIMARY KEY,
    record     BLOB NOT NULL
);
", "
-- Schema 8: the instance that served each request (its name, `[proxy] instance`), so a team
-- behind a load balancer sees the requests each instance served; NULL for the rows before it.
-- Totals per instance kept on write (k: 'i' and the name, or '-' for none), so `pith stats`
-- reads a row per instance, not a scan.
ALTER TABLE requests ADD COLUMN instance TEXT;
CREATE TABLE instance_totals (
    k        TEXT PRIMARY KEY,
    instance TEXT,
    requests INTEGER NOT NULL,
    errors   INTEGER NOT NULL,
    first_ms INTEGER NOT NULL,
    last_ms  INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO instance_totals
SELECT '-', NULL, count(*), coalesce(sum(outcome NOT IN ('ok', 'local')), 0), min(ts_ms),
       max(ts_ms)
FROM requests HAVING count(*) > 0;
", "
-- Schema 9: rows written before their derivations (the proxy's writers put the core row in
-- first, the prompt fingerprints and the bust pairing after, from one parse of the body). The
-- partial index holds only the rows still waiting, which the derivations find by arrival and
-- the team shipper stops before.
ALTER TABLE requests ADD COLUMN derivations_pending INTEGER NOT NULL DEFAULT 0;
CREATE INDEX requests_derivations_pending ON requests (arrival_us) WHERE derivations_pending = 1;
", "
-- Schema 10: what the provider's own token counter said of the client's body, for the requests
-- a stage changed that were sampled for counting (`[proxy] provider_counts`): how it ended
-- (counted, rate_limited, failed, paused) and, counted, the tokens. NULL: not sampled. The
-- partial index holds only the sampled rows, which the report's comparison reads.
ALTER TABLE requests ADD COLUMN provider_count_outcome TEXT;
ALTER TABLE requests ADD COLUMN provider_count_tokens INTEGER;
CREATE INDEX requests_provider_counted ON requests (ts_ms) WHERE provider_count_outcome IS NOT NULL;
"];
