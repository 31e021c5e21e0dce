//! A client in a real container: Debian's Podman (with runc) runs rig-tests-client from a
//! root file system this test builds (the program and the libraries `ldd` names; no image
//! registry is reached), with what the device plugin's Allocate gives a container: the
//! directory of a grant's socket mounted at `/run/rig` and `RIG_SOCKET` naming the socket in
//! it. Inside, the program opens a device through rigd, runs a kernel and checks its result,
//! and is refused past its share with the error naming the grant.
//!
//! Podman's default rlimits cannot be set inside some VMs (`setrlimit RLIMIT_NOFILE:
//! Operation not permitted`), so the test's containers.conf sets none, and crun refuses a
//! host whose cgroups are in hybrid mode, so runc runs the container. Without Podman, runc
//! or root the test says why and passes, unless `RIG_REQUIRE_CONTAINER` is set (CI sets it).

use std::path::{Path, PathBuf};
use std::process::Command;

use rig_proto::messages::{GrantGpu, GrantSpec, Holder, Request, Response};
use rig_testkit::{Backend, Daemon};

const MIB: u64 = 1 << 20;

/// Why containers cannot run here, if they cannot.
fn missing() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root".into());
    }
    for tool in ["podman", "runc"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("{tool} is not installed (apt install podman runc)"));
        }
    }
    None
}

/// A root file system holding `program` and the shared libraries it loads, at their paths.
fn rootfs(dir: &Path, program: &Path) -> PathBuf {
    let root = dir.join("rootfs");
    let copy = |from: &Path| {
        let to = root.join(from.strip_prefix("/").unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, &to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    };
    copy(program);
    let ldd = Command::new("ldd").arg(program).output().expect("ldd runs");
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux... (0x...)"
        let path = line
            .split("=>")
            .last()
            .and_then(|s| s.split_whitespace().next())
            .filter(|p| p.starts_with('/'));
        if let Some(p) = path {
            copy(Path::new(p));
        }
    }
    std::fs::create_dir_all(root.join("run/rig")).unwrap();
    root
}

#[test]
fn a_client_in_a_container_runs_a_kernel_through_its_grant_and_is_held_to_its_share() {
    if let Some(why) = missing() {
        assert!(
            std::env::var_os("RIG_REQUIRE_CONTAINER").is_none(),
            "RIG_REQUIRE_CONTAINER is set, but containers cannot run here: {why}"
        );
        eprintln!("skipped: {why}");
        return;
    }
    let d = Daemon::start(Backend::Sim, None);
    let mut admin = rig_proto::Connection::connect(&d.socket, "plugin").unwrap();
    let spec = GrantSpec {
        id: format!("container-{}", std::process::id()),
        gpus: vec![GrantGpu {
            gpu: 0,
            bytes: 256 * MIB,
        }],
        devices: 1,
        holder: Holder {
            resource: "rig.dev/gpu-memory".into(),
            ..Holder::default()
        },
    };
    let socket = match admin.call(&Request::Grant(Box::new(spec)), &[]).unwrap().0 {
        Response::Granted { socket } => PathBuf::from(socket),
        r => panic!("grant refused: {r:?}"),
    };
    let program = Path::new(env!("CARGO_BIN_EXE_rig-tests-client"));
    let root = rootfs(d.dir(), program);
    let conf = d.dir().join("containers.conf");
    std::fs::write(&conf, "[containers]\ndefault_ulimits = []\n").unwrap();
    let out = Command::new("podman")
        .env("CONTAINERS_CONF", &conf)
        .args(["--runtime", "runc", "run", "--rm", "--network", "none"])
        .arg("-v")
        .arg(format!("{}:/run/rig", socket.parent().unwrap().display()))
        .args(["-e", "RIG_SOCKET=/run/rig/rigd.sock", "--rootfs"])
        .arg(&root)
        .arg(Path::new("/").join(program.strip_prefix("/").unwrap()))
        .arg((1024 * MIB).to_string())
        .output()
        .expect("podman runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("y[10] = 11"),
        "the kernel's result inside the container: {stdout} {stderr}"
    );
    let refused = stdout
        .lines()
        .find_map(|l| l.strip_prefix("refused: "))
        .unwrap_or_else(|| panic!("1 GiB past a 256 MiB share was not refused: {stdout} {stderr}"));
    assert!(
        refused.contains("grant"),
        "the refusal names the grant: {refused}"
    );
    assert!(out.status.success(), "{stdout} {stderr}");
}
