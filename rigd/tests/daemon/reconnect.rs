//! A user who closes its connections, or whose client dies, connects again at once: the
//! slots (`connections.per_uid`) of connections whose sockets are closed are never counted
//! against it, whatever their devices' teardown still does.
//!
//! One test in this binary: a child process forked by another test running beside it
//! would hold a copy of this test's sockets until it execs, so "closed" would not be.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use rig_proto::messages::{Request, Response};
use rig_testkit::rigd::Rigd;

/// `connections.per_uid`: every connection of the user holds a device.
const PER_UID: usize = 8;

/// Opens `PER_UID` connections at once, each asked for the GPUs, and returns rigd's
/// refusals. All are held until the last is answered, so each counts against the cap
/// while the next connects.
fn refusals_of_a_full_set(d: &Rigd) -> Vec<String> {
    let mut held = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..PER_UID {
        match rig_proto::Connection::connect(&d.socket, "again") {
            Ok(mut c) => {
                assert!(matches!(
                    c.call(&Request::ListGpus, &[]),
                    Ok((Response::Gpus(_), _))
                ));
                held.push(c);
            }
            Err(rig_proto::Error::Refused(e)) => refused.push(e.message),
            Err(e) => panic!("connect: {e}"),
        }
    }
    refused
}

/// The child half: opens `RIGD_TEST_COUNT` connections with a device each, says so, and
/// waits to be killed.
#[test]
fn child_hold_devices() {
    let Ok(socket) = std::env::var("RIGD_TEST_DEVICES") else {
        return;
    };
    let count: usize = std::env::var("RIGD_TEST_COUNT").unwrap().parse().unwrap();
    let mut held = Vec::new();
    for _ in 0..count {
        let mut c = rig_proto::Connection::connect(&socket, "killed").unwrap();
        let (r, fds) = c.call(&Request::OpenDevice { gpu: 0 }, &[]).unwrap();
        assert!(matches!(r, Response::DeviceOpened(_)), "{r:?}");
        held.push((c, fds));
    }
    println!("\nHOLDING");
    std::io::stdout().flush().unwrap();
    // Until killed: its stdin never closes before.
    let _ = std::io::stdin().read_line(&mut String::new());
    drop(held);
}

/// Starts the child holding `PER_UID` devices, waits until it holds them, and kills it
/// (-9): once reaped, its sockets are closed.
fn kill_a_client_holding_devices(d: &Rigd) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            rig_testkit::test_name!(child_hold_devices),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RIGD_TEST_DEVICES", &d.socket)
        .env("RIGD_TEST_COUNT", PER_UID.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    // The child prints the line or exits (a failed open), which ends its output.
    let holding = stdout.lines().map_while(Result::ok).any(|l| l == "HOLDING");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(holding, "the child did not open its devices");
}

#[test]
fn closed_and_killed_clients_give_their_slots_back_at_once() {
    let d = Rigd::start(&format!(
        "[connections]\nper_uid = {PER_UID}\nidle_ms = 0\n{}",
        rig_testkit::rigd::SIM
    ));
    for round in 0..3 {
        let mut clients: Vec<_> = (0..PER_UID).map(|_| d.client("first")).collect();
        // Each holds a device, whose teardown (its queues' threads joined) follows the close.
        let devices: Vec<_> = clients.iter_mut().map(|c| c.open()).collect();
        drop(devices);
        drop(clients);
        // Their sockets are closed: every slot is free for the next connections, at once.
        let refused = refusals_of_a_full_set(&d);
        assert!(
            refused.is_empty(),
            "closed, round {round}: refused {refused:?}"
        );
    }
    for round in 0..3 {
        kill_a_client_holding_devices(&d);
        let refused = refusals_of_a_full_set(&d);
        assert!(
            refused.is_empty(),
            "killed, round {round}: refused {refused:?}"
        );
    }
}
