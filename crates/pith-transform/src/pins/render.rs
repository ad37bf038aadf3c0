//! The two texts pins writes: the pin block the provider sees at the tail of a request, and
//! pith's answer to a command turn. Both are functions of their inputs only, so the same pins
//! give the same bytes on every turn.

use super::REPLY_MARKER;
use super::fold::{Change, Pin, Tier};

/// The block appended at the tail of a request: the pins' text and nothing that changes
/// between turns (no numbers the user might renumber, no paths, no dates).
pub(super) fn block(pins: &[Pin]) -> String {
    let mut out = String::from(
        "<pith-pins>\nRules the user pinned. They hold for this reply and every later one:\n",
    );
    for pin in pins {
        out.push_str("- ");
        out.push_str(&pin.text);
        out.push('\n');
    }
    out.push_str("</pith-pins>");
    out
}

/// pith's answer to a turn of commands: what changed, then the pins with their tier and file.
pub(super) fn reply(changes: &[Change], pins: &[Pin]) -> String {
    let said: Vec<String> = changes.iter().filter_map(describe).collect();
    let mut out = String::from(REPLY_MARKER);
    if said.is_empty() {
        out.push_str(match pins.len() {
            0 => "no pins.",
            1 => "1 pin:",
            _ => "pins:",
        });
    } else {
        out.push_str(&said.join("\n"));
    }
    out.push('\n');
    if !pins.is_empty() {
        if !said.is_empty() {
            out.push_str("\nPins, sent at the end of every request:\n");
        }
        for (i, pin) in pins.iter().enumerate() {
            let tier = match &pin.tier {
                Tier::Session => "session".to_owned(),
                Tier::File { path: Some(path) } => format!("file: {path}"),
                Tier::File { path: None } => "file".to_owned(),
            };
            out.push_str(&format!("{}. {} ({tier})\n", i + 1, pin.text));
        }
    }
    let sessions = pins.iter().any(|p| p.tier == Tier::Session);
    out.push('\n');
    if pins.is_empty() {
        out.push_str(
            "Pin a rule with `@pith pin <rule>` on a line of its own: in a chat turn it lasts \
             this session, in CLAUDE.md or AGENTS.md it lasts.",
        );
    } else if sessions {
        out.push_str(
            "Session pins last this session only; paste a `@pith pin ...` line into CLAUDE.md \
             or AGENTS.md to keep one. `@pith unpin N` removes one, `@pith unpin all` every \
             session pin.",
        );
    } else {
        out.push_str("File pins are removed by deleting their `@pith pin` line in the file.");
    }
    out
}

/// One change as a sentence; `None` for a plain listing.
fn describe(change: &Change) -> Option<String> {
    Some(match change {
        Change::Listed => return None,
        Change::Pinned(n, text) => format!("pinned {n}: {text}"),
        Change::AlreadyPinned(n, text) => format!("already pinned as {n}: {text}"),
        Change::EmptyPin => {
            "nothing to pin: put the rule after the command, as in `@pith pin be concise`"
                .to_owned()
        }
        Change::Unpinned(texts) if texts.is_empty() => "no session pins to remove".to_owned(),
        Change::Unpinned(texts) => format!("unpinned: {}", texts.join("; ")),
        Change::FilePin {
            number,
            text,
            path: Some(path),
        } => format!(
            "cannot unpin {number} ({text}): it is a line in {path}; delete its `@pith pin` \
             line there to remove it"
        ),
        Change::FilePin {
            number,
            text,
            path: None,
        } => format!(
            "cannot unpin {number} ({text}): it is a line in a rules file (CLAUDE.md, \
             AGENTS.md or the system prompt); delete its `@pith pin` line there to remove it"
        ),
        Change::NoSuchNumber(n, 0) => format!("no pin {n}: there are no pins"),
        Change::NoSuchNumber(n, count) => format!("no pin {n}: the pins are 1 to {count}"),
        Change::NoMatch(text) => format!("no pin matches \"{text}\""),
        Change::Ambiguous(text, numbers) => {
            let numbers: Vec<String> = numbers.iter().map(ToString::to_string).collect();
            format!(
                "\"{text}\" starts pins {}: unpin one by its number",
                numbers.join(", ")
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_depends_only_on_the_pins() {
        let pins = vec![
            Pin {
                text: "use tabs".into(),
                tier: Tier::File {
                    path: Some("/p/AGENTS.md".into()),
                },
            },
            Pin {
                text: "be concise".into(),
                tier: Tier::Session,
            },
        ];
        assert_eq!(
            block(&pins),
            "<pith-pins>\nRules the user pinned. They hold for this reply and every later one:\n\
             - use tabs\n- be concise\n</pith-pins>"
        );
    }

    #[test]
    fn the_reply_starts_with_the_marker_and_names_tiers_and_files() {
        let pins = vec![
            Pin {
                text: "use tabs".into(),
                tier: Tier::File {
                    path: Some("/p/AGENTS.md".into()),
                },
            },
            Pin {
                text: "be concise".into(),
                tier: Tier::Session,
            },
        ];
        let text = reply(&[Change::Pinned(2, "be concise".into())], &pins);
        assert!(text.starts_with("@pith pinned 2: be concise\n"), "{text}");
        assert!(
            text.contains("1. use tabs (file: /p/AGENTS.md)\n"),
            "{text}"
        );
        assert!(text.contains("2. be concise (session)\n"), "{text}");
        let none = reply(&[Change::Listed], &[]);
        assert!(none.starts_with("@pith no pins.\n"), "{none}");
    }
}
