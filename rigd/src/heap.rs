//! How rigd's heap gives memory back: large blocks (frames, code objects, their decoded
//! copies) are mapped on their own and unmapped when freed, so that what a client's large
//! request cost leaves with the request.
//!
//! glibc's allocator otherwise raises its mapping threshold to the largest block freed (up
//! to 32 MiB), after which frame-sized blocks come from arenas that keep their memory once
//! freed: 64 connections' frames would stay in rigd's resident set after they closed.

/// Blocks of at least this many bytes get a mapping of their own.
pub const OWN_MAPPING_BYTES: usize = 256 << 10;

/// Fixes the allocator's mapping threshold at [`OWN_MAPPING_BYTES`] (which also stops it
/// moving); call once at start. Says whether it took.
pub fn give_large_blocks_back() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallopt sets one parameter of glibc's allocator under the allocator's own
        // lock; the parameter is valid and the value in its range. It touches no memory of
        // ours.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_BYTES as libc::c_int) == 1 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}
