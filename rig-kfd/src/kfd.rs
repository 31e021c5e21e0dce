//! An open `/dev/kfd`: one KFD process, with a method per ioctl the path uses.
//!
//! Every call goes through a [`Kernel`], so the same code drives the machine's KFD and the
//! emulated one. A refusal is a [`KfdError`] naming the ioctl and the errno, so whatever the
//! kernel (or its emulation) answers reaches the program as a message it can act on.

use std::mem::offset_of;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use zerocopy::IntoBytes;

use crate::abi::{self, Command};
use crate::seam::{self, Extra, File, Kernel, Pages};
use crate::sys::Errno;
use crate::version::{self, Features, Version, VersionError};

/// A refusal of the KFD path's calls.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KfdError {
    /// Opening a device file failed.
    #[error("opening {what}: {errno}")]
    Open {
        /// `/dev/kfd` or the render node.
        what: String,
        /// The kernel's answer.
        errno: Errno,
    },
    /// An ioctl failed.
    #[error("KFD ioctl {ioctl} failed: {errno}")]
    Ioctl {
        /// Its name, as the header has it without `AMDKFD_IOC_`.
        ioctl: &'static str,
        /// The kernel's answer.
        errno: Errno,
    },
    /// An mmap failed.
    #[error("mapping {bytes} bytes at offset {offset:#x} of {what}: {errno}")]
    Mmap {
        /// What was mapped.
        what: &'static str,
        /// Where.
        offset: u64,
        /// How much.
        bytes: usize,
        /// The kernel's answer.
        errno: Errno,
    },
    /// The interface version is one rig does not drive.
    #[error(transparent)]
    Version(#[from] VersionError),
    /// An ioctl this KFD's version lacks.
    #[error("KFD {found} lacks {ioctl}, which needs KFD {needs}")]
    Lacks {
        /// The ioctl.
        ioctl: &'static str,
        /// The version found.
        found: Version,
        /// The version that has it.
        needs: Version,
    },
    /// More entries than the limit.
    #[error("{what}: {count} exceeds the limit of {limit}")]
    TooMany {
        /// What was counted.
        what: &'static str,
        /// How many were asked.
        count: usize,
        /// The limit.
        limit: usize,
    },
}

/// The most events one [`Kfd::wait_events`] waits on.
pub const MAX_WAIT_EVENTS: usize = 64;
/// The most GPUs one process's apertures are asked for.
pub const MAX_APERTURES: usize = 64;

/// Host pages for a USERPTR allocation: the caller's mapping at `host` of the memfd `fd`
/// from `offset` on.
#[derive(Debug, Clone, Copy)]
pub struct HostPages<'a> {
    /// The mapping's host address.
    pub host: u64,
    /// The memfd.
    pub fd: BorrowedFd<'a>,
    /// The mapping's offset in it.
    pub offset: u64,
}

/// One open `/dev/kfd`.
#[derive(Debug)]
pub struct Kfd {
    kernel: Arc<dyn Kernel>,
    fd: OwnedFd,
    features: Features,
}

fn ioctl_err<C: Command>(errno: Errno) -> KfdError {
    KfdError::Ioctl {
        ioctl: C::IOCTL.name,
        errno,
    }
}

impl Kfd {
    /// Opens KFD and negotiates its version ([`version::negotiate`]).
    pub fn open(kernel: Arc<dyn Kernel>) -> Result<Kfd, KfdError> {
        let fd = kernel.open(File::Kfd).map_err(|errno| KfdError::Open {
            what: "/dev/kfd".into(),
            errno,
        })?;
        let mut v = abi::GetVersionArgs::default();
        seam::call(&*kernel, fd.as_fd(), &mut v, Extra::None)
            .map_err(ioctl_err::<abi::GetVersionArgs>)?;
        let features = version::negotiate(Version {
            major: v.major_version,
            minor: v.minor_version,
        })?;
        Ok(Kfd {
            kernel,
            fd,
            features,
        })
    }

    /// What this KFD offers.
    pub fn features(&self) -> Features {
        self.features
    }

    /// The kernel it is reached through.
    pub fn kernel(&self) -> &Arc<dyn Kernel> {
        &self.kernel
    }

