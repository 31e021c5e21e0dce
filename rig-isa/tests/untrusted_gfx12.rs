//! Untrusted input never panics on GFX12 either: arbitrary words decode to a gfx1201
//! instruction or an error (and print), and arbitrary or mutated gfx1201 programs end in a
//! result or an `ExecFault`, never an internal error (untrusted.rs does the same for GFX11).

use std::sync::atomic::AtomicBool;

use proptest::prelude::*;
use rig_isa::testing::FlatMemory;
use rig_isa::{Dispatch, ExecFault, Isa, Memory, Scratch, Workgroups, decode_isa, execute_isa};

const BASE: u64 = 0x2_0000_0000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn any_words_decode_or_reject(words in proptest::collection::vec(any::<u32>(), 0..5)) {
        if let Ok(i) = decode_isa(Isa::Gfx12, &words) {
            prop_assert!(i.len as usize <= words.len());
            let _ = i.to_string();
        }
    }

    #[test]
    fn any_program_ends_without_internal_error(
        words in proptest::collection::vec(any::<u32>(), 1..48),
        rsrc2 in any::<u32>(),
        items in 1u32..100,
        wave64 in any::<bool>(),
    ) {
        let mem = FlatMemory::new(BASE, 0x4000);
        let mut code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        code.extend(0xbfb0_0000u32.to_le_bytes());
        mem.write(BASE, &code).expect("code");
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
            scratch: Some(Scratch { base: BASE + 0x3000, bytes_per_lane: 16, waves: 4 }),
        };
        let stop = AtomicBool::new(false);
        // Bound runaway loops: a helper thread raises the stop flag.
        let r = std::thread::scope(|s| {
            let h = s.spawn(|| execute_isa(Isa::Gfx12, &d, Workgroups::ALL, &mem, &stop, 1));
            let t = std::time::Instant::now();
            while !h.is_finished() && t.elapsed() < std::time::Duration::from_millis(200) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            h.join().expect("execute does not panic")
        });
        prop_assert!(r != Err(ExecFault::Internal), "internal error");
    }
}

/// Text sections of the corpus code objects (real instruction streams to mutate).
fn corpus_text() -> Vec<Vec<u32>> {
    use object::{Object, ObjectSection};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/corpus/gfx1201");
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Slices of real kernels with a few bits flipped, run on garbage arguments.
    #[test]
    fn mutated_kernels_end_without_internal_error(
        pick in any::<usize>(),
        start in any::<usize>(),
        len in 4usize..96,
        flips in proptest::collection::vec((any::<usize>(), 0u32..32), 0..4),
        sgprs in proptest::collection::vec(any::<u32>(), 4),
    ) {
        thread_local!(static TEXT: Vec<Vec<u32>> = corpus_text());
        let mut words = TEXT.with(|t| {
            let f = &t[pick % t.len()];
            let s = start % f.len();
            f[s..(s + len).min(f.len())].to_vec()
        });
        for (k, b) in flips {
            let n = words.len();
            words[k % n] ^= 1 << b;
        }
        let mem = FlatMemory::new(BASE, 0x4000);
        let mut code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        code.extend(0xbfb0_0000u32.to_le_bytes());
        mem.write(BASE, &code).expect("code");
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
            scratch: Some(Scratch { base: BASE + 0x3000, bytes_per_lane: 8, waves: 4 }),
        };
        let stop = AtomicBool::new(false);
        let r = std::thread::scope(|s| {
            let h = s.spawn(|| execute_isa(Isa::Gfx12, &d, Workgroups::ALL, &mem, &stop, 1));
            let t = std::time::Instant::now();
            while !h.is_finished() && t.elapsed() < std::time::Duration::from_millis(200) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            h.join().expect("execute does not panic")
        });
        prop_assert!(r != Err(ExecFault::Internal), "internal error");
    }
}
