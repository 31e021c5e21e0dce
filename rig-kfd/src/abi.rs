//! The KFD ioctls the amdgpu path uses: request numbers, argument structs and flags, as
//! `linux/kfd_ioctl.h` declares them.
//!
//! Every struct is `#[repr(C)]` plain data (zerocopy's `FromBytes + IntoBytes`), so an
//! argument block becomes bytes and back without `unsafe`; the emulated KFD receives exactly
//! these bytes. `tests/header.rs` compiles a C program against the system's header and
//! checks every size, field offset, constant and request number here against it.
//!
//! Layouts are the ones of KFD 1.11 (Linux 6.1), the oldest this crate drives. Later kernels
//! grew some structs at their end (CREATE_QUEUE's `sdma_engine_id` in 1.17); the kernel
//! zero-extends a smaller argument block to its own size, so the 1.11 layout is accepted by
//! every later kernel, and is what the header test pins.

// zerocopy's derives emit helper items without `Debug`; every type this module declares
// derives it (the `plain!` macro does).
#![allow(missing_debug_implementations)]

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::version::Version;

/// The ioctl type byte of KFD (`AMDKFD_IOCTL_BASE`).
pub const IOCTL_BASE: u8 = b'K';

/// Which way an ioctl's argument block travels (the `_IOC_*` direction bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// `_IOW`: user space to the kernel.
    Write,
    /// `_IOR`: the kernel to user space.
    Read,
    /// `_IOWR`: both ways.
    ReadWrite,
}

impl Direction {
    /// The `_IOC_DIR` bits (`_IOC_WRITE` = 1, `_IOC_READ` = 2, as in the generic encoding
    /// x86-64 and arm64 use).
    pub const fn bits(self) -> u32 {
        match self {
            Direction::Write => 1,
            Direction::Read => 2,
            Direction::ReadWrite => 3,
        }
    }
}

/// One KFD ioctl: its name, number, direction, argument size and the KFD version that has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ioctl {
    /// The header's name without `AMDKFD_IOC_`.
    pub name: &'static str,
    /// The command number (`_IOC_NR`).
    pub nr: u8,
    /// Which way the argument block travels.
    pub dir: Direction,
    /// The argument block's bytes (`_IOC_SIZE`).
    pub size: usize,
    /// The first KFD interface version that has it.
    pub since: Version,
}

impl Ioctl {
    /// The request number passed to `ioctl(2)`: `dir << 30 | size << 16 | 'K' << 8 | nr`.
    pub const fn request(&self) -> u64 {
        ((self.dir.bits() as u64) << 30)
            | ((self.size as u64) << 16)
            | ((IOCTL_BASE as u64) << 8)
            | self.nr as u64
    }

    /// The ioctl whose request number is `request`, if it is one the path uses.
    pub fn from_request(request: u64) -> Option<&'static Ioctl> {
        ALL.iter().find(|i| i.request() == request)
    }

    /// The ioctl with command number `nr`, whatever size and direction a caller encoded.
    pub fn from_nr(nr: u8) -> Option<&'static Ioctl> {
        ALL.iter().find(|i| i.nr == nr)
    }
}

/// An argument block of one ioctl: the type names its request.
pub trait Command: FromBytes + IntoBytes + Immutable + Default + Copy {
    /// The ioctl this block is the argument of.
    const IOCTL: Ioctl;
}

