//! Reading the ledger: totals kept on write, busts, timelines, recent rows.

use super::columns::{self, Column, Kind, Value};
use super::*;

/// A `SELECT key, model, stage, band, sum(tokens)` row.
fn saving_sum<K: rusqlite::types::FromSql>(
    r: &rusqlite::Row<'_>,
) -> rusqlite::Result<SavingSum<K>> {
    Ok(SavingSum {
        key: r.get(0)?,
        model: r.get(1)?,
        stage: r.get(2)?,
        band: r.get(3)?,
        tokens: r.get(4)?,
    })
}

/// A [`TimeBucket`] from a query naming its columns `start_ms`, `model`, `requests`, `input`,
/// `output`, `cache_write`, `cache_write_1h`, `cache_read`.
fn time_bucket(r: &rusqlite::Row<'_>) -> rusqlite::Result<TimeBucket> {
    Ok(TimeBucket {
        start_ms: r.get("start_ms")?,
        model: r.get("model")?,
        requests: to_u64(r.get("requests")?),
        usage: usage_sums(r)?,
    })
}

/// A request's [`Row`], its columns read by name (its transform entries and savings are in
/// tables of their own, read apart); the prompt's fingerprints as `sent` and `as_client`.
fn row_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    let mut row = columns::read(
        |c| sqlite_value(r, c),
        |e| rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Null, e.into()),
    )?
    .finish();
    row.fingerprint = r.get("sent")?;
    row.client_fingerprint = r.get("as_client")?;
    row.account = r.get("account")?;
    row.arrival_us = r.get("arrival_us")?;
    row.instance = r.get("instance")?;
    Ok(row)
}

/// A shared column's value in a SQLite row, by its name.
fn sqlite_value(r: &rusqlite::Row<'_>, c: &Column) -> rusqlite::Result<Value> {
    Ok(match (c.kind, c.required) {
        (Kind::Int | Kind::Int4, true) => Value::Int(Some(r.get(c.name)?)),
        (Kind::Int | Kind::Int4, false) => Value::Int(r.get(c.name)?),
        (Kind::Real, true) => Value::Real(Some(r.get(c.name)?)),
        (Kind::Real, false) => Value::Real(r.get(c.name)?),
        (Kind::Text, true) => Value::Text(Some(r.get(c.name)?)),
        (Kind::Text, false) => Value::Text(r.get(c.name)?),
    })
}

/// Summed token columns named as the totals tables name them (`input`, `output`,
/// `cache_write`, `cache_write_1h`, `cache_read`).
fn usage_sums(r: &rusqlite::Row<'_>) -> rusqlite::Result<Usage> {
    Ok(Usage {
        input: to_u64(r.get("input")?),
        output: to_u64(r.get("output")?),
        cache_write: to_u64(r.get("cache_write")?),
        cache_write_1h: to_u64(r.get("cache_write_1h")?),
        cache_read: to_u64(r.get("cache_read")?),
    })
}

/// The request's own columns [`recent_row`] reads, of `requests r` (a macro, to be `concat!`ed).
macro_rules! recent_own_columns {
    () => {
        "r.id, r.ts_ms, r.client, r.session, r.wire, r.model, r.path, r.status, r.outcome,
         r.input_tokens, r.output_tokens, r.cache_write_tokens, r.cache_read_tokens, r.ttfb_ms,
         r.total_ms, r.tools_bytes, r.system_bytes, r.messages_bytes, r.other_bytes,
         r.cache_write_1h_tokens"
    };
}

/// The columns [`recent_row`] reads, of `requests r`: the request's own, then the stages that
/// changed it.
pub(super) const RECENT_COLUMNS: &str = concat!(
    recent_own_columns!(),
    ", (SELECT group_concat(t.stage, ',') FROM transform_results t
       WHERE t.request_id = r.id AND t.result = 'applied') AS transforms"
);

/// [`RECENT_COLUMNS`] with `NULL` for the stages, for a caller that reads them otherwise.
pub(super) const RECENT_WITHOUT_STAGES: &str =
    concat!(recent_own_columns!(), ", NULL AS transforms");

