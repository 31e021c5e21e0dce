//! The argument bytes of a launch: the caller's parameters, then the hidden arguments.
//!
//! A launch's kernarg segment holds the parameters (the caller's bytes, each ref's GPU address
//! added to the u64 at its offset), then the hidden arguments the kernel reads, for a grid of
//! whole groups that starts at work-item 0: block counts and group sizes along each axis, the
//! grid's dimensions and the launch's dynamic LDS bytes. Remainders and global offsets are 0,
//! as is every byte the kernel does not read.
//!
//! The daemon reads a kernel's [`KernargPlan`] from its code object
//! ([`crate::code_object::Kernel::plan`]) and sends it to the client, which calls [`layout`]
//! on every launch: the plan is a small plain struct, and `layout` allocates nothing.
//! This module does not check a launch against its kernel (group size against max threads,
//! LDS against the GPU): the client does that once, when it places the launch.

use serde::{Deserialize, Serialize};

use crate::code_object::{Arg, ArgKind, Hidden};

/// Where the hidden arguments a kernel reads lie in its kernarg segment: byte offsets, or
/// `None` for an argument the kernel does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HiddenLayout {
    /// `hidden_block_count_{x,y,z}`, u32 each.
    pub block_count: [Option<u32>; 3],
    /// `hidden_group_size_{x,y,z}`, u16 each.
    pub group_size: [Option<u32>; 3],
    /// `hidden_remainder_{x,y,z}`, u16 each; rig's grids have none, so they stay 0.
    pub remainder: [Option<u32>; 3],
    /// `hidden_global_offset_{x,y,z}`, u64 each; rig's grids start at 0, so they stay 0.
    pub global_offset: [Option<u32>; 3],
    /// `hidden_grid_dims`, u16.
    pub grid_dims: Option<u32>,
    /// `hidden_dynamic_lds_size`, u32.
    pub dynamic_lds_size: Option<u32>,
}

impl HiddenLayout {
    /// Each hidden argument the kernel reads, with its byte offset, in no promised order.
    pub fn slots(&self) -> impl Iterator<Item = (Hidden, u32)> + '_ {
        use crate::code_object::Axis;
        let axes = [Axis::X, Axis::Y, Axis::Z];
        let per_axis = move |at: &'_ [Option<u32>; 3], kind: fn(Axis) -> Hidden| {
            axes.into_iter()
                .zip(*at)
                .filter_map(move |(a, o)| Some((kind(a), o?)))
        };
        per_axis(&self.block_count, Hidden::BlockCount)
            .chain(per_axis(&self.group_size, Hidden::GroupSize))
            .chain(per_axis(&self.remainder, Hidden::Remainder))
            .chain(per_axis(&self.global_offset, Hidden::GlobalOffset))
            .chain(self.grid_dims.map(|o| (Hidden::GridDims, o)))
            .chain(self.dynamic_lds_size.map(|o| (Hidden::DynamicLdsSize, o)))
    }

    /// The layout of the hidden arguments among `args` that rig supplies; runtime services
    /// ([`Hidden::Other`]) and `hidden_none` are not part of it.
    pub fn from_args(args: &[Arg]) -> Self {
        let mut h = Self::default();
        for a in args {
            let ArgKind::Hidden(kind) = &a.kind else {
                continue;
            };
            let at = Some(a.offset);
            match kind {
                Hidden::BlockCount(x) => h.block_count[x.index()] = at,
                Hidden::GroupSize(x) => h.group_size[x.index()] = at,
                Hidden::Remainder(x) => h.remainder[x.index()] = at,
                Hidden::GlobalOffset(x) => h.global_offset[x.index()] = at,
                Hidden::GridDims => h.grid_dims = at,
                Hidden::DynamicLdsSize => h.dynamic_lds_size = at,
                Hidden::Other(_) => {}
            }
        }
        h
    }
}

