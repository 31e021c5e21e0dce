//! Tenants cannot harm each other: the attacks of issue 15 that rigd itself answers, each
//! against the real rigd binary with raw rig-proto requests and packets written by hand.
//!
//! - memory freed with work in flight is not given to another client (both directions);
//! - huge sparse memfds passed to `MapHost` map only what was charged;
//! - descriptors within the memory quota are bounded, with the limit named, and peer-word
//!   mappings are given back when a device closes;
//! - a self-chained indirect buffer with no submitted value is lost within the hang bound;
//! - quotas hold per user across connections, a user holds at most its share of a GPU, and
//!   Mapped memory takes from VRAM.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rig_amd::sdma;
use rig_proto::messages::{
    DeviceId, ErrorCode, MemoryKind, QueueShare, RegionId, Request, Response, Shortage,
};
use rig_shm::{Doorbell, SharedRegion};
use rig_testkit::rigd::{Client, Opened, Rigd, SIM, code, holds_within};

const MIB: u64 = 1 << 20;

/// A queue of a device the test drives itself: packets placed with stores, the write
/// position published, the doorbell rung.
struct Ring {
    ring: SharedRegion,
    ring_off: u64,
    ring_bytes: u64,
    write_off: u64,
    bell: Doorbell,
    /// The write position, in the queue's units (bytes on SDMA, dwords on PM4).
    wptr: u64,
    unit: u64,
}

impl Ring {
    fn on(o: &Opened, q: &QueueShare, unit: u64) -> Ring {
        let region = |i: rig_proto::messages::FdIndex| {
            SharedRegion::from_fd(o.fds[i.0 as usize].try_clone().unwrap()).unwrap()
        };
        Ring {
            ring: region(q.ring.host.fd),
            ring_off: q.ring.host.offset,
            ring_bytes: q.ring.host.bytes,
            write_off: q.write.host.offset,
            bell: Doorbell::new(region(q.doorbell.fd), q.doorbell.offset as usize).unwrap(),
            wptr: 0,
            unit,
        }
    }

    fn push(&mut self, words: &[u32]) {
        for w in words {
            let at = self.ring_off + (self.wptr * self.unit) % self.ring_bytes;
            self.ring.store_u32(at as usize, *w, Ordering::Relaxed);
            self.wptr += 4 / self.unit;
        }
    }

    fn kick(&mut self) {
        self.ring
            .store_u64(self.write_off as usize, self.wptr, Ordering::Release);
        self.bell.ring(self.wptr);
    }
}

/// A device's copy queue with its timeline word.
struct Copier {
    ring: Ring,
    control: SharedRegion,
    submitted_off: u64,
    word_off: u64,
    word_gpu: u64,
    layout: sdma::Layout,
    most: u64,
    value: u64,
    id: DeviceId,
}

impl Copier {
    fn new(o: &Opened) -> Copier {
        let v = o.msg.facts.sdma;
        Copier {
            ring: Ring::on(o, &o.msg.copy, 1),
            control: o.region(o.msg.submitted.fd),
            submitted_off: o.msg.submitted.offset,
            word_off: o.msg.word.memory.host.offset,
            word_gpu: o.msg.word.memory.gpu_address,
            layout: sdma::Layout::of(rig_amd::gpu::IpVersion::new(v.major, v.minor, v.stepping)),
            most: o.msg.facts.linear_copy_bytes.min(16 * MIB),
            value: o.msg.word.first,
            id: o.id(),
        }
    }

    fn copy(&mut self, src: u64, dst: u64, bytes: u64) {
        let mut at = 0;
        while at < bytes {
            let n = (bytes - at).min(self.most);
            let mut w = [0u32; sdma::CopyLinear::WORDS];
            sdma::CopyLinear::new(src + at, dst + at, n)
                .encode(self.layout, &mut w)
                .unwrap();
            self.ring.push(&w);
            at += n;
        }
    }

    fn fill(&mut self, dst: u64, value: u32, bytes: u64) {
        let mut at = 0;
        while at < bytes {
            let n = (bytes - at).min(self.most);
            let mut w = [0u32; sdma::ConstFill::WORDS];
            sdma::ConstFill {
                fill_size: 2,
                dst: dst + at,
                value,
                bytes: n,
            }
            .encode(self.layout, &mut w)
            .unwrap();
            self.ring.push(&w);
            at += n;
        }
    }

