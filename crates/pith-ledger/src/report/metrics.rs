//! The report as Prometheus' text exposition format, what `/metrics` serves.

use pith_outcome::Refusal;

use super::{Report, Totals};

/// The report in Prometheus' text format (`/metrics`): the same numbers as `pith stats
/// --json`.
pub fn metrics(r: &Report) -> String {
    let families = [
        request_families(r),
        account_families(r),
        vec![instance_family(r)],
        transform_families(r),
        count_families(r),
        ledger_families(r),
        latency_families(r),
        vec![bust_family(r)],
    ];
    let mut out = String::new();
    for f in families.iter().flatten() {
        out.push_str(&format!(
            "# HELP {} {}\n# TYPE {} {}\n",
            f.name, f.help, f.name, f.kind
        ));
        for (labels, value) in &f.samples {
            out.push_str(&format!("{}{labels} {value}\n", f.name));
        }
    }
    out
}

/// One metric family: its name, type, help and samples (labels as written, value).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(String, f64)>,
}

fn family(
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(String, f64)>,
) -> Family {
    Family {
        name,
        kind,
        help,
        samples,
    }
}

/// One sample without labels.
fn single(value: f64) -> Vec<(String, f64)> {
    vec![(String::new(), value)]
}

fn request_families(r: &Report) -> Vec<Family> {
    let t = &r.total;
    let tokens = [
        ("input", t.usage.input),
        ("cache_write", t.usage.cache_write),
        ("cache_read", t.usage.cache_read),
        ("output", t.usage.output),
    ]
    .into_iter()
    .map(|(k, v)| (format!("{{kind=\"{k}\"}}"), v as f64))
    .collect();
    vec![
        family(
            "pith_requests_total",
            "counter",
            "Requests pith recorded.",
            single(t.requests as f64),
        ),
        family(
            "pith_request_errors_total",
            "counter",
            "Requests that ended in an error.",
            single(t.errors as f64),
        ),
        family(
            "pith_tokens_total",
            "counter",
            "Billed tokens by kind, as the providers reported them.",
            tokens,
        ),
        family(
            "pith_cost_usd_total",
            "counter",
            "Cost of the priced requests at list prices, USD.",
            single(t.cost_usd.unwrap_or(0.0)),
        ),
    ]
}

fn account_families(r: &Report) -> Vec<Family> {
    let per_account = |value: fn(&Totals) -> f64| -> Vec<(String, f64)> {
        r.by_account
            .iter()
            .map(|a| {
                (
                    format!("{{account=\"{}\"}}", label(&a.account)),
                    value(&a.totals),
                )
            })
            .collect()
    };
    vec![
        family(
            "pith_account_requests_total",
            "counter",
            "Requests pith recorded, by account (a gateway maps each to its key's).",
            per_account(|t| t.requests as f64),
        ),
        family(
            "pith_account_cost_usd_total",
            "counter",
            "Cost of each account's priced requests at list prices, USD.",
            per_account(|t| t.cost_usd.unwrap_or(0.0)),
        ),
    ]
}

fn instance_family(r: &Report) -> Family {
    family(
        "pith_instance_requests_total",
        "counter",
        "Requests pith recorded, by the proxy instance that served them.",
        r.by_instance
            .iter()
            .map(|i| {
                (
                    format!(
                        "{{instance=\"{}\"}}",
                        label(i.instance.as_deref().unwrap_or(""))
                    ),
                    i.requests as f64,
                )
            })
            .collect(),
    )
}

fn transform_families(r: &Report) -> Vec<Family> {
    let mut stages = Vec::new();
    for (stage, tt) in &r.transforms {
        stages.push((
            format!(
                "{{stage=\"{}\",result=\"applied\",reason=\"\"}}",
                label(stage)
            ),
            tt.requests as f64,
        ));
        for (reason, n) in &tt.unchanged {
            stages.push((
                format!(
                    "{{stage=\"{}\",result=\"unchanged\",reason=\"{}\"}}",
                    label(stage),
                    label(reason)
                ),
                *n as f64,
            ));
        }
    }
    vec![
        family(
            "pith_transform_requests_total",
            "counter",
            "Requests each transform stage changed or left unchanged (with why).",
            stages,
        ),
        family(
            "pith_transform_failures_total",
            "counter",
            "Transform stages that failed and were skipped (fail open).",
            single(r.transform_failures as f64),
        ),
    ]
}

