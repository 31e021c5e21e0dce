//! rigd's discovery through the vfio path, over a sysfs tree laid out as the kernel lays
//! out `/sys` (function folders under `devices/`, linked from `bus/pci/devices`, with
//! `driver` and `iommu_group` links): the AMD GPU functions bound to vfio-pci, and those
//! `[vfio] allow` names, are listed on the vfio path with their IOMMU groups and why rigd
//! does not serve them (until the PCI bring-up exists, never served, never opened);
//! other vendors' functions and AMD's non-GPU functions are skipped; AMD GPUs neither on
//! vfio-pci nor allowed keep the reason of their driver's path.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use rig_proto::messages::PathKind;
use rigd::config::Config;

/// A PCI function in the tree rooted at `root`.
struct Function<'a> {
    bus: &'a str,
    vendor: u16,
    device: u16,
    revision: u8,
    class: u32,
    driver: Option<&'a str>,
    group: Option<u32>,
}

impl Function<'_> {
    /// An AMD display function `1002:device` bound to vfio-pci in `group`.
    fn amd(bus: &str, device: u16, group: Option<u32>) -> Function<'_> {
        Function {
            bus,
            vendor: 0x1002,
            device,
            revision: 0xc8,
            class: 0x030000,
            driver: Some("vfio-pci"),
            group,
        }
    }

    fn write(&self, root: &Path) {
        let dir = root.join("devices/pci0000:00").join(self.bus);
        fs::create_dir_all(&dir).unwrap();
        fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
        symlink(&dir, root.join("bus/pci/devices").join(self.bus)).unwrap();
        for (name, value) in [
            ("vendor", format!("{:#06x}", self.vendor)),
            ("device", format!("{:#06x}", self.device)),
            ("revision", format!("{:#04x}", self.revision)),
            ("class", format!("{:#08x}", self.class)),
        ] {
            fs::write(dir.join(name), format!("{value}\n")).unwrap();
        }
        if let Some(d) = self.driver {
            let drv = root.join("bus/pci/drivers").join(d);
            fs::create_dir_all(&drv).unwrap();
            symlink(&drv, dir.join("driver")).unwrap();
        }
        if let Some(g) = self.group {
            let group = root.join("kernel/iommu_groups").join(g.to_string());
            fs::create_dir_all(group.join("devices")).unwrap();
            symlink(&group, dir.join("iommu_group")).unwrap();
            symlink(&dir, group.join("devices").join(self.bus)).unwrap();
        }
    }
}

/// `toml` parsed, with no KFD (the default `/dev/kfd` would be the machine's, but its
/// topology is looked for under the test's tree, which has none).
fn config(toml: &str) -> Config {
    Config::parse(toml, Path::new("test.toml")).unwrap()
}