    /// Ends the work pushed so far with a fence of the next value, publishes it as
    /// submitted and rings; returns the value.
    fn submit(&mut self) -> u64 {
        self.value += 1;
        let mut w = [0u32; sdma::Fence::WORDS];
        sdma::Fence {
            mtype: sdma::FENCE_MTYPE_UC,
            address: self.word_gpu,
            value: u32::try_from(self.value).unwrap(),
        }
        .encode(&mut w)
        .unwrap();
        self.ring.push(&w);
        self.control
            .store_u64(self.submitted_off as usize, self.value, Ordering::Release);
        self.ring.kick();
        self.value
    }

    /// As [`Copier::submit`], but leaves `submitted` as it was, as an attacker may.
    fn submit_unpublished(&mut self) -> u64 {
        let before = self
            .control
            .load_u64(self.submitted_off as usize, Ordering::Acquire);
        self.value += 1;
        let mut w = [0u32; sdma::Fence::WORDS];
        sdma::Fence {
            mtype: sdma::FENCE_MTYPE_UC,
            address: self.word_gpu,
            value: u32::try_from(self.value).unwrap(),
        }
        .encode(&mut w)
        .unwrap();
        self.ring.push(&w);
        self.control
            .store_u64(self.submitted_off as usize, before, Ordering::Release);
        self.ring.kick();
        self.value
    }

    fn word(&self) -> u64 {
        self.control
            .load_u64(self.word_off as usize, Ordering::Acquire)
    }
}

fn lost(c: &mut Client, id: DeviceId) -> bool {
    matches!(c.call(Request::DeviceStatus { device: id }), Response::Status(s) if s.lost.is_some())
}

/// Waits until device `id`'s word reached `value` or the device is lost.
fn settle(c: &mut Client, k: &Copier, value: u64) {
    assert!(
        holds_within(Duration::from_secs(20), || k.word() >= value
            || lost(c, k.id)),
        "device {} neither reached {value} nor was lost",
        k.id.0
    );
}

/// Allocates; returns the region, its GPU address and its host view if any.
fn alloc(
    c: &mut Client,
    device: DeviceId,
    memory: MemoryKind,
    bytes: u64,
) -> (RegionId, u64, Option<SharedRegion>) {
    let (r, fds) = c.call_fds(
        Request::Alloc {
            device,
            memory,
            bytes,
        },
        &[],
    );
    let Response::Allocated {
        region,
        gpu_address,
        host,
    } = r
    else {
        panic!("alloc of {bytes} bytes of {memory:?}: {r:?}")
    };
    let view = host.map(|h| {
        let fd = fds[h.fd.0 as usize].try_clone().unwrap();
        SharedRegion::from_fd(fd).unwrap()
    });
    (region, gpu_address, view)
}

fn free(c: &mut Client, device: DeviceId, region: RegionId) {
    assert_eq!(c.call(Request::Free { device, region }), Response::Done);
}

/// Bytes of `r`'s first `bytes` that equal `byte`.
fn count_byte(r: &SharedRegion, bytes: u64, byte: u8) -> u64 {
    let mut buf = vec![0u8; MIB as usize];
    let mut n = 0;
    let mut at = 0;
    while at < bytes {
        r.read(at as usize, &mut buf);
        n += buf.iter().filter(|b| **b == byte).count() as u64;
        at += MIB;
    }
    n
}

/// An open device of `c` with its copier; reopened when lost.
fn open_copier(c: &mut Client) -> (Opened, Copier) {
    let o = c.open();
    let k = Copier::new(&o);
    (o, k)
}

const ROUNDS: usize = 6;
/// A simulated GPU whose hang bound leaves room for 64 MiB copies on a busy machine.
const SLOW_SIM: &str = "[access]\nany = true\n\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\nhang_ms = 10000\n";
const BIG: u64 = 64 * MIB;

