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
//! [`WORTH_RELEASING`] is due. This is the one crate with `unsafe` code (its two FFI calls);
//! every other crate forbids it. [`steady_thresholds`] fixes when the allocator maps a piece
//! of its own and how much free memory its heap keeps, for the proxy's large bodies.

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

/// Bodies up to this size come from the allocator's heap, not from a mapping of their own.
pub const MAPPED_FROM: usize = 8 << 20;

/// Free memory the heap keeps at its top between requests, rather than giving it back and
/// faulting it in again on the next one.
pub const KEPT_AT_TOP: usize = 16 << 20;

/// Fix the allocator's thresholds for a process that handles bodies of megabytes one after
/// another (the proxy), instead of glibc's, which move with the largest mapped piece freed: a
/// change that made the ledger's spool buffer smaller lowered them, and the request path's
/// 1.3 MB bodies then came from fresh pages on every request (1.9 ms more on the event loop,
/// BENCHMARKS.md, stop 59). Free memory still goes back through [`release_free_memory`] after
/// large bodies and bursts. Whether glibc took both; elsewhere nothing to set.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn steady_thresholds() -> bool {
    let (Ok(mapped_from), Ok(kept_at_top)) = (
        libc::c_int::try_from(MAPPED_FROM),
        libc::c_int::try_from(KEPT_AT_TOP),
    ) else {
        return false;
    };
    #[expect(unsafe_code, reason = "glibc's mallopt")]
    // SAFETY: mallopt takes two integers and no pointers; glibc applies it under its own lock.
    let set = unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, mapped_from) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, kept_at_top) == 1
    };
    set
}

/// Fix the allocator's thresholds (nothing to set off glibc).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn steady_thresholds() -> bool {
    false
}

/// Ask the allocator to return its free pages to the OS; whether it gave anything back.
/// It walks and locks every arena, so call it at a quiet moment (after a burst), not per
/// request. Elsewhere than glibc it does nothing and says `false`: those allocators return
/// memory themselves, or have no such call.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory() -> bool {
    #[expect(unsafe_code, reason = "glibc's malloc_trim")]
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

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn glibc_takes_the_thresholds() {
        assert!(steady_thresholds());
    }

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
