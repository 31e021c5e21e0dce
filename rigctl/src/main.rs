//! `rigctl`: inspect and administer a running rigd (its status, GPUs, clients, devices),
//! and inspect code objects.
//!
//! It finds rigd as every client does, through `RIG_SOCKET` or the default socket path,
//! and prints tables for people, JSON (`--json`) or CSV (`--csv`) for scripts; under
//! `--json` errors are JSON too. `rigctl image` needs no daemon: it parses the code object
//! locally with `rig_amd::code_object`. `status`, `clients`, the GPU figures, others'
//! devices, `stop` and `evict` need one of rigd's administrators: root, rigd's user, or a
//! member of `daemon.admin_group`. Being in rigd's socket group only lets a user connect.
#![forbid(unsafe_code)]

mod cdi;
mod counters;
mod image;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use rig_proto::messages::{DeviceId, ErrorCode, GpuInfo, GpuStatus, Request, Response};
use rig_proto::{Connection, Error as ProtoError};

/// Inspect and administer a running rigd, and inspect AMDGPU code objects.
#[derive(Debug, Parser)]
#[command(
    version,
    about,
    after_help = "rigd is found through RIG_SOCKET, else /run/rig/rigd.sock."
)]
struct Cli {
    /// Print JSON instead of tables (errors too).
    #[arg(long, global = true, conflicts_with = "csv")]
    json: bool,
    /// Print CSV instead of tables.
    #[arg(long, global = true)]
    csv: bool,
    /// The socket of rigd (default: $RIG_SOCKET, else /run/rig/rigd.sock).
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One round trip to rigd, timed: whether it answers, and how fast.
    Ping,
    /// rigd itself: version, uptime, configuration, socket.
    Status,
    /// The GPUs rigd serves: product, path, firmware, memory used and free, busy, and (on
    /// the kfd path) what a client costs and how many run at once.
    Gpus,
    /// The SQ counters each GPU offers for measures (at most 4 at once, SQ_WAVES always one
    /// of them), or why it offers none.
    Counters {
        /// Only this GPU, by its index in `rigctl gpus`.
        gpu: Option<u32>,
    },
    /// The client processes: user, program (as /proc names it), devices and memory.
    Clients,
    /// The open devices: GPU, owner, memory held, whether lost.
    Devices,
    /// The grants (a Kubernetes allocation each, made by rig-device-plugin): share, what
    /// their connections hold, pod, socket.
    Grants,
    /// One device in detail: facts, rings and positions, memory, timeline, faults.
    Show {
        /// The device id, as `rigctl devices` lists it.
        device: u64,
    },
    /// GPUs and processes, refreshed (like `nvidia-smi -l`); Ctrl-C ends it.
    Top {
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
        interval: f64,
        /// Refreshes before exiting (0: until interrupted).
        #[arg(long, default_value_t = 0, value_name = "N")]
        count: u64,
    },
    /// Stop a device, whoever owns it: its client finds it lost, "stopped by the
    /// administrator".
    Stop {
        /// The device id, as `rigctl devices` lists it.
        device: u64,
    },
    /// Stop every device of a client process.
    Evict {
        /// The process id, as `rigctl clients` lists it.
        pid: u32,
    },
    /// A CDI spec of rigd's GPUs (rig.dev/gpu=INDEX and =all: rigd's socket mounted,
    /// RIG_SOCKET set) for containerd, CRI-O and Podman; JSON, to stdout or --output.
    Cdi {
        /// Write it here (atomically), such as /etc/cdi/rig.json.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Where containers see the directory holding rigd's socket.
        #[arg(long, value_name = "PATH", default_value = "/run/rig")]
        container_socket_dir: PathBuf,
    },
    /// A code object's kernels, arguments and segment sizes (parsed here, no rigd needed).
    Image {
        /// The code object (an AMDGPU ELF, such as clang's `-mcpu=gfx1100` output).
        file: PathBuf,
    },
    /// rigctl's version and protocol, and those of the rigd it reaches.
    Version,
    /// A completion script for SHELL, to stdout (bash: save it as
    /// /usr/share/bash-completion/completions/rigctl).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// rigctl's manual page, rigctl(1), as roff to stdout (save it as
    /// /usr/share/man/man1/rigctl.1).
    Man,
}

