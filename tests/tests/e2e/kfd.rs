//! The client through rigd's kfd path: rigd (a child process) serves the GPUs of an
//! emulated KFD that this test process runs (so each test picks the emulated kernel's
//! limits and sees what it holds): a kernel launched on one of them computes what the host
//! computes, and every errno class the emulated kernel answers reaches the program as an
//! error that names its cause. The client's other end-to-end tests run on the kfd path as
//! their `kfd` backend (`rig_testkit::on_backends!`).

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rig_client::{Error, Launch, Memory, Ref, Rig, Submission, f32s, put_f32s};
use rig_kfd_emu::server::Server;
use rig_testkit::serve::{KFD_SOCKET, KFD_TOPOLOGY};
use rig_testkit::{Backend, Daemon};

fn rigd_on_emulated_kfd() -> (Daemon, Arc<Server>) {
    rigd_on(rig_kfd_emu::kernel::Config::default())
}

/// rigd serving an emulated KFD of `config`, which this process runs.
fn rigd_on(config: rig_kfd_emu::kernel::Config) -> (Daemon, Arc<Server>) {
    Daemon::on_emulated_kfd(|dir| {
        rig_kfd_emu::start(config, &dir.join(KFD_SOCKET), &dir.join(KFD_TOPOLOGY))
            .expect("start the emulated KFD")
    })
}

#[test]
fn a_launch_on_a_kfd_gpu_computes_what_the_host_does() {
    let (d, emu) = rigd_on_emulated_kfd();
    let rig = Rig::connect_to(&d.socket).unwrap();
    let gpus = rig.gpus().unwrap();
    let names: Vec<&str> = gpus.iter().map(|g| g.arch.as_str()).collect();
    assert_eq!(names, ["gfx1100", "gfx1201", "gfx942"]);
    let dev = rig.open_device("AMD:0").unwrap();
    let n = 1024usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
    let ys: Vec<f32> = (0..n).map(|i| 7.0 - i as f32).collect();
    let x = dev.buffer(4 * n as u64, Memory::Pinned).unwrap();
    x.write(|b| put_f32s(b, xs.iter().copied())).unwrap();
    let y = dev.buffer(4 * n as u64, Memory::Pinned).unwrap();
    y.write(|b| put_f32s(b, ys.iter().copied())).unwrap();
    let add = dev
        .load_image(&Backend::Kfd.code("add"))
        .unwrap()
        .resolve("add")
        .unwrap();
    let s = Submission::new().launch(
        Launch::new(&add, [4, 1, 1], [256, 1, 1])
            .params(&[0; 16])
            .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
    );
    dev.submit(&s).unwrap();
    let got: Vec<f32> = y.read(|b| f32s(b).collect()).unwrap();
    let want: Vec<f32> = xs.iter().zip(&ys).map(|(a, b)| a + b).collect();
    assert_eq!(got, want);
    // rigd holds one KFD process for its three GPUs, as the kernel keeps one per process.
    assert_eq!(emu.processes().len(), 1);
    let held: Vec<(usize, usize, usize)> = emu.processes().iter().map(|p| p.holdings()).collect();
    assert!(
        held.iter().any(|h| h.0 >= 2),
        "the device's two queues: {held:?}"
    );
    drop(dev);
    drop(rig);
}

