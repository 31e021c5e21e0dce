//! Buffers cut from slabs (rig-client's `slab`), checked from rigd's side: small buffers
//! come and go without rigd making regions, they never overlap, keep their bytes while
//! neighbours come and go, read as zero when their pages come back, wait for their work
//! before their pages are reused; large buffers still take the round trip, quota errors
//! still name the limit, and idle slabs go back to rigd.

use std::time::Duration;

use rig_client::{Buffer, Device, Error, HostMemory, Launch, Memory, Ref, Rig, SLABS, Submission};
use rig_testkit::{Backend, Daemon, Inspector, pattern};

const SLAB_BYTES: u64 = SLABS.slab_bytes;
const SLAB_MOST: u64 = SLABS.most;
const IDLE_SLABS: usize = SLABS.idle_slabs;
use rig_proto::messages::DeviceReport;

/// A device of its own connection, the connection (to flush posted frees), and the
/// inspector's view of it.
fn open(d: &Daemon) -> (Rig, Device, Inspector) {
    let rig = d.rig();
    let dev = rig.open_device("0").unwrap();
    (rig, dev, Inspector::connect(d))
}

/// rigd's report once it read every request posted before (a call on the same
/// connection answers after them). The device ran no work, so what it freed left
/// quarantine at once.
fn report(rig: &Rig, dev: &Device, inspect: &mut Inspector) -> DeviceReport {
    rig.gpus().unwrap();
    inspect.report(rig_proto::DeviceId(dev.id()))
}

/// Allocates `n` bytes of `kind` until a buffer lands at `at` (clean pages are cut
/// first), keeping the others in `keep`.
fn buffer_at(dev: &Device, n: u64, kind: Memory, at: u64, keep: &mut Vec<Buffer>) -> Buffer {
    loop {
        let b = dev.buffer(n, kind).unwrap();
        if b.address() == at {
            return b;
        }
        keep.push(b);
        assert!(
            keep.len() as u64 <= 4 * SLAB_BYTES / n,
            "{kind:?}: the pages at {at:#x} never came back"
        );
    }
}

#[test]
fn many_small_buffers_come_and_go_within_one_slab_per_kind() {
    let d = Daemon::start(Backend::Sim, None);
    let (rig, dev, mut inspect) = open(&d);
    let base = report(&rig, &dev, &mut inspect);
    // Sixteen live 64 KiB buffers of each kind: one slab each, not sixteen regions.
    let kinds = [Memory::Device, Memory::Pinned, Memory::Mapped];
    let live: Vec<Buffer> = kinds
        .iter()
        .flat_map(|&m| (0..16).map(move |_| (m, 64 << 10)))
        .map(|(m, n)| dev.buffer(n, m).unwrap())
        .collect();
    let held = report(&rig, &dev, &mut inspect);
    assert_eq!(
        held.regions,
        base.regions + 3,
        "48 buffers of 3 kinds made {} regions",
        held.regions - base.regions
    );
    drop(live);
    // A thousand allocations and frees of 4 KiB to 1 MiB make none.
    for i in 0..1000u64 {
        let n = 4096 << (i % 9);
        let b = dev.buffer(n, kinds[i as usize % 3]).unwrap();
        assert_eq!(b.len(), n);
    }
    let after = report(&rig, &dev, &mut inspect);
    assert_eq!(
        after.regions, held.regions,
        "the cycles made or freed regions"
    );
    assert_eq!(after.info.memory, held.info.memory);
}

/// The bytes of `b`, read as the program reads them.
fn bytes(b: &Buffer) -> Vec<u8> {
    b.read(|x| x.to_vec()).unwrap()
}

