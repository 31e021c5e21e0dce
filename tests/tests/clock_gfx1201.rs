//! The tests of clock.rs on a simulated gfx1201 (GFX12), whose source the device reads as a
//! counter a constant apart from the stamps' and takes that constant against at open. The
//! file name selects the processor (`common::processor`).

// clock.rs brings its own (private) copy of the harness; this file's check needs one too.
#![allow(clippy::duplicate_mod)]

#[path = "clock.rs"]
mod clock;
mod common;
