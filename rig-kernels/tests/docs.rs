//! Every kernel and shell example of `docs/kernels.md` builds: the OpenCL C and HIP sources
//! with rig-kernels and with the page's own clang commands, each code object parsed by
//! rig_amd. The ROCm commands run only where ROCm is installed at `/opt/rocm`.

use std::path::Path;
use std::process::Command;

use rig_amd::code_object::CodeObject;
use rig_kernels::{Compiler, Options, Source};

/// The page's fenced blocks: (info string, body).
fn blocks(page: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in page.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => open = Some((info.trim().to_owned(), String::new())),
            (Some(_), Some(_)) => out.push(open.take().unwrap()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed block");
    out
}

fn page() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/kernels.md");
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn the_pages_kernels_and_commands_build() {
    let blocks = blocks(&page());
    let dir = tempfile::tempdir().unwrap();
    // The commands name the preludes as a checkout's root does.
    let include = dir.path().join("rig-kernels/include");
    std::fs::create_dir_all(&include).unwrap();
    std::fs::write(include.join("rig.h"), rig_kernels::OPENCL_PRELUDE).unwrap();
    std::fs::write(include.join("rig_hip.h"), rig_kernels::HIP_PRELUDE).unwrap();
    std::fs::write(include.join("rig_math.h"), rig_kernels::MATH_PRELUDE).unwrap();

    let compiler = Compiler::find().expect("clang-19 and ld.lld-19, as CI installs");
    let mut kernels = 0;
    for (info, body) in blocks.iter().filter(|(i, _)| i == "opencl" || i == "hip") {
        let name = body
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("// file: "))
            .unwrap_or_else(|| panic!("a {info} block without its '// file: ' line"));
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        let code = compiler
            .compile(
                &Source::file(&path).unwrap(),
                "gfx1100",
                &Options::default(),
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let co = CodeObject::parse(&code).unwrap();
        assert_eq!(
            co.kernel("vadd").unwrap().explicit_args().count(),
            3,
            "{name}"
        );
        kernels += 1;
    }
    assert_eq!(kernels, 2, "the OpenCL C and the HIP kernel");

    let rocm = Path::new("/opt/rocm").exists();
    let mut ran = 0;
    for (info, body) in &blocks {
        let runs = match info.as_str() {
            "sh" => body.trim_start().starts_with("clang"),
            "sh rocm" => rocm,
            _ => false,
        };
        if !runs {
            continue;
        }
        let out = Command::new("sh")
            .args(["-eu", "-c", body])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{body}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for co in ["vadd.gfx1100.co", "vadd.hip.gfx1100.co"] {
            let bytes = std::fs::read(dir.path().join(co)).unwrap();
            let parsed = CodeObject::parse(&bytes).unwrap();
            assert!(parsed.kernel("vadd").is_some(), "{co}");
            std::fs::remove_file(dir.path().join(co)).unwrap();
        }
        ran += 1;
    }
    assert!(ran >= 1, "the page's clang commands");
}