/// The provider's own counts of sampled changed requests (`[proxy] provider_counts`), by how
/// each ended, and what they and pith's estimate say the stages kept out of those compared.
fn count_families(r: &Report) -> Vec<Family> {
    let c = r
        .provider_counts
        .as_ref()
        .map(|c| c.sums.clone())
        .unwrap_or_default();
    let by_outcome = [
        ("counted", c.counted),
        ("rate_limited", c.rate_limited),
        ("failed", c.failed),
        ("paused", c.paused),
    ]
    .iter()
    .map(|(outcome, n)| (format!("{{outcome=\"{outcome}\"}}"), *n as f64))
    .collect();
    vec![
        family(
            "pith_provider_counts_total",
            "counter",
            "Sampled changed requests the provider's token counter was asked to count, by how \
             it ended (rate_limited: its 429, never retried; paused: not asked during its wait).",
            by_outcome,
        ),
        family(
            "pith_kept_out_tokens",
            "gauge",
            "Tokens the stages kept out of the compared requests, by the provider's count and by \
             pith's estimate.",
            vec![
                ("{by=\"provider\"}".to_owned(), c.counted_kept_out as f64),
                ("{by=\"pith\"}".to_owned(), c.estimated_kept_out as f64),
            ],
        ),
    ]
}

fn ledger_families(r: &Report) -> Vec<Family> {
    vec![
        family(
            "pith_ledger_dropped_rows_total",
            "counter",
            "Requests served but not kept for the ledger (spool at its limit, or disk refused).",
            single(r.dropped_rows as f64),
        ),
        family(
            "pith_ledger_damaged_spool_entries_total",
            "counter",
            "Requests kept in the spool but found damaged when read (a write torn by a kill), skipped.",
            single(r.damaged_spool_entries as f64),
        ),
        family(
            "pith_refused_requests_total",
            "counter",
            "Requests refused before they were served, by reason (no ledger row each).",
            Refusal::ALL
                .iter()
                .map(|reason| {
                    (
                        format!("{{reason=\"{}\"}}", reason.as_str()),
                        r.refused_requests
                            .get(reason.as_str())
                            .copied()
                            .unwrap_or(0) as f64,
                    )
                })
                .collect(),
        ),
        family(
            "pith_ledger_backlog_requests",
            "gauge",
            "Requests waiting in the spool to be written to the ledger.",
            single(r.ledger_backlog.requests as f64),
        ),
        family(
            "pith_ledger_derivations_pending",
            "gauge",
            "Rows written whose derivations (prompt fingerprints and busts, history turns) wait.",
            single(r.ledger_backlog.derivations as f64),
        ),
    ]
}

fn latency_families(r: &Report) -> Vec<Family> {
    [
        (
            "pith_request_duration_seconds",
            "Requests from arrival to the last byte out.",
            &r.latency.total_ms,
        ),
        (
            "pith_time_to_first_byte_seconds",
            "Requests from arrival to the provider's first body byte.",
            &r.latency.ttfb_ms,
        ),
    ]
    .into_iter()
    .map(|(name, help, h)| {
        let mut samples: Vec<(String, f64)> = pith_store::ledger::LATENCY_BUCKETS_MS
            .iter()
            .zip(&h.cumulative)
            .map(|(le, n)| {
                (
                    format!("_bucket{{le=\"{}\"}}", *le as f64 / 1000.0),
                    *n as f64,
                )
            })
            .collect();
        samples.push(("_bucket{le=\"+Inf\"}".to_owned(), h.count as f64));
        samples.push(("_sum".to_owned(), h.sum_ms / 1000.0));
        samples.push(("_count".to_owned(), h.count as f64));
        family(name, "histogram", help, samples)
    })
    .collect()
}

fn bust_family(r: &Report) -> Family {
    family(
        "pith_cache_busts_total",
        "counter",
        "Prompt-cache busts between consecutive requests of a session, by who caused them.",
        vec![
            ("{cause=\"pith\"}".to_owned(), r.cache_busts.by_pith as f64),
            (
                "{cause=\"client\"}".to_owned(),
                r.cache_busts.by_client as f64,
            ),
        ],
    )
}

/// A Prometheus label value, escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