/// rigctl's errors.
#[derive(Debug, thiserror::Error)]
enum CtlError {
    /// Nothing listens at the socket.
    #[error(
        "rigd is not running at {path} (nothing listens there); is rigd running? start it with \
         `systemctl start rigd` (or run `rigd` yourself), or point RIG_SOCKET (or --socket) at its socket"
    )]
    NotRunning {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The socket's permissions keep this user out.
    #[error("permission denied on rigd's socket {path}: this user may not open it; {hint}")]
    SocketDenied {
        path: PathBuf,
        /// What gives access ([`access_hint`]).
        hint: String,
        #[source]
        source: std::io::Error,
    },
    /// rigd's `[access]` refused this user.
    #[error(
        "rigd at {path} refused this user by its access rules ([access] in rigd.toml): {message}"
    )]
    AccessRefused { path: PathBuf, message: String },
    /// The socket could not be connected for another reason.
    #[error("cannot connect to rigd at {path}")]
    Unreachable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// rigd could not be reached for another reason.
    #[error("cannot talk to rigd at {path}")]
    Connect {
        path: PathBuf,
        #[source]
        source: ProtoError,
    },
    /// The connection failed after it was made.
    #[error("talking to rigd failed")]
    Proto(#[from] ProtoError),
    /// rigd refused the request, with its protocol error code.
    #[error("rigd refused ({code:?}): {message}")]
    Refused { code: ErrorCode, message: String },
    /// rigd answered something unexpected.
    #[error(
        "rigd answered {0} where rigctl expected another answer; are rigd and rigctl of the same release?"
    )]
    Unexpected(&'static str),
    /// The code object could not be read or parsed.
    #[error("{0}")]
    Image(String),
    /// The output could not be written.
    #[error("cannot write the output: {0}")]
    Output(String),
    /// `--csv` for a verb without rows.
    #[error("`{0}` has no CSV form; use --json")]
    NoCsv(&'static str),
}

impl CtlError {
    /// A stable name for scripts (`--json` errors).
    fn kind(&self) -> &'static str {
        match self {
            CtlError::NotRunning { .. } => "not-running",
            CtlError::SocketDenied { .. } => "permission-denied",
            CtlError::AccessRefused { .. } => "refused-by-access-rules",
            CtlError::Connect { .. } | CtlError::Unreachable { .. } | CtlError::Proto(_) => {
                "connection"
            }
            CtlError::Refused { .. } => "refused",
            CtlError::Unexpected(_) => "unexpected-answer",
            CtlError::Image(_) => "image",
            CtlError::Output(_) | CtlError::NoCsv(_) => "usage",
        }
    }

    /// The protocol's error code, when rigd gave one.
    fn code(&self) -> Option<ErrorCode> {
        match self {
            CtlError::Refused { code, .. } => Some(*code),
            CtlError::AccessRefused { .. } => Some(ErrorCode::PermissionDenied),
            _ => None,
        }
    }
}

fn connect(socket: &Option<PathBuf>) -> Result<Connection, CtlError> {
    let path = socket.clone().unwrap_or_else(rig_proto::socket_path);
    Connection::connect(&path, "rigctl").map_err(|source| match source {
        ProtoError::Connect { source, .. } => match source.kind() {
            std::io::ErrorKind::PermissionDenied => CtlError::SocketDenied {
                hint: access_hint(&path),
                path,
                source,
            },
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                CtlError::NotRunning { path, source }
            }
            _ => CtlError::Unreachable { path, source },
        },
        ProtoError::Refused(e) if e.code == ErrorCode::PermissionDenied => {
            CtlError::AccessRefused {
                path,
                message: e.message,
            }
        }
        source => CtlError::Connect { path, source },
    })
}