#[test]
fn freed_memory_is_not_given_away_while_a_copy_writes_it() {
    let d = Rigd::start(SLOW_SIM);
    let mut a = d.client("attacker");
    let mut b = d.client("victim");
    let (mut ao, mut ak) = open_copier(&mut a);
    let (bo, mut bk) = open_copier(&mut b);
    let (_, b_pin, b_view) = alloc(&mut b, bo.id(), MemoryKind::Pinned, BIG);
    let b_view = b_view.unwrap();
    let (_, mut a_src, a_view) = alloc(&mut a, ao.id(), MemoryKind::Pinned, BIG);
    a_view.unwrap().fill(0, BIG as usize, 0xa5);
    let mut seen = Vec::new();
    for round in 0..ROUNDS {
        // The attacker copies its bytes into fresh Device memory and frees it at once;
        // in odd rounds it does not even publish what it submitted.
        let (a_dst, a_dst_gpu, _) = alloc(&mut a, ao.id(), MemoryKind::Device, BIG);
        ak.copy(a_src, a_dst_gpu, BIG);
        let v = if round % 2 == 0 {
            ak.submit()
        } else {
            ak.submit_unpublished()
        };
        free(&mut a, ao.id(), a_dst);
        // The victim takes 64 MiB right away.
        let (b_dev, b_dev_gpu, _) = alloc(&mut b, bo.id(), MemoryKind::Device, BIG);
        settle(&mut a, &ak, v);
        // What the victim's fresh memory holds, read by its own copy.
        b_view.fill(0, BIG as usize, 0);
        bk.copy(b_dev_gpu, b_pin, BIG);
        let bv = bk.submit();
        settle(&mut b, &bk, bv);
        assert!(!lost(&mut b, bo.id()), "the victim's device was lost");
        seen.push(count_byte(&b_view, BIG, 0xa5));
        free(&mut b, bo.id(), b_dev);
        if lost(&mut a, ao.id()) {
            assert_eq!(
                a.call(Request::CloseDevice { device: ao.id() }),
                Response::Done
            );
            (ao, ak) = open_copier(&mut a);
            let (_, src, view) = alloc(&mut a, ao.id(), MemoryKind::Pinned, BIG);
            view.unwrap().fill(0, BIG as usize, 0xa5);
            a_src = src;
        }
    }
    assert!(
        seen.iter().all(|n| *n == 0),
        "the victim's fresh memory held the attacker's bytes (per round: {seen:?})"
    );
}

#[test]
fn freed_memory_is_not_given_away_while_a_copy_reads_it() {
    let d = Rigd::start(SLOW_SIM);
    let mut a = d.client("attacker");
    let mut b = d.client("victim");
    let (mut ao, mut ak) = open_copier(&mut a);
    let (bo, mut bk) = open_copier(&mut b);
    let mut seen = Vec::new();
    for round in 0..ROUNDS {
        // The attacker copies from Device memory it frees at once into its own host memory;
        // in odd rounds it does not publish what it submitted.
        let (a_src, a_src_gpu, _) = alloc(&mut a, ao.id(), MemoryKind::Device, BIG);
        let (a_dst, a_dst_gpu, a_view) = alloc(&mut a, ao.id(), MemoryKind::Pinned, BIG);
        let a_view = a_view.unwrap();
        ak.copy(a_src_gpu, a_dst_gpu, BIG);
        let v = if round % 2 == 0 {
            ak.submit()
        } else {
            ak.submit_unpublished()
        };
        free(&mut a, ao.id(), a_src);
        // The victim takes 64 MiB right away and writes its secret there.
        let (b_dev, b_dev_gpu, _) = alloc(&mut b, bo.id(), MemoryKind::Device, BIG);
        bk.fill(b_dev_gpu, 0x5b5b_5b5b, BIG);
        let bv = bk.submit();
        settle(&mut b, &bk, bv);
        settle(&mut a, &ak, v);
        seen.push(count_byte(&a_view, BIG, 0x5b));
        free(&mut b, bo.id(), b_dev);
        drop(a_view);
        if lost(&mut a, ao.id()) {
            assert_eq!(
                a.call(Request::CloseDevice { device: ao.id() }),
                Response::Done
            );
            (ao, ak) = open_copier(&mut a);
        } else {
            free(&mut a, ao.id(), a_dst);
        }
    }
    assert!(
        seen.iter().all(|n| *n == 0),
        "the attacker read the victim's bytes (per round: {seen:?})"
    );
}

/// rigd's mapped address space, from `/proc/<pid>/status`.
fn vm_size_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        * 1024
}