#[test]
fn buffers_never_overlap_keep_their_bytes_and_start_zeroed() {
    let d = Daemon::start(Backend::Sim, None);
    let dev = d.device();
    for (kind, ops) in [
        (Memory::Pinned, 300u64),
        (Memory::Mapped, 300),
        (Memory::Device, 60),
    ] {
        let mut live: Vec<(Buffer, Vec<u8>)> = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64 ^ ops;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for op in 0..ops {
            let r = next();
            if r % 3 == 0 && !live.is_empty() {
                let i = (r as usize / 3) % live.len();
                live.swap_remove(i);
                continue;
            }
            // Mostly small, some up to the largest size cut from a slab, odd lengths.
            let n = if r % 7 == 0 {
                SLAB_MOST - (r >> 40) % 4096
            } else {
                1 + (r >> 20) % (64 << 10)
            };
            let b = dev.buffer(n, kind).unwrap();
            assert!(
                b.address() % 4096 == 0,
                "{kind:?} buffer at {:#x}",
                b.address()
            );
            for (o, _) in &live {
                assert!(
                    o.address() + o.len() <= b.address() || b.address() + b.len() <= o.address(),
                    "{kind:?}: {n} bytes at {:#x} overlap {} at {:#x}",
                    b.address(),
                    o.len(),
                    o.address()
                );
            }
            assert!(
                bytes(&b).iter().all(|&v| v == 0),
                "{kind:?}: a new buffer of {n} bytes holds old bytes"
            );
            let data = pattern(op, n as usize);
            b.write_at(0, &data).unwrap();
            live.push((b, data));
            if op % 16 == 0 {
                for (b, data) in &live {
                    assert!(
                        bytes(b) == *data,
                        "{kind:?}: a neighbour's free changed a buffer"
                    );
                }
            }
        }
        for (b, data) in &live {
            assert!(bytes(b) == *data, "{kind:?}: a buffer lost its bytes");
        }
    }
}

#[test]
fn pages_written_by_the_gpu_or_the_host_are_zero_when_cut_again() {
    let d = Daemon::start(Backend::Sim, None);
    let dev = d.device();
    for kind in [Memory::Device, Memory::Pinned, Memory::Mapped] {
        let n = 64 << 10;
        let keep = dev.buffer(4096, kind).unwrap();
        // Written by the GPU: a fill.
        let b = dev.buffer(n, kind).unwrap();
        let at = b.address();
        dev.submit(&Submission::new().fill(&b, 0, n, 0xab))
            .unwrap()
            .wait()
            .unwrap();
        drop(b);
        let mut others = Vec::new();
        let again = buffer_at(&dev, n, kind, at, &mut others);
        assert!(
            bytes(&again).iter().all(|&v| v == 0),
            "{kind:?}: the GPU's bytes leaked"
        );
        // Written by the host.
        again.write_at(100, &[7; 3000]).unwrap();
        drop(again);
        let third = buffer_at(&dev, n, kind, at, &mut others);
        assert!(
            bytes(&third).iter().all(|&v| v == 0),
            "{kind:?}: the host's bytes leaked"
        );
        drop((keep, others));
    }
}

#[test]
fn a_buffer_dropped_with_work_in_flight_keeps_its_pages_until_the_work_ends() {
    let Some(spin) = Backend::Sim.spin_kernel() else {
        return;
    };
    let d = Daemon::start(Backend::Sim, None);
    let dev = d.device();
    let k = dev.load_image(&spin).unwrap().resolve("spin").unwrap();
    let host = HostMemory::new("flag", 4096).unwrap();
    let flag = dev.map_host(&host, 0, 4096).unwrap();
    let b = dev.buffer(4096, Memory::Pinned).unwrap();
    let at = b.address();
    // The launch spins until the flag is set; the fill of b is part of the same value.
    let s = Submission::new()
        .launch(
            Launch::new(&k, [1; 3], [1; 3])
                .params(&[0; 8])
                .refs(&[Ref::write(&flag, 0)]),
        )
        .fill(&b, 0, 4096, 0xcd);
    let point = dev.submit(&s).unwrap();
    drop((b, s));
    // More live buffers than b's slab holds: none is cut from b's pages.
    let mut others: Vec<Buffer> = Vec::new();
    for _ in 0..SLAB_BYTES / 4096 + 64 {
        let other = dev.buffer(4096, Memory::Pinned).unwrap();
        assert_ne!(other.address(), at, "b's pages were cut while its work ran");
        others.push(other);
    }
    assert!(!point.signaled());
    host.atomic_u32(0)
        .unwrap()
        .store(1, std::sync::atomic::Ordering::Release);
    point.wait().unwrap();
    // One buffer keeps b's slab in use (an idle one may go back to rigd).
    others.truncate(1);
    let mut keep = Vec::new();
    let after = buffer_at(&dev, 4096, Memory::Pinned, at, &mut keep);
    assert!(
        bytes(&after).iter().all(|&v| v == 0),
        "the fill's bytes leaked"
    );
}

