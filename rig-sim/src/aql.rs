//! The HSA packet processor of an AQL queue.
//!
//! The ring holds 64-byte packets; the read position (written at `rptr_va`) counts packets. A
//! packet becomes visible when its header leaves INVALID: the processor reads the header with
//! acquire order, then the rest of the packet, runs it, sets the header back to INVALID
//! (handing the slot back to the producer) and moves the read position on. It stops at the
//! first INVALID header and sleeps until the doorbell, whose value (the last packet's index,
//! as ROCr writes it) only wakes it.
//!
//! Packets run one at a time, so each starts after every earlier packet completed: the
//! barrier bit always holds. Barriers wait on signals (`amd_signal_t`, whose 64-bit value lies
//! at offset 8) as WAIT_REG_MEM waits: woken by engine writes, re-polled every millisecond. A
//! completion signal is decremented atomically once the packet completes; if the signal has
//! an event mailbox (offset 16) the processor writes the signal's event id (offset 24) there
//! and raises an interrupt with that id as context. A kernel dispatch's workgroups are dealt
//! round-robin to the model's dies, which run their shares at once ([`crate::dispatch::spread`]).
//!
//! A queue with an `amd_queue_t` (a KFD queue: [`crate::QueueDesc::queue_va`]) gives each
//! kernel the scratch its descriptor holds at the dispatch, as the hardware's processor reads
//! it: the backing memory's location and bytes ([`rig_amd::aql::AmdQueue`]), read through the
//! queue's page tables (a descriptor it cannot read faults the queue with the address), so a
//! runtime that grows its scratch between dispatches is seen. A queue without one (the sim
//! path's) gives every kernel the scratch it was made with.
//!
//! A PM4-IB packet runs its indirect buffer through a PM4 command processor of the queue's
//! own ([`crate::pm4`]): how an AQL queue releases a 64-bit value with RELEASE_MEM and raises
//! its interrupt.
//!
//! Packets come from rig-amd's [`rig_amd::aql::decode`].

use std::sync::atomic::Ordering;

use rig_amd::aql::{self, AmdQueue, Packet, amd_queue};
use rig_amd::gpu::Gpu;
use rig_shm::ring::{Geometry, Unit};

use crate::dispatch::{self, AqlLaunch};
use crate::queue::{Ctx, FaultReason, InterruptSource, PacketError, Processor, QueueDesc};

/// Offset of the value in `amd_signal_t`.
const SIGNAL_VALUE: u64 = 8;
/// Offset of the event mailbox pointer in `amd_signal_t`.
const SIGNAL_MAILBOX: u64 = 16;
/// Offset of the event id in `amd_signal_t`.
const SIGNAL_EVENT_ID: u64 = 24;

// The read position counts packets: the unit rig_shm::layout states for AQL is one packet.
const _: () = assert!(aql::BYTES as u64 == rig_shm::layout::AQL_POSITION_UNIT);

/// An AQL queue's processor.
pub(crate) struct Aql {
    model: &'static Gpu,
    ring_va: u64,
    /// The ring's size, its positions counting packets.
    geometry: Geometry,
    rptr_va: u64,
    queue_va: u64,
    scratch: (u64, u64),
    /// Packets read so far.
    pos: u64,
    /// What PM4-IB packets run through.
    pm4: crate::pm4::State,
}

impl Aql {
    pub(crate) fn new(desc: &QueueDesc, model: &'static Gpu) -> Aql {
        Aql {
            model,
            ring_va: desc.ring_va,
            // PANIC: `queue::start` checked the ring's size against the same bound.
            geometry: Geometry::new(desc.ring_bytes, Unit::AqlPacket).expect("a checked ring size"),
            rptr_va: desc.rptr_va,
            queue_va: desc.queue_va,
            scratch: desc.scratch,
            pos: 0,
            pm4: crate::pm4::State::new(model),
        }
    }

    /// The scratch of the next kernel: from the queue's `amd_queue_t` if it has one.
    fn scratch(&self, vm: &crate::memory::Vm) -> Result<(u64, u64), FaultReason> {
        if self.queue_va == 0 {
            return Ok(self.scratch);
        }
        let mut bytes = [0u8; amd_queue::BYTES];
        vm.read(self.queue_va, &mut bytes)?;
        let q = AmdQueue::from_bytes(&bytes);
        Ok((
            q.scratch_backing_memory_location,
            q.scratch_backing_memory_byte_size,
        ))
    }

    fn bad(&self, reason: PacketError) -> FaultReason {
        FaultReason::BadPacket {
            position: self.pos,
            reason,
        }
    }
}

