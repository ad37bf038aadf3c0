//! The memory request bodies may take decoded, shared by every request of the proxy.
//!
//! A compressed body costs what it decodes to, not what it weighs: 48 zstd bodies of 131 KB
//! that each decode past the body limit took the proxy to 7.2 GB, bounded only by the
//! blocking pool's 512 threads. Each decode takes its bytes from one [`DecodeBudget`] as its
//! buffer grows, and holds them for as long as the decoded body lives (it goes back when the
//! last reference to the body is dropped). A decode the budget cannot grant stops there, and
//! the request goes up as the client sent it, unread (fail open).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;

/// How many bodies at the body limit may be decoded at once: the budget is this many times
/// `proxy.max_body` (256 MiB by default, a Codex body of 200 KB decoded a thousand times over).
pub(crate) const BODIES_AT_THE_LIMIT: usize = 4;

/// Bytes left for decoding request bodies, process-wide.
#[derive(Debug)]
pub(crate) struct DecodeBudget {
    total: usize,
    left: AtomicUsize,
}

impl DecodeBudget {
    pub(crate) fn new(total: usize) -> Arc<DecodeBudget> {
        Arc::new(DecodeBudget {
            total,
            left: AtomicUsize::new(total),
        })
    }

    /// The budget's size, in bytes.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// A holding of nothing yet, grown by [`Held::grow`].
    pub(crate) fn hold(self: &Arc<Self>) -> Held {
        Held {
            budget: Arc::clone(self),
            bytes: 0,
        }
    }

    fn take(&self, n: usize) -> bool {
        self.left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(n)
            })
            .is_ok()
    }
}

/// Bytes one decode holds of the budget; given back when dropped.
#[derive(Debug)]
pub(crate) struct Held {
    budget: Arc<DecodeBudget>,
    bytes: usize,
}

impl Held {
    /// Take `n` more bytes, if the budget has them.
    pub(crate) fn grow(&mut self, n: usize) -> bool {
        let granted = self.budget.take(n);
        if granted {
            self.bytes += n;
        }
        granted
    }

    /// `decoded` as shared bytes that hold this budget until the last of them is dropped.
    pub(crate) fn into_bytes(self, decoded: Vec<u8>) -> Bytes {
        Bytes::from_owner(Decoded {
            data: decoded,
            _held: self,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.left.fetch_add(self.bytes, Ordering::AcqRel);
    }
}

/// A decoded body and the budget it holds.
struct Decoded {
    data: Vec<u8>,
    _held: Held,
}

impl AsRef<[u8]> for Decoded {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decoded_body_holds_its_bytes_until_its_last_reference_goes() {
        let budget = DecodeBudget::new(100);
        let mut held = budget.hold();
        assert!(held.grow(60));
        let mut other = budget.hold();
        assert!(!other.grow(60), "granted past the budget");
        assert!(other.grow(40));
        drop(other);
        let body = held.into_bytes(vec![1; 10]);
        let shared = body.clone();
        drop(body);
        assert!(
            !budget.hold().grow(41),
            "given back while a reference lives"
        );
        drop(shared);
        assert!(budget.hold().grow(100), "not given back");
    }
}
