//! What people read for the codes a stage reports: its name, its facts and why it left a
//! request unchanged. The codes stay what scripts read (the ledger, `pith stats --json`, the
//! `pith-transforms` header); these words are what the dashboard and `pith stats` show. Each
//! stage's words sit beside the codes they explain (`defer::WORDS`, `pins::WORDS`, ...; their
//! shape is [`StageWords`]); this module lists them.

use crate::pipeline::REFUSED_BY_PROVIDER;
pub use crate::stage::{CameBack, StageWords};

/// Reasons the proxy gives for every stage of a request at once, whichever stage it is.
pub const ANY_STAGE: &[(&str, &str)] = &[(
    REFUSED_BY_PROVIDER,
    "the provider refused this session's changed request earlier, so pith leaves the session as \
     the client sends it",
)];

/// The stages this crate defines.
pub const STAGES: &[StageWords] = &[
    crate::defer::WORDS,
    crate::pins::WORDS,
    crate::search_trip::restore::WORDS,
    crate::outputs::WORDS,
    crate::holdout::WORDS,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_a_stage_defines_has_words_and_every_phrase_reads() {
        let defined: [(&str, &[&str]); 4] = [
            (crate::outputs::NAME, crate::outputs::reason::ALL),
            (crate::defer::NAME, crate::defer::reason::ALL),
            (crate::pins::NAME, crate::pins::reason::ALL),
            (
                crate::search_trip::restore::NAME,
                crate::search_trip::restore::reason::ALL,
            ),
        ];
        for (stage, reasons) in defined {
            let words = STAGES.iter().find(|w| w.stage == stage).unwrap();
            for reason in reasons {
                assert!(
                    words.reasons.iter().any(|(code, _)| code == reason),
                    "{stage}: no words for {reason}"
                );
            }
            assert_eq!(
                words.reasons.len(),
                reasons.len(),
                "{stage}: words for no reason"
            );
        }
        for w in STAGES {
            assert!(!w.name.contains('_'), "{}", w.name);
            for (code, phrase) in w.facts {
                assert!(
                    phrase.is_empty() || phrase.contains("{n}"),
                    "{}: {code}: {phrase}",
                    w.stage
                );
            }
            for (_, phrase) in w.reasons.iter().chain(ANY_STAGE) {
                assert!(!phrase.contains('_') && !phrase.ends_with('.'), "{phrase}");
            }
        }
    }
}
