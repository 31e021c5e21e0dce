//! Taking a PCI function from its driver and giving it back, through sysfs.
//!
//! The sysfs root is a parameter ([`Sysfs::new`]), so the checks and the order of writes run
//! in unit tests against a folder tree; the guest test runs them against a real kernel.
//!
//! Taking a function: refuse it if it is the boot display, if its driver's module is held by
//! open files (the driver is in use), if it has no IOMMU group (the IOMMU is off), or if
//! another function of its group is bound to a driver that is neither vfio-pci nor one that
//! leaves DMA to the IOMMU's owner (`pcieport`, `pci-stub`). Otherwise: write `vfio-pci` to
//! its `driver_override`, unbind it from its driver, ask the PCI core to probe it
//! (`drivers_probe`), and check that vfio-pci has it. Giving it back clears the override,
//! unbinds it from vfio-pci and binds the driver it had (or probes it, if it had none).

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::error::{Result, VfioError};

/// A PCI function's address: domain, bus, device, function (`0000:01:00.0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bdf {
    /// PCI domain (segment).
    pub domain: u16,
    /// Bus.
    pub bus: u8,
    /// Device, 0..32.
    pub device: u8,
    /// Function, 0..8.
    pub function: u8,
}

/// An address that does not parse.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0:?} is not a PCI address: expected DDDD:BB:DD.F or BB:DD.F, in hex")]
pub struct BadBdf(pub String);

impl FromStr for Bdf {
    type Err = BadBdf;

    fn from_str(s: &str) -> std::result::Result<Bdf, BadBdf> {
        let bad = || BadBdf(s.to_owned());
        let parts: Vec<&str> = s.split(':').collect();
        let (domain, bus, rest) = match parts.as_slice() {
            [d, b, r] => (u16::from_str_radix(d, 16).map_err(|_| bad())?, *b, *r),
            [b, r] => (0, *b, *r),
            _ => return Err(bad()),
        };
        let (dev, func) = rest.split_once('.').ok_or_else(bad)?;
        let bdf = Bdf {
            domain,
            bus: u8::from_str_radix(bus, 16).map_err(|_| bad())?,
            device: u8::from_str_radix(dev, 16).map_err(|_| bad())?,
            function: u8::from_str_radix(func, 16).map_err(|_| bad())?,
        };
        if bdf.device >= 32 || bdf.function >= 8 || bus.len() != 2 || dev.len() != 2 {
            return Err(bad());
        }
        Ok(bdf)
    }
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// The driver name vfio-pci registers.
pub const VFIO_PCI: &str = "vfio-pci";

/// Drivers that may share an IOMMU group with a function handed to user space: they do no
/// DMA of their own (the kernel marks them `driver_managed_dma`).
const GROUP_SAFE: &[&str] = &[VFIO_PCI, "pcieport", "pci-stub"];

/// How long a bind or unbind may take to show in sysfs.
const SETTLE: Duration = Duration::from_secs(5);

/// Which drivers a take may unbind a function from.
#[derive(Debug, Clone, Default)]
pub enum Unbind {
    /// Any driver (still refused when in use).
    #[default]
    Any,
    /// Only these drivers (e.g. `["amdgpu"]`); others are refused.
    Only(Vec<String>),
}

/// Where the IOMMU can be reached from user space for this function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routes {
    /// The legacy container (`/dev/vfio/vfio`) and the group node `/dev/vfio/<group>`: the
    /// route this crate uses.
    pub container: bool,
    /// `/dev/iommu` exists: the kernel has iommufd (Linux 6.2 and later with `CONFIG_IOMMUFD`).
    pub iommufd: bool,
    /// The function's VFIO character device (`/dev/vfio/devices/vfioN`, from its
    /// `vfio-dev/` folder in sysfs; Linux 6.6 and later with `CONFIG_VFIO_DEVICE_CDEV`).
    pub cdev: Option<String>,
}

/// A function taken for VFIO: what is needed to give it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The function.
    pub bdf: Bdf,
    /// Its IOMMU group.
    pub group: u32,
    /// The driver it had before (None: it was unbound).
    pub previous: Option<String>,
    /// Whether this take bound it (false: it was already on vfio-pci, and stays there).
    pub rebound: bool,
}

