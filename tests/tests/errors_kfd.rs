//! The tests of errors.rs through rigd's kfd path: the same tests, against a rigd serving an
//! emulated KFD's gfx1100 (rig-kfd-emu, in a process of its own) instead of the simulated
//! GPU. The file name selects the path (`common::on_kfd`); what only the simulator reports
//! is skipped by `common::only_on_sim`'s rule.

// errors.rs brings its own (private) copy of the harness; this file's check needs one too.
#![allow(clippy::duplicate_mod)]

mod common;
#[path = "errors.rs"]
mod errors;
