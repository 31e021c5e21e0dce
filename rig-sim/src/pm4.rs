//! The PM4 command processor of a compute queue.
//!
//! It runs packets in ring order, one at a time: a DISPATCH_DIRECT returns once its kernel has
//! completed, so an end-of-pipe RELEASE_MEM after it writes after the dispatch's writes, and
//! caches are coherent (ACQUIRE_MEM and EVENT_WRITE have nothing to do). Registers exist in the
//! SH window (the queue's COMPUTE_* registers) and, on GFX12 models, as the GPU's SQ
//! performance counters and their controls (`perfmon.rs`): a packet that reads or writes any
//! other register, or waits on one, faults the queue rather than pretend.
//!
//! Positions are in dwords. Packets come from rig-amd's [`rig_amd::pm4::decode`].

use std::sync::atomic::Ordering;

use rig_amd::gpu::Gpu;
use rig_amd::pm4::{self, CopyDst, CopySrc, DataSel, DecodeError, IntSel, Packet};

use crate::dispatch::{self, SH_WINDOW};
use crate::queue::{
    Ctx, DwordRing, FaultReason, InterruptSource, PacketError, Processor, QueueDesc,
};

/// Most dwords of one indirect buffer (IB_SIZE is 20 bits).
const MOST_IB_DWORDS: u32 = (1 << 20) - 1;
/// Most nested (not chained) indirect buffers.
const MOST_IB_DEPTH: u32 = 4;

/// A PM4 queue's processor.
pub(crate) struct Pm4 {
    ring: DwordRing,
    state: State,
}

/// A command processor's PM4 state: what a ring's packets (or an AQL queue's PM4-IB packets,
/// [`crate::aql`]) run against.
pub(crate) struct State {
    model: &'static Gpu,
    /// The SH register window, 0x2c00..0x3000.
    regs: Box<[u32; SH_WINDOW]>,
}

impl Pm4 {
    pub(crate) fn new(desc: &QueueDesc, model: &'static Gpu) -> Pm4 {
        Pm4 {
            ring: DwordRing::new(desc, rig_shm::ring::Unit::Dword),
            state: State::new(model),
        }
    }
}

impl Processor for Pm4 {
    fn poll(&mut self, ctx: &Ctx) -> Result<(), FaultReason> {
        let state = &mut self.state;
        self.ring
            .run(ctx, |ctx, words, pos| match pm4::decode(words) {
                Ok((packet, n)) => {
                    state.exec(ctx, packet, pos, 0)?;
                    Ok(Some(n))
                }
                Err(DecodeError::Truncated { .. }) => Ok(None),
                Err(e) => Err(bad(pos, e.into())),
            })
    }
}

fn bad(position: u64, reason: PacketError) -> FaultReason {
    FaultReason::BadPacket { position, reason }
}

/// Writes a perfmon register of the GPU (GFX12 models); false if `dword` is none.
fn perfmon_write(ctx: &Ctx, dword: u64, value: u32) -> bool {
    ctx.gpu
        .perfmon
        .as_ref()
        .is_some_and(|m| m.write(dword, value))
}

/// The SH-window index of the absolute register `dword`, if it lies there.
fn sh_index(dword: u64) -> Option<usize> {
    let start = u64::from(pm4::SH_REG_START);
    let end = u64::from(pm4::SH_REG_END);
    (start..end)
        .contains(&dword)
        .then(|| (dword - start) as usize)
}

impl State {
    pub(crate) fn new(model: &'static Gpu) -> State {
        State {
            model,
            regs: Box::new([0; SH_WINDOW]),
        }
    }

