//! rig's tests that cross crates: a program through `rig-client`, `rigd`, the simulated GPU
//! (`rig-sim`, running real gfx11 code through `rig-isa`) and back. Tests of one crate stay
//! in that crate.
//!
//! Each test program (`tests/*.rs`) starts a rigd of its own: the program itself, run again
//! in a child process with [`serve::SOCKET_ENV`] set, serving the simulated GPU through
//! [`rigd::serve_until_sigterm`] ([`serve::main`]); `tests/common` holds the test side
//! (starting, pausing and crashing that rigd, an inspector connection, kernels). So the
//! client library itself links neither rigd nor tokio; only these tests do.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod kfd;
pub mod scale;
pub mod serve;
