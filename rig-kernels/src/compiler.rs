//! The compiler: finding clang and lld, checking their version, and running them.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The oldest LLVM major version [`Compiler`] accepts: the first whose clang emits code
/// object v5 by default for the processors rig runs (gfx11 and gfx12 need it too).
pub const MIN_LLVM: u32 = 17;

/// The clang programs [`Compiler::find`] tries, in order, when `RIG_CLANG` is not set.
const CLANGS: [&str; 6] = [
    "clang-19", "clang-20", "clang-21", "clang-18", "clang-17", "clang",
];

/// The most bytes of a compiler's diagnostics an error keeps (the first ones: the cause).
const MAX_DIAGNOSTICS: usize = 16 << 10;

/// What a link that left functions undefined says to do: without ROCm, what the preludes
/// give is all there is.
const UNDEFINED_HINT: &str = "\nWithout ROCm, rig's preludes give the work-item functions and the \
float math of OpenCL C and HIP (docs/kernels.md lists them); the functions above (double or vector \
math, printf, others) need ROCm's device libraries: install them (AMD's ROCm in /opt/rocm, or \
Debian's rocm-device-libs) and build with Options::rocm.";

/// What can go wrong building a kernel. Each message says what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No clang was found.
    #[error(
        "no clang found (tried {tried}); install clang {MIN_LLVM} or later with lld \
         (Debian/Ubuntu: apt install clang-19 lld-19) or set RIG_CLANG to its path"
    )]
    ClangMissing {
        /// The programs tried, comma separated.
        tried: String,
    },
    /// No lld was found.
    #[error(
        "no ld.lld found (tried {tried}); install lld (Debian/Ubuntu: apt install lld-19) \
         or set RIG_LLD to its path"
    )]
    LldMissing {
        /// The programs tried, comma separated.
        tried: String,
    },
    /// The clang found is older than [`MIN_LLVM`].
    #[error(
        "{path} is clang {found}, older than {MIN_LLVM}, the oldest that builds rig's code \
         objects; install clang-19 or set RIG_CLANG to a newer one"
    )]
    TooOld {
        /// The clang.
        path: PathBuf,
        /// Its version, such as `15.0.7`.
        found: String,
    },
    /// `clang --version` did not say a version rig can read.
    #[error("{path} --version says no clang version ({said:?}); set RIG_CLANG to a clang")]
    NotClang {
        /// The program.
        path: PathBuf,
        /// The first line it printed.
        said: String,
    },
    /// `RIG_LLD` (or the linker given) is not LLD.
    #[error(
        "{path} --version does not say LLD ({said:?}); set RIG_LLD to an ld.lld \
         (Debian/Ubuntu: apt install lld-19, then RIG_LLD=ld.lld-19) or unset it"
    )]
    NotLld {
        /// The program.
        path: PathBuf,
        /// The first line it printed.
        said: String,
    },
    /// The processor is not a processor name.
    #[error("{0:?} is not an AMDGPU processor name (such as gfx1100, gfx942 or gfx90a:xnack+)")]
    Processor(String),
    /// A source's language could not be told from its file name.
    #[error(
        "{0}: not an OpenCL C (.cl) or HIP (.hip) file; name the language with Source::opencl or Source::hip"
    )]
    Language(PathBuf),
    /// A program could not be run, or a file read or written.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: io::Error,
    },
    /// The compiler or the linker refused the source: its diagnostics say why.
    #[error(
        "{program} could not build {source_name} for {processor} ({status}):\n{diagnostics}{}",
        if *undefined { UNDEFINED_HINT } else { "" }
    )]
    Failed {
        /// `clang` or `ld.lld`.
        program: &'static str,
        /// The source's name.
        source_name: String,
        /// The processor asked.
        processor: String,
        /// How the program exited.
        status: String,
        /// What it printed (the first 16 KiB).
        diagnostics: String,
        /// Whether the link left functions undefined: the message then says what gives them.
        undefined: bool,
    },
}

/// The language of a [`Source`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// OpenCL C (2.0 unless the options ask another with `-cl-std`), built with
    /// `-cl-kernel-arg-info` so that the metadata names the parameters.
    OpenCl,
    /// HIP (device code only: the source's `__global__` functions). HIP's metadata names
    /// no parameters: a launch sets them by position.
    Hip,
}

/// A kernel source: its name (for messages, and a file's directory for its includes), its
/// language and its text.
#[derive(Debug, Clone)]
pub struct Source {
    name: String,
    language: Language,
    text: String,
    dir: Option<PathBuf>,
}

impl Source {
    /// An OpenCL C source.
    pub fn opencl(name: impl Into<String>, text: impl Into<String>) -> Source {
        Source {
            name: name.into(),
            language: Language::OpenCl,
            text: text.into(),
            dir: None,
        }
    }