#[test]
fn copies_and_fills_through_every_kind_of_memory_on_a_kfd_gpu() {
    let (d, emu) = rigd_on_emulated_kfd();
    let rig = Rig::connect_to(&d.socket).unwrap();
    let dev = rig.open_device("AMD:1").unwrap();
    let n = 16 * 1024u64;
    let src = dev.buffer(n, Memory::Pinned).unwrap();
    let mid = dev.buffer(n, Memory::Device).unwrap();
    let mapped = dev.buffer(n, Memory::Mapped).unwrap();
    let data: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
    src.write(|b| b.copy_from_slice(&data)).unwrap();
    let s = Submission::new()
        .fill(&mid, 0, n, 0)
        .copy(&src, 1, &mid, 5, 10_000)
        .fill(&mid, 12_000, 33, 0xee)
        .copy(&mid, 0, &mapped, 0, n);
    dev.submit(&s).unwrap();
    let mut want = vec![0u8; n as usize];
    want[5..10_005].copy_from_slice(&data[1..10_001]);
    want[12_000..12_033].fill(0xee);
    let got = mapped.read(|b| b.to_vec()).unwrap();
    assert!(
        got == want,
        "first difference at {:?}",
        got.iter().zip(&want).position(|(a, b)| a != b)
    );
    // Copies and fills ran on COPY:0, an SDMA queue KFD made (its doorbell forwarded, its
    // packets run by rig-sim's SDMA engine), beside COMPUTE:0's PM4 queue.
    let mut types: Vec<u32> = emu
        .processes()
        .iter()
        .flat_map(|p| p.queue_types())
        .collect();
    types.sort_unstable();
    assert_eq!(
        types,
        [
            rig_kfd::abi::QUEUE_TYPE_COMPUTE,
            rig_kfd::abi::QUEUE_TYPE_SDMA
        ],
        "the device's queues in the emulated kernel"
    );
}

/// One gfx1100, otherwise the emulation's defaults.
fn one_gfx1100() -> rig_kfd_emu::kernel::Config {
    rig_kfd_emu::kernel::Config {
        models: vec!["gfx1100".into()],
        ..Default::default()
    }
}

/// The whole chain of an error's messages, each source's after its own.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s += &format!(": {x}");
        src = x.source();
    }
    s
}

/// ENOMEM on ALLOC_MEMORY_OF_GPU: another program holds the GPU's VRAM, which rigd's own
/// budget cannot know; the program's allocation is out of memory on the GPU.
#[test]
fn vram_another_program_holds_is_out_of_memory_on_the_gpu() {
    use rig_kfd::seam::Emulated;
    let (d, emu) = rigd_on(rig_kfd_emu::kernel::Config {
        vram_bytes: 256 << 20,
        ..one_gfx1100()
    });
    let rig = Rig::connect_to(&d.socket).unwrap();
    let dev = rig.open_device("AMD:0").unwrap();
    // The other program: a KFD process of its own, holding 200 MiB of the 256.
    let node = &emu.kernel().gpus()[0].node;
    let other = rig_kfd::kfd::Kfd::open(std::sync::Arc::new(Emulated::new(
        d.dir().join(KFD_SOCKET),
        d.dir().join(KFD_TOPOLOGY),
    )))
    .unwrap();
    let _render = other
        .acquire_vm(node.gpu_id, node.drm_render_minor().unwrap())
        .unwrap();
    let base = other.apertures().unwrap()[0].gpuvm_base.div_ceil(4096) * 4096;
    let (held, _) = other
        .alloc(
            node.gpu_id,
            base,
            200 << 20,
            rig_kfd::abi::ALLOC_MEM_FLAGS_VRAM | rig_kfd::abi::ALLOC_MEM_FLAGS_WRITABLE,
        )
        .unwrap();
    // 64 MiB: within the user's half of the GPU beside its compute queue's 44 MiB of
    // context-save area and EOP buffer, which rigd charges to it, but past the free VRAM.
    match dev.buffer(64 << 20, Memory::Device) {
        Err(e @ Error::OutOfMemory { .. }) => {
            let msg = chain(&e);
            assert!(msg.contains("67108864 bytes asked"), "{msg}");
            assert!(msg.to_lowercase().contains("gpu"), "{msg}");
        }
        other => panic!("an allocation past the GPU's free VRAM answered {other:?}"),
    }
    // Once the other program frees it, the allocation fits.
    other.free(held).unwrap();
    assert!(dev.buffer(64 << 20, Memory::Device).is_ok());
}

