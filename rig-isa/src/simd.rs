//! Lane loops compiled for the host's vector unit: on x86-64 hosts with AVX2 and FMA, the
//! fast issue forms (`exec::fast`) run as a copy compiled with those features (8 lanes per
//! instruction, variable shifts for EXEC masks, fused multiply-add), else as the baseline
//! copy. The same source, so the same results. The one place that calls target-feature code
//! besides `fma`.

/// Runs `f`, compiled with AVX2 and FMA when the host has them (`f` and what it inlines).
#[inline(always)]
pub(crate) fn wide<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA (checked just above), the target features
        // `avx2_fma` is compiled with.
        return unsafe { avx2_fma(f) };
    }
    f()
}

/// `f` inlined into a function compiled for AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn avx2_fma<R>(f: impl FnOnce() -> R) -> R {
    f()
}
