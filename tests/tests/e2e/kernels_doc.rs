//! docs/kernels.md's Rust program (tests/src/bin/vadd.rs, the page's "Running it" block
//! verbatim) runs against a real rigd with the page's OpenCL C kernel, as a reader would run
//! it.

use std::path::{Path, PathBuf};
use std::process::Command;

use rig_testkit::{Backend, Daemon};

fn page() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/kernels.md"))
        .expect("docs/kernels.md")
}

/// The page's code block that opens with `fence` and starts with `first`.
fn block(page: &str, fence: &str, first: &str) -> String {
    let open = format!("```{fence}\n{first}");
    let start = page
        .find(&open)
        .unwrap_or_else(|| panic!("docs/kernels.md has no {fence} block starting {first:?}"))
        + fence.len()
        + 4;
    let rest = &page[start..];
    rest[..rest.find("```").expect("the block ends")].to_owned()
}

/// The page's program, as cargo built it for this test.
fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vadd"))
}

#[test]
fn the_pages_rust_program_is_the_example() {
    let program = block(&page(), "rust,no_run", "use rig_client::{Memory, Rig");
    let file =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/vadd.rs"))
            .unwrap();
    assert!(
        file.ends_with(&program),
        "tests/src/bin/vadd.rs is not docs/kernels.md's \"Running it\" program"
    );
}

#[test]
fn the_pages_rust_program_runs_against_rigd() {
    if rig_kernels::Compiler::find().is_err() {
        eprintln!("skipped: clang and lld (17 or later) are needed to build the page's kernel");
        return;
    }
    let d = Daemon::start(Backend::Sim, None);
    let dir = tempfile::tempdir().unwrap();
    let kernel = block(&page(), "opencl", "// file: vadd.cl");
    std::fs::write(dir.path().join("vadd.cl"), kernel).unwrap();
    let out = Command::new(example())
        .current_dir(dir.path())
        .env("RIG_SOCKET", &d.socket)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", example().display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the page's program failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // x[i] = i, y = 1, a = 2: y[10] = 1 + 2 * 10.
    assert_eq!(stdout.trim(), "y[10] = 21", "{stdout}");
}
