//! A PCI function held through VFIO: config space, BARs, DMA, interrupts, reset, release.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use vfio_ioctls::{VfioContainer, VfioDevice, VfioRegionInfoCap};
use vmm_sys_util::eventfd::{EFD_NONBLOCK, EventFd};

use crate::abi;
use crate::error::{IrqKind, Region, Result, VfioError};
use crate::sys::{self, Mapping};
use crate::sysfs::{Bdf, Routes, Sysfs, Taken, Unbind};

/// The smallest IOMMU page: DMA mappings are aligned to it.
pub const PAGE: u64 = 4096;

/// How a function is taken.
#[derive(Debug, Clone)]
pub struct Options {
    /// The sysfs tree (`/sys`).
    pub sysfs: Sysfs,
    /// The device folder the IOMMU routes are looked for under (`/dev`).
    pub dev: PathBuf,
    /// Which drivers the function may be unbound from.
    pub unbind: Unbind,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            sysfs: Sysfs::default(),
            dev: PathBuf::from("/dev"),
            unbind: Unbind::Any,
        }
    }
}

/// Which reset the kernel used for [`PciFunction::reset`], from the first method of the
/// function's `reset_method` (the kernel tries them in that order and stops at the first
/// that works).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResetKind {
    /// A quirk of this device (`device_specific`).
    DeviceSpecific,
    /// The firmware's `_RST` (`acpi`).
    Acpi,
    /// PCIe function-level reset (`flr`).
    Flr,
    /// Conventional PCI advanced-features FLR (`af_flr`).
    AfFlr,
    /// D3hot and back to D0 (`pm`).
    Pm,
    /// Secondary bus reset of the parent bridge, or the slot's (`bus`).
    Bus,
    /// CXL bus reset (`cxl_bus`).
    CxlBus,
    /// A method this crate does not know, by the kernel's name.
    Other(String),
    /// The kernel does not list its methods (before Linux 5.15).
    Unlisted,
}

impl ResetKind {
    fn from_method(name: &str) -> ResetKind {
        match name {
            "device_specific" => ResetKind::DeviceSpecific,
            "acpi" => ResetKind::Acpi,
            "flr" => ResetKind::Flr,
            "af_flr" => ResetKind::AfFlr,
            "pm" => ResetKind::Pm,
            "bus" => ResetKind::Bus,
            "cxl_bus" => ResetKind::CxlBus,
            other => ResetKind::Other(other.to_owned()),
        }
    }
}

/// Pages of a memfd for DMA: shareable with a client by its descriptor, mapped here, and
/// read or written only by copies (the device writes them behind the compiler's back).
#[derive(Debug)]
pub struct DmaBuffer {
    fd: OwnedFd,
    map: Mapping,
}

impl DmaBuffer {
    /// `len` bytes of zeroed pages (`len` a non-zero multiple of [`PAGE`]).
    pub fn new(len: usize) -> Result<DmaBuffer> {
        if len == 0 || len as u64 % PAGE != 0 {
            return Err(VfioError::DmaMap {
                iova: 0,
                len: len as u64,
                why: format!("a DMA buffer is a whole number of {PAGE}-byte pages"),
            });
        }
        let (fd, map) =
            sys::memfd_pages("rig-vfio-dma", len).map_err(|source| VfioError::Mmap {
                what: format!("{len} bytes of memfd pages"),
                source,
            })?;
        Ok(DmaBuffer { fd, map })
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it is empty (never: buffers are at least a page).
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// The memfd, to share the pages with another process.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn check(&self, offset: usize, len: usize) {
        // PANIC: a buffer access out of bounds is a caller bug, as for a slice.
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= self.len()),
            "DMA buffer access of {len} bytes at {offset:#x} past its {:#x} bytes",
            self.len()
        );
    }

    /// Copies `out.len()` bytes from `offset` into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len());
        for (i, b) in out.iter_mut().enumerate() {
            *b = self.map.read::<u8>(offset + i);
        }
    }

    /// Copies `data` into the buffer at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) {
        self.check(offset, data.len());
        for (i, b) in data.iter().enumerate() {
            self.map.write::<u8>(offset + i, *b);
        }
    }
}

