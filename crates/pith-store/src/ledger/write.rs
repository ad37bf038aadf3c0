//! Writing rows: each row with its transform entries, prompt fingerprints, bust and the
//! totals it moves, in the caller's transaction.
//!
//! A session's requests are paired for busts in the order they arrived (`arrival_us`), not
//! the order they are written: a request's previous prompt is the one that arrived last before
//! it, and a row written after one that arrived later re-pairs that one (its bust and the
//! totals it moved). A row may come before its derivations (`derivations_pending`); they are
//! paired as a whole row would have been when they come. A bust pith caused is charged to the
//! stage that caused it as savings of stage `bust:<stage>` ([`charge_bust`], [`bust_cost`]),
//! wherever rows are paired, a team replica included.

use std::sync::LazyLock;

use super::columns::{self, Cell};
use super::*;
use rusqlite::CachedStatement;

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

impl Ledger {
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
        self.insert_and_set_counters(rows, &[(name, value)])
    }

    /// Insert rows and set each named counter in the same transaction.
    pub fn insert_and_set_counters(
        &mut self,
        rows: &[Row],
        counters: &[(&str, u64)],
    ) -> Result<(), StoreError> {
        self.write_batch(&WriteBatch {
            rows,
            counters,
            ..WriteBatch::default()
        })
    }

    /// Write one batch of the proxy's writers in one transaction: its rows, the requests it
    /// saw start and end, and the spool position it reached.
    pub fn write_batch(&mut self, batch: &WriteBatch<'_>) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        {
            let mut open = tx.prepare_cached(
                "INSERT OR REPLACE INTO open_requests (arrival_us, record) VALUES (?1, ?2)",
            )?;
            for (arrival, record) in batch.opened {
                open.execute(params![arrival, record])?;
            }
            let mut close = tx.prepare_cached("DELETE FROM open_requests WHERE arrival_us = ?1")?;
            for arrival in batch.closed {
                close.execute(params![arrival])?;
            }
        }
        insert_rows(&tx, batch.rows)?;
        for (name, value) in batch.counters {
            set_counter(&tx, name, *value)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The requests whose answer started and whose row was never written, oldest first: what
    /// the proxy recorded of each when it started.
    pub fn open_requests(&self) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT arrival_us, record FROM open_requests ORDER BY arrival_us")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
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
             DELETE FROM account_saving_totals; DELETE FROM hour_totals;
             DELETE FROM instance_totals; DELETE FROM open_requests; DELETE FROM counters;",
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

/// Add tokens to a request's saving of one stage at one rate (`request_id`, `stage`, `band`,
/// `tokens`).
const ADD_SAVING: &str = "INSERT INTO savings (request_id, stage, band, tokens)
    VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (request_id, stage, band) DO UPDATE SET tokens = tokens + excluded.tokens";
/// ... and to the totals per (session, model) (`k`, `session`, `model`, `stage`, `band`,
/// `tokens`) ...
const ADD_SAVING_TOTAL: &str = "INSERT INTO saving_totals VALUES (?1, ?2, ?3, ?4, ?5, ?6)
    ON CONFLICT (k, stage, band) DO UPDATE SET tokens = tokens + excluded.tokens";
/// ... and per (account, model) (`k`, `account`, `model`, `stage`, `band`, `tokens`).
const ADD_ACCOUNT_SAVING_TOTAL: &str =
    "INSERT INTO account_saving_totals VALUES (?1, ?2, ?3, ?4, ?5, ?6)
    ON CONFLICT (k, stage, band) DO UPDATE SET tokens = tokens + excluded.tokens";

/// A row into `requests`: the columns both databases keep ([`columns::SHARED`]), then SQLite's
/// own (`insert_request` binds them in this order).
static INSERT_REQUEST: LazyLock<String> = LazyLock::new(|| {
    let own = [
        "bust_checked",
        "bust_at",
        "bust_cached_through",
        "bust_cause",
        "account",
        "arrival_us",
        "instance",
        "derivations_pending",
    ];
    let n = columns::SHARED.len() + own.len();
    let placeholders: Vec<String> = (1..=n).map(|i| format!("?{i}")).collect();
    format!(
        "INSERT INTO requests ({}, {}) VALUES ({})",
        columns::names(""),
        own.join(", "),
        placeholders.join(", ")
    )
});
/// Add a row to the totals of the proxy instance that served it.
const ADD_INSTANCE_TOTAL: &str = "INSERT INTO instance_totals VALUES (?1, ?2, 1, ?3, ?4, ?4)
    ON CONFLICT (k) DO UPDATE SET
    requests = requests + 1, errors = errors + excluded.errors,
    first_ms = min(first_ms, excluded.first_ms),
    last_ms = max(last_ms, excluded.last_ms)";
/// Add a row to the totals of its hour and model (what the timeline reads).
const ADD_HOUR_TOTAL: &str = "INSERT INTO hour_totals VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?7, ?8)
    ON CONFLICT (hour_ms, k) DO UPDATE SET
    requests = requests + 1, input = input + excluded.input,
    output = output + excluded.output,
    cache_write = cache_write + excluded.cache_write,
    cache_write_1h = cache_write_1h + excluded.cache_write_1h,
    cache_read = cache_read + excluded.cache_read";
/// Add a latency to its histogram bucket (`metric`, `bucket`, ms).
const ADD_LATENCY: &str = "INSERT INTO latency_totals VALUES (?1, ?2, 1, ?3)
    ON CONFLICT (metric, bucket) DO UPDATE SET
    n = n + 1, sum_ms = sum_ms + excluded.sum_ms";
/// Count a stage's result (`stage`, `result`, `detail`).
const ADD_STAGE_RESULT_TOTAL: &str = "INSERT INTO stage_result_totals VALUES (?1, ?2, ?3, 1)
    ON CONFLICT (stage, result, detail) DO UPDATE SET n = n + 1";
/// Add to a stage's fact total (`stage`, `name`, `kind`, `value`).
const ADD_STAGE_FACT_TOTAL: &str = "INSERT INTO stage_fact_totals VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (stage, name, kind) DO UPDATE SET total = total + excluded.total";
/// A row's transform entry, in pipeline order.
const INSERT_TRANSFORM_RESULT: &str =
    "INSERT INTO transform_results (request_id, stage, position, result, detail)
    VALUES (?1, ?2, ?3, ?4, ?5)";
/// A fact of a transform entry, in the order the stage reported it.
const INSERT_TRANSFORM_FACT: &str =
    "INSERT INTO transform_facts (request_id, stage, position, name, kind, value)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// The upsert of a row into `group_totals` (per session and model) or `account_totals` (per
/// account and model): the same columns, `$first` the session's or the account's.
macro_rules! group_totals_sql {
    ($table:literal, $first:literal) => {
        concat!(
            "INSERT INTO ",
            $table,
            " (k, ",
            $first,
            ", model, client, requests, with_usage,
                input, output, cache_write, cache_read, errors, local, transformed, failures,
                first_ms, last_ms, bust_pairs, busts_pith, busts_client, cache_write_1h)
             VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14, ?15,
                ?16, ?17, ?18)
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
}

/// Insert rows, with their transform entries and the totals they move, inside `tx`: each
/// roll-up its own function, over statements prepared once for the batch ([`RollUps`]).
fn insert_rows(tx: &Connection, rows: &[Row]) -> Result<(), StoreError> {
    let mut s = RollUps::prepare(tx)?;
    for r in rows {
        let arrival = r.arrival_us.unwrap_or(r.ts_ms.saturating_mul(1000));
        let pairing = pair_with_previous(tx, r, arrival)?;
        let id = insert_request(&mut s.request, r, &pairing)?;
        let key = totals_key('s', r.session.as_deref(), r.model.as_deref());
        let account_key = totals_key('a', r.account.as_deref(), r.model.as_deref());
        add_to_group_totals(&mut s.group, (&key, &r.session), r, &pairing)?;
        add_to_group_totals(
            &mut s.account_group,
            (&account_key, &r.account),
            r,
            &pairing,
        )?;
        add_to_instance_totals(&mut s.instance, r)?;
        add_to_hour_totals(&mut s.hour, r)?;
        add_to_latency_totals(&mut s.latency, r)?;
        add_savings(&mut s, id, r, &key, &account_key)?;
        add_to_stage_totals(&mut s, r)?;
        insert_transform_entries(&mut s, id, r)?;
        // Pairing last: a bust charge names the first stage that changed a request, read
        // from the transform entries just written.
        if let (Some("pith"), Some(previous_id)) = (pairing.cause(), pairing.previous_id) {
            charge_bust(tx, id, previous_id)?;
        }
        if let (Some(session), Some(fp)) = (&r.session, &r.fingerprint) {
            let keys = PromptKeys {
                id,
                session,
                model: r.model.as_deref(),
                arrival,
            };
            keep_prompt(tx, &keys, fp, r.client_fingerprint.as_deref())?;
        }
    }
    Ok(())
}

/// The statements a batch of rows writes with, prepared once for the batch: held here, they
/// are out of the connection's statement cache, which the per-row lookups (pairing, prompts,
/// bust charges) then have to themselves.
struct RollUps<'tx> {
    request: CachedStatement<'tx>,
    group: CachedStatement<'tx>,
    account_group: CachedStatement<'tx>,
    instance: CachedStatement<'tx>,
    hour: CachedStatement<'tx>,
    latency: CachedStatement<'tx>,
    saving: CachedStatement<'tx>,
    saving_total: CachedStatement<'tx>,
    account_saving_total: CachedStatement<'tx>,
    result_total: CachedStatement<'tx>,
    fact_total: CachedStatement<'tx>,
    result: CachedStatement<'tx>,
    fact: CachedStatement<'tx>,
}

