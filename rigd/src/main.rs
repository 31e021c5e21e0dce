//! The `rigd` binary: command line, logging, signals and systemd's protocol around
//! [`rigd::Daemon`].
//!
//! Signals: SIGTERM and SIGINT stop rigd cleanly (its socket removed, unless systemd owns
//! it); SIGHUP rereads the configuration and puts its log filter, `[access]`,
//! `daemon.admin_group`, `[limits]` and `metrics.per_client` in force. The handlers are
//! installed before the socket exists, so no signal ever ends rigd with its socket left
//! behind.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use rigd::config::Config;
use rigd::logging::Logging;

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
    /// Check the configuration and exit: 0 when it is valid, 2 (with the key named) when not.
    #[arg(long)]
    check: bool,
    /// Print rigd's manual page, rigd(8), as roff and exit (save it as
    /// /usr/share/man/man8/rigd.8).
    #[arg(long)]
    man: bool,
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

/// `e` and its sources, outermost first: the OS's reason included.
fn chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        msg.push_str(&format!(": {s}"));
        cur = s.source();
    }
    msg
}

/// Logs `e` (the log line names rigd already).
fn print_chain(e: &dyn std::error::Error) {
    tracing::error!("{}", chain(e));
}

/// Says `e` on stderr, before logging is set up.
fn say_chain(e: &dyn std::error::Error) {
    eprintln!("rigd: {}", chain(e));
}

/// rigd(8), made from the command line's own definition.
fn man() -> ExitCode {
    use clap::CommandFactory;
    let mut out = Vec::new();
    let rendered = clap_mangen::Man::new(Cli::command())
        .section("8")
        .render(&mut out)
        .and_then(|()| std::io::Write::write_all(&mut std::io::stdout(), &out));
    match rendered {
        Ok(()) => ExitCode::from(Exit::Ok as u8),
        Err(e) => {
            say_chain(&e);
            ExitCode::from(Exit::Start as u8)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.man {
        return man();
    }
    let config = match Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            say_chain(&e);
            return ExitCode::from(Exit::Config as u8);
        }
    };
    if cli.check {
        // A start refuses an invalid RUST_LOG, so the check does too.
        if let Err(e) = rigd::logging::env_filter() {
            say_chain(&e);
            return ExitCode::from(Exit::Config as u8);
        }
        match &config.source {
            Some(p) => println!("rigd: the configuration {} is valid", p.display()),
            None => println!("rigd: no configuration file; the embedded default is valid"),
        }
        println!("rigd: administrators: {}", administrators(&config));
        return ExitCode::from(Exit::Ok as u8);
    }
    let logging = match Logging::init(&config.daemon.log) {
        Ok(l) => l,
        Err(e) => {
            say_chain(&e);
            return ExitCode::from(Exit::Config as u8);
        }
    };
    match &config.source {
        Some(p) => {
            tracing::info!(config = %p.display(), log = ?logging.sink(), "configuration read")
        }
        None => {
            tracing::info!(log = ?logging.sink(), "no configuration file: using the embedded default")
        }
    }
    tracing::info!(administrators = %administrators(&config), "who may inspect and stop others' work");
    if !rigd::heap::give_large_blocks_back() {
        tracing::debug!("the allocator keeps its own mapping threshold");
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
    let code = runtime.block_on(serve(cli, config, logging));
    ExitCode::from(code as u8)
}

/// Who `config` makes an administrator, in words (validation resolved the group).
fn administrators(config: &Config) -> String {
    match config.daemon.admin_group.as_deref() {
        Some(g) => format!(
            "root, rigd's user and members of group {g} (gid {}, daemon.admin_group)",
            rigd::config::resolve_group(g).map_or("?".into(), |id| id.to_string())
        ),
        None => "root and rigd's user only (daemon.admin_group is unset)".into(),
    }
}

/// The listening socket: the one systemd passed, else one rigd binds (and removes at exit).
fn take_socket(
    socket: &Path,
    config: &Config,
) -> Result<(tokio::net::UnixListener, Option<rigd::listen::SocketFile>), Exit> {
    match rigd::listen::from_systemd() {
        Ok(Some(l)) => {
            let l = l
                .set_nonblocking(true)
                .and_then(|()| tokio::net::UnixListener::from_std(l))
                .map_err(|e| {
                    print_chain(&e);
                    Exit::Socket
                })?;
            tracing::info!("using the socket systemd passed (socket activation)");
            Ok((l, None))
        }
        Ok(None) => rigd::listen::bind(socket, config.daemon.group.as_deref(), config.daemon.mode)
            .map(|(l, f)| (l, Some(f)))
            .map_err(|e| {
                print_chain(&e);
                Exit::Socket
            }),
        Err(e) => {
            print_chain(&e);
            Err(Exit::Socket)
        }
    }
}

/// SIGHUP: rereads the configuration rigd was started with and puts in force what may
/// change while it serves. An invalid file changes nothing.
fn reload(cli: &Cli, logging: &mut Logging, reloader: &rigd::reload::Reloader) {
    let _ = rigd::notify::reloading();
    let new = match Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("SIGHUP: {}; keeping the configuration in force", chain(&e));
            let _ = rigd::notify::reloaded("reload refused: the configuration is invalid");
            return;
        }
    };
    let source = new
        .source
        .as_ref()
        .map_or("the embedded default".to_owned(), |p| {
            p.display().to_string()
        });
    let mut changed = Vec::new();
    match logging.reload(&new.daemon.log) {
        Ok(Some(c)) => changed.push(c),
        Ok(None) => {}
        Err(e) => tracing::error!("SIGHUP: {}", chain(&e)),
    }
    changed.extend(reloader.apply(&new));
    if changed.is_empty() {
        tracing::info!(config = %source, "SIGHUP: configuration reread; nothing changed");
    } else {
        tracing::info!(config = %source, changed = %changed.join("; "), "SIGHUP: configuration reloaded");
    }
    let _ = rigd::notify::reloaded(&format!("reloaded {source}"));
}