/// A BAR of a held function: mapped when the region allows it, read and written through the
/// device file otherwise. It borrows the function: it cannot outlive the release.
#[derive(Debug)]
pub struct Bar<'f> {
    function: &'f PciFunction,
    number: u8,
    size: u64,
    offset: u64,
    writable: bool,
    map: Option<Mapping>,
}

impl Bar<'_> {
    /// The BAR's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether accesses go through a mapping (true) or the device file (false).
    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }

    fn check(&self, offset: u64, len: usize, write: bool) -> Result<()> {
        let region = Region::Bar(self.number);
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.size)
        {
            return Err(VfioError::OutOfBounds {
                region,
                offset,
                len,
                size: self.size,
            });
        }
        if offset % len as u64 != 0 {
            return Err(VfioError::RegionUnusable {
                region,
                why: "accessed at an offset not aligned to the access size",
            });
        }
        if write && !self.writable {
            return Err(VfioError::RegionUnusable {
                region,
                why: "read-only",
            });
        }
        Ok(())
    }

    fn fd_read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.function
            .pread(Region::Bar(self.number), self.offset + offset, offset, out)
    }

    fn fd_write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.function
            .pwrite(Region::Bar(self.number), self.offset + offset, offset, data)
    }

    /// Reads 32 bits at `offset` (aligned).
    pub fn read32(&self, offset: u64) -> Result<u32> {
        self.check(offset, 4, false)?;
        if let Some(map) = &self.map {
            return Ok(map.read::<u32>(offset as usize));
        }
        let mut b = [0; 4];
        self.fd_read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Writes 32 bits at `offset` (aligned).
    pub fn write32(&self, offset: u64, value: u32) -> Result<()> {
        self.check(offset, 4, true)?;
        if let Some(map) = &self.map {
            map.write::<u32>(offset as usize, value);
            return Ok(());
        }
        self.fd_write(offset, &value.to_le_bytes())
    }

    /// Reads 64 bits at `offset` (aligned).
    pub fn read64(&self, offset: u64) -> Result<u64> {
        self.check(offset, 8, false)?;
        if let Some(map) = &self.map {
            return Ok(map.read::<u64>(offset as usize));
        }
        let mut b = [0; 8];
        self.fd_read(offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes 64 bits at `offset` (aligned).
    pub fn write64(&self, offset: u64, value: u64) -> Result<()> {
        self.check(offset, 8, true)?;
        if let Some(map) = &self.map {
            map.write::<u64>(offset as usize, value);
            return Ok(());
        }
        self.fd_write(offset, &value.to_le_bytes())
    }
}

/// Interrupt vectors delivered to eventfds.
#[derive(Debug)]
struct Irqs {
    kind: IrqKind,
    fds: Vec<EventFd>,
}

/// A PCI function taken from its driver and held through VFIO.
///
/// Release order ([`PciFunction::release`], or drop): interrupts off, DMA mappings removed
/// (the IOMMU stops the device touching the pages before they can be freed), the device file
/// closed, then the group taken out of the container (closing the device first avoids the
/// EBUSY that `vfio-ioctls`' drop notes), then the function given back to its driver.
/// [`Bar`]s borrow the function, so none is mapped by then: vfio-pci's unbind would wait on
/// a live mapping.
pub struct PciFunction {
    bdf: Bdf,
    sysfs: Sysfs,
    taken: Option<Taken>,
    routes: Routes,
    irqs: Option<Irqs>,
    dma: BTreeMap<u64, Arc<DmaBuffer>>,
    device: Option<VfioDevice>,
    container: Arc<VfioContainer>,
    flags: u32,
    config_size: u64,
}

impl std::fmt::Debug for PciFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PciFunction")
            .field("bdf", &self.bdf)
            .field("taken", &self.taken)
            .field("routes", &self.routes)
            .field("irqs", &self.irqs)
            .field("dma", &self.dma.keys().collect::<Vec<_>>())
            .field("open", &self.device.is_some())
            .finish_non_exhaustive()
    }
}

