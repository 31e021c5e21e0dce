//! What every path checks of memory the same way: whole pages, a peer mapping's range, a
//! client's memfd made fit to map, and what a refusal means when the memory was a host
//! mapping. Each path's own allocator and mappings stay its own.

use std::os::fd::OwnedFd;

use rig_amd::PAGE_BYTES as PAGE;
use rig_shm::{SharedRegion, ShmError};

use super::{MapRefusal, Refusal};

/// `bytes` rounded up to whole pages; `None` if that overflows or `bytes` is 0.
pub fn page_round(bytes: u64) -> Option<u64> {
    bytes
        .checked_add(PAGE - 1)
        .map(|b| b / PAGE * PAGE)
        .filter(|b| *b > 0)
}

/// The bytes of an allocation of `bytes`, rounded to whole pages, or the refusal of a size
/// no allocation has.
pub fn alloc_bytes(bytes: u64) -> Result<u64, Refusal> {
    page_round(bytes)
        .ok_or_else(|| Refusal::Refused(format!("cannot allocate {bytes} bytes").into()))
}

/// The whole pages of a peer's `region` that [`super::Path::map_peer`] maps for `bytes` at
/// `offset`: `bytes` rounded to pages, which must lie in the region from a page's start.
pub fn peer_range(region: &SharedRegion, offset: u64, bytes: u64) -> Result<u64, Refusal> {
    let bytes = page_round(bytes).unwrap_or(u64::MAX);
    if offset % PAGE != 0 || !region.contains(offset, bytes) {
        return Err(Refusal::Refused(
            format!(
                "{bytes} bytes at offset {offset} are not whole pages of the {}-byte memory",
                region.len()
            )
            .into(),
        ));
    }
    Ok(bytes)
}

/// The client's memfd `fd` for [`super::Path::map_host`]: sealed against shrinking, then its
/// `bytes` (rounded to whole pages) at `offset` mapped in rigd, and no more of it. A client
/// that could truncate it later would make the GPU's (or rigd's) next access a SIGBUS; and
/// mapping only the range asked keeps rigd's address space to what was charged (a sparse
/// memfd of 2^46 bytes costs its sender nothing). See docs/security.md.
pub fn host_region(fd: OwnedFd, offset: u64, bytes: u64) -> Result<SharedRegion, MapRefusal> {
    let bytes = page_round(bytes).unwrap_or(u64::MAX);
    SharedRegion::from_fd_range_sealed(fd, offset, bytes).map_err(|e| match &e {
        ShmError::Unsealable(source) => MapRefusal::Unfit(
            format!("{e} ({source}); rig-shm's SharedRegion::create makes such memfds").into(),
        ),
        ShmError::OutsideFile { len, .. } => MapRefusal::Never(
            format!("{bytes} bytes at offset {offset} lie outside the {len}-byte memfd").into(),
        ),
        _ => MapRefusal::Never(
            format!("the descriptor is not shared memory rigd can map for writing: {e}").into(),
        ),
    })
}

/// A refusal of the mapping of host pages: a lack of room stays one; anything else the
/// path will never map.
impl From<Refusal> for MapRefusal {
    fn from(r: Refusal) -> MapRefusal {
        match r {
            Refusal::Lacking(s) => MapRefusal::NoRoom(s),
            Refusal::Full(s) | Refusal::Refused(s) => MapRefusal::Never(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_round_up_and_nothing_is_no_allocation() {
        assert_eq!(page_round(1), Some(PAGE));
        assert_eq!(page_round(PAGE), Some(PAGE));
        assert_eq!(page_round(PAGE + 1), Some(2 * PAGE));
        assert_eq!(page_round(0), None);
        assert_eq!(page_round(u64::MAX), None);
        assert!(matches!(alloc_bytes(0), Err(Refusal::Refused(_))));
    }

    #[test]
    fn a_peer_range_is_whole_pages_inside_the_region() {
        let r = SharedRegion::create("peer", 2 * PAGE as usize).unwrap();
        assert_eq!(peer_range(&r, 0, 8).unwrap(), PAGE);
        assert_eq!(peer_range(&r, PAGE, PAGE).unwrap(), PAGE);
        assert!(peer_range(&r, 8, 8).is_err(), "not a page's start");
        assert!(peer_range(&r, PAGE, PAGE + 1).is_err(), "past the end");
        assert!(peer_range(&r, 0, u64::MAX).is_err());
    }

    #[test]
    fn a_memfd_outside_its_range_is_never_mapped_and_a_lack_of_room_stays_one() {
        let r = SharedRegion::create("host", PAGE as usize).unwrap();
        let e = host_region(r.dup_fd().unwrap(), PAGE, PAGE).unwrap_err();
        assert!(matches!(e, MapRefusal::Never(_)), "{e:?}");
        assert!(matches!(
            MapRefusal::from(Refusal::Lacking("x".into())),
            MapRefusal::NoRoom(_)
        ));
        assert!(matches!(
            MapRefusal::from(Refusal::Full("x".into())),
            MapRefusal::Never(_)
        ));
    }
}