/// What rigd lists: (bus, arch, path, why not served).
fn listed(c: &Config, sysfs: &Path) -> Vec<(String, String, PathKind, String)> {
    let gpus = rigd::gpus::find(c, sysfs).unwrap();
    for g in &gpus {
        if g.info.path == PathKind::Vfio {
            assert!(g.backend.is_none(), "a vfio function is never served yet");
        }
    }
    gpus.into_iter()
        .map(|g| {
            (
                g.info.bus.unwrap_or_default(),
                g.info.arch,
                g.info.path,
                g.info.unavailable.unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn vfio_functions_are_listed_with_their_groups_and_why_they_are_not_served() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    // A Navi 31 on vfio-pci that [vfio] names, its HDMI audio function in the same group,
    // also on vfio-pci (so the group is viable; the audio function is no GPU).
    Function::amd("0000:03:00.0", 0x744c, Some(14)).write(r);
    Function {
        class: 0x040300,
        device: 0xab30,
        ..Function::amd("0000:03:00.1", 0x744c, Some(14))
    }
    .write(r);
    // On vfio-pci, not named by [vfio].
    Function::amd("0000:04:00.0", 0x744c, Some(15)).write(r);
    // An MI300X (a processing accelerator) named by its ids, with the IOMMU off.
    Function {
        class: 0x120000,
        ..Function::amd("0000:05:00.0", 0x74a1, None)
    }
    .write(r);
    // Named by [vfio] but bound to no driver.
    Function {
        driver: None,
        ..Function::amd("0000:06:00.0", 0x744c, Some(16))
    }
    .write(r);
    // Named by [vfio] but bound to amdgpu, which KFD does not list here.
    Function {
        driver: Some("amdgpu"),
        ..Function::amd("0000:07:00.0", 0x744c, Some(17))
    }
    .write(r);
    // On amdgpu and not named: not the vfio path's.
    Function {
        driver: Some("amdgpu"),
        ..Function::amd("0000:08:00.0", 0x744c, Some(18))
    }
    .write(r);
    // Named, on vfio-pci, but its group holds a function a kernel driver has.
    Function::amd("0000:09:00.0", 0x744c, Some(19)).write(r);
    Function {
        class: 0x040300,
        device: 0xab30,
        driver: Some("snd_hda_intel"),
        ..Function::amd("0000:09:00.1", 0x744c, Some(19))
    }
    .write(r);
    // An MI210 (gfx90a, not a GPU rig drives) on vfio-pci.
    Function::amd("0000:0a:00.0", 0x740f, Some(20)).write(r);
    // Another vendor's GPU on vfio-pci: skipped.
    Function {
        vendor: 0x10de,
        device: 0x2330,
        ..Function::amd("0000:0b:00.0", 0x2330, Some(21))
    }
    .write(r);
    let c = config(
        "[vfio]\nallow = [\"0000:03:00.0\", \"1002:74a1\", \"06:00.0\", \"0000:07:00.0\", \"0000:09:00.0\"]\n",
    );
    let got = listed(&c, r);
    let buses: Vec<(&str, PathKind)> = got.iter().map(|g| (g.0.as_str(), g.2)).collect();
    assert_eq!(
        buses,
        [
            ("0000:03:00.0", PathKind::Vfio),
            ("0000:04:00.0", PathKind::Vfio),
            ("0000:05:00.0", PathKind::Vfio),
            ("0000:06:00.0", PathKind::Vfio),
            ("0000:07:00.0", PathKind::Vfio),
            ("0000:09:00.0", PathKind::Vfio),
            ("0000:0a:00.0", PathKind::Vfio),
            // Not the vfio path's: the AMD functions no path listed, with their driver's
            // path; and no simulated GPU, since AMD GPUs were found.
            ("0000:08:00.0", PathKind::Kfd),
        ],
        "{got:#?}"
    );
    let why = |bus: &str| -> &str { &got.iter().find(|g| g.0 == bus).unwrap().3 };
    assert_eq!(got[0].1, "gfx1100");
    assert_eq!(
        why("0000:03:00.0"),
        "the PCI bring-up of gfx1100 is not implemented yet (IOMMU group 14)"
    );
    assert_eq!(
        why("0000:04:00.0"),
        "it is bound to vfio-pci, but `[vfio] allow` names neither 0000:04:00.0 nor \
         1002:744c, so rigd leaves it alone (IOMMU group 15)"
    );
    assert_eq!(got[2].1, "gfx942");
    assert!(
        why("0000:05:00.0").starts_with("0000:05:00.0 has no IOMMU group: turn the IOMMU on"),
        "{}",
        why("0000:05:00.0")
    );
    assert!(
        why("0000:06:00.0").starts_with(
            "`[vfio] allow` names it, but no driver is bound to it, not even vfio-pci: bind it \
             to vfio-pci"
        ),
        "{}",
        why("0000:06:00.0")
    );
    assert!(
        why("0000:07:00.0")
            .starts_with("`[vfio] allow` names it, but it is bound to amdgpu, not to vfio-pci"),
        "{}",
        why("0000:07:00.0")
    );
    assert_eq!(
        why("0000:09:00.0"),
        "IOMMU group 19 of 0000:09:00.0 is not viable: 0000:09:00.1 in the same group is \
         bound to snd_hda_intel; bind every function of the group to vfio-pci, or unbind it"
    );
    assert_eq!(got[6].1, "gfx90a");
    assert_eq!(
        why("0000:0a:00.0"),
        "gfx90a is not in rig's GPU table (rig-amd's gpu::GPUS) (IOMMU group 20)"
    );
    assert!(why("0000:08:00.0").contains("KFD does not list it"));
}

#[test]
fn with_no_vfio_section_vfio_functions_are_listed_as_not_allowed() {
    let t = tempfile::tempdir().unwrap();
    Function::amd("0000:03:00.0", 0x744c, Some(14)).write(t.path());
    let got = listed(&config(""), t.path());
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].2, PathKind::Vfio);
    assert!(
        got[0].3.contains("`[vfio] allow` names neither"),
        "{got:#?}"
    );
}

#[test]
fn a_function_kfd_lists_stays_kfds_even_when_vfio_allows_it() {
    let t = tempfile::tempdir().unwrap();
    let topo = t.path().join("topology");
    let kernel = rig_kfd_emu::kernel::Kernel::new(rig_kfd_emu::kernel::Config::default()).unwrap();
    rig_kfd_emu::tree::write_tree(&topo, &kernel.facts()).unwrap();
    let mut c = config("");
    c.kfd = rigd::config::KfdConfig {
        emulated: Some(t.path().join("kfd.sock")),
        topology: Some(topo),
        worker: Some(env!("CARGO_BIN_EXE_rig-worker").into()),
        serve: false,
        ..rigd::config::KfdConfig::default()
    };
    let sysfs = t.path().join("sys");
    let first = listed(&c, &sysfs);
    let bus = first[0].0.clone();
    // The same function in sysfs, on vfio-pci (as if amdgpu let go of it) and named by
    // [vfio]: KFD, listed first, keeps it.
    Function::amd(&bus, 0x744c, Some(14)).write(&sysfs);
    c.vfio = config(&format!("[vfio]\nallow = [\"{bus}\"]\n")).vfio;
    let got = listed(&c, &sysfs);
    assert_eq!(got.len(), first.len(), "{got:#?}");
    assert_eq!(got[0].0, bus);
    assert_eq!(got[0].2, PathKind::Kfd);
    assert!(got.iter().all(|g| g.2 == PathKind::Kfd), "{got:#?}");
}

#[test]
fn an_amd_gpu_on_a_driver_no_path_uses_is_listed_with_a_plain_reason() {
    let t = tempfile::tempdir().unwrap();
    Function {
        driver: Some("radeon"),
        ..Function::amd("0000:03:00.0", 0x744c, None)
    }
    .write(t.path());
    let got = listed(&config(""), t.path());
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].1, "gfx1100");
    assert_eq!(
        got[0].3,
        "it is bound to radeon, and no path of rigd reaches a GPU through that driver \
         (rigd's paths reach GPUs through amdgpu (Kfd), vfio-pci (Vfio))"
    );
}
