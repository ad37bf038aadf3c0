//! The text the clients' harnesses put into a conversation beside what a person typed, gathered
//! from each client's file: history tells typed messages from these, the pins stage reads rules
//! files out of them, tool deferral ranks by the typed prompt only.

use crate::{Client, claude_code, codex, opencode};

/// How Claude Code opens the context it adds to a user message (rules files, git status,
/// @-mentioned files).
pub const SYSTEM_REMINDER_OPEN: &str = claude_code::SYSTEM_REMINDER_OPEN;
/// How that context closes.
pub const SYSTEM_REMINDER_CLOSE: &str = claude_code::SYSTEM_REMINDER_CLOSE;

/// Every client's openings of whole blocks its harness adds to a user message.
pub fn harness_openings() -> impl Iterator<Item = &'static str> {
    Client::ALL
        .into_iter()
        .flat_map(|c| c.profile().harness_openings.iter().copied())
}

/// Every client's other openings of harness text in a user message.
pub fn harness_prefixes() -> impl Iterator<Item = &'static str> {
    Client::ALL
        .into_iter()
        .flat_map(|c| c.profile().harness_prefixes.iter().copied())
}

/// The rules file an envelope line of any client names: Claude Code's `Contents of
/// /p/CLAUDE.md (...):`, OpenCode's `Instructions from: /p/AGENTS.md`, Codex's `# AGENTS.md
/// instructions for /p`.
pub fn rules_file_named(line: &str) -> Option<String> {
    claude_code::rules_file_named(line)
        .or_else(|| opencode::rules_file_named(line))
        .or_else(|| codex::rules_file_named(line))
}

/// `<tag ...>...</tag>` and nothing around it (how the clients' harnesses wrap what they add: history,
/// tool deferral and the pins stage read user text the same way).
pub fn is_one_wrapper(text: &str) -> bool {
    let Some(inner) = text.strip_prefix('<') else {
        return false;
    };
    let tag_len = inner
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .unwrap_or(inner.len());
    if tag_len == 0 {
        return false;
    }
    let tag = &inner[..tag_len];
    text.strip_suffix('>')
        .and_then(|t| t.strip_suffix(tag))
        .is_some_and(|t| t.ends_with("</"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_clients_envelope_names_its_rules_file() {
        assert_eq!(
            rules_file_named("Contents of /p/CLAUDE.md (project instructions):"),
            Some("/p/CLAUDE.md".into())
        );
        assert_eq!(
            rules_file_named("Instructions from: /p/AGENTS.md"),
            Some("/p/AGENTS.md".into())
        );
        assert_eq!(
            rules_file_named("# AGENTS.md instructions for /p/"),
            Some("/p/AGENTS.md".into())
        );
        assert_eq!(rules_file_named("# AGENTS.md instructions for "), None);
        assert_eq!(rules_file_named("plain text"), None);
        assert!(harness_openings().any(|o| o == "<environment_context>"));
        assert!(harness_prefixes().any(|p| p == codex::AGENTS_MD_PREFIX));
        assert!(is_one_wrapper(
            "<environment_context>\n  <cwd>/x</cwd>\n</environment_context>"
        ));
        assert!(!is_one_wrapper("<b>bold</b> and more"));
        assert!(!is_one_wrapper("<>x</>"));
    }
}