async fn serve(cli: Cli, config: Config, mut logging: Logging) -> Exit {
    // The handlers exist before the socket does, so a signal at any point after it is
    // taken stops (or reloads) rigd cleanly, and none right after READY=1 is lost.
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int, mut hup) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(t), Ok(i), Ok(h)) => (t, i, h),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            print_chain(&e);
            return Exit::Start;
        }
    };
    let socket = cli
        .socket
        .clone()
        .unwrap_or_else(|| config.daemon.socket.clone());
    let (listener, file) = match take_socket(&socket, &config) {
        Ok(t) => t,
        Err(code) => return code,
    };
    // The path clients reach: systemd's ListenStream= when activated, whatever rigd was told.
    let served = rigd::listen::served_path(&listener).unwrap_or_else(|| socket.clone());
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
    // PANIC-free: validated when the configuration was read.
    let metrics_at = config.metrics.endpoint().unwrap_or_default();
    let metrics = match &metrics_at {
        Some(at) => {
            match rigd::metrics::Endpoint::bind(at, config.metrics.group.as_deref()).await {
                Ok(e) => {
                    tracing::info!(metrics = %e.describe(), "serving metrics at /metrics");
                    if e.beyond_loopback() {
                        tracing::warn!(
                            metrics = %e.describe(),
                            "the metrics endpoint listens beyond loopback (metrics.remote = true): every host that reaches its port reads every GPU's and user's figures; keep it on a network only Prometheus reaches"
                        );
                    }
                    Some(tokio::spawn(rigd::metrics::serve(e, daemon.metrics())))
                }
                Err(e) => {
                    print_chain(&e);
                    return Exit::Socket;
                }
            }
        }
        None => None,
    };
    tracing::info!(socket = %served.display(), gpus = daemon.gpus(), pid = std::process::id(), "rigd ready");
    if let Err(e) = rigd::notify::ready(&served, daemon.gpus()) {
        tracing::warn!(error = %e, "cannot tell systemd rigd is ready");
    }
    daemon.serving(&served);
    let reloader = daemon.reloader();
    let mut watchdog = rigd::notify::watchdog_interval().map(tokio::time::interval);
    if let Some(w) = &watchdog {
        tracing::debug!(
            every_ms = w.period().as_millis() as u64,
            "pinging systemd's watchdog"
        );
    }
    // Polled by the server's accept loop: the watchdog pings prove that loop runs.
    let until_stopped = async move {
        loop {
            tokio::select! {
                _ = term.recv() => { tracing::info!("SIGTERM: stopping"); break }
                _ = int.recv() => { tracing::info!("SIGINT: stopping"); break }
                _ = hup.recv() => reload(&cli, &mut logging, &reloader),
                _ = async { watchdog.as_mut()?.tick().await; Some(()) }, if watchdog.is_some() => {
                    let _ = rigd::notify::watchdog();
                }
            }
        }
        let _ = rigd::notify::stopping();
    };
    daemon.run(listener, until_stopped).await;
    if let Some(m) = metrics {
        // Dropping the endpoint removes a unix metrics socket.
        m.abort();
        let _ = m.await;
    }
    if let Some(file) = file {
        drop(file);
        tracing::info!(socket = %served.display(), "socket removed; rigd stopped");
    } else {
        tracing::info!("rigd stopped; systemd keeps the socket");
    }
    Exit::Ok
}