/// rigd's refusal of a device on a GPU of `config`, with the whole chain of its messages.
fn refused_open(config: rig_kfd_emu::kernel::Config) -> String {
    let (d, _emu) = rigd_on(config);
    let rig = Rig::connect_to(&d.socket).unwrap();
    match rig.open_device("AMD:0") {
        Err(e @ Error::Refused { .. }) => chain(&e),
        Err(e) => panic!("opening the device failed unclearly: {e:?}"),
        Ok(_) => panic!("the device opened"),
    }
}

/// ENOSPC on CREATE_QUEUE: the process holds its most queues on the GPU (a device needs two).
#[test]
fn a_process_holding_its_most_queues_is_refused_naming_the_limit() {
    let msg = refused_open(rig_kfd_emu::kernel::Config {
        max_queues_per_process: 1,
        ..one_gfx1100()
    });
    assert!(msg.contains("no more queues on this GPU"), "{msg}");
    assert!(msg.contains("errno 28"), "{msg}");
}

/// EPERM on CREATE_QUEUE: the GPU holds as many queues as amdgpu allows.
#[test]
fn a_gpu_holding_its_most_queues_is_refused_naming_the_limit() {
    let msg = refused_open(rig_kfd_emu::kernel::Config {
        max_queues_per_device: 1,
        ..one_gfx1100()
    });
    assert!(msg.contains("max_num_of_queues_per_device"), "{msg}");
    assert!(msg.contains("errno 1)"), "{msg}");
}

/// EINVAL on CREATE_QUEUE: a kernel whose context-save rule asks more than rig's sizes
/// finds the area too small; the refusal names the sizes rig gave.
#[test]
fn a_context_save_area_the_kernel_finds_too_small_is_refused_with_its_sizes() {
    let config = rig_kfd_emu::kernel::Config {
        cwsr_extra_bytes: 4096,
        ..one_gfx1100()
    };
    let node = rig_kfd_emu::kernel::Kernel::new(config.clone())
        .unwrap()
        .gpus()[0]
        .node
        .clone();
    let want = rig_kfd::queue::ContextSave::of(&node);
    let msg = refused_open(config);
    assert!(
        msg.contains(&format!(
            "a {}-byte context-save area with a {}-byte control stack",
            want.cwsr_bytes, want.ctl_stack_bytes
        )),
        "{msg}"
    );
    assert!(msg.contains("errno 22"), "{msg}");
}

/// GET_VERSION below the oldest KFD rig drives: the GPU is listed, not served, with both
/// versions in the reason.
#[test]
fn a_kfd_older_than_rig_drives_is_listed_with_both_versions() {
    let (d, _emu) = rigd_on(rig_kfd_emu::kernel::Config {
        version: rig_kfd::version::Version {
            major: 1,
            minor: 10,
        },
        ..one_gfx1100()
    });
    let rig = Rig::connect_to(&d.socket).unwrap();
    let gpus = rig.gpus().unwrap();
    let why = gpus[0].unavailable.clone().expect("a GPU rig cannot drive");
    assert!(why.contains("1.10") && why.contains("1.11"), "{why}");
    match rig.open_device("AMD:0") {
        Err(e) => assert!(chain(&e).contains("1.11"), "{e}"),
        Ok(_) => panic!("a device opened on KFD 1.10"),
    }
}

const VICTIM_ENV: &str = "RIG_CLIENT_KFD_TEST_VICTIM";

