//! One builder of a kernel launch, from its kernel descriptor: the user SGPRs in the order
//! the descriptor enables them, the COMPUTE_* register writes of a PM4 dispatch, and the
//! AQL kernel-dispatch packet. The kernel-argument bytes with their hidden block are
//! [`crate::kernarg::layout`]'s.
//!
//! Everything here writes into the caller's buffers and allocates nothing, so that a
//! client's submit path can run it per launch; the simulator reads the same tables
//! ([`UserSgprs`], [`crate::hal::Hal`], [`KernelDescriptor`]) when it launches waves, so the
//! two sides cannot disagree on an order or a granule.
//!
//! The user-SGPR order is AMDGPUUsage's "Initial Kernel Execution State": private segment
//! buffer (4), dispatch pointer (2), queue pointer (2), kernarg segment pointer (2),
//! dispatch id (2), flat scratch init (2), private segment size (1), each only if its
//! `kernel_code_properties` bit is set; preloaded kernel arguments (GFX940+) follow, up to
//! COMPUTE_PGM_RSRC2.USER_SGPR.

use crate::aql::{Header, KernelDispatch};
use crate::code_object::{
    ENABLE_SGPR_DISPATCH_ID, ENABLE_SGPR_DISPATCH_PTR, ENABLE_SGPR_FLAT_SCRATCH_INIT,
    ENABLE_SGPR_KERNARG_SEGMENT_PTR, ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER,
    ENABLE_SGPR_PRIVATE_SEGMENT_SIZE, ENABLE_SGPR_QUEUE_PTR, KernelDescriptor,
};
use crate::gpu::Gpu;
use crate::hal::Hal;
use crate::kernarg::Grid;
use crate::pm4::{self, SetShReg};
use crate::regs::{USER_DATA_COUNT, rsrc2};

/// Why a launch could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DispatchError {
    /// The caller's buffer is too short.
    #[error("the launch takes {need} words but the buffer has room for {have}")]
    BufferShort {
        /// Words needed.
        need: usize,
        /// Words given.
        have: usize,
    },
    /// A packet could not be encoded.
    #[error("encoding the launch's register writes failed")]
    Encode(#[source] pm4::EncodeError),
    /// A group is wider than an AQL packet's u16 workgroup size holds.
    #[error(
        "a group of {size} work-items along one axis does not fit an AQL packet (at most 65535)"
    )]
    GroupTooLarge {
        /// The group's size along the axis.
        size: u32,
    },
    /// The grid holds 2^32 work-items or more along one axis.
    #[error("the grid's axis {axis} holds 2^32 work-items or more")]
    GridTooLarge {
        /// 0, 1 or 2 for x, y, z.
        axis: usize,
    },
    /// The kernel's LDS and the launch's dynamic LDS overflow 32 bits.
    #[error("the kernel's {fixed} bytes of LDS and the launch's {dynamic} overflow")]
    LdsOverflow {
        /// The kernel's own LDS.
        fixed: u32,
        /// The launch's dynamic LDS.
        dynamic: u32,
    },
}

/// Where each user SGPR a kernel descriptor enables lies (its first SGPR), in AMDGPUUsage's
/// order; `None` for one it does not enable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UserSgprs {
    /// The private segment buffer resource (4 SGPRs).
    pub private_segment_buffer: Option<u8>,
    /// The dispatch packet's address (2).
    pub dispatch_ptr: Option<u8>,
    /// The queue's `amd_queue_t` address (2).
    pub queue_ptr: Option<u8>,
    /// The kernarg segment's address (2).
    pub kernarg_segment_ptr: Option<u8>,
    /// The dispatch id (2).
    pub dispatch_id: Option<u8>,
    /// Flat scratch initialisation (2).
    pub flat_scratch_init: Option<u8>,
    /// The private segment size (1).
    pub private_segment_size: Option<u8>,
    /// SGPRs these take, all together.
    pub enabled: u8,
}

