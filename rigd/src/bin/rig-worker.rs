//! `rig-worker`: one client's KFD process, started by rigd ([`rigd::path::worker`]).
//!
//! rigd starts it with its socket as stdin; it confines itself, opens KFD (the machine's,
//! or the emulated KFD rigd names) and serves rigd's calls for that client's devices until
//! rigd closes the socket or dies. It is no command for people to run.

fn main() -> std::process::ExitCode {
    rigd::path::worker::main()
}
