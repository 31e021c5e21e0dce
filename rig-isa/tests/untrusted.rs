//! Untrusted input never panics, for every generation's front end: arbitrary words decode to
//! an instruction or an error (and print), and arbitrary or mutated programs end in a result
//! or an `ExecFault`, never an internal error.

use std::sync::atomic::AtomicBool;

use proptest::prelude::*;
use rig_isa::testing::FlatMemory;
use rig_isa::{Dispatch, ExecFault, Isa, Memory, Scratch, Workgroups, decode_isa, execute_isa};

const BASE: u64 = 0x2_0000_0000;

/// Decodes `words` as `isa`'s: an instruction no longer than the words, that prints, or an
/// error.
fn decode_or_reject(isa: Isa, words: &[u32]) -> Result<(), TestCaseError> {
    if let Ok(i) = decode_isa(isa, words) {
        prop_assert!(i.len as usize <= words.len());
        let _ = i.to_string();
    }
    Ok(())
}

/// Runs `words` (then `s_endpgm`) as `d`'s code on `isa`, with a helper raising the stop flag
/// after 200 ms to bound runaway loops: never an internal error, never a panic.
fn run_bounded(isa: Isa, words: &[u32], d: &Dispatch) -> Result<(), TestCaseError> {
    let mem = FlatMemory::new(BASE, 0x4000);
    let mut code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    code.extend(0xbfb0_0000u32.to_le_bytes());
    mem.write(BASE, &code).expect("code");
    let stop = AtomicBool::new(false);
    let r = std::thread::scope(|s| {
        let h = s.spawn(|| execute_isa(isa, d, Workgroups::ALL, &mem, &stop, 1));
        let t = std::time::Instant::now();
        while !h.is_finished() && t.elapsed() < std::time::Duration::from_millis(200) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        h.join().expect("execute does not panic")
    });
    prop_assert!(r != Err(ExecFault::Internal), "internal error");
    Ok(())
}

/// Arbitrary words with an arbitrary RSRC2, group count and wave size.
fn any_program(
    isa: Isa,
    words: &[u32],
    rsrc2: u32,
    items: u32,
    wave64: bool,
) -> Result<(), TestCaseError> {
    let d = Dispatch {
        code_address: BASE,
        pgm_rsrc1: 3,
        pgm_rsrc2: rsrc2 & 0x1fff,
        pgm_rsrc3: 0,
        user_sgprs: vec![(BASE + 0x2000) as u32, (BASE >> 32) as u32, 0, 0],
        grid_items: [items, 1, 1],
        group_size: [64, 1, 1],
        wave64,
        lds_bytes: 1024,
        scratch: Some(Scratch {
            base: BASE + 0x3000,
            bytes_per_lane: 16,
            waves: 4,
        }),
    };
    run_bounded(isa, words, &d)
}

/// Text sections of the corpus code objects built for `isa` (real instruction streams to
/// mutate).
fn corpus_text(isa: Isa) -> Vec<Vec<u32>> {
    use object::{Object, ObjectSection};
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/corpus");
    let dir = match isa {
        Isa::Gfx11 => corpus,
        Isa::Gfx12 => corpus.join("gfx1201"),
        Isa::Gfx9 => corpus.join("gfx942"),
    };
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("corpus dir").flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "co") {
            continue;
        }
        let data = std::fs::read(&p).expect("read code object");
        let elf = object::File::parse(&*data).expect("parse code object");
        if let Some(t) = elf.section_by_name(".text") {
            let b = t.data().expect("text");
            out.push(
                b.chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            );
        }
    }
    out.sort();
    out
}

/// A slice of a real kernel of `text` with a few bits flipped, run on garbage arguments.
fn mutated_kernel(
    isa: Isa,
    text: &[Vec<u32>],
    (pick, start, len): (usize, usize, usize),
    flips: &[(usize, u32)],
    sgprs: Vec<u32>,
) -> Result<(), TestCaseError> {
    let f = &text[pick % text.len()];
    let s = start % f.len();
    let mut words = f[s..(s + len).min(f.len())].to_vec();
    for (k, b) in flips {
        let n = words.len();
        words[k % n] ^= 1 << b;
    }
    let mut user = sgprs;
    user[0] = (BASE + 0x2000) as u32 | (user[0] & 0xff0);
    user[1] = (BASE >> 32) as u32;
    let d = Dispatch {
        code_address: BASE,
        pgm_rsrc1: 7,
        pgm_rsrc2: 4 << 1 | 1 << 7 | 1,
        pgm_rsrc3: 0,
        user_sgprs: user,
        grid_items: [96, 1, 1],
        group_size: [64, 1, 1],
        wave64: false,
        lds_bytes: 4096,
        scratch: Some(Scratch {
            base: BASE + 0x3000,
            bytes_per_lane: 8,
            waves: 4,
        }),
    };
    run_bounded(isa, &words, &d)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_words_decode_or_reject(words in proptest::collection::vec(any::<u32>(), 0..4)) {
        decode_or_reject(Isa::Gfx11, &words)?;
    }

    #[test]
    fn any_program_ends_without_internal_error(
        words in proptest::collection::vec(any::<u32>(), 1..48),
        rsrc2 in any::<u32>(),
        items in 1u32..100,
        wave64 in any::<bool>(),
    ) {
        any_program(Isa::Gfx11, &words, rsrc2, items, wave64)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// GFX12's words: up to five (96-bit memory forms and a literal).
    #[test]
    fn any_gfx12_words_decode_or_reject(words in proptest::collection::vec(any::<u32>(), 0..5)) {
        decode_or_reject(Isa::Gfx12, &words)?;
    }

    #[test]
    fn any_gfx12_program_ends_without_internal_error(
        words in proptest::collection::vec(any::<u32>(), 1..48),
        rsrc2 in any::<u32>(),
        items in 1u32..100,
        wave64 in any::<bool>(),
    ) {
        any_program(Isa::Gfx12, &words, rsrc2, items, wave64)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Slices of real kernels with a few bits flipped, run on garbage arguments.
    #[test]
    fn mutated_kernels_end_without_internal_error(
        pick in any::<usize>(),
        start in any::<usize>(),
        len in 4usize..96,
        flips in proptest::collection::vec((any::<usize>(), 0u32..32), 0..4),
        sgprs in proptest::collection::vec(any::<u32>(), 4),
    ) {
        thread_local!(static TEXT: Vec<Vec<u32>> = corpus_text(Isa::Gfx11));
        TEXT.with(|t| mutated_kernel(Isa::Gfx11, t, (pick, start, len), &flips, sgprs))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The same on gfx1201 builds of the corpus.
    #[test]
    fn mutated_gfx12_kernels_end_without_internal_error(
        pick in any::<usize>(),
        start in any::<usize>(),
        len in 4usize..96,
        flips in proptest::collection::vec((any::<usize>(), 0u32..32), 0..4),
        sgprs in proptest::collection::vec(any::<u32>(), 4),
    ) {
        thread_local!(static TEXT: Vec<Vec<u32>> = corpus_text(Isa::Gfx12));
        TEXT.with(|t| mutated_kernel(Isa::Gfx12, t, (pick, start, len), &flips, sgprs))?;
    }
}
