//! rigd's KFD devices in worker processes, one per client, on the emulated KFD: each
//! client's devices are in a KFD process (a GPU VM) of their own, so one client's store to
//! another's GPU address faults for that client alone; a client's end leaves nothing in
//! the kernel; a killed worker loses its client's devices with the reason while other
//! clients go on.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rig_proto::messages::{MemoryKind, QueueKind};
use rig_shm::{Doorbell, SharedRegion};
use rigd::config::KfdConfig;
use rigd::path::worker::{KernelSpec, WorkerBackend, WorkerCommand, WorkerUser, Workers};
use rigd::path::{Backend, Owner, Path, QueueSpec, Stopped};

use super::kfd_path::{Seen, events, until};

struct Setup {
    _dir: tempfile::TempDir,
    server: Arc<rig_kfd_emu::server::Server>,
    workers: Arc<Workers>,
    backend: WorkerBackend,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kfd.sock");
    let topo = dir.path().join("topology");
    let server = rig_kfd_emu::start(rig_kfd_emu::kernel::Config::default(), &sock, &topo).unwrap();
    let workers = Workers::new(WorkerCommand {
        program: env!("CARGO_BIN_EXE_rig-worker").into(),
        kernel: KernelSpec::Emulated {
            socket: sock,
            topology: topo.clone(),
        },
        user: WorkerUser::of(&KfdConfig::default(), nix::unistd::geteuid().as_raw()).unwrap(),
    });
    let node = rig_kfd::topology::read(&topo)
        .unwrap()
        .into_iter()
        .find(|n| n.is_gpu() && n.processor_name() == "gfx1100")
        .unwrap();
    let backend = workers.backends(&[node]).remove(0).unwrap();
    // The worker that described the GPU is gone with its KFD process.
    until("the describing worker to end", || {
        server.processes().is_empty() && workers.running().is_empty()
    });
    Setup {
        _dir: dir,
        server,
        workers,
        backend,
    }
}

struct Queue {
    ring: SharedRegion,
    pos: SharedRegion,
    pos_va: u64,
    bell: Doorbell,
}

/// A PM4 queue on Pinned memory, and the client's doorbell for it.
fn pm4_queue(path: &mut Box<dyn Path>) -> Queue {
    let ring = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    let pos = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    let page = SharedRegion::create("doorbells", 4096).unwrap();
    let bell = Doorbell::new(page, 0).unwrap();
    path.queue(QueueSpec {
        kind: QueueKind::Pm4,
        ring: ring.address,
        bytes: 4096,
        read: pos.address,
        write: pos.address + 64,
        doorbell: bell.clone(),
        scratch: (0, 0),
    })
    .unwrap();
    Queue {
        ring: ring.host.clone().unwrap(),
        pos: pos.host.clone().unwrap(),
        pos_va: pos.address,
        bell,
    }
}

/// A release writing `value` to GPU address `address`, the queue's `n`th packet.
fn release(q: &Queue, n: u64, address: u64, value: u64) {
    let mut words = [0u32; 8];
    let r = rig_amd::pm4::ReleaseMem::timeline(
        rig_amd::pm4::ReleaseMem::write_back(rig_amd::gpu::Generation::Gfx11),
        address,
        value,
    );
    let len = r.encode(&mut words).unwrap() as u64;
    q.ring
        .write_u32s((n * len * 4) as usize, &words[..len as usize]);
    q.pos.store_u64(64, (n + 1) * len, Ordering::Release);
    q.bell.ring((n + 1) * len);
}

