//! An error's text for a caller, causes included.

use std::fmt::Write as _;

/// An error and each of its causes, joined by `: ` (as the binary prints an error chain). The
/// workspace's errors keep their cause out of their own message and give it as their
/// `source()`, so text for a caller is written with this, not `to_string()`.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let _ = write!(out, ": {e}");
        cause = e.source();
    }
    out
}