/// A memfd of `bytes` bytes (sparse: it costs nothing), which rigd can seal.
fn sparse_memfd(bytes: u64) -> OwnedFd {
    let fd = nix::sys::memfd::memfd_create(
        c"rig-test-sparse",
        nix::sys::memfd::MemFdCreateFlag::MFD_ALLOW_SEALING
            | nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC,
    )
    .unwrap();
    nix::unistd::ftruncate(&fd, i64::try_from(bytes).unwrap()).unwrap();
    fd
}

#[test]
fn huge_sparse_memfds_map_only_what_is_charged() {
    let d = Rigd::start(SIM);
    let mut a = d.client("attacker");
    let ao = a.open();
    let before = vm_size_bytes(d.pid());
    for _ in 0..100 {
        let fd = sparse_memfd(1 << 46);
        let (r, _) = a.call_fds(
            Request::MapHost {
                device: ao.id(),
                bytes: 4096,
                offset: 0,
            },
            &[fd.as_fd()],
        );
        assert!(matches!(r, Response::Mapped { .. }), "{r:?}");
    }
    // A range beyond the file is refused, not mapped.
    let fd = sparse_memfd(1 << 20);
    let (r, _) = a.call_fds(
        Request::MapHost {
            device: ao.id(),
            bytes: 4096,
            offset: 1 << 20,
        },
        &[fd.as_fd()],
    );
    assert!(matches!(r, Response::Never { .. }), "{r:?}");
    let grown = vm_size_bytes(d.pid()).saturating_sub(before);
    assert!(
        grown < 1 << 30,
        "100 mappings of 4096 bytes grew rigd's address space by {grown} bytes"
    );
    // Another client still opens a device, allocates and loads.
    let mut b = d.client("victim");
    let bo = b.open();
    let _ = alloc(&mut b, bo.id(), MemoryKind::Device, BIG);
    let _ = alloc(&mut b, bo.id(), MemoryKind::Pinned, BIG);
}

/// rigd with its descriptor limit (soft and hard) set to `nofile`.
fn rigd_with_nofile(config: &str, nofile: u32) -> Rigd {
    Rigd::start_wrapped(
        config,
        &[
            "sh",
            "-c",
            &format!("ulimit -n {nofile} && exec \"$0\" \"$@\""),
        ],
    )
}

/// The child half of the tests that need a client of another user: opens a device,
/// allocates Pinned memory and prints what rigd answered.
#[test]
fn child_other_user() {
    let Ok(socket) = std::env::var("RIGD_TEST_TENANT") else {
        return;
    };
    let result = (|| {
        let mut c =
            rig_proto::Connection::connect(&socket, "other user").map_err(|e| e.to_string())?;
        let (r, _) = c
            .call(&Request::OpenDevice { gpu: 0 }, &[])
            .map_err(|e| e.to_string())?;
        let Response::DeviceOpened(o) = r else {
            return Err(format!("open: {r:?}"));
        };
        let bytes = std::env::var("RIGD_TEST_BYTES")
            .ok()
            .and_then(|b| b.parse().ok())
            .unwrap_or(4096);
        let memory = if std::env::var("RIGD_TEST_DEVICE").is_ok() {
            MemoryKind::Device
        } else {
            MemoryKind::Pinned
        };
        let (r, _) = c
            .call(
                &Request::Alloc {
                    device: o.device,
                    memory,
                    bytes,
                },
                &[],
            )
            .map_err(|e| e.to_string())?;
        match r {
            Response::Allocated { .. } => Ok(()),
            r => Err(format!("alloc: {r:?}")),
        }
    })();
    match result {
        Ok(()) => println!("RESULT ok"),
        Err(e) => println!("RESULT {e}"),
    }
}

/// Runs [`child_other_user`] as user 65534 against `d` (`None` unless root, who alone can
/// run a client as another user).
fn as_other_user(d: &Rigd, env: &[(&str, &str)]) -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: cannot run a client as another user; skipping that part");
        return None;
    }
    std::fs::set_permissions(
        d.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            rig_testkit::test_name!(child_other_user),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RIGD_TEST_TENANT", &d.socket)
        .envs(env.iter().copied())
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_owned()))
            .unwrap_or_else(|| {
                format!(
                    "no result ({:?}): {} {}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                )
            }),
    )
}

/// The socket open to every user, so that rigd's own checks decide.
const OPEN_SIM: &str = "[daemon]\nmode = 0o666\n";