macro_rules! commands {
    ($( $(#[$doc:meta])* $konst:ident = $name:literal, $nr:literal, $dir:ident, $ty:ty, ($maj:literal, $min:literal); )*) => {
        $(
            $(#[$doc])*
            pub const $konst: Ioctl = Ioctl {
                name: $name,
                nr: $nr,
                dir: Direction::$dir,
                size: core::mem::size_of::<$ty>(),
                since: Version { major: $maj, minor: $min },
            };
            impl Command for $ty {
                const IOCTL: Ioctl = $konst;
            }
        )*
        /// Every ioctl the path uses.
        pub const ALL: &[Ioctl] = &[$($konst),*];
    };
}

commands! {
    /// `AMDKFD_IOC_GET_VERSION`: the interface version.
    GET_VERSION = "GET_VERSION", 0x01, Read, GetVersionArgs, (1, 0);
    /// `AMDKFD_IOC_CREATE_QUEUE`: a user-mode queue.
    CREATE_QUEUE = "CREATE_QUEUE", 0x02, ReadWrite, CreateQueueArgs, (1, 1);
    /// `AMDKFD_IOC_DESTROY_QUEUE`.
    DESTROY_QUEUE = "DESTROY_QUEUE", 0x03, ReadWrite, DestroyQueueArgs, (1, 1);
    /// `AMDKFD_IOC_GET_CLOCK_COUNTERS`: the GPU's counter beside host clocks.
    GET_CLOCK_COUNTERS = "GET_CLOCK_COUNTERS", 0x05, ReadWrite, GetClockCountersArgs, (1, 1);
    /// `AMDKFD_IOC_CREATE_EVENT`.
    CREATE_EVENT = "CREATE_EVENT", 0x08, ReadWrite, CreateEventArgs, (1, 1);
    /// `AMDKFD_IOC_DESTROY_EVENT`.
    DESTROY_EVENT = "DESTROY_EVENT", 0x09, Write, DestroyEventArgs, (1, 1);
    /// `AMDKFD_IOC_SET_EVENT`: signal an event from the host.
    SET_EVENT = "SET_EVENT", 0x0A, Write, SetEventArgs, (1, 1);
    /// `AMDKFD_IOC_WAIT_EVENTS`.
    WAIT_EVENTS = "WAIT_EVENTS", 0x0C, ReadWrite, WaitEventsArgs, (1, 1);
    /// `AMDKFD_IOC_GET_PROCESS_APERTURES_NEW`: the process's GPU VM range per GPU.
    GET_PROCESS_APERTURES_NEW = "GET_PROCESS_APERTURES_NEW", 0x14, ReadWrite, GetProcessAperturesNewArgs, (1, 1);
    /// `AMDKFD_IOC_ACQUIRE_VM`: take the render node's VM for this KFD process.
    ACQUIRE_VM = "ACQUIRE_VM", 0x15, Write, AcquireVmArgs, (1, 1);
    /// `AMDKFD_IOC_ALLOC_MEMORY_OF_GPU`.
    ALLOC_MEMORY_OF_GPU = "ALLOC_MEMORY_OF_GPU", 0x16, ReadWrite, AllocMemoryOfGpuArgs, (1, 1);
    /// `AMDKFD_IOC_FREE_MEMORY_OF_GPU`.
    FREE_MEMORY_OF_GPU = "FREE_MEMORY_OF_GPU", 0x17, Write, FreeMemoryOfGpuArgs, (1, 1);
    /// `AMDKFD_IOC_MAP_MEMORY_TO_GPU`.
    MAP_MEMORY_TO_GPU = "MAP_MEMORY_TO_GPU", 0x18, ReadWrite, MapMemoryToGpuArgs, (1, 1);
    /// `AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU`.
    UNMAP_MEMORY_FROM_GPU = "UNMAP_MEMORY_FROM_GPU", 0x19, ReadWrite, UnmapMemoryFromGpuArgs, (1, 1);
    /// `AMDKFD_IOC_AVAILABLE_MEMORY`: VRAM this process may still allocate.
    AVAILABLE_MEMORY = "AVAILABLE_MEMORY", 0x23, ReadWrite, GetAvailableMemoryArgs, (1, 9);
    /// `AMDKFD_IOC_EXPORT_DMABUF`: a dma-buf of an allocation.
    EXPORT_DMABUF = "EXPORT_DMABUF", 0x24, ReadWrite, ExportDmabufArgs, (1, 12);
    /// `AMDKFD_IOC_RUNTIME_ENABLE`: tell KFD a runtime handles its exceptions.
    RUNTIME_ENABLE = "RUNTIME_ENABLE", 0x25, ReadWrite, RuntimeEnableArgs, (1, 13);
}

// The derive set every argument block shares.
macro_rules! plain {
    ($(#[$doc:meta])* pub struct $name:ident { $($(#[$fdoc:meta])* pub $field:ident : $ty:ty,)* }) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable)]
        pub struct $name { $($(#[$fdoc])* pub $field: $ty,)* }
    };
}

plain! {
    /// `struct kfd_ioctl_get_version_args`.
    pub struct GetVersionArgs {
        /// From KFD.
        pub major_version: u32,
        /// From KFD.
        pub minor_version: u32,
    }
}

/// `KFD_IOC_QUEUE_TYPE_COMPUTE`: a PM4 compute queue.
pub const QUEUE_TYPE_COMPUTE: u32 = 0;
/// `KFD_IOC_QUEUE_TYPE_SDMA`.
pub const QUEUE_TYPE_SDMA: u32 = 1;
/// `KFD_IOC_QUEUE_TYPE_COMPUTE_AQL`.
pub const QUEUE_TYPE_COMPUTE_AQL: u32 = 2;
/// `KFD_MAX_QUEUE_PERCENTAGE`.
pub const MAX_QUEUE_PERCENTAGE: u32 = 100;
/// `KFD_MAX_QUEUE_PRIORITY`.
pub const MAX_QUEUE_PRIORITY: u32 = 15;
/// `KFD_MIN_QUEUE_RING_SIZE`: the smallest ring KFD takes, in bytes.
pub const MIN_QUEUE_RING_SIZE: u32 = 1024;

plain! {
    /// `struct kfd_ioctl_create_queue_args`.
    pub struct CreateQueueArgs {
        /// To KFD: the ring's GPU address.
        pub ring_base_address: u64,
        /// To KFD: the GPU address of the 64-bit write position.
        pub write_pointer_address: u64,
        /// To KFD: the GPU address of the 64-bit read position.
        pub read_pointer_address: u64,
        /// From KFD: the mmap offset of the queue's doorbell on `/dev/kfd`.
        pub doorbell_offset: u64,
        /// To KFD: the ring's bytes.
        pub ring_size: u32,
        /// To KFD.
        pub gpu_id: u32,
        /// To KFD: a `QUEUE_TYPE_*`.
        pub queue_type: u32,
        /// To KFD: 0..=100.
        pub queue_percentage: u32,
        /// To KFD: 0..=15.
        pub queue_priority: u32,
        /// From KFD.
        pub queue_id: u32,
        /// To KFD: the end-of-pipe buffer's GPU address.
        pub eop_buffer_address: u64,
        /// To KFD.
        pub eop_buffer_size: u64,
        /// To KFD: the context-save area's GPU address.
        pub ctx_save_restore_address: u64,
        /// To KFD.
        pub ctx_save_restore_size: u32,
        /// To KFD: the control stack's bytes, inside the context-save area.
        pub ctl_stack_size: u32,
    }
}

plain! {
    /// `struct kfd_ioctl_destroy_queue_args`.
    pub struct DestroyQueueArgs {
        /// To KFD.
        pub queue_id: u32,
        /// Zero.
        pub pad: u32,
    }
}

plain! {
    /// `struct kfd_ioctl_get_clock_counters_args`.
    pub struct GetClockCountersArgs {
        /// From KFD: the GPU's counter.
        pub gpu_clock_counter: u64,
        /// From KFD: the host's raw monotonic clock, in nanoseconds, read after the GPU's.
        pub cpu_clock_counter: u64,
        /// From KFD: the host's boot-time clock, in nanoseconds.
        pub system_clock_counter: u64,
        /// From KFD: the rate of `system_clock_counter` (1 GHz).
        pub system_clock_freq: u64,
        /// To KFD.
        pub gpu_id: u32,
        /// Zero.
        pub pad: u32,
    }
}

plain! {
    /// `struct kfd_process_device_apertures`: one GPU's apertures in this process.
    pub struct ProcessDeviceApertures {
        /// From KFD.
        pub lds_base: u64,
        /// From KFD.
        pub lds_limit: u64,
        /// From KFD.
        pub scratch_base: u64,
        /// From KFD.
        pub scratch_limit: u64,
        /// From KFD: the first byte of the GPU VM range user space may place memory at.
        pub gpuvm_base: u64,
        /// From KFD: its last byte.
        pub gpuvm_limit: u64,
        /// From KFD.
        pub gpu_id: u32,
        /// Zero.
        pub pad: u32,
    }
}

plain! {
    /// `struct kfd_ioctl_get_process_apertures_new_args`.
    pub struct GetProcessAperturesNewArgs {
        /// To KFD: user memory of `num_of_nodes` [`ProcessDeviceApertures`].
        pub kfd_process_device_apertures_ptr: u64,
        /// To KFD: entries room; from KFD: entries filled (or needed, when 0 was passed).
        pub num_of_nodes: u32,
        /// Zero.
        pub pad: u32,
    }
}

/// `KFD_IOC_EVENT_SIGNAL`.
pub const EVENT_SIGNAL: u32 = 0;
/// `KFD_IOC_EVENT_NODECHANGE`.
pub const EVENT_NODECHANGE: u32 = 1;
/// `KFD_IOC_EVENT_DEVICESTATECHANGE`.
pub const EVENT_DEVICESTATECHANGE: u32 = 2;
/// `KFD_IOC_EVENT_HW_EXCEPTION`: a GPU reset (hang, ECC).
pub const EVENT_HW_EXCEPTION: u32 = 3;
/// `KFD_IOC_EVENT_SYSTEM_EVENT`.
pub const EVENT_SYSTEM_EVENT: u32 = 4;
/// `KFD_IOC_EVENT_DEBUG_EVENT`.
pub const EVENT_DEBUG_EVENT: u32 = 5;
/// `KFD_IOC_EVENT_PROFILE_EVENT`.
pub const EVENT_PROFILE_EVENT: u32 = 6;
/// `KFD_IOC_EVENT_QUEUE_EVENT`.
pub const EVENT_QUEUE_EVENT: u32 = 7;
/// `KFD_IOC_EVENT_MEMORY`: a GPU page fault.
pub const EVENT_MEMORY: u32 = 8;
/// `KFD_IOC_WAIT_RESULT_COMPLETE`.
pub const WAIT_RESULT_COMPLETE: u32 = 0;
/// `KFD_IOC_WAIT_RESULT_TIMEOUT`.
pub const WAIT_RESULT_TIMEOUT: u32 = 1;
/// `KFD_IOC_WAIT_RESULT_FAIL`.
pub const WAIT_RESULT_FAIL: u32 = 2;
/// `KFD_SIGNAL_EVENT_LIMIT`: signal events per process.
pub const SIGNAL_EVENT_LIMIT: u32 = 4096;
/// `KFD_HW_EXCEPTION_WHOLE_GPU_RESET`.
pub const HW_EXCEPTION_WHOLE_GPU_RESET: u32 = 0;
/// `KFD_HW_EXCEPTION_PER_ENGINE_RESET`.
pub const HW_EXCEPTION_PER_ENGINE_RESET: u32 = 1;
/// `KFD_HW_EXCEPTION_GPU_HANG`.
pub const HW_EXCEPTION_GPU_HANG: u32 = 0;
/// `KFD_HW_EXCEPTION_ECC`.
pub const HW_EXCEPTION_ECC: u32 = 1;
/// `KFD_MEM_ERR_NO_RAS`.
pub const MEM_ERR_NO_RAS: u32 = 0;
/// `KFD_MEM_ERR_SRAM_ECC`.
pub const MEM_ERR_SRAM_ECC: u32 = 1;
/// `KFD_MEM_ERR_POISON_CONSUMED`.
pub const MEM_ERR_POISON_CONSUMED: u32 = 2;
/// `KFD_MEM_ERR_GPU_HANG`.
pub const MEM_ERR_GPU_HANG: u32 = 3;

plain! {
    /// `struct kfd_ioctl_create_event_args`.
    pub struct CreateEventArgs {
        /// From KFD: the mmap offset of the event page; to KFD on the first signal event of
        /// a dGPU process, the handle of the GTT memory to use as that page.
        pub event_page_offset: u64,
        /// From KFD: the value a signal's writer stores (signal events only).
        pub event_trigger_data: u32,
        /// To KFD: an `EVENT_*`.
        pub event_type: u32,
        /// To KFD: nonzero to reset when a wait sees it.
        pub auto_reset: u32,
        /// To KFD: the node, for some event types.
        pub node_id: u32,
        /// From KFD.
        pub event_id: u32,
        /// From KFD: the event's 64-bit slot in the event page (signal events).
        pub event_slot_index: u32,
    }
}

plain! {
    /// `struct kfd_ioctl_destroy_event_args`.
    pub struct DestroyEventArgs {
        /// To KFD.
        pub event_id: u32,
        /// Zero.
        pub pad: u32,
    }
}

plain! {
    /// `struct kfd_ioctl_set_event_args`.
    pub struct SetEventArgs {
        /// To KFD.
        pub event_id: u32,
        /// Zero.
        pub pad: u32,
    }
}

plain! {
    /// `struct kfd_memory_exception_failure`.
    pub struct MemoryExceptionFailure {
        /// Page not present, or supervisor privilege.
        pub not_present: u32,
        /// A write to a read-only page.
        pub read_only: u32,
        /// An execute of a no-execute page.
        pub no_execute: u32,
        /// The address is not exact.
        pub imprecise: u32,
    }
}

plain! {
    /// `struct kfd_hsa_memory_exception_data`.
    pub struct MemoryExceptionData {
        /// What the access lacked.
        pub failure: MemoryExceptionFailure,
        /// The faulting GPU address.
        pub va: u64,
        /// The GPU.
        pub gpu_id: u32,
        /// A `MEM_ERR_*`.
        pub error_type: u32,
    }
}

plain! {
    /// `struct kfd_hsa_hw_exception_data`.
    pub struct HwExceptionData {
        /// A `HW_EXCEPTION_*_RESET`.
        pub reset_type: u32,
        /// `HW_EXCEPTION_GPU_HANG` or `HW_EXCEPTION_ECC`.
        pub reset_cause: u32,
        /// Nonzero if VRAM was lost.
        pub memory_lost: u32,
        /// The GPU.
        pub gpu_id: u32,
    }
}

/// Bytes of `struct kfd_event_data`'s leading union (its largest member).
pub const EVENT_DATA_UNION_BYTES: usize = core::mem::size_of::<MemoryExceptionData>();

plain! {
    /// `struct kfd_event_data`: one entry of a wait.
    pub struct EventData {
        /// From KFD: the union of [`MemoryExceptionData`] and [`HwExceptionData`]; read it
        /// with [`EventData::memory_exception`] or [`EventData::hw_exception`].
        pub payload: [u8; EVENT_DATA_UNION_BYTES],
        /// A pointer to an extension structure (unused, zero).
        pub kfd_event_data_ext: u64,
        /// To KFD.
        pub event_id: u32,
        /// Zero.
        pub pad: u32,
    }
}

impl EventData {
    /// An entry that waits for `event_id`.
    pub fn waiting_for(event_id: u32) -> EventData {
        EventData {
            event_id,
            ..EventData::default()
        }
    }

    /// The payload read as a memory exception.
    pub fn memory_exception(&self) -> MemoryExceptionData {
        MemoryExceptionData::read_from_bytes(&self.payload).unwrap_or_default()
    }

    /// The payload read as a hardware exception.
    pub fn hw_exception(&self) -> HwExceptionData {
        HwExceptionData::read_from_prefix(&self.payload)
            .map(|(data, _)| data)
            .unwrap_or_default()
    }

    /// Store a memory exception into the payload.
    pub fn set_memory_exception(&mut self, data: &MemoryExceptionData) {
        self.payload.copy_from_slice(data.as_bytes());
    }

    /// Store a hardware exception into the payload.
    pub fn set_hw_exception(&mut self, data: &HwExceptionData) {
        self.payload = [0; EVENT_DATA_UNION_BYTES];
        self.payload[..core::mem::size_of::<HwExceptionData>()].copy_from_slice(data.as_bytes());
    }
}

plain! {
    /// `struct kfd_ioctl_wait_events_args`.
    pub struct WaitEventsArgs {
        /// To KFD: user memory of `num_events` [`EventData`].
        pub events_ptr: u64,
        /// To KFD.
        pub num_events: u32,
        /// To KFD: nonzero to wait for all rather than any.
        pub wait_for_all: u32,
        /// To KFD: milliseconds.
        pub timeout: u32,
        /// From KFD: a `WAIT_RESULT_*`.
        pub wait_result: u32,
    }
}

plain! {
    /// `struct kfd_ioctl_acquire_vm_args`.
    pub struct AcquireVmArgs {
        /// To KFD: an open fd of the GPU's render node.
        pub drm_fd: u32,
        /// To KFD.
        pub gpu_id: u32,
    }
}

/// `KFD_IOC_ALLOC_MEM_FLAGS_VRAM`: GPU memory.
pub const ALLOC_MEM_FLAGS_VRAM: u32 = 1 << 0;
/// `KFD_IOC_ALLOC_MEM_FLAGS_GTT`: host memory the kernel allocates.
pub const ALLOC_MEM_FLAGS_GTT: u32 = 1 << 1;
/// `KFD_IOC_ALLOC_MEM_FLAGS_USERPTR`: host memory of the process, at `mmap_offset`.
pub const ALLOC_MEM_FLAGS_USERPTR: u32 = 1 << 2;
/// `KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL`: the process's doorbell page.
pub const ALLOC_MEM_FLAGS_DOORBELL: u32 = 1 << 3;
/// Bytes of a process's doorbell slice on one GPU, the range of `/dev/kfd` a queue's
/// `doorbell_offset` lies in (mapped once per GPU; a queue's doorbell is the offset's low
/// bits): `kfd_doorbell_process_slice`, KFD_MAX_NUM_OF_QUEUES_PER_PROCESS (1024) doorbells
/// of 8 bytes, page-rounded.
pub const DOORBELL_SLICE_BYTES: u64 = 8192;

/// `KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP`: the HDP flush page.
pub const ALLOC_MEM_FLAGS_MMIO_REMAP: u32 = 1 << 4;
/// `KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL` (of the header's `enum kfd_mmio_remap`, which the
/// header test's `#ifdef`s cannot see): the byte offset, in the MMIO_REMAP page, of the
/// register whose store flushes the host data path's writes into memory (amdgpu stores 0).
pub const MMIO_REMAP_HDP_MEM_FLUSH_CNTL: usize = 0;
/// `KFD_MMIO_REMAP_HDP_REG_FLUSH_CNTL`: the offset of the register-write flush.
pub const MMIO_REMAP_HDP_REG_FLUSH_CNTL: usize = 4;
/// `KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE`.
pub const ALLOC_MEM_FLAGS_WRITABLE: u32 = 1 << 31;
/// `KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE`.
pub const ALLOC_MEM_FLAGS_EXECUTABLE: u32 = 1 << 30;
/// `KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC`: VRAM the host maps through the BAR.
pub const ALLOC_MEM_FLAGS_PUBLIC: u32 = 1 << 29;
/// `KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE`.
pub const ALLOC_MEM_FLAGS_NO_SUBSTITUTE: u32 = 1 << 28;
/// `KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM`.
pub const ALLOC_MEM_FLAGS_AQL_QUEUE_MEM: u32 = 1 << 27;
/// `KFD_IOC_ALLOC_MEM_FLAGS_COHERENT`: coherent with the host across the bus.
pub const ALLOC_MEM_FLAGS_COHERENT: u32 = 1 << 26;
/// `KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED`.
pub const ALLOC_MEM_FLAGS_UNCACHED: u32 = 1 << 25;

plain! {
    /// `struct kfd_ioctl_alloc_memory_of_gpu_args`.
    pub struct AllocMemoryOfGpuArgs {
        /// To KFD: the GPU address to map it at.
        pub va_addr: u64,
        /// To KFD.
        pub size: u64,
        /// From KFD.
        pub handle: u64,
        /// To KFD: the host address (userptr); from KFD: the mmap offset on the render node.
        pub mmap_offset: u64,
        /// To KFD.
        pub gpu_id: u32,
        /// To KFD: `ALLOC_MEM_FLAGS_*`.
        pub flags: u32,
    }
}

plain! {
    /// `struct kfd_ioctl_free_memory_of_gpu_args`.
    pub struct FreeMemoryOfGpuArgs {
        /// To KFD.
        pub handle: u64,
    }
}

plain! {
    /// `struct kfd_ioctl_map_memory_to_gpu_args`.
    pub struct MapMemoryToGpuArgs {
        /// To KFD.
        pub handle: u64,
        /// To KFD: user memory of `n_devices` u32 gpu_ids.
        pub device_ids_array_ptr: u64,
        /// To KFD.
        pub n_devices: u32,
        /// To and from KFD: the GPUs mapped so far.
        pub n_success: u32,
    }
}

plain! {
    /// `struct kfd_ioctl_unmap_memory_from_gpu_args`.
    pub struct UnmapMemoryFromGpuArgs {
        /// To KFD.
        pub handle: u64,
        /// To KFD: user memory of `n_devices` u32 gpu_ids.
        pub device_ids_array_ptr: u64,
        /// To KFD.
        pub n_devices: u32,
        /// To and from KFD: the GPUs unmapped so far.
        pub n_success: u32,
    }
}

plain! {
    /// `struct kfd_ioctl_get_available_memory_args`.
    pub struct GetAvailableMemoryArgs {
        /// From KFD: bytes.
        pub available: u64,
        /// To KFD.
        pub gpu_id: u32,
        /// Zero.
        pub pad: u32,
    }
}

plain! {
    /// `struct kfd_ioctl_export_dmabuf_args` (KFD 1.12).
    pub struct ExportDmabufArgs {
        /// To KFD.
        pub handle: u64,
        /// To KFD: `O_CLOEXEC` and access flags of the new fd.
        pub flags: u32,
        /// From KFD.
        pub dmabuf_fd: u32,
    }
}

/// `KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK` (KFD 1.13).
pub const RUNTIME_ENABLE_MODE_ENABLE_MASK: u32 = 1;
/// `KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK` (KFD 1.13).
pub const RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK: u32 = 2;

plain! {
    /// `struct kfd_ioctl_runtime_enable_args` (KFD 1.13).
    pub struct RuntimeEnableArgs {
        /// To KFD: the runtime's debugger rendezvous (0: none).
        pub r_debug: u64,
        /// To KFD: `RUNTIME_ENABLE_MODE_*`.
        pub mode_mask: u32,
        /// From KFD.
        pub capabilities_mask: u32,
    }
}

// Sizes the kernel's `_IOC_SIZE` holds in 14 bits.
const _: () = {
    let mut i = 0;
    while i < ALL.len() {
        assert!(ALL[i].size < (1 << 14));
        i += 1;
    }
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_the_generic_encoding() {
        // _IOR('K', 1, 8 bytes) and _IOWR('K', 2, 88 bytes), worked by hand.
        assert_eq!(GET_VERSION.request(), 0x8008_4b01);
        assert_eq!(CREATE_QUEUE.request(), 0xc058_4b02);
        assert_eq!(Ioctl::from_request(0xc058_4b02), Some(&CREATE_QUEUE));
        assert_eq!(Ioctl::from_nr(0x25), Some(&RUNTIME_ENABLE));
    }

    #[test]
    fn event_data_payload_round_trips() {
        let mut e = EventData::waiting_for(7);
        let m = MemoryExceptionData {
            va: 0xdead_b000,
            gpu_id: 3,
            ..Default::default()
        };
        e.set_memory_exception(&m);
        assert_eq!(e.memory_exception(), m);
        let h = HwExceptionData {
            reset_cause: HW_EXCEPTION_ECC,
            gpu_id: 4,
            ..Default::default()
        };
        e.set_hw_exception(&h);
        assert_eq!(e.hw_exception(), h);
        assert_eq!(e.event_id, 7);
    }
}
