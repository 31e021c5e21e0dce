//! The submission path: a submission's parts become packets in the shared rings and bytes
//! in the argument segment, placed with plain stores, and the doorbells are rung.
//!
//! Its rooms, one job each:
//!
//! - [`compile`]: what a submission becomes once per device ([`Compiled`]): each part's
//!   packets and argument bytes, with the kernel-argument addresses left to patch. Made at
//!   the first submit and kept in the submission, so a later submit of it copies words.
//! - [`framing`]: the words of value v on each queue, a pure function of the compiled
//!   submission and the value: the order between values, `after` between queues
//!   through 8-byte words in the value's block, the release of the timeline word.
//! - [`rings`]: the shared rings and the argument segment as the client fills them.
//! - [`room`]: the [`Placer`], the client's half of a device's queues: a submission that
//!   never fits is refused, one that exceeds today's rings needs a growth (installed once
//!   the device reached every value submitted), one that fits once earlier work completes
//!   waits.
//! - here, [`submit`]: the hot path, which takes the placer's lock to place a value and
//!   makes every call to rigd (a growth, a loss's reason) with the lock released.
//!
//! It does not own the packet formats ([`rig_amd::pm4`], [`rig_amd::sdma`]), the control
//! connection ([`crate::device`]) or the checks of parts that need no device state
//! ([`crate::submission`]).

mod compile;
mod framing;
mod rings;
mod room;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use compile::{Compiled, LaunchTemplate, TEMPLATE_WORDS, Target, encode};
use room::Pending;
pub(crate) use room::{GpuWait, Placer, STAMP_BYTES, StampSlots, Stamped, Step};

use std::sync::Arc;

use crate::device::DeviceShared;
use crate::error::{Error, Result};
use crate::point::Point;
use crate::submission::{Submission, What};

/// Submits `s` to `dev` as its next value: the hot path of the crate.
pub(crate) fn submit(dev: &Arc<DeviceShared>, s: &Submission) -> Result<u64> {
    if let Some(n) = &s.never {
        return Err(Error::Never(n.clone()));
    }
    dev.check_lost()?;
    // A submit converts the stamps of earlier values the device reached.
    crate::profile::settle(dev)?;
    // Waits the GPU cannot make (another GPU's device, a GPU whose compute queue does not
    // compare 64-bit words) are made here, on the host, before placing; so are waits for
    // a device already lost, which answer `Lost` unless it reached the point before.
    let pending = |p: &&Point| p.device.id != dev.id && !p.device.live.reached(p.value);
    let mut on_gpu = 0;
    for p in s.waits.iter().filter(pending) {
        if p.device.live.is_lost() || dev.peer_word(&p.device).is_none() {
            p.wait()?;
        } else {
            on_gpu += 1;
        }
    }
    if on_gpu > 0 {
        dev.evidence_ready()?;
    }
    let compiled = s.compiled(dev)?;
    // rigd is asked (a growth, a loss's reason) only here, with the placer's lock released.
    let mut grows = 0;
    loop {
        if on_gpu > 0 {
            dev.room_for_waits(on_gpu)?;
        }
        let tried = {
            let mut placer = dev.placer.lock().map_err(|_| poisoned())?;
            try_submit(dev, &mut placer, s, &compiled, on_gpu, pending)
        };
        match tried? {
            Tried::Placed(v) => return Ok(v),
            Tried::Lost => return Err(dev.lost_error()),
            Tried::NoRoomForWaits => {}
            Tried::Grow(request) => {
                grows += 1;
                if grows > 4 {
                    let asked = match *request {
                        rig_proto::Request::Grow {
                            compute_bytes,
                            copy_bytes,
                            segment_bytes,
                            ..
                        } => compute_bytes
                            .saturating_add(copy_bytes)
                            .saturating_add(segment_bytes),
                        _ => 0,
                    };
                    return Err(Error::out_of_memory(
                        "rings for the submission: rigd grew them four times and they still do not hold it",
                        asked,
                        rig_proto::Shortage::Gpu,
                        None,
                    ));
                }
                let (grown, fds) = dev.grow(&request)?;
                let grown = Pending::map(&grown, fds)?;
                dev.placer.lock().map_err(|_| poisoned())?.keep(grown)?;
            }
        }
    }
}

