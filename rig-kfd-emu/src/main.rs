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
    /// The GPUs' clock counts at creation (ticks).
    #[arg(long, default_value_t = 0)]
    clock_offset: u64,
    /// How much faster the GPUs' clocks run than their 100 MHz, in ppm (negative: slower).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    clock_drift_ppm: f64,
    /// Nanoseconds a read of a GPU's counter takes.
    #[arg(long, default_value_t = 0)]
    clock_read_ns: u64,
    /// The counter GET_CLOCK_COUNTERS reads less the stamps' clock, in ticks (GFX12's).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    clock_constant: i64,
    /// Nanoseconds GET_CLOCK_COUNTERS spends between the GPU's counter and the host's clocks.
    #[arg(long, default_value_t = 0)]
    clock_gap_ns: u64,
    /// Preempts this read of a GPU's counter (counting from 1, reads by processes holding a
    /// queue on it) for --clock-stall-ms, between the counter and the host's sample.
    #[arg(long, requires = "clock_stall_ms")]
    clock_stall_read: Option<u64>,
    /// How long the preempted read stalls, in milliseconds.
    #[arg(long, requires = "clock_stall_read")]
    clock_stall_ms: Option<u64>,
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
        clock: rig_sim::ClockModel {
            offset: args.clock_offset,
            drift_ppm: args.clock_drift_ppm,
            read_ns: args.clock_read_ns,
            constant: args.clock_constant,
            ..rig_sim::ClockModel::default()
        },
        clock_gap_ns: args.clock_gap_ns,
        clock_stall: args
            .clock_stall_read
            .zip(args.clock_stall_ms)
            .map(|(read, ms)| rig_sim::Stall {
                read,
                ns: ms.saturating_mul(1_000_000),
            }),
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
