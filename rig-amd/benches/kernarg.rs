//! The cost of laying out a launch's kernel arguments, which the client pays on every launch.
//!
//! `cargo bench -p rig-amd --bench kernarg`. Plans are those of committed kernels, so the
//! hidden arguments written are the ones LLVM asks for.
//!
//! A plain harness rather than criterion: it times batches of 10,000 layouts and prints the
//! fastest batch and the median one. On a machine shared with other work a batch's wall time
//! includes the time the bench was descheduled, which a mean over long samples folds in; the
//! fastest batch is the cost of the code, the median how much the machine's load adds.

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use rig_amd::code_object::CodeObject;
use rig_amd::kernarg::{self, Grid, KernargPlan, Ref};

const BATCH: u32 = 10_000;
const BATCHES: usize = 400;

fn plan_of(rel: &str, kernel: &str) -> KernargPlan {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kernels/out")
        .join(rel);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    *CodeObject::parse(&bytes)
        .unwrap()
        .kernel(kernel)
        .unwrap()
        .plan()
}

fn bench(name: &str, plan: &KernargPlan, params: &[u8], refs: &[Ref]) {
    let grid = Grid {
        groups: [4096, 1, 1],
        group_size: [256, 1, 1],
        dynamic_lds: 0,
    };
    let mut out = [0u8; 512];
    let mut per_layout = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let start = Instant::now();
        for _ in 0..BATCH {
            let n = kernarg::layout(
                black_box(plan),
                black_box(params),
                black_box(refs),
                black_box(&grid),
                black_box(&mut out),
            );
            black_box(n).unwrap();
        }
        per_layout.push(start.elapsed().as_nanos() as f64 / f64::from(BATCH));
    }
    per_layout.sort_by(f64::total_cmp);
    println!(
        "{name:<44} fastest batch {:6.1} ns/layout, median {:6.1} ns",
        per_layout[0],
        per_layout[BATCHES / 2]
    );
}

fn main() {
    let refs = [
        Ref {
            offset: 0,
            address: 0x7000_0000,
        },
        Ref {
            offset: 8,
            address: 0x7100_0000,
        },
    ];
    // The README's add: two pointers and the 256-byte v5 implicit block.
    let add = plan_of("gfx1100/add.co", "add");
    bench("add v5 (16 B params, 2 refs, 272 B)", &add, &[0; 16], &refs);
    // A struct by value after two pointers.
    let affine = plan_of("gfx1100/affine.co", "affine");
    bench(
        "affine v5 (40 B params, 2 refs, 296 B)",
        &affine,
        &[0; 40],
        &refs,
    );
    // Dynamic LDS.
    let dynamic = plan_of("gfx1100/reduce_dyn.co", "reduce_dyn");
    bench(
        "reduce_dyn v5 (24 B params, 2 refs, 280 B)",
        &dynamic,
        &[0; 24],
        &refs,
    );
    // Code object v4: the parameters alone.
    let add4 = plan_of("gfx1100-cov4/add.co", "add");
    bench("add v4 (16 B params, 2 refs, 16 B)", &add4, &[0; 16], &refs);
}
