//! An emulated KFD: the kernel side of `/dev/kfd`, backed by rig-sim, in a process of its
//! own, so rig's amdgpu path runs unchanged on a machine without an AMD GPU.
//!
//! - [`kernel`]: the ioctls, with the kernel's validation and errnos; one simulated GPU per
//!   emulated GPU, shared by every process that opens it; one GPU VM per process; doorbell
//!   and event pages; memory and hardware exception events from the GPU's faults;
//! - [`hdp`]: the host data path's flush page (MMIO_REMAP) and each queue's doorbell front
//!   end, which counts the doorbells a flush came before;
//! - [`server`]: the Unix socket through which rig-kfd's `seam::Emulated` reaches it;
//! - [`tree`]: the sysfs topology tree it presents (gfx1100, gfx1201 and gfx942 nodes by
//!   default).
//!
//! The binary `rig-kfd-emu --socket S --topology DIR` writes the tree and serves `S`.
#![deny(missing_docs)]

pub mod hdp;
pub mod kernel;
pub mod server;
pub mod tree;

pub use rig_sim::{ClockModel, Stall};

use std::path::Path;
use std::sync::Arc;

/// Makes the emulation of `config`, writes its topology under `topology` and serves
/// `socket` on a thread; returns the server.
pub fn start(
    config: kernel::Config,
    socket: &Path,
    topology: &Path,
) -> Result<Arc<server::Server>, StartError> {
    let k = kernel::Kernel::new(config).map_err(StartError::Sim)?;
    tree::write_tree(topology, &k.facts()).map_err(StartError::Topology)?;
    let s = server::Server::new(k);
    s.listen(socket).map_err(StartError::Listen)?;
    Ok(s)
}

/// Why the emulation could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A simulated GPU could not be made.
    #[error("making the simulated GPUs")]
    Sim(#[source] rig_sim::SimError),
    /// The topology tree could not be written.
    #[error("writing the topology tree")]
    Topology(#[source] std::io::Error),
    /// The socket could not be bound.
    #[error("binding the socket")]
    Listen(#[source] std::io::Error),
}