/// A request as a live view shows it, from [`RECENT_COLUMNS`].
pub(super) fn recent_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Recent> {
    let n = |name: &str| -> rusqlite::Result<u64> {
        Ok(to_u64(r.get::<_, Option<i64>>(name)?.unwrap_or(0)))
    };
    let transforms: Option<String> = r.get("transforms")?;
    Ok(Recent {
        id: r.get("id")?,
        ts_ms: r.get("ts_ms")?,
        client: r.get("client")?,
        session: r.get("session")?,
        wire: r.get("wire")?,
        model: r.get("model")?,
        path: r.get("path")?,
        status: r.get("status")?,
        outcome: r.get("outcome")?,
        usage: Usage {
            input: n("input_tokens")?,
            output: n("output_tokens")?,
            cache_write: n("cache_write_tokens")?,
            cache_write_1h: n("cache_write_1h_tokens")?,
            cache_read: n("cache_read_tokens")?,
        },
        ttfb_ms: r.get("ttfb_ms")?,
        total_ms: r.get("total_ms")?,
        tools_bytes: n("tools_bytes")?,
        system_bytes: n("system_bytes")?,
        messages_bytes: n("messages_bytes")?,
        other_bytes: n("other_bytes")?,
        transforms: transforms
            .map(|t| t.split(',').map(str::to_owned).collect())
            .unwrap_or_default(),
    })
}

