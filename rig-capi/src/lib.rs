//! rig's C ABI: [`rig_client`] and [`rig_kernels`] for C, C++ and, through cffi, Python.
//!
//! The library builds as `librig.so` and `librig.a`; `include/rig_capi.h` is its header,
//! made by cbindgen from this crate (a test fails when it is out of date). Every handle is
//! an opaque pointer the caller frees with its `_free` function (freeing NULL does
//! nothing); handles keep what they name alive as in Rust (a kernel its image, a buffer its
//! device). Every fallible call returns a [`RigStatus`]: `RIG_STATUS_OK`, or a code whose
//! message [`rig_last_error`] gives on the same thread (the error with its sources, once)
//! and that [`rig_status_string`] names. Every error of rig-client has a status of its own
//! (`RIG_STATUS_CONNECT` for no rigd on the socket, `RIG_STATUS_CONNECTION` for a rigd that
//! went away); numbers are appended, never moved. A panic inside is caught and answered
//! `RIG_STATUS_PANIC`.
//!
//! The modules: `status` (codes, the thread's last message, the guard every call runs
//! in), `ptr` (the one place raw pointers become references, each with its `SAFETY`
//! argument), `api` (the functions: connect and open, buffers, images, kernels and their
//! arguments, submissions, points, profiles, kernels from source).
#![deny(missing_docs)]

mod api;
mod ptr;
mod status;

pub use api::*;
pub use status::{RigStatus, rig_last_error, rig_status_string};
