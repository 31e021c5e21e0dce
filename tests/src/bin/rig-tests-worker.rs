//! The tests' `rig-worker` (rigd's worker program under the tests crate's name, so that
//! Cargo builds it for the tests and names it to them as `CARGO_BIN_EXE_rig-tests-worker`;
//! the tests' rigd runs it through `[kfd] worker`).

fn main() -> std::process::ExitCode {
    rigd::path::worker::main()
}
