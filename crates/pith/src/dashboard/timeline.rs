//! `/pith/api/timeline`: the requests over time, tokens by kind and cost per bucket, for the
//! dashboard's chart. Each model is priced apart (as `pith stats` prices it) and the buckets
//! add up to the same totals as the report.

use pith_store::StoreError;
use pith_store::ledger::{Filter, Ledger};
use serde::Serialize;

use pith_ledger::report::prices::Prices;
use pith_wire::usage::Usage;

/// Bucket widths a chart picks from, narrowest first: about 60 bars or fewer over the span.
const WIDTHS_MS: [i64; 6] = [
    60_000,
    5 * 60_000,
    3_600_000,
    6 * 3_600_000,
    86_400_000,
    7 * 86_400_000,
];
const TARGET_BARS: i64 = 60;
/// The most buckets an asked-for width may make; a narrower one is widened to fit.
const MAX_BUCKETS: i64 = 1_000;

/// One bar of the chart.
#[derive(Debug, Default, Serialize, PartialEq)]
pub(crate) struct Bucket {
    start_ms: i64,
    requests: u64,
    #[serde(flatten)]
    usage: Usage,
    /// Cost of the priced requests, USD; `None` when none had a known price.
    cost_usd: Option<f64>,
    /// Requests of models without a known price (not in `cost_usd`).
    unpriced_requests: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct Timeline {
    bucket_ms: i64,
    buckets: Vec<Bucket>,
}

/// The narrowest width that draws `span_ms` in at most [`TARGET_BARS`] bars.
fn width_for(span_ms: i64) -> i64 {
    WIDTHS_MS
        .into_iter()
        .find(|w| span_ms / w < TARGET_BARS)
        .unwrap_or(WIDTHS_MS[WIDTHS_MS.len() - 1])
}

/// The timeline of the requests `filter` covers, in buckets of `width_ms` (`None`: chosen
/// from their span).
pub(crate) fn timeline(
    ledger: &Ledger,
    filter: &Filter,
    width_ms: Option<i64>,
    prices: &Prices,
) -> Result<Timeline, StoreError> {
    let span = ledger.span(filter)?.map_or(0, |(a, b)| b - a);
    let width = match width_ms {
        Some(w) => w.max(1).max(span / MAX_BUCKETS + 1),
        None => width_for(span),
    };
    let mut buckets: Vec<Bucket> = Vec::new();
    for row in ledger.timeline(filter, width)? {
        if buckets.last().is_none_or(|b| b.start_ms != row.start_ms) {
            buckets.push(Bucket {
                start_ms: row.start_ms,
                ..Bucket::default()
            });
        }
        let Some(b) = buckets.last_mut() else {
            continue;
        };
        b.requests += row.requests;
        b.usage += row.usage;
        match row.model.as_deref().and_then(|m| prices.lookup(m)) {
            Some(p) => {
                *b.cost_usd.get_or_insert(0.0) += p.cost(row.usage);
            }
            None => b.unpriced_requests += row.requests,
        }
    }
    Ok(Timeline {
        bucket_ms: width,
        buckets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_keep_a_chart_under_sixty_bars() {
        assert_eq!(width_for(0), 60_000);
        assert_eq!(width_for(59 * 60_000), 60_000);
        assert_eq!(width_for(60 * 60_000), 5 * 60_000);
        assert_eq!(width_for(3 * 86_400_000), 3_600_000 * 6);
        assert_eq!(width_for(i64::MAX), 7 * 86_400_000);
    }
}