    fn exec(
        &mut self,
        ctx: &Ctx,
        packet: Packet<'_>,
        pos: u64,
        depth: u32,
    ) -> Result<(), FaultReason> {
        let vm = &ctx.vm;
        match packet {
            Packet::Nop(_) | Packet::AcquireMem(_) | Packet::EventWrite(_) => {}
            Packet::SetShReg(p) => {
                let start = usize::from(p.offset);
                let Some(dst) = self.regs.get_mut(start..start + p.values.len()) else {
                    return Err(bad(
                        pos,
                        PacketError::Unfit(format!(
                            "SET_SH_REG of {} registers at {:#x} leaves the SH window",
                            p.values.len(),
                            p.offset
                        )),
                    ));
                };
                dst.copy_from_slice(p.values);
            }
            Packet::DispatchDirect(p) => {
                let d = dispatch::from_registers(self.model, &self.regs, p.dim, p.initiator)
                    .map_err(|why| {
                        bad(pos, PacketError::Unfit(format!("DISPATCH_DIRECT: {why}")))
                    })?;
                if d.grid_items.contains(&0) {
                    return Ok(()); // An empty grid runs no wave.
                }
                ctx.execute(&d)?;
            }
            Packet::ReleaseMem(p) => {
                if p.dst_sel > 1 {
                    return Err(bad(
                        pos,
                        PacketError::Unfit(format!(
                            "RELEASE_MEM: DST_SEL {} is not memory",
                            p.dst_sel
                        )),
                    ));
                }
                match p.data_sel {
                    DataSel::None => {}
                    DataSel::Low32 => {
                        vm.store_u32(p.address, p.data as u32, Ordering::Release)?;
                    }
                    DataSel::Data64 => vm.store_u64(p.address, p.data, Ordering::Release)?,
                    DataSel::GpuClock | DataSel::SysClock => {
                        vm.store_u64(p.address, ctx.gpu.clock_ticks(), Ordering::Release)?;
                    }
                }
                let bytes = if matches!(p.data_sel, DataSel::Low32) {
                    4
                } else {
                    8
                };
                ctx.notify(&[(p.address, bytes)]);
                // The interrupt follows the write: its handler (the path's, not the GPU's)
                // wakes whoever sleeps on the word, which then holds the value.
                if matches!(p.int_sel, IntSel::Interrupt | IntSel::AfterWrite) {
                    ctx.interrupt(InterruptSource::ReleaseMem, p.int_ctxid);
                }
            }
            Packet::WaitRegMem(p) => {
                if !p.memory || p.operation == 1 {
                    return Err(bad(
                        pos,
                        PacketError::Unsimulated("WAIT_REG_MEM on a register".into()),
                    ));
                }
                let (mask, reference) = (u64::from(p.mask), u64::from(p.reference));
                ctx.wait_until(&[(p.address, 4)], || {
                    let v = vm.load_u32(p.address, Ordering::Acquire)?;
                    Ok(p.function.passes(u64::from(v), mask, reference))
                })?;
            }
            Packet::WaitRegMem64(p) => {
                ctx.wait_until(&[(p.address, 8)], || {
                    let v = vm.load_u64(p.address, Ordering::Acquire)?;
                    Ok(p.function.passes(v, p.mask, p.reference))
                })?;
            }
            Packet::WriteData(p) => {
                if p.dst_sel == 0 {
                    for (i, v) in p.data.iter().enumerate() {
                        let r = if p.one_addr {
                            p.address
                        } else {
                            p.address + i as u64
                        };
                        if let Some(idx) = sh_index(r) {
                            self.regs[idx] = *v;
                        } else if !perfmon_write(ctx, r, *v) {
                            return Err(bad(
                                pos,
                                PacketError::Unfit(format!(
                                    "WRITE_DATA to register {r:#x}, which is not simulated"
                                )),
                            ));
                        }
                    }
                } else if matches!(p.dst_sel, 1 | 2 | 5) {
                    for (i, v) in p.data.iter().enumerate() {
                        let a = if p.one_addr {
                            p.address
                        } else {
                            p.address + 4 * i as u64
                        };
                        vm.store_u32(a, *v, Ordering::Release)?;
                    }
                    let bytes = if p.one_addr {
                        4
                    } else {
                        4 * p.data.len() as u64
                    };
                    ctx.notify(&[(p.address, bytes)]);
                } else {
                    return Err(bad(
                        pos,
                        PacketError::Unsimulated(format!("WRITE_DATA: DST_SEL {}", p.dst_sel)),
                    ));
                }
            }
            Packet::CopyData(p) => {
                let value = match p.src_sel {
                    CopySrc::Memory | CopySrc::TcL2 => {
                        if p.count_64 {
                            vm.load_u64(p.src, Ordering::Acquire)?
                        } else {
                            u64::from(vm.load_u32(p.src, Ordering::Acquire)?)
                        }
                    }
                    CopySrc::Immediate => p.src,
                    CopySrc::GpuClock => ctx.gpu.clock_ticks(),
                    CopySrc::Register => match sh_index(p.src) {
                        Some(i) => u64::from(self.regs[i]),
                        None => match ctx.gpu.perfmon.as_ref().and_then(|m| m.read(p.src)) {
                            Some(v) => u64::from(v),
                            None => {
                                return Err(bad(
                                    pos,
                                    PacketError::Unfit(format!(
                                        "COPY_DATA from register {:#x}, which is not simulated",
                                        p.src
                                    )),
                                ));
                            }
                        },
                    },
                    other => {
                        return Err(bad(
                            pos,
                            PacketError::Unsimulated(format!("COPY_DATA from {other:?}")),
                        ));
                    }
                };
                match p.dst_sel {
                    CopyDst::Memory | CopyDst::TcL2 => {
                        if p.count_64 {
                            vm.store_u64(p.dst, value, Ordering::Release)?;
                        } else {
                            vm.store_u32(p.dst, value as u32, Ordering::Release)?;
                        }
                        ctx.notify(&[(p.dst, if p.count_64 { 8 } else { 4 })]);
                    }
                    CopyDst::Register => match sh_index(p.dst) {
                        Some(i) => self.regs[i] = value as u32,
                        None if perfmon_write(ctx, p.dst, value as u32) => {}
                        None => {
                            return Err(bad(
                                pos,
                                PacketError::Unfit(format!(
                                    "COPY_DATA to register {:#x}, which is not simulated",
                                    p.dst
                                )),
                            ));
                        }
                    },
                    other => {
                        return Err(bad(
                            pos,
                            PacketError::Unsimulated(format!("COPY_DATA to {other:?}")),
                        ));
                    }
                }
            }
            Packet::IndirectBuffer(p) => {
                if depth >= MOST_IB_DEPTH {
                    return Err(bad(
                        pos,
                        PacketError::Unfit(format!(
                            "indirect buffers nest deeper than {MOST_IB_DEPTH}"
                        )),
                    ));
                }
                self.run_ib(ctx, p.address, p.size_dw, pos, depth + 1)?;
            }
        }
        Ok(())
    }

    /// Runs an indirect buffer, following chained ones; returns when the last one ends.
    pub(crate) fn run_ib(
        &mut self,
        ctx: &Ctx,
        mut address: u64,
        mut size: u32,
        pos: u64,
        depth: u32,
    ) -> Result<(), FaultReason> {
        'chain: loop {
            if size > MOST_IB_DWORDS {
                return Err(bad(
                    pos,
                    PacketError::Unfit(format!("indirect buffer of {size} dwords")),
                ));
            }
            let words = ctx.vm.read_dwords(address, size as usize)?;
            let mut i = 0;
            while i < words.len() {
                if ctx.stopped() {
                    return Ok(());
                }
                let (packet, n) = pm4::decode(&words[i..]).map_err(|error| {
                    bad(
                        pos,
                        PacketError::Indirect {
                            address,
                            dword: i,
                            error,
                        },
                    )
                })?;
                if let Packet::IndirectBuffer(ib) = packet
                    && ib.chain
                {
                    address = ib.address;
                    size = ib.size_dw;
                    continue 'chain;
                }
                self.exec(ctx, packet, pos, depth)?;
                i += n;
            }
            return Ok(());
        }
    }
}