    /// A HIP source.
    pub fn hip(name: impl Into<String>, text: impl Into<String>) -> Source {
        Source {
            name: name.into(),
            language: Language::Hip,
            text: text.into(),
            dir: None,
        }
    }

    /// The source in file `path`: OpenCL C for `.cl`, HIP for `.hip`. Its directory is
    /// searched for the files it includes.
    pub fn file(path: impl AsRef<Path>) -> Result<Source, Error> {
        let path = path.as_ref();
        let language = match path.extension().and_then(|e| e.to_str()) {
            Some("cl") => Language::OpenCl,
            Some("hip") => Language::Hip,
            _ => return Err(Error::Language(path.to_owned())),
        };
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            what: format!("cannot read {}", path.display()),
            source,
        })?;
        Ok(Source {
            name: path.display().to_string(),
            language,
            text,
            dir: path.parent().map(Path::to_owned),
        })
    }

    /// Its language.
    pub fn language(&self) -> Language {
        self.language
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// How to build: optimization, macros, include directories, ROCm, code object version.
#[derive(Debug, Clone)]
pub struct Options {
    opt_level: u8,
    defines: Vec<String>,
    includes: Vec<PathBuf>,
    prelude: bool,
    rocm: Option<PathBuf>,
    code_object_version: Option<u8>,
    args: Vec<OsString>,
}

impl Default for Options {
    /// `-O2`, rig's prelude, no ROCm, the compiler's default code object version (5).
    fn default() -> Options {
        Options {
            opt_level: 2,
            defines: Vec::new(),
            includes: Vec::new(),
            prelude: true,
            rocm: None,
            code_object_version: None,
            args: Vec::new(),
        }
    }
}

impl Options {
    /// `-O<level>` (0 to 3).
    pub fn opt_level(mut self, level: u8) -> Options {
        self.opt_level = level.min(3);
        self
    }

    /// `-D<name>=<value>`.
    pub fn define(mut self, name: &str, value: impl std::fmt::Display) -> Options {
        self.defines.push(format!("{name}={value}"));
        self
    }

    /// Searches `dir` for included files.
    pub fn include(mut self, dir: impl Into<PathBuf>) -> Options {
        self.includes.push(dir.into());
        self
    }

    /// Leaves rig's prelude out (the source defines or includes what it uses); the
    /// preludes' directory stays on the include path, so `#include "rig.h"` still works.
    pub fn without_prelude(mut self) -> Options {
        self.prelude = false;
        self
    }

    /// Builds with the ROCm installed at `path` (such as `/opt/rocm`): HIP sources get
    /// ROCm's headers and both languages its device libraries (`--rocm-path`), in place of
    /// rig's preludes.
    pub fn rocm(mut self, path: impl Into<PathBuf>) -> Options {
        self.rocm = Some(path.into());
        self
    }

    /// `-mcode-object-version=<v>` (4, 5 or 6; rig's hidden arguments need 5 or later).
    /// Without it: the compiler's default (5 for clang-19), or 6 for a generic processor
    /// such as `gfx11-generic`, which exists from v6 on.
    pub fn code_object_version(mut self, v: u8) -> Options {
        self.code_object_version = Some(v);
        self
    }

    /// Passes `arg` to clang as it is, after rig's own arguments.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Options {
        self.args.push(arg.into());
        self
    }
}

/// A clang and an ld.lld that build AMDGPU code objects.
#[derive(Debug, Clone)]
pub struct Compiler {
    clang: PathBuf,
    lld: PathBuf,
    version: (u32, u32, u32),
}

impl Compiler {
    /// The clang of `RIG_CLANG`, or the first of `clang-19`, `clang-20`, `clang-21`,
    /// `clang-18`, `clang-17`, `clang` on `PATH` that runs; and the ld.lld of `RIG_LLD`,
    /// or `ld.lld-<clang's major>`, or `ld.lld`.
    pub fn find() -> Result<Compiler, Error> {
        let (clang, version) = match std::env::var_os("RIG_CLANG") {
            Some(c) => {
                let c = PathBuf::from(c);
                let v = version(&c)?;
                (c, v)
            }
            None => CLANGS
                .iter()
                .find_map(|c| version(Path::new(c)).ok().map(|v| (PathBuf::from(c), v)))
                .ok_or_else(|| Error::ClangMissing {
                    tried: CLANGS.join(", "),
                })?,
        };
        let lld = match std::env::var_os("RIG_LLD") {
            Some(l) => PathBuf::from(l),
            None => {
                let tried = [format!("ld.lld-{}", version.0), "ld.lld".to_owned()];
                let found = tried.iter().find(|l| check_lld(Path::new(l)).is_ok());
                PathBuf::from(found.ok_or_else(|| Error::LldMissing {
                    tried: tried.join(", "),
                })?)
            }
        };
        Compiler::check(clang, lld, version)
    }