/// The values of the user SGPRs of one launch (those the kernel does not enable are not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UserSgprValues {
    /// The private segment buffer resource ([`scratch_resource`], or zeros).
    pub private_segment_buffer: [u32; 4],
    /// The dispatch packet's address.
    pub dispatch_ptr: u64,
    /// The queue's address.
    pub queue_ptr: u64,
    /// The kernarg segment's address.
    pub kernarg_segment_ptr: u64,
    /// The dispatch id.
    pub dispatch_id: u64,
    /// The flat scratch address.
    pub flat_scratch_init: u64,
    /// Private bytes per work-item.
    pub private_segment_size: u32,
}

/// A buffer resource over `bytes` of scratch at `base`: base in words 0-1 (48 bits), size in
/// word 2; word 3 (the format) 0.
pub const fn scratch_resource(base: u64, bytes: u64) -> [u32; 4] {
    let size = if bytes > u32::MAX as u64 {
        u32::MAX
    } else {
        bytes as u32
    };
    [base as u32, ((base >> 32) as u32) & 0xffff, size, 0]
}

impl UserSgprs {
    /// The user SGPRs `kernel_code_properties` enables.
    pub fn of(kernel_code_properties: u16) -> Self {
        let mut enabled = 0u8;
        let mut take = |bit: u16, n: u8| {
            (kernel_code_properties & bit != 0).then(|| {
                enabled += n;
                enabled - n
            })
        };
        let mut s = Self {
            private_segment_buffer: take(ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER, 4),
            dispatch_ptr: take(ENABLE_SGPR_DISPATCH_PTR, 2),
            queue_ptr: take(ENABLE_SGPR_QUEUE_PTR, 2),
            kernarg_segment_ptr: take(ENABLE_SGPR_KERNARG_SEGMENT_PTR, 2),
            dispatch_id: take(ENABLE_SGPR_DISPATCH_ID, 2),
            flat_scratch_init: take(ENABLE_SGPR_FLAT_SCRATCH_INIT, 2),
            private_segment_size: take(ENABLE_SGPR_PRIVATE_SEGMENT_SIZE, 1),
            enabled: 0,
        };
        s.enabled = enabled;
        s
    }

    /// Writes the enabled SGPRs of `v` into `out`, returning [`UserSgprs::enabled`].
    pub fn fill(&self, v: &UserSgprValues, out: &mut [u32]) -> Result<usize, DispatchError> {
        let need = usize::from(self.enabled);
        let have = out.len();
        let out = out
            .get_mut(..need)
            .ok_or(DispatchError::BufferShort { need, have })?;
        let mut put = |at: Option<u8>, words: &[u32]| {
            if let Some(at) = at {
                let at = usize::from(at);
                out[at..at + words.len()].copy_from_slice(words);
            }
        };
        let w64 = |x: u64| [x as u32, (x >> 32) as u32];
        put(self.private_segment_buffer, &v.private_segment_buffer);
        put(self.dispatch_ptr, &w64(v.dispatch_ptr));
        put(self.queue_ptr, &w64(v.queue_ptr));
        put(self.kernarg_segment_ptr, &w64(v.kernarg_segment_ptr));
        put(self.dispatch_id, &w64(v.dispatch_id));
        put(self.flat_scratch_init, &w64(v.flat_scratch_init));
        put(self.private_segment_size, &[v.private_segment_size]);
        Ok(need)
    }
}

/// The user data of a PM4 dispatch of `d` into `out`: the enabled SGPRs of `v`, then zeros
/// up to what COMPUTE_PGM_RSRC2.USER_SGPR declares, at most 16 in all. Returns the count and
/// where each SGPR lies.
pub fn pm4_user_data(
    d: &KernelDescriptor,
    v: &UserSgprValues,
    out: &mut [u32; USER_DATA_COUNT as usize],
) -> (usize, UserSgprs) {
    let sgprs = UserSgprs::of(d.kernel_code_properties);
    // PANIC: at most 15 SGPRs are enabled, and out holds 16.
    let enabled = sgprs
        .fill(v, out)
        .expect("16 user SGPRs hold every enabled one");
    let declared = rsrc2::USER_SGPR.get(d.compute_pgm_rsrc2) as usize;
    let n = declared.max(enabled).min(out.len());
    out[enabled..n].fill(0);
    (n, sgprs)
}

