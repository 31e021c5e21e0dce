//! `rig-device-plugin`: the Kubernetes device plugin of rig (see the library's docs and
//! `docs/kubernetes.md`).
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use rig_device_plugin::grants::Ledger;
use rig_device_plugin::resources::Settings;
use rig_device_plugin::{health, kubelet, labels, parse_bytes, reclaim};

/// Hands out rigd's GPUs to Kubernetes pods: whole (rig.dev/gpu) or in units of their
/// memory (rig.dev/gpu-memory), through the kubelet's device-plugin API v1beta1.
#[derive(Debug, Parser)]
#[command(
    version,
    about,
    after_help = "Runs beside rigd on each node, as root (a DaemonSet): see docs/kubernetes.md."
)]
struct Cli {
    /// The kubelet's registration socket; the plugin's sockets go in its directory.
    #[arg(long, value_name = "PATH", default_value = kubelet::DEFAULT_KUBELET_SOCKET)]
    kubelet_socket: PathBuf,
    /// rigd's socket on the host (default: $RIG_SOCKET, else /run/rig/rigd.sock).
    #[arg(long, value_name = "PATH")]
    rigd_socket: Option<PathBuf>,
    /// Where the directory holding rigd's socket is mounted in containers.
    #[arg(long, value_name = "PATH", default_value = "/run/rig")]
    container_socket_dir: PathBuf,
    /// The GPU memory in one unit of rig.dev/gpu-memory (bytes, or with K, M, G, T: 1GiB).
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = size)]
    memory_unit: u64,
    /// GPUs (rigd's indices, comma-separated) offered whole as rig.dev/gpu; every other
    /// GPU is offered in memory units as rig.dev/gpu-memory.
    #[arg(long, value_name = "INDICES", value_delimiter = ',')]
    whole_gpus: Vec<u32>,
    /// Answer Allocate with CDI device names (rig.dev/gpu=INDEX, from `rigctl cdi`'s spec)
    /// instead of a mount of rigd's socket.
    #[arg(long)]
    cdi: bool,
    /// How often rigd is asked for its GPUs' health, and the kubelet for its pods'
    /// devices (reclaim), in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(10..))]
    poll_ms: u64,
    /// Devices an allocation may open at once on each of its GPUs.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    devices_per_gpu: u32,
    /// The kubelet's pod-resources socket: which containers hold which devices (reclaim).
    #[arg(long, value_name = "PATH", default_value = reclaim::DEFAULT_POD_RESOURCES_SOCKET)]
    pod_resources_socket: PathBuf,
    /// How long a grant the kubelet has never listed is kept (its pod may still be
    /// starting), in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    reclaim_grace_ms: u64,
    /// Write the GPUs' node labels here, as a Node Feature Discovery feature file (such as
    /// /etc/kubernetes/node-feature-discovery/features.d/rig).
    #[arg(long, value_name = "PATH")]
    features_file: Option<PathBuf>,
    /// The log filter when RUST_LOG is unset.
    #[arg(long, value_name = "FILTER", default_value = "info")]
    log: String,
}

fn size(text: &str) -> Result<u64, String> {
    parse_bytes(text).ok_or_else(|| format!("{text:?} is not a size such as 1GiB or 536870912"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&cli.log));
    let filter = match filter {
        Ok(f) => f,
        Err(e) => {
            eprintln!("rig-device-plugin: --log {:?}: {e}", cli.log);
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let rigd_socket = cli
        .rigd_socket
        .clone()
        .unwrap_or_else(rig_proto::socket_path);
    let settings = Arc::new(Settings {
        rigd_socket: rigd_socket.clone(),
        container_socket_dir: cli.container_socket_dir.clone(),
        memory_unit: cli.memory_unit,
        whole_gpus: cli.whole_gpus.iter().copied().collect::<BTreeSet<u32>>(),
        cdi: cli.cdi,
        devices_per_gpu: cli.devices_per_gpu,
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rig-device-plugin: cannot start the runtime: {e}");
            return ExitCode::from(4);
        }
    };
    let result = runtime.block_on(async {
        tracing::info!(
            kubelet = %cli.kubelet_socket.display(),
            rigd = %rigd_socket.display(),
            memory_unit = cli.memory_unit,
            whole_gpus = ?settings.whole_gpus,
            cdi = cli.cdi,
            "rig-device-plugin starting"
        );
        let every = Duration::from_millis(cli.poll_ms);
        let gpus = health::watch(rigd_socket.clone(), every);
        let ledger = Ledger::default();
        if let Some(path) = cli.features_file.clone() {
            tokio::spawn(labels::keep(path, gpus.clone()));
        }
        if !cli.cdi {
            tokio::spawn(reclaim::run(
                rigd_socket,
                cli.pod_resources_socket.clone(),
                ledger.clone(),
                every,
                Duration::from_millis(cli.reclaim_grace_ms),
            ));
        }
        kubelet::run(&cli.kubelet_socket, settings, gpus, ledger, stop_signal()).await
    });
    match result {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("{}", health::error_chain(&e));
            ExitCode::from(3)
        }
    }
}

/// SIGTERM or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