/// What [`layout`] needs of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KernargPlan {
    /// Where the kernel's explicit arguments end: the parameters a launch must pass.
    pub explicit_size: u32,
    /// Bytes of the whole kernarg segment (`.kernarg_segment_size`).
    pub size: u32,
    /// The segment's alignment (`.kernarg_segment_align`), a power of two.
    pub align: u32,
    /// The hidden arguments rig supplies.
    pub hidden: HiddenLayout,
}

impl KernargPlan {
    /// Bytes [`layout`] writes: the segment, and at least the explicit arguments.
    #[inline]
    pub fn bytes(&self) -> usize {
        self.size.max(self.explicit_size) as usize
    }
}

/// A parameter that holds a GPU address: `address` is added to the u64 at byte `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ref {
    /// Byte offset of the 8-byte parameter.
    pub offset: u32,
    /// The GPU address to add to it.
    pub address: u64,
}

/// The geometry of a launch: whole groups, starting at work-item 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grid {
    /// Groups along x, y, z.
    pub groups: [u32; 3],
    /// Work-items of a group along x, y, z.
    pub group_size: [u32; 3],
    /// Bytes of LDS the launch adds to the kernel's group segment.
    pub dynamic_lds: u32,
}

impl Grid {
    /// The grid's dimensions, as `hidden_grid_dims` gives them: 3 if the grid has more than
    /// one work-item along z, else 2 if along y, else 1.
    #[inline]
    pub fn dims(&self) -> u16 {
        let spans = |a: usize| self.groups[a] > 1 || self.group_size[a] > 1;
        if spans(2) {
            3
        } else if spans(1) {
            2
        } else {
            1
        }
    }
}

/// Why a launch's arguments could not be laid out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernargError {
    /// The parameters end before the kernel's explicit arguments do.
    #[error(
        "the parameters take {params} bytes but the kernel's explicit arguments end at byte {explicit}"
    )]
    ParamsShort {
        /// Bytes given.
        params: usize,
        /// Bytes the kernel reads.
        explicit: u32,
    },
    /// A ref's 8 bytes do not lie within the explicit arguments.
    #[error(
        "a ref at byte {offset} does not lie within the {explicit} bytes of explicit arguments"
    )]
    RefOutside {
        /// The ref's offset.
        offset: u32,
        /// Bytes of explicit arguments.
        explicit: u32,
    },
    /// The buffer is smaller than the kernarg segment.
    #[error("the buffer holds {have} bytes; the kernel's arguments take {need}")]
    BufferShort {
        /// Bytes given.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// A group is wider than `hidden_group_size` (u16) holds.
    #[error(
        "a group of {size} work-items along one axis does not fit hidden_group_size (at most 65535)"
    )]
    GroupTooLarge {
        /// The group's size along the axis.
        size: u32,
    },
    /// The plan puts a hidden argument past the end of its segment.
    #[error(
        "the kernel's plan puts a hidden argument at byte {offset}, past its {size}-byte segment"
    )]
    HiddenOutside {
        /// The argument's offset.
        offset: u32,
        /// The segment's bytes.
        size: usize,
    },
}

/// Writes `bytes` at `at` if the kernel reads that argument.
#[inline(always)]
fn put<const N: usize>(
    out: &mut [u8],
    at: Option<u32>,
    bytes: [u8; N],
) -> Result<(), KernargError> {
    if let Some(offset) = at {
        let size = out.len();
        let slot = out
            .get_mut(offset as usize..)
            .and_then(|s| s.first_chunk_mut::<N>())
            .ok_or(KernargError::HiddenOutside { offset, size })?;
        *slot = bytes;
    }
    Ok(())
}