/// A sysfs tree: `/sys`, or a folder laid out like it.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Sysfs {
        Sysfs::new("/sys")
    }
}

fn read_trim(path: &Path) -> Result<String> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|source| VfioError::Sysfs {
            path: path.to_owned(),
            source,
        })
}

fn write(path: &Path, value: &str) -> Result<()> {
    fs::write(path, value).map_err(|source| VfioError::Sysfs {
        path: path.to_owned(),
        source,
    })
}

fn link_name(path: &Path) -> Option<String> {
    let target = fs::read_link(path).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

impl Sysfs {
    /// The tree rooted at `root` (`/sys` on a real system).
    pub fn new(root: impl Into<PathBuf>) -> Sysfs {
        Sysfs { root: root.into() }
    }

    /// The root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The function's folder, `bus/pci/devices/<bdf>`; refused if absent.
    pub fn device(&self, bdf: Bdf) -> Result<PathBuf> {
        let path = self.root.join("bus/pci/devices").join(bdf.to_string());
        if path.exists() {
            Ok(path)
        } else {
            Err(VfioError::NoSuchFunction { bdf, path })
        }
    }

    /// The function's driver, by name (None when unbound).
    pub fn driver(&self, bdf: Bdf) -> Result<Option<String>> {
        Ok(link_name(&self.device(bdf)?.join("driver")))
    }

    /// The function's IOMMU group (None when the IOMMU is off).
    pub fn iommu_group(&self, bdf: Bdf) -> Result<Option<u32>> {
        Ok(link_name(&self.device(bdf)?.join("iommu_group")).and_then(|n| n.parse().ok()))
    }

    /// The functions of an IOMMU group.
    pub fn group_members(&self, group: u32) -> Result<Vec<Bdf>> {
        let dir = self
            .root
            .join("kernel/iommu_groups")
            .join(group.to_string())
            .join("devices");
        let entries = fs::read_dir(&dir).map_err(|source| VfioError::Sysfs {
            path: dir.clone(),
            source,
        })?;
        let mut members: Vec<Bdf> = entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        members.sort();
        Ok(members)
    }

    /// The function's vendor and device IDs.
    pub fn ids(&self, bdf: Bdf) -> Result<(u16, u16)> {
        let dir = self.device(bdf)?;
        let id = |name: &str| -> Result<u16> {
            let path = dir.join(name);
            let text = read_trim(&path)?;
            u16::from_str_radix(text.trim_start_matches("0x"), 16).map_err(|_| VfioError::Sysfs {
                path,
                source: io::Error::new(io::ErrorKind::InvalidData, text),
            })
        };
        Ok((id("vendor")?, id("device")?))
    }

    /// The resets the kernel may use for the function, in the order it tries them (the
    /// `reset_method` file, Linux 5.15 and later); empty when it has none or the file is
    /// absent.
    pub fn reset_methods(&self, bdf: Bdf) -> Result<Vec<String>> {
        let path = self.device(bdf)?.join("reset_method");
        Ok(fs::read_to_string(path)
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default())
    }

    /// The IOMMU routes the kernel offers for the function, under `dev` (`/dev`).
    pub fn routes(&self, bdf: Bdf, dev: &Path) -> Result<Routes> {
        let cdev = fs::read_dir(self.device(bdf)?.join("vfio-dev"))
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()));
        Ok(Routes {
            container: dev.join("vfio/vfio").exists(),
            iommufd: dev.join("iommu").exists(),
            cdev,
        })
    }

    /// References to a driver's module held by open files and other users, not by modules
    /// that depend on it: `refcnt` less the entries of `holders/`. Zero for a built-in
    /// driver (no `module` link), which cannot be told.
    fn driver_users(&self, driver: &str) -> u64 {
        let drv = self.root.join("bus/pci/drivers").join(driver);
        let Some(module) = link_name(&drv.join("module")) else {
            return 0;
        };
        let module = self.root.join("module").join(module);
        let refcnt: u64 = read_trim(&module.join("refcnt"))
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let holders = fs::read_dir(module.join("holders")).map_or(0, |d| d.count() as u64);
        refcnt.saturating_sub(holders)
    }

    /// Checks that `bdf` may be taken, without changing anything: the refusals of
    /// [`Sysfs::take`].
    pub fn check(&self, bdf: Bdf, unbind: &Unbind) -> Result<u32> {
        let dir = self.device(bdf)?;
        if read_trim(&dir.join("boot_vga")).is_ok_and(|v| v == "1") {
            return Err(VfioError::BootDisplay { bdf });
        }
        let driver = self.driver(bdf)?;
        if let Some(driver) = driver.as_deref().filter(|d| *d != VFIO_PCI) {
            if let Unbind::Only(allowed) = unbind {
                if !allowed.iter().any(|a| a == driver) {
                    return Err(VfioError::DriverNotAllowed {
                        bdf,
                        driver: driver.to_owned(),
                    });
                }
            }
            let users = self.driver_users(driver);
            if users > 0 {
                return Err(VfioError::InUse {
                    bdf,
                    driver: driver.to_owned(),
                    users,
                });
            }
        }
        let group = self
            .iommu_group(bdf)?
            .ok_or(VfioError::NoIommuGroup { bdf })?;
        for member in self.group_members(group)? {
            if member == bdf {
                continue;
            }
            if let Some(driver) = self.driver(member)? {
                if !GROUP_SAFE.contains(&driver.as_str()) {
                    return Err(VfioError::GroupNotViable {
                        bdf,
                        group,
                        member,
                        driver,
                    });
                }
            }
        }
        Ok(group)
    }

    /// Takes `bdf` for VFIO: the checks of [`Sysfs::check`], then binds it to vfio-pci
    /// through `driver_override`. A function already on vfio-pci is taken as it is.
    pub fn take(&self, bdf: Bdf, unbind: &Unbind) -> Result<Taken> {
        let group = self.check(bdf, unbind)?;
        let previous = self.driver(bdf)?;
        if previous.as_deref() == Some(VFIO_PCI) {
            return Ok(Taken {
                bdf,
                group,
                previous,
                rebound: false,
            });
        }
        if !self.root.join("bus/pci/drivers").join(VFIO_PCI).exists() {
            return Err(VfioError::NoVfioPci);
        }
        let dir = self.device(bdf)?;
        // The override first: between the unbind and the probe nothing else may claim it.
        write(&dir.join("driver_override"), VFIO_PCI)?;
        if previous.is_some() {
            write(&dir.join("driver/unbind"), &bdf.to_string())?;
            self.settle(bdf, None)?;
        }
        write(&self.root.join("bus/pci/drivers_probe"), &bdf.to_string())?;
        if let Err(e) = self.settle(bdf, Some(VFIO_PCI)) {
            // Leave it as found: clear the override, let its driver have it again.
            let _ = write(&dir.join("driver_override"), "\n");
            let _ = write(&self.root.join("bus/pci/drivers_probe"), &bdf.to_string());
            return Err(e);
        }
        Ok(Taken {
            bdf,
            group,
            previous,
            rebound: true,
        })
    }

    /// Gives a taken function back: clears `driver_override`, unbinds it from vfio-pci and
    /// binds the driver it had (probing it when it had none). A function that was on vfio-pci
    /// before the take stays there.
    pub fn give_back(&self, taken: &Taken) -> Result<()> {
        if !taken.rebound {
            return Ok(());
        }
        let bdf = taken.bdf;
        let dir = self.device(bdf)?;
        write(&dir.join("driver_override"), "\n")?;
        if self.driver(bdf)?.is_some() {
            write(&dir.join("driver/unbind"), &bdf.to_string())?;
            self.settle(bdf, None)?;
        }
        match &taken.previous {
            Some(driver) => {
                let bind = self.root.join("bus/pci/drivers").join(driver).join("bind");
                fs::write(&bind, bdf.to_string()).map_err(|source| VfioError::GiveBack {
                    bdf,
                    driver: driver.clone(),
                    source,
                })?;
                self.settle(bdf, Some(driver))
            }
            None => write(&self.root.join("bus/pci/drivers_probe"), &bdf.to_string()),
        }
    }

    /// Waits until the function's driver is `want` (None: unbound).
    fn settle(&self, bdf: Bdf, want: Option<&str>) -> Result<()> {
        let start = Instant::now();
        loop {
            let now = self.driver(bdf)?;
            if now.as_deref() == want {
                return Ok(());
            }
            if start.elapsed() > SETTLE {
                return Err(VfioError::BindFailed {
                    bdf,
                    now: now.unwrap_or_else(|| "none".into()),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    const EDU: &str = "0000:01:00.0";

    /// A sysfs tree with one function `EDU` in group 3, bound to `driver` (if any).
    fn tree(driver: Option<&str>) -> (tempfile::TempDir, Sysfs) {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for d in ["amdgpu", VFIO_PCI, "snd_hda_intel", "pcieport"] {
            fs::create_dir_all(r.join("bus/pci/drivers").join(d)).unwrap();
        }
        fs::write(r.join("bus/pci/drivers_probe"), "").unwrap();
        let dev = r.join("devices/pci0000:00").join(EDU);
        fs::create_dir_all(&dev).unwrap();
        fs::create_dir_all(r.join("bus/pci/devices")).unwrap();
        symlink(&dev, r.join("bus/pci/devices").join(EDU)).unwrap();
        fs::write(dev.join("vendor"), "0x1234\n").unwrap();
        fs::write(dev.join("device"), "0x11e8\n").unwrap();
        fs::write(dev.join("driver_override"), "(null)\n").unwrap();
        fs::write(dev.join("reset_method"), "flr bus\n").unwrap();
        fs::create_dir_all(r.join("kernel/iommu_groups/3/devices")).unwrap();
        symlink(r.join("kernel/iommu_groups/3"), dev.join("iommu_group")).unwrap();
        symlink(&dev, r.join("kernel/iommu_groups/3/devices").join(EDU)).unwrap();
        if let Some(d) = driver {
            bind(r, EDU, Some(d));
        }
        let s = Sysfs::new(r);
        (t, s)
    }

    fn bind(root: &Path, bdf: &str, driver: Option<&str>) {
        let link = root.join("bus/pci/devices").join(bdf).join("driver");
        let _ = fs::remove_file(&link);
        if let Some(d) = driver {
            symlink(root.join("bus/pci/drivers").join(d), &link).unwrap();
            fs::write(root.join("bus/pci/drivers").join(d).join("unbind"), "").unwrap();
        }
    }

    /// Plays the kernel: an unbind write drops the `driver` link, a probe binds the driver
    /// `driver_override` names, a `bind` write binds that driver.
    fn kernel(root: PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<String>> {
        std::thread::spawn(move || {
            let mut log = Vec::new();
            let dev = root.join("bus/pci/devices").join(EDU);
            while !stop.load(Ordering::Relaxed) {
                for d in ["amdgpu", VFIO_PCI, "snd_hda_intel"] {
                    let drv = root.join("bus/pci/drivers").join(d);
                    for (file, bound) in [("unbind", None), ("bind", Some(d))] {
                        let f = drv.join(file);
                        if fs::read_to_string(&f).is_ok_and(|s| s == EDU) {
                            fs::write(&f, "").unwrap();
                            log.push(format!("{d}/{file}"));
                            bind(&root, EDU, bound);
                        }
                    }
                }
                let probe = root.join("bus/pci/drivers_probe");
                if fs::read_to_string(&probe).is_ok_and(|s| s == EDU) {
                    fs::write(&probe, "").unwrap();
                    let over = fs::read_to_string(dev.join("driver_override")).unwrap();
                    log.push(format!("probe override={}", over.trim()));
                    if over.trim() == VFIO_PCI {
                        bind(&root, EDU, Some(VFIO_PCI));
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            log
        })
    }

    #[test]
    fn parses_and_prints_addresses() {
        let b: Bdf = "0000:01:00.0".parse().unwrap();
        assert_eq!(b.to_string(), EDU);
        assert_eq!(
            "03:1f.7".parse::<Bdf>().unwrap().to_string(),
            "0000:03:1f.7"
        );
        assert!(
            "10000:00:00.0".parse::<Bdf>().is_err(),
            "domain over 16 bits"
        );
        for bad in ["", "0000:01:00", "01:20.0", "01:00.8", "zz:00.0", "1:2.3"] {
            assert!(bad.parse::<Bdf>().is_err(), "{bad}");
        }
    }

    #[test]
    fn takes_from_a_driver_and_gives_back_to_it() {
        let (t, s) = tree(Some("snd_hda_intel"));
        let stop = Arc::new(AtomicBool::new(false));
        let k = kernel(t.path().to_owned(), stop.clone());
        let bdf = EDU.parse().unwrap();
        let taken = s.take(bdf, &Unbind::Any).unwrap();
        assert_eq!(taken.group, 3);
        assert_eq!(taken.previous.as_deref(), Some("snd_hda_intel"));
        assert_eq!(s.driver(bdf).unwrap().as_deref(), Some(VFIO_PCI));
        s.give_back(&taken).unwrap();
        assert_eq!(s.driver(bdf).unwrap().as_deref(), Some("snd_hda_intel"));
        stop.store(true, Ordering::Relaxed);
        let log = k.join().unwrap();
        assert_eq!(
            log,
            [
                "snd_hda_intel/unbind",
                "probe override=vfio-pci",
                "vfio-pci/unbind",
                "snd_hda_intel/bind"
            ]
        );
        let over = fs::read_to_string(s.device(bdf).unwrap().join("driver_override")).unwrap();
        assert_eq!(over.trim(), "", "override cleared");
    }

    #[test]
    fn takes_an_unbound_function_and_probes_it_on_release() {
        let (t, s) = tree(None);
        let stop = Arc::new(AtomicBool::new(false));
        let k = kernel(t.path().to_owned(), stop.clone());
        let bdf = EDU.parse().unwrap();
        let taken = s.take(bdf, &Unbind::Any).unwrap();
        assert_eq!(taken.previous, None);
        s.give_back(&taken).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        stop.store(true, Ordering::Relaxed);
        let log = k.join().unwrap();
        assert_eq!(
            log,
            [
                "probe override=vfio-pci",
                "vfio-pci/unbind",
                "probe override="
            ]
        );
        assert_eq!(s.driver(bdf).unwrap(), None);
    }

    #[test]
    fn a_function_already_on_vfio_pci_is_taken_and_left_there() {
        let (_t, s) = tree(Some(VFIO_PCI));
        let bdf = EDU.parse().unwrap();
        let taken = s.take(bdf, &Unbind::Any).unwrap();
        assert!(!taken.rebound);
        s.give_back(&taken).unwrap();
        assert_eq!(s.driver(bdf).unwrap().as_deref(), Some(VFIO_PCI));
    }

    #[test]
    fn refuses_a_driver_in_use() {
        let (t, s) = tree(Some("amdgpu"));
        let r = t.path();
        fs::create_dir_all(r.join("module/amdgpu/holders/amdxcp")).unwrap();
        fs::write(r.join("module/amdgpu/refcnt"), "3\n").unwrap();
        symlink(
            r.join("module/amdgpu"),
            r.join("bus/pci/drivers/amdgpu/module"),
        )
        .unwrap();
        let err = s.take(EDU.parse().unwrap(), &Unbind::Any).unwrap_err();
        assert!(
            matches!(&err, VfioError::InUse { driver, users: 2, .. } if driver == "amdgpu"),
            "{err}"
        );
        assert!(err.to_string().contains("in use"));
        // Nothing was written.
        let over = fs::read_to_string(
            s.device(EDU.parse().unwrap())
                .unwrap()
                .join("driver_override"),
        );
        assert_eq!(over.unwrap().trim(), "(null)");
        // With no open references (refcnt = holders) it would be taken.
        fs::write(r.join("module/amdgpu/refcnt"), "1\n").unwrap();
        assert_eq!(s.check(EDU.parse().unwrap(), &Unbind::Any).unwrap(), 3);
    }

    #[test]
    fn refuses_a_driver_not_allowed_and_the_boot_display() {
        let (_t, s) = tree(Some("snd_hda_intel"));
        let bdf = EDU.parse().unwrap();
        let only = Unbind::Only(vec!["amdgpu".into()]);
        assert!(matches!(
            s.check(bdf, &only),
            Err(VfioError::DriverNotAllowed { .. })
        ));
        fs::write(s.device(bdf).unwrap().join("boot_vga"), "1\n").unwrap();
        assert!(matches!(
            s.check(bdf, &Unbind::Any),
            Err(VfioError::BootDisplay { .. })
        ));
    }

    #[test]
    fn refuses_without_an_iommu_group() {
        let (_t, s) = tree(None);
        let bdf = EDU.parse().unwrap();
        fs::remove_file(s.device(bdf).unwrap().join("iommu_group")).unwrap();
        let err = s.take(bdf, &Unbind::Any).unwrap_err();
        assert!(matches!(err, VfioError::NoIommuGroup { .. }));
        assert!(err.to_string().contains("intel_iommu=on"));
    }

    #[test]
    fn refuses_a_group_shared_with_a_kernel_driver() {
        let (t, s) = tree(None);
        let r = t.path();
        let other = "0000:01:00.1";
        let dev = r.join("devices/pci0000:00").join(other);
        fs::create_dir_all(&dev).unwrap();
        symlink(&dev, r.join("bus/pci/devices").join(other)).unwrap();
        symlink(&dev, r.join("kernel/iommu_groups/3/devices").join(other)).unwrap();
        bind(r, other, Some("snd_hda_intel"));
        let bdf = EDU.parse().unwrap();
        let err = s.take(bdf, &Unbind::Any).unwrap_err();
        match &err {
            VfioError::GroupNotViable {
                group: 3,
                member,
                driver,
                ..
            } => {
                assert_eq!(member.to_string(), other);
                assert_eq!(driver, "snd_hda_intel");
            }
            e => panic!("{e}"),
        }
        // A bridge's pcieport, or vfio-pci itself, leaves the group viable.
        bind(r, other, Some("pcieport"));
        assert_eq!(s.check(bdf, &Unbind::Any).unwrap(), 3);
    }

    #[test]
    fn refuses_a_missing_function_and_a_missing_vfio_pci() {
        let (t, s) = tree(None);
        let err = s
            .take("0000:09:00.0".parse().unwrap(), &Unbind::Any)
            .unwrap_err();
        assert!(matches!(err, VfioError::NoSuchFunction { .. }));
        fs::remove_dir(t.path().join("bus/pci/drivers").join(VFIO_PCI)).unwrap();
        let err = s.take(EDU.parse().unwrap(), &Unbind::Any).unwrap_err();
        assert!(matches!(err, VfioError::NoVfioPci), "{err}");
    }

    #[test]
    fn reads_ids_resets_and_routes() {
        let (t, s) = tree(None);
        let bdf = EDU.parse().unwrap();
        assert_eq!(s.ids(bdf).unwrap(), (0x1234, 0x11e8));
        assert_eq!(s.reset_methods(bdf).unwrap(), ["flr", "bus"]);
        let dev = t.path().join("dev");
        fs::create_dir_all(dev.join("vfio")).unwrap();
        fs::write(dev.join("vfio/vfio"), "").unwrap();
        let routes = s.routes(bdf, &dev).unwrap();
        assert_eq!(
            routes,
            Routes {
                container: true,
                iommufd: false,
                cdev: None
            }
        );
        fs::write(dev.join("iommu"), "").unwrap();
        fs::create_dir_all(s.device(bdf).unwrap().join("vfio-dev/vfio0")).unwrap();
        let routes = s.routes(bdf, &dev).unwrap();
        assert!(routes.iommufd);
        assert_eq!(routes.cdev.as_deref(), Some("vfio0"));
    }
}
