//! A request's body spooled as an earlier body of its segment with what changed: only what is
//! new since the conversation's last request is written (issue 46).
//!
//! A session's next request repeats the last one's body and adds a turn: a Claude Code
//! conversation of 1.3 MB was written whole on every request, 250 µs of the kernel's
//! page-cache write on the request path (BENCHMARKS.md, stop 62) and 1.3 MB of disk. The
//! appender keeps the client bodies of the last few entries it wrote whole ([`Bases`]); a body
//! that is one of them with edits adding up to at most a quarter of its length is written as
//! those edits and the base's place. A base is always an entry written whole, earlier in the
//! same segment: a segment is kept while any of its entries is unread, so a reader finds the
//! base in the file it is reading, with no chain to follow, even after a restart
//! ([`BaseCache`] keeps the last ones it read, so it seldom reads one twice).

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use pith_wire::skim::{common_prefix, common_suffix};

use crate::edits::{EDIT_BYTES, Edit, edits_between};

/// Bodies shorter than this are written whole (a base's place and edits would save little).
pub(crate) const BASE_MIN: usize = 16 << 10;

/// How many bodies written whole the appender and a reader keep as bases: a few sessions at a
/// time (a main session and its subagents interleave).
const BASES: usize = 4;

/// Bodies longer than this are not kept as bases (the memory the appender holds).
const BASE_BYTES_MAX: usize = 8 << 20;

/// A body written on a base: the edits may add up to this share of its length at most.
const EDITS_SHARE_MAX: usize = 4;

/// A body as its base and the edits that make it.
pub(crate) struct OnBase<'b> {
    /// Where the base's entry starts in the segment.
    pub offset: u64,
    /// The base body's length (checked when it is read back).
    pub base_len: u64,
    pub edits: Vec<Edit<'b>>,
}

/// The appender's bases: the client bodies of its last entries written whole, in the current
/// segment, oldest first.
#[derive(Default)]
pub(crate) struct Bases {
    kept: VecDeque<(u64, Bytes)>,
}

impl Bases {
    /// `body` as one of the bases with edits, when one is close enough; the newest first.
    pub fn on_base<'b>(&self, body: &'b [u8]) -> Option<OnBase<'b>> {
        if body.len() < BASE_MIN {
            return None;
        }
        let most = body.len() / EDITS_SHARE_MAX;
        for (offset, base) in self.kept.iter().rev() {
            // Another conversation shares the client's ends (its system prompt and tools) but
            // differs from its first messages on: not searched further.
            let prefix = common_prefix(base, body);
            let suffix = common_suffix(&base[prefix..], &body[prefix..]);
            if prefix + suffix < body.len() / 2 {
                continue;
            }
            let edits = edits_between(base, body, prefix, suffix);
            // The base's place and length and the edits' count, then the edits.
            let size: usize = 3 * 8
                + edits
                    .iter()
                    .map(|e| EDIT_BYTES + e.replacement.len())
                    .sum::<usize>();
            if size <= most {
                return Some(OnBase {
                    offset: *offset,
                    base_len: base.len() as u64,
                    edits,
                });
            }
        }
        None
    }

    /// The entry at `offset` was written with `body` whole.
    pub fn written_whole(&mut self, offset: u64, body: &Bytes) {
        if worth_keeping(body) {
            keep_last(&mut self.kept, (offset, body.clone()));
        }
    }

    /// A new segment: the old one's bodies are no bases for it.
    pub fn clear(&mut self) {
        self.kept.clear();
    }
}

/// Whether `body` may be a base: long enough to be written on, short enough to hold.
fn worth_keeping(body: &Bytes) -> bool {
    (BASE_MIN..=BASE_BYTES_MAX).contains(&body.len())
}

/// Add `base` to `kept`, the oldest given up past [`BASES`].
fn keep_last<T>(kept: &mut VecDeque<T>, base: T) {
    if kept.len() == BASES {
        kept.pop_front();
    }
    kept.push_back(base);
}

/// A reader's last bases: `(generation, offset)` of an entry written whole, and its client
/// body.
#[derive(Default)]
pub(crate) struct BaseCache {
    kept: Mutex<VecDeque<(u64, u64, Bytes)>>,
}

impl BaseCache {
    /// The body of the entry at `offset` in segment `generation`, if kept.
    pub fn get(&self, generation: u64, offset: u64) -> Option<Bytes> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.iter()
            .find(|(g, o, _)| *g == generation && *o == offset)
            .map(|(_, _, body)| body.clone())
    }

    /// Keep `body`, of the entry at `offset` in segment `generation`, written whole.
    pub fn keep(&self, generation: u64, offset: u64, body: &Bytes) {
        if !worth_keeping(body) {
            return;
        }
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if !kept
            .iter()
            .any(|(g, o, _)| *g == generation && *o == offset)
        {
            keep_last(&mut kept, (generation, offset, body.clone()));
        }
    }

    /// Tests: forget every base, as a reader after a restart.
    #[cfg(test)]
    pub fn clear(&self) {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(n: usize) -> Vec<u8> {
        let messages: Vec<String> = (0..n)
            .map(|k| {
                format!(
                    "{{\"role\":\"user\",\"content\":\"turn {k}: {}\"}}",
                    "x".repeat(900)
                )
            })
            .collect();
        format!(
            "{{\"messages\":[{}],\"tools\":[{}]}}",
            messages.join(","),
            "{\"name\":\"Read\"}".repeat(500)
        )
        .into_bytes()
    }

    #[test]
    fn a_conversations_next_body_is_its_last_with_the_new_turn() {
        let mut bases = Bases::default();
        let first = Bytes::from(turn(20));
        assert!(bases.on_base(&first).is_none(), "no base yet");
        bases.written_whole(0, &first);
        let next = turn(21);
        let on = bases.on_base(&next).unwrap();
        assert_eq!((on.offset, on.base_len), (0, first.len() as u64));
        let kept: usize = on.edits.iter().map(|e| e.replacement.len()).sum();
        assert!(kept < 1_000, "{kept} bytes of {}", next.len());
        assert_eq!(
            crate::edits::rebuild(&first, &on.edits).as_deref(),
            Some(&next[..])
        );
        // Another conversation, or one grown past a quarter, is written whole.
        assert!(bases.on_base(&turn(40)).is_none());
        let other = String::from_utf8(turn(21)).unwrap().replace("turn", "step");
        assert!(bases.on_base(other.as_bytes()).is_none());
        bases.clear();
        assert!(bases.on_base(&next).is_none());
    }

    #[test]
    fn a_reader_keeps_its_last_bases() {
        let cache = BaseCache::default();
        let body = Bytes::from(turn(20));
        for offset in 0..6 {
            cache.keep(1, offset, &body);
        }
        assert!(cache.get(1, 0).is_none(), "the oldest given up");
        assert_eq!(cache.get(1, 5), Some(body.clone()));
        assert!(cache.get(2, 5).is_none());
        cache.keep(1, 9, &Bytes::from_static(b"short"));
        assert!(cache.get(1, 9).is_none(), "a short body is no base");
    }
}