/// In the child [`a_killed_client_leaves_nothing_in_the_emulated_kernel`] starts: a client
/// that opens a device on the kfd path, holds memory of every kind (its own memory mapped
/// too), runs work through its queues, says so on stdout and waits to be killed.
#[test]
#[ignore = "a client, run by a_killed_client_leaves_nothing_in_the_emulated_kernel"]
fn victim_client() {
    use std::io::Write;
    let Some(socket) = std::env::var_os(VICTIM_ENV) else {
        return;
    };
    let rig = Rig::connect_to(socket).unwrap();
    let dev = rig.open_device("AMD:0").unwrap();
    let n = 64 * 1024u64;
    let pinned = dev.buffer(n, Memory::Pinned).unwrap();
    let device = dev.buffer(n, Memory::Device).unwrap();
    let mapped = dev.buffer(n, Memory::Mapped).unwrap();
    let mine = rig_client::HostMemory::new("victim", n).unwrap();
    let host = dev.map_host(&mine, 0, n).unwrap();
    pinned.write(|b| b.fill(0x5a)).unwrap();
    let s = Submission::new()
        .copy(&pinned, 0, &device, 0, n)
        .copy(&device, 0, &mapped, 0, n)
        .copy(&mapped, 0, &host, 0, n);
    dev.submit(&s).unwrap().wait().unwrap();
    let mut got = vec![0u8; n as usize];
    mine.read(0, &mut got).unwrap();
    assert!(got.iter().all(|b| *b == 0x5a), "the victim's copies");
    // On a line of its own: libtest's "test victim_client ... " precedes it.
    println!("\nvictim holding");
    std::io::stdout().flush().unwrap();
    // Until the test kills it (and no longer than the test would wait).
    std::thread::sleep(Duration::from_secs(120));
}