/// What gives this user access to the socket at `path`: joining the group of what keeps it
/// out (the socket, or its directory when the socket cannot even be looked at), unless that
/// group is root's, which no group membership opens.
fn access_hint(path: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let denier = match std::fs::metadata(path) {
        Ok(m) => Some((path.to_owned(), m)),
        Err(_) => path
            .parent()
            .and_then(|d| std::fs::metadata(d).ok().map(|m| (d.to_owned(), m))),
    };
    let Some((what, meta)) = denier else {
        return "join rigd's socket group (daemon.group in rigd.toml; `sudo usermod -aG GROUP $USER`, then log in again) or run rigctl as root".into();
    };
    if meta.gid() == 0 {
        return format!(
            "{} belongs to group root, which no user should join: have rigd's operator set daemon.group (such as \"rig\", which systemd/rig.sysusers.conf makes) and restart rigd, or run rigctl as root",
            what.display()
        );
    }
    let group = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(meta.gid()))
        .ok()
        .flatten()
        .map_or_else(|| meta.gid().to_string(), |g| g.name);
    format!(
        "join its group {group} (`sudo usermod -aG {group} $USER`, then log in again) or run rigctl as root"
    )
}

/// `rigctl version`: rigctl's own version and protocol, then rigd's (the greeting every
/// connection gets, so any user who may connect sees it).
fn version(socket: &Option<PathBuf>, f: Format) -> Result<String, CtlError> {
    let mine = concat!("rigctl ", env!("CARGO_PKG_VERSION"));
    let c = connect(socket);
    if f == Format::Json {
        let rigd = c.as_ref().ok().map(|c| {
            let w = c.daemon();
            serde_json::json!({ "daemon": w.daemon, "protocol": w.version, "pid": w.pid })
        });
        let v = serde_json::json!({
            "rigctl": mine,
            "protocol": rig_proto::VERSION,
            "rigd": rigd,
            "error": c.as_ref().err().map(chain),
        });
        return json(&v);
    }
    println!("{mine} (protocol {})", rig_proto::VERSION);
    let w = c?.daemon().clone();
    Ok(format!(
        "{} (protocol {}, pid {})\n",
        w.daemon, w.version, w.pid
    ))
}

/// `rigctl completions SHELL` and `rigctl man`: made from the command line's own definition.
fn generated(command: &Command) -> Result<String, CtlError> {
    use clap::CommandFactory;
    let mut cli = Cli::command();
    let mut out = Vec::new();
    match command {
        Command::Completions { shell } => {
            clap_complete::generate(*shell, &mut cli, "rigctl", &mut out);
        }
        _ => clap_mangen::Man::new(cli)
            .render(&mut out)
            .map_err(|e| CtlError::Output(e.to_string()))?,
    }
    String::from_utf8(out).map_err(|e| CtlError::Output(e.to_string()))
}

fn call(conn: &mut Connection, request: Request) -> Result<Response, CtlError> {
    let (response, _fds) = conn.call(&request, &[])?;
    match response {
        Response::Error(e) => Err(CtlError::Refused {
            code: e.code,
            message: e.message,
        }),
        r => Ok(r),
    }
}

fn unexpected(r: &Response) -> CtlError {
    CtlError::Unexpected(match r {
        Response::Done => "done",
        Response::Gpus(_) => "a gpu list",
        Response::Clients(_) => "a client list",
        Response::Devices(_) => "a device list",
        Response::Device(_) => "a device report",
        Response::Daemon(_) => "a daemon status",
        Response::GpuStatus(_) => "gpu figures",
        Response::Processes(_) => "a process list",
        Response::Pong => "a pong",
        Response::Grants(_) => "a grant list",
        _ => "another answer",
    })
}

/// How answers are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Table,
    Json,
    Csv,
}

fn json<T: serde::Serialize>(v: &T) -> Result<String, CtlError> {
    serde_json::to_string_pretty(v)
        .map(|s| s + "\n")
        .map_err(|e| CtlError::Output(e.to_string()))
}

fn csv(grid: &table::Grid) -> Result<String, CtlError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let out = |e: csv::Error| CtlError::Output(e.to_string());
    w.write_record(&grid.header).map_err(out)?;
    for r in &grid.rows {
        w.write_record(r).map_err(out)?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| CtlError::Output(e.to_string()))?;
    String::from_utf8(bytes).map_err(|e| CtlError::Output(e.to_string()))
}

/// Prints `value` as JSON, or `grid` as a table or CSV.
fn emit<T: serde::Serialize>(f: Format, value: &T, grid: &table::Grid) -> Result<String, CtlError> {
    match f {
        Format::Json => json(value),
        Format::Csv => csv(grid),
        Format::Table => Ok(table::render_grid(grid)),
    }
}