#[test]
fn a_large_buffer_is_a_region_of_its_own() {
    let d = Daemon::start(Backend::Sim, None);
    let (rig, dev, mut inspect) = open(&d);
    let base = report(&rig, &dev, &mut inspect);
    let a = dev.buffer(SLAB_MOST, Memory::Pinned).unwrap();
    let b = dev.buffer(SLAB_MOST, Memory::Pinned).unwrap();
    assert_eq!(
        report(&rig, &dev, &mut inspect).regions,
        base.regions + 1,
        "two buffers of SLAB_MOST bytes share a slab"
    );
    let large = dev.buffer(SLAB_MOST + 1, Memory::Pinned).unwrap();
    let with_large = report(&rig, &dev, &mut inspect);
    assert_eq!(with_large.regions, base.regions + 2);
    assert_eq!(
        with_large.info.memory.pinned,
        base.info.memory.pinned + SLAB_BYTES + SLAB_MOST + 4096,
        "the large buffer's region is its own size, rounded to pages"
    );
    drop(large);
    assert_eq!(report(&rig, &dev, &mut inspect).regions, base.regions + 1);
    drop((a, b));
}

/// The room the quota leaves `dev` for Device memory: asked of rigd with a request too
/// large for any limit.
fn device_room(dev: &Device) -> (u64, String) {
    let mut asked = 1u64 << 40;
    let mut name = String::new();
    // Each refusal names one limit; the room it leaves may be refused by the next.
    for _ in 0..8 {
        match dev.buffer(asked, Memory::Device) {
            Ok(_) => return (asked, name),
            Err(Error::OutOfMemory {
                limit: Some(l),
                asked: a,
                ..
            }) => {
                assert_eq!(a, asked);
                // missing = held + asked - value
                asked = l.value() - (l.missing() + l.value() - asked);
                name = l.name().to_owned();
            }
            r => panic!("{asked} bytes of Device memory answered {r:?}"),
        }
    }
    panic!("no room found under the limits")
}

#[test]
fn memory_running_out_is_still_the_typed_error_naming_the_limit() {
    let d = Daemon::start(Backend::Sim, None);
    let dev = d.device();
    let (room, limit) = device_room(&dev);
    // Leave less than a slab: small buffers then take regions of their own, until none fits.
    let big = dev.buffer(room - 3 * 64 * 1024, Memory::Device).unwrap();
    let mut small = Vec::new();
    let e = loop {
        match dev.buffer(64 * 1024, Memory::Device) {
            Ok(b) => small.push(b),
            Err(e) => break e,
        }
        assert!(
            small.len() <= 3,
            "the quota let {} buffers through",
            small.len()
        );
    };
    assert_eq!(small.len(), 3, "the room left held three buffers");
    let Error::OutOfMemory {
        asked,
        limit: Some(l),
        ..
    } = &e
    else {
        panic!("the quota's refusal became {e:?}");
    };
    assert_eq!(*asked, 64 * 1024);
    assert_eq!(l.name(), limit);
    assert!(e.to_string().contains(&limit), "{e}");
    drop((big, small));
}

#[test]
fn idle_slabs_go_back_before_memory_runs_out() {
    let d = Daemon::start(Backend::Sim, None);
    let dev = d.device();
    let (room, _) = device_room(&dev);
    // A slab, idle once its buffer dropped, holds SLAB_BYTES of the room.
    drop(dev.buffer(4096, Memory::Device).unwrap());
    let whole = dev.buffer(room, Memory::Device);
    assert!(
        whole.is_ok(),
        "the idle slab kept the room from a buffer: {:?}",
        whole.err()
    );
}

