//! What the outputs stage remembers of each conversation, so a request reads only the turns
//! that are new since the conversation's last one: the splices its earlier turns decided for
//! good, the calls seen, the calls not answered yet, and how to tell that a history still
//! starts with those turns' bytes.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use pith_wire::Wire;
use serde_json::value::RawValue;
use twox_hash::XxHash3_128;

use super::transcript::{Call, Input};

/// Sessions whose decided turns are remembered, at most.
const SESSIONS_MAX: usize = 1_024;
/// Conversations remembered per first history element, at most.
const ALIKE_MAX: usize = 4;
/// Bytes before where the decided turns end that a lookup compares first (by hash), before
/// hashing all of them.
const BOUNDARY: usize = 256;
/// What the conversations remembered hold, at most ([`Decided::weight`]: their excerpts, their
/// unanswered calls and the calls seen, a stranger's bytes): past it they are all forgotten,
/// and each one's next request reads its whole history again (and sends the same bytes).
const BYTES_MAX: usize = 32 << 20;

/// The conversations remembered: several per first history element, the latest first (two
/// sessions that open alike, the same first prompt, do not evict each other).
pub(super) struct Remembered {
    sessions: Mutex<Sessions>,
    bytes_max: usize,
}

#[derive(Default)]
struct Sessions {
    by_key: HashMap<u128, Vec<Arc<Decided>>>,
    /// The weight of all of them.
    bytes: usize,
}

impl Sessions {
    /// Forgets them all; what they held, for the caller to free once it has let go of the lock.
    #[must_use]
    fn take(&mut self) -> HashMap<u128, Vec<Arc<Decided>>> {
        self.bytes = 0;
        std::mem::take(&mut self.by_key)
    }
}

impl Default for Remembered {
    fn default() -> Remembered {
        Remembered::with_bytes_max(BYTES_MAX)
    }
}

/// What a conversation's turns before its last model turn decided, which no later request of
/// it can change (a conversation grows at its end, and an output's excerpt is fixed by the
/// output and the model's next turn): their splices and counts, the calls seen, and the calls
/// not answered yet. A request whose history starts with the same bytes reads only the rest.
#[derive(Clone, Default)]
pub(super) struct Decided {
    /// Where the decided turns end, relative to the history array's `[`: the next request
    /// reads from here (the model turn that follows them, and on).
    pub(super) len: usize,
    /// Where that model turn ends: the bytes the hashes cover. An output's excerpt is fixed by
    /// the model's next turn, so that turn's bytes must be the same too (a rewind that answers
    /// differently is read whole).
    pub(super) covers: usize,
    /// The hash of the bytes from the `[` to `covers`.
    pub(super) hash: u128,
    /// The hash of their last [`BOUNDARY`] bytes: the cheap first comparison.
    pub(super) boundary: u128,
    /// Their outputs' replacements, each range relative to the `[`.
    pub(super) splices: Vec<(Range<usize>, Arc<str>)>,
    pub(super) kept_out: usize,
    /// Of those, shortened for the first time by the model turn after them: what a request
    /// whose newest model turn is still that one counts as first.
    pub(super) first: usize,
    /// Each call so far by its name and input: a later call with the same is a repeat.
    pub(super) seen: HashSet<u128>,
    /// Calls with no output yet, by id.
    pub(super) pending: HashMap<String, Pending>,
    /// What it holds ([`Decided::weigh`]), set when it is remembered.
    pub(super) weight: usize,
}

/// A call carried forward without its body.
#[derive(Clone)]
pub(super) struct Pending {
    pub(super) name: String,
    pub(super) input: Box<RawValue>,
    pub(super) text: bool,
    pub(super) repeat: bool,
}

/// What each excerpt costs beside its text: its place in the list (a range and a pointer) and
/// the `Arc`'s counts.
const SPLICE_OVERHEAD: usize = 48;
/// What each unanswered call costs beside its strings: its map slot, its `Pending`, the
/// strings' own headers.
const PENDING_OVERHEAD: usize = 128;
/// What each call seen costs: a hash set's slot of 16 bytes, at its load factor.
const SEEN_BYTES: usize = 24;

impl Decided {
    /// The bytes it holds that grow with what the session sent: its excerpts (shared with the
    /// memo and the session's earlier requests, counted here all the same), its unanswered
    /// calls and the calls seen.
    fn weigh(&self) -> usize {
        let splices: usize = self
            .splices
            .iter()
            .map(|(_, r)| r.len() + SPLICE_OVERHEAD)
            .sum();
        let pending: usize = self
            .pending
            .iter()
            .map(|(id, p)| id.len() + p.name.len() + p.input.get().len() + PENDING_OVERHEAD)
            .sum();
        splices + pending + self.seen.capacity().max(self.seen.len()) * SEEN_BYTES
    }
}

impl Pending {
    pub(super) fn call<'d>(&'d self, id: &'d str) -> Call<'d> {
        Call {
            id: Cow::Borrowed(id),
            name: Cow::Borrowed(&self.name),
            input: if self.text {
                Input::Text(&self.input)
            } else {
                Input::Json(&self.input)
            },
        }
    }
}

impl Remembered {
    /// Conversations holding at most `bytes_max` bytes ([`Decided::weight`]).
    pub(super) fn with_bytes_max(bytes_max: usize) -> Remembered {
        Remembered {
            sessions: Mutex::new(Sessions::default()),
            bytes_max,
        }
    }

