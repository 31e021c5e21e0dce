//! Finding AMD PCI functions, in bus order: what the machine has, whatever drives it.
//!
//! This module only lists what is there. Each path finds the GPUs it reaches itself (its
//! discovery in [`crate::path::PATHS`]); [`crate::gpus`] lists the functions none reached.
//! Nothing here opens a device.

use std::path::Path;

/// An AMD GPU found on the PCI bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciGpu {
    /// The function's bus address, such as `0000:03:00.0`.
    pub bus: String,
    /// Its PCI device id.
    pub device: u16,
    /// Its 24-bit class code.
    pub class: u32,
    /// The kernel driver bound to it (`amdgpu`, `vfio-pci`), if any.
    pub driver: Option<String>,
}

fn read_hex(path: &Path) -> Option<u32> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    u32::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()
}

/// Scans `<sysfs>/bus/pci/devices/*/{vendor,class}` for AMD GPUs ([`rig_amd::gpu::is_gpu`]),
/// in bus order. A missing or unreadable tree yields no GPUs (containers often have none).
pub fn scan_pci(sysfs: &Path) -> Vec<PciGpu> {
    let dir = sysfs.join("bus/pci/devices");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<PciGpu> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let p = e.path();
            let vendor = u16::try_from(read_hex(&p.join("vendor"))?).ok()?;
            let class = read_hex(&p.join("class"))?;
            if !rig_amd::gpu::is_gpu(vendor, class) {
                return None;
            }
            let device = read_hex(&p.join("device"))
                .and_then(|d| u16::try_from(d).ok())
                .unwrap_or(0);
            let driver = std::fs::read_link(p.join("driver"))
                .ok()
                .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()));
            Some(PciGpu {
                bus: e.file_name().to_string_lossy().into_owned(),
                device,
                class,
                driver,
            })
        })
        .collect();
    // Bus addresses are fixed-width hex (domain:bus:device.function), so string order is
    // bus order.
    found.sort_by(|a, b| a.bus.cmp(&b.bus));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(root: &Path, bus: &str, vendor: &str, class: &str) {
        let d = root.join("bus/pci/devices").join(bus);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
        std::fs::write(d.join("class"), format!("{class}\n")).unwrap();
        std::fs::write(d.join("device"), "0x744c\n").unwrap();
    }

    #[test]
    fn finds_amd_gpus_in_bus_order() {
        let t = tempfile::tempdir().unwrap();
        function(t.path(), "0000:c3:00.0", "0x1002", "0x030000");
        function(t.path(), "0000:03:00.0", "0x1002", "0x120000");
        function(t.path(), "0000:03:00.1", "0x1002", "0x040300"); // HDMI audio
        function(t.path(), "0000:01:00.0", "0x10de", "0x030000");
        function(t.path(), "0000:00:1f.0", "garbage", "0x030000");
        let g = scan_pci(t.path());
        let bus: Vec<&str> = g.iter().map(|g| g.bus.as_str()).collect();
        assert_eq!(bus, ["0000:03:00.0", "0000:c3:00.0"]);
        assert_eq!(g[0].device, 0x744c);
        assert_eq!(g[0].driver, None);
    }

    #[test]
    fn no_tree_no_gpus() {
        assert!(scan_pci(Path::new("/nonexistent-sysfs")).is_empty());
    }
}