/// A [`Group`] from a query with the totals tables' columns (`group_totals`,
/// `account_totals`), the session's or account's named `first`.
fn group_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Group> {
    let n = |name: &str| -> rusqlite::Result<u64> { Ok(to_u64(r.get(name)?)) };
    Ok(Group {
        session: r.get("first")?,
        client: r.get("client")?,
        model: r.get("model")?,
        requests: n("requests")?,
        with_usage: n("with_usage")?,
        usage: usage_sums(r)?,
        errors: n("errors")?,
        local: n("local")?,
        transformed: n("transformed")?,
        transform_failures: n("failures")?,
        first_ms: r.get("first_ms")?,
        last_ms: r.get("last_ms")?,
        bust_pairs: n("bust_pairs")?,
        busts_pith: n("busts_pith")?,
        busts_client: n("busts_client")?,
    })
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
        Ok(self.counter_if_set(name)?.unwrap_or(0))
    }

    /// The named counter's value; `None` when it was never set.
    pub fn counter_if_set(&self, name: &str) -> Result<Option<u64>, StoreError> {
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
        Ok(v.map(to_u64))
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

    /// Requests per instance that served them, the busiest first; rows from before instances
    /// were kept are the one with no name.
    pub fn instance_totals(&self, filter: &Filter) -> Result<Vec<InstanceTotals>, StoreError> {
        let read = |r: &rusqlite::Row<'_>| {
            Ok(InstanceTotals {
                instance: r.get(0)?,
                requests: to_u64(r.get(1)?),
                errors: to_u64(r.get(2)?),
                first_ms: r.get(3)?,
                last_ms: r.get(4)?,
            })
        };
        let rows = if filter.since_ms.is_some() || filter.session.is_some() {
            let mut stmt = self.conn.prepare_cached(&format!(
                "SELECT instance, count(*), coalesce(sum(outcome NOT IN ('ok', 'local')), 0),
                        min(ts_ms), max(ts_ms)
                 FROM requests WHERE {FILTERED}
                 GROUP BY instance ORDER BY count(*) DESC, instance"
            ))?;
            stmt.query_map(params![filter.since_ms, filter.session], read)?
                .collect::<Result<Vec<_>, _>>()?
        } else {
            let mut stmt = self.conn.prepare_cached(
                "SELECT instance, requests, errors, first_ms, last_ms FROM instance_totals
                 ORDER BY requests DESC, instance",
            )?;
            stmt.query_map([], read)?.collect::<Result<Vec<_>, _>>()?
        };
        Ok(rows)
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
            "SELECT {by} AS first, * FROM {table} WHERE (?1 IS NULL OR {by} = ?1)
             ORDER BY first_ms, {by}, model",
        ))?;
        let rows = stmt.query_map(params![only], group_of)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// [`Ledger::groups`] (or by `account`) computed from the requests themselves (any
    /// filter); `by` is read into `Group::session`.
    fn groups_scanned(&self, by: &str, filter: &Filter) -> Result<Vec<Group>, StoreError> {
        self.groups_where(by, "min(client)", FILTERED, &format!("{by}, model"), filter)
    }

    /// Totals per (client, model) of the requests without a session that `filter` covers
    /// (none when it names a session). [`Ledger::groups`] keeps those as one group per model,
    /// named for the least of their clients; a report per client reads them here, from the
    /// requests themselves (`requests_session` holds them together).
    pub fn sessionless_by_client(&self, filter: &Filter) -> Result<Vec<Group>, StoreError> {
        self.groups_where(
            "NULL",
            "client",
            "requests.session IS NULL AND (?1 IS NULL OR requests.ts_ms >= ?1) AND ?2 IS NULL",
            "client, model",
            filter,
        )
    }

    /// What the stages saved on the requests without a session that `filter` covers, per
    /// (client, model, stage, rate).
    pub fn sessionless_savings_by_client(
        &self,
        filter: &Filter,
    ) -> Result<Vec<ClientSaving>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT requests.client, requests.model, s.stage, s.band, sum(s.tokens)
             FROM requests JOIN savings s ON s.request_id = requests.id
             WHERE requests.session IS NULL AND (?1 IS NULL OR requests.ts_ms >= ?1)
                AND ?2 IS NULL
             GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4",
        )?;
        let rows = stmt.query_map(params![filter.since_ms, filter.session], saving_sum)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Totals of the requests matching `condition` (parameters `?1`, `?2` as [`FILTERED`]'s),
    /// grouped by `group`, with `first` read into `Group::session` and `client` into its
    /// client.
    fn groups_where(
        &self,
        first: &str,
        client: &str,
        condition: &str,
        group: &str,
        filter: &Filter,
    ) -> Result<Vec<Group>, StoreError> {
        let sql = format!(
            "SELECT {first} AS first, {client} AS client, model, count(*) AS requests,
                    count(input_tokens) AS with_usage,
                    coalesce(sum(input_tokens), 0) AS input,
                    coalesce(sum(output_tokens), 0) AS output,
                    coalesce(sum(cache_write_tokens), 0) AS cache_write,
                    coalesce(sum(cache_read_tokens), 0) AS cache_read,
                    sum(outcome NOT IN ('ok', 'local')) AS errors,
                    sum(outcome = 'local') AS local,
                    sum(EXISTS (SELECT 1 FROM transform_results t
                                WHERE t.request_id = requests.id AND t.result = 'applied'))
                        AS transformed,
                    sum((SELECT count(*) FROM transform_results t
                         WHERE t.request_id = requests.id AND t.result = 'failed')) AS failures,
                    min(ts_ms) AS first_ms, max(ts_ms) AS last_ms,
                    coalesce(sum(cache_write_1h_tokens), 0) AS cache_write_1h,
                    sum(bust_checked) AS bust_pairs,
                    coalesce(sum(bust_cause = 'pith'), 0) AS busts_pith,
                    coalesce(sum(bust_cause = 'client'), 0) AS busts_client
             FROM requests
             WHERE {condition}
             GROUP BY {group}
             ORDER BY min(ts_ms), {group}"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params![filter.since_ms, filter.session], group_of)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The sessions with a request whose stages reported `stage` (e.g. `holdout`: the
    /// sessions held out from every transform), among the rows `filter` covers.
    pub fn sessions_with_stage(
        &self,
        stage: &str,
        filter: &Filter,
    ) -> Result<Vec<String>, StoreError> {
        let sql = format!(
            "SELECT DISTINCT requests.session
             FROM transform_results t JOIN requests ON requests.id = t.request_id
             WHERE t.stage = ?3 AND requests.session IS NOT NULL AND {FILTERED}
             ORDER BY 1"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params![filter.since_ms, filter.session, stage], |r| {
            r.get::<_, String>(0)
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The requests `filter` covers that were sampled for the provider's count, summed (the
    /// partial index `requests_provider_counted` holds only them).
    pub fn provider_counts(&self, filter: &Filter) -> Result<ProviderCountSums, StoreError> {
        let sql = format!(
            "WITH sampled AS (
                 SELECT requests.provider_count_outcome AS outcome,
                        requests.provider_count_tokens AS counted,
                        requests.input_tokens + coalesce(requests.cache_write_tokens, 0)
                            + coalesce(requests.cache_read_tokens, 0) AS billed,
                        coalesce((SELECT sum(s.tokens) FROM savings s
                                  WHERE s.request_id = requests.id
                                    AND substr(s.stage, 1, length(?3)) != ?3), 0) AS estimated
                 FROM requests
                 WHERE requests.provider_count_outcome IS NOT NULL AND {FILTERED})
             SELECT count(*),
                    coalesce(sum(outcome = 'counted'), 0),
                    coalesce(sum(outcome = 'rate_limited'), 0),
                    coalesce(sum(outcome = 'paused'), 0),
                    coalesce(sum(outcome NOT IN ('counted', 'rate_limited', 'paused')), 0),
                    coalesce(sum(counted IS NOT NULL AND billed IS NOT NULL), 0),
                    coalesce(sum(CASE WHEN counted IS NOT NULL AND billed IS NOT NULL
                                      THEN counted - billed END), 0),
                    coalesce(sum(CASE WHEN counted IS NOT NULL AND billed IS NOT NULL
                                      THEN estimated END), 0)
             FROM sampled"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let sums = stmt.query_row(params![filter.since_ms, filter.session, BUST_CHARGE], |r| {
            Ok(ProviderCountSums {
                sampled: to_u64(r.get(0)?),
                counted: to_u64(r.get(1)?),
                rate_limited: to_u64(r.get(2)?),
                paused: to_u64(r.get(3)?),
                failed: to_u64(r.get(4)?),
                compared: to_u64(r.get(5)?),
                counted_kept_out: r.get(6)?,
                estimated_kept_out: r.get(7)?,
            })
        })?;
        Ok(sums)
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
            "SELECT session, model, ts_ms, bust_at, bust_cached_through, bust_cause, id, wire
             FROM requests WHERE bust_cause IS NOT NULL AND {FILTERED} ORDER BY id DESC LIMIT 100"
        );
        let mut stmt = self.conn.prepare_cached(&list)?;
        let mut busts = stmt
            .query_map(params![filter.since_ms, filter.session], |r| {
                Ok((
                    Bust {
                        session: r.get::<_, Option<String>>(0)?.unwrap_or_default(),
                        model: r.get(1)?,
                        ts_ms: r.get(2)?,
                        segment: to_u64(r.get(3)?),
                        cached_through: to_u64(r.get(4)?),
                        cause: r.get(5)?,
                        id: r.get(6)?,
                        segment_words: None,
                        stage: None,
                    },
                    r.get::<_, Option<String>>(7)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        for (bust, wire) in &mut busts {
            bust.segment_words = self.bust_words(bust.id, wire.as_deref(), bust.segment)?;
            bust.stage = self.bust_stage(bust.id)?;
        }
        let busts = busts.into_iter().map(|(bust, _)| bust).collect();
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
        if filter.session.is_some() || width % HOUR_MS != 0 {
            return self.timeline_scan(filter, width, None);
        }
        // Whole hours from the totals kept on write; a partial first hour (a `since` inside
        // it) from the requests themselves.
        let first_hour = filter
            .since_ms
            .map(|s| s.div_euclid(HOUR_MS) * HOUR_MS + if s % HOUR_MS == 0 { 0 } else { HOUR_MS });
        let mut buckets: BTreeMap<(i64, Option<String>), TimeBucket> = BTreeMap::new();
        let mut add = |b: TimeBucket| {
            let into = buckets
                .entry((b.start_ms, b.model.clone()))
                .or_insert_with(|| TimeBucket {
                    start_ms: b.start_ms,
                    model: b.model.clone(),
                    ..TimeBucket::default()
                });
            into.requests += b.requests;
            into.usage += b.usage;
        };
        if let Some(until) = first_hour.filter(|h| filter.since_ms != Some(*h)) {
            for b in self.timeline_scan(filter, width, Some(until))? {
                add(b);
            }
        }
        let mut stmt = self.conn.prepare_cached(
            "SELECT (hour_ms / ?2) * ?2 AS start_ms, model, sum(requests) AS requests,
                    sum(input) AS input, sum(output) AS output, sum(cache_write) AS cache_write,
                    sum(cache_write_1h) AS cache_write_1h, sum(cache_read) AS cache_read
             FROM hour_totals WHERE ?1 IS NULL OR hour_ms >= ?1
             GROUP BY 1, k",
        )?;
        let rows = stmt.query_map(params![first_hour, width], time_bucket)?;
        for b in rows {
            add(b?);
        }
        Ok(buckets.into_values().collect())
    }

    /// [`Ledger::timeline`] by scanning the requests (before `until`, when given).
    pub(super) fn timeline_scan(
        &self,
        filter: &Filter,
        width: i64,
        until: Option<i64>,
    ) -> Result<Vec<TimeBucket>, StoreError> {
        let sql = format!(
            "SELECT (ts_ms / ?3) * ?3 AS start_ms, model, count(*) AS requests,
                    coalesce(sum(input_tokens), 0) AS input,
                    coalesce(sum(output_tokens), 0) AS output,
                    coalesce(sum(cache_write_tokens), 0) AS cache_write,
                    coalesce(sum(cache_write_1h_tokens), 0) AS cache_write_1h,
                    coalesce(sum(cache_read_tokens), 0) AS cache_read
             FROM requests WHERE {FILTERED} AND (?4 IS NULL OR ts_ms < ?4)
             GROUP BY 1, 2 ORDER BY 1, 2"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(
            params![filter.since_ms, filter.session, width, until],
            time_bucket,
        )?;
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
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {RECENT_COLUMNS} FROM requests r WHERE (?1 IS NULL OR r.id > ?1)
             ORDER BY r.id DESC LIMIT ?2"
        ))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![after_id, limit], recent_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every row in arrival order (rows that arrived together, as written), with its transform
    /// entries (tests and export).
    pub fn rows(&self) -> Result<Vec<Row>, StoreError> {
        let mut rows: Vec<Row> = self
            .read_rows(0, usize::MAX, false)?
            .into_iter()
            .map(|(_, row)| row)
            .collect();
        // Stable: rows that arrived together stay in the order they were written.
        rows.sort_by_key(|r| r.arrival_us.unwrap_or(r.ts_ms.saturating_mul(1000)));
        Ok(rows)
    }

    /// At most `limit` rows with an id above `after_id`, oldest first, each with its id: how
    /// the team ledger's shipper reads what it has not sent yet. It stops before the first row
    /// whose derivations are still to come ([`Row::derivations_pending`]): a row is shipped
    /// whole, once.
    pub fn rows_after(&self, after_id: i64, limit: usize) -> Result<Vec<(i64, Row)>, StoreError> {
        self.read_rows(after_id, limit, true)
    }

    /// [`Ledger::rows_after`]; `whole_only: false` reads the rows still waiting for their
    /// derivations too.
    fn read_rows(
        &self,
        after_id: i64,
        limit: usize,
        whole_only: bool,
    ) -> Result<Vec<(i64, Row)>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let last: Option<i64> = self.conn.query_row(
            "SELECT max(id) FROM (SELECT id FROM requests WHERE id > ?1
                AND (?3 = 0 OR id < coalesce(
                    (SELECT min(id) FROM requests WHERE derivations_pending = 1),
                    9223372036854775807))
             ORDER BY id LIMIT ?2)",
            params![after_id, limit, i64::from(whole_only)],
            |r| r.get(0),
        )?;
        let Some(last) = last else {
            return Ok(Vec::new());
        };
        let mut transforms = self.transforms_by_request(after_id, last)?;
        let mut savings = self.savings_by_request(after_id, last)?;
        let mut stmt = self.conn.prepare_cached(
            "SELECT requests.*, prompts.sent, prompts.as_client
             FROM requests LEFT JOIN prompts ON prompts.request_id = requests.id
             WHERE requests.id > ?1 AND requests.id <= ?2
             ORDER BY requests.id",
        )?;
        let rows = stmt.query_map(params![after_id, last], |r| {
            let id: i64 = r.get("id")?;
            let mut row = row_of(r)?;
            row.transforms = transforms.remove(&id).unwrap_or_default();
            row.savings = savings.remove(&id).unwrap_or_default();
            Ok((id, row))
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
                AND substr(s.stage, 1, length(?3)) != ?3
             ORDER BY s.request_id, t.position, s.stage, s.band",
        )?;
        // Bust charges are the pairing's, made again wherever rows are paired: not a row's own.
        let mut rows = stmt.query(params![after, last, BUST_CHARGE])?;
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
    pub fn savings(&self, filter: &Filter) -> Result<Vec<SessionSaving>, StoreError> {
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
        let rows = stmt.query_map(params![filter.since_ms, filter.session], saving_sum)?;
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
        let rows = stmt.query_map(params![filter.since_ms, filter.session], saving_sum)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The transform entries of the requests with ids in `(after, last]`, stages in the order
    /// they were written.
    pub(super) fn transforms_by_request(
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
