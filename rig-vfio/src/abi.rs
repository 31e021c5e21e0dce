//! The VFIO ABI this crate relies on: the ioctl request numbers (`vfio-ioctls` declares them
//! privately; this table is what the header test pins to the system's `linux/vfio.h`), the
//! structs (from `vfio-bindings`, re-exported), and the constants.
//!
//! Every VFIO request is `_IO(VFIO_TYPE, VFIO_BASE + n)`: no direction or size bits, the
//! argument's size travels in its own `argsz` field.

pub use vfio_bindings::bindings::vfio::{
    VFIO_API_VERSION, VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET, VFIO_DMA_MAP_FLAG_READ,
    VFIO_DMA_MAP_FLAG_WRITE, VFIO_GROUP_FLAGS_CONTAINER_SET, VFIO_GROUP_FLAGS_VIABLE,
    VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_BAR5_REGION_INDEX,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_ROM_REGION_INDEX, VFIO_REGION_INFO_FLAG_CAPS,
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
    VFIO_TYPE1v2_IOMMU, vfio_device_info, vfio_group_status, vfio_iommu_type1_dma_map,
    vfio_iommu_type1_dma_unmap, vfio_irq_info, vfio_irq_set, vfio_region_info,
};

/// The ioctl type byte, `';'`.
pub const VFIO_TYPE: u8 = b';';
/// The first request number.
pub const VFIO_BASE: u32 = 100;

/// `_IO(VFIO_TYPE, VFIO_BASE + n)`.
const fn io(n: u32) -> u64 {
    ((VFIO_TYPE as u64) << 8) | (VFIO_BASE + n) as u64
}

/// One ioctl request: its name in `linux/vfio.h` and its number.
#[derive(Debug, Clone, Copy)]
pub struct Ioctl {
    /// The macro's name in the header.
    pub name: &'static str,
    /// The request number.
    pub nr: u64,
}

macro_rules! ioctls {
    ($($name:ident = $n:expr;)*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`.")]
            pub const $name: u64 = io($n);
        )*
        /// Every request this crate issues, itself or through `vfio-ioctls`.
        pub const ALL: &[Ioctl] = &[$(Ioctl { name: stringify!($name), nr: $name }),*];
    };
}

ioctls! {
    VFIO_GET_API_VERSION = 0;
    VFIO_CHECK_EXTENSION = 1;
    VFIO_SET_IOMMU = 2;
    VFIO_GROUP_GET_STATUS = 3;
    VFIO_GROUP_SET_CONTAINER = 4;
    VFIO_GROUP_UNSET_CONTAINER = 5;
    VFIO_GROUP_GET_DEVICE_FD = 6;
    VFIO_DEVICE_GET_INFO = 7;
    VFIO_DEVICE_GET_REGION_INFO = 8;
    VFIO_DEVICE_GET_IRQ_INFO = 9;
    VFIO_DEVICE_SET_IRQS = 10;
    VFIO_DEVICE_RESET = 11;
    VFIO_IOMMU_MAP_DMA = 13;
    VFIO_IOMMU_UNMAP_DMA = 14;
}

/// PCI configuration space: the command register's offset.
pub const PCI_COMMAND: u64 = 0x04;
/// Command register: memory space decoding.
pub const PCI_COMMAND_MEMORY: u16 = 0x2;
/// Command register: bus mastering (the function may start DMA).
pub const PCI_COMMAND_MASTER: u16 = 0x4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers_follow_the_io_encoding() {
        // 0x3b64 is `_IO(';', 100)`: the header test pins the rest to linux/vfio.h.
        assert_eq!(VFIO_GET_API_VERSION, 0x3b64);
        assert_eq!(VFIO_DEVICE_RESET, 0x3b6f);
        assert_eq!(VFIO_IOMMU_MAP_DMA, 0x3b71);
    }
}