#[test]
fn descriptors_within_the_quota_are_bounded_and_the_limit_named() {
    let nofile = 1024;
    let d = rigd_with_nofile(&format!("{OPEN_SIM}{SIM}"), nofile);
    let mut a = d.client("attacker");
    let ao = a.open();
    let mut refused = None;
    for _ in 0..2 * nofile {
        let r = a.call(Request::Alloc {
            device: ao.id(),
            memory: MemoryKind::Pinned,
            bytes: 4096,
        });
        if !matches!(r, Response::Allocated { .. }) {
            refused = Some(r);
            break;
        }
    }
    let r = refused.expect("4 KiB allocations never refused");
    assert_eq!(code(&r), Some(ErrorCode::Quota), "{r:?}");
    let Response::Error(e) = &r else { panic!() };
    assert!(e.message.contains("limits.fds ("), "{}", e.message);
    assert!(
        d.fd_count() < nofile as usize * 3 / 4,
        "rigd holds {} descriptors",
        d.fd_count()
    );
    assert!(d.log().contains("client refused for a limit"));
    // Another user still opens a device and allocates.
    if let Some(result) = as_other_user(&d, &[]) {
        assert_eq!(result, "ok");
    }
}

#[test]
fn peer_word_mappings_go_when_the_peer_closes() {
    let d = Rigd::start(SIM);
    let mut c = d.client("waiter");
    let waiter = c.open();
    let cycle = |c: &mut Client| {
        let p = c.open();
        let r = c.call(Request::MapPeerWord {
            device: waiter.id(),
            peer: p.id(),
        });
        assert!(matches!(r, Response::PeerWord { .. }), "{r:?}");
        assert_eq!(
            c.call(Request::CloseDevice { device: p.id() }),
            Response::Done
        );
    };
    cycle(&mut c);
    let baseline = d.fd_count();
    for _ in 0..300 {
        cycle(&mut c);
    }
    assert!(
        holds_within(Duration::from_secs(5), || d.fd_count() <= baseline),
        "300 map/close cycles left rigd with {} descriptors, {baseline} before",
        d.fd_count()
    );
}

/// Names of rigd's simulated queue threads.
fn queue_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|n| n.starts_with("rig-sim-q"))
        .count()
}

#[test]
fn a_self_chained_indirect_buffer_is_lost_within_the_hang_bound() {
    self_chained_indirect_buffer(false);
}

/// The client's own word is no proof of progress: a thread that keeps moving it does not keep
/// a queue that completes nothing alive.
#[test]
fn a_client_moving_its_own_word_does_not_hide_a_spinning_queue() {
    self_chained_indirect_buffer(true);
}

/// Makes `o`'s compute queue call an indirect buffer that jumps to itself, and rings its
/// doorbell; returns when it rang.
fn spin_forever(c: &mut Client, o: &Opened) -> std::time::Instant {
    let (_, ib, view) = alloc(c, o.id(), MemoryKind::Pinned, 4096);
    let ib_packet = |chain: bool| {
        let mut w = [0u32; rig_amd::pm4::IndirectBuffer::WORDS];
        rig_amd::pm4::IndirectBuffer {
            address: ib,
            size_dw: w.len() as u32,
            chain,
            pre_enable: false,
            valid: true,
            vmid: 0,
            cache_policy: 0,
            pre_resume: false,
            privileged: false,
        }
        .encode(&mut w)
        .unwrap();
        w
    };
    view.unwrap().write_u32s(0, &ib_packet(true));
    let mut ring = Ring::on(o, &o.msg.compute, 4);
    ring.push(&ib_packet(false));
    let rang = std::time::Instant::now();
    ring.kick();
    rang
}