impl<'tx> RollUps<'tx> {
    fn prepare(tx: &'tx Connection) -> Result<Self, StoreError> {
        Ok(RollUps {
            request: tx.prepare_cached(&INSERT_REQUEST)?,
            group: tx.prepare_cached(group_totals_sql!("group_totals", "session"))?,
            account_group: tx.prepare_cached(group_totals_sql!("account_totals", "account"))?,
            instance: tx.prepare_cached(ADD_INSTANCE_TOTAL)?,
            hour: tx.prepare_cached(ADD_HOUR_TOTAL)?,
            latency: tx.prepare_cached(ADD_LATENCY)?,
            saving: tx.prepare_cached(ADD_SAVING)?,
            saving_total: tx.prepare_cached(ADD_SAVING_TOTAL)?,
            account_saving_total: tx.prepare_cached(ADD_ACCOUNT_SAVING_TOTAL)?,
            result_total: tx.prepare_cached(ADD_STAGE_RESULT_TOTAL)?,
            fact_total: tx.prepare_cached(ADD_STAGE_FACT_TOTAL)?,
            result: tx.prepare_cached(INSERT_TRANSFORM_RESULT)?,
            fact: tx.prepare_cached(INSERT_TRANSFORM_FACT)?,
        })
    }
}

/// A row against the previous prompt of its session and model.
struct Pairing {
    /// 1 when it was compared with one.
    checked: i64,
    /// The bust it met: segment, cached through, cause.
    bust: Option<(usize, usize, &'static str)>,
    /// The previous request's id.
    previous_id: Option<i64>,
}

impl Pairing {
    fn cause(&self) -> Option<&'static str> {
        self.bust.map(|b| b.2)
    }
}