/// The GPU list with each GPU's figures, when this user may read them.
fn gpus(c: &mut Connection) -> Result<Vec<table::Gpu>, CtlError> {
    let list = match call(c, Request::ListGpus)? {
        Response::Gpus(g) => g,
        r => return Err(unexpected(&r)),
    };
    // Figures need an administrator; others still see the list.
    let figures: Vec<GpuStatus> = match call(c, Request::GpuStatus) {
        Ok(Response::GpuStatus(s)) => s,
        Ok(r) => return Err(unexpected(&r)),
        Err(CtlError::Refused {
            code: ErrorCode::PermissionDenied,
            ..
        }) => Vec::new(),
        Err(e) => return Err(e),
    };
    Ok(list
        .into_iter()
        .map(|info: GpuInfo| {
            let status = figures.iter().find(|s| s.index == info.index).cloned();
            table::Gpu { info, status }
        })
        .collect())
}

fn top_screen(c: &mut Connection, f: Format) -> Result<String, CtlError> {
    let g = gpus(c)?;
    // Processes need an administrator; others still see the GPUs.
    let p = match call(c, Request::ListProcesses) {
        Ok(Response::Processes(p)) => Some(p),
        Ok(r) => return Err(unexpected(&r)),
        Err(CtlError::Refused {
            code: ErrorCode::PermissionDenied,
            ..
        }) => None,
        Err(e) => return Err(e),
    };
    match f {
        Format::Json => {
            let v = serde_json::json!({ "gpus": g, "processes": p });
            serde_json::to_string(&v)
                .map(|s| s + "\n")
                .map_err(|e| CtlError::Output(e.to_string()))
        }
        Format::Csv => Err(CtlError::NoCsv("top")),
        Format::Table => Ok(format!(
            "{}\n{}",
            table::render_grid(&table::gpus(&g)),
            match &p {
                Some(p) => table::render_grid(&table::processes(p)),
                None => "(client processes: only rigd's administrators see them: root, rigd's user, members of daemon.admin_group)\n".into(),
            }
        )),
    }
}

