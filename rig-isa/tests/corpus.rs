//! Execution oracle: every corpus kernel (kernels/corpus, built for gfx1100 and, in gfx1201/ and
//! gfx942/, for gfx1201 and gfx942 by build.sh) runs in rig-isa as each target and, compiled by
//! the machine's C compiler from the same OpenCL C source, on the host;
//! the output buffers must match bit for bit (integers and floats alike: the kernels are built
//! with -cl-fp32-correctly-rounded-divide-sqrt and -ffp-contract=off (the host with
//! -ffp-contract=off too) and both sides round to nearest even with
//! denormals kept).
//!
//! The code object is read minimally here (ELF symbol `<name>.kd`, the 64-byte kernel
//! descriptor), independent of rig-amd's parser. The test plays the command processor: it lays
//! out kernel arguments (explicit by the known C signature, then the COv5 hidden block), the user
//! SGPRs the descriptor asks for and a fake AQL dispatch packet.

mod common;

use std::path::Path;
use std::process::Command;

use common::cases::{Lists, TARGETS, built_for, cases};
use common::{Arg, Case, corpus_dir, corpus_dir_of, instructions, run_gpu_on, run_gpu_stats};
use rig_isa::{InstClass, Isa, Tier, issue_tier};

/// Compiles and runs the host build of the kernel; returns the buffers afterwards.
fn run_host(c: &Case, cc: &str, dir: &Path) -> Vec<Vec<u8>> {
    let corpus = corpus_dir();
    let mut args = Vec::new();
    let mut scalars: Vec<u64> = Vec::new();
    let mut local = 0u32;
    let mut structs = Vec::new();
    for a in &c.args {
        let s = scalars.len();
        match a {
            Arg::Buf(k, t) => args.push(format!("({t})RIG_B[{k}]")),
            Arg::U32(v) => {
                scalars.push(*v as u64);
                args.push(format!("*(uint*)&RIG_S[{s}]"));
            }
            Arg::I32(v) => {
                scalars.push(*v as u32 as u64);
                args.push(format!("*(int*)&RIG_S[{s}]"));
            }
            Arg::F32(v) => {
                scalars.push(v.to_bits() as u64);
                args.push(format!("*(float*)&RIG_S[{s}]"));
            }
            Arg::U64(v) => {
                scalars.push(*v);
                args.push(format!("*(ulong*)&RIG_S[{s}]"));
            }
            Arg::Struct(b, _, t) => {
                structs.push(b.clone());
                args.push(format!("*({t}*)RIG_T[{}]", structs.len() - 1));
            }
            Arg::Local(n, t) => {
                local = *n;
                args.push(format!("({t})RIG_L"));
            }
        }
    }
    let src = format!(
        r#"#include "host_prelude.h"
#include "{name}.cl"
static void* RIG_B[16]; static uint64_t RIG_S[16]; static void* RIG_T[4]; static void* RIG_L;
struct rig_t {{ uint l[3], g[3]; }};
static void* rig_thread(void* p) {{
  struct rig_t* t = p; memcpy(rig_l, t->l, 12); memcpy(rig_g, t->g, 12);
  {name}({args});
  return 0;
}}
static void rd(FILE* f, void* p, size_t n) {{ if (fread(p, 1, n, f) != n) exit(2); }}
int main(int argc, char** argv) {{
  FILE* f = fopen(argv[1], "rb"); uint64_t nb, len[16]; if (!f) return 2;
  rd(f, &nb, 8);
  for (uint64_t k = 0; k < nb; k++) {{ rd(f, &len[k], 8); RIG_B[k] = calloc(len[k] + 64, 1); rd(f, RIG_B[k], len[k]); }}
  uint64_t ns; rd(f, &ns, 8); rd(f, RIG_S, 8 * ns);
  uint64_t nt; rd(f, &nt, 8);
  for (uint64_t k = 0; k < nt; k++) {{ uint64_t l; rd(f, &l, 8); RIG_T[k] = calloc(l + 16, 1); rd(f, RIG_T[k], l); }}
  fclose(f);
  RIG_L = calloc({local} + 16, 1);
  uint grid[3] = {{{g0}, {g1}, {g2}}}, grp[3] = {{{s0}, {s1}, {s2}}};
  memcpy(rig_size, grp, 12);
  uint items = grp[0] * grp[1] * grp[2];
  pthread_t* th = calloc(items, sizeof(pthread_t)); struct rig_t* ts = calloc(items, sizeof(struct rig_t));
  pthread_attr_t at; pthread_attr_init(&at); pthread_attr_setstacksize(&at, 1 << 18);
  for (uint gz = 0; gz < grid[2] / grp[2]; gz++) for (uint gy = 0; gy < grid[1] / grp[1]; gy++)
  for (uint gx = 0; gx < grid[0] / grp[0]; gx++) {{
    pthread_barrier_init(&rig_bar, 0, items);
    for (uint t = 0; t < items; t++) {{
      ts[t].l[0] = t % grp[0]; ts[t].l[1] = (t / grp[0]) % grp[1]; ts[t].l[2] = t / (grp[0] * grp[1]);
      ts[t].g[0] = gx; ts[t].g[1] = gy; ts[t].g[2] = gz;
      if (pthread_create(&th[t], &at, rig_thread, &ts[t])) return 3;
    }}
    for (uint t = 0; t < items; t++) pthread_join(th[t], 0);
    pthread_barrier_destroy(&rig_bar);
  }}
  FILE* o = fopen(argv[2], "wb"); if (!o) return 4;
  for (uint64_t k = 0; k < nb; k++) fwrite(RIG_B[k], 1, len[k], o);
  fclose(o);
  return 0;
}}
"#,
        name = c.name,
        args = args.join(", "),
        local = local,
        g0 = c.grid[0],
        g1 = c.grid[1],
        g2 = c.grid[2],
        s0 = c.group[0],
        s1 = c.group[1],
        s2 = c.group[2],
    );
    let cfile = dir.join(format!("{}.c", c.name));
    let exe = dir.join(c.name);
    std::fs::write(&cfile, src).expect("write host source");
    if !exe.exists() {
        let st = Command::new(cc)
            .args(["-O1", "-std=gnu11", "-ffp-contract=off", "-pthread", "-I"])
            .arg(&corpus)
            .arg(&cfile)
            .arg("-o")
            .arg(&exe)
            .arg("-lm")
            .status()
            .expect("run cc");
        assert!(st.success(), "host build of {} failed", c.name);
    }
    let mut input = Vec::new();
    input.extend((c.bufs.len() as u64).to_le_bytes());
    for b in &c.bufs {
        input.extend((b.len() as u64).to_le_bytes());
        input.extend(b);
    }
    input.extend((scalars.len() as u64).to_le_bytes());
    for s in &scalars {
        input.extend(s.to_le_bytes());
    }
    input.extend((structs.len() as u64).to_le_bytes());
    for s in &structs {
        input.extend((s.len() as u64).to_le_bytes());
        input.extend(s);
    }
    let inp = dir.join(format!("{}.{}.in", c.name, c.opt));
    let outp = dir.join(format!("{}.{}.out", c.name, c.opt));
    std::fs::write(&inp, input).expect("write input");
    let st = Command::new(&exe)
        .arg(&inp)
        .arg(&outp)
        .status()
        .expect("run host kernel");
    assert!(st.success(), "host run of {} failed: {st}", c.name);
    let out = std::fs::read(&outp).expect("host output");
    let mut bufs = Vec::new();
    let mut at = 0;
    for b in &c.bufs {
        bufs.push(out[at..at + b.len()].to_vec());
        at += b.len();
    }
    bufs
}

