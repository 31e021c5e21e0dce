//! The client's end-to-end tests of launches.rs, buffers.rs, lifetime.rs, wait_policies.rs,
//! profile.rs and errors.rs on a simulated gfx942 (MI300X: CDNA3, 8 dies, an AQL compute
//! queue), in one program: the same tests, against a rigd configured with a gfx942 and with
//! the kernels built for it (kernels/out/gfx942 and kernels/corpus/gfx942), which rig-isa's
//! GFX9 front end runs in waves of 64. The client places each launch as a kernel-dispatch
//! packet and each value's waits and release as PM4-IB packets. The file name selects the
//! processor (`common::processor`).

// Each file brings its own (private) copy of the harness; this file's check needs one too.
#![allow(clippy::duplicate_mod)]

#[path = "buffers.rs"]
mod buffers;
mod common;
#[path = "errors.rs"]
mod errors;
#[path = "launches.rs"]
mod launches;
#[path = "lifetime.rs"]
mod lifetime;
#[path = "profile.rs"]
mod profile;
#[path = "wait_policies.rs"]
mod wait_policies;

/// The tests above run where this binary says: a simulated gfx942 whose compute queue reads
/// AQL packets, with gfx942 code.
#[test]
fn the_rigd_serves_a_simulated_gfx942_with_an_aql_queue() {
    let d = common::Daemon::start(None);
    let gpus = d.rig().gpus().unwrap();
    assert_eq!(gpus[0].arch, "gfx942");
    assert_eq!(gpus[0].path, rig_client::GpuPath::Sim);
    let dev = d.device();
    assert_eq!(dev.facts().compute_packets, rig_client::Packets::Aql);
    // A gfx1100 build is refused there, so every launch above ran a gfx942 build.
    let gfx1100 = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/out/gfx1100/add.co"),
    )
    .unwrap();
    assert!(dev.load_image(&gfx1100).is_err());
    assert!(dev.load_image(&common::code("add")).is_ok());
}