fn pair_with_previous(tx: &Connection, r: &Row, arrival: i64) -> Result<Pairing, StoreError> {
    let (Some(session), Some(fp)) = (&r.session, &r.fingerprint) else {
        return Ok(Pairing {
            checked: 0,
            bust: None,
            previous_id: None,
        });
    };
    Ok(
        match previous_prompt(tx, session, r.model.as_deref(), arrival)? {
            Some((sent, client, id)) => Pairing {
                checked: 1,
                bust: bust_between(
                    (&sent, client.as_deref()),
                    (fp, r.client_fingerprint.as_deref()),
                ),
                previous_id: Some(id),
            },
            None => Pairing {
                checked: 0,
                bust: None,
                previous_id: None,
            },
        },
    )
}

/// The row itself; its id.
fn insert_request(
    request: &mut CachedStatement<'_>,
    r: &Row,
    pairing: &Pairing,
) -> Result<i64, StoreError> {
    let bust = pairing.bust;
    let own = [
        Cell::Int(Some(pairing.checked)),
        Cell::Int(bust.map(|b| to_i64(b.0 as u64))),
        Cell::Int(bust.map(|b| to_i64(b.1 as u64))),
        Cell::Text(bust.map(|b| b.2)),
        Cell::Text(r.account.as_deref()),
        Cell::Int(r.arrival_us),
        Cell::Text(r.instance.as_deref()),
        Cell::Int(Some(i64::from(
            r.derivations_pending && r.arrival_us.is_some(),
        ))),
    ];
    let shared = columns::SHARED.iter().map(|c| (c.get)(r));
    Ok(request.insert(rusqlite::params_from_iter(shared.chain(own)))?)
}