fn find_cc() -> Option<String> {
    for cc in ["cc", "gcc", "clang"] {
        if Command::new(cc)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(cc.to_string());
        }
    }
    None
}

#[test]
fn corpus_matches_host() {
    let Some(cc) = find_cc() else {
        eprintln!("skipping corpus oracle: no C compiler (cc/gcc/clang) on this machine");
        return;
    };
    let dir = std::env::temp_dir().join(format!("rig-isa-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let only = std::env::var("RIG_ISA_KERNEL").ok();
    let only_target = std::env::var("RIG_ISA_TARGET").ok();
    let mut failures = Vec::new();
    let mut ran = 0;
    let lists = Lists::read();
    for c in cases() {
        if only.as_deref().is_some_and(|o| o != c.name) {
            continue;
        }
        let host = run_host(&c, &cc, &dir);
        for (isa, target) in TARGETS {
            if only_target.as_deref().is_some_and(|t| t != target) {
                continue;
            }
            if !built_for(&c, isa, &lists) {
                continue;
            }
            let gpu = std::panic::catch_unwind(|| run_gpu_on(isa, &c, 2));
            let gpu = match gpu {
                Ok(g) => g,
                Err(e) => {
                    let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
                    failures.push(format!("{target} {}.{}: {msg}", c.name, c.opt));
                    continue;
                }
            };
            ran += 1;
            for (k, (g, h)) in gpu.iter().zip(&host).enumerate() {
                if g != h {
                    let first = g.iter().zip(h).position(|(a, b)| a != b).unwrap_or(0);
                    let w = first / 4 * 4;
                    failures.push(format!(
                        "{target} {}.{}: buffer {k} differs first at byte {first}: rig {:02x?} host {:02x?}",
                        c.name,
                        c.opt,
                        &g[w..(w + 8).min(g.len())],
                        &h[w..(w + 8).min(h.len())]
                    ));
                    break;
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("{ran} kernels ran, {} failures", failures.len());
    for f in &failures {
        eprintln!("  {f}");
    }
    assert!(failures.is_empty(), "corpus kernels disagree with the host");
}

/// Operations the corpus still issues on the general executor (issue 27 moves each to a fast
/// form, and it leaves this list): the tier test fails on any other, and on an entry no
/// corpus kernel has any more.
const STILL_GENERAL: &[&str] = &[
    "buffer_atomic_add_u32",
    "buffer_atomic_add_u64",
    "buffer_atomic_cmpswap_b32",
    "buffer_atomic_max_i32",
    "buffer_load_b128",
    "buffer_load_b32",
    "buffer_load_b64",
    "buffer_load_b96",
    "buffer_load_d16_hi_b16",
    "buffer_load_i8",
    "buffer_load_u16",
    "buffer_store_b128",
    "buffer_store_b16",
    "buffer_store_b8",
    "buffer_store_b96",
    "ds_add_u32",
    "ds_add_u64",
    "ds_append",
    "ds_consume",
    "ds_load_i8_d16_hi",
    "ds_load_u16",
    "ds_load_u16_d16_hi",
    "ds_load_u8_d16",
    "ds_max_i32",
    "ds_max_u64",
    "ds_min_u64",
    "ds_store_b16",
    "ds_store_b16_d16_hi",
    "ds_store_b8_d16_hi",
    "ds_xor_b64",
    "flat_atomic_add_u32",
    "flat_atomic_cmpswap_b32",
    "global_atomic_add_u32",
    "global_atomic_add_u64",
    "global_atomic_cmpswap_b32",
    "global_atomic_or_b32",
    "global_load_d16_b16",
    "global_load_d16_hi_b16",
    "global_load_d16_hi_i8",
    "global_load_d16_hi_u8",
    "global_load_d16_i8",
    "global_load_d16_u8",
    "global_load_i16",
    "global_load_u16",
    "global_load_u8",
    "global_store_b16",
    "global_store_b8",
    "global_store_d16_hi_b16",
    "global_store_d16_hi_b8",
    "s_add_nc_u64",
    "s_barrier_signal",
    "s_barrier_wait",
    "s_buffer_load_b32",
    "s_buffer_load_b64",
    "s_cmp_lg_u64",
    "s_ctz_i32_b64",
    "s_cvt_f32_i32",
    "s_cvt_f32_u32",
    "s_getpc_b64",
    "s_load_b96",
    "s_load_u16",
    "s_mov_b64",
    "s_setpc_b64",
    "s_sext_i32_i16",
    "s_sleep",
    "s_swappc_b64",
    "s_waitcnt_vscnt",
    "scratch_load_b32",
    "scratch_load_b64",
    "scratch_store_b32",
    "scratch_store_b64",
    "v_add_co_ci_u32_e64",
    "v_add_f64",
    "v_add_f64_e32",
    "v_add_nc_u16",
    "v_add_nc_u32_e64",
    "v_cmp_gt_f16_e32",
    "v_cmp_gt_u64_e32",
    "v_cmp_gt_u64_e64",
    "v_cmp_lt_i64_e32",
    "v_cmp_lt_u64_e64",
    "v_cmp_ne_u64_e32",
    "v_cos_f16_e32",
    "v_cvt_f16_f32_e32",
    "v_cvt_f16_i16_e32",
    "v_cvt_f32_f16_e32",
    "v_div_fixup_f16",
    "v_div_fixup_f32",
    "v_div_fixup_f64",
    "v_div_fmas_f32",
    "v_div_fmas_f64",
    "v_div_scale_f32",
    "v_div_scale_f64",
    "v_dot2_bf16_bf16",
    "v_dot2_f16_f16",
    "v_dot2_f32_bf16",
    "v_dot2_f32_f16",
    "v_dot2acc_f32_f16",
    "v_dot4_i32_iu8",
    "v_dot4_u32_u8",
    "v_dot8_i32_iu4",
    "v_dot8_u32_u4",
    "v_dual_add_f32",
    "v_dual_cndmask_b32",
    "v_dual_mov_b32",
    "v_exp_f16_e32",
    "v_fma_f64",
    "v_fma_mixhi_f16",
    "v_fma_mixlo_f16",
    "v_fract_f16_e32",
    "v_frexp_exp_i16_f16_e32",
    "v_frexp_exp_i32_f32_e32",
    "v_frexp_mant_f16_e32",
    "v_frexp_mant_f32_e32",
    "v_ldexp_f32",
    "v_log_f16_e32",
    "v_lshrrev_b16",
    "v_max3_i16",
    "v_max3_u16",
    "v_med3_i16",
    "v_med3_u16",
    "v_min3_i16",
    "v_min3_u16",
    "v_mul_f64",
    "v_mul_f64_e32",
    "v_pack_b32_f16",
    "v_perm_b32",
    "v_pk_add_f16",
    "v_pk_mul_f16",
    "v_rcp_f64_e32",
    "v_sin_f16_e32",
    "v_sub_co_ci_u32_e32",
    "v_sub_co_ci_u32_e64",
    "v_sub_co_u32",
    "v_subrev_co_ci_u32_e64",
    "v_wmma_bf16_16x16x16_bf16",
    "v_wmma_f16_16x16x16_f16",
    "v_wmma_f32_16x16x16_bf16",
    "v_wmma_f32_16x16x16_f16",
    "v_wmma_i32_16x16x16_iu4",
    "v_wmma_i32_16x16x16_iu8",
];

/// Every corpus kernel of gfx1100 and gfx1201 (-O2, -O0, wave64) runs every instruction as a
/// fast form: none issues on the general executor, by the interpreter's own counters.
#[test]
fn corpus_runs_on_the_fast_tier() {
    let lists = Lists::read();
    let (mut issued, mut general) = ([0u64; InstClass::COUNT], [0u64; InstClass::COUNT]);
    let mut seen = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for c in cases() {
        for (isa, target) in TARGETS {
            if isa == Isa::Gfx9 || !built_for(&c, isa, &lists) {
                continue;
            }
            let (_, st) = run_gpu_stats(isa, &c, 1);
            for k in 0..InstClass::COUNT {
                issued[k] += st.issued[k];
                general[k] += st.general[k];
            }
            let path = corpus_dir_of(isa).join(format!("{}.{}.co", c.name, c.opt));
            let forms: std::collections::BTreeSet<String> = instructions(isa, &path)
                .iter()
                .filter(|i| issue_tier(i) == Tier::General)
                .map(|i| {
                    i.to_string()
                        .split(' ')
                        .next()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect();
            seen.extend(forms.iter().cloned());
            if st.general_total() == 0 {
                continue;
            }
            let by_class: Vec<String> = InstClass::ALL
                .iter()
                .filter(|k| st.general[k.index()] > 0)
                .map(|k| format!("{} {}", k.name(), st.general[k.index()]))
                .collect();
            let unlisted: Vec<&String> = forms
                .iter()
                .filter(|m| !STILL_GENERAL.contains(&m.as_str()))
                .collect();
            if forms.is_empty() {
                failures.push(format!(
                    "{target} {}.{}: a fast form fell back to the general executor ({})",
                    c.name,
                    c.opt,
                    by_class.join(", ")
                ));
            } else if !unlisted.is_empty() {
                failures.push(format!(
                    "{target} {}.{}: general ({}): {unlisted:?}",
                    c.name,
                    c.opt,
                    by_class.join(", ")
                ));
            }
        }
    }
    for k in InstClass::ALL {
        eprintln!(
            "{:5} issued {:12} general {:12}",
            k.name(),
            issued[k.index()],
            general[k.index()]
        );
    }
    eprintln!("general forms in the corpus: {seen:?}");
    for m in STILL_GENERAL {
        if !seen.contains(*m) {
            failures.push(format!("{m} is listed as general but has a fast form now"));
        }
    }
    for f in &failures {
        eprintln!("  {f}");
    }
    assert!(
        failures.is_empty(),
        "corpus instructions ran on the general executor"
    );
}
