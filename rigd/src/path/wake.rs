//! The sleepers of a device's word: what a path's interrupt handler wakes.
//!
//! A client that waits on its device sleeps on a futex of its timeline word's low half
//! (`rig_shm::layout`'s control page). No GPU wakes a futex: the release's interrupt reaches
//! the path (a simulated queue's interrupt callback, a KFD event), and whoever receives it
//! wakes the word's sleepers, as a driver's interrupt handler wakes its waiters. Each path
//! keeps one [`Sleepers`] per device, set once by [`crate::path::Path::wake_on_interrupt`].

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use rig_shm::SharedRegion;

use super::{PathMemory, Refusal};

/// The word a device's clients sleep on, once the device named it, and how many wakes it
/// was given.
#[derive(Debug, Default)]
pub struct Sleepers {
    word: OnceLock<(SharedRegion, usize)>,
    wakes: AtomicU64,
}

impl Sleepers {
    /// Names the 32-bit word at `offset` of `memory` (host memory the path gave, which the
    /// path's process maps) as the one to wake; the path keeps its own hold of the memory. A
    /// second call is refused: a device has one word.
    pub fn set(&self, memory: &PathMemory, offset: u64) -> Result<(), Refusal> {
        let region = memory.host.as_ref().ok_or_else(|| {
            Refusal::Refused("the device's word must lie in memory the host maps".into())
        })?;
        let at = usize::try_from(offset)
            .ok()
            .filter(|at| at % 4 == 0 && at.checked_add(4).is_some_and(|end| end <= region.len()))
            .ok_or_else(|| {
                Refusal::Refused(
                    format!(
                        "the device's word at {offset} is not an aligned 32-bit word of its {} bytes",
                        region.len()
                    )
                    .into(),
                )
            })?;
        self.word
            .set((region.clone(), at))
            .map_err(|_| Refusal::Refused("the device's word was named already".into()))
    }

    /// Wakes every thread that sleeps on the word (in any process: a shared futex), if the
    /// device named one.
    pub fn wake(&self) {
        if let Some((region, at)) = self.word.get() {
            self.wakes.fetch_add(1, Ordering::Relaxed);
            rig_shm::futex::wake_all(region.atomic_u32(*at));
        }
    }

    /// How many wakes the word was given.
    pub fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }
}
