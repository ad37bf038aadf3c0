//! pith's estimate against the provider's own count (`[proxy] provider_counts`, issue 49).
//!
//! pith estimates what a stage kept out at 4 characters a token. For a sampled request a stage
//! changed, the proxy asks the provider's free token counter for the client's own body; the
//! provider's usage for the request already says what the body pith sent cost. Their difference
//! is what the stages kept out *by the provider's count*, beside pith's estimate for the same
//! request: the figure a user can check, and how far the estimate is off.

use pith_store::ledger::ProviderCountSums;
use serde::Serialize;

/// The sampled requests' counts as the ledger summed them (`sampled`, `counted`,
/// `rate_limited` (the counter's 429, never retried, never seen by the client), `failed`,
/// `paused` (not asked during a 429's wait), `compared` (counted, gone up changed, with usage),
/// `counted_kept_out` (the counts of the clients' bodies less the prompt billed for what pith
/// sent) and `estimated_kept_out` (pith's estimate over the same)), and the estimate against
/// the count.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct ProviderCounts {
    /// The sums, at the top level of the JSON.
    #[serde(flatten)]
    pub sums: ProviderCountSums,
    /// How far the estimate was from the count: (estimated − counted) / counted; `None` until
    /// a comparison has a count that is not zero.
    pub estimate_error: Option<f64>,
}

/// The counts the ledger summed over the sampled rows; `None` when none was sampled.
pub fn summarize(sums: ProviderCountSums) -> Option<ProviderCounts> {
    if sums.sampled == 0 {
        return None;
    }
    let (counted, estimated) = (sums.counted_kept_out, sums.estimated_kept_out);
    Some(ProviderCounts {
        estimate_error: (counted != 0)
            .then(|| (estimated as f64 - counted as f64) / (counted as f64).abs()),
        sums,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_measured_against_the_count() {
        assert_eq!(
            summarize(ProviderCountSums::default()),
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
        let c = summarize(sums.clone()).unwrap();
        let s = &c.sums;
        assert_eq!((s.sampled, s.compared, s.failed), (7, 2, 1));
        let error = c.estimate_error.unwrap();
        assert!((error - 0.06).abs() < 1e-9, "{error}");
        let nothing_kept_out = summarize(ProviderCountSums {
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
