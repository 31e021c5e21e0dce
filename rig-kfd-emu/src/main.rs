//! `rig-kfd-emu`: serves an emulated KFD on a Unix socket until killed.

use std::path::PathBuf;

use clap::Parser;

/// An emulated /dev/kfd backed by rig's simulated GPU.
#[derive(Debug, Parser)]
struct Args {
    /// The socket to serve.
    #[arg(long)]
    socket: PathBuf,
    /// Where to write the sysfs topology tree.
    #[arg(long)]
    topology: PathBuf,
    /// Processors to emulate, one GPU each.
    #[arg(long, value_delimiter = ',', default_value = "gfx1100,gfx1201,gfx942")]
    gpus: Vec<String>,
    /// VRAM of each GPU, in MiB.
    #[arg(long, default_value_t = 4096)]
    vram_mib: u64,
    /// VRAM of each GPU the host reaches through its BAR, in MiB (256: a GPU without
    /// resizable BAR); all of it if not given.
    #[arg(long)]
    bar_mib: Option<u64>,
    /// Refuse the MMIO_REMAP (HDP flush) page (ENOMEM), as a GPU without one does.
    #[arg(long)]
    no_mmio_remap: bool,
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let config = rig_kfd_emu::kernel::Config {
        models: args.gpus,
        vram_bytes: args.vram_mib << 20,
        bar_bytes: args.bar_mib.map(|m| m << 20),
        mmio_remap: !args.no_mmio_remap,
        ..Default::default()
    };
    match rig_kfd_emu::start(config, &args.socket, &args.topology) {
        Ok(_server) => loop {
            std::thread::park();
        },
        Err(e) => {
            let mut msg = format!("rig-kfd-emu: {e}");
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg += &format!(": {s}");
                src = s.source();
            }
            eprintln!("{msg}");
            std::process::ExitCode::FAILURE
        }
    }
}