/// The hang bound counts from when a stall began, not from the watchdog's first look at it:
/// after an idle spell (the watchdog then looks seldom) a queue that spins is lost at its
/// bound, neither earlier nor a whole idle tick later.
#[test]
fn a_stall_after_an_idle_spell_is_lost_at_its_bound() {
    let bound = Duration::from_millis(1000);
    let d = Rigd::start(&format!(
        "[access]\nany = true\n\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\nhang_ms = {}\n",
        bound.as_millis()
    ));
    let mut c = d.client("idler");
    for round in 0..3 {
        let o = c.open();
        // Long enough for the idle tick to back off as far as it goes.
        std::thread::sleep(Duration::from_secs(3));
        let rang = spin_forever(&mut c, &o);
        let mut took = None;
        let deadline = rang + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if lost(&mut c, o.id()) {
                took = Some(rang.elapsed());
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let took = took.expect("a spinning queue was never lost");
        assert!(took >= bound, "round {round}: lost early, after {took:?}");
        assert!(
            took < bound + Duration::from_millis(400),
            "round {round}: lost {took:?} after its doorbell, past its {bound:?} bound"
        );
    }
}

fn self_chained_indirect_buffer(move_the_word: bool) {
    let d = Rigd::start(
        "[access]\nany = true\n\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\nhang_ms = 200\n",
    );
    let mut c = d.client("spinner");
    let o = c.open();
    // The threads name themselves once they run.
    assert!(holds_within(Duration::from_secs(5), || queue_threads(
        d.pid()
    ) == 2));
    let (_, ib, view) = alloc(&mut c, o.id(), MemoryKind::Pinned, 4096);
    let mut w = [0u32; rig_amd::pm4::IndirectBuffer::WORDS];
    rig_amd::pm4::IndirectBuffer {
        address: ib,
        size_dw: w.len() as u32,
        chain: true,
        pre_enable: false,
        valid: true,
        vmid: 0,
        cache_policy: 0,
        pre_resume: false,
        privileged: false,
    }
    .encode(&mut w)
    .unwrap();
    // The buffer jumps to itself; the ring calls it. `submitted` is never written.
    view.unwrap().write_u32s(0, &w);
    let mut ring = Ring::on(&o, &o.msg.compute, 4);
    let mut call = w;
    rig_amd::pm4::IndirectBuffer {
        address: ib,
        size_dw: w.len() as u32,
        chain: false,
        pre_enable: false,
        valid: true,
        vmid: 0,
        cache_policy: 0,
        pre_resume: false,
        privileged: false,
    }
    .encode(&mut call)
    .unwrap();
    ring.push(&call);
    let t0 = std::time::Instant::now();
    ring.kick();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mover = move_the_word.then(|| {
        let word = o.region(o.msg.word.memory.host.fd);
        let at = o.msg.word.memory.host.offset as usize;
        let done = done.clone();
        std::thread::spawn(move || {
            let mut v = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                v += 1;
                word.store_u64(at, v, std::sync::atomic::Ordering::Release);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    });
    let was_lost = holds_within(Duration::from_secs(10), || lost(&mut c, o.id()));
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(m) = mover {
        m.join().unwrap();
    }
    assert!(
        was_lost,
        "a queue spinning with nothing submitted was never lost"
    );
    let took = t0.elapsed();
    let Response::Status(s) = c.call(Request::DeviceStatus { device: o.id() }) else {
        panic!()
    };
    let why = s.lost.unwrap();
    assert!(why.to_string().starts_with("hang"), "{why}");
    assert_eq!(why.kind, rig_proto::FaultKind::Hang);
    assert!(took < Duration::from_secs(5), "lost after {took:?}");
    assert!(
        holds_within(Duration::from_secs(5), || queue_threads(d.pid()) == 0),
        "the lost device's queue threads still run: {}",
        queue_threads(d.pid())
    );
}

#[test]
fn four_connections_of_one_user_share_one_quota() {
    let quota = 64 * MIB;
    let d = Rigd::start(&format!("[limits]\nmemory_bytes = {quota}\n\n{SIM}"));
    let mut total = 0;
    let mut clients = Vec::new();
    for i in 0..4 {
        let mut c = d.client(&format!("c{i}"));
        let o = c.open();
        loop {
            let r = c.call(Request::Alloc {
                device: o.id(),
                memory: MemoryKind::Device,
                bytes: 4 * MIB,
            });
            match r {
                Response::Allocated { .. } => total += 4 * MIB,
                Response::NoMemory {
                    bytes, shortage, ..
                } => {
                    assert_eq!((bytes, shortage), (4 * MIB, Shortage::Quota));
                    break;
                }
                r => panic!("{r:?}"),
            }
        }
        clients.push((c, o));
    }
    assert!(
        total <= quota,
        "4 connections of one user hold {total} bytes under a quota of {quota}"
    );
    assert!(total >= quota - 8 * MIB, "only {total} bytes allocated");
}

#[test]
fn one_user_holds_at_most_its_share_of_a_gpu() {
    // 1 GiB of VRAM, half of it per user by default.
    let d = Rigd::start(&format!("{OPEN_SIM}{SIM}"));
    let mut c = d.client("greedy");
    let o = c.open();
    let mut total = 0;
    loop {
        let r = c.call(Request::Alloc {
            device: o.id(),
            memory: MemoryKind::Device,
            bytes: BIG,
        });
        match r {
            Response::Allocated { .. } => total += BIG,
            Response::NoMemory {
                bytes,
                shortage,
                limit,
            } => {
                assert_eq!((bytes, shortage), (BIG, Shortage::Quota));
                // The answer names the limit, its value and what is missing, not only the ask.
                let limit = limit.expect("a quota names its limit");
                assert_eq!(limit.name, "limits.gpu_share_percent");
                assert_eq!(limit.value, 512 * MIB);
                assert_eq!(limit.missing, total + BIG - 512 * MIB);
                break;
            }
            r => panic!("{r:?}"),
        }
        assert!(total <= 1 << 30);
    }
    assert_eq!(total, 512 * MIB);
    assert!(d.log().contains("limits.gpu_share_percent"));
    // Another user still gets its share.
    if let Some(result) = as_other_user(
        &d,
        &[("RIGD_TEST_DEVICE", "1"), ("RIGD_TEST_BYTES", "268435456")],
    ) {
        assert_eq!(result, "ok");
    }
}

#[test]
fn mapped_memory_takes_from_vram() {
    let d = Rigd::start(&format!("[limits]\ngpu_share_percent = 100\n\n{SIM}"));
    let mut c = d.client("t");
    let o = c.open();
    let (mapped, _, view) = alloc(&mut c, o.id(), MemoryKind::Mapped, 768 * MIB);
    assert!(view.is_some());
    let r = c.call(Request::Alloc {
        device: o.id(),
        memory: MemoryKind::Device,
        bytes: 512 * MIB,
    });
    assert_eq!(
        r,
        Response::NoMemory {
            bytes: 512 * MIB,
            shortage: Shortage::Gpu,
            limit: None
        }
    );
    free(&mut c, o.id(), mapped);
    let _ = alloc(&mut c, o.id(), MemoryKind::Device, 512 * MIB);
}

#[test]
fn host_memory_for_all_clients_is_capped() {
    let d = Rigd::start(&format!(
        "[limits]\nhost_memory_bytes = {}\n\n{SIM}",
        64 * MIB
    ));
    let mut a = d.client("a");
    let ao = a.open();
    let r = a.call(Request::Alloc {
        device: ao.id(),
        memory: MemoryKind::Pinned,
        bytes: 64 * MIB,
    });
    match r {
        Response::NoMemory {
            bytes,
            shortage: Shortage::Host,
            limit: Some(limit),
        } => {
            assert_eq!(bytes, 64 * MIB);
            assert_eq!(limit.name, "limits.host_memory_bytes");
            assert_eq!(limit.value, 64 * MIB);
            assert!(limit.missing > 0 && limit.missing <= 64 * MIB, "{limit:?}");
        }
        r => panic!("{r:?}"),
    }
    assert!(d.log().contains("limits.host_memory_bytes"));
    let mut b = d.client("b");
    let bo = b.open();
    let _ = alloc(&mut b, bo.id(), MemoryKind::Pinned, 32 * MIB);
    let r = a.call(Request::Alloc {
        device: ao.id(),
        memory: MemoryKind::Mapped,
        bytes: 32 * MIB,
    });
    assert!(
        matches!(
            r,
            Response::NoMemory {
                shortage: Shortage::Host,
                ..
            }
        ),
        "{r:?}"
    );
}

#[test]
fn mappings_are_bounded_per_user_and_the_limit_named() {
    let d = Rigd::start(&format!("[limits]\nmappings = 40\n\n{SIM}"));
    let mut a = d.client("a");
    let ao = a.open();
    let mut n = 0;
    let r = loop {
        let r = a.call(Request::Alloc {
            device: ao.id(),
            memory: MemoryKind::Pinned,
            bytes: 4096,
        });
        if !matches!(r, Response::Allocated { .. }) {
            break r;
        }
        n += 1;
        assert!(n <= 40, "more Pinned allocations than limits.mappings");
    };
    assert!(
        matches!(&r, Response::Error(e) if e.code == ErrorCode::Quota && e.message.contains("limits.mappings (40)")),
        "{r:?}"
    );
}