/// Did not end `ok` or `local`.
fn is_error(r: &Row) -> bool {
    !matches!(r.outcome, RequestOutcome::Ok | RequestOutcome::Local)
}

/// The totals per (session, model) in `group_totals`, or per (account, model) in
/// `account_totals` (the same columns, the account in the session's place, [`group_totals_sql`]):
/// `(key, first)`.
fn add_to_group_totals(
    totals: &mut CachedStatement<'_>,
    (key, first): (&str, &Option<String>),
    r: &Row,
    pairing: &Pairing,
) -> Result<(), StoreError> {
    let u = r.usage.unwrap_or_default();
    let applied = r
        .transforms
        .iter()
        .any(|t| matches!(t.result, TransformResult::Applied(_)));
    let failures = r
        .transforms
        .iter()
        .filter(|t| matches!(t.result, TransformResult::Failed(_)))
        .count();
    totals.execute(params![
        key,
        first,
        r.model,
        r.client,
        i64::from(r.usage.is_some()),
        to_i64(u.input),
        to_i64(u.output),
        to_i64(u.cache_write),
        to_i64(u.cache_read),
        i64::from(is_error(r)),
        i64::from(r.outcome == RequestOutcome::Local),
        i64::from(applied),
        failures as i64,
        r.ts_ms,
        pairing.checked,
        i64::from(pairing.cause() == Some("pith")),
        i64::from(pairing.cause() == Some("client")),
        to_i64(u.cache_write_1h),
    ])?;
    Ok(())
}

/// The totals per instance.
fn add_to_instance_totals(instance: &mut CachedStatement<'_>, r: &Row) -> Result<(), StoreError> {
    instance.execute(params![
        r.instance
            .as_deref()
            .map_or("-".to_owned(), |i| format!("i{i}")),
        r.instance,
        i64::from(is_error(r)),
        r.ts_ms,
    ])?;
    Ok(())
}

/// The totals per (hour, model) the timeline reads.
fn add_to_hour_totals(hour: &mut CachedStatement<'_>, r: &Row) -> Result<(), StoreError> {
    let u = r.usage.unwrap_or_default();
    hour.execute(params![
        (r.ts_ms / HOUR_MS) * HOUR_MS,
        r.model
            .as_deref()
            .map_or("-".to_owned(), |m| format!("m{m}")),
        r.model,
        to_i64(u.input),
        to_i64(u.output),
        to_i64(u.cache_write),
        to_i64(u.cache_write_1h),
        to_i64(u.cache_read),
    ])?;
    Ok(())
}

/// The latency histograms: the whole exchange, and the time to the first byte.
fn add_to_latency_totals(latency: &mut CachedStatement<'_>, r: &Row) -> Result<(), StoreError> {
    latency.execute(params!["total_ms", latency_bucket(r.total_ms), r.total_ms])?;
    if let Some(ttfb) = r.ttfb_ms {
        latency.execute(params!["ttfb_ms", latency_bucket(ttfb), ttfb])?;
    }
    Ok(())
}

