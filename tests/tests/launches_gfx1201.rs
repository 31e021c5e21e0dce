//! The launches of launches.rs on a simulated gfx1201 (RDNA4): the same tests, against a rigd
//! configured with a gfx1201 and with the kernels built for it (kernels/out/gfx1201 and
//! kernels/corpus/gfx1201), which rig-isa's GFX12 front end runs. The file name selects the
//! processor (`common::processor`).

// launches.rs brings its own (private) copy of the harness; this file's check needs one too.
#![allow(clippy::duplicate_mod)]

mod common;
#[path = "launches.rs"]
mod launches;

/// The tests above run where this binary says: a simulated gfx1201, with gfx1201 code.
#[test]
fn the_rigd_serves_a_simulated_gfx1201() {
    let d = common::Daemon::start(None);
    let gpus = d.rig().gpus().unwrap();
    assert_eq!(gpus[0].arch, "gfx1201");
    assert_eq!(gpus[0].path, rig_client::GpuPath::Sim);
    // A gfx1100 build is refused there, so every launch above ran a gfx1201 build.
    let dev = d.device();
    let gfx1100 = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/out/gfx1100/add.co"),
    )
    .unwrap();
    assert!(dev.load_image(&gfx1100).is_err());
    assert!(dev.load_image(&common::code("add")).is_ok());
}
