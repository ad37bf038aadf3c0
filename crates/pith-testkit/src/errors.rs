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

/// `e` and its causes, joined by `: ` (how the binary prints an error).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}
