//! The excerpts ranked so far, by call, output and next message: a later request of the
//! session (or of another instance's session, sent again) reuses them instead of ranking
//! again. Bounded by count and by bytes, as an output's text is a stranger's: a session that
//! reads a few large files must not hold the proxy's memory (a quarter of each output, for
//! every output ever shortened).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Excerpts remembered, at most.
const ENTRIES_MAX: usize = 4_096;
/// Their bytes, at most: past this the memo starts over (each session's next request ranks
/// its outputs again, and sends the same bytes: an excerpt is a pure function of the
/// transcript).
const BYTES_MAX: usize = 32 << 20;

/// The replacement for each (call id, output, next message) ranked so far; `None`: left whole.
pub(super) struct Memo {
    inner: Mutex<Inner>,
    bytes_max: usize,
}

#[derive(Default)]
struct Inner {
    excerpts: HashMap<u128, Option<Arc<str>>>,
    /// The excerpts' bytes.
    bytes: usize,
}

impl Default for Memo {
    fn default() -> Memo {
        Memo::with_bytes_max(BYTES_MAX)
    }
}

impl Memo {
    /// A memo that holds at most `bytes_max` bytes of excerpts.
    pub(super) fn with_bytes_max(bytes_max: usize) -> Memo {
        Memo {
            inner: Mutex::new(Inner::default()),
            bytes_max,
        }
    }

    /// What `key` was ranked to, if it was.
    pub(super) fn get(&self, key: u128) -> Option<Option<Arc<str>>> {
        self.lock().excerpts.get(&key).cloned()
    }

    /// Remembers what `key` was ranked to, starting over first when it would not fit; one
    /// larger than the whole memo is not remembered (and makes nothing else forgotten).
    pub(super) fn insert(&self, key: u128, made: Option<Arc<str>>) {
        let size = made.as_deref().map_or(0, str::len);
        if size > self.bytes_max {
            return;
        }
        let mut inner = self.lock();
        // The same key ranked again (two requests at once): it replaces itself.
        let replaced = inner
            .excerpts
            .get(&key)
            .map(|old| old.as_deref().map_or(0, str::len));
        let forgotten = if (replaced.is_none() && inner.excerpts.len() >= ENTRIES_MAX)
            || inner.bytes - replaced.unwrap_or(0) + size > self.bytes_max
        {
            inner.bytes = 0;
            std::mem::take(&mut inner.excerpts)
        } else {
            inner.bytes -= replaced.unwrap_or(0);
            HashMap::new()
        };
        inner.excerpts.insert(key, made);
        inner.bytes += size;
        drop(inner);
        // Freed after the lock: other requests do not wait on it.
        drop(forgotten);
    }

    /// The excerpts' bytes held now.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memo_holds_its_bytes_at_most_and_counts_a_replaced_one_once() {
        let memo = Memo::with_bytes_max(100);
        memo.insert(1, Some(Arc::from("a".repeat(40))));
        memo.insert(1, Some(Arc::from("b".repeat(40))));
        memo.insert(2, None);
        assert_eq!(memo.bytes(), 40);
        memo.insert(3, Some(Arc::from("c".repeat(50))));
        assert_eq!(memo.bytes(), 90);
        assert!(memo.get(1).is_some());
        // The next does not fit: the memo starts over with it.
        memo.insert(4, Some(Arc::from("d".repeat(20))));
        assert_eq!(memo.bytes(), 20);
        assert_eq!(memo.get(1), None);
        assert_eq!(
            memo.get(4).flatten().as_deref(),
            Some("d".repeat(20).as_str())
        );
        // One larger than the whole memo is not kept (it is ranked again when asked), and
        // the rest stay.
        memo.insert(5, Some(Arc::from("e".repeat(101))));
        assert_eq!((memo.get(5), memo.bytes()), (None, 20));
        assert!(memo.get(4).is_some());
    }
}
