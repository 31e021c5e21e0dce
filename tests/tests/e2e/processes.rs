//! Many clients at once: 8 processes submit 100,000 values to one rigd, each checking
//! every value reached and every result.

use std::process::Command;
use std::time::Instant;

use rig_client::{Memory, Rig, Submission};
use rig_testkit::{Backend, Daemon};

const WORKERS: u64 = 8;
const PER_WORKER: u64 = 12_500;

fn eight_processes_submit_100000_values(b: Backend) {
    let d = Daemon::start(b, None);
    let worker = rig_testkit::test_name!(worker);
    let start = Instant::now();
    let children: Vec<_> = (0..WORKERS)
        .map(|k| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    worker,
                    "--include-ignored",
                    "--test-threads=1",
                    "--nocapture",
                ])
                .env("RIG_TEST_SOCKET", d.path())
                .env("RIG_TEST_WORKER", k.to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a worker failed");
    }
    eprintln!(
        "{} submissions from {WORKERS} processes in {:?}",
        WORKERS * PER_WORKER,
        start.elapsed()
    );
}

/// One worker process: submits its values, a fill and a copy each, checks them all.
#[test]
#[ignore = "run by eight_processes_submit_100000_values"]
fn worker() {
    let (Some(socket), Some(k)) = (
        std::env::var_os("RIG_TEST_SOCKET"),
        std::env::var_os("RIG_TEST_WORKER"),
    ) else {
        return;
    };
    let k: u64 = k.to_string_lossy().parse().unwrap();
    let rig = Rig::connect_to(socket).unwrap();
    let name = rig.gpus().unwrap()[0].name.clone();
    let dev = rig.open_device(&name).unwrap();
    let slots = dev.buffer(4 * PER_WORKER, Memory::Pinned).unwrap();
    let out = dev.buffer(4 * PER_WORKER, Memory::Pinned).unwrap();
    out.write(|b| b.fill(0)).unwrap();
    let first = dev.signaled();
    let mut last = None;
    for i in 0..PER_WORKER {
        let byte = (i as u8) ^ (k as u8);
        let s = Submission::new()
            .fill(&slots, 4 * i, 4, byte)
            .copy(&slots, 4 * i, &out, 4 * i, 4);
        last = Some(dev.submit(&s).unwrap());
    }
    let last = last.unwrap();
    assert_eq!(last.value(), first + PER_WORKER);
    last.wait().unwrap();
    assert!(dev.signaled() >= first + PER_WORKER);
    let got = out.read(|b| b.to_vec()).unwrap();
    for i in 0..PER_WORKER as usize {
        let byte = (i as u8) ^ (k as u8);
        assert_eq!(&got[4 * i..4 * i + 4], &[byte; 4], "worker {k} value {i}");
    }
    dev.close().unwrap();
}

fn threads_of_one_process_share_a_device(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let per = 2000u64;
    let out = dev.buffer(4 * 4 * per, Memory::Pinned).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (dev, out) = (dev.clone(), out.clone());
            s.spawn(move || {
                let mut last = None;
                for i in 0..per {
                    let at = 4 * (t * per + i);
                    last = Some(
                        dev.submit(&Submission::new().fill(&out, at, 4, (t * 7 + i) as u8))
                            .unwrap(),
                    );
                }
                last.unwrap().wait().unwrap();
            });
        }
    });
    let got = out.read(|b| b.to_vec()).unwrap();
    for t in 0..4u64 {
        for i in 0..per {
            let at = (4 * (t * per + i)) as usize;
            assert_eq!(&got[at..at + 4], &[(t * 7 + i) as u8; 4]);
        }
    }
}

rig_testkit::on_backends!(sim, kfd, gfx942, kfd_gfx942 =>
    eight_processes_submit_100000_values,
    threads_of_one_process_share_a_device,
);
