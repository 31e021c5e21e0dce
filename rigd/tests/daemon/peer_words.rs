//! `MapPeerWord`: another device's timeline word mapped read-only into a device's address
//! space, against the real rigd binary serving two simulated GPUs.

use rig_proto::messages::{DeviceId, ErrorCode, Request, Response};
use rig_testkit::rigd::{Rigd, code};

const TWO_GPUS: &str = "[access]\nany = true\n\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 268435456\nhang_ms = 300\n\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 268435456\nhang_ms = 300\n";

fn open_on(c: &mut rig_testkit::rigd::Client, gpu: u32) -> rig_testkit::rigd::Opened {
    match c.call_fds(Request::OpenDevice { gpu }, &[]) {
        (Response::DeviceOpened(d), fds) => rig_testkit::rigd::Opened { msg: *d, fds },
        (other, _) => panic!("open failed: {other:?}"),
    }
}

fn peer_word(c: &mut rig_testkit::rigd::Client, device: DeviceId, peer: DeviceId) -> Response {
    c.call(Request::MapPeerWord { device, peer })
}

#[test]
fn peer_words_map_once_and_refuse_what_they_must() {
    let d = Rigd::start(TWO_GPUS);
    let mut c = d.client("t");
    let a = open_on(&mut c, 0);
    let b = open_on(&mut c, 0);
    let far = open_on(&mut c, 1);
    let held =
        |c: &mut rig_testkit::rigd::Client, id| match c.call(Request::ShowDevice { device: id }) {
            Response::Device(r) => r.info.memory,
            other => panic!("{other:?}"),
        };
    let before = held(&mut c, a.id());

    // Happy path: an address of A's space, not A's own word, the same on a second ask.
    let Response::PeerWord { gpu_address } = peer_word(&mut c, a.id(), b.id()) else {
        panic!("no peer word")
    };
    assert_eq!(gpu_address % 8, 0);
    assert_ne!(gpu_address, a.msg.facts.word);
    assert_eq!(
        peer_word(&mut c, a.id(), b.id()),
        Response::PeerWord { gpu_address }
    );
    // The mapping is B's page, not memory A holds.
    assert_eq!(held(&mut c, a.id()), before);
    // A device's own word is its facts' word.
    assert_eq!(
        peer_word(&mut c, a.id(), a.id()),
        Response::PeerWord {
            gpu_address: a.msg.facts.word
        }
    );

    // Another simulated GPU does not reach the word: the client waits on the host.
    assert!(matches!(
        peer_word(&mut c, a.id(), far.id()),
        Response::Never { .. }
    ));
    // Unknown devices, and devices of another client.
    assert_eq!(
        code(&peer_word(&mut c, a.id(), DeviceId(999))),
        Some(ErrorCode::NoSuchDevice)
    );
    assert_eq!(
        code(&peer_word(&mut c, DeviceId(999), b.id())),
        Some(ErrorCode::NoSuchDevice)
    );
    let mut other = d.client("other");
    let theirs = open_on(&mut other, 0);
    assert_eq!(
        code(&peer_word(&mut c, a.id(), theirs.id())),
        Some(ErrorCode::NoSuchDevice)
    );
    assert_eq!(
        code(&peer_word(&mut other, theirs.id(), a.id())),
        Some(ErrorCode::NoSuchDevice)
    );

    // A stopped peer still maps (its word keeps its last value); a stopped device does not.
    let s = open_on(&mut c, 0);
    assert_eq!(
        c.call(Request::StopDevice {
            device: s.id(),
            last: 0,
            fault: None
        }),
        Response::Done
    );
    assert!(matches!(
        peer_word(&mut c, a.id(), s.id()),
        Response::PeerWord { .. }
    ));
    assert_eq!(
        code(&peer_word(&mut c, s.id(), a.id())),
        Some(ErrorCode::Stopped)
    );

    // The peer closes: the mapping stays with A, and rigd keeps serving both.
    assert_eq!(
        c.call(Request::CloseDevice { device: b.id() }),
        Response::Done
    );
    assert_eq!(
        code(&peer_word(&mut c, a.id(), b.id())),
        Some(ErrorCode::NoSuchDevice)
    );
    assert!(matches!(
        c.call(Request::DeviceStatus { device: a.id() }),
        Response::Status(_)
    ));
    assert_eq!(
        c.call(Request::CloseDevice { device: a.id() }),
        Response::Done
    );
    // Everything went back with the devices.
    drop(other);
    drop(c);
    let mut ctl = d.client("ctl");
    assert!(rig_testkit::rigd::holds_within(
        std::time::Duration::from_secs(5),
        || { matches!(ctl.call(Request::ListDevices), Response::Devices(v) if v.is_empty()) }
    ));
}

#[test]
fn a_broken_connection_gives_back_mapped_peer_words() {
    let d = Rigd::start(TWO_GPUS);
    let mut c = d.client("t");
    let a = open_on(&mut c, 0);
    let b = open_on(&mut c, 0);
    // Each maps the other's word, so whichever goes back first, the other still holds it.
    for (x, y) in [(a.id(), b.id()), (b.id(), a.id())] {
        assert!(matches!(peer_word(&mut c, x, y), Response::PeerWord { .. }));
    }
    // The connection breaks with no close: rigd gives back everything of that client.
    drop(c);
    let mut ctl = d.client("ctl");
    assert!(rig_testkit::rigd::holds_within(
        std::time::Duration::from_secs(5),
        || { matches!(ctl.call(Request::ListDevices), Response::Devices(v) if v.is_empty()) }
    ));
    // rigd still serves.
    let x = open_on(&mut ctl, 0);
    let y = open_on(&mut ctl, 0);
    assert!(matches!(
        peer_word(&mut ctl, x.id(), y.id()),
        Response::PeerWord { .. }
    ));
}
