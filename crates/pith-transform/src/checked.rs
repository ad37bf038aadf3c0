//! The pipeline's check that an edit left JSON, remembered for values seen before.
//!
//! Deferral makes the same `tools` array out of the same client's tools on every request of a
//! session: Claude Code's 36 KB, 17 µs to parse with serde (a twentieth of pith's event loop on
//! its 56 KB body, `perf`, stop 61). A value that parsed is remembered by its 128-bit XXH3
//! (about 3 µs for those 36 KB), seeded anew in each process, and not parsed again. Only the
//! values an edit says it stays inside ([`crate::stage::Edit::within`]) are remembered, and
//! only up to [`REMEMBERED_BYTES_MAX`]: a whole body, or the outputs stage's history array, is
//! new on every request, and hashing it would only add to its parse. A collision would let a
//! broken value through to the provider, whose refusal pith answers by resending the client's
//! own body, as for any stage's mistake.

use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};

use twox_hash::XxHash3_128;

/// How many values each stage's check remembers: a few clients' tool lists at once (a main
/// session and its subagents send different ones).
const PER_STAGE: usize = 8;

/// Values longer than this are parsed every time (tool lists are tens of kilobytes).
const REMEMBERED_BYTES_MAX: usize = 256 << 10;

/// The values that parsed lately, a few per stage, the most recently used last.
pub(crate) struct Checked {
    seed: u64,
    parsed: Mutex<Vec<(&'static str, u128)>>,
}

impl Default for Checked {
    fn default() -> Self {
        Checked {
            seed: std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish(),
            parsed: Mutex::default(),
        }
    }
}

impl Checked {
    /// Whether `value` is one JSON value: remembered, or parsed (and remembered for `stage`
    /// when it is).
    pub(crate) fn is_json(&self, stage: &'static str, value: &[u8]) -> bool {
        if value.len() > REMEMBERED_BYTES_MAX {
            return parses(value);
        }
        let entry = (stage, XxHash3_128::oneshot_with_seed(self.seed, value));
        if self.used(entry) {
            return true;
        }
        if !parses(value) {
            return false;
        }
        let mut parsed = self.lock();
        if !parsed.contains(&entry) {
            if parsed.iter().filter(|(s, _)| *s == stage).count() >= PER_STAGE
                && let Some(oldest) = parsed.iter().position(|(s, _)| *s == stage)
            {
                parsed.remove(oldest);
            }
            parsed.push(entry);
        }
        true
    }

    /// Whether `entry` is remembered; if so it becomes the most recently used.
    fn used(&self, entry: (&'static str, u128)) -> bool {
        let mut parsed = self.lock();
        let Some(at) = parsed.iter().position(|e| *e == entry) else {
            return false;
        };
        let found = parsed.remove(at);
        parsed.push(found);
        true
    }

    /// The list, even if a thread panicked holding it (it holds only hashes).
    fn lock(&self) -> MutexGuard<'_, Vec<(&'static str, u128)>> {
        self.parsed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether `bytes` are one JSON value (serde's parse, nothing kept).
pub(crate) fn parses(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(checked: &Checked, value: &[u8]) -> u128 {
        XxHash3_128::oneshot_with_seed(checked.seed, value)
    }

    #[test]
    fn a_value_that_parsed_is_remembered_and_a_broken_one_never_is() {
        let checked = Checked::default();
        assert!(checked.is_json("defer", br#"[{"name":"a"}]"#));
        assert_eq!(checked.lock().len(), 1);
        assert!(checked.is_json("defer", br#"[{"name":"a"}]"#));
        assert_eq!(
            checked.lock().len(),
            1,
            "a remembered value is not added again"
        );
        for _ in 0..2 {
            assert!(!checked.is_json("defer", br#"[{"name":"a"}"#));
        }
        assert_eq!(
            checked.lock().len(),
            1,
            "a broken value is never remembered"
        );
    }

    #[test]
    fn a_remembered_value_is_not_parsed_again() {
        let checked = Checked::default();
        let hash = hash(&checked, b"not json");
        checked.lock().push(("defer", hash));
        assert!(checked.is_json("defer", b"not json"), "taken as remembered");
        assert!(
            !checked.is_json("outputs", b"not json"),
            "another stage's memory"
        );
    }

    #[test]
    fn each_stage_keeps_its_own_few_values() {
        let checked = Checked::default();
        assert!(checked.is_json("defer", b"[0]"));
        for n in 0..10 {
            assert!(checked.is_json("outputs", format!("[{n}]").as_bytes()));
        }
        let parsed = checked.lock().clone();
        assert_eq!(parsed.len(), 1 + PER_STAGE);
        assert!(parsed.contains(&("defer", hash(&checked, b"[0]"))));
        assert!(parsed.contains(&("outputs", hash(&checked, b"[9]"))));
        assert!(!parsed.contains(&("outputs", hash(&checked, b"[0]"))));
    }

    #[test]
    fn the_value_used_last_is_kept_and_a_long_one_is_parsed_every_time() {
        let checked = Checked::default();
        for n in 0..PER_STAGE {
            assert!(checked.is_json("defer", format!("[{n}]").as_bytes()));
        }
        assert!(checked.is_json("defer", b"[0]"));
        assert!(checked.is_json("defer", b"[99]"));
        let parsed = checked.lock().clone();
        assert!(
            parsed.contains(&("defer", hash(&checked, b"[0]"))),
            "used last"
        );
        assert!(
            !parsed.contains(&("defer", hash(&checked, b"[1]"))),
            "the oldest"
        );
        let long = format!("[{}0]", "0,".repeat(REMEMBERED_BYTES_MAX / 2));
        assert!(checked.is_json("defer", long.as_bytes()));
        assert_eq!(
            checked.lock().len(),
            PER_STAGE,
            "a long value is not remembered"
        );
    }
}