#[test]
fn two_clients_are_two_kfd_processes_and_one_cannot_store_into_the_others_memory() {
    let s = setup();
    let (a_seen, b_seen) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
    let mut a = s.backend.open(Owner(1), events(&a_seen)).unwrap();
    let mut b = s.backend.open(Owner(2), events(&b_seen)).unwrap();
    assert_eq!(s.server.processes().len(), 2, "one KFD process per client");
    let cost = s.backend.description().client_cost.unwrap();
    assert_eq!(cost.at_once, 8, "the VMIDs amdgpu keeps for KFD");
    assert!(
        (40 << 20..48 << 20).contains(&cost.queue_bytes),
        "EOP and a gfx1100's context-save area: {cost:?}"
    );
    assert_eq!(cost.queues_fit, (4 << 30) / cost.queue_bytes);
    assert_eq!(s.workers.running().len(), 2);
    // The victim's buffer lies past everything the attacker's VM maps.
    let spacer = b.alloc(MemoryKind::Device, 256 << 20).unwrap();
    let secret = b.alloc(MemoryKind::Pinned, 4096).unwrap();
    let secret_host = secret.host.clone().unwrap();
    secret_host.store_u64(0, 0x5ec2e7, Ordering::Release);
    let q = pm4_queue(&mut a);
    assert!(secret.address > q.pos_va + (64 << 20));
    // The attacker's own memory takes its stores...
    release(&q, 0, q.pos_va + 128, 7);
    until("the attacker's own release", || {
        q.pos.load_u64(128, Ordering::Acquire) == 7
    });
    // ...the victim's address is nothing in its VM.
    release(&q, 1, secret.address, 0xbad);
    until("the attacker's fault", || {
        !a_seen.faults.lock().unwrap().is_empty()
    });
    let why = a_seen.faults.lock().unwrap()[0].clone();
    assert_eq!(why.kind, rig_proto::FaultKind::MemoryFault, "{why}");
    assert_eq!(why.address, Some(secret.address), "{why}");
    assert_eq!(secret_host.load_u64(0, Ordering::Acquire), 0x5ec2e7);
    assert!(b_seen.faults.lock().unwrap().is_empty());
    // The victim's device works on.
    let bq = pm4_queue(&mut b);
    release(&bq, 0, secret.address + 8, 9);
    until("the victim's release", || {
        secret_host.load_u64(8, Ordering::Acquire) == 9
    });
    assert_eq!(secret_host.load_u64(0, Ordering::Acquire), 0x5ec2e7);
    b.free(spacer);
}

#[test]
fn one_worker_serves_all_of_a_clients_devices_and_ends_with_the_last() {
    let s = setup();
    let seen = Arc::new(Seen::default());
    let mut one = s.backend.open(Owner(5), events(&seen)).unwrap();
    let two = s.backend.open(Owner(5), events(&seen)).unwrap();
    assert_eq!(s.workers.running().len(), 1);
    assert_eq!(s.server.processes().len(), 1, "one KFD process, one GPU VM");
    let q = pm4_queue(&mut one);
    let m = one.alloc(MemoryKind::Mapped, 4096).unwrap();
    m.host.as_ref().unwrap().write(0, b"mapped");
    let client = SharedRegion::create("client", 8192).unwrap();
    let _h = one.map_host(client.dup_fd().unwrap(), 4096, 4096).unwrap();
    release(&q, 0, q.pos_va + 128, 1);
    until("the release", || {
        q.pos.load_u64(128, Ordering::Acquire) == 1
    });
    until("the interrupt", || one.progress() > 0);
    let (queues, bos, events) = s.server.processes()[0].holdings();
    assert!(queues == 1 && bos > 0 && events > 0);
    drop(two);
    assert_eq!(
        s.workers.running().len(),
        1,
        "the client still has a device"
    );
    // The client's end (its disconnect drops its devices): nothing left in the kernel.
    drop(one);
    until("the worker and its KFD process to end", || {
        s.workers.running().is_empty() && s.server.processes().is_empty()
    });
}

