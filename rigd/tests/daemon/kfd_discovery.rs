//! rigd's discovery through KFD: the GPUs of an emulated KFD's topology, and of a machine's
//! KFD, are listed under their `AMD:N` names with what their nodes say and why rigd does
//! not serve them; PCI functions KFD lists are not listed twice. rigd serves what it finds:
//! KFD's GPUs through the kfd path (unless `[kfd] serve = false`), the simulated GPU where
//! no AMD GPU is found or where `[[sim]]` asks for it.

use std::path::Path;

use rig_proto::messages::PathKind;
use rigd::config::{Config, KfdConfig};

fn config(kfd: KfdConfig) -> Config {
    let mut c = Config::parse("", Path::new("test.toml")).unwrap();
    c.kfd = kfd;
    c
}

#[test]
fn an_emulated_kfds_gpus_are_listed_from_its_topology() {
    let t = tempfile::tempdir().unwrap();
    let topo = t.path().join("topology");
    let kernel = rig_kfd_emu::kernel::Kernel::new(rig_kfd_emu::kernel::Config::default()).unwrap();
    rig_kfd_emu::tree::write_tree(&topo, &kernel.facts()).unwrap();
    let c = config(KfdConfig {
        emulated: Some(t.path().join("kfd.sock")),
        topology: Some(topo),
        worker: Some(env!("CARGO_BIN_EXE_rig-worker").into()),
        serve: false,
        ..KfdConfig::default()
    });
    let gpus = rigd::gpus::find(&c, Path::new("/nonexistent-sysfs")).unwrap();
    let names: Vec<(&str, &str)> = gpus
        .iter()
        .map(|g| (g.info.name.as_str(), g.info.arch.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("AMD:0", "gfx1100"),
            ("AMD:1", "gfx1201"),
            ("AMD:2", "gfx942")
        ],
        "KFD's GPUs, and no embedded simulated GPU beside them"
    );
    for g in &gpus {
        assert_eq!(g.info.path, PathKind::Kfd);
        assert_eq!(g.info.budget, 4 << 30);
        assert!(g.info.bus.as_deref().unwrap().starts_with("0000:0"));
        assert!(
            g.info
                .unavailable
                .as_deref()
                .unwrap()
                .contains("[kfd] serve")
        );
        assert!(g.backend.is_none());
    }
}

#[test]
fn a_machines_kfd_gpu_of_another_generation_is_listed_with_the_reason_once() {
    let t = tempfile::tempdir().unwrap();
    let sysfs = t.path();
    let node = sysfs.join("class/kfd/kfd/topology/nodes/1");
    std::fs::create_dir_all(&node).unwrap();
    std::fs::write(node.join("gpu_id"), "4242\n").unwrap();
    std::fs::write(
        node.join("properties"),
        "simd_count 160\ngfx_target_version 100300\nwave_front_size 32\nlocation_id 768\n\
         domain 0\nfw_version 120\nsdma_fw_version 80\n",
    )
    .unwrap();
    // The same GPU as a PCI function.
    let pci = sysfs.join("bus/pci/devices/0000:03:00.0");
    std::fs::create_dir_all(&pci).unwrap();
    std::fs::write(pci.join("vendor"), "0x1002\n").unwrap();
    std::fs::write(pci.join("class"), "0x030000\n").unwrap();
    let device = sysfs.join("kfd");
    std::fs::write(&device, "").unwrap();
    let c = config(KfdConfig {
        device,
        ..KfdConfig::default()
    });
    let gpus = rigd::gpus::find(&c, sysfs).unwrap();
    assert_eq!(gpus.len(), 1, "{gpus:?}");
    assert_eq!(gpus[0].info.arch, "gfx1030");
    assert_eq!(gpus[0].info.bus.as_deref(), Some("0000:03:00.0"));
    let why = gpus[0].why_not.as_deref().unwrap();
    assert!(why.contains("GFX10"), "{why}");
}

#[test]
fn an_unreadable_topology_is_an_error_naming_the_file() {
    let t = tempfile::tempdir().unwrap();
    let node = t.path().join("topology/nodes/1");
    std::fs::create_dir_all(&node).unwrap();
    std::fs::write(node.join("gpu_id"), "not a number\n").unwrap();
    let c = config(KfdConfig {
        emulated: Some(t.path().join("kfd.sock")),
        topology: Some(t.path().join("topology")),
        ..KfdConfig::default()
    });
    let e = rigd::gpus::find(&c, Path::new("/nonexistent-sysfs")).unwrap_err();
    let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
    assert!(chain.contains("gpu_id"), "{chain}");
}

