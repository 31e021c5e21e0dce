//! Memory of a device: allocating and freeing it, mapping a client's host memory, and
//! mapping another device's timeline word.

use std::os::fd::OwnedFd;

use rig_proto::Route;
use rig_proto::messages::{DeviceId, MemoryKind, RegionId, Response};

use super::Answered;
use super::devices::live;
use crate::device::{AllocError, FdList, Footprint};
use crate::path::{MapRefusal, Refusal as PathRefusal};
use crate::refusal::Refusal;
use crate::state::{ClientId, State, none};
use crate::table::{Held, Mode};

/// `Alloc`: new memory of `kind` on the device.
pub(crate) fn alloc<M: Mode>(
    st: &State,
    client: ClientId,
    route: &Route,
    kind: MemoryKind,
    bytes: u64,
) -> Result<Answered, M::Busy> {
    // Checks of the request's own words come before the device's.
    if bytes == 0 || bytes % 4 != 0 {
        return Ok(Err(Refusal::AllocSize { bytes }));
    }
    st.on_device::<M>(client, route, |h| {
        let rounded = bytes.div_ceil(4096).saturating_mul(4096);
        live(&h.d)?;
        let hosted = u64::from(kind != MemoryKind::Device);
        let need = Footprint {
            bytes: rounded,
            objects: 1,
            fds: hosted,
            maps: hosted,
            host_bytes: hosted * rounded,
            gpu_bytes: if kind == MemoryKind::Pinned {
                0
            } else {
                rounded
            },
            queue_bytes: 0,
        };
        st.reserve_for(client, h, need)?;
        let region = RegionId(st.new_object_id());
        let mut fds = FdList::default();
        let mut made = h.d.alloc(region, kind, rounded, &mut fds);
        if matches!(made, Err(AllocError::Refused(PathRefusal::Lacking(_)))) && st.reclaim(h) {
            made = h.d.alloc(region, kind, rounded, &mut fds);
        }
        match made {
            Ok((gpu_address, host)) => Ok((
                Response::Allocated {
                    region,
                    gpu_address,
                    host,
                },
                fds.into_fds(),
            )),
            Err(AllocError::Refused(PathRefusal::Lacking(_))) => Err(Refusal::gpu_short(rounded)),
            Err(AllocError::Refused(PathRefusal::Full(r) | PathRefusal::Refused(r))) => {
                Err(Refusal::Never(r.to_string()))
            }
            Err(e @ AllocError::Share(_)) => Err(Refusal::Internal(e.to_string())),
        }
    })
}

/// `Free`: gives back a region once no work submitted before the free can use it.
pub(crate) fn free<M: Mode>(
    st: &State,
    client: ClientId,
    route: &Route,
    region: RegionId,
) -> Result<Answered, M::Busy> {
    st.on_device::<M>(client, route, |h| {
        // Work submitted before the free may still use the memory: it is reused only once
        // none can (the device's quarantine).
        if h.d.free(region) {
            Ok(none(Response::Done))
        } else {
            Err(Refusal::NoRegion {
                device: h.d.id(),
                region,
            })
        }
    })
}

/// `MapHost`: maps the pages of the passed memfd that hold `bytes` bytes from `offset`.
pub(crate) fn map_host<M: Mode>(
    st: &State,
    client: ClientId,
    route: &Route,
    bytes: u64,
    offset: u64,
    fds: &mut Vec<OwnedFd>,
) -> Result<Answered, M::Busy> {
    // Checks of the request's own words come before the device's.
    if bytes == 0 || offset % 4096 != 0 {
        return Ok(Err(Refusal::MapSpan { bytes, offset }));
    }
    let Some(fd) = fds.pop() else {
        return Ok(Err(Refusal::NoMemfd));
    };
    st.on_device::<M>(client, route, |h| {
        let rounded = bytes.div_ceil(4096).saturating_mul(4096);
        live(&h.d)?;
        if !h.d.description().maps_host {
            return Err(Refusal::Never("this gpu's path maps no host memory".into()));
        }
        let need = Footprint {
            bytes: rounded,
            objects: 1,
            fds: 1,
            maps: 1,
            ..Footprint::default()
        };
        st.reserve_for(client, h, need)?;
        let region = RegionId(st.new_object_id());
        match h.d.map_host(region, fd, offset, rounded) {
            Ok(gpu_address) => Ok(none(Response::Mapped {
                region,
                gpu_address,
            })),
            Err(MapRefusal::NoRoom(_)) => Err(Refusal::gpu_short(rounded)),
            Err(MapRefusal::Never(why)) => Err(Refusal::Never(why.to_string())),
            Err(MapRefusal::Unfit(why)) => Err(Refusal::Unfit(why.to_string())),
        }
    })
}

/// `MapPeerWord`: maps `peer`'s timeline word read-only into the device's address space
/// (once per pair). The peer's page is read under the peer's lock, released before the
/// device's is taken: no request holds two devices at once.
pub(crate) fn map_peer_word<M: Mode>(
    st: &State,
    client: ClientId,
    route: &Route,
    peer: DeviceId,
) -> Result<Answered, M::Busy> {
    let peer_slot = match st.book().owned(client, peer) {
        Ok(s) => s,
        Err(r) => return Ok(Err(r)),
    };
    let (peer_gpu, control) = {
        let p = M::lock(&peer_slot)?;
        // A clone of the page keeps it alive after the peer closes; rigd made and sealed
        // it, so nobody can shrink it under the mapping.
        match p.word() {
            Some((page, _)) => (p.gpu(), page.clone()),
            None => {
                return Ok(Err(Refusal::Internal(
                    "the peer device has no control page".into(),
                )));
            }
        }
    };
    st.on_device::<M>(client, route, |h| {
        peer_word_held(st, client, h, peer, peer_gpu, &control)
    })
}

fn peer_word_held(
    st: &State,
    client: ClientId,
    h: &mut Held<'_>,
    peer: DeviceId,
    peer_gpu: u32,
    control: &rig_shm::SharedRegion,
) -> Answered {
    live(&h.d)?;
    if peer == h.d.id() {
        return match h.d.word() {
            Some((_, gpu_address)) => Ok(none(Response::PeerWord { gpu_address })),
            None => Err(Refusal::Internal("the device has no control page".into())),
        };
    }
    // A GPU reaches the words of its own devices only: a queue of another GPU would read
    // its host memory over paths rigd does not set up.
    let gpu = h.d.gpu();
    if peer_gpu != gpu {
        return Err(Refusal::Never(format!(
            "gpu {gpu} does not reach the word of device {} on gpu {peer_gpu}; wait on the host",
            peer.0
        )));
    }
    if !h.d.maps_peer_word(peer) {
        st.reserve_for(client, h, Footprint::PEER_WORD)?;
    }
    match h.d.map_peer_word(peer, control) {
        Ok(gpu_address) => Ok(none(Response::PeerWord { gpu_address })),
        Err(PathRefusal::Lacking(_)) => {
            Err(Refusal::gpu_short(rig_shm::layout::CONTROL_PAGE_BYTES))
        }
        Err(r) => Err(Refusal::Never(r.to_string())),
    }
}
