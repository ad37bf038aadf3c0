//! Giving the operating system back the memory the allocator keeps after pith freed it.
//!
//! glibc returns freed memory only from the top of each heap; what was freed below a live
//! allocation stays resident. After a burst of 2,000 connections the proxy's RSS stayed at
//! about 150 MiB although only about 15 MiB was still in use (measured by calling
//! `malloc_trim(0)` in the running process: BENCHMARKS.md). `malloc_trim` hands those pages
//! back without touching live allocations.

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
