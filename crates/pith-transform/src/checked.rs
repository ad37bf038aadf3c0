//! The pipeline's check that an edit left JSON, remembered for values seen before.
//!
//! Deferral makes the same `tools` array out of the same client's tools on every request of a
//! session: Claude Code's 36 KB, 17 µs to parse with serde (a twentieth of pith's event loop on
//! its 56 KB body, `perf`, stop 61). A value that parsed is remembered by its 128-bit XXH3
//! (about 3 µs for those 36 KB) and not parsed again. Only the values an edit says it stays
//! inside ([`crate::stage::Edit::within`]) are remembered: a whole body is new on every
//! request. A collision would let a broken value through to the provider, whose refusal pith
//! answers by resending the client's own body, as for any stage's mistake.

use std::sync::Mutex;

use twox_hash::XxHash3_128;

/// How many values each stage's check remembers: a few clients' tool lists at once.
const PER_STAGE: usize = 4;

/// The values that parsed lately, a few per stage, most recent last.
#[derive(Default)]
pub(crate) struct Checked {
    parsed: Mutex<Vec<(&'static str, u128)>>,
}

impl Checked {
    /// Whether `value` is one JSON value: remembered, or parsed (and remembered for `stage`
    /// when it is).
    pub(crate) fn is_json(&self, stage: &'static str, value: &[u8]) -> bool {
        let hash = XxHash3_128::oneshot(value);
        if self.lock().iter().any(|&(s, h)| s == stage && h == hash) {
            return true;
        }
        if !parses(value) {
            return false;
        }
        let mut parsed = self.lock();
        if parsed.iter().filter(|(s, _)| *s == stage).count() >= PER_STAGE
            && let Some(oldest) = parsed.iter().position(|(s, _)| *s == stage)
        {
            parsed.remove(oldest);
        }
        parsed.push((stage, hash));
        true
    }

    /// The list, even if a thread panicked holding it (it holds only hashes).
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(&'static str, u128)>> {
        self.parsed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Whether `bytes` are one JSON value (serde's parse, nothing kept).
pub(crate) fn parses(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let hash = XxHash3_128::oneshot(b"not json");
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
        assert!(parsed.contains(&("defer", XxHash3_128::oneshot(b"[0]"))));
        assert!(parsed.contains(&("outputs", XxHash3_128::oneshot(b"[9]"))));
        assert!(!parsed.contains(&("outputs", XxHash3_128::oneshot(b"[0]"))));
    }
}
