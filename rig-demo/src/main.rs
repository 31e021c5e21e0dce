//! `rig-demo`: the README's first command (`cargo run --release --bin rig-demo`). Adds x to y over 1024 floats on the GPU through
//! a real rigd and prints `y[10] = 11`, then a few figures of the run.
//!
//! It uses the rigd that `RIG_SOCKET` names, or the one at the default socket; if neither
//! answers, it starts one of its own on a temporary socket, serving the simulated GPU: it
//! runs itself again as a child process with the hidden argument `--serve-rigd SOCKET`,
//! which runs rigd's daemon there (a separate process with a real socket), and stops it at
//! the end.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use rig_client::{Device, GpuPath, Launch, Memory, Ref, Rig, Submission, f32s, put_f32s};

/// The `add` kernel, built by kernels/build.sh, for each processor it was built for.
const ADD: &[(&str, &[u8])] = &[
    (
        "gfx1100",
        include_bytes!("../../kernels/out/gfx1100/add.co"),
    ),
    (
        "gfx1201",
        include_bytes!("../../kernels/out/gfx1201/add.co"),
    ),
    ("gfx942", include_bytes!("../../kernels/out/gfx942/add.co")),
];

const N: u64 = 1024;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--serve-rigd") {
        return serve::main(&args[2..]);
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rig-demo: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A rigd this program started, stopped when dropped.
struct OwnDaemon {
    child: Child,
    dir: PathBuf,
}

