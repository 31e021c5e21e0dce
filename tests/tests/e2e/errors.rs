//! The client's errors keep what they wrap: the OS error of a failed connection, the
//! protocol's code of a refusal, the numbers of an out-of-memory answer.

use std::error::Error as _;

use rig_client::{Error, Rig};

/// No rigd: the same on every backend.
#[test]
fn a_failed_connect_keeps_the_os_error_as_its_source() {
    let path = std::env::temp_dir().join(format!("rig-no-rigd-{}.sock", std::process::id()));
    let e = Rig::connect_to(&path).unwrap_err();
    assert!(matches!(e, Error::Connect { .. }), "{e:?}");
    // The chain reaches the system's error: rig-proto's Connect, then the io::Error.
    let mut source = e.source();
    let mut io = None;
    while let Some(s) = source {
        if let Some(i) = s.downcast_ref::<std::io::Error>() {
            io = Some(i.kind());
        }
        source = s.source();
    }
    assert_eq!(io, Some(std::io::ErrorKind::NotFound), "{e:?}");
}

use rig_client::Memory;
use rig_testkit::{Backend, Daemon};

fn a_refusal_keeps_the_protocol_code(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    match dev.load_image(b"not a code object") {
        Err(Error::Refused { code, message }) => {
            assert_eq!(code, rig_client::Refusal::ImageRefused, "{message}");
        }
        r => panic!("loading garbage returned {r:?}"),
    }
}

fn out_of_memory_says_what_was_asked_what_is_missing_and_which_limit(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let asked = 16u64 << 30;
    let e = dev.buffer(asked, Memory::Device).unwrap_err();
    let Error::OutOfMemory {
        asked: a,
        shortage,
        limit,
        ..
    } = &e
    else {
        panic!("a 16 GiB allocation returned {e:?}")
    };
    assert_eq!(*a, asked);
    let said = e.to_string();
    // The request's figure is the one asked, never the shortfall.
    assert!(said.contains(&format!("{asked} bytes asked")), "{said}");
    match (shortage, limit) {
        (rig_client::Shortage::Quota, Some(l)) => {
            assert!(l.missing() > 0 && l.missing() <= asked, "{said}");
            assert!(
                said.ends_with(&format!(
                    "refused by the quota: {} bytes missing under {} ({} bytes)",
                    l.missing(),
                    l.name(),
                    l.value()
                )),
                "{said}"
            );
        }
        (rig_client::Shortage::Gpu, None) => {
            assert!(said.ends_with("refused by the GPU's memory"), "{said}")
        }
        other => panic!("{other:?}: {said}"),
    }
}

fn a_connection_rigd_dropped_keeps_its_error_as_the_source(b: Backend) {
    let mut d = Daemon::start(b, None);
    let rig = d.rig();
    // A device keeps the connection from being dialled anew.
    let _dev = rig.open_device("0").unwrap();
    d.crash();
    let e = rig.gpus().unwrap_err();
    assert!(matches!(e, Error::Connection(_)), "{e:?}");
    assert!(
        e.source()
            .is_some_and(|s| s.downcast_ref::<rig_proto::Error>().is_some()),
        "{e:?}"
    );
}

rig_testkit::on_backends!(sim, kfd, gfx942, kfd_gfx942 =>
    a_refusal_keeps_the_protocol_code,
    out_of_memory_says_what_was_asked_what_is_missing_and_which_limit,
    a_connection_rigd_dropped_keeps_its_error_as_the_source,
);