#[test]
fn a_killed_worker_loses_its_clients_devices_with_the_reason_and_others_go_on() {
    let s = setup();
    let (a_seen, b_seen) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
    let mut a = s.backend.open(Owner(1), events(&a_seen)).unwrap();
    let mut b = s.backend.open(Owner(2), events(&b_seen)).unwrap();
    let _qa = pm4_queue(&mut a);
    let qb = pm4_queue(&mut b);
    let pid = s
        .workers
        .running()
        .into_iter()
        .find(|(c, _)| *c == 1)
        .unwrap()
        .1;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    until("the lost device's fault", || {
        !a_seen.faults.lock().unwrap().is_empty()
    });
    let why = a_seen.faults.lock().unwrap()[0].clone();
    assert_eq!(why.kind, rig_proto::FaultKind::Internal, "{why}");
    assert!(why.to_string().contains("worker died"), "{why}");
    assert!(why.to_string().contains("signal 9"), "{why}");
    let refused = a.alloc(MemoryKind::Pinned, 4096).unwrap_err();
    assert!(refused.to_string().contains("worker died"), "{refused}");
    assert_eq!(a.stop(Some(&why)), Stopped::Stopped);
    until("the killed worker's KFD process to go", || {
        s.server.processes().len() == 1
    });
    // The other client's device goes on.
    release(&qb, 0, qb.pos_va + 128, 77);
    until("the other client's release", || {
        qb.pos.load_u64(128, Ordering::Acquire) == 77
    });
    assert!(b_seen.faults.lock().unwrap().is_empty());
    // The client's next device gets a worker of its own again.
    let mut again = s.backend.open(Owner(1), events(&a_seen)).unwrap();
    again.alloc(MemoryKind::Pinned, 4096).unwrap();
}

#[test]
fn a_worker_runs_without_new_privileges_and_without_rigds_descriptors() {
    let s = setup();
    // A descriptor rigd left inheritable by mistake (no close-on-exec).
    let leak_path = s._dir.path().join("leaked");
    std::fs::write(&leak_path, b"rigd's").unwrap();
    let leak = nix::fcntl::open(
        &leak_path,
        nix::fcntl::OFlag::O_RDONLY,
        nix::sys::stat::Mode::empty(),
    )
    .unwrap();
    let seen = Arc::new(Seen::default());
    let _path = s.backend.open(Owner(3), events(&seen)).unwrap();
    let _ = nix::unistd::close(leak);
    let pid = s.workers.running()[0].1;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    let open: Vec<std::path::PathBuf> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .collect();
    assert!(
        !open.iter().any(|p| p.ends_with("leaked")),
        "the worker kept rigd's descriptor: {open:?}"
    );
}

const RIGD_ENV: &str = "RIGD_KFD_WORKER_TEST_RIGD";

/// In the child `rigds_death_ends_its_workers` starts: a rigd whose client has a device
/// (and a queue) in a worker; it prints the worker's pid and waits to be killed.
#[test]
#[ignore = "a rigd run by rigds_death_ends_its_workers in a child process"]
fn a_rigd_with_a_worker() {
    let Some(dir) = std::env::var_os(RIGD_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let topo = dir.join("topology");
    let workers = Workers::new(WorkerCommand {
        program: env!("CARGO_BIN_EXE_rig-worker").into(),
        kernel: KernelSpec::Emulated {
            socket: dir.join("kfd.sock"),
            topology: topo.clone(),
        },
        user: WorkerUser::of(&KfdConfig::default(), nix::unistd::geteuid().as_raw()).unwrap(),
    });
    let node = rig_kfd::topology::read(&topo)
        .unwrap()
        .into_iter()
        .find(|n| n.is_gpu() && n.processor_name() == "gfx1100")
        .unwrap();
    let backend = workers.backends(&[node]).remove(0).unwrap();
    let seen = Arc::new(Seen::default());
    let mut path = backend.open(Owner(1), events(&seen)).unwrap();
    let _q = pm4_queue(&mut path);
    println!("worker {}", workers.running()[0].1);
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn rigds_death_ends_its_workers_and_their_kfd_processes() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let server = rig_kfd_emu::start(
        rig_kfd_emu::kernel::Config::default(),
        &dir.path().join("kfd.sock"),
        &dir.path().join("topology"),
    )
    .unwrap();
    let mut rigd = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            rig_testkit::test_name!(a_rigd_with_a_worker),
            "--include-ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(RIGD_ENV, dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(rigd.stdout.take().unwrap());
    let pid: i32 = out
        .lines()
        .map_while(Result::ok)
        // libtest may print the test's name on the same line first.
        .find_map(|l| {
            l.rsplit_once("worker ")
                .map(|(_, p)| p.trim().parse().unwrap())
        })
        .expect("the child rigd's worker");
    until("the worker's KFD process alone", || {
        server.processes().len() == 1
    });
    assert_eq!(server.processes()[0].holdings().0, 1, "its queue");
    rigd.kill().unwrap();
    rigd.wait().unwrap();
    let gone = || match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie no one reaped yet has ended.
        Ok(stat) => stat[stat.rfind(')').unwrap() + 2..].starts_with('Z'),
    };
    until("the worker to end with rigd", gone);
    until("its KFD process to be released", || {
        server.processes().is_empty()
    });
}

