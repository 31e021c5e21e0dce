//! Deferred frees: regions and images given back once the device reached their last use.

use std::collections::VecDeque;

use rig_proto::{ImageId, RegionId};

use super::DeviceShared;

/// Regions and images to give back once the device reached a value.
#[derive(Debug, Default)]
pub(super) struct Deferred {
    frees: VecDeque<(u64, RegionId)>,
    unloads: VecDeque<(u64, ImageId, RegionId)>,
}

impl DeviceShared {
    /// Gives back regions and images whose last use the device reached.
    pub(super) fn settle(&self) {
        let reached = self.signaled();
        let (frees, unloads) = {
            let Ok(mut d) = self.deferred.lock() else {
                return;
            };
            let mut frees = Vec::new();
            while d.frees.front().is_some_and(|&(v, _)| v <= reached) {
                frees.extend(d.frees.pop_front().map(|(_, r)| r));
            }
            let mut unloads = Vec::new();
            while d.unloads.front().is_some_and(|&(v, _, _)| v <= reached) {
                unloads.extend(d.unloads.pop_front().map(|(_, i, r)| (i, r)));
            }
            (frees, unloads)
        };
        for r in frees {
            self.free_now(r);
        }
        for (i, r) in unloads {
            self.unload_now(i, r);
        }
    }

    /// Whether frees or unloads wait for the device to reach their last use.
    pub(super) fn has_deferred(&self) -> bool {
        self.deferred
            .lock()
            .is_ok_and(|d| !d.frees.is_empty() || !d.unloads.is_empty())
    }

    /// Frees `region` once the device reached `value`, its last use.
    pub(crate) fn free_after(&self, region: RegionId, value: u64) {
        if value <= self.signaled() || self.lost_flag() {
            self.free_now(region);
        } else if let Ok(mut d) = self.deferred.lock() {
            d.frees.push_back((value, region));
        }
    }

    /// Unloads `image` and frees its region once no submitted work can run it.
    pub(crate) fn unload_after(&self, image: ImageId, region: RegionId) {
        let last = self.placer.lock().map(|p| p.last()).unwrap_or(0);
        if last <= self.signaled() || self.lost_flag() {
            self.unload_now(image, region);
        } else if let Ok(mut d) = self.deferred.lock() {
            d.unloads.push_back((last, image, region));
        }
    }
}
