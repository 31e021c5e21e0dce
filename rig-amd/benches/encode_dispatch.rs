//! Encoding one dispatch's PM4 packets into a buffer: what a client's submit does per launch.
//!
//! ACQUIRE_MEM, SET_SH_REG of PGM_LO/HI, RSRC1/2, RSRC3, NUM_THREAD_X/Y/Z and USER_DATA_0/1
//! (the kernarg pointer), DISPATCH_DIRECT and RELEASE_MEM of a 64-bit value with an interrupt:
//! 41 words on GFX11. Prints nanoseconds per dispatch (harness = false: `cargo bench --bench
//! encode_dispatch`).

use rig_amd::gpu::Generation;
use rig_amd::pm4::{self, AcquireMem, DispatchDirect, EncodeError, ReleaseMem, SetShReg};
use rig_amd::regs::{self, initiator};
use std::hint::black_box;
use std::time::Instant;

struct Launch {
    code: u64,
    rsrc: [u32; 3],
    group: [u32; 3],
    grid: [u32; 3],
    kernarg: u64,
    timeline: u64,
    value: u64,
}

#[inline(never)]
fn encode(l: &Launch, out: &mut [u32]) -> Result<usize, EncodeError> {
    let r = regs::compute(Generation::Gfx11);
    let pgm = l.code >> 8;
    let mut at = AcquireMem::gfx10(pm4::gcr::ABOVE_L2).encode(out)?;
    at += pm4::set_sh_reg(r.pgm_lo, [pgm as u32, (pgm >> 32) as u32], &mut out[at..])?;
    at += pm4::set_sh_reg(r.pgm_rsrc1, [l.rsrc[0], l.rsrc[1]], &mut out[at..])?;
    at += pm4::set_sh_reg(r.pgm_rsrc3, [l.rsrc[2]], &mut out[at..])?;
    at += pm4::set_sh_reg(r.num_thread_x, l.group, &mut out[at..])?;
    at += pm4::set_sh_reg(
        r.user_data_0,
        [l.kernarg as u32, (l.kernarg >> 32) as u32],
        &mut out[at..],
    )?;
    at += DispatchDirect {
        dim: l.grid,
        initiator: initiator::COMPUTE_SHADER_EN
            | initiator::FORCE_START_AT_000
            | initiator::CS_W32_EN,
    }
    .encode(&mut out[at..])?;
    at += ReleaseMem::timeline(pm4::gcr::RELEASE_WRITE_BACK, l.timeline, l.value)
        .encode(&mut out[at..])?;
    Ok(at)
}

/// The same packets through the slice-taking SET_SH_REG encoder.
#[inline(never)]
fn encode_slices(l: &Launch, out: &mut [u32]) -> Result<usize, EncodeError> {
    let r = regs::compute(Generation::Gfx11);
    let pgm = l.code >> 8;
    let mut at = AcquireMem::gfx10(pm4::gcr::ABOVE_L2).encode(out)?;
    at += SetShReg {
        offset: r.pgm_lo,
        values: &[pgm as u32, (pgm >> 32) as u32],
    }
    .encode(&mut out[at..])?;
    at += SetShReg {
        offset: r.pgm_rsrc1,
        values: &l.rsrc[..2],
    }
    .encode(&mut out[at..])?;
    at += SetShReg {
        offset: r.pgm_rsrc3,
        values: &l.rsrc[2..],
    }
    .encode(&mut out[at..])?;
    at += SetShReg {
        offset: r.num_thread_x,
        values: &l.group,
    }
    .encode(&mut out[at..])?;
    at += SetShReg {
        offset: r.user_data_0,
        values: &[l.kernarg as u32, (l.kernarg >> 32) as u32],
    }
    .encode(&mut out[at..])?;
    at += DispatchDirect {
        dim: l.grid,
        initiator: initiator::COMPUTE_SHADER_EN
            | initiator::FORCE_START_AT_000
            | initiator::CS_W32_EN,
    }
    .encode(&mut out[at..])?;
    at += ReleaseMem::timeline(pm4::gcr::RELEASE_WRITE_BACK, l.timeline, l.value)
        .encode(&mut out[at..])?;
    Ok(at)
}

type Encoder = fn(&Launch, &mut [u32]) -> Result<usize, EncodeError>;

fn main() {
    let mut launch = Launch {
        code: 0x7f12_3456_7800,
        rsrc: [0x60af_0000, 0x0000_008c, 0],
        group: [256, 1, 1],
        grid: [1024, 1, 1],
        kernarg: 0x7f00_0010_0000,
        timeline: 0x7f00_0000_0008,
        value: 1,
    };
    let mut ring = vec![0u32; 1 << 16];
    let words = encode(&launch, &mut ring).expect("the dispatch encodes");
    // Check the words decode as the packets meant, once.
    let names: Vec<&str> = pm4::packets(&ring[..words])
        .map(|p| p.unwrap().1.name())
        .collect();
    assert_eq!(names.len(), 8, "{names:?}");

    let mut other = vec![0u32; 64];
    assert_eq!(encode_slices(&launch, &mut other), Ok(words));
    assert_eq!(other[..words], ring[..words]);

    // Slots of 64 words; the mask keeps a division out of the loop.
    let slots = ring.len() / 64;
    assert!(slots.is_power_of_two());
    let encoders: [(&str, Encoder); 2] = [
        ("fixed-size SET_SH_REG", encode),
        ("slice SET_SH_REG", encode_slices),
    ];
    for (name, f) in encoders {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let rounds = 200_000usize;
            let start = Instant::now();
            let mut total = 0usize;
            for i in 0..rounds {
                launch.value = i as u64;
                let slot = (i & (slots - 1)) * 64;
                total += f(black_box(&launch), black_box(&mut ring[slot..slot + 64])).unwrap();
            }
            best = best.min(start.elapsed().as_nanos() as f64 / rounds as f64);
            black_box(total);
        }
        println!(
            "encode one dispatch ({words} words, GFX11), {name}: {best:.1} ns/op (best of 5 runs of 200000)"
        );
    }
}
