//! The PCI layer for real: boots a Linux guest under QEMU with an emulated Intel IOMMU and
//! QEMU's `edu` device behind a PCIe root port, and runs `rig-vfio-edu` inside it (take,
//! config space, BAR0 by mmap and by the device file, liveness, the factorial's MSI on an
//! eventfd, DMA both ways through the IOMMU, DMA to unmapped IOVAs stopped, reset, release,
//! take again). The guest kernel's log must show the IOMMU faults of the refused DMAs. A
//! virtio-rng function bound to the kernel's virtio-pci driver is taken from it and given back
//! to it, with its MSI-X vectors and its I/O-port BAR.
//!
//! Skipped, and says so, when QEMU, a kernel or busybox is missing (`.ci/run` installs them).

use std::time::Duration;

/// Every step the guest program reports; each must say `ok`.
const STEPS: &[&str] = &[
    "find",
    "routes",
    "reset-methods",
    "take",
    "busy",
    "config",
    "bus-master",
    "bar0",
    "liveness",
    "msi-factorial",
    "dma",
    "dma-refused",
    "reset",
    "release",
    "retake",
    "virtio-take",
    "virtio-msix",
    "virtio-io-bar",
    "virtio-release",
];

#[test]
fn edu_through_vfio_in_a_guest() {
    let host = match rig_guest::Host::find_for(&["vfio-pci"]) {
        Ok(h) => h,
        Err(missing) => {
            eprintln!("skipped: the guest test needs a VM: {missing}");
            return;
        }
    };
    let work = tempfile::tempdir().unwrap();
    let outcome = rig_guest::Guest::new(host.clone(), env!("CARGO_BIN_EXE_rig-vfio-edu"))
        .modules(["vfio", "vfio_iommu_type1", "vfio-pci", "virtio_pci"])
        .qemu([
            "-device",
            "intel-iommu,intremap=on,caching-mode=on",
            "-device",
            "pcie-root-port,id=rp1,slot=1",
            "-device",
            "edu,bus=rp1",
            "-device",
            "virtio-rng-pci",
        ])
        .append(["intel_iommu=on"])
        .timeout(Duration::from_secs(120))
        .run(work.path())
        .expect("running the guest");
    let steps = outcome.lines("EDU ");
    eprintln!(
        "guest ({}, kernel {}): {:.1} s, status {:?}{}",
        host.qemu.display(),
        host.kernel_version,
        outcome.wall.as_secs_f64(),
        outcome.status,
        if outcome.timed_out {
            ", killed at its time limit"
        } else {
            ""
        }
    );
    for line in &steps {
        eprintln!("  {line}");
    }
    let dump = || format!("console:\n{}", outcome.console);
    for step in STEPS {
        assert!(
            steps.iter().any(|l| l.starts_with(&format!("ok {step}:"))),
            "step {step} did not pass\n{}",
            dump()
        );
    }
    assert!(outcome.passed(), "the guest program failed\n{}", dump());
    // The refused DMAs reached the IOMMU and were stopped there: the guest kernel logged
    // the faults (DMAR: [DMA Write ...] ... fault addr 0x200000 / 0x300000).
    let dmesg = outcome.dmesg();
    let faults: Vec<&str> = dmesg
        .lines()
        .filter(|l| l.contains("DMAR: [DMA Write"))
        .collect();
    eprintln!("  IOMMU faults logged: {}", faults.len());
    for f in &faults {
        eprintln!("    {}", f.trim());
    }
    assert!(
        !faults.is_empty(),
        "no IOMMU fault in the guest's log\n{dmesg}"
    );
}
