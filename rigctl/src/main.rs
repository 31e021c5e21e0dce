//! `rigctl`: inspect a running rigd (its GPUs, clients, devices) and code objects.
//!
//! It finds rigd as every client does, through `RIG_SOCKET` or the default socket path,
//! and prints tables for people or JSON (`--json`) for scripts. `rigctl image` needs no
//! daemon: it parses the code object locally with `rig_amd::code_object`.
#![forbid(unsafe_code)]

mod image;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rig_proto::messages::{DeviceId, Request, Response};
use rig_proto::{Connection, Error as ProtoError};

/// Inspect a running rigd and AMDGPU code objects.
#[derive(Debug, Parser)]
#[command(
    version,
    about,
    after_help = "rigd is found through RIG_SOCKET, else /run/rig/rigd.sock."
)]
struct Cli {
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// The socket of rigd (default: $RIG_SOCKET, else /run/rig/rigd.sock).
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The GPUs rigd serves (and AMD GPUs it found but cannot drive yet).
    Gpus,
    /// The connected clients: process, user, program, devices and memory.
    Clients,
    /// The open devices: GPU, owner, memory held, whether lost.
    Devices,
    /// One device in detail: facts, rings and positions, memory, timeline, faults.
    Show {
        /// The device id, as `rigctl devices` lists it.
        device: u64,
    },
    /// A code object's kernels, arguments and segment sizes (parsed here, no rigd needed).
    Image {
        /// The code object (an AMDGPU ELF, such as clang's `-mcpu=gfx1100` output).
        file: PathBuf,
    },
}

/// rigctl's errors.
#[derive(Debug, thiserror::Error)]
enum CtlError {
    /// rigd is not reachable.
    #[error(
        "cannot reach rigd at {path}; is rigd running? start it with `systemctl start rigd` (or run `rigd` yourself), \
         or point RIG_SOCKET at its socket"
    )]
    Connect {
        path: PathBuf,
        #[source]
        source: ProtoError,
    },
    /// The connection failed after it was made.
    #[error("talking to rigd failed")]
    Proto(#[from] ProtoError),
    /// rigd refused the request.
    #[error("rigd refused: {0}")]
    Refused(String),
    /// rigd answered something unexpected.
    #[error(
        "rigd answered {0} where rigctl expected another answer; are rigd and rigctl of the same release?"
    )]
    Unexpected(&'static str),
    /// The code object could not be read or parsed.
    #[error("{0}")]
    Image(String),
}

fn connect(socket: Option<PathBuf>) -> Result<Connection, CtlError> {
    let path = socket.unwrap_or_else(rig_proto::socket_path);
    Connection::connect(&path, "rigctl").map_err(|source| CtlError::Connect { path, source })
}

fn call(conn: &mut Connection, request: Request) -> Result<Response, CtlError> {
    let (response, _fds) = conn.call(&request, &[])?;
    match response {
        Response::Error(e) => Err(CtlError::Refused(e.message)),
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
        _ => "another answer",
    })
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<(), CtlError> {
    let s = serde_json::to_string_pretty(v).map_err(|e| CtlError::Image(e.to_string()))?;
    println!("{s}");
    Ok(())
}

fn run(cli: Cli) -> Result<(), CtlError> {
    match cli.command {
        Command::Image { file } => {
            let report = image::inspect(&file).map_err(CtlError::Image)?;
            if cli.json {
                print_json(&report)
            } else {
                print!("{}", image::render_report(&report));
                Ok(())
            }
        }
        Command::Gpus => {
            let mut c = connect(cli.socket)?;
            match call(&mut c, Request::ListGpus)? {
                Response::Gpus(g) if cli.json => print_json(&g),
                Response::Gpus(g) => {
                    print!("{}", table::gpus(&g));
                    Ok(())
                }
                r => Err(unexpected(&r)),
            }
        }
        Command::Clients => {
            let mut c = connect(cli.socket)?;
            match call(&mut c, Request::ListClients)? {
                Response::Clients(v) if cli.json => print_json(&v),
                Response::Clients(v) => {
                    print!("{}", table::clients(&v));
                    Ok(())
                }
                r => Err(unexpected(&r)),
            }
        }
        Command::Devices => {
            let mut c = connect(cli.socket)?;
            match call(&mut c, Request::ListDevices)? {
                Response::Devices(v) if cli.json => print_json(&v),
                Response::Devices(v) => {
                    print!("{}", table::devices(&v));
                    Ok(())
                }
                r => Err(unexpected(&r)),
            }
        }
        Command::Show { device } => {
            let mut c = connect(cli.socket)?;
            match call(
                &mut c,
                Request::ShowDevice {
                    device: DeviceId(device),
                },
            )? {
                Response::Device(d) if cli.json => print_json(&d),
                Response::Device(d) => {
                    print!("{}", table::device(&d));
                    Ok(())
                }
                r => Err(unexpected(&r)),
            }
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The chain once, outermost first.
            let mut msg = format!("rigctl: {e}");
            let mut cur = std::error::Error::source(&e);
            while let Some(s) = cur {
                msg.push_str(&format!(": {s}"));
                cur = s.source();
            }
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}
