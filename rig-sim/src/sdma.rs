//! The SDMA engine of a copy queue.
//!
//! Packets run in ring order; a copy or fill has completed when the next packet starts, so a
//! FENCE after copies writes after them. Copies move [`crate::memory::CHUNK`] bytes between
//! checks of the queue's stop flag, translating whole mapping runs and copying each with one
//! `memmove`. FENCE writes 32 bits; TIMESTAMP writes the GPU clock; POLL_REGMEM waits like
//! PM4's WAIT_REG_MEM (engine-write wakes and a 1 ms poll), for good, whatever its retry count;
//! GCR_REQ and an HDP flush have nothing to do in a coherent simulator.
//!
//! Positions are in bytes. Packets come from rig-amd's [`rig_amd::sdma::decode_with`].

use std::sync::atomic::Ordering;

use rig_amd::gpu::Gpu;
use rig_amd::sdma::{self, DecodeError, Layout, Packet};

use crate::queue::{
    Ctx, DwordRing, FaultReason, InterruptSource, PacketError, Processor, QueueDesc,
};

/// An SDMA queue's processor.
pub(crate) struct Sdma {
    ring: DwordRing,
    layout: Layout,
}

impl Sdma {
    pub(crate) fn new(desc: &QueueDesc, model: &'static Gpu) -> Sdma {
        Sdma {
            ring: DwordRing::new(desc, rig_shm::ring::Unit::Byte),
            layout: Layout::for_gpu(model),
        }
    }
}

fn bad(position: u64, reason: PacketError) -> FaultReason {
    FaultReason::BadPacket { position, reason }
}

impl Processor for Sdma {
    fn poll(&mut self, ctx: &Ctx) -> Result<(), FaultReason> {
        let layout = self.layout;
        self.ring.run(ctx, |ctx, words, pos| {
            match sdma::decode_with(layout, words) {
                Ok((packet, n)) => {
                    exec(ctx, packet, pos)?;
                    Ok(Some(n))
                }
                Err(DecodeError::Truncated { .. }) => Ok(None),
                Err(e) => Err(bad(pos, e.into())),
            }
        })
    }
}

/// Runs one packet.
fn exec(ctx: &Ctx, packet: Packet, pos: u64) -> Result<(), FaultReason> {
    let vm = &ctx.vm;
    // A chunk moved is progress, so that a copy longer than the hang bound is not a hang.
    let go_on = || !ctx.stopped() && ctx.moved();
    match packet {
        Packet::Nop(_) | Packet::GcrReq(_) => {}
        Packet::CopyLinear(p) => {
            vm.copy(p.dst, p.src, p.bytes, &go_on)?;
            ctx.notify(&[(p.dst, p.bytes)]);
        }
        Packet::SubWindow(p) => {
            let e = 1u64 << p.log2_element;
            let row = u64::from(p.width) * e;
            let at = |s: &sdma::Surface, y: u32, z: u32| {
                let el = (u64::from(s.z) + u64::from(z)) * u64::from(s.slice_pitch)
                    + (u64::from(s.y) + u64::from(y)) * u64::from(s.pitch)
                    + u64::from(s.x);
                s.address.wrapping_add(el * e)
            };
            for z in 0..p.depth {
                for y in 0..p.height {
                    if !vm.copy(at(&p.dst, y, z), at(&p.src, y, z), row, &go_on)? {
                        return Ok(());
                    }
                }
            }
            // From the first row's start to the last row's end: every byte it wrote.
            let wrote = if p.depth > 0 && p.height > 0 {
                let first = at(&p.dst, 0, 0);
                let end = at(&p.dst, p.height - 1, p.depth - 1).wrapping_add(row);
                vec![(first, end.saturating_sub(first))]
            } else {
                Vec::new()
            };
            ctx.notify(&wrote);
        }
        Packet::ConstFill(p) => {
            let pattern = match p.fill_size {
                0 => u32::from_le_bytes([p.value as u8; 4]),
                1 => (p.value & 0xffff) * 0x1_0001,
                _ => p.value,
            };
            vm.fill(p.dst, p.bytes, pattern, &go_on)?;
            ctx.notify(&[(p.dst, p.bytes)]);
        }
        Packet::Fence(p) => {
            vm.store_u32(p.address, p.value, Ordering::Release)?;
            ctx.notify(&[(p.address, 4)]);
        }
        // A fence and a trap are how SDMA releases: the trap's handler (the path's) wakes
        // whoever sleeps on the word the fence wrote.
        Packet::Trap(p) => ctx.interrupt(InterruptSource::SdmaTrap, p.context),
        Packet::PollRegMem(p) => {
            if p.hdp_flush {
                return Ok(());
            }
            if !p.memory {
                return Err(bad(
                    pos,
                    PacketError::Unsimulated("POLL_REGMEM on a register".into()),
                ));
            }
            let (mask, reference) = (u64::from(p.mask), u64::from(p.value));
            ctx.wait_until(&[(p.address, 4)], || {
                let v = vm.load_u32(p.address, Ordering::Acquire)?;
                Ok(p.function.passes(u64::from(v), mask, reference))
            })?;
        }
        Packet::Timestamp(p) => {
            vm.store_u64(p.address, ctx.gpu.clock_ticks(), Ordering::Release)?;
            ctx.notify(&[(p.address, 8)]);
        }
    }
    Ok(())
}
