//! rig's Kubernetes device plugin: it hands out the GPUs rigd serves, whole
//! (`rig.dev/gpu`) or in shares of their memory (`rig.dev/gpu-memory`), through the
//! kubelet's device-plugin API v1beta1 (gRPC on Unix sockets, [`api`]).
//!
//! # How it fits
//!
//! The plugin runs beside rigd on each node (a DaemonSet, `docs/kubernetes.md`). It owns
//! nothing of the GPUs: a pod's programs reach them through rigd like any other client,
//! and rigd keeps their address spaces apart and enforces the share. The plugin tells the
//! kubelet what exists and what is healthy, and gives each container a socket of rigd's
//! own for its allocation (a grant), whose every connection rigd holds to the allocation's
//! share whatever the container's uid:
//!
//! - [`health`]: a thread polls rigd (`ListGpus`) and publishes the GPUs' health;
//! - [`resources`]: device ids, the device lists, preferred allocations (memory units
//!   packed onto as few GPUs as fit) and allocations (the grant's socket directory
//!   mounted, `RIG_SOCKET` and the share in the environment, or CDI device names);
//! - [`grants`]: asking rigd for grants, and the ledger of those the plugin holds;
//! - [`reclaim`]: the kubelet's pod-resources list squared with the grants: pods' names
//!   given to them, grants of containers that are gone revoked, grants rigd lost made again;
//! - [`labels`]: the node feature file of the GPUs' processor and memory;
//! - [`plugin`]: the `DevicePlugin` service of one resource;
//! - [`kubelet`]: serving both resources, registering them, and starting over when the
//!   kubelet restarts;
//! - [`uds`]: tonic channels to Unix sockets.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod grants;
pub mod health;
pub mod kubelet;
pub mod labels;
pub mod plugin;
pub mod reclaim;
pub mod resources;
pub mod uds;

/// The kubelet's device-plugin API v1beta1 (`proto/api.proto`), as prost and tonic
/// generate it: messages, the `Registration` and `DevicePlugin` clients and servers.
#[allow(
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]
pub mod api {
    tonic::include_proto!("v1beta1");
}

/// The part of the kubelet's pod-resources API v1 the plugin reads
/// (`proto/podresources.proto`): the `PodResourcesLister` client, and its server for the
/// tests' kubelet.
#[allow(
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]
pub mod podresources {
    tonic::include_proto!("v1");
}

use std::path::PathBuf;

/// What stops the plugin.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kubelet's device-plugins directory could not be made.
    #[error("cannot make the device-plugins directory {path}")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The device-plugins directory could not be watched.
    #[error("cannot watch the device-plugins directory {path} with inotify")]
    Watch {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A plugin socket could not be bound.
    #[error("cannot serve on {path}")]
    Bind {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A memory size: a number of bytes, or a number with a suffix `K`, `M`, `G`, `T`
/// (`KiB`... and `KB`... alike, all powers of 1024); `None` for anything else or zero.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, suffix) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    number.checked_mul(1u64 << shift).filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("1GiB"), Some(1 << 30));
        assert_eq!(parse_bytes("512 MiB"), Some(512 << 20));
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("2g"), Some(2 << 30));
        for bad in ["", "0", "GiB", "1.5GiB", "1PiB", "99999999999T"] {
            assert_eq!(parse_bytes(bad), None, "{bad}");
        }
    }
}