#[test]
fn idle_slabs_go_back_to_rigd() {
    let d = Daemon::start(Backend::Sim, None);
    let (rig, dev, mut inspect) = open(&d);
    let base = report(&rig, &dev, &mut inspect);
    // Three slabs of Pinned memory, full.
    let per = (SLAB_BYTES / SLAB_MOST) as usize;
    let full: Vec<Buffer> = (0..3 * per)
        .map(|_| dev.buffer(SLAB_MOST, Memory::Pinned).unwrap())
        .collect();
    assert_eq!(report(&rig, &dev, &mut inspect).regions, base.regions + 3);
    // Idle, the device keeps IDLE_SLABS of them.
    drop(full);
    let idle = report(&rig, &dev, &mut inspect);
    assert_eq!(idle.regions, base.regions + IDLE_SLABS as u32);
    assert_eq!(
        idle.info.memory.pinned,
        base.info.memory.pinned + IDLE_SLABS as u64 * SLAB_BYTES
    );
    // Past SLABS.idle, the next allocation (of another kind: a new slab) gives it back too.
    std::thread::sleep(SLABS.idle + Duration::from_millis(50));
    let b = dev.buffer(4096, Memory::Device).unwrap();
    let later = report(&rig, &dev, &mut inspect);
    assert_eq!(later.regions, base.regions + 1);
    assert_eq!(later.info.memory.pinned, base.info.memory.pinned);
    // trim gives back what is idle at once.
    drop(b);
    assert_eq!(report(&rig, &dev, &mut inspect).regions, base.regions + 1);
    assert_eq!(dev.trim(), 1);
    assert_eq!(report(&rig, &dev, &mut inspect).regions, base.regions);
}

#[test]
fn hostile_sizes_are_buffers_or_typed_errors() {
    let d = Daemon::start(Backend::Sim, None);
    let dev = d.device();
    let sizes = [
        0,
        1,
        3,
        4095,
        4097,
        SLAB_MOST - 1,
        SLAB_MOST,
        SLAB_MOST + 1,
        SLAB_BYTES,
        1 << 63,
        u64::MAX - 4096,
        u64::MAX - 3,
        u64::MAX,
    ];
    for memory in [Memory::Device, Memory::Pinned, Memory::Mapped] {
        for n in sizes {
            match dev.buffer(n, memory) {
                Ok(b) => {
                    assert_eq!(b.len(), n);
                    assert_eq!(b.address() % 4096, 0, "{n} bytes of {memory:?}");
                }
                Err(Error::Invalid(why)) => {
                    assert!(why.contains(&n.to_string()) || n == 0, "{why}")
                }
                Err(Error::Unsupported { reason, .. }) => {
                    assert!(reason.contains(&n.to_string()), "{reason}")
                }
                Err(Error::OutOfMemory { asked, .. }) => assert!(asked >= n, "{asked} for {n}"),
                Err(e) => panic!("{n} bytes of {memory:?}: {e:?}"),
            }
        }
    }
}

#[test]
fn threads_cutting_from_one_device_never_share_pages() {
    let d = Daemon::start(Backend::Sim, None);
    let dev = d.device();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let dev = dev.clone();
            std::thread::spawn(move || {
                let mut live: Vec<(Buffer, Vec<u8>)> = Vec::new();
                for i in 0..200u64 {
                    if i % 3 == 2 {
                        live.swap_remove((i as usize * 7) % live.len());
                        continue;
                    }
                    let n = 1 + (t * 7919 + i * 104_729) % (256 << 10);
                    let b = dev.buffer(n, Memory::Pinned).unwrap();
                    let data = pattern(t << 32 | i, n as usize);
                    b.write_at(0, &data).unwrap();
                    live.push((b, data));
                }
                for (b, data) in &live {
                    assert!(
                        bytes(b) == *data,
                        "another thread's buffer wrote this one's"
                    );
                }
                live.into_iter().map(|(b, _)| b).collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all: Vec<Buffer> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort_by_key(Buffer::address);
    for w in all.windows(2) {
        assert!(
            w[0].address() + w[0].len() <= w[1].address(),
            "{} bytes at {:#x} overlap the buffer at {:#x}",
            w[0].len(),
            w[0].address(),
            w[1].address()
        );
    }
}
