//! The `rigd` binary: command line, logging, signals and systemd readiness around
//! [`rigd::Daemon`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use rigd::config::Config;

/// rigd: the daemon that owns this machine's AMD GPUs (or a simulated one) and serves them
/// to rig clients over a unix socket.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// The configuration file. Default: /etc/rig/rigd.toml if it exists, else the embedded
    /// default (the repository's config/rigd.toml).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The control socket, overriding the configuration's daemon.socket.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// The sysfs root scanned for AMD GPUs (for tests).
    #[arg(long, value_name = "DIR", default_value = "/sys", hide = true)]
    sysfs: PathBuf,
}

/// rigd's exit codes.
#[derive(Debug, Clone, Copy)]
enum Exit {
    /// Ran and stopped cleanly.
    Ok = 0,
    /// The configuration is unreadable or invalid.
    Config = 2,
    /// The socket could not be taken (another rigd, permissions).
    Socket = 3,
    /// GPUs or the runtime could not be set up.
    Start = 4,
}

fn print_chain(e: &dyn std::error::Error) {
    let mut msg = format!("rigd: {e}");
    let mut cur = e.source();
    while let Some(s) = cur {
        msg.push_str(&format!(": {s}"));
        cur = s.source();
    }
    tracing::error!("{msg}");
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rigd: {e}");
            return ExitCode::from(Exit::Config as u8);
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.daemon.log));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match &config.source {
        Some(p) => tracing::info!(config = %p.display(), "configuration read"),
        None => tracing::info!("no configuration file: using the embedded default"),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            print_chain(&e);
            return ExitCode::from(Exit::Start as u8);
        }
    };
    let code = runtime.block_on(serve(cli, config));
    ExitCode::from(code as u8)
}

async fn serve(cli: Cli, config: Config) -> Exit {
    // The handlers exist before the socket does, so a signal at any point after it is
    // taken stops rigd cleanly (and none right after READY=1 is lost).
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        (Err(e), _) | (_, Err(e)) => {
            print_chain(&e);
            return Exit::Start;
        }
    };
    let socket = cli.socket.unwrap_or_else(|| config.daemon.socket.clone());
    let activated = rigd::listen::from_systemd().and_then(|l| {
        l.set_nonblocking(true).ok()?;
        tokio::net::UnixListener::from_std(l).ok()
    });
    let (listener, file) = match activated {
        Some(l) => {
            tracing::info!("using the socket systemd passed (socket activation)");
            (l, None)
        }
        None => {
            match rigd::listen::bind(&socket, config.daemon.group.as_deref(), config.daemon.mode) {
                Ok((l, f)) => (l, Some(f)),
                Err(e) => {
                    print_chain(&e);
                    return Exit::Socket;
                }
            }
        }
    };
    if let Err(e) = rigd::listen::set_backlog(&listener, config.connections.backlog) {
        tracing::warn!(error = %e, "cannot set the socket's backlog; keeping the kernel's");
    }
    let daemon = match rigd::Daemon::start(&config, &cli.sysfs) {
        Ok(d) => d,
        Err(e) => {
            print_chain(&e);
            return Exit::Start;
        }
    };
    tracing::info!(socket = %socket.display(), gpus = daemon.gpus(), pid = std::process::id(), "rigd ready");
    if let Err(e) = rigd::notify::notify("READY=1") {
        tracing::warn!(error = %e, "cannot tell systemd rigd is ready");
    }
    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = int.recv() => tracing::info!("SIGINT: stopping"),
        }
        let _ = rigd::notify::notify("STOPPING=1");
    };
    daemon.run(listener, shutdown).await;
    if let Some(file) = file {
        drop(file);
        tracing::info!(socket = %socket.display(), "socket removed; rigd stopped");
    } else {
        tracing::info!("rigd stopped; systemd keeps the socket");
    }
    Exit::Ok
}