/// The row's savings, and their totals per (session, model) and (account, model).
fn add_savings(
    s: &mut RollUps<'_>,
    id: i64,
    r: &Row,
    key: &str,
    account_key: &str,
) -> Result<(), StoreError> {
    // A bust charge is the pairing's, made where rows are paired: one that came with a row
    // (a replica's copy of an older pith's) is not counted twice.
    for sv in r
        .savings
        .iter()
        .filter(|s| !s.stage.starts_with(BUST_CHARGE))
    {
        s.saving
            .execute(params![id, sv.stage, sv.band, sv.tokens])?;
        s.saving_total.execute(params![
            key, r.session, r.model, sv.stage, sv.band, sv.tokens
        ])?;
        s.account_saving_total.execute(params![
            account_key,
            r.account,
            r.model,
            sv.stage,
            sv.band,
            sv.tokens
        ])?;
    }
    Ok(())
}

/// What each stage did, summed over every row: results by reason, facts by name.
fn add_to_stage_totals(s: &mut RollUps<'_>, r: &Row) -> Result<(), StoreError> {
    for t in &r.transforms {
        let detail = match &t.result {
            TransformResult::Unchanged(d) => d.as_str(),
            _ => "",
        };
        s.result_total
            .execute(params![t.stage, t.result.as_str(), detail])?;
        if let TransformResult::Applied(facts) = &t.result {
            for f in facts {
                s.fact_total
                    .execute(params![t.stage, f.name, f.kind, to_i64(f.value)])?;
            }
        }
    }
    Ok(())
}

