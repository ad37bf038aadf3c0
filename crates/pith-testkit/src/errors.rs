//! Checks on error values that every crate's tests share.

/// Asserts that every message in `e`'s chain adds to its cause instead of repeating it: the
/// binary prints the whole chain, so a message that also embeds its source says it twice.
pub fn assert_causes_said_once(e: &(dyn std::error::Error + 'static)) {
    let mut at = e;
    while let Some(cause) = at.source() {
        let (message, cause_message) = (at.to_string(), cause.to_string());
        assert!(
            !message.contains(&cause_message),
            "{message:?} repeats its cause {cause_message:?}"
        );
        at = cause;
    }
}
