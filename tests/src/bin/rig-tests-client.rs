//! A client program the container test runs inside a container (tests/tests/e2e/container.rs):
//! through the rigd `RIG_SOCKET` names, it adds x to y over 1024 floats on the first GPU
//! and prints `y[10] = 11`, then asks for the Device memory its first argument says (bytes)
//! and prints `granted` or `refused: ` and rigd's answer.

use std::process::ExitCode;

use rig_client::{Launch, Memory, Ref, Rig, Submission, f32s, put_f32s};

const ADD: &[u8] = include_bytes!("../../../kernels/out/gfx1100/add.co");
const N: u64 = 1024;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("failed: {}", e.report());
            ExitCode::FAILURE
        }
    }
}

fn run() -> rig_client::Result<()> {
    let ask: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let device = Rig::open("AMD:0")?;
    let add = device.load_image(ADD)?.resolve("add")?;
    let x = device.buffer(4 * N, Memory::Pinned)?;
    let y = device.buffer(4 * N, Memory::Pinned)?;
    x.write(|b| put_f32s(b, (0..N).map(|i| i as f32)))?;
    y.write(|b| put_f32s(b, std::iter::repeat(1.0)))?;
    let launch = Submission::new().launch(
        Launch::new(&add, [(N / 256) as u32, 1, 1], [256, 1, 1])
            .params(&[0; 16])
            .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
    );
    device.submit(&launch)?.wait()?;
    y.read(|b| println!("y[10] = {}", f32s(b).nth(10).unwrap_or(f32::NAN)))?;
    if ask > 0 {
        match device.buffer(ask, Memory::Device) {
            Ok(_) => println!("granted"),
            Err(e) => println!("refused: {e}"),
        }
    }
    device.close()
}