impl Processor for Aql {
    fn poll(&mut self, ctx: &Ctx) -> Result<(), FaultReason> {
        let vm = &ctx.vm;
        loop {
            if ctx.stopped() {
                return Ok(());
            }
            let slot_va = self.ring_va + self.geometry.offset(self.pos);
            // The header's acquire load orders the reads of the packet's other words after it.
            let word0 = vm.load_u32(slot_va, Ordering::Acquire)?;
            if word0 as u8 == aql::TYPE_INVALID {
                return Ok(());
            }
            let mut words = vm.read_dwords(slot_va, aql::WORDS)?;
            words[0] = word0;
            let packet = aql::decode(&words).map_err(|e| self.bad(e.into()))?;
            let completion = match packet {
                Packet::Invalid => return Ok(()),
                Packet::KernelDispatch(p) => {
                    let scratch = self.scratch(vm)?;
                    let launch = AqlLaunch {
                        packet_va: slot_va,
                        dispatch_id: self.pos,
                        queue_va: self.queue_va,
                        grid: p.grid_size,
                        group: p.workgroup_size.map(u32::from),
                        private_segment_size: p.private_segment_size,
                        group_segment_size: p.group_segment_size,
                        kernel_object: p.kernel_object,
                        kernarg_address: p.kernarg_address,
                        scratch,
                    };
                    let d = dispatch::from_aql(self.model, vm, &launch)?;
                    if d.group_size.contains(&0) {
                        return Err(self.bad(PacketError::Unfit(format!(
                            "kernel dispatch with workgroup size {:?}",
                            d.group_size
                        ))));
                    }
                    if !d.grid_items.contains(&0) {
                        ctx.execute(&d)?;
                    }
                    p.completion_signal
                }
                Packet::BarrierAnd(b) | Packet::BarrierOr(b) => {
                    let and = matches!(packet, Packet::BarrierAnd(_));
                    let deps: Vec<u64> = b.dep_signal.iter().copied().filter(|s| *s != 0).collect();
                    let watched: Vec<(u64, u64)> =
                        deps.iter().map(|s| (s + SIGNAL_VALUE, 8)).collect();
                    if !ctx.wait_until(&watched, || {
                        let mut zero = Vec::with_capacity(deps.len());
                        for s in &deps {
                            zero.push(vm.load_u64(s + SIGNAL_VALUE, Ordering::Acquire)? == 0);
                        }
                        Ok(if and {
                            zero.iter().all(|z| *z)
                        } else {
                            deps.is_empty() || zero.iter().any(|z| *z)
                        })
                    })? {
                        return Ok(());
                    }
                    b.completion_signal
                }
                Packet::Pm4Ib(ib) => {
                    self.pm4.run_ib(ctx, ib.address, ib.size_dw, self.pos, 1)?;
                    if ctx.stopped() {
                        return Ok(());
                    }
                    ib.completion_signal
                }
                Packet::BarrierValue(b) => {
                    if !ctx.wait_until(&[(b.signal + SIGNAL_VALUE, 8)], || {
                        let v = vm.load_u64(b.signal + SIGNAL_VALUE, Ordering::Acquire)? as i64;
                        Ok(b.cond.passes(v, b.mask, b.value))
                    })? {
                        return Ok(());
                    }
                    b.completion_signal
                }
            };
            if ctx.stopped() {
                return Ok(());
            }
            // What the packet's end writes: the slot's header, the read position, the
            // completion signal's value and its mailbox.
            let mut writes = vec![(slot_va, 4), (self.rptr_va, 8)];
            if completion != 0 {
                vm.rmw_u64(completion + SIGNAL_VALUE, &|v| v.wrapping_sub(1))?;
                writes.push((completion + SIGNAL_VALUE, 8));
                let mailbox = vm.load_u64(completion + SIGNAL_MAILBOX, Ordering::Acquire)?;
                if mailbox != 0 {
                    let id = vm.load_u32(completion + SIGNAL_EVENT_ID, Ordering::Acquire)?;
                    vm.store_u64(mailbox, u64::from(id), Ordering::Release)?;
                    writes.push((mailbox, 8));
                    // The interrupt's handler (the driver's) wakes the signal's waiters.
                    ctx.interrupt(InterruptSource::Signal, id);
                }
            }
            // Hand the slot back: type INVALID, and move the read position past it.
            vm.rmw_u32(slot_va, &|w| {
                (w & 0xffff_0000) | u32::from(aql::TYPE_INVALID)
            })?;
            self.pos += 1;
            vm.store_u64(self.rptr_va, self.pos, Ordering::Release)?;
            ctx.notify(&writes);
        }
    }
}
