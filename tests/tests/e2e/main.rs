//! rig's tests that cross crates, in one program: a program through rig-client, a real rigd
//! and back, on every backend a test names (`rig_testkit::on_backends!`: the simulated
//! gfx1100, gfx1201 and gfx942, and an emulated KFD's gfx1100 and gfx942 through rigd's kfd
//! path).
//! A module per subject. Each test starts a rigd of its own (`rig_testkit::Daemon`): this
//! program run again as rigd, through the hook below.

mod buffers;
mod clock;
mod compute_words;
mod container;
mod device_facts;
mod errors;
mod faults;
mod kernels_doc;
mod kfd;
mod launches;
mod lifetime;
mod lost_producer;
mod math;
mod no_alloc;
mod peer_waits;
mod placer_lock;
mod processes;
mod profile;
mod reclaim;
mod scale;
mod slabs;
mod typed_args;
mod wait_policies;

rig_testkit::serve_hook!();

/// The kit finds the worker its kfd backend's rigd runs KFD clients in where Cargo built it.
#[test]
fn the_kits_worker_is_the_one_cargo_built() {
    assert_eq!(
        rig_testkit::serve::worker(),
        std::path::Path::new(env!("CARGO_BIN_EXE_rig-tests-worker"))
    );
}