    /// The clang and ld.lld at these paths.
    pub fn with(clang: impl Into<PathBuf>, lld: impl Into<PathBuf>) -> Result<Compiler, Error> {
        let clang = clang.into();
        let v = version(&clang)?;
        Compiler::check(clang, lld.into(), v)
    }

    fn check(clang: PathBuf, lld: PathBuf, version: (u32, u32, u32)) -> Result<Compiler, Error> {
        if version.0 < MIN_LLVM {
            return Err(Error::TooOld {
                path: clang,
                found: format!("{}.{}.{}", version.0, version.1, version.2),
            });
        }
        check_lld(&lld)?;
        Ok(Compiler {
            clang,
            lld,
            version,
        })
    }

    /// clang's version (major, minor, patch).
    pub fn version(&self) -> (u32, u32, u32) {
        self.version
    }

    /// The clang it runs.
    pub fn clang(&self) -> &Path {
        &self.clang
    }

    /// Builds `source` for `processor` (such as `gfx1100`, `gfx11-generic`, `gfx90a:xnack+`)
    /// into a code object: an AMDGPU ELF that [`rig_client::Device::load_image`] loads.
    ///
    /// [`rig_client::Device::load_image`]: https://docs.rs/rig-client
    pub fn compile(
        &self,
        source: &Source,
        processor: &str,
        options: &Options,
    ) -> Result<Vec<u8>, Error> {
        check_processor(processor)?;
        let dir = tempfile::Builder::new()
            .prefix("rig-kernels-")
            .tempdir()
            .map_err(|source| Error::Io {
                what: "cannot make a temporary directory for the build".into(),
                source,
            })?;
        let put = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).map_err(|source| Error::Io {
                what: format!("cannot write {}", p.display()),
                source,
            })?;
            Ok::<_, Error>(p)
        };
        put(crate::PRELUDE_NAMES[0], crate::OPENCL_PRELUDE)?;
        put(crate::PRELUDE_NAMES[1], crate::HIP_PRELUDE)?;
        put(crate::PRELUDE_NAMES[2], crate::MATH_PRELUDE)?;
        let (ext, prelude) = match source.language {
            Language::OpenCl => ("cl", crate::PRELUDE_NAMES[0]),
            Language::Hip => ("hip", crate::PRELUDE_NAMES[1]),
        };
        // Diagnostics name the source as its author knows it, not this temporary copy.
        let src = put(
            &format!("source.{ext}"),
            &format!("#line 1 \"{}\"\n{}", line_name(&source.name), source.text),
        )?;
        let object = dir.path().join("source.o");
        let code = dir.path().join("source.co");

        let mut cmd = Command::new(&self.clang);
        match source.language {
            Language::OpenCl => {
                // Argument info keeps the parameters' names in the metadata, for launches
                // that set them by name.
                cmd.args(["-x", "cl", "-cl-std=CL2.0", "-cl-kernel-arg-info"])
                    .args(["-target", "amdgcn-amd-amdhsa"])
                    .arg(format!("-mcpu={processor}"));
            }
            Language::Hip => {
                cmd.args(["-x", "hip", "--cuda-device-only", "--no-gpu-bundle-output"])
                    .arg(format!("--offload-arch={processor}"));
            }
        }
        match &options.rocm {
            Some(rocm) => {
                cmd.arg(format!("--rocm-path={}", rocm.display()));
            }
            None => {
                cmd.arg("-nogpulib");
                if source.language == Language::Hip {
                    cmd.arg("-nogpuinc");
                }
            }
        }
        cmd.arg(format!("-O{}", options.opt_level));
        // Generic processors (gfx11-generic...) exist from code object v6 on only.
        let generic = processor
            .split(':')
            .next()
            .is_some_and(|p| p.ends_with("-generic"));
        match options.code_object_version {
            Some(v) => {
                cmd.arg(format!("-mcode-object-version={v}"));
            }
            None if generic => {
                cmd.arg("-mcode-object-version=6");
            }
            None => {}
        }
        cmd.arg("-I").arg(dir.path());
        if let Some(d) = &source.dir {
            cmd.arg("-I").arg(d);
        }
        for d in &options.includes {
            cmd.arg("-I").arg(d);
        }
        for d in &options.defines {
            cmd.arg(format!("-D{d}"));
        }
        if options.prelude && options.rocm.is_none() {
            cmd.arg("-include").arg(dir.path().join(prelude));
        }
        cmd.args(&options.args);
        // HIP's driver links the device code itself (with the lld beside clang); OpenCL C's
        // object is linked here into a shared object, as the loader wants.
        let out = match source.language {
            Language::OpenCl => &object,
            Language::Hip => &code,
        };
        cmd.arg("-c").arg(&src).arg("-o").arg(out);
        self.run("clang", cmd, source, processor)?;
        if source.language == Language::OpenCl {
            let mut link = Command::new(&self.lld);
            link.args(["-shared", "--build-id=none"])
                .arg(&object)
                .arg("-o")
                .arg(&code);
            self.run("ld.lld", link, source, processor)?;
        }
        std::fs::read(&code).map_err(|source| Error::Io {
            what: format!("cannot read the code object {}", code.display()),
            source,
        })
    }

    fn run(
        &self,
        program: &'static str,
        mut cmd: Command,
        source: &Source,
        processor: &str,
    ) -> Result<(), Error> {
        let out: Output = cmd.output().map_err(|e| Error::Io {
            what: format!("cannot run {program} ({:?})", cmd.get_program()),
            source: e,
        })?;
        if out.status.success() {
            return Ok(());
        }
        let mut diagnostics = String::from_utf8_lossy(&out.stderr).into_owned();
        if diagnostics.len() > MAX_DIAGNOSTICS {
            let mut end = MAX_DIAGNOSTICS;
            while !diagnostics.is_char_boundary(end) {
                end -= 1;
            }
            diagnostics.truncate(end);
            diagnostics.push_str("\n[...]");
        }
        let undefined = program == "ld.lld" && diagnostics.contains("undefined");
        Err(Error::Failed {
            program,
            source_name: source.name.clone(),
            processor: processor.to_owned(),
            status: out.status.to_string(),
            diagnostics,
            undefined,
        })
    }
}