impl PciFunction {
    /// Takes `bdf`: the checks and the bind of [`Sysfs::take`], then the container, the group
    /// and the device through VFIO. If opening fails the function is given back.
    pub fn take(bdf: Bdf, options: &Options) -> Result<PciFunction> {
        let taken = options.sysfs.take(bdf, &options.unbind)?;
        match PciFunction::open(bdf, &taken, options) {
            Ok(mut f) => {
                f.taken = Some(taken);
                Ok(f)
            }
            Err(e) => {
                let _ = options.sysfs.give_back(&taken);
                Err(e)
            }
        }
    }

    fn open(bdf: Bdf, taken: &Taken, options: &Options) -> Result<PciFunction> {
        let routes = options.sysfs.routes(bdf, &options.dev)?;
        let open_err = |source: vfio_ioctls::VfioError| match &source {
            vfio_ioctls::VfioError::OpenGroup(e, _) if e.raw_os_error() == Some(libc::EBUSY) => {
                VfioError::GroupBusy {
                    bdf,
                    group: taken.group,
                }
            }
            _ => VfioError::Open { bdf, source },
        };
        let container = Arc::new(VfioContainer::new(None).map_err(open_err)?);
        let path = options.sysfs.device(bdf)?;
        let device = VfioDevice::new(&path, container.clone(), false).map_err(open_err)?;
        let info = sys::device_info(sys::borrow(&device)).map_err(|source| VfioError::Access {
            region: Region::Config,
            offset: 0,
            source,
        })?;
        let config_size = device.get_region_size(abi::VFIO_PCI_CONFIG_REGION_INDEX);
        Ok(PciFunction {
            bdf,
            sysfs: options.sysfs.clone(),
            taken: None,
            routes,
            irqs: None,
            dma: BTreeMap::new(),
            device: Some(device),
            container,
            flags: info.flags,
            config_size,
        })
    }

    /// The function's address.
    pub fn bdf(&self) -> Bdf {
        self.bdf
    }

    /// Its IOMMU group.
    pub fn group(&self) -> u32 {
        self.taken.as_ref().map_or(0, |t| t.group)
    }

    /// The driver it had before the take (None: unbound).
    pub fn previous_driver(&self) -> Option<&str> {
        self.taken.as_ref().and_then(|t| t.previous.as_deref())
    }

    /// The IOMMU routes the kernel offers for it (this crate uses the container).
    pub fn routes(&self) -> &Routes {
        &self.routes
    }

    fn device(&self) -> &VfioDevice {
        // PANIC: the device is only taken out by teardown, which consumes or drops self.
        self.device.as_ref().expect("device is open until release")
    }

    fn pread(&self, region: Region, at: u64, offset: u64, out: &mut [u8]) -> Result<()> {
        let n = nix::sys::uio::pread(sys::borrow(self.device()), out, at as libc::off_t).map_err(
            |e| VfioError::Access {
                region,
                offset,
                source: e.into(),
            },
        )?;
        if n != out.len() {
            return Err(VfioError::Access {
                region,
                offset,
                source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            });
        }
        Ok(())
    }

    fn pwrite(&self, region: Region, at: u64, offset: u64, data: &[u8]) -> Result<()> {
        let n = nix::sys::uio::pwrite(sys::borrow(self.device()), data, at as libc::off_t)
            .map_err(|e| VfioError::Access {
                region,
                offset,
                source: e.into(),
            })?;
        if n != data.len() {
            return Err(VfioError::Access {
                region,
                offset,
                source: std::io::Error::from(std::io::ErrorKind::WriteZero),
            });
        }
        Ok(())
    }

    /// Config space's size (256 bytes for conventional PCI, 4096 for PCIe).
    pub fn config_size(&self) -> u64 {
        self.config_size
    }

