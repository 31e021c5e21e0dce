//! rig's tests that cross crates: a program through `rig-client`, `rigd`, the simulated GPU
//! (`rig-sim`, running real gfx11 code through `rig-isa`) and back. Tests of one crate stay
//! in that crate.
//!
//! The tests are one program, `tests/e2e` (a module per subject), over the test kit
//! (`rig-testkit`): each test starts a rigd of its own on a backend. This library holds the
//! scale harness ([`scale`]), which the `scale` test and bench share. So the client library
//! itself links neither rigd nor tokio; only these tests do.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod scale;