/// `name` as a `#line` directive's file name: a string literal's escapes for `\\` and `"`,
/// and no line break.
fn line_name(name: &str) -> String {
    name.chars()
        .flat_map(|c| match c {
            '\\' | '"' => vec!['\\', c],
            '\n' | '\r' => vec![' '],
            c => vec![c],
        })
        .collect()
}

/// Whether `lld --version` runs and says it is LLD (`Debian LLD 19.1.7 (compatible with GNU
/// linkers)`): a program that merely succeeds (`/bin/true`) would fail only later.
fn check_lld(lld: &Path) -> Result<(), Error> {
    let out = Command::new(lld).arg("--version").output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        _ => {
            return Err(Error::LldMissing {
                tried: lld.display().to_string(),
            });
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or("").trim().to_owned();
    if first.split_whitespace().any(|w| w == "LLD") {
        Ok(())
    } else {
        Err(Error::NotLld {
            path: lld.to_owned(),
            said: first,
        })
    }
}

/// The version `clang --version` states.
fn version(clang: &Path) -> Result<(u32, u32, u32), Error> {
    let out = Command::new(clang)
        .arg("--version")
        .output()
        .map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => Error::ClangMissing {
                tried: clang.display().to_string(),
            },
            _ => Error::Io {
                what: format!("cannot run {} --version", clang.display()),
                source,
            },
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or("").to_owned();
    parse_version(&first).ok_or(Error::NotClang {
        path: clang.to_owned(),
        said: first,
    })
}

/// The version in a first line such as `Debian clang version 19.1.7 (3~deb12u1)` or
/// `clang version 17.0.6`.
fn parse_version(line: &str) -> Option<(u32, u32, u32)> {
    let (_, rest) = line.split_once("clang version ")?;
    let v = rest
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .next()?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

/// A processor name is letters, digits and `-`, with `:feature+` or `:feature-` suffixes:
/// nothing a shell or clang would read as another argument.
fn check_processor(p: &str) -> Result<(), Error> {
    let ok = p.starts_with("gfx")
        && p.len() <= 64
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b':' | b'+'));
    if ok {
        Ok(())
    } else {
        Err(Error::Processor(p.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_clangs_first_line() {
        assert_eq!(
            parse_version("Debian clang version 19.1.7 (3~deb12u1)"),
            Some((19, 1, 7))
        );
        assert_eq!(parse_version("clang version 17.0.6"), Some((17, 0, 6)));
        assert_eq!(
            parse_version("Ubuntu clang version 20.1.0-++20250101"),
            Some((20, 1, 0))
        );
        assert_eq!(parse_version("gcc (Debian 12.2.0-14) 12.2.0"), None);
    }

    #[test]
    fn processors_are_names() {
        for ok in ["gfx1100", "gfx11-generic", "gfx90a:xnack+", "gfx942"] {
            check_processor(ok).unwrap();
        }
        for bad in [
            "",
            "sm_80",
            "gfx1100 -o /etc/x",
            "-mcpu=gfx1100",
            "gfx1100;rm",
        ] {
            assert!(
                matches!(check_processor(bad), Err(Error::Processor(_))),
                "{bad}"
            );
        }
    }
}
