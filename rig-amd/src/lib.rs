//! The AMD ABI of rig: everything about AMD GPUs that is a pure function of bytes.
//!
//! This crate does no I/O and holds no state. The simulator (`rig-sim`), the daemon
//! (`rigd`) and the client (`rig-client`) all link it, so that the packets the client
//! encodes are the ones the simulator decodes, and the code objects the daemon loads are
//! parsed the same way `rigctl image` shows them.
//!
//! - [`gpu`]: the table of processors rig drives (GC and SDMA versions, dies, LDS, waves,
//!   ring bounds), GC version to processor to generation, and `is_gpu`; [`hal`] what
//!   differs per generation (scratch granules, the wave64 rule, cache-control bits, the
//!   COMPUTE_* register table), stated once.
//! - [`pm4`], [`sdma`], [`aql`]: encoders and decoders of the packets the compute and copy
//!   queues read; [`regs`] the register offsets those packets name; [`perfcounter`] the SQ
//!   counters of GFX12 and the PM4 that counts a launch with them.
//! - [`code_object`]: AMDGPU ELF code objects (metadata note, kernel descriptors,
//!   relocations) and [`kernarg`], the argument bytes of a launch.
//! - [`copy_plan`]: how a copy or fill on `COPY:0` becomes SDMA packets.
//! - [`dispatch`]: one builder of a launch from a kernel descriptor (user-SGPR order,
//!   COMPUTE_* register writes for PM4, the AQL packet), writing into caller buffers.
//! - For the PCI path, which brings a GPU up with no kernel driver: [`ucode`], the firmware
//!   files' headers; [`discovery`], the IP discovery table and the blocks its versions
//!   choose; [`mmio`], the MMIO registers of those blocks, generated from Linux's headers;
//!   [`psp`], the PSP bootloader's mailbox protocol; [`smu`], the SMU's message mailbox;
//!   [`gmc`], the page-table format the GPU's hubs walk; [`ih`], the interrupt ring's entries.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod aql;
pub mod code_object;
pub mod copy_plan;
pub mod discovery;
pub mod dispatch;
pub mod gmc;
pub mod gpu;
pub mod hal;
pub mod ih;
pub mod kernarg;
pub mod mmio;
pub mod pci_ids;
pub mod perfcounter;
pub mod pm4;
pub mod psp;
pub mod regs;
pub mod sdma;
pub mod smu;
pub mod ucode;

/// Bytes of the page rig maps GPU memory in: the GPUVM's smallest page and the host's, so
/// every allocation, mapping and image segment begins and ends on one.
pub const PAGE_BYTES: u64 = 4096;