/// The scratch a PM4 dispatch names (COMPUTE_DISPATCH_SCRATCH_BASE and TMPRING_SIZE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pm4Scratch {
    /// GPU address of the scratch (256-byte aligned).
    pub address: u64,
    /// Bytes of scratch one wave takes ([`Hal::wave_scratch`]).
    pub wave_bytes: u64,
    /// Waves that may hold scratch at once.
    pub waves: u32,
}

/// Where the values that change per launch lie in the words [`pm4_registers`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pm4Registers {
    /// Words written.
    pub words: usize,
    /// Index of COMPUTE_NUM_THREAD_X (Y and Z follow).
    pub threads_at: usize,
    /// Index of COMPUTE_PGM_RSRC2 (its LDS_SIZE follows the launch's LDS).
    pub rsrc2_at: usize,
    /// Index of COMPUTE_USER_DATA_0, if any user data is written.
    pub user_data_at: Option<usize>,
}

impl Pm4Registers {
    /// Sets the launch's group size and its LDS (`lds_bytes`, the kernel's and the launch's
    /// together, in `gpu`'s granules) in `words`, the words [`pm4_registers`] wrote.
    pub fn set_launch(&self, words: &mut [u32], gpu: &Gpu, threads: [u32; 3], lds_bytes: u32) {
        words[self.threads_at..self.threads_at + 3].copy_from_slice(&threads);
        let w = &mut words[self.rsrc2_at];
        *w = rsrc2::LDS_SIZE.set(*w, gpu.lds_granules(lds_bytes));
    }
}

/// Writes the SET_SH_REG packets of a PM4 dispatch of the kernel whose descriptor `d` lies at
/// `descriptor_address` into `out`: thread counts (1, 1, 1 until [`Pm4Registers::set_launch`]),
/// code address, scratch base, resource words, resource limits, TMPRING_SIZE, RSRC3 and
/// `user_data` (see [`pm4_user_data`]). DISPATCH_DIRECT with [`Hal::initiator`] follows them.
pub fn pm4_registers(
    hal: &Hal,
    d: &KernelDescriptor,
    descriptor_address: u64,
    scratch: Option<Pm4Scratch>,
    user_data: &[u32],
    out: &mut [u32],
) -> Result<Pm4Registers, DispatchError> {
    let r = hal.compute;
    let code = descriptor_address.wrapping_add_signed(d.kernel_code_entry_byte_offset);
    let (base, tmpring) = match scratch {
        Some(s) => (s.address >> 8, hal.tmpring_size(s.waves, s.wave_bytes)),
        None => (0, 0),
    };
    let have = out.len();
    let mut at = 0;
    let mut set = |offset: u16, values: &[u32]| -> Result<usize, DispatchError> {
        let rest = out.get_mut(at..).ok_or(DispatchError::BufferShort {
            need: at + values.len() + 2,
            have,
        })?;
        let n = SetShReg { offset, values }
            .encode(rest)
            .map_err(|e| match e {
                pm4::EncodeError::NoRoom { need, .. } => DispatchError::BufferShort {
                    need: at + need,
                    have,
                },
                e => DispatchError::Encode(e),
            })?;
        let first = at + 2;
        at += n;
        Ok(first)
    };
    let threads_at = set(r.start_x, &[0, 0, 0, 1, 1, 1])? + 3;
    set(r.pgm_lo, &[(code >> 8) as u32, (code >> 40) as u32])?;
    let rsrc = set(
        r.dispatch_scratch_base_lo,
        &[
            base as u32,
            (base >> 32) as u32,
            d.compute_pgm_rsrc1,
            d.compute_pgm_rsrc2,
        ],
    )?;
    set(r.resource_limits, &[0])?;
    set(r.tmpring_size, &[tmpring])?;
    set(r.pgm_rsrc3, &[d.compute_pgm_rsrc3])?;
    let user_data_at = if user_data.is_empty() {
        None
    } else {
        Some(set(r.user_data_0, user_data)?)
    };
    Ok(Pm4Registers {
        words: at,
        threads_at,
        rsrc2_at: rsrc + 3,
        user_data_at,
    })
}