    fn config_check(&self, offset: u64, len: usize) -> Result<u64> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.config_size)
        {
            return Err(VfioError::OutOfBounds {
                region: Region::Config,
                offset,
                len,
                size: self.config_size,
            });
        }
        Ok(self
            .device()
            .get_region_offset(abi::VFIO_PCI_CONFIG_REGION_INDEX)
            + offset)
    }

    /// Reads config space at `offset` into `out`. VFIO virtualizes parts of it (BARs, MSI
    /// capability, the command register's INTx bit): what is read is what the kernel shows.
    pub fn config_read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let at = self.config_check(offset, out.len())?;
        self.pread(Region::Config, at, offset, out)
    }

    /// Writes `data` to config space at `offset` (through VFIO's filter).
    pub fn config_write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let at = self.config_check(offset, data.len())?;
        self.pwrite(Region::Config, at, offset, data)
    }

    /// Reads a 16-bit config register.
    pub fn config_u16(&self, offset: u64) -> Result<u16> {
        let mut b = [0; 2];
        self.config_read(offset, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// Reads a 32-bit config register.
    pub fn config_u32(&self, offset: u64) -> Result<u32> {
        let mut b = [0; 4];
        self.config_read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Turns on memory decoding and bus mastering (the function may then start DMA), and
    /// returns the command register as read back.
    pub fn enable_bus_master(&self) -> Result<u16> {
        let cmd = self.config_u16(abi::PCI_COMMAND)?;
        let want = cmd | abi::PCI_COMMAND_MASTER | abi::PCI_COMMAND_MEMORY;
        self.config_write(abi::PCI_COMMAND, &want.to_le_bytes())?;
        self.config_u16(abi::PCI_COMMAND)
    }

    /// BAR `number` (0..=5): mapped where the region allows mmap of the whole BAR, read and
    /// written through the device file otherwise.
    pub fn bar(&self, number: u8) -> Result<Bar<'_>> {
        let mut bar = self.bar_unmapped(number)?;
        let index = u32::from(number);
        let device = self.device();
        let flags = device.get_region_flags(index);
        // A sparse-mmap capability names the parts that may be mapped (an MSI-X table in the
        // BAR is not one of them): map only when the whole BAR is offered.
        let sparse = device
            .get_region_caps(index)
            .iter()
            .any(|c| matches!(c, VfioRegionInfoCap::SparseMmap(_)));
        if flags & abi::VFIO_REGION_INFO_FLAG_MMAP != 0 && !sparse {
            let len = usize::try_from(bar.size).map_err(|_| VfioError::RegionUnusable {
                region: Region::Bar(number),
                why: "too large to map",
            })?;
            let map = Mapping::new(sys::borrow(device), bar.offset, len, bar.writable).map_err(
                |source| VfioError::Mmap {
                    what: format!("BAR{number} of {}", self.bdf),
                    source,
                },
            )?;
            bar.map = Some(map);
        }
        Ok(bar)
    }

    /// BAR `number`, read and written through the device file only.
    pub fn bar_unmapped(&self, number: u8) -> Result<Bar<'_>> {
        let region = Region::Bar(number);
        if u32::from(number) > abi::VFIO_PCI_BAR5_REGION_INDEX {
            return Err(VfioError::RegionUnusable {
                region,
                why: "not a BAR (0..=5)",
            });
        }
        let index = u32::from(number);
        let device = self.device();
        let size = device.get_region_size(index);
        let flags = device.get_region_flags(index);
        if size == 0 || flags & abi::VFIO_REGION_INFO_FLAG_READ == 0 {
            return Err(VfioError::RegionUnusable {
                region,
                why: "absent on this function",
            });
        }
        Ok(Bar {
            function: self,
            number,
            size,
            offset: device.get_region_offset(index),
            writable: flags & abi::VFIO_REGION_INFO_FLAG_WRITE != 0,
            map: None,
        })
    }

    /// Maps `buffer` at `iova` through the IOMMU, readable and writable by the function.
    /// The function holds the buffer until [`PciFunction::unmap_dma`] or release.
    pub fn map_dma(&mut self, iova: u64, buffer: Arc<DmaBuffer>) -> Result<()> {
        let len = buffer.len() as u64;
        let refuse = |why: String| VfioError::DmaMap { iova, len, why };
        if iova % PAGE != 0 {
            return Err(refuse(format!("the IOVA is not {PAGE}-byte aligned")));
        }
        let end = iova
            .checked_add(len)
            .ok_or_else(|| refuse("the range wraps".into()))?;
        if let Some((at, b)) = self.dma.range(..end).next_back() {
            if at + b.len() as u64 > iova {
                return Err(refuse(format!("it overlaps the mapping at {at:#x}")));
            }
        }
        sys::dma_map(&self.container, iova, &buffer.map)
            .map_err(|e| refuse(format!("the IOMMU driver refused it ({e})")))?;
        self.dma.insert(iova, buffer);
        Ok(())
    }

    /// Removes the mapping at `iova` (made by [`PciFunction::map_dma`]) and returns its
    /// buffer: from here the IOMMU stops the function's accesses to those IOVAs.
    pub fn unmap_dma(&mut self, iova: u64) -> Result<Arc<DmaBuffer>> {
        let buffer = self.dma.get(&iova).ok_or(VfioError::NotMapped(iova))?;
        let len = buffer.len();
        self.container
            .vfio_dma_unmap(iova, len)
            .map_err(|e| VfioError::DmaMap {
                iova,
                len: len as u64,
                why: format!("unmap refused ({e})"),
            })?;
        self.dma.remove(&iova).ok_or(VfioError::NotMapped(iova))
    }

    /// How many vectors the function offers of `kind` (0: none).
    pub fn irq_count(&self, kind: IrqKind) -> u32 {
        self.device()
            .get_irq_info(kind.index())
            .map_or(0, |i| i.count)
    }

    /// Delivers the first `count` vectors of `kind` to eventfds (replacing any earlier set).
    pub fn enable_interrupts(&mut self, kind: IrqKind, count: usize) -> Result<()> {
        let refuse = |why: String| VfioError::Interrupts { kind, why };
        let offered = self.irq_count(kind) as usize;
        if count == 0 || count > offered {
            return Err(refuse(format!(
                "{count} vector(s) asked, the function offers {offered}"
            )));
        }
        self.disable_interrupts()?;
        let fds = (0..count)
            .map(|_| EventFd::new(EFD_NONBLOCK))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| refuse(format!("eventfd: {e}")))?;
        self.device()
            .enable_irq(kind.index(), fds.iter().collect())
            .map_err(|e| refuse(format!("VFIO_DEVICE_SET_IRQS refused ({e})")))?;
        self.irqs = Some(Irqs { kind, fds });
        Ok(())
    }

    /// Stops delivering interrupts.
    pub fn disable_interrupts(&mut self) -> Result<()> {
        if let Some(irqs) = self.irqs.take() {
            self.device()
                .disable_irq(irqs.kind.index())
                .map_err(|e| VfioError::Interrupts {
                    kind: irqs.kind,
                    why: format!("disable refused ({e})"),
                })?;
        }
        Ok(())
    }

    /// The eventfd of `vector`, to poll or to hand to another process.
    pub fn interrupt_fd(&self, vector: usize) -> Option<BorrowedFd<'_>> {
        let fd = self.irqs.as_ref()?.fds.get(vector)?;
        Some(sys::borrow(fd))
    }

    /// Waits up to `timeout` for `vector` to fire; returns how many times it fired since the
    /// last wait.
    pub fn wait_interrupt(&self, vector: usize, timeout: Duration) -> Result<u64> {
        let irqs = self
            .irqs
            .as_ref()
            .ok_or(VfioError::NoInterrupts { bdf: self.bdf })?;
        let fd = irqs.fds.get(vector).ok_or_else(|| VfioError::Interrupts {
            kind: irqs.kind,
            why: format!("no vector {vector}"),
        })?;
        let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let poll_ms = u16::try_from(millis).unwrap_or(u16::MAX);
        let mut pfd = [nix::poll::PollFd::new(
            sys::borrow(fd),
            nix::poll::PollFlags::POLLIN,
        )];
        let ready =
            nix::poll::poll(&mut pfd, nix::poll::PollTimeout::from(poll_ms)).map_err(|e| {
                VfioError::Interrupts {
                    kind: irqs.kind,
                    why: format!("poll: {e}"),
                }
            })?;
        if ready == 0 {
            return Err(VfioError::InterruptTimeout { vector, millis });
        }
        fd.read().map_err(|e| VfioError::Interrupts {
            kind: irqs.kind,
            why: format!("eventfd read: {e}"),
        })
    }

    /// Fires `vector` from the kernel's side, as if the function had raised it
    /// (`VFIO_IRQ_SET_DATA_NONE | ACTION_TRIGGER`): checks the eventfd wiring without the
    /// device's help.
    pub fn trigger_interrupt(&self, vector: usize) -> Result<()> {
        let irqs = self
            .irqs
            .as_ref()
            .ok_or(VfioError::NoInterrupts { bdf: self.bdf })?;
        let v = u32::try_from(vector).unwrap_or(u32::MAX);
        self.device()
            .trigger_irq(irqs.kind.index(), v)
            .map_err(|e| VfioError::Interrupts {
                kind: irqs.kind,
                why: format!("trigger of vector {vector} refused ({e})"),
            })
    }

    /// The config-space offset of the first capability with `id` in the standard list
    /// (0x05 MSI, 0x10 PCI Express, 0x11 MSI-X), as VFIO shows it; None when absent.
    pub fn find_capability(&self, id: u8) -> Result<Option<u64>> {
        const STATUS: u64 = 0x06;
        const STATUS_CAP_LIST: u16 = 0x10;
        const CAP_PTR: u64 = 0x34;
        if self.config_u16(STATUS)? & STATUS_CAP_LIST == 0 {
            return Ok(None);
        }
        let mut b = [0u8; 1];
        self.config_read(CAP_PTR, &mut b)?;
        let mut at = u64::from(b[0] & !3);
        // A list longer than config space can hold is a loop: stop after 48 entries.
        for _ in 0..48 {
            if at < 0x40 {
                return Ok(None);
            }
            let mut cap = [0u8; 2];
            self.config_read(at, &mut cap)?;
            if cap[0] == id {
                return Ok(Some(at));
            }
            at = u64::from(cap[1] & !3);
        }
        Ok(None)
    }

    /// Resets the function through VFIO (`VFIO_DEVICE_RESET`) and says which reset the
    /// kernel used. Refused when VFIO reports none for this function.
    pub fn reset(&self) -> Result<ResetKind> {
        if self.flags & abi::VFIO_DEVICE_FLAGS_RESET == 0 {
            return Err(VfioError::NoReset { bdf: self.bdf });
        }
        let methods = self.sysfs.reset_methods(self.bdf)?;
        sys::device_reset(sys::borrow(self.device())).map_err(|source| VfioError::Reset {
            bdf: self.bdf,
            source,
        })?;
        Ok(methods
            .first()
            .map_or(ResetKind::Unlisted, |m| ResetKind::from_method(m)))
    }

    /// Releases the function in the order the type's docs give and hands it back to the
    /// driver it had.
    pub fn release(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let mut first: Option<VfioError> = None;
        if self.device.is_some() {
            if let Err(e) = self.disable_interrupts() {
                first.get_or_insert(e);
            }
            let iovas: Vec<u64> = self.dma.keys().copied().collect();
            for iova in iovas {
                if let Err(e) = self.unmap_dma(iova) {
                    first.get_or_insert(e);
                }
            }
        }
        // Closing the device file puts the group back (and out of the container).
        drop(self.device.take());
        if let Some(taken) = self.taken.take() {
            if let Err(e) = self.sysfs.give_back(&taken) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for PciFunction {
    fn drop(&mut self) {
        // A release that fails in drop has no one to tell; `release` returns the error.
        let _ = self.teardown();
    }
}

impl AsRawFd for DmaBuffer {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}
