//! Lane loops of f32 fused multiply-add that use the host's FMA instructions when it has
//! them: `f32::mul_add` otherwise calls libm once per lane, which dominated `v_fmac_f32`.
//! Results are the same either way (one correctly rounded fma per lane). Owns nothing else.

/// `r[l] = fma(a[l], b[l], c[l])` on f32 bit patterns, over the shortest slice.
pub(crate) fn fma_lanes(r: &mut [u32], a: &[u32], b: &[u32], c: &[u32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has FMA and AVX2 (checked just above), the target features
        // `fma_lanes_x86` is compiled with.
        unsafe { fma_lanes_x86(r, a, b, c) };
        return;
    }
    fma_lanes_portable(r, a, b, c);
}

#[inline(always)]
fn fma_lanes_portable(r: &mut [u32], a: &[u32], b: &[u32], c: &[u32]) {
    for (((o, x), y), z) in r.iter_mut().zip(a).zip(b).zip(c) {
        *o = f32::from_bits(*x)
            .mul_add(f32::from_bits(*y), f32::from_bits(*z))
            .to_bits();
    }
}

/// The portable loop compiled with FMA (and AVX2 for 8-lane vectors): `mul_add` becomes
/// `vfmadd` instead of a call.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma,avx2")]
fn fma_lanes_x86(r: &mut [u32], a: &[u32], b: &[u32], c: &[u32]) {
    fma_lanes_portable(r, a, b, c);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fma_lanes_equal_mul_add() {
        let v: Vec<u32> = (0..4096u32)
            .map(|k| k.wrapping_mul(2_654_435_761) ^ (k << 20))
            .collect();
        let (a, b, c) = (&v[..1024], &v[1024..2048], &v[2048..3072]);
        let mut r = vec![0u32; 1024];
        fma_lanes(&mut r, a, b, c);
        for l in 0..1024 {
            let want = f32::from_bits(a[l]).mul_add(f32::from_bits(b[l]), f32::from_bits(c[l]));
            assert!(
                r[l] == want.to_bits() || (want.is_nan() && f32::from_bits(r[l]).is_nan()),
                "lane {l}"
            );
        }
    }
}
