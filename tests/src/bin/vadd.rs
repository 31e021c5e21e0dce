//! docs/kernels.md's "Running it" program, verbatim below this comment (a test checks the
//! page and this file agree, and runs it against a real rigd: tests/tests/e2e/kernels_doc.rs).

use rig_client::{Memory, Rig, Submission, f32s, put_f32s};
use rig_kernels::{Compiler, Options, Source};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Rig::open("AMD:0")?;
    let source = Source::file("vadd.cl")?;
    let code = Compiler::find()?.compile(&source, device.arch(), &Options::default())?;
    let vadd = device.load_image(&code)?.resolve("vadd")?;

    const N: u32 = 1024;
    let x = device.buffer(4 * u64::from(N), Memory::Pinned)?;
    let y = device.buffer(4 * u64::from(N), Memory::Pinned)?;
    x.write(|b| put_f32s(b, (0..N).map(|i| i as f32)))?;
    y.write(|b| put_f32s(b, std::iter::repeat(1.0)))?;

    let mut args = vadd.args();
    args.read("x", &x)?.buffer("y", &y)?.value("a", 2.0f32)?;
    let launch = Submission::new().launch(args.launch([N / 256, 1, 1], [256, 1, 1]));
    device.submit(&launch)?.wait()?;
    y.read(|b| println!("y[10] = {}", f32s(b).nth(10).unwrap_or(f32::NAN)))?;
    device.close()?;
    Ok(())
}
