//! Giving the operating system back the memory the allocator keeps after pith freed it.
//!
//! glibc returns freed memory only from the top of each heap; what was freed below a live
//! allocation stays resident. After a burst of 2,000 connections the proxy's RSS stayed at
//! about 150 MiB although only about 15 MiB was still in use (measured by calling
//! `malloc_trim(0)` in the running process: BENCHMARKS.md). `malloc_trim` hands those pages
//! back without touching live allocations.
//!
//! The proxy calls [`release_free_memory`] off its event loop when a burst of connections is
//! over, and after large bodies: [`freed`] adds up pieces of at least [`LARGE`] and says when
//! [`WORTH_RELEASING`] is due. This is the one crate with `unsafe` code (the one FFI call);
//! every other crate forbids it.

pub mod release;

use std::sync::atomic::{AtomicUsize, Ordering};

/// A piece of work at least this large (a request body of megabytes, its record, its decoded
/// or parsed copies) leaves pages behind worth handing back once it is freed.
pub const LARGE: usize = 1 << 20;

/// Large pieces freed adding up to this much make a release worth its cost: five WebSocket
/// creates of 60 MiB left 834 MB resident while the proxy sat idle, where only a burst of
/// connections used to release it.
pub const WORTH_RELEASING: usize = 32 << 20;

/// Bytes of large pieces freed since the last release was due.
static FREED_LARGE: AtomicUsize = AtomicUsize::new(0);

/// Note that a piece of work of `bytes` was just freed (pieces under [`LARGE`] are not
/// counted): whether the large pieces freed since the last time this said so now add up to
/// [`WORTH_RELEASING`], and the caller should [`release_free_memory`] (off any event loop).
pub fn freed(bytes: usize) -> bool {
    if bytes < LARGE {
        return false;
    }
    let before = FREED_LARGE.fetch_add(bytes, Ordering::AcqRel);
    before.saturating_add(bytes) >= WORTH_RELEASING
        && FREED_LARGE
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n >= WORTH_RELEASING).then_some(0)
            })
            .is_ok()
}

/// Ask the allocator to return its free pages to the OS; whether it gave anything back.
/// It walks and locks every arena, so call it at a quiet moment (after a burst), not per
/// request. Elsewhere than glibc it does nothing and says `false`: those allocators return
/// memory themselves, or have no such call.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory() -> bool {
    #[expect(unsafe_code, reason = "the one FFI call: glibc's malloc_trim")]
    // SAFETY: malloc_trim takes no pointers and reads no caller state; glibc serializes it
    // with every other allocator call through the arenas' own locks.
    let released = unsafe { libc::malloc_trim(0) };
    released == 1
}

/// Ask the allocator to return its free pages to the OS (nothing to do off glibc).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_pieces_freed_make_a_release_due_once_they_add_up() {
        assert!(!freed(LARGE - 1), "a small piece counted");
        let pieces = WORTH_RELEASING / LARGE;
        let due: Vec<bool> = (0..pieces).map(|_| freed(LARGE)).collect();
        assert_eq!(due.iter().filter(|d| **d).count(), 1, "{due:?}");
        assert_eq!(due.last(), Some(&true));
        assert!(!freed(LARGE), "counted from zero again");
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn freed_memory_below_a_live_allocation_goes_back() {
        // Many blocks freed below one that stays live: glibc keeps them resident.
        let blocks: Vec<Vec<u8>> = (0..2000).map(|i| vec![i as u8; 64 << 10]).collect();
        let keep = vec![1u8; 64 << 10];
        drop(blocks);
        assert!(release_free_memory(), "nothing was released");
        assert_eq!(keep[0], 1);
    }
}