    /// The KFD fd.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn call<C: Command>(&self, args: &mut C, extra: Extra<'_>) -> Result<(), KfdError> {
        seam::call(&*self.kernel, self.fd.as_fd(), args, extra).map_err(ioctl_err::<C>)
    }

    fn needs(&self, ioctl: abi::Ioctl) -> Result<(), KfdError> {
        if self.features.version < ioctl.since {
            return Err(KfdError::Lacks {
                ioctl: ioctl.name,
                found: self.features.version,
                needs: ioctl.since,
            });
        }
        Ok(())
    }

    /// Opens render node `minor` and binds its GPU VM to this process for `gpu_id`; the fd
    /// must stay open as long as the VM is used.
    pub fn acquire_vm(&self, gpu_id: u32, minor: u32) -> Result<OwnedFd, KfdError> {
        let render = self
            .kernel
            .open(File::Render(minor))
            .map_err(|errno| KfdError::Open {
                what: format!("/dev/dri/renderD{minor}"),
                errno,
            })?;
        let drm_fd = u32::try_from(std::os::fd::AsRawFd::as_raw_fd(&render)).unwrap_or(u32::MAX);
        let mut a = abi::AcquireVmArgs { drm_fd, gpu_id };
        self.call(&mut a, Extra::None)?;
        Ok(render)
    }

    /// RUNTIME_ENABLE with no debugger, where the version has it (a no-op before 1.13).
    pub fn runtime_enable(&self) -> Result<(), KfdError> {
        if !self.features.runtime_enable {
            return Ok(());
        }
        let mut a = abi::RuntimeEnableArgs {
            mode_mask: abi::RUNTIME_ENABLE_MODE_ENABLE_MASK,
            ..Default::default()
        };
        self.call(&mut a, Extra::None)
    }

    /// This process's apertures, one per GPU.
    ///
    /// Asks the count first (`num_of_nodes` 0), then that many: the kernel refuses a
    /// `num_of_nodes` above its GPU count (EINVAL, since its "upper bound check").
    pub fn apertures(&self) -> Result<Vec<abi::ProcessDeviceApertures>, KfdError> {
        let mut count = abi::GetProcessAperturesNewArgs::default();
        self.call(&mut count, Extra::None)?;
        let n = (count.num_of_nodes as usize).min(MAX_APERTURES);
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut entries = vec![abi::ProcessDeviceApertures::default(); n];
        let mut a = abi::GetProcessAperturesNewArgs {
            num_of_nodes: n as u32,
            ..Default::default()
        };
        self.call(
            &mut a,
            Extra::Array {
                field: offset_of!(
                    abi::GetProcessAperturesNewArgs,
                    kfd_process_device_apertures_ptr
                ),
                bytes: entries.as_mut_bytes(),
            },
        )?;
        entries.truncate((a.num_of_nodes as usize).min(MAX_APERTURES));
        Ok(entries)
    }

    /// Allocates `size` bytes of `flags` memory at GPU address `va`; returns (handle,
    /// mmap offset on the render node).
    pub fn alloc(
        &self,
        gpu_id: u32,
        va: u64,
        size: u64,
        flags: u32,
    ) -> Result<(u64, u64), KfdError> {
        let mut a = abi::AllocMemoryOfGpuArgs {
            va_addr: va,
            size,
            gpu_id,
            flags,
            ..Default::default()
        };
        self.call(&mut a, Extra::None)?;
        Ok((a.handle, a.mmap_offset))
    }

    /// Registers host pages as USERPTR memory of `size` bytes at GPU address `va`.
    pub fn alloc_userptr(
        &self,
        gpu_id: u32,
        va: u64,
        size: u64,
        pages: HostPages<'_>,
        flags: u32,
    ) -> Result<u64, KfdError> {
        let mut a = abi::AllocMemoryOfGpuArgs {
            va_addr: va,
            size,
            gpu_id,
            mmap_offset: pages.host,
            flags: flags | abi::ALLOC_MEM_FLAGS_USERPTR,
            ..Default::default()
        };
        self.call(
            &mut a,
            Extra::Userptr {
                fd: pages.fd,
                offset: pages.offset,
            },
        )?;
        Ok(a.handle)
    }

    /// Frees an allocation.
    pub fn free(&self, handle: u64) -> Result<(), KfdError> {
        self.call(&mut abi::FreeMemoryOfGpuArgs { handle }, Extra::None)
    }

    /// Maps an allocation for `gpu_id`.
    pub fn map(&self, handle: u64, gpu_id: u32) -> Result<(), KfdError> {
        let mut ids = [gpu_id];
        let mut a = abi::MapMemoryToGpuArgs {
            handle,
            n_devices: 1,
            ..Default::default()
        };
        self.call(
            &mut a,
            Extra::Array {
                field: offset_of!(abi::MapMemoryToGpuArgs, device_ids_array_ptr),
                bytes: ids.as_mut_bytes(),
            },
        )
    }

    /// Unmaps an allocation from `gpu_id`.
    pub fn unmap(&self, handle: u64, gpu_id: u32) -> Result<(), KfdError> {
        let mut ids = [gpu_id];
        let mut a = abi::UnmapMemoryFromGpuArgs {
            handle,
            n_devices: 1,
            ..Default::default()
        };
        self.call(
            &mut a,
            Extra::Array {
                field: offset_of!(abi::UnmapMemoryFromGpuArgs, device_ids_array_ptr),
                bytes: ids.as_mut_bytes(),
            },
        )
    }

    /// A dma-buf of an allocation (KFD 1.12).
    pub fn export_dmabuf(&self, handle: u64) -> Result<OwnedFd, KfdError> {
        self.needs(abi::EXPORT_DMABUF)?;
        let mut a = abi::ExportDmabufArgs {
            handle,
            flags: libc::O_CLOEXEC as u32 | libc::O_RDWR as u32,
            ..Default::default()
        };
        self.call(&mut a, Extra::None)?;
        Ok(crate::sys::own_received_fd(a.dmabuf_fd as i32))
    }

    /// VRAM this process may still allocate on `gpu_id`.
    pub fn available_memory(&self, gpu_id: u32) -> Result<u64, KfdError> {
        let mut a = abi::GetAvailableMemoryArgs {
            gpu_id,
            ..Default::default()
        };
        self.call(&mut a, Extra::None)?;
        Ok(a.available)
    }

    /// Makes a queue; `args` holds everything "to KFD", and comes back with the id and the
    /// doorbell offset.
    pub fn create_queue(&self, args: &mut abi::CreateQueueArgs) -> Result<(), KfdError> {
        self.call(args, Extra::None)
    }

    /// Destroys a queue.
    pub fn destroy_queue(&self, queue_id: u32) -> Result<(), KfdError> {
        self.call(&mut abi::DestroyQueueArgs { queue_id, pad: 0 }, Extra::None)
    }

    /// Makes an event of `event_type`; `page` is the GTT allocation to use as the signal
    /// page (the first signal event of a process), 0 otherwise.
    pub fn create_event(
        &self,
        event_type: u32,
        auto_reset: bool,
        node_id: u32,
        page: u64,
    ) -> Result<abi::CreateEventArgs, KfdError> {
        let mut a = abi::CreateEventArgs {
            event_page_offset: page,
            event_type,
            auto_reset: u32::from(auto_reset),
            node_id,
            ..Default::default()
        };
        self.call(&mut a, Extra::None)?;
        Ok(a)
    }

    /// Destroys an event.
    pub fn destroy_event(&self, event_id: u32) -> Result<(), KfdError> {
        self.call(&mut abi::DestroyEventArgs { event_id, pad: 0 }, Extra::None)
    }

    /// Signals an event from the host.
    pub fn set_event(&self, event_id: u32) -> Result<(), KfdError> {
        self.call(&mut abi::SetEventArgs { event_id, pad: 0 }, Extra::None)
    }

    /// Waits up to `timeout_ms` for any of `events`; returns the wait result and the
    /// entries as KFD filled them (exception data for exception events).
    pub fn wait_events(
        &self,
        events: &mut [abi::EventData],
        timeout_ms: u32,
    ) -> Result<u32, KfdError> {
        if events.len() > MAX_WAIT_EVENTS {
            return Err(KfdError::TooMany {
                what: "events in one wait",
                count: events.len(),
                limit: MAX_WAIT_EVENTS,
            });
        }
        let mut a = abi::WaitEventsArgs {
            num_events: events.len() as u32,
            timeout: timeout_ms,
            ..Default::default()
        };
        self.call(
            &mut a,
            Extra::Array {
                field: offset_of!(abi::WaitEventsArgs, events_ptr),
                bytes: events.as_mut_bytes(),
            },
        )?;
        Ok(a.wait_result)
    }

    /// GET_CLOCK_COUNTERS for `gpu_id`.
    pub fn clock_counters(&self, gpu_id: u32) -> Result<abi::GetClockCountersArgs, KfdError> {
        let mut a = abi::GetClockCountersArgs {
            gpu_id,
            ..Default::default()
        };
        self.call(&mut a, Extra::None)?;
        Ok(a)
    }

    /// Maps `len` bytes at `offset` of the KFD fd (doorbells, the kernel's event page).
    pub fn mmap(&self, what: &'static str, offset: u64, len: usize) -> Result<Pages, KfdError> {
        self.kernel
            .mmap(self.fd.as_fd(), offset, len)
            .map_err(|errno| KfdError::Mmap {
                what,
                offset,
                bytes: len,
                errno,
            })
    }
}
