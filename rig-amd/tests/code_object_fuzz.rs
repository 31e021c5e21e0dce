//! Bad input: arbitrary bytes, and real code objects with bytes flipped or cut, give the
//! parser an error that names the problem, never a panic. Bounded so it runs in CI in a few
//! seconds; `fuzz/` (cargo-fuzz) runs the same checks, coverage-guided, in CI.

use std::path::Path;

use proptest::prelude::*;
use proptest::sample::Index;
use rig_amd::code_object::CodeObject;
use rig_amd::gpu::GPUS;
use rig_amd::kernarg::{self, Grid};

fn object(rel: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kernels/out")
        .join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Objects whose paths through the parser differ: v4/v5/v6, relocations, two kernels,
/// runtime services and an undefined symbol.
const SEEDS: &[&str] = &[
    "gfx1100/add.co",
    "gfx1100/pointers.co",
    "gfx942/multi.co",
    "gfx1100-cov4/printf.co",
    "gfx11-generic/reduce_dyn.co",
];

/// Parses `bytes`, and on success uses everything the result offers. Whether it parsed.
fn exercise(bytes: &[u8]) -> bool {
    match CodeObject::parse(bytes) {
        Err(e) => {
            assert!(e.to_string().starts_with("not a code object: "), "{e}");
            false
        }
        Ok(co) => {
            for gpu in GPUS {
                let _ = co.check(gpu);
            }
            let _ = co.target().id();
            for k in co.kernels() {
                let _ = (
                    k.code_offset(),
                    k.runtime_services().count(),
                    k.hidden().count(),
                );
                let params = vec![0u8; k.explicit_size() as usize];
                let mut out = vec![0u8; k.plan().bytes()];
                let grid = Grid {
                    groups: [3, 2, 1],
                    group_size: [64, 1, 1],
                    dynamic_lds: 256,
                };
                let _ = kernarg::layout(k.plan(), &params, &[], &grid, &mut out);
            }
            if co.image_size() <= 1 << 20 {
                let _ = co.placed(0x1_0000_0000);
            }
            true
        }
    }
}

#[test]
fn every_truncation_and_single_byte_flip_of_a_real_object() {
    let good = object("gfx1100/pointers.co");
    for len in 0..good.len() {
        let _ = exercise(&good[..len]);
    }
    let mut b = good.clone();
    let mut parsed = 0;
    for at in 0..good.len() {
        for x in [0x01, 0x80, 0xff] {
            b[at] ^= x;
            parsed += usize::from(exercise(&b));
            b[at] ^= x;
        }
    }
    // Flips in code, symbols' padding and the like still parse, so the later stages ran.
    assert!(
        parsed > good.len(),
        "{parsed} of {} flips parsed",
        3 * good.len()
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        let _ = exercise(&bytes);
    }

    #[test]
    fn random_bytes_behind_a_real_header(tail in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let mut bytes = object("gfx1100/add.co")[..64].to_vec();
        bytes.extend(tail);
        let _ = exercise(&bytes);
    }

    #[test]
    fn flipped_bytes(
        seed in 0..SEEDS.len(),
        flips in proptest::collection::vec((any::<Index>(), any::<u8>()), 1..24),
    ) {
        let mut bytes = object(SEEDS[seed]);
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        let _ = exercise(&bytes);
    }

    /// Flips in the first 2 KiB, where headers, the note, symbols and descriptors lie.
    #[test]
    fn flipped_header_bytes(
        seed in 0..SEEDS.len(),
        flips in proptest::collection::vec((0usize..2048, any::<u8>()), 1..8),
    ) {
        let mut bytes = object(SEEDS[seed]);
        for (at, value) in flips {
            let i = at % bytes.len();
            bytes[i] = value;
        }
        let _ = exercise(&bytes);
    }

    #[test]
    fn truncated_and_flipped(seed in 0..SEEDS.len(), cut in any::<Index>(), at in any::<Index>(), v in any::<u8>()) {
        let mut bytes = object(SEEDS[seed]);
        let len = cut.index(bytes.len());
        bytes.truncate(len.max(1));
        let i = at.index(bytes.len());
        bytes[i] = v;
        let _ = exercise(&bytes);
    }
}
