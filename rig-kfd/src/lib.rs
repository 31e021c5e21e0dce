//! The KFD interface of rig: how the amdgpu path talks to Linux's `/dev/kfd`.
//!
//! KFD (the Kernel Fusion Driver, part of amdgpu) gives each process that opens `/dev/kfd`
//! one GPU address space per GPU, user-mode queues whose rings and doorbells the process
//! writes itself, memory allocations mapped at addresses the process picks, and events that
//! the GPU's interrupts (and its faults) signal.
//!
//! - [`abi`]: the ioctls rig uses, their request numbers and `#[repr(C)]` argument blocks,
//!   pinned to the system's `linux/kfd_ioctl.h` by `tests/header.rs`;
//! - [`version`]: GET_VERSION's answer, the oldest version rig drives and what later ones add;
//! - [`topology`]: the GPUs KFD lists in sysfs, typed, and matched to rig-amd's table;
//! - [`kfd`]: an open `/dev/kfd` (one KFD process), a method per ioctl;
//! - [`queue`]: the end-of-pipe and context-save sizes KFD asks of a compute queue;
//! - [`seam`]: the system calls the path makes, against the machine's kernel or the
//!   emulated KFD;
//! - [`sys`]: the one module with `unsafe`: `ioctl(2)` and shared mappings.
#![deny(missing_docs)]

pub mod abi;
pub mod kfd;
pub mod queue;
pub mod seam;
pub mod sys;
pub mod topology;
pub mod version;
