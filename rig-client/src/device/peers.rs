//! Peer words: other devices' timeline words as this device's GPU addresses them, for
//! waits made on the GPU, and the evidence slots that tell a reached point from a lost one.

use rig_proto::{DeviceId, Request, Response};

use super::{DeviceShared, poisoned};
use crate::error::{Error, Result};
use crate::loss::Evidence;
use crate::types::Memory;

impl DeviceShared {
    /// The GPU address at which this device's compute queue reads `peer`'s timeline word,
    /// or `None` if it cannot wait for it: the facts say the compute queue makes no waits
    /// for stores, `peer` came through another connection (rigd pairs one client's devices
    /// only), or rigd answers that this GPU does not reach `peer`'s. Asks rigd at the first
    /// call for `peer` and keeps the answer (rigd keeps the mapping until this device
    /// closes); a failed ask is not kept, so a later submit asks again.
    pub(crate) fn peer_word(&self, peer: &DeviceShared) -> Option<u64> {
        if let Some(known) = self.find_peer_word(peer.id) {
            return known;
        }
        let able = self.facts.gpu_waits && self.rig.same(&peer.rig);
        let answer = if able {
            let request = Request::MapPeerWord {
                device: self.id,
                peer: peer.id,
            };
            match self.rig.call(&request, &[]) {
                Ok((Response::PeerWord { gpu_address }, _)) if gpu_address % 8 == 0 => {
                    Some(gpu_address)
                }
                Ok((Response::Never { .. }, _)) => None,
                // A shortage of address space, an error or a bad answer: wait on the host
                // this time and ask again at a later submit.
                Ok(_) | Err(_) => return None,
            }
        } else {
            None
        };
        if let Ok(mut words) = self.peer_words.lock() {
            words.push((peer.id, answer));
        }
        answer
    }

    /// The kept answer of [`DeviceShared::peer_word`] for `peer`, if asked before.
    pub(super) fn find_peer_word(&self, peer: DeviceId) -> Option<Option<u64>> {
        let words = self.peer_words.lock().ok()?;
        words.iter().find(|(id, _)| *id == peer).map(|(_, a)| *a)
    }

    /// The kept GPU address of `peer`'s word, with no call to rigd.
    pub(crate) fn cached_peer_word(&self, peer: DeviceId) -> Option<u64> {
        self.find_peer_word(peer).flatten()
    }

    /// Allocates the evidence slots at the first GPU-side wait on another device's point.
    pub(crate) fn evidence_ready(&self) -> Result<()> {
        if self.deps.lock().map_err(|_| poisoned())?.evidence.is_some() {
            return Ok(());
        }
        let bytes = 4 * crate::loss::SLOTS as u64;
        let (region, gpu, host) = self.alloc_raw(bytes, Memory::Pinned)?;
        let Some(host) = host else {
            self.free_now(region);
            return Err(Error::Protocol(
                "rigd gave Pinned memory the host does not address".into(),
            ));
        };
        let mut deps = self.deps.lock().map_err(|_| poisoned())?;
        if deps.evidence.is_some() {
            drop(deps);
            self.free_now(region);
            return Ok(());
        }
        deps.evidence = Some(Evidence {
            gpu,
            host: host.view.region,
            offset: host.view.offset,
        });
        Ok(())
    }
}
