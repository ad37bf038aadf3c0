//! Memory ids: short enough to type and quote (`m-7f3a`), unique per brain.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// Candidate ids for one new memory, in the order to try them. The first few have four hex
/// digits; each further round of collisions adds a digit, so a crowded brain still finds a free
/// id quickly and ids never need a central counter (two processes can mint at once; the
/// store's uniqueness check settles any race).
pub(crate) fn candidates(title: &str) -> impl Iterator<Item = String> + use<> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut seed = Sha256::new();
    seed.update(title.as_bytes());
    seed.update(nanos.to_le_bytes());
    seed.update(std::process::id().to_le_bytes());
    seed.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    let seed = seed.finalize();
    (0u32..MAX_ATTEMPTS).map(move |attempt| {
        let digest = Sha256::new()
            .chain_update(seed)
            .chain_update(attempt.to_le_bytes())
            .finalize();
        let digits = usize::try_from(4 + attempt / 4).unwrap_or(16).min(16);
        let mut id = String::with_capacity(2 + digits);
        id.push_str("m-");
        for b in digest.iter().take(digits.div_ceil(2)) {
            id.push_str(&format!("{b:02x}"));
        }
        id.truncate(2 + digits);
        id
    })
}

/// 4 tries each at 4..=16 hex digits: a collision on all of them means something is broken.
pub(crate) const MAX_ATTEMPTS: u32 = 52;

/// How callers may write an id: `m-7f3a`, `M-7F3A` or just `7f3a`.
pub(crate) fn normalize(id: &str) -> String {
    let id = id.trim().to_ascii_lowercase();
    if id.starts_with("m-") {
        id
    } else {
        format!("m-{id}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_grow_and_differ() {
        let ids: Vec<String> = candidates("t").collect();
        assert_eq!(ids.len(), MAX_ATTEMPTS as usize);
        assert_eq!(ids[0].len(), 6);
        assert!(ids[0].starts_with("m-"));
        assert!(ids[0][2..].chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(ids[4].len(), 7);
        assert_eq!(ids.last().unwrap().len(), 18);
        let a: Vec<String> = candidates("t").take(1).collect();
        let b: Vec<String> = candidates("t").take(1).collect();
        assert_ne!(a, b, "same title twice must not mint the same id");
    }

    #[test]
    fn normalizes_case_and_prefix() {
        assert_eq!(normalize(" M-7F3A "), "m-7f3a");
        assert_eq!(normalize("7f3a"), "m-7f3a");
    }
}
