//! pith's estimate against the provider's own count (`[proxy] provider_counts`, issue 49).
//!
//! pith estimates what a stage kept out at 4 characters a token. For a sampled request a stage
//! changed, the proxy asks the provider's free token counter for the client's own body; the
//! provider's usage for the request already says what the body pith sent cost. Their difference
//! is what the stages kept out *by the provider's count*, beside pith's estimate for the same
//! request: the figure a user can check, and how far the estimate is off.

use pith_store::ledger::ProviderCounted;
use serde::Serialize;

/// The sampled requests' counts, and the estimate against them.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct ProviderCounts {
    /// Requests sampled for a count (a stage changed them, the share picked them).
    pub sampled: u64,
    /// The counter counted them.
    pub counted: u64,
    /// The counter answered 429 (its own rate limit): counted here, never retried, never
    /// seen by the client.
    pub rate_limited: u64,
    /// The counter failed otherwise (an error status, no answer in time, no count in it).
    pub failed: u64,
    /// Sampled while the counter's 429 wait lasted: not asked.
    pub paused: u64,
    /// Counted requests that went up changed and whose answer reported usage: the ones
    /// compared below.
    pub compared: u64,
    /// What the stages kept out of them by the provider's count: its count of each client's
    /// body, less the prompt tokens it billed for the body pith sent.
    pub counted_kept_out: i64,
    /// What pith estimated they kept out, over the same requests.
    pub estimated_kept_out: i64,
    /// How far the estimate was from the count: (estimated − counted) / counted; `None` until
    /// a comparison has a count that is not zero.
    pub estimate_error: Option<f64>,
}

/// The counts over the sampled rows; `None` when none was sampled.
pub fn summarize(rows: &[ProviderCounted]) -> Option<ProviderCounts> {
    if rows.is_empty() {
        return None;
    }
    let mut c = ProviderCounts {
        sampled: rows.len() as u64,
        ..ProviderCounts::default()
    };
    for row in rows {
        match row.outcome.as_str() {
            "counted" => c.counted += 1,
            "rate_limited" => c.rate_limited += 1,
            "paused" => c.paused += 1,
            _ => c.failed += 1,
        }
        if let (Some(counted), Some(billed), Some(estimated), true) =
            (row.counted, row.billed, row.estimated, row.changed)
        {
            c.compared += 1;
            c.counted_kept_out += i64::try_from(counted).unwrap_or(i64::MAX)
                - i64::try_from(billed).unwrap_or(i64::MAX);
            c.estimated_kept_out += estimated;
        }
    }
    if c.counted_kept_out != 0 {
        c.estimate_error = Some(
            (c.estimated_kept_out - c.counted_kept_out) as f64 / c.counted_kept_out.abs() as f64,
        );
    }
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(outcome: &str, counted: Option<u64>, billed: Option<u64>, est: i64) -> ProviderCounted {
        ProviderCounted {
            outcome: outcome.to_owned(),
            counted,
            billed,
            estimated: billed.map(|_| est),
            changed: true,
        }
    }

    #[test]
    fn the_estimate_is_compared_on_counted_requests_with_usage_only() {
        assert_eq!(summarize(&[]), None, "nothing sampled: no section");
        let rows = [
            row("counted", Some(10_000), Some(6_000), 4_400),
            row("counted", Some(5_000), Some(4_000), 900),
            // Counted, but the answer reported no usage: not compared.
            row("counted", Some(7_000), None, 0),
            row("rate_limited", None, Some(3_000), 500),
            row("failed", None, Some(3_000), 500),
            row("paused", None, Some(3_000), 500),
            ProviderCounted {
                changed: false,
                ..row("counted", Some(9_000), Some(9_000), 800)
            },
        ];
        let c = summarize(&rows).unwrap();
        assert_eq!(
            (
                c.sampled,
                c.counted,
                c.rate_limited,
                c.failed,
                c.paused,
                c.compared
            ),
            (7, 4, 1, 1, 1, 2)
        );
        assert_eq!(c.counted_kept_out, 5_000);
        assert_eq!(c.estimated_kept_out, 5_300);
        let error = c.estimate_error.unwrap();
        assert!((error - 0.06).abs() < 1e-9, "{error}");
    }
}
