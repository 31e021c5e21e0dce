//! A client's pod and container, from its cgroup: `/proc/PID/cgroup` of the peer, read once
//! when it connects, as `rigctl clients` and the metrics show it.
//!
//! The kubelet puts each pod's containers in a cgroup of the pod under `kubepods`, in one of
//! two namings, on cgroup v1 (one line per hierarchy) and v2 (the one line `0::`):
//!
//! - the cgroupfs driver: `/kubepods/<qos>/pod<uid>/<container id>` (no `<qos>` for
//!   Guaranteed pods);
//! - the systemd driver: `/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid with
//!   '_' for '-'>.slice/<runtime>-<container id>.scope` (`cri-containerd-`, `crio-`,
//!   `docker-`), possibly under a slice of the node's own (`kubelet.slice`, as kind nodes
//!   have it).
//!
//! The pid is the one the socket's credentials recorded at connect; the process may have
//! exited since, so this is what rigd shows, never what it decides on: a grant's socket
//! ([`crate::grant`]) is what carries an allocation's share.

use rig_proto::PodOf;

/// The most bytes of a pod UID or container id kept (a UUID is 36, a container id 64).
const MOST_ID: usize = 128;

/// The pod and container `/proc/<pid>/cgroup` names; `None` outside a pod, or when the file
/// cannot be read.
pub fn of_pid(pid: i32) -> Option<PodOf> {
    if pid <= 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    parse(&text)
}

/// The pod and container a `/proc/PID/cgroup` file names: the v2 line's (`0::`) when it has
/// one inside a pod, else the first v1 line's that does.
pub fn parse(cgroup: &str) -> Option<PodOf> {
    let paths = cgroup.lines().filter_map(|line| {
        let mut parts = line.splitn(3, ':');
        let id = parts.next()?;
        let _controllers = parts.next()?;
        Some((id == "0", parts.next()?))
    });
    let mut first_v1 = None;
    for (v2, path) in paths {
        if let Some(p) = in_path(path) {
            if v2 {
                return Some(p);
            }
            first_v1.get_or_insert(p);
        }
    }
    first_v1
}

/// The pod and container of one cgroup path.
fn in_path(path: &str) -> Option<PodOf> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let kubepods = parts.iter().position(|p| p.contains("kubepods"))?;
    for (i, part) in parts.iter().enumerate().skip(kubepods) {
        let uid = if let Some(slice) = part.strip_suffix(".slice") {
            // systemd: ...-pod<uid with '_'>.slice
            match slice.rfind("-pod") {
                Some(at) => slice[at + 4..].replace('_', "-"),
                None => continue,
            }
        } else if let Some(uid) = part.strip_prefix("pod") {
            uid.to_owned()
        } else {
            continue;
        };
        if !is_uid(&uid) {
            continue;
        }
        let container = parts.get(i + 1).and_then(|c| container_id(c));
        return Some(PodOf { uid, container });
    }
    None
}

/// A pod UID: hex digits and dashes.
fn is_uid(s: &str) -> bool {
    !s.is_empty() && s.len() <= MOST_ID && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// The container id of the cgroup below a pod's: the name itself (cgroupfs) or a systemd
/// scope's id (`cri-containerd-<id>.scope`); `None` for a runtime's own process beside the
/// containers (CRI-O's `crio-conmon-<id>.scope`) and anything else.
fn container_id(part: &str) -> Option<String> {
    let id = match part.strip_suffix(".scope") {
        Some(scope) => {
            if scope.contains("conmon") {
                return None;
            }
            &scope[scope.rfind('-')? + 1..]
        }
        None => part,
    };
    (!id.is_empty() && id.len() <= MOST_ID && id.bytes().all(|b| b.is_ascii_alphanumeric()))
        .then(|| id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f3c8d2e-5b1a-4c7e-9d3f-2a6b8c4e1f70";
    const CID: &str = "4e8a1c2b3d4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b";

    fn want(container: Option<&str>) -> Option<PodOf> {
        Some(PodOf {
            uid: UID.into(),
            container: container.map(Into::into),
        })
    }

    #[test]
    fn cgroup_v2_with_the_systemd_driver() {
        let u = UID.replace('-', "_");
        for runtime in ["cri-containerd", "crio", "docker"] {
            let text = format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/{runtime}-{CID}.scope\n"
            );
            assert_eq!(parse(&text), want(Some(CID)), "{runtime}");
        }
        // Guaranteed pods have no QoS slice; a kind node nests the kubelet's slices.
        let text = format!("0::/kubepods.slice/kubepods-pod{u}.slice/cri-containerd-{CID}.scope\n");
        assert_eq!(parse(&text), want(Some(CID)));
        let text = format!(
            "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{u}.slice/cri-containerd-{CID}.scope\n"
        );
        assert_eq!(parse(&text), want(Some(CID)));
        // CRI-O's monitor beside the container names the pod only.
        let text = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/crio-conmon-{CID}.scope\n"
        );
        assert_eq!(parse(&text), want(None));
    }

    #[test]
    fn cgroup_v2_with_the_cgroupfs_driver() {
        for qos in ["", "burstable/", "besteffort/"] {
            let text = format!("0::/kubepods/{qos}pod{UID}/{CID}\n");
            assert_eq!(parse(&text), want(Some(CID)), "{qos}");
        }
        // A process in the pod's own cgroup (the pause container's parent).
        assert_eq!(parse(&format!("0::/kubepods/pod{UID}\n")), want(None));
    }

    #[test]
    fn cgroup_v1_lines_of_both_drivers() {
        let u = UID.replace('-', "_");
        let systemd = format!(
            "12:pids:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{CID}.scope\n\
             11:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{CID}.scope\n\
             1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{CID}.scope\n\
             0::/\n"
        );
        assert_eq!(parse(&systemd), want(Some(CID)));
        let cgroupfs = format!(
            "11:cpuset:/kubepods/besteffort/pod{UID}/{CID}\n10:memory:/kubepods/besteffort/pod{UID}/{CID}\n"
        );
        assert_eq!(parse(&cgroupfs), want(Some(CID)));
    }

    #[test]
    fn processes_outside_pods_have_none() {
        for text in [
            "0::/user.slice/user-1000.slice/session-2.scope\n",
            "0::/system.slice/rigd.service\n",
            "12:memory:/docker/4e8a1c2b\n0::/\n",
            // "pod" in a name outside kubepods, and a pod UID that is not one.
            "0::/system.slice/podman-42.scope\n",
            "0::/kubepods/podNOT-A-UID/abc\n",
            "",
            "garbage",
        ] {
            assert_eq!(parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn this_process_reads_as_it_is() {
        // Whatever this test runs in, reading it does not fail and agrees with the parser.
        let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        assert_eq!(of_pid(std::process::id() as i32), parse(&text));
    }
}
