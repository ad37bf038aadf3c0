//! pith's estimate against the provider's own count (`[proxy] provider_counts`, issue 49).
//!
//! pith estimates what a stage kept out at 4 characters a token. For a sampled request a stage
//! changed, the proxy asks the provider's free token counter for the client's own body; the
//! provider's usage for the request already says what the body pith sent cost. Their difference
//! is what the stages kept out *by the provider's count*, beside pith's estimate for the same
//! request: the figure a user can check, and how far the estimate is off.

use pith_store::ledger::ProviderCountSums;
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

/// The counts the ledger summed over the sampled rows; `None` when none was sampled.
pub fn summarize(sums: &ProviderCountSums) -> Option<ProviderCounts> {
    if sums.sampled == 0 {
        return None;
    }
    let (counted, estimated) = (sums.counted_kept_out, sums.estimated_kept_out);
    Some(ProviderCounts {
        sampled: sums.sampled,
        counted: sums.counted,
        rate_limited: sums.rate_limited,
        failed: sums.failed,
        paused: sums.paused,
        compared: sums.compared,
        counted_kept_out: counted,
        estimated_kept_out: estimated,
        estimate_error: (counted != 0)
            .then(|| (estimated as f64 - counted as f64) / (counted as f64).abs()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_measured_against_the_count() {
        assert_eq!(
            summarize(&ProviderCountSums::default()),
            None,
            "nothing sampled"
        );
        let sums = ProviderCountSums {
            sampled: 7,
            counted: 4,
            rate_limited: 1,
            paused: 1,
            failed: 1,
            compared: 2,
            counted_kept_out: 5_000,
            estimated_kept_out: 5_300,
        };
        let c = summarize(&sums).unwrap();
        assert_eq!((c.sampled, c.compared, c.failed), (7, 2, 1));
        let error = c.estimate_error.unwrap();
        assert!((error - 0.06).abs() < 1e-9, "{error}");
        let nothing_kept_out = summarize(&ProviderCountSums {
            counted_kept_out: 0,
            ..sums
        })
        .unwrap();
        assert_eq!(
            nothing_kept_out.estimate_error, None,
            "no ratio to a zero count"
        );
    }
}