/// The `Key:\t...` line of a `/proc/<pid>/status`.
fn status_line(status: &str, key: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {status}"))
        .trim()
        .to_owned()
}

#[test]
fn each_clients_worker_runs_as_a_uid_of_its_own_without_groups_or_capabilities() {
    // rigd is root here, so the default is a dynamic uid of [kfd] worker_uids.
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs rigd as root"
    );
    let s = setup();
    let (a, b) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
    let mut path_a = s.backend.open(Owner(11), events(&a)).unwrap();
    let mut path_b = s.backend.open(Owner(12), events(&b)).unwrap();
    // Each worker opened KFD itself and runs a queue as that uid.
    let _qa = pm4_queue(&mut path_a);
    let _qb = pm4_queue(&mut path_b);
    let running = s.workers.running();
    assert_eq!(running.len(), 2);
    let (first, last) = rigd::path::worker::DEFAULT_WORKER_UIDS;
    let mut uids = Vec::new();
    for (_, pid) in running {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let uid: Vec<u32> = status_line(&status, "Uid:")
            .split_whitespace()
            .map(|u| u.parse().unwrap())
            .collect();
        // Real, effective, saved and filesystem uids alike: nothing to regain root by.
        assert!(uid.iter().all(|u| *u == uid[0]), "{status}");
        assert!((first..=last).contains(&uid[0]), "uid {} {status}", uid[0]);
        assert_eq!(status_line(&status, "Groups:"), "", "{status}");
        assert!(
            !status_line(&status, "Gid:")
                .split_whitespace()
                .any(|g| g == "0"),
            "{status}"
        );
        for caps in ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"] {
            assert_eq!(status_line(&status, caps), "0000000000000000", "{status}");
        }
        uids.push(uid[0]);
    }
    assert_ne!(uids[0], uids[1], "two clients' workers share a uid");
}

#[test]
fn worker_uid_zero_keeps_workers_as_rigds_user_and_a_range_is_checked() {
    use rigd::path::worker::parse_uids;
    let root = KfdConfig {
        worker_uid: Some(0),
        ..KfdConfig::default()
    };
    assert_eq!(WorkerUser::of(&root, 0).unwrap(), WorkerUser::Rigd);
    // A rigd that is not root cannot be anyone else.
    assert_eq!(
        WorkerUser::of(&KfdConfig::default(), 1000).unwrap(),
        WorkerUser::Rigd
    );
    assert_eq!(parse_uids("61184-65519").unwrap(), (61184, 65519));
    for bad in ["0-10", "10-5", "61184", "a-b", ""] {
        let e = parse_uids(bad).unwrap_err();
        assert!(e.contains("worker_uids"), "{e}");
    }
}

/// A state serving the emulated gfx1100 (4 GiB) through workers, with `limits`.
fn state_over(s: &Setup, limits: rigd::config::Limits) -> rigd::state::State {
    let info = rig_proto::messages::GpuInfo {
        index: 0,
        name: "AMD:0".into(),
        arch: "gfx1100".into(),
        path: rig_proto::messages::PathKind::Kfd,
        bus: None,
        budget: s.backend.description().budget,
        simulated: false,
        unavailable: None,
    };
    let backend = s.workers.backends(&[node_gfx1100(s)]).remove(0).unwrap();
    let gpus = vec![rigd::gpus::GpuEntry {
        info,
        backend: Some(Arc::new(backend)),
        why_not: None,
        firmware: None,
    }];
    // Faults go nowhere: no work runs here.
    let (tx, _) = std::sync::mpsc::channel();
    rigd::state::State::new(gpus, limits, None, tx)
}

