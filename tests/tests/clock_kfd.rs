//! The tests of clock.rs through rigd's kfd path: the same tests, against a rigd serving an
//! emulated KFD's gfx1100 (rig-kfd-emu, in a process of its own), whose GET_CLOCK_COUNTERS
//! samples the host's clock after the GPU's counter, as the kernel's does. The file name
//! selects the path (`common::on_kfd`).

// clock.rs brings its own (private) copy of the harness; this file's check needs one too.
#![allow(clippy::duplicate_mod)]

#[path = "clock.rs"]
mod clock;
mod common;