    /// What the conversation's remembered turns decided, when the body's history still starts
    /// with their bytes, and the hasher over those bytes (the next snapshot goes on from it);
    /// else nothing (every turn is read).
    pub(super) fn find(
        &self,
        session: u128,
        bytes: &[u8],
        open: usize,
    ) -> (Arc<Decided>, XxHash3_128) {
        let remembered = self
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_key
            .get(&session)
            .cloned()
            .unwrap_or_default();
        for d in remembered {
            let Some(prefix) = bytes.get(open..open + d.covers) else {
                continue;
            };
            if boundary_hash(prefix) != d.boundary {
                continue;
            }
            let mut hasher = XxHash3_128::new();
            hasher.write(prefix);
            if hasher.clone().finish_128() == d.hash {
                return (d, hasher);
            }
        }
        (Arc::default(), XxHash3_128::new())
    }

    /// Remembers `decided`, which goes on from `from` (what this request found remembered,
    /// replaced by it), as the latest of the conversations that open alike.
    pub(super) fn keep(&self, session: u128, from: &Arc<Decided>, mut decided: Decided) {
        decided.weight = decided.weigh();
        let weight = decided.weight;
        if weight > self.bytes_max {
            // Larger than all of them: not remembered, and nothing else forgotten for it.
            return;
        }
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let mut forgotten = Vec::new();
        if sessions.by_key.len() >= SESSIONS_MAX && !sessions.by_key.contains_key(&session) {
            forgotten.push(sessions.take());
        }
        // What `decided` replaces leaves first, so a session's own growth is not counted twice.
        if let Some(alike) = sessions.by_key.get_mut(&session) {
            let before: usize = alike.iter().map(|d| d.weight).sum();
            alike.retain(|d| !Arc::ptr_eq(d, from) && d.hash != decided.hash);
            let after: usize = alike.iter().map(|d| d.weight).sum();
            sessions.bytes = sessions.bytes.saturating_sub(before - after);
        }
        if sessions.bytes + weight > self.bytes_max {
            forgotten.push(sessions.take());
        }
        let alike = sessions.by_key.entry(session).or_default();
        alike.insert(0, Arc::new(decided));
        let dropped: usize = alike
            .drain(alike.len().min(ALIKE_MAX)..)
            .map(|d| d.weight)
            .sum();
        sessions.bytes = sessions.bytes + weight - dropped;
        drop(sessions);
        // Freed after the lock: other requests' lookups do not wait on it.
        drop(forgotten);
    }

    /// The weight of the conversations held now, as counted and as recounted from each
    /// (the two must agree).
    #[cfg(test)]
    pub(super) fn bytes(&self) -> (usize, usize) {
        let sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let recounted = sessions.by_key.values().flatten().map(|d| d.weigh()).sum();
        (sessions.bytes, recounted)
    }
}

/// A conversation's key: the wire, whether excerpts name `tool_output`, its first element.
pub(super) fn session_key(wire: Wire, fetchable: bool, first: &[u8]) -> u128 {
    let mut hasher = XxHash3_128::new();
    hasher.write(wire.as_str().as_bytes());
    hasher.write(&[u8::from(fetchable)]);
    hasher.write(first);
    hasher.finish_128()
}

/// The hash of the last [`BOUNDARY`] bytes of `prefix`.
pub(super) fn boundary_hash(prefix: &[u8]) -> u128 {
    XxHash3_128::oneshot(&prefix[prefix.len().saturating_sub(BOUNDARY)..])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decided conversation with one excerpt of `excerpt` bytes, told apart by `hash`.
    fn decided(hash: u128, excerpt: usize) -> Decided {
        Decided {
            hash,
            splices: vec![(0..1, Arc::from("x".repeat(excerpt)))],
            ..Decided::default()
        }
    }

    /// Each way `keep` lets an entry go keeps the count equal to a recount: the one a request
    /// went on from, one with the same bytes, the oldest past four alike; one larger than the
    /// bound is not kept and makes nothing else forgotten; one that does not fit makes the
    /// rest forgotten.
    #[test]
    fn keeping_counts_what_it_holds_whatever_it_lets_go() {
        let each = decided(0, 1_000).weigh();
        let remembered = Remembered::with_bytes_max(10 * each);
        let none = Arc::default();
        let counted = |r: &Remembered| {
            let (counted, recounted) = r.bytes();
            assert_eq!(counted, recounted);
            counted
        };
        remembered.keep(1, &none, decided(10, 1_000));
        // A request whose history is the remembered one's goes on from it: it is replaced.
        let from = Arc::clone(&remembered.sessions.lock().unwrap().by_key[&1][0]);
        remembered.keep(1, &from, decided(11, 1_000));
        assert_eq!(counted(&remembered), each);
        // The same bytes again: replaced too.
        remembered.keep(1, &none, decided(11, 1_000));
        assert_eq!(counted(&remembered), each);
        // Alike sessions: four at most.
        for h in 12..20 {
            remembered.keep(1, &none, decided(h, 1_000));
        }
        assert_eq!(counted(&remembered), 4 * each);
        remembered.keep(2, &none, decided(30, 1_000));
        assert_eq!(counted(&remembered), 5 * each);
        // Larger than the bound: not kept, nothing forgotten.
        remembered.keep(3, &none, decided(40, 20_000));
        assert_eq!(counted(&remembered), 5 * each);
        // One that does not fit beside the rest: they are forgotten, it is kept.
        let big = decided(50, 8 * 1_000);
        let big_weight = big.weigh();
        remembered.keep(4, &none, big);
        assert_eq!(counted(&remembered), big_weight);
        assert!(!remembered.sessions.lock().unwrap().by_key.contains_key(&1));
    }
}
