//! Kernels built by a `build.rs`: each source compiled for each processor into
//! `$OUT_DIR/<stem>.<processor>.co`, which the crate then embeds with
//! `include_bytes!(concat!(env!("OUT_DIR"), "/add.gfx1100.co"))`.
//!
//! ```no_run
//! // build.rs, with `rig-kernels` under [build-dependencies]
//! fn main() -> Result<(), rig_kernels::Error> {
//!     rig_kernels::build::compile("kernels/add.cl", &["gfx1100", "gfx1201"])?;
//!     Ok(())
//! }
//! ```

use std::path::{Path, PathBuf};

use crate::{Compiler, Error, Options, Source};

/// Compiles the source at `path` (relative to the crate's root, as Cargo runs `build.rs`)
/// for each of `processors` with [`Options::default`], writes
/// `$OUT_DIR/<stem>.<processor>.co` and returns their paths. Tells Cargo to build again
/// when the source, `RIG_CLANG` or `RIG_LLD` change.
pub fn compile(path: impl AsRef<Path>, processors: &[&str]) -> Result<Vec<PathBuf>, Error> {
    compile_with(path, processors, &Options::default())
}

/// [`compile`] with these options.
pub fn compile_with(
    path: impl AsRef<Path>,
    processors: &[&str],
    options: &Options,
) -> Result<Vec<PathBuf>, Error> {
    let path = path.as_ref();
    println!("cargo:rerun-if-changed={}", path.display());
    println!("cargo:rerun-if-env-changed=RIG_CLANG");
    println!("cargo:rerun-if-env-changed=RIG_LLD");
    let out = std::env::var_os("OUT_DIR")
        .map(PathBuf::from)
        .ok_or_else(|| Error::Io {
            what: "OUT_DIR is not set: rig_kernels::build runs from a build.rs".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })?;
    compile_into(path, processors, options, &out)
}

/// Compiles the source at `path` for each of `processors` into
/// `<dir>/<stem>.<processor>.co` and returns their paths.
pub fn compile_into(
    path: &Path,
    processors: &[&str],
    options: &Options,
    dir: &Path,
) -> Result<Vec<PathBuf>, Error> {
    let source = Source::file(path)?;
    let compiler = Compiler::find()?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "kernel".into());
    processors
        .iter()
        .map(|p| {
            let code = compiler.compile(&source, p, options)?;
            let file = dir.join(format!("{stem}.{}.co", p.replace(':', "_")));
            std::fs::write(&file, code).map_err(|source| Error::Io {
                what: format!("cannot write {}", file.display()),
                source,
            })?;
            Ok(file)
        })
        .collect()
}