#[test]
fn with_serve_an_emulated_kfds_gpus_are_served_through_the_kfd_path() {
    let t = tempfile::tempdir().unwrap();
    let sock = t.path().join("kfd.sock");
    let topo = t.path().join("topology");
    let _emu = rig_kfd_emu::start(rig_kfd_emu::kernel::Config::default(), &sock, &topo).unwrap();
    let c = config(KfdConfig {
        emulated: Some(sock),
        topology: Some(topo),
        worker: Some(env!("CARGO_BIN_EXE_rig-worker").into()),
        serve: true,
        ..KfdConfig::default()
    });
    let gpus = rigd::gpus::find(&c, Path::new("/nonexistent-sysfs")).unwrap();
    assert_eq!(gpus.len(), 3);
    for g in &gpus {
        assert!(g.info.unavailable.is_none(), "{:?}", g.info.unavailable);
        let d = g.backend.as_ref().unwrap().description();
        assert_eq!(d.kind, PathKind::Kfd);
        assert_eq!(d.gpu.name(), g.info.arch);
        assert_eq!(d.clock_hz, 100_000_000);
    }
}

/// An emulated KFD serving its GPUs: the default configuration with its socket and tree.
fn emulated(t: &tempfile::TempDir) -> (std::sync::Arc<rig_kfd_emu::server::Server>, KfdConfig) {
    let sock = t.path().join("kfd.sock");
    let topo = t.path().join("topology");
    let emu = rig_kfd_emu::start(rig_kfd_emu::kernel::Config::default(), &sock, &topo).unwrap();
    let kfd = KfdConfig {
        emulated: Some(sock),
        topology: Some(topo),
        worker: Some(env!("CARGO_BIN_EXE_rig-worker").into()),
        ..KfdConfig::default()
    };
    (emu, kfd)
}

/// The GPUs rigd serves: name, processor and path.
fn served(gpus: &[rigd::gpus::GpuEntry]) -> Vec<(String, String, PathKind)> {
    gpus.iter()
        .filter(|g| g.backend.is_some() && g.info.unavailable.is_none())
        .map(|g| (g.info.name.clone(), g.info.arch.clone(), g.info.path))
        .collect()
}

fn named(list: &[(&str, &str, PathKind)]) -> Vec<(String, String, PathKind)> {
    list.iter()
        .map(|(n, a, p)| (n.to_string(), a.to_string(), *p))
        .collect()
}

#[test]
fn by_default_rigd_serves_kfds_gpus_through_the_kfd_path_and_no_simulated_one() {
    let t = tempfile::tempdir().unwrap();
    let (_emu, kfd) = emulated(&t);
    let gpus = rigd::gpus::find(&config(kfd), Path::new("/nonexistent-sysfs")).unwrap();
    assert_eq!(gpus.len(), 3, "{gpus:?}");
    assert_eq!(
        served(&gpus),
        named(&[
            ("AMD:0", "gfx1100", PathKind::Kfd),
            ("AMD:1", "gfx1201", PathKind::Kfd),
            ("AMD:2", "gfx942", PathKind::Kfd),
        ])
    );
}

#[test]
fn with_no_amd_gpu_rigd_serves_the_simulated_one() {
    let t = tempfile::tempdir().unwrap();
    // The default configuration on a machine with no /dev/kfd and no AMD PCI function.
    let c = config(KfdConfig {
        device: t.path().join("no-kfd"),
        ..KfdConfig::default()
    });
    let gpus = rigd::gpus::find(&c, t.path()).unwrap();
    assert_eq!(gpus.len(), 1, "{gpus:?}");
    assert_eq!(served(&gpus), named(&[("AMD:0", "gfx1100", PathKind::Sim)]));
}

#[test]
fn a_configured_simulated_gpu_is_served_beside_kfds() {
    let t = tempfile::tempdir().unwrap();
    let (_emu, kfd) = emulated(&t);
    let mut c = config(kfd);
    c.sim = vec![rigd::config::SimGpuConfig::embedded_default()];
    let gpus = rigd::gpus::find(&c, Path::new("/nonexistent-sysfs")).unwrap();
    assert_eq!(
        served(&gpus),
        named(&[
            ("AMD:0", "gfx1100", PathKind::Kfd),
            ("AMD:1", "gfx1201", PathKind::Kfd),
            ("AMD:2", "gfx942", PathKind::Kfd),
            ("AMD:3", "gfx1100", PathKind::Sim),
        ])
    );
}