fn node_gfx1100(s: &Setup) -> rig_kfd::topology::Node {
    rig_kfd::topology::read(&s._dir.path().join("topology"))
        .unwrap()
        .into_iter()
        .find(|n| n.is_gpu() && n.processor_name() == "gfx1100")
        .unwrap()
}

#[test]
fn one_user_filling_its_share_with_queues_leaves_room_for_another() {
    use rig_proto::messages::{Request, Response};
    use rigd::state::Handler;
    let s = setup();
    let limits = rigd::config::Limits {
        devices: 200,
        ..rigd::config::Limits::default()
    };
    let state = state_over(&s, limits);
    let peer = |uid: u32| rigd::config::Peer {
        pid: std::process::id() as i32,
        uid,
        gid: uid,
        groups: Vec::new(),
    };
    let cost = s.backend.description().client_cost.unwrap().queue_bytes;
    let budget = s.backend.description().budget;
    // User 1001 opens devices from two connections (two workers, two KFD processes: the
    // emulation's 128 doorbells a process bound one) until refused.
    let conns = [
        state.connect(peer(1001), "filler".into()),
        state.connect(peer(1001), "filler".into()),
    ];
    let mut opened = 0u64;
    let refusal = loop {
        let c = conns[(opened % 2) as usize];
        match state
            .handle(c, Request::OpenDevice { gpu: 0 }, Vec::new())
            .0
        {
            Response::DeviceOpened(_) => opened += 1,
            r => break r,
        }
        assert!(opened < 150, "never refused");
    };
    let Response::Error(e) = &refusal else {
        panic!("refused with {refusal:?}, not a Quota error");
    };
    assert_eq!(e.code, rig_proto::messages::ErrorCode::Quota, "{e:?}");
    assert!(
        e.message.contains("limits.gpu_share_percent"),
        "{}",
        e.message
    );
    assert!(e.message.contains("context-save area"), "{}", e.message);
    assert!(
        e.message
            .contains(&format!("{:.1} MiB", cost as f64 / 1048576.0)),
        "the queue memory named: {}",
        e.message
    );
    // Its devices' queues hold at most half the GPU, and the book shows it.
    assert!(
        opened * cost <= budget / 2,
        "{opened} devices of {cost} bytes"
    );
    assert!(
        opened * cost > budget / 2 - 2 * cost,
        "{opened} devices filled the share"
    );
    let seen = state.observe();
    let used: u64 = seen
        .devices
        .iter()
        .filter(|d| d.gpu == 0)
        .map(|d| d.held.device + d.held.mapped)
        .sum();
    assert_eq!(
        used,
        opened * cost,
        "GpuStatus' used bytes count the queues"
    );
    assert!(state.held_bytes() >= opened * cost);
    // Another user opens a device, and it runs: its queue's memory was there.
    let other = state.connect(peer(1002), "other".into());
    match state
        .handle(other, Request::OpenDevice { gpu: 0 }, Vec::new())
        .0
    {
        Response::DeviceOpened(_) => {}
        r => panic!("the second user was refused: {r:?}"),
    }
    // Closing gives the charge back.
    for c in conns {
        state.disconnect(c);
    }
    state.disconnect(other);
    until("every charge given back", || state.held_bytes() == 0);
}

#[test]
fn a_refusal_keeps_kfds_errno_across_the_worker() {
    let s = setup();
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(Owner(21), events(&seen)).unwrap();
    // More VRAM than the GPU has: ALLOC_MEMORY_OF_GPU answers ENOMEM in the worker.
    let e = path.alloc(MemoryKind::Device, 8 << 30).unwrap_err();
    assert!(matches!(e, rigd::path::Refusal::Lacking(_)), "{e:?}");
    assert_eq!(e.why().errno(), Some(libc::ENOMEM), "{e:?}");
    assert!(
        matches!(&e.why().cause, Some(rigd::path::Cause::Errno { call, .. }) if call == "ALLOC_MEMORY_OF_GPU"),
        "{e:?}"
    );
}
