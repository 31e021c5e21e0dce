//! What KFD asks of a compute queue's buffers: the end-of-pipe buffer and the context-save
//! area (where the GPU saves a preempted queue's waves), sized as amdgpu's `kfd_queue.c`
//! sizes them from the node's topology. Kernels from Linux 6.12 refuse a CREATE_QUEUE whose
//! sizes differ from these; earlier ones take what they are given, and ROCm's thunk has
//! always passed these sizes, so the path passes them to every kernel.

use crate::topology::Node;
use rig_amd::PAGE_BYTES as PAGE;

/// Bytes of the end-of-pipe buffer of a compute queue on GFX9 and later.
pub const EOP_BUFFER_BYTES: u64 = 4096;
/// Bytes of the header KFD and the trap handler keep at the start of the control stack.
pub const CONTEXT_SAVE_HEADER_BYTES: u64 = 40;
/// Bytes the debugger keeps per wave after the save area, aligned to 64.
pub const DEBUGGER_BYTES_PER_WAVE: u64 = 32;
const SGPR_BYTES_PER_CU: u64 = 0x4000;
const LDS_BYTES_PER_CU: u64 = 0x10000;
const HWREG_BYTES_PER_CU: u64 = 0x1000;

fn align(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// A queue's context-save sizes for one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextSave {
    /// CREATE_QUEUE's `ctl_stack_size`: the control stack, with its header, page aligned.
    pub ctl_stack_bytes: u64,
    /// CREATE_QUEUE's `ctx_save_restore_size`: control stack plus work-group data, per die.
    pub cwsr_bytes: u64,
    /// The debugger's bytes per die after it.
    pub debug_bytes: u64,
    /// Dies, each with an area of its own.
    pub dies: u64,
}

impl ContextSave {
    /// The sizes for `node`.
    pub fn of(node: &Node) -> ContextSave {
        let gfxv = node.gfx_target_version();
        let dies = u64::from(node.dies());
        let cus = u64::from(node.compute_units()) / dies;
        let waves = if gfxv < 100100 {
            (cus * 40).min(u64::from(node.shader_engines()) * 512)
        } else {
            cus * 32
        };
        let per_wave = if gfxv >= 100100 { 12 } else { 8 };
        let vgpr = match gfxv {
            v if v / 100 * 100 == 90400 || v == 90010 || v == 90008 || v == 90500 => 0x80000,
            110000 | 110001 | 120000 | 120001 => 0x60000,
            _ => 0x40000,
        };
        let lds = if gfxv == 90500 {
            u64::from(node.lds_bytes())
        } else {
            LDS_BYTES_PER_CU
        };
        let wg_data = align(
            cus * (vgpr + SGPR_BYTES_PER_CU + lds + HWREG_BYTES_PER_CU),
            PAGE,
        );
        let ctl = align(CONTEXT_SAVE_HEADER_BYTES + waves * per_wave + 8, PAGE);
        ContextSave {
            ctl_stack_bytes: ctl,
            cwsr_bytes: ctl + wg_data,
            debug_bytes: align(waves * DEBUGGER_BYTES_PER_WAVE, 64),
            dies,
        }
    }

    /// The bytes of the buffer the area lies in: every die's area and debugger bytes.
    pub fn total_bytes(&self) -> u64 {
        align((self.cwsr_bytes + self.debug_bytes) * self.dies, PAGE)
    }
}
