//! The emulation held to the real kernel: `rig-kfd-probe` runs in a Linux guest whose
//! kernel has amdgpu (Debian's generic kernel: loading amdgpu makes `/dev/kfd` with CPU
//! nodes only, no GPU needed), then against `rig-kfd-emu` with no GPU and the kernel's KFD
//! version, and the two transcripts must be equal line by line: discovery (the topology
//! tree as rig-kfd reads it, the version, the apertures), events (create, set, wait with
//! auto and manual reset, destroy, the event page's mmap) and the errnos of calls that name
//! a GPU, a handle or a queue that does not exist.
//!
//! Skipped, and says so, when QEMU, a kernel with amdgpu or busybox is missing (`.ci/run`
//! installs `linux-image-amd64`).

use std::process::Command;
use std::time::Duration;

use rig_kfd::version::Version;

#[test]
fn the_emulation_answers_as_the_kernels_kfd_does() {
    let host = match rig_guest::Host::find_for(&["amdgpu"]) {
        Ok(h) => h,
        Err(missing) => {
            eprintln!("skipped: the KFD guest test needs a VM: {missing}");
            return;
        }
    };
    let work = tempfile::tempdir().unwrap();
    let probe = env!("CARGO_BIN_EXE_rig-kfd-probe");
    let outcome = rig_guest::Guest::new(host.clone(), probe)
        .modules(["amdgpu"])
        .timeout(Duration::from_secs(150))
        .run(work.path())
        .expect("running the guest");
    eprintln!(
        "guest (kernel {}): {:.1} s, status {:?}{}",
        host.kernel_version,
        outcome.wall.as_secs_f64(),
        outcome.status,
        if outcome.timed_out {
            ", killed at its time limit"
        } else {
            ""
        }
    );
    let kernel: Vec<String> = outcome
        .lines("KFD ")
        .iter()
        .map(|l| l.to_string())
        .collect();
    assert!(
        outcome.passed() && !kernel.is_empty(),
        "the probe did not run in the guest\n{}",
        outcome.console
    );
    let version = kernel
        .iter()
        .find_map(|l| l.strip_prefix("version: "))
        .and_then(|v| v.split_once('.'))
        .map(|(a, b)| Version {
            major: a.parse().unwrap(),
            minor: b.parse().unwrap(),
        })
        .expect("the guest's KFD version");

    let socket = work.path().join("kfd.sock");
    let tree = work.path().join("topology");
    let config = rig_kfd_emu::kernel::Config {
        models: Vec::new(),
        version,
        ..Default::default()
    };
    let _server = rig_kfd_emu::start(config, &socket, &tree).expect("starting the emulation");
    let out = Command::new(probe)
        .arg("--socket")
        .arg(&socket)
        .arg("--topology")
        .arg(&tree)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let emulated: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("KFD "))
        .map(str::to_owned)
        .collect();

    let mut differ = Vec::new();
    for i in 0..kernel.len().max(emulated.len()) {
        let k = kernel.get(i).map_or("(none)", String::as_str);
        let e = emulated.get(i).map_or("(none)", String::as_str);
        if k == e {
            eprintln!("  same    {k}");
        } else {
            eprintln!("  DIFFER  kernel:   {k}\n          emulated: {e}");
            differ.push(format!("kernel:   {k}\nemulated: {e}"));
        }
    }
    assert!(
        differ.is_empty(),
        "{} answer(s) of the emulation differ from the kernel's:\n{}",
        differ.len(),
        differ.join("\n")
    );
}
