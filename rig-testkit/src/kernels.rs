//! The tests' kernels: the code objects `kernels/build.sh` built (`kernels/out`), and OpenCL C
//! a test writes, built through [`rig_kernels::Compiler`] where a compiler is installed.

use std::path::Path;

use rig_kernels::{Compiler, Options, Source};

/// The code object `kernels/out/<processor>/<name>.co`.
pub fn built(processor: &str, name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kernels/out")
        .join(processor)
        .join(format!("{name}.co"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// OpenCL C `text` (named `name` in diagnostics, without rig's prelude) built at `-O2` for
/// `processor`; `None`, said on stderr, where no compiler is installed (the test then skips
/// what needs it). A source the compiler refuses fails the test.
pub fn compile(name: &str, text: &str, processor: &str) -> Option<Vec<u8>> {
    let compiler = match Compiler::find() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("skipped: {name} cannot be built here: {e}");
            return None;
        }
    };
    let source = Source::opencl(name, text);
    match compiler.compile(&source, processor, &Options::default().without_prelude()) {
        Ok(code) => Some(code),
        Err(e) => panic!("building {name} for {processor}: {e}"),
    }
}
