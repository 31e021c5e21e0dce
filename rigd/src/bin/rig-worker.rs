//! `rig-worker`: one client's KFD process, started by rigd ([`rigd::path::worker`]).
//!
//! rigd starts it with its socket as stdin; it confines itself, opens KFD (the machine's,
//! or the emulated KFD rigd names) and serves rigd's calls for that client's devices until
//! rigd closes the socket or dies. It is no command for people to run.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use rigd::path::worker::{self, KernelSpec};

/// One rig client's KFD process (started by rigd, never by hand).
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// rigd's pid: the worker ends if rigd is gone.
    #[arg(long)]
    parent: u32,
    /// Open the machine's /dev/kfd.
    #[arg(long, conflicts_with = "emulated")]
    host: bool,
    /// Open the emulated KFD serving this socket instead.
    #[arg(long, requires = "topology")]
    emulated: Option<PathBuf>,
    /// The emulated KFD's topology tree.
    #[arg(long)]
    topology: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = worker::confine(cli.parent) {
        eprintln!("rig-worker: {e}");
        return ExitCode::FAILURE;
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let spec = match (cli.host, cli.emulated, cli.topology) {
        (false, Some(socket), Some(topology)) => KernelSpec::Emulated { socket, topology },
        _ => KernelSpec::Host,
    };
    let sock = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rig-worker: no socket on stdin: {e}");
            return ExitCode::FAILURE;
        }
    };
    match worker::serve(sock, spec.kernel()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("rig-worker ends: {e}");
            ExitCode::FAILURE
        }
    }
}