/// A client process killed with SIGKILL while it holds a device on the kfd path: its
/// worker ends with its connection, so the emulated kernel ends its KFD process, with every
/// queue, allocation and event, and gives its VRAM back; another client's device works on.
#[test]
fn a_killed_client_leaves_nothing_in_the_emulated_kernel() {
    use std::io::BufRead;
    use std::sync::Arc;
    let (d, emu) = rigd_on(one_gfx1100());
    // The survivor: a client of this process, with a device and memory of its own.
    let rig = Rig::connect_to(&d.socket).unwrap();
    let dev = rig.open_device("AMD:0").unwrap();
    let out = dev.buffer(4096, Memory::Pinned).unwrap();
    let survivor = emu.processes();
    assert_eq!(survivor.len(), 1, "the survivor's worker's KFD process");
    let gpu = &emu.kernel().gpus()[0];
    let free_before = gpu.vram_available();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            rig_testkit::test_name!(victim_client),
            "--include-ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(VICTIM_ENV, &d.socket)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its stdout ends (EOF) if it fails before holding; no such line then.
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l == "victim holding")),
        "the victim client failed before holding its device: {:?}",
        child.wait()
    );
    let victim: Vec<Arc<rig_kfd_emu::kernel::Process>> = emu
        .processes()
        .into_iter()
        .filter(|p| !survivor.iter().any(|s| Arc::ptr_eq(s, p)))
        .collect();
    assert_eq!(victim.len(), 1, "the victim's worker's KFD process");
    let (queues, bos, events) = victim[0].holdings();
    assert!(
        queues >= 2 && bos >= 5 && events >= 1,
        "what the victim holds in the kernel: {queues} queues, {bos} allocations, {events} events"
    );
    assert!(gpu.vram_available() < free_before, "the victim's VRAM");
    child.kill().unwrap();
    child.wait().unwrap();
    let start = Instant::now();
    loop {
        let left = emu.processes();
        assert!(
            left.iter().any(|p| Arc::ptr_eq(p, &survivor[0])),
            "the survivor's KFD process ended too"
        );
        let gone = left.len() == 1 && Arc::ptr_eq(&left[0], &survivor[0]);
        if gone && victim[0].holdings() == (0, 0, 0) && gpu.vram_available() == free_before {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "20 s after the client's SIGKILL the emulated kernel still holds {} processes, the \
             victim's holding (queues, allocations, events) {:?}, {} VRAM bytes of its",
            left.len(),
            victim[0].holdings(),
            free_before.saturating_sub(gpu.vram_available())
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The survivor's device works on.
    let s = Submission::new().fill(&out, 0, 4096, 0x3c);
    dev.submit(&s).unwrap().wait().unwrap();
    assert!(out.read(|b| b.iter().all(|v| *v == 0x3c)).unwrap());
}

/// A client's worker is started on one of rigd's blocking threads, which ends once idle;
/// the worker's parent-death signal fires when the thread that started it exits, so the
/// worker must be started from a thread that lasts, or the client's device is lost
/// ("worker died: ... killed by signal 9") while it sits idle.
#[test]
fn a_clients_worker_outlives_the_rigd_thread_that_started_it() {
    let (d, emu) = rigd_on(one_gfx1100());
    let rig = Rig::connect_to(&d.socket).unwrap();
    let dev = rig.open_device("AMD:0").unwrap();
    let out = dev.buffer(4096, Memory::Pinned).unwrap();
    // Idle for many times the threads' keep-alive: the thread that started it has ended.
    std::thread::sleep(rig_testkit::serve::BLOCKING_KEEP_ALIVE * 20);
    assert_eq!(
        emu.processes().len(),
        1,
        "the client's worker's KFD process"
    );
    dev.submit(&Submission::new().fill(&out, 0, 4096, 0x77))
        .unwrap()
        .wait()
        .unwrap();
    assert!(out.read(|b| b.iter().all(|v| *v == 0x77)).unwrap());
}

/// A gfx1100 of 4 GiB without resizable BAR: 256 MiB reach the host, so KFD lists the
/// VRAM as private and gives no PUBLIC VRAM.
fn small_bar_gfx1100() -> rig_kfd_emu::kernel::Config {
    rig_kfd_emu::kernel::Config {
        bar_bytes: Some(256 << 20),
        ..one_gfx1100()
    }
}

/// On a GPU whose Device memory the host cannot reach, rigd places the image through its
/// staging copy and the kernel's results verify; Mapped memory, which such a GPU lacks,
/// falls back to Pinned (rigd answers that it never has it, naming the BAR); Device
/// memory works; and no allocation in the kernel is host-visible VRAM.
#[test]
fn a_kernel_placed_in_device_memory_the_host_cannot_reach_launches_on_a_small_bar() {
    let (d, emu) = rigd_on(small_bar_gfx1100());
    let rig = Rig::connect_to(&d.socket).unwrap();
    let dev = rig.open_device("AMD:0").unwrap();
    let n = 1024usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
    let ys: Vec<f32> = (0..n).map(|i| i as f32 * 2.0).collect();
    let x = dev.buffer(4 * n as u64, Memory::Pinned).unwrap();
    x.write(|b| put_f32s(b, xs.iter().copied())).unwrap();
    // y goes through Device memory: filled by a copy, read back by another.
    let y_host = dev.buffer(4 * n as u64, Memory::Pinned).unwrap();
    y_host.write(|b| put_f32s(b, ys.iter().copied())).unwrap();
    let y = dev.buffer(4 * n as u64, Memory::Device).unwrap();
    let mapped = dev.buffer(4 * n as u64, Memory::Mapped).unwrap();
    assert_eq!(
        mapped.memory(),
        Memory::Pinned,
        "no Mapped memory past a small BAR"
    );
    let add = dev
        .load_image(&Backend::Kfd.code("add"))
        .unwrap()
        .resolve("add")
        .unwrap();
    let s = Submission::new()
        .copy(&y_host, 0, &y, 0, 4 * n as u64)
        .launch(
            Launch::new(&add, [4, 1, 1], [256, 1, 1])
                .params(&[0; 16])
                .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
        )
        .after(&[0])
        .copy(&y, 0, &mapped, 0, 4 * n as u64)
        .after(&[1]);
    dev.submit(&s).unwrap().wait().unwrap();
    let got: Vec<f32> = mapped.read(|b| f32s(b).collect()).unwrap();
    let want: Vec<f32> = xs.iter().zip(&ys).map(|(a, b)| a + b).collect();
    assert_eq!(got, want);
    let memory: Vec<(u32, u64)> = emu.processes().iter().flat_map(|p| p.memory()).collect();
    let vram = rig_kfd::abi::ALLOC_MEM_FLAGS_VRAM;
    let public = rig_kfd::abi::ALLOC_MEM_FLAGS_PUBLIC;
    assert!(
        memory.iter().any(|m| m.0 & vram != 0) && !memory.iter().any(|m| m.0 & public != 0),
        "Device memory, the image's too, is VRAM without PUBLIC: {memory:?}"
    );
}
