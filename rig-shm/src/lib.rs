//! Shared memory of rig: the bytes that the daemon, the simulated GPU and client processes
//! all touch at once.
//!
//! Every ring, argument segment, timeline word and doorbell page of rig lives in a memfd that
//! is mapped `MAP_SHARED` by several processes. Another process may write any byte of such a
//! mapping at any moment, so Rust references to those bytes would be undefined behaviour
//! (the compiler may assume `&[u8]` does not change under it). This crate is where that rule
//! is kept:
//!
//! - [`SharedRegion`] owns one mapping of a memfd, made with a size ([`SharedRegion::create`])
//!   or from a received file descriptor ([`SharedRegion::from_fd`], or
//!   [`SharedRegion::from_fd_sealed`] when the sender is not trusted). It hands out only
//!   copies ([`SharedRegion::read`], [`SharedRegion::write`]), atomic loads and stores
//!   ([`SharedRegion::load_u64`], ...) and references to *atomics*
//!   ([`SharedRegion::atomic_u64`]), whose interior mutability makes concurrent writers sound.
//! - [`futex`] waits on and wakes a 32-bit word, or sleeps on several at once, across
//!   processes (never `FUTEX_PRIVATE`).
//! - [`doorbell`] is the doorbell protocol that clients and queue processors share: a ring
//!   costs one store, plus a wake only when the processor sleeps.
//!
//! - [`ring`] is a queue's ring as its two sides use it: the client's [`ring::Producer`]
//!   (reserve, store, publish the write position, ring) and the queue's [`ring::Consumer`]
//!   (check the write position, fetch words across the end, publish the read position),
//!   with positions in the one unit its [`ring::Geometry`] states.
//! - [`layout`] is where each word of the shared pages lies (control page, a queue's
//!   positions, doorbell slots, the smallest ring and segment), checked at compile time;
//!   rigd, the client, rig-proto and the simulator all take it from there.
//!
//! The packets inside rings are `rig-amd`'s.
//!
//! Under Miri, a region is heap memory instead of a memfd, so the accessors and the doorbell
//! protocol can be checked there; [`SharedRegion::from_fd`] is then unavailable.
#![deny(missing_docs)]

// rig-shm maps memfds and sleeps on futexes: Linux on 64-bit machines only. Offsets and
// sizes in shared memory are `u64` on the wire and `usize` in the mappings, and the two are
// the same width here, which `usize_of` relies on.
#[cfg(not(target_pointer_width = "64"))]
compile_error!("rig-shm needs 64-bit addresses (u64 offsets of shared memory are used as usize)");

pub mod doorbell;
pub mod futex;
pub mod layout;
mod region;
pub mod ring;

pub use doorbell::Doorbell;
pub use layout::{
    DOORBELL_PAGE_BYTES, DOORBELL_SLEEPING_OFFSET, DOORBELL_SLOT_BYTES, DOORBELL_VALUE_OFFSET,
    DOORBELLS_PER_PAGE,
};
pub use region::SharedRegion;

/// Errors of shared-memory operations.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// `memfd_create` failed.
    #[error("cannot create a memfd")]
    Create(#[source] std::io::Error),
    /// Sizing the memfd with `ftruncate` failed.
    #[error("cannot size a memfd to {bytes} bytes")]
    Resize {
        /// The size asked for.
        bytes: usize,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// Sealing a new memfd against resizing failed.
    #[error("cannot seal a new memfd against resizing")]
    Seal(#[source] std::io::Error),
    /// A received descriptor cannot be sealed against shrinking, so mapping it would let
    /// its sender make this process fault (`SIGBUS`) at will.
    #[error(
        "the memory must be a memfd created with MFD_ALLOW_SEALING and passed writable, so \
         that it can be sealed against shrinking; this descriptor cannot be sealed"
    )]
    Unsealable(#[source] std::io::Error),
    /// `fstat` of a received file descriptor failed.
    #[error("cannot read the size of a shared-memory file descriptor")]
    Stat(#[source] std::io::Error),
    /// `mmap` failed.
    #[error("cannot map {bytes} bytes of shared memory")]
    Map {
        /// The size asked for.
        bytes: usize,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// `dup` of the region's file descriptor failed.
    #[error("cannot duplicate a shared-memory file descriptor")]
    Dup(#[source] std::io::Error),
    /// A region of zero bytes, or one too large for this machine's addresses.
    #[error(
        "a shared region of {0} bytes cannot be mapped: it must be between 1 byte and isize::MAX"
    )]
    BadSize(u64),
    /// A doorbell slot that is not a whole 64-byte line inside its region.
    #[error(
        "doorbell offset {offset} is not the start of a 64-byte slot inside a region of {len} bytes"
    )]
    BadDoorbell {
        /// The offset asked for.
        offset: usize,
        /// The region's size.
        len: usize,
    },
    /// A range of a received file that does not lie inside it, or does not start on a page.
    #[error(
        "{bytes} bytes at offset {offset} are not a page-aligned range inside the {len}-byte file"
    )]
    OutsideFile {
        /// The range's first byte.
        offset: u64,
        /// Its bytes.
        bytes: u64,
        /// The file's bytes, after sealing.
        len: u64,
    },
    /// The operation needs a real memfd, which Miri does not have.
    #[error("file-descriptor sharing is not available under miri")]
    Unsupported,
}

/// Result of shared-memory operations.
pub type Result<T> = std::result::Result<T, ShmError>;

/// `v` as a `usize`, without loss: rig-shm builds only where `usize` has 64 bits (the
/// `compile_error!` above). For offsets and counts that are already bounded by a mapping's
/// size; a peer-written value is range-checked before it gets here.
#[allow(
    clippy::cast_possible_truncation,
    reason = "usize is 64 bits wide on every target rig-shm builds for"
)]
pub(crate) const fn usize_of(v: u64) -> usize {
    v as usize
}