/// The AQL kernel-dispatch packet of a launch of `grid` of the kernel whose descriptor `d`
/// lies at `kernel_object`, its arguments at `kernarg_address`.
pub fn aql_dispatch(
    d: &KernelDescriptor,
    kernel_object: u64,
    kernarg_address: u64,
    grid: &Grid,
    header: Header,
    completion_signal: u64,
) -> Result<KernelDispatch, DispatchError> {
    let mut workgroup_size = [0u16; 3];
    let mut grid_size = [0u32; 3];
    for axis in 0..3 {
        let size = grid.group_size[axis];
        workgroup_size[axis] =
            u16::try_from(size).map_err(|_| DispatchError::GroupTooLarge { size })?;
        grid_size[axis] = grid.groups[axis]
            .checked_mul(size)
            .ok_or(DispatchError::GridTooLarge { axis })?;
    }
    let fixed = d.group_segment_fixed_size;
    Ok(KernelDispatch {
        header,
        dimensions: grid.dims() as u8,
        workgroup_size,
        grid_size,
        private_segment_size: d.private_segment_fixed_size,
        group_segment_size: fixed.checked_add(grid.dynamic_lds).ok_or(
            DispatchError::LdsOverflow {
                fixed,
                dynamic: grid.dynamic_lds,
            },
        )?,
        kernel_object,
        kernarg_address,
        completion_signal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Generation;
    use crate::pm4::{Packet, decode};

    const PROPS: u16 = ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER
        | ENABLE_SGPR_KERNARG_SEGMENT_PTR
        | ENABLE_SGPR_FLAT_SCRATCH_INIT
        | ENABLE_SGPR_PRIVATE_SEGMENT_SIZE;

    #[test]
    fn user_sgprs_follow_amdgpuusage_order() {
        let s = UserSgprs::of(PROPS | ENABLE_SGPR_DISPATCH_PTR);
        assert_eq!(s.private_segment_buffer, Some(0));
        assert_eq!(s.dispatch_ptr, Some(4));
        assert_eq!(s.queue_ptr, None);
        assert_eq!(s.kernarg_segment_ptr, Some(6));
        assert_eq!(s.flat_scratch_init, Some(8));
        assert_eq!(s.private_segment_size, Some(10));
        assert_eq!(s.enabled, 11);
        let v = UserSgprValues {
            private_segment_buffer: scratch_resource(0x1_2345_6789_0000, 4096),
            dispatch_ptr: 0xd00d,
            kernarg_segment_ptr: 0x7_0000_0040,
            flat_scratch_init: 0x9_0000_0000,
            private_segment_size: 48,
            ..UserSgprValues::default()
        };
        let mut out = [0xffu32; 12];
        assert_eq!(s.fill(&v, &mut out), Ok(11));
        assert_eq!(
            out,
            [
                0x6789_0000,
                0x2345,
                4096,
                0,
                0xd00d,
                0,
                0x40,
                7,
                0,
                9,
                48,
                0xff
            ]
        );
        assert_eq!(
            s.fill(&v, &mut [0; 4]),
            Err(DispatchError::BufferShort { need: 11, have: 4 })
        );
    }

    #[test]
    fn pm4_registers_decode_to_the_descriptor() {
        let hal = Generation::Gfx11.hal();
        let gpu = Gpu::by_name("gfx1100").unwrap();
        let d = KernelDescriptor {
            kernel_code_entry_byte_offset: 256,
            compute_pgm_rsrc1: 0x11,
            compute_pgm_rsrc2: rsrc2::USER_SGPR.put(12) | 1,
            compute_pgm_rsrc3: 0x33,
            kernel_code_properties: PROPS,
            ..KernelDescriptor::default()
        };
        let mut user = [0u32; 16];
        let (n, sgprs) = pm4_user_data(&d, &UserSgprValues::default(), &mut user);
        assert_eq!((n, sgprs.kernarg_segment_ptr), (12, Some(4)));
        let mut words = [0u32; 64];
        let scratch = Pm4Scratch {
            address: 0x1234_5600,
            wave_bytes: 2048,
            waves: 4,
        };
        let r = pm4_registers(hal, &d, 0x10_0000, Some(scratch), &user[..n], &mut words).unwrap();
        r.set_launch(&mut words, gpu, [64, 2, 1], 1000);
        // Every packet is a SET_SH_REG; gather the registers they set.
        let mut sh = [0u32; 0x400];
        let mut at = 0;
        while at < r.words {
            let (Packet::SetShReg(p), len) = decode(&words[at..r.words]).unwrap() else {
                panic!("not a SET_SH_REG at {at}");
            };
            for (i, v) in p.values.iter().enumerate() {
                sh[usize::from(p.offset) + i] = *v;
            }
            at += len;
        }
        let c = hal.compute;
        let reg = |o: u16| sh[usize::from(o)];
        assert_eq!(
            (u64::from(reg(c.pgm_lo + 1)) << 32 | u64::from(reg(c.pgm_lo))) << 8,
            0x10_0100
        );
        assert_eq!([reg(c.num_thread_x), reg(c.num_thread_x + 1)], [64, 2]);
        assert_eq!(gpu.lds_of_rsrc2(reg(c.pgm_rsrc2)), 1024);
        assert_eq!(reg(c.pgm_rsrc1), 0x11);
        assert_eq!(reg(c.pgm_rsrc3), 0x33);
        assert_eq!(hal.tmpring_wave_bytes(reg(c.tmpring_size)), 2048);
        assert_eq!(reg(c.dispatch_scratch_base_lo), 0x12_3456);
        assert_eq!(r.user_data_at.map(|u| words[u + 4]), Some(0));
        assert!(matches!(
            pm4_registers(hal, &d, 0, None, &user[..n], &mut [0u32; 20]),
            Err(DispatchError::BufferShort { have: 20, .. })
        ));
    }

    #[test]
    fn aql_packets_carry_the_grid() {
        let d = KernelDescriptor {
            group_segment_fixed_size: 256,
            private_segment_fixed_size: 16,
            ..KernelDescriptor::default()
        };
        let grid = Grid {
            groups: [4, 2, 1],
            group_size: [64, 1, 1],
            dynamic_lds: 512,
        };
        let p = aql_dispatch(&d, 0x1000, 0x2000, &grid, Header::default(), 0).unwrap();
        assert_eq!(p.grid_size, [256, 2, 1]);
        assert_eq!(p.workgroup_size, [64, 1, 1]);
        assert_eq!(p.dimensions, 2);
        assert_eq!((p.group_segment_size, p.private_segment_size), (768, 16));
        let wide = Grid {
            group_size: [70_000, 1, 1],
            ..grid
        };
        assert_eq!(
            aql_dispatch(&d, 0, 0, &wide, Header::default(), 0),
            Err(DispatchError::GroupTooLarge { size: 70_000 })
        );
        let huge = Grid {
            groups: [u32::MAX, 1, 1],
            ..grid
        };
        assert_eq!(
            aql_dispatch(&d, 0, 0, &huge, Header::default(), 0),
            Err(DispatchError::GridTooLarge { axis: 0 })
        );
    }
}
