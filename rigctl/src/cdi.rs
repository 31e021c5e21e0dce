//! `rigctl cdi`: a Container Device Interface spec of rig's GPUs, for containerd, CRI-O and
//! Podman (`--device rig.dev/gpu=all`, or `=0` for GPU 0).
//!
//! rig needs no device node in a container, only rigd's socket: every device's edits are
//! the mount of the socket's directory (read-only; connecting needs no write access to the
//! file system) and `RIG_SOCKET`, with `RIG_VISIBLE_GPUS` naming the GPU (rigd's index).
//! The kind and device names are those rig's device plugin gives the kubelet with `--cdi`
//! (`rig.dev/gpu=<index>`).

use std::path::Path;

use rig_proto::messages::GpuInfo;
use serde_json::{Value, json};

/// The CDI version the spec is written in: the lowest that holds what it uses (environment
/// and mounts with options, all in 0.3.0), since a runtime refuses versions newer than its
/// CDI library: Debian 12's Podman 4.3 answers a 0.6.0 spec with "unresolvable CDI
/// devices", and every later runtime reads 0.3.0.
pub const CDI_VERSION: &str = "0.3.0";

/// The CDI kind of rig's GPUs.
pub const KIND: &str = "rig.dev/gpu";

/// The spec of `gpus`, for a rigd whose socket is `host_socket` on the host, mounted in
/// containers at `container_dir`.
pub fn spec(gpus: &[GpuInfo], host_socket: &Path, container_dir: &Path) -> Value {
    let host_dir = host_socket.parent().unwrap_or(Path::new("/"));
    let name = host_socket
        .file_name()
        .map_or_else(|| "rigd.sock".into(), |n| n.to_string_lossy());
    let inside = container_dir.join(&*name);
    let visible = |indices: Vec<String>| json!({ "env": [format!("RIG_VISIBLE_GPUS={}", indices.join(","))] });
    let mut devices: Vec<Value> = gpus
        .iter()
        .map(|g| json!({ "name": g.index.to_string(), "containerEdits": visible(vec![g.index.to_string()]) }))
        .collect();
    devices.push(json!({
        "name": "all",
        "containerEdits": visible(gpus.iter().map(|g| g.index.to_string()).collect()),
    }));
    json!({
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": devices,
        "containerEdits": {
            "env": [format!("RIG_SOCKET={}", inside.display())],
            "mounts": [{
                "hostPath": host_dir.display().to_string(),
                "containerPath": container_dir.display().to_string(),
                "options": ["bind", "ro", "nosuid", "nodev", "noexec"],
            }],
        },
    })
}

/// Writes `text` to `path` through a temporary file beside it, so that a runtime watching
/// the directory never reads half a spec.
pub fn write(path: &Path, text: &str) -> Result<(), String> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name()
            .map_or_else(|| "rig.json".into(), |n| n.to_string_lossy())
    ));
    let fail = |e: std::io::Error| format!("{}: {e}", path.display());
    std::fs::create_dir_all(dir).map_err(fail)?;
    std::fs::write(&tmp, text).map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32) -> GpuInfo {
        GpuInfo {
            index,
            name: format!("AMD:{index}"),
            arch: "gfx1100".into(),
            path: rig_proto::messages::PathKind::Sim,
            bus: None,
            budget: 1 << 30,
            simulated: true,
            unavailable: None,
        }
    }

    #[test]
    fn the_spec_mounts_the_socket_and_names_each_gpu_and_all() {
        let s = spec(
            &[gpu(0), gpu(1)],
            Path::new("/run/rig/rigd.sock"),
            Path::new("/run/rig"),
        );
        assert_eq!(s["cdiVersion"], "0.3.0");
        assert_eq!(s["kind"], "rig.dev/gpu");
        let names: Vec<&str> = s["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["0", "1", "all"]);
        // CDI's rules: a kind is vendor/class, a device name [A-Za-z0-9][A-Za-z0-9_.:-]*,
        // every device has edits, no device nodes are needed.
        for d in s["devices"].as_array().unwrap() {
            let name = d["name"].as_str().unwrap();
            assert!(name.chars().next().unwrap().is_ascii_alphanumeric());
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c))
            );
            assert!(
                d["containerEdits"]["env"]
                    .as_array()
                    .is_some_and(|e| !e.is_empty())
            );
            assert!(d["containerEdits"].get("deviceNodes").is_none());
        }
        assert_eq!(
            s["devices"][2]["containerEdits"]["env"][0],
            "RIG_VISIBLE_GPUS=0,1"
        );
        let edits = &s["containerEdits"];
        assert_eq!(edits["env"][0], "RIG_SOCKET=/run/rig/rigd.sock");
        assert_eq!(edits["mounts"][0]["hostPath"], "/run/rig");
        assert_eq!(edits["mounts"][0]["containerPath"], "/run/rig");
        assert!(
            edits["mounts"][0]["options"]
                .as_array()
                .unwrap()
                .contains(&"ro".into())
        );
    }
}
