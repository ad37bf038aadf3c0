//! Byte-level damage to a body: flipped, inserted and deleted bytes, repeated and dropped
//! ranges, tokens spliced in, truncation. Half of the positions fall in the `tools` section,
//! where the stage reads and edits.

use pith_testkit::rng::Rng;

use crate::RngExt;

/// Bytes that change JSON structure or UTF-8 validity.
const BYTES: &[u8] = &[
    b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b' ', b'\n', b'0', b'-', b'e', b'u', 0x00,
    0x1f, 0x7f, 0x80, 0xbf, 0xc3, 0xed, 0xf4, 0xff,
];

/// Tokens that look like what the stage looks for.
const TOKENS: &[&str] = &[
    "\"defer_loading\":true,",
    ",\"defer_loading\":true",
    "\"defer_loading\":null,",
    "\"cache_control\":{\"type\":\"ephemeral\"},",
    ",\"cache_control\":{\"type\":\"ephemeral\"}",
    "{\"type\":\"tool_search\"},",
    "{\"type\":\"tool_search_tool_regex_20251119\",\"name\":\"tool_search_tool_regex\"},",
    "tool_search",
    "\\uD800",
    "\\uDFFF\\uD800",
    "\\\"",
    "\\\\",
    "\"tools\":[],",
    ",\"tools\":[{\"name\":\"a\"},{\"name\":\"b\"}]",
    ",\"tool_choice\":{\"type\":\"any\"}",
    "null",
    "1e999",
    "]",
    "}",
    "\"",
    "\u{feff}",
    "\r\n\t ",
];

/// Where to damage: anywhere, or (half the time) inside the last `"tools"` member and after.
fn position(rng: &mut Rng, body: &[u8], tools_at: Option<usize>) -> usize {
    match tools_at {
        Some(at) if rng.chance(0.5) && at < body.len() => rng.range(at, body.len() + 1),
        _ => rng.below(body.len() + 1),
    }
}

/// Apply one to four random mutations to `body`; returns their names, for the report.
pub fn mutate(rng: &mut Rng, body: &mut Vec<u8>) -> Vec<&'static str> {
    let tools_at = memchr::memmem::rfind(body, b"\"tools\"");
    let count = 1 + usize::from(rng.chance(0.4)) + usize::from(rng.chance(0.2)) * 2;
    let mut done = Vec::with_capacity(count);
    for _ in 0..count {
        let at = position(rng, body, tools_at);
        let name = match rng.below(11) {
            0 => {
                if at < body.len() {
                    body[at] = (rng.next_u64() & 0xff) as u8;
                }
                "flip"
            }
            1 => {
                if at < body.len() {
                    body[at] = *rng.one(BYTES);
                }
                "set"
            }
            2 => {
                let b = *rng.one(BYTES);
                body.insert(at, b);
                "insert"
            }
            3 => {
                if at < body.len() {
                    body.remove(at);
                }
                "delete"
            }
            4 => {
                let end = (at + rng.range(1, 65)).min(body.len());
                body.drain(at..end);
                "cut"
            }
            5 => {
                let end = (at + rng.range(1, 257)).min(body.len());
                let copy = body[at..end].to_vec();
                let to = rng.below(body.len() + 1);
                body.splice(to..to, copy).for_each(drop);
                "repeat"
            }
            6 | 7 => {
                let token = rng.one(TOKENS).as_bytes();
                body.splice(at..at, token.iter().copied()).for_each(drop);
                "token"
            }
            8 => {
                body.truncate(at);
                "truncate"
            }
            9 => {
                // Swap two neighbouring ranges.
                let mid = (at + rng.range(1, 33)).min(body.len());
                let end = (mid + rng.range(1, 33)).min(body.len());
                body[at..end].rotate_left(mid - at);
                "swap"
            }
            _ => {
                // A letter changed into another: the kind of change that often stays valid.
                if let Some(offset) = body[at..].iter().position(u8::is_ascii_lowercase) {
                    body[at + offset] = b'a' + (rng.below(26) as u8);
                }
                "letter"
            }
        };
        done.push(name);
    }
    done
}
