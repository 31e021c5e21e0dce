//! rigd's integration tests, in one program: a module per subject. Most start the real
//! `rigd` program with a configuration of their own (`rig_testkit::rigd::Rigd`) and speak
//! rig-proto to it; the path tests (kfd_path, kfd_worker, the discoveries) drive rigd's
//! library in this process. A test that must run in a process of its own (as another user,
//! or as a client killed mid-request) runs this program again with libtest's arguments
//! naming it alone (`rig_testkit::test_name!`).

mod bombs;
mod work;

mod amplification;
mod blocking;
mod check;
mod client_strings;
mod connections;
mod frames;
mod grants;
mod hostile_images;
mod kfd_discovery;
mod kfd_path;
mod kfd_worker;
mod logs;
mod metrics;
mod peer_words;
mod queue_slots;
mod reconnect;
mod requests;
mod roles;
mod seals;
mod sessions;
mod signals;
mod systemd;
mod tenants;
mod unknown_stop;
mod vfio_discovery;

/// The kit starts the rigd program Cargo built for these tests.
#[test]
fn the_kits_rigd_is_the_one_cargo_built() {
    assert_eq!(
        rig_testkit::rigd::program(),
        std::path::Path::new(env!("CARGO_BIN_EXE_rigd"))
    );
}