/// The row's transform entries, in pipeline order, and the facts of those that applied.
fn insert_transform_entries(s: &mut RollUps<'_>, id: i64, r: &Row) -> Result<(), StoreError> {
    for (position, t) in r.transforms.iter().enumerate() {
        let detail = match &t.result {
            TransformResult::Applied(facts) => {
                for (n, f) in facts.iter().enumerate() {
                    s.fact.execute(params![
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
        s.result.execute(params![
            id,
            t.stage,
            position as i64,
            t.result.as_str(),
            detail
        ])?;
    }
    Ok(())
}

/// A session's requests are paired in arrival order: the previous one arrived before this
/// one (written before or after it), the next one after it and may be written already.
/// A kept prompt: its fingerprint as sent, as the client sent it (when a stage changed it),
/// and its row's id.
type KeptPrompt = (Vec<u8>, Option<Vec<u8>>, i64);

/// The prompt of the session's request that arrived last at or before `arrival`.
fn previous_prompt(
    tx: &Connection,
    session: &str,
    model: Option<&str>,
    arrival: i64,
) -> Result<Option<KeptPrompt>, StoreError> {
    Ok(tx
        .prepare_cached(
            "SELECT sent, as_client, request_id FROM prompts WHERE session = ?1 AND model IS ?2
                AND arrival_us <= ?3
             ORDER BY arrival_us DESC, request_id DESC LIMIT 1",
        )?
        .query_row(params![session, model, arrival], |p| {
            Ok((p.get(0)?, p.get(1)?, p.get(2)?))
        })
        .optional()?)
}

/// Which row a prompt belongs to and where it sits in its session.
struct PromptKeys<'a> {
    id: i64,
    session: &'a str,
    model: Option<&'a str>,
    arrival: i64,
}

/// Keep the prompt of row `keys.id` for pairing, after re-pairing the session's next request
/// with it when that one was written first (and paired with an older one).
fn keep_prompt(
    tx: &Connection,
    keys: &PromptKeys<'_>,
    fp: &[u8],
    client_fp: Option<&[u8]>,
) -> Result<(), StoreError> {
    let after: Option<(i64, Vec<u8>, Option<Vec<u8>>)> = tx
        .prepare_cached(
            "SELECT request_id, sent, as_client FROM prompts WHERE session = ?1 AND model IS ?2
                AND arrival_us > ?3
             ORDER BY arrival_us, request_id LIMIT 1",
        )?
        .query_row(params![keys.session, keys.model, keys.arrival], |p| {
            Ok((p.get(0)?, p.get(1)?, p.get(2)?))
        })
        .optional()?;
    if let Some((next_id, sent, client)) = after {
        let bust = bust_between((fp, client_fp), (&sent, client.as_deref()));
        repair_bust(tx, next_id, bust, keys.id)?;
    }
    tx.prepare_cached(
        "INSERT INTO prompts (request_id, session, model, sent, as_client, arrival_us)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        keys.id,
        keys.session,
        keys.model,
        fp,
        client_fp,
        keys.arrival
    ])?;
    Ok(())
}

impl Ledger {
    /// Write the derivations of rows written with [`Row::derivations_pending`], and set each
    /// named counter, in one transaction: each row's prompt fingerprints, its bust paired with
    /// the session's previous request (and the next one re-paired, when it was derived first),
    /// and the bust's charge. A derivation whose row is not waiting for one (written already,
    /// or never) changes nothing.
    pub fn write_derived(
        &mut self,
        derived: &[Derivation],
        counters: &[(&str, u64)],
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        for d in derived {
            derive_row(&tx, d)?;
        }
        for (name, value) in counters {
            set_counter(&tx, name, *value)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Give up the derivations still to come (their records are gone: the writers had
    /// nothing more to read): the rows stay, without fingerprints, and ship. How many there were.
    pub fn abandon_derivations(&mut self) -> Result<u64, StoreError> {
        let n = self.conn.execute(
            "UPDATE requests SET derivations_pending = 0 WHERE derivations_pending = 1",
            [],
        )?;
        Ok(n as u64)
    }

    /// Keep the row that arrived at `arrival_us` and still waits for its derivations without
    /// them (the ledger refused them alone): the oldest such row, as [`Ledger::write_derived`]
    /// would have taken.
    pub fn abandon_derivation(&mut self, arrival_us: i64) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE requests SET derivations_pending = 0 WHERE id =
                (SELECT id FROM requests WHERE derivations_pending = 1 AND arrival_us = ?1
                 ORDER BY id LIMIT 1)",
            params![arrival_us],
        )?;
        Ok(())
    }

    /// Rows whose derivations are still to come.
    pub fn derivations_pending(&self) -> Result<u64, StoreError> {
        let n: i64 = self.conn.query_row(
            "SELECT count(*) FROM requests WHERE derivations_pending = 1",
            [],
            |r| r.get(0),
        )?;
        Ok(to_u64(n))
    }
}

fn derive_row(tx: &Connection, d: &Derivation) -> Result<(), StoreError> {
    let row: Option<(i64, Option<String>, Option<String>)> = tx
        .prepare_cached(
            "SELECT id, session, model FROM requests
             WHERE derivations_pending = 1 AND arrival_us = ?1
             ORDER BY id LIMIT 1",
        )?
        .query_row(params![d.arrival_us], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()?;
    let Some((id, session, model)) = row else {
        return Ok(());
    };
    tx.prepare_cached("UPDATE requests SET derivations_pending = 0 WHERE id = ?1")?
        .execute(params![id])?;
    let (Some(session), Some(fp)) = (session, &d.fingerprint) else {
        return Ok(());
    };
    if let Some((sent, client, previous_id)) =
        previous_prompt(tx, &session, model.as_deref(), d.arrival_us)?
    {
        let bust = bust_between(
            (&sent, client.as_deref()),
            (fp, d.client_fingerprint.as_deref()),
        );
        // From unpaired: the same moves as a re-pairing.
        repair_bust(tx, id, bust, previous_id)?;
    }
    let keys = PromptKeys {
        id,
        session: &session,
        model: model.as_deref(),
        arrival: d.arrival_us,
    };
    keep_prompt(tx, &keys, fp, d.client_fingerprint.as_deref())
}

/// What one commit of the proxy's writers holds ([`Ledger::write_batch`]).
#[derive(Debug, Default)]
pub struct WriteBatch<'a> {
    /// Rows to insert.
    pub rows: &'a [Row],
    /// Requests whose answer started, by arrival, with what the writer needs to write their
    /// row should they never end.
    pub opened: &'a [(i64, Vec<u8>)],
    /// Requests (by arrival) whose row this batch writes: no longer open.
    pub closed: &'a [i64],
    /// Counters to set (the spool position reached).
    pub counters: &'a [(&'a str, u64)],
}

/// Set the bust of the row `id`, paired anew with `previous_id`, a request that arrived before
/// it but was written after it, and move the totals (and the bust charge) its old pairing had
/// counted.
fn repair_bust(
    tx: &Connection,
    id: i64,
    bust: Option<(usize, usize, &'static str)>,
    previous_id: i64,
) -> Result<(), StoreError> {
    uncharge_bust(tx, id)?;
    if let Some((_, _, "pith")) = bust {
        charge_bust(tx, id, previous_id)?;
    }
    let (old_checked, old_cause, session, model, account): (
        i64,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ) = tx.query_row(
        "SELECT bust_checked, bust_cause, session, model, account FROM requests WHERE id = ?1",
        params![id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
    )?;
    tx.execute(
        "UPDATE requests SET bust_checked = 1, bust_at = ?2, bust_cached_through = ?3,
                bust_cause = ?4
         WHERE id = ?1",
        params![
            id,
            bust.map(|b| to_i64(b.0 as u64)),
            bust.map(|b| to_i64(b.1 as u64)),
            bust.map(|b| b.2)
        ],
    )?;
    let count = |cause: Option<&str>, of: &str| i64::from(cause == Some(of));
    let new_cause = bust.map(|b| b.2);
    let pairs = 1 - old_checked;
    let pith = count(new_cause, "pith") - count(old_cause.as_deref(), "pith");
    let client = count(new_cause, "client") - count(old_cause.as_deref(), "client");
    if (pairs, pith, client) == (0, 0, 0) {
        return Ok(());
    }
    for (table, key) in [
        (
            "group_totals",
            totals_key('s', session.as_deref(), model.as_deref()),
        ),
        (
            "account_totals",
            totals_key('a', account.as_deref(), model.as_deref()),
        ),
    ] {
        tx.execute(
            &format!(
                "UPDATE {table} SET bust_pairs = bust_pairs + ?2, busts_pith = busts_pith + ?3,
                        busts_client = busts_client + ?4
                 WHERE k = ?1"
            ),
            params![key, pairs, pith, client],
        )?;
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

/// A row's usage and keys, as a bust charge needs them.
struct Charged {
    wire: Option<String>,
    usage: Option<pith_wire::usage::Usage>,
    session: Option<String>,
    model: Option<String>,
    account: Option<String>,
}

fn charged(tx: &Connection, id: i64) -> Result<Charged, StoreError> {
    Ok(tx
        .prepare_cached(
            "SELECT wire, input_tokens, cache_write_tokens, cache_write_1h_tokens,
                    cache_read_tokens, session, model, account
             FROM requests WHERE id = ?1",
        )?
        .query_row(params![id], |r| {
            let input: Option<i64> = r.get(1)?;
            let count = |i: usize| -> rusqlite::Result<u64> {
                Ok(to_u64(r.get::<_, Option<i64>>(i)?.unwrap_or(0)))
            };
            Ok(Charged {
                wire: r.get(0)?,
                usage: match input {
                    Some(input) => Some(pith_wire::usage::Usage {
                        input: to_u64(input),
                        output: 0,
                        cache_write: count(2)?,
                        cache_write_1h: count(3)?,
                        cache_read: count(4)?,
                    }),
                    None => None,
                },
                session: r.get(5)?,
                model: r.get(6)?,
                account: r.get(7)?,
            })
        })?)
}

/// The first stage that changed the request `id`, by pipeline position.
fn first_applied(tx: &Connection, id: i64) -> Result<Option<String>, StoreError> {
    Ok(tx
        .prepare_cached(
            "SELECT stage FROM transform_results WHERE request_id = ?1 AND result = 'applied'
             ORDER BY position LIMIT 1",
        )?
        .query_row(params![id], |r| r.get(0))
        .optional()?)
}

/// What a bust pith caused cost, in prompt tokens billed again: the prefix the previous
/// request left in the cache (Anthropic: what it read and wrote there; OpenAI, which caches
/// a prompt whole: its whole prompt) that this request, the same prefix as far as the client
/// is concerned, did not read; and the rate they were billed at instead (this request's band
/// just past what it read: a cache write, or uncached input). `None` when it read all of it
/// or either request has no usage.
pub(super) fn bust_cost(
    automatic: bool,
    previous: &pith_wire::usage::Usage,
    next: &pith_wire::usage::Usage,
) -> Option<(pith_wire::usage::Band, u64)> {
    let left_cached = if automatic {
        previous.prompt_total()
    } else {
        previous.cache_read + previous.cache_write
    };
    let billed_again = left_cached
        .min(next.prompt_total())
        .saturating_sub(next.cache_read);
    (billed_again > 0).then(|| (next.band_at(next.cache_read), billed_again))
}

/// Charge the bust pith caused on row `id` (paired with `previous_id`) to the stage that
/// caused it, as savings of stage `bust:<stage>`: the tokens billed again, negative at the
/// rate they were billed at and positive at the cache-read rate they would have had (so the
/// pair prices the difference, and adds no tokens). The stage is the first one that changed
/// this request, else the first that changed the previous one (pith stopped changing
/// something), else `pith`.
fn charge_bust(tx: &Connection, id: i64, previous_id: i64) -> Result<(), StoreError> {
    let next = charged(tx, id)?;
    let previous = charged(tx, previous_id)?;
    let (Some(next_usage), Some(previous_usage)) = (next.usage, previous.usage) else {
        return Ok(());
    };
    let automatic = next.wire.as_deref() != Some(pith_wire::Wire::AnthropicMessages.as_str());
    let Some((band, tokens)) = bust_cost(automatic, &previous_usage, &next_usage) else {
        return Ok(());
    };
    let stage = match first_applied(tx, id)? {
        Some(stage) => stage,
        None => first_applied(tx, previous_id)?.unwrap_or_else(|| "pith".to_owned()),
    };
    let stage = format!("{BUST_CHARGE}{stage}");
    let tokens = to_i64(tokens);
    for (band, tokens) in [(band, -tokens), (pith_wire::usage::Band::CacheRead, tokens)] {
        add_saving(tx, id, &next, &stage, band.as_str(), tokens)?;
    }
    Ok(())
}

/// Take back the bust charge of row `id` (its pairing is changing).
fn uncharge_bust(tx: &Connection, id: i64) -> Result<(), StoreError> {
    let charges: Vec<(String, String, i64)> = tx
        .prepare_cached(
            "SELECT stage, band, tokens FROM savings WHERE request_id = ?1
                AND substr(stage, 1, length(?2)) = ?2",
        )?
        .query_map(params![id, BUST_CHARGE], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<Result<_, _>>()?;
    if charges.is_empty() {
        return Ok(());
    }
    let row = charged(tx, id)?;
    for (stage, band, tokens) in &charges {
        add_saving(tx, id, &row, stage, band, -tokens)?;
    }
    tx.execute(
        "DELETE FROM savings WHERE request_id = ?1 AND substr(stage, 1, length(?2)) = ?2",
        params![id, BUST_CHARGE],
    )?;
    Ok(())
}

/// Add `tokens` at `band` to the saving of `stage` on row `id` and to the totals it moves.
fn add_saving(
    tx: &Connection,
    id: i64,
    row: &Charged,
    stage: &str,
    band: &str,
    tokens: i64,
) -> Result<(), StoreError> {
    tx.prepare_cached(ADD_SAVING)?
        .execute(params![id, stage, band, tokens])?;
    for (sql, key, first) in [
        (
            ADD_SAVING_TOTAL,
            totals_key('s', row.session.as_deref(), row.model.as_deref()),
            &row.session,
        ),
        (
            ADD_ACCOUNT_SAVING_TOTAL,
            totals_key('a', row.account.as_deref(), row.model.as_deref()),
            &row.account,
        ),
    ] {
        tx.prepare_cached(sql)?
            .execute(params![key, first, row.model, stage, band, tokens])?;
    }
    Ok(())
}