/// Lays out a launch's kernarg segment into `out` and returns the bytes written,
/// [`KernargPlan::bytes`].
///
/// Writes the first `plan.explicit_size` bytes of `params` (a longer `params` passes bytes
/// the kernel never reads, which are dropped), adds each ref's address to the u64 at its
/// offset, zeroes the rest of the segment and writes the hidden arguments of `plan` for
/// `grid`.
#[inline]
pub fn layout(
    plan: &KernargPlan,
    params: &[u8],
    refs: &[Ref],
    grid: &Grid,
    out: &mut [u8],
) -> Result<usize, KernargError> {
    let explicit = plan.explicit_size;
    let need = plan.bytes();
    let params = params
        .get(..explicit as usize)
        .ok_or(KernargError::ParamsShort {
            params: params.len(),
            explicit,
        })?;
    let have = out.len();
    let out = out
        .get_mut(..need)
        .ok_or(KernargError::BufferShort { have, need })?;
    let (head, tail) = out.split_at_mut(params.len());
    head.copy_from_slice(params);
    tail.fill(0);
    for r in refs {
        let slot = head
            .get_mut(r.offset as usize..)
            .and_then(|s| s.first_chunk_mut::<8>())
            .ok_or(KernargError::RefOutside {
                offset: r.offset,
                explicit,
            })?;
        *slot = u64::from_le_bytes(*slot)
            .wrapping_add(r.address)
            .to_le_bytes();
    }
    let h = &plan.hidden;
    for axis in 0..3 {
        let size = grid.group_size[axis];
        let size16 = u16::try_from(size).map_err(|_| KernargError::GroupTooLarge { size })?;
        put(out, h.block_count[axis], grid.groups[axis].to_le_bytes())?;
        put(out, h.group_size[axis], size16.to_le_bytes())?;
    }
    put(out, h.grid_dims, grid.dims().to_le_bytes())?;
    put(out, h.dynamic_lds_size, grid.dynamic_lds.to_le_bytes())?;
    Ok(need)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_name_every_hidden_argument_read_and_its_offset() {
        use crate::code_object::Axis;
        let slots: Vec<(Hidden, u32)> = add_plan().hidden.slots().collect();
        assert_eq!(slots.len(), 13);
        assert!(slots.contains(&(Hidden::BlockCount(Axis::Z), 24)));
        assert!(slots.contains(&(Hidden::GlobalOffset(Axis::Y), 64)));
        assert!(slots.contains(&(Hidden::GridDims, 80)));
        assert!(!slots.iter().any(|(h, _)| *h == Hidden::DynamicLdsSize));
        assert_eq!(HiddenLayout::default().slots().count(), 0);
    }

    /// The v5 layout LLVM gives `add(global float *x, global float *y)` (kernels/src/add.cl).
    fn add_plan() -> KernargPlan {
        KernargPlan {
            explicit_size: 16,
            size: 272,
            align: 8,
            hidden: HiddenLayout {
                block_count: [Some(16), Some(20), Some(24)],
                group_size: [Some(28), Some(30), Some(32)],
                remainder: [Some(34), Some(36), Some(38)],
                global_offset: [Some(56), Some(64), Some(72)],
                grid_dims: Some(80),
                dynamic_lds_size: None,
            },
        }
    }

    fn u16_at(b: &[u8], o: usize) -> u16 {
        u16::from_le_bytes([b[o], b[o + 1]])
    }

    fn u32_at(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }

    fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    #[test]
    fn params_refs_then_hidden() {
        let mut params = [0u8; 16];
        params[..8].copy_from_slice(&0x10u64.to_le_bytes());
        params[8..].copy_from_slice(&0x7777u64.to_le_bytes());
        let refs = [Ref {
            offset: 0,
            address: 0x1_0000_0000,
        }];
        let grid = Grid {
            groups: [4, 2, 1],
            group_size: [64, 1, 1],
            dynamic_lds: 512,
        };
        let mut out = [0xaau8; 300];
        let n = layout(&add_plan(), &params, &refs, &grid, &mut out).unwrap();
        assert_eq!(n, 272);
        assert_eq!(u64_at(&out, 0), 0x1_0000_0010);
        assert_eq!(u64_at(&out, 8), 0x7777);
        assert_eq!(
            [u32_at(&out, 16), u32_at(&out, 20), u32_at(&out, 24)],
            [4, 2, 1]
        );
        assert_eq!(
            [u16_at(&out, 28), u16_at(&out, 30), u16_at(&out, 32)],
            [64, 1, 1]
        );
        assert_eq!(u16_at(&out, 80), 2);
        // Remainders, global offsets and every unread byte are zero.
        let written = [16..28, 28..34, 80..82];
        for (i, &b) in out[..272].iter().enumerate() {
            if !written.iter().any(|r| r.contains(&i)) && i >= 16 {
                assert_eq!(b, 0, "byte {i}");
            }
        }
        // Bytes past the segment are the caller's.
        assert!(out[272..].iter().all(|&b| b == 0xaa));
    }

    #[test]
    fn dynamic_lds_and_grid_dims() {
        let mut plan = add_plan();
        plan.hidden.dynamic_lds_size = Some(136);
        let mut out = [0u8; 272];
        let grid = Grid {
            groups: [1, 1, 2],
            group_size: [8, 8, 1],
            dynamic_lds: 4096,
        };
        layout(&plan, &[0; 16], &[], &grid, &mut out).unwrap();
        assert_eq!(u32_at(&out, 136), 4096);
        assert_eq!(u16_at(&out, 80), 3);
        let one = Grid {
            groups: [1, 1, 1],
            group_size: [1, 1, 1],
            dynamic_lds: 0,
        };
        assert_eq!(one.dims(), 1);
    }

    #[test]
    fn errors_name_the_problem() {
        let plan = add_plan();
        let grid = Grid {
            groups: [1; 3],
            group_size: [1; 3],
            dynamic_lds: 0,
        };
        let mut out = [0u8; 272];
        assert_eq!(
            layout(&plan, &[0; 12], &[], &grid, &mut out),
            Err(KernargError::ParamsShort {
                params: 12,
                explicit: 16
            })
        );
        let bad_ref = [Ref {
            offset: 12,
            address: 1,
        }];
        assert_eq!(
            layout(&plan, &[0; 16], &bad_ref, &grid, &mut out),
            Err(KernargError::RefOutside {
                offset: 12,
                explicit: 16
            })
        );
        let far_ref = [Ref {
            offset: u32::MAX,
            address: 1,
        }];
        assert!(layout(&plan, &[0; 16], &far_ref, &grid, &mut out).is_err());
        assert_eq!(
            layout(&plan, &[0; 16], &[], &grid, &mut [0u8; 100]),
            Err(KernargError::BufferShort {
                have: 100,
                need: 272
            })
        );
        let wide = Grid {
            group_size: [70_000, 1, 1],
            ..grid
        };
        assert_eq!(
            layout(&plan, &[0; 16], &[], &wide, &mut out),
            Err(KernargError::GroupTooLarge { size: 70_000 })
        );
        let mut broken = plan;
        broken.hidden.grid_dims = Some(271);
        assert!(matches!(
            layout(&broken, &[0; 16], &[], &grid, &mut out),
            Err(KernargError::HiddenOutside { offset: 271, .. })
        ));
        // Longer parameters are cut at the explicit arguments' end.
        let long = [0xffu8; 40];
        layout(&plan, &long, &[], &grid, &mut out).unwrap();
        assert_eq!(u32_at(&out, 16), 1);
        assert!(out[34..80].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_kernel_without_hidden_arguments_takes_its_parameters_alone() {
        let plan = KernargPlan {
            explicit_size: 12,
            size: 12,
            align: 8,
            hidden: HiddenLayout::default(),
        };
        let grid = Grid {
            groups: [9, 1, 1],
            group_size: [256, 1, 1],
            dynamic_lds: 0,
        };
        let mut out = [0u8; 12];
        let params: Vec<u8> = (1..=12).collect();
        assert_eq!(layout(&plan, &params, &[], &grid, &mut out), Ok(12));
        assert_eq!(&out[..], &params[..]);
    }
}
