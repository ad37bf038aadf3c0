//! How a name from a stranger (a file in a project, a brain's row) is shown: which characters
//! must be escaped before a terminal or a model reads it, so the text can neither rewrite the
//! terminal, add a line, nor display in another order than it reads.

/// Whether `c` is escaped when shown: a control character, a bidirectional override, isolate
/// or mark (U+202A..U+202E, U+2066..U+2069, U+200E, U+200F, U+061C), or a line or paragraph
/// separator.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{061C}'
                | '\u{2028}'
                | '\u{2029}'
        )
}