/// What one try at placing a submission under the placer's lock came to.
#[derive(Debug)]
enum Tried {
    /// Placed as this value.
    Placed(u64),
    /// The device was lost while the submission waited for room.
    Lost,
    /// Other submits took the room for GPU-side waits that [`DeviceShared::room_for_waits`]
    /// made: make it again.
    NoRoomForWaits,
    /// The rings or the segment must grow: this request asks rigd for it (boxed, so that
    /// the hot path's answer stays two words).
    Grow(Box<rig_proto::Request>),
}

fn poisoned() -> Error {
    Error::Invalid("a thread panicked while it submitted".into())
}

/// Places `compiled` as the device's next value under the placer's lock, waiting there for
/// room; makes no call to rigd. Nothing is left of a try that placed nothing.
fn try_submit(
    dev: &Arc<DeviceShared>,
    placer: &mut Placer,
    s: &Submission,
    compiled: &Compiled,
    on_gpu: usize,
    pending: impl Fn(&&Point) -> bool,
) -> Result<Tried> {
    placer.gpu_waits.clear();
    let next = placer.last() + 1;
    if on_gpu > 0 {
        let mut deps = dev.deps.lock().map_err(|_| poisoned())?;
        if deps.room() < on_gpu {
            deps.prune(dev.signaled());
            if deps.room() < on_gpu {
                return Ok(Tried::NoRoomForWaits);
            }
        }
        for p in s.waits.iter().filter(pending) {
            if let Some(word) = dev.cached_peer_word(p.device.id) {
                let evidence = deps.take(next, &p.device.live, p.value, word);
                placer.gpu_waits.push(GpuWait {
                    word,
                    value: p.value,
                    evidence,
                });
            }
        }
    }
    let tried = place_value(dev, placer, compiled);
    let waited = !placer.gpu_waits.is_empty();
    placer.gpu_waits.clear();
    if let Ok(Tried::Placed(v)) = tried {
        mark_uses(s, v);
    } else if waited {
        // Nothing was placed: the records of its waits go.
        if let Ok(mut deps) = dev.deps.lock() {
            deps.forget(next);
        }
    }
    tried
}

/// Places `compiled` as the device's next value, waiting for room (under the lock, so
/// that submits keep their order); answers where the rings must grow.
fn place_value(dev: &DeviceShared, placer: &mut Placer, compiled: &Compiled) -> Result<Tried> {
    let reached = || dev.signaled();
    loop {
        match placer.try_place(compiled, &reached)? {
            Step::Placed(v) => return Ok(Tried::Placed(v)),
            Step::Later => {
                let seen = dev.signaled();
                if dev.await_move(seen).is_err() {
                    return Ok(Tried::Lost);
                }
            }
            Step::Grow {
                compute,
                copy,
                block,
            } => {
                return Ok(Tried::Grow(Box::new(
                    placer.grow_request(dev.id, compute, copy, block),
                )));
            }
        }
    }
}

/// Records that value `v` uses the buffers of `s`. Under the placer's lock, which every
/// submit of the buffers' device takes.
fn mark_uses(s: &Submission, v: u64) {
    for part in &s.parts {
        match &part.what {
            What::Words(_) => {}
            What::Launch(l) => {
                for r in &l.refs {
                    r.buffer.used(v, r.access);
                }
            }
            What::Copy(c) => {
                c.src.used(v, crate::types::Access::Read);
                c.dst.used(v, crate::types::Access::Write);
            }
            What::Fill(f) => f.dst.used(v, crate::types::Access::Write),
        }
    }
}

impl Submission {
    /// The submission as `dev` runs it: made at its first submit there and kept, or made
    /// anew for another device.
    fn compiled(&self, dev: &DeviceShared) -> Result<std::borrow::Cow<'_, Compiled>> {
        if let Some(c) = self.compiled.get() {
            if c.device == dev.id.0 {
                return Ok(std::borrow::Cow::Borrowed(c));
            }
            return Ok(std::borrow::Cow::Owned(Compiled::new(
                &dev.target,
                dev.id.0,
                self,
            )?));
        }
        let c = Compiled::new(&dev.target, dev.id.0, self)?;
        Ok(std::borrow::Cow::Borrowed(self.compiled.get_or_init(|| c)))
    }
}
