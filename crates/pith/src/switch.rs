//! The one grammar of a switch, for pith's environment variables and settings and for its
//! build script (`build.rs` includes this file), so `PITH_BUILD_PIE=false` means what
//! `PITH_HISTORY=false` means.

/// `1/true/yes/on`, or `0/false/no/off` (and empty: off); anything else is no switch.
pub fn parse_switch(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}
