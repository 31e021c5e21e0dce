//! The client's errors keep what they wrap: the OS error of a failed connection, the
//! protocol's code of a refusal, the numbers of an out-of-memory answer.

use std::error::Error as _;

use rig_client::{Error, Rig};

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