fn run(cli: Cli) -> Result<(), CtlError> {
    let f = if cli.json {
        Format::Json
    } else if cli.csv {
        Format::Csv
    } else {
        Format::Table
    };
    let out = match cli.command {
        Command::Version => version(&cli.socket, f)?,
        ref c @ (Command::Completions { .. } | Command::Man) => generated(c)?,
        Command::Image { file } => {
            let report = image::inspect(&file).map_err(CtlError::Image)?;
            match f {
                Format::Json => json(&report)?,
                Format::Csv => return Err(CtlError::NoCsv("image")),
                Format::Table => image::render_report(&report),
            }
        }
        Command::Cdi {
            output,
            container_socket_dir,
        } => {
            let mut c = connect(&cli.socket)?;
            let Response::Gpus(g) = call(&mut c, Request::ListGpus)? else {
                return Err(CtlError::Unexpected("another answer"));
            };
            let socket = cli.socket.clone().unwrap_or_else(rig_proto::socket_path);
            let text = json(&cdi::spec(&g, &socket, &container_socket_dir))?;
            match output {
                Some(path) => return cdi::write(&path, &text).map_err(CtlError::Output),
                None => text,
            }
        }
        Command::Ping => {
            let mut c = connect(&cli.socket)?;
            let began = std::time::Instant::now();
            match call(&mut c, Request::Ping)? {
                Response::Pong => ping(f, &c, &cli.socket, began.elapsed())?,
                r => return Err(unexpected(&r)),
            }
        }
        Command::Status => {
            let mut c = connect(&cli.socket)?;
            match call(&mut c, Request::DaemonStatus)? {
                Response::Daemon(s) => emit(f, &s, &table::status(&s))?,
                r => return Err(unexpected(&r)),
            }
        }
        Command::Gpus => {
            let mut c = connect(&cli.socket)?;
            let g = gpus(&mut c)?;
            emit(f, &g, &table::gpus(&g))?
        }
        Command::Counters { gpu } => {
            let mut c = connect(&cli.socket)?;
            let Response::Gpus(g) = call(&mut c, Request::ListGpus)? else {
                return Err(CtlError::Unexpected("another answer"));
            };
            let list = counters::of(&g, gpu);
            emit(f, &list, &counters::grid(&list))?
        }
        Command::Clients => {
            let mut c = connect(&cli.socket)?;
            match call(&mut c, Request::ListProcesses)? {
                Response::Processes(p) => emit(f, &p, &table::processes(&p))?,
                r => return Err(unexpected(&r)),
            }
        }
        Command::Grants => {
            let mut c = connect(&cli.socket)?;
            match call(&mut c, Request::Grants)? {
                Response::Grants(g) => emit(f, &g, &table::grants(&g))?,
                r => return Err(unexpected(&r)),
            }
        }
        Command::Devices => {
            let mut c = connect(&cli.socket)?;
            match call(&mut c, Request::ListDevices)? {
                Response::Devices(v) => emit(f, &v, &table::devices(&v))?,
                r => return Err(unexpected(&r)),
            }
        }
        Command::Show { device } => {
            let mut c = connect(&cli.socket)?;
            match call(
                &mut c,
                Request::ShowDevice {
                    device: DeviceId(device),
                },
            )? {
                Response::Device(d) => match f {
                    Format::Json => json(&d)?,
                    Format::Csv => return Err(CtlError::NoCsv("show")),
                    Format::Table => table::device(&d),
                },
                r => return Err(unexpected(&r)),
            }
        }
        Command::Stop { device } => {
            let mut c = connect(&cli.socket)?;
            match call(
                &mut c,
                Request::AdminStop {
                    device: DeviceId(device),
                },
            )? {
                Response::Done if f == Format::Json => {
                    json(&serde_json::json!({ "stopped": [device] }))?
                }
                Response::Done => format!("device {device} stopped\n"),
                r => return Err(unexpected(&r)),
            }
        }
        Command::Evict { pid } => {
            let mut c = connect(&cli.socket)?;
            match call(&mut c, Request::Evict { pid })? {
                Response::Evicted { devices } => {
                    let ids: Vec<u64> = devices.iter().map(|d| d.0).collect();
                    if f == Format::Json {
                        json(&serde_json::json!({ "pid": pid, "stopped": ids }))?
                    } else {
                        let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
                        format!("process {pid}: devices {} stopped\n", ids.join(", "))
                    }
                }
                r => return Err(unexpected(&r)),
            }
        }
        Command::Top { interval, count } => {
            let mut c = connect(&cli.socket)?;
            let every = Duration::from_secs_f64(interval.clamp(0.05, 3600.0));
            let clear = f == Format::Table && std::io::IsTerminal::is_terminal(&std::io::stdout());
            let mut n = 0;
            loop {
                let screen = top_screen(&mut c, f)?;
                if clear {
                    // Home and clear, as watch(1) does.
                    print!("\x1b[H\x1b[2J");
                }
                print!("{screen}");
                std::io::Write::flush(&mut std::io::stdout())
                    .map_err(|e| CtlError::Output(e.to_string()))?;
                n += 1;
                if count != 0 && n >= count {
                    return Ok(());
                }
                std::thread::sleep(every);
            }
        }
    };
    print!("{out}");
    Ok(())
}

/// What `rigctl ping` prints: who answered, and the round trip of its `Ping`.
fn ping(
    f: Format,
    c: &Connection,
    socket: &Option<PathBuf>,
    took: Duration,
) -> Result<String, CtlError> {
    let path = socket.clone().unwrap_or_else(rig_proto::socket_path);
    let w = c.daemon();
    let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
    match f {
        Format::Json => json(&serde_json::json!({
            "socket": path,
            "daemon": w.daemon,
            "pid": w.pid,
            "round_trip_us": us,
        })),
        Format::Csv => Err(CtlError::NoCsv("ping")),
        Format::Table => Ok(format!(
            "{} (pid {}) at {} answered in {:.3} ms\n",
            w.daemon,
            w.pid,
            path.display(),
            took.as_secs_f64() * 1e3
        )),
    }
}

/// The error and its sources, outermost first.
fn chain(e: &CtlError) -> String {
    let mut msg = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(s) = cur {
        msg.push_str(&format!(": {s}"));
        cur = s.source();
    }
    msg
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let as_json = cli.json;
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if as_json => {
            let v = serde_json::json!({
                "error": {
                    "kind": e.kind(),
                    "code": e.code(),
                    "message": chain(&e),
                }
            });
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("rigctl: {}", chain(&e));
            ExitCode::FAILURE
        }
    }
}
