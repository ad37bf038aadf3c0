//! The request that carries a long result whole keeps it out of the cache write: the client's
//! cache marker after it moves to the block before it.
//!
//! Why: Claude Code marks the last block of the last message (`cache_control`, besides two on
//! its system blocks), so the request that carries a new tool result writes it to the cache at
//! 1.25 times the input price. From the next request on the stage sends an excerpt in its
//! place, so that write is never read: the whole output is paid for twice. With the marker on
//! the block before the result, the prefix up to it is written as before, the result is read
//! once as plain input (1x), and the next request reads the prefix from the cache and writes
//! the excerpt (Anthropic's prompt caching: a marker may sit on any content block but
//! thinking; at most four; a later request finds the entry up to 20 blocks back).
//!
//! The marker moves only when the client put one on or after the first long result; nothing is
//! added where the client marked nothing, and the count of markers never grows.

use pith_wire::skim;
use serde_json::value::RawValue;

use crate::splice::span_of;
use crate::stage::Splice;

const MARKER: &[u8] = b"cache_control";

/// Splices that move the cache marker of `last` (the last message's blocks), at or after block
/// `first_long`, to the block before it (in `last`, else the last of `previous`). `None` when
/// there is no marker to move or no block that may hold one before the result.
pub(super) fn move_marker(
    body: &str,
    previous: &[(&RawValue, &str)],
    last: &[(&RawValue, &str)],
    first_long: usize,
) -> Option<Vec<Splice>> {
    let mut splices = Vec::new();
    let mut marker = None;
    for (raw, _) in &last[first_long..] {
        if let Some((splice, value)) = removal(body, raw)? {
            splices.push(splice);
            marker = Some(value);
        }
    }
    let marker = marker?;
    let target = match first_long {
        0 => previous.last()?,
        n => &last[n - 1],
    };
    if matches!(target.1, "thinking" | "redacted_thinking") {
        return None;
    }
    if removal(body, target.0)?.is_none() {
        let span = span_of(body, target.0)?;
        // The block is a serde-read object: its last byte is its `}`.
        splices.push(Splice {
            range: span.end - 1..span.end - 1,
            replacement: format!(",\"cache_control\":{marker}"),
        });
    }
    Some(splices)
}

/// The splice that takes the `cache_control` member out of a block, with the marker's value;
/// `Some(None)` when the block has none; `None` when the block is not the object it should be.
fn removal(body: &str, raw: &RawValue) -> Option<Option<(Splice, String)>> {
    let span = span_of(body, raw)?;
    let bytes = raw.get().as_bytes();
    let members = skim::object_members(bytes)?;
    let Some(k) = members.iter().position(|m| &bytes[m.key.clone()] == MARKER) else {
        return Some(None);
    };
    let value = raw.get()[members[k].value.clone()].to_owned();
    // From the end of the member before it (its comma with it), or, first, to the next key.
    let range = match (k.checked_sub(1), members.get(k + 1)) {
        (Some(before), _) => members[before].value.end..members[k].value.end,
        (None, Some(next)) => members[k].key.start - 1..next.key.start - 1,
        (None, None) => return None,
    };
    Some(Some((
        Splice {
            range: span.start + range.start..span.start + range.end,
            replacement: String::new(),
        },
        value,
    )))
}