impl Drop for OwnDaemon {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_daemon() -> Result<(Rig, OwnDaemon), String> {
    let dir = std::env::temp_dir().join(format!("rig-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let socket = dir.join("rigd.sock");
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let child = Command::new(me)
        .arg("--serve-rigd")
        .arg(&socket)
        .spawn()
        .map_err(|e| format!("cannot start a rigd: {e}"))?;
    let own = OwnDaemon { child, dir };
    let start = Instant::now();
    loop {
        match Rig::connect_to(&socket) {
            Ok(rig) => return Ok((rig, own)),
            Err(e) if start.elapsed() > Duration::from_secs(20) => {
                return Err(format!(
                    "the rigd this program started does not answer: {e}"
                ));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn pick_daemon() -> Result<(Rig, Option<OwnDaemon>), String> {
    if let Some(p) = std::env::var_os(rig_proto::SOCKET_ENV).filter(|p| !p.is_empty()) {
        let rig = Rig::connect_to(&p).map_err(|e| e.report().to_string())?;
        println!("using the rigd at {} (RIG_SOCKET)", Path::new(&p).display());
        return Ok((rig, None));
    }
    if let Ok(rig) = Rig::connect_to(rig_proto::DEFAULT_SOCKET) {
        println!("using the rigd at {}", rig_proto::DEFAULT_SOCKET);
        return Ok((rig, None));
    }
    let (rig, own) = start_daemon()?;
    println!(
        "no rigd at {}: started one on {} (pid {}), serving the simulated GPU",
        rig_proto::DEFAULT_SOCKET,
        rig.socket().display(),
        own.child.id()
    );
    Ok((rig, Some(own)))
}

fn run() -> Result<(), String> {
    let (rig, _own) = pick_daemon()?;
    let gpus = rig.gpus().map_err(|e| e.report().to_string())?;
    let gpu = gpus.first().ok_or("rigd serves no GPU")?;
    let device = rig
        .open_device(&gpu.name)
        .map_err(|e| e.report().to_string())?;
    println!(
        "opened {} ({}{})",
        device.name(),
        device.arch(),
        if gpu.path == GpuPath::Sim {
            ", simulated"
        } else {
            ""
        }
    );
    example(&device).map_err(|e| e.report().to_string())?;
    figures(&device).map_err(|e| e.report().to_string())?;
    device.close().map_err(|e| e.report().to_string())?;
    Ok(())
}

/// The seed's example: y += x over 1024 floats.
fn example(device: &Device) -> rig_client::Result<()> {
    let arch = device.arch().to_owned();
    let code = ADD
        .iter()
        .find(|(a, _)| *a == arch)
        .map(|(_, c)| *c)
        .ok_or_else(|| rig_client::Error::Invalid(format!("no add kernel was built for {arch}")))?;
    let image = device.load_image(code)?;
    let add = image.resolve("add")?;
    let x = device.buffer(4 * N, Memory::Pinned)?;
    let y = device.buffer(4 * N, Memory::Pinned)?;
    x.write(|b| put_f32s(b, (0..N).map(|i| i as f32)))?;
    y.write(|b| put_f32s(b, std::iter::repeat(1.0)))?;
    let launch = Submission::new().launch(
        Launch::new(&add, [(N / 256) as u32, 1, 1], [256, 1, 1])
            .params(&[0; 16])
            .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
    );
    device.submit(&launch)?;
    y.read(|b| println!("y[10] = {}", f32s(b).nth(10).unwrap_or(f32::NAN)))?;
    Ok(())
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize]
}

/// Figures of this run: what a queued launch costs the CPU, and a launch's round trip.
fn figures(device: &Device) -> rig_client::Result<()> {
    let arch = device.arch().to_owned();
    let Some(code) = ADD.iter().find(|(a, _)| *a == arch).map(|(_, c)| *c) else {
        return Ok(());
    };
    let image = device.load_image(code)?;
    let add = image.resolve("add")?;
    let x = device.buffer(4 * 256, Memory::Pinned)?;
    let y = device.buffer(4 * 256, Memory::Pinned)?;
    let one = Submission::new().launch(
        Launch::new(&add, [1, 1, 1], [256, 1, 1])
            .params(&[0; 16])
            .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
    );
    device.submit(&one)?.wait()?;
    // Submit cost: batches that fit the rings, so no submit waits for room.
    let mut spent = Duration::ZERO;
    let mut count = 0u32;
    for _ in 0..10 {
        let t = Instant::now();
        let mut last = None;
        for _ in 0..64 {
            last = Some(device.submit(&one)?);
        }
        spent += t.elapsed();
        count += 64;
        if let Some(p) = last {
            p.wait()?;
        }
    }
    let per = spent / count;
    let mut trips = Vec::with_capacity(200);
    for _ in 0..200 {
        let t = Instant::now();
        device.submit(&one)?.wait()?;
        trips.push(t.elapsed());
    }
    let empty = Submission::new();
    let mut empties = Vec::with_capacity(200);
    for _ in 0..200 {
        let t = Instant::now();
        device.submit(&empty)?.wait()?;
        empties.push(t.elapsed());
    }
    println!("figures of this run ({} {}):", device.name(), device.arch());
    println!(
        "  launch submit cost (CPU, queued): {:.3} us",
        per.as_secs_f64() * 1e6
    );
    println!(
        "  launch round trip (submit + spinning wait): p50 {:.1} us, p99 {:.1} us",
        percentile(&mut trips, 0.5).as_secs_f64() * 1e6,
        percentile(&mut trips, 0.99).as_secs_f64() * 1e6
    );
    println!(
        "  empty submission round trip: p50 {:.1} us",
        percentile(&mut empties, 0.5).as_secs_f64() * 1e6
    );
    Ok(())
}

/// The child side: rigd's daemon on a given socket, until SIGTERM or the parent's exit.
mod serve {
    use std::path::PathBuf;
    use std::process::ExitCode;

    pub fn main(args: &[String]) -> ExitCode {
        let Some(socket) = args.first().map(PathBuf::from) else {
            eprintln!("rig-demo --serve-rigd: give the socket path");
            return ExitCode::FAILURE;
        };
        // The daemon stops when the program that started it exits.
        let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
        let mut config = rigd::config::Config::embedded();
        config.daemon.socket = socket.clone();
        config.daemon.mode = 0o600;
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                eprintln!("rig-demo --serve-rigd: {e}");
                return ExitCode::FAILURE;
            }
        };
        match runtime.block_on(rigd::serve_until_sigterm(&socket, &config)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rig-demo --serve-rigd: {e}");
                ExitCode::FAILURE
            }
        }
    }
}
