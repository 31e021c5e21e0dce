//! Lane loops compiled for the host's vector unit: on x86-64 hosts with AVX2 and FMA (and the
//! bit-manipulation extensions every such CPU has: POPCNT, BMI1, BMI2, LZCNT), the fast issue
//! forms (`exec::fast`) run as a copy compiled with those features (8 lanes per instruction,
//! variable shifts for EXEC masks, fused multiply-add, one-instruction lane counts), else as
//! the baseline copy. The same source, so the same results. The one place that calls target-feature code
//! besides `fma`.

/// Whether the host's vector unit runs the wide copy, detected once per dispatch (not per
/// instruction).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wide(bool);

impl Wide {
    /// The host's answer.
    pub(crate) fn detect() -> Wide {
        #[cfg(target_arch = "x86_64")]
        {
            Wide(
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("popcnt")
                    && std::arch::is_x86_feature_detected!("bmi1")
                    && std::arch::is_x86_feature_detected!("bmi2")
                    && std::arch::is_x86_feature_detected!("lzcnt"),
            )
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Wide(false)
        }
    }

    /// Runs `f`, compiled with AVX2, FMA and the bit-manipulation extensions when the host has
    /// them (`f` and what it inlines).
    #[inline(always)]
    pub(crate) fn run<R>(self, f: impl FnOnce() -> R) -> R {
        #[cfg(target_arch = "x86_64")]
        if self.0 {
            // SAFETY: `Wide(true)` is made only by `detect` on a CPU with every target feature
            // `avx2_fma` is compiled with.
            return unsafe { avx2_fma(f) };
        }
        f()
    }
}

/// `f` inlined into a function compiled for AVX2, FMA and the bit-manipulation extensions.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,popcnt,bmi1,bmi2,lzcnt")]
fn avx2_fma<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// `src` as little-endian dwords into `dst`, which holds exactly `4 * src.len()` bytes (else
/// it panics): one copy on a little-endian host.
#[inline(always)]
pub(crate) fn put_dwords(dst: &mut [u8], src: &[u32]) {
    assert_eq!(dst.len(), 4 * src.len(), "put_dwords: lengths");
    #[cfg(target_endian = "little")]
    {
        // SAFETY: `dst` holds `4 * src.len()` bytes (checked); a u32's bytes on a
        // little-endian host are its little-endian encoding; the two do not overlap (one is
        // borrowed mutably).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr() as *const u8, dst.as_mut_ptr(), dst.len())
        };
    }
    #[cfg(not(target_endian = "little"))]
    for (c, v) in dst.chunks_exact_mut(4).zip(src) {
        c.copy_from_slice(&v.to_le_bytes());
    }
}

/// A lane mask as one word per lane: all ones where bit `l` of `bits` is set, else zero.
#[inline(always)]
pub(crate) fn unpack_lanes<const N: usize>(bits: u64) -> [u32; N] {
    let mut m = [0u32; N];
    #[cfg(target_arch = "x86_64")]
    if N.is_multiple_of(8) && N <= 64 && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above); N is 8 to 64 lanes in whole groups
        // of 8.
        unsafe { unpack_lanes_avx2(bits, &mut m) };
        return m;
    }
    for (l, x) in m.iter_mut().enumerate() {
        *x = 0u32.wrapping_sub((bits >> l) as u32 & 1);
    }
    m
}

/// `unpack_lanes` in AVX2: 8 lanes' bits broadcast, tested against one bit each.
///
/// # Safety
/// The CPU has AVX2; `N` is a multiple of 8, at most 64.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn unpack_lanes_avx2<const N: usize>(bits: u64, m: &mut [u32; N]) {
    use std::arch::x86_64::{
        __m256i, _mm256_and_si256, _mm256_cmpeq_epi32, _mm256_set1_epi32, _mm256_setr_epi32,
        _mm256_storeu_si256,
    };
    let one = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (c, g) in m.as_chunks_mut::<8>().0.iter_mut().enumerate() {
        let b = _mm256_and_si256(_mm256_set1_epi32((bits >> (8 * c)) as i32), one);
        // SAFETY: `g` is 8 u32s, 32 bytes, written unaligned.
        unsafe { _mm256_storeu_si256(g.as_mut_ptr() as *mut __m256i, _mm256_cmpeq_epi32(b, one)) };
    }
}

/// The lane mask whose bit `l` is the top bit of `m[l]` (lane results as all-ones or
/// all-zeros words, packed as EXEC and VCC hold them).
#[inline(always)]
pub(crate) fn pack_lanes<const N: usize>(m: &[u32; N]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if N.is_multiple_of(8) && N <= 64 && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above); N is 8 to 64 lanes in whole groups
        // of 8.
        return unsafe { pack_lanes_avx2(m) };
    }
    let mut bits = 0u64;
    for (l, &x) in m.iter().enumerate() {
        bits |= u64::from(x >> 31) << l;
    }
    bits
}

/// `pack_lanes` in AVX2: one sign-bit mask per 8 lanes.
///
/// # Safety
/// The CPU has AVX2; `N` is a multiple of 8, at most 64.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn pack_lanes_avx2<const N: usize>(m: &[u32; N]) -> u64 {
    use std::arch::x86_64::{_mm256_loadu_ps, _mm256_movemask_ps};
    let mut bits = 0u64;
    for (c, g) in m.as_chunks::<8>().0.iter().enumerate() {
        // SAFETY: `g` is 8 u32s, 32 bytes, read unaligned as 8 floats (only sign bits used).
        let v = unsafe { _mm256_loadu_ps(g.as_ptr() as *const f32) };
        bits |= u64::from(_mm256_movemask_ps(v) as u8) << (8 * c);
    }
    bits
}

/// Whether every lane `l` of `lo` holds `lo[0] + stride l` (wrapping) and, given `hi`, every
/// lane of `hi` holds `hi[0]`: a wave's addresses at consecutive `stride` bytes.
#[inline(always)]
pub(crate) fn unit_stride<const N: usize>(
    lo: &[u32; N],
    hi: Option<&[u32; N]>,
    stride: u32,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if N.is_multiple_of(8) && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above); N is a multiple of 8.
        return unsafe { unit_stride_avx2(lo, hi, stride) };
    }
    let mut apart = 0u32;
    for l in 0..N {
        apart |= lo[l] ^ lo[0].wrapping_add(stride.wrapping_mul(l as u32));
    }
    if let Some(h) = hi {
        for l in 0..N {
            apart |= h[l] ^ h[0];
        }
    }
    apart == 0
}

/// `unit_stride` in AVX2, 8 lanes per instruction.
///
/// # Safety
/// The CPU has AVX2; `N` is a multiple of 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn unit_stride_avx2<const N: usize>(
    lo: &[u32; N],
    hi: Option<&[u32; N]>,
    stride: u32,
) -> bool {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi32, _mm256_loadu_si256, _mm256_mullo_epi32, _mm256_or_si256,
        _mm256_set1_epi32, _mm256_setr_epi32, _mm256_setzero_si256, _mm256_testz_si256,
        _mm256_xor_si256,
    };
    let load = |c: &[u32; 8]| {
        // SAFETY: `c` is 8 u32s, 32 bytes, read unaligned.
        unsafe { _mm256_loadu_si256(c.as_ptr() as *const __m256i) }
    };
    let s = _mm256_set1_epi32(stride as i32);
    let mut next = _mm256_add_epi32(
        _mm256_set1_epi32(lo[0] as i32),
        _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), s),
    );
    let step = _mm256_set1_epi32(stride.wrapping_mul(8) as i32);
    let mut apart = _mm256_setzero_si256();
    for c in lo.as_chunks::<8>().0 {
        apart = _mm256_or_si256(apart, _mm256_xor_si256(load(c), next));
        next = _mm256_add_epi32(next, step);
    }
    if let Some(h) = hi {
        let h0 = _mm256_set1_epi32(h[0] as i32);
        for c in h.as_chunks::<8>().0 {
            apart = _mm256_or_si256(apart, _mm256_xor_si256(load(c), h0));
        }
    }
    _mm256_testz_si256(apart, apart) != 0
}

/// A wave's LDS dword loads of several registers: `rows[k][l]` gets the little-endian dword
/// of `bytes` at `a[l] + off[k]`, for the lanes whose bit of `exec` is set (`full`: every
/// lane's), the others keep theirs. One bounds check for the whole access (inactive
/// lanes' addresses are not looked at), contiguous lanes as a plain copy, else a gather.
/// False, writing nothing, when an active lane's dword would reach past `bytes` (the caller
/// then goes lane by lane).
#[inline(always)]
pub(crate) fn lds_load_rows<const N: usize>(
    bytes: &[u8],
    a: &[u32; N],
    exec: u64,
    full: bool,
    off: &[u32],
    rows: &mut [[u32; N]],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if N.is_multiple_of(8)
        && N <= 64
        && bytes.len() <= i32::MAX as usize
        && std::arch::is_x86_feature_detected!("avx2")
    {
        // SAFETY: the CPU has AVX2 (checked just above); N is 8 to 64 lanes in whole groups
        // of 8 and the LDS fits i32 offsets (checked).
        return unsafe { lds_rows_avx2(bytes, a, exec, full, off, rows) };
    }
    let m: [u32; N] = std::array::from_fn(|l| 0u32.wrapping_sub((exec >> l) as u32 & 1));
    // Inactive lanes read at 0 (their address may be anything).
    let masked: [u32; N];
    let am = if full {
        a
    } else {
        masked = std::array::from_fn(|l| a[l] & m[l]);
        &masked
    };
    let mut hi = 0u32;
    for &x in am {
        hi = hi.max(x);
    }
    let mut omax = 0u32;
    for &o in off {
        omax = omax.max(o);
    }
    if hi as u64 + omax as u64 + 4 > bytes.len() as u64 {
        return false;
    }
    // Every lane at the next dword: lane l at `a0 + 4 l` (no wrap: the last is `hi`).
    let contiguous = full && {
        let mut apart = 0u32;
        for l in 0..N {
            apart |= am[l].wrapping_sub(4 * l as u32) ^ am[0];
        }
        apart == 0
    };
    for k in 0..rows.len().min(off.len()) {
        let o = off[k];
        let v = if contiguous {
            // am[0] + o + 4 N = hi + o + 4 <= bytes.len() (checked above).
            let x = (am[0] + o) as usize;
            let src = bytes[x..x + 4 * N].as_chunks::<4>().0;
            let mut v = [0u32; N];
            for l in 0..N {
                v[l] = u32::from_le_bytes(src[l]);
            }
            v
        } else {
            gather_dwords(bytes, am, o)
        };
        let row = &mut rows[k];
        if full {
            *row = v;
        } else {
            for l in 0..N {
                row[l] = (v[l] & m[l]) | (row[l] & !m[l]);
            }
        }
    }
    true
}

/// `lds_load_rows` in AVX2, 8 lanes per instruction. When every group of 8 lanes is active
/// and at consecutive dwords from its first lane's, or all at its first lane's (a matmul's
/// tiles: a half-wave repeats a row or broadcasts one dword), each group of each row is one
/// 32-byte load, permuted for the broadcast, bounded by the groups' highest first address;
/// else (or near the LDS's end) one masked gather per group, bounded by the active lanes'
/// highest address (inactive lanes are neither read nor changed).
///
/// # Safety
/// The CPU has AVX2; `N` is a multiple of 8, at most 64; `bytes.len() <= i32::MAX`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn lds_rows_avx2<const N: usize>(
    bytes: &[u8],
    a: &[u32; N],
    exec: u64,
    full: bool,
    off: &[u32],
    rows: &mut [[u32; N]],
) -> bool {
    use std::arch::x86_64::{
        __m256i, _mm_cvtsi128_si32, _mm256_add_epi32, _mm256_and_si256, _mm256_castsi256_si128,
        _mm256_cmpeq_epi32, _mm256_loadu_si256, _mm256_mask_i32gather_epi32, _mm256_max_epu32,
        _mm256_permute2x128_si256, _mm256_permutevar8x32_epi32, _mm256_set1_epi32,
        _mm256_setr_epi32, _mm256_setzero_si256, _mm256_shuffle_epi32, _mm256_storeu_si256,
        _mm256_sub_epi32, _mm256_testz_si256, _mm256_xor_si256,
    };
    let chunks = N / 8;
    let ac = a.as_chunks::<8>().0;
    let load = |c: &[u32; 8]| {
        // SAFETY: `c` is 8 u32s, 32 bytes, read unaligned.
        unsafe { _mm256_loadu_si256(c.as_ptr() as *const __m256i) }
    };
    let omax = off.iter().copied().fold(0, u32::max);
    let base = bytes.as_ptr();
    // Direct: every group of 8 lanes active and at consecutive dwords from its first lane's,
    // or all at its first lane's address (a matmul's tiles: a half-wave repeats a row or
    // broadcasts one dword). Each group's 32 bytes from its first lane's address hold its
    // lanes' dwords (after the permutation), so the groups' highest first address bounds the
    // whole access, with no look at the others.
    let mut perm = [_mm256_setzero_si256(); 8];
    let (lanes, steps) = (
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28),
    );
    let mut direct = full;
    let mut first_hi = 0u32;
    if direct {
        for c in 0..chunks {
            let d = _mm256_sub_epi32(load(&ac[c]), _mm256_set1_epi32(ac[c][0] as i32));
            let next = _mm256_xor_si256(d, steps);
            if _mm256_testz_si256(next, next) != 0 {
                perm[c] = lanes;
            } else if _mm256_testz_si256(d, d) == 0 {
                direct = false;
                break;
            }
            first_hi = first_hi.max(ac[c][0]);
        }
    }
    if direct && first_hi as u64 + omax as u64 + 32 <= bytes.len() as u64 {
        for (row, &o) in rows.iter_mut().zip(off) {
            for (c, r) in row.as_chunks_mut::<8>().0.iter_mut().enumerate() {
                // SAFETY: `r` is 8 u32s; `ac[c][0] + o + 32 <= first_hi + omax + 32` is within
                // `bytes` (checked just above, in 64 bits).
                unsafe {
                    let x = ac[c][0] as usize + o as usize;
                    let v = _mm256_loadu_si256(base.add(x) as *const __m256i);
                    let v = _mm256_permutevar8x32_epi32(v, perm[c]);
                    _mm256_storeu_si256(r.as_mut_ptr() as *mut __m256i, v);
                }
            }
        }
        return true;
    }
    // Else one masked gather per group, bounded by the active lanes' highest address.
    let bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    let mask = |c: usize| {
        let b = _mm256_and_si256(_mm256_set1_epi32((exec >> (8 * c)) as i32), bits);
        _mm256_cmpeq_epi32(b, bits)
    };
    let mut hi = _mm256_setzero_si256();
    for (c, g) in ac.iter().enumerate() {
        hi = _mm256_max_epu32(hi, _mm256_and_si256(load(g), mask(c)));
    }
    // The highest of the 8 words: halves, then pairs, then neighbours.
    let hi = _mm256_max_epu32(hi, _mm256_permute2x128_si256::<1>(hi, hi));
    let hi = _mm256_max_epu32(hi, _mm256_shuffle_epi32::<0x4e>(hi));
    let hi = _mm256_max_epu32(hi, _mm256_shuffle_epi32::<0xb1>(hi));
    let hi = _mm_cvtsi128_si32(_mm256_castsi256_si128(hi)) as u32;
    if hi as u64 + omax as u64 + 4 > bytes.len() as u64 {
        return false;
    }
    for (row, &o) in rows.iter_mut().zip(off) {
        let vo = _mm256_set1_epi32(o as i32);
        for (c, r) in row.as_chunks_mut::<8>().0.iter_mut().enumerate() {
            // SAFETY: `r` is 8 u32s. Every active lane's `a[l] + o + 4 <= bytes.len()`
            // (checked above, no wrap) fits an i32 offset, and masked-off lanes are not read.
            unsafe {
                let old = _mm256_loadu_si256(r.as_ptr() as *const __m256i);
                let at = _mm256_add_epi32(load(&ac[c]), vo);
                let v = _mm256_mask_i32gather_epi32::<1>(old, base as *const i32, at, mask(c));
                _mm256_storeu_si256(r.as_mut_ptr() as *mut __m256i, v);
            }
        }
    }
    true
}

/// The little-endian dwords of `bytes` at byte offsets `a[l] + o`, every lane; the caller
/// checked that every `a[l] + o + 4 <= bytes.len()`.
#[inline(always)]
fn gather_dwords<const N: usize>(bytes: &[u8], a: &[u32; N], o: u32) -> [u32; N] {
    let mut out = [0u32; N];
    #[cfg(target_arch = "x86_64")]
    if N.is_multiple_of(8)
        && bytes.len() <= i32::MAX as usize
        && std::arch::is_x86_feature_detected!("avx2")
    {
        // SAFETY: the CPU has AVX2 (checked just above), and every `a[l] + o + 4` is at most
        // `bytes.len()` (the caller's check, without wrapping), which fits an i32 offset.
        unsafe { gather_avx2(bytes, a, o, &mut out) };
        return out;
    }
    for l in 0..N {
        let x = (a[l] + o) as usize;
        out[l] = u32::from_le_bytes([bytes[x], bytes[x + 1], bytes[x + 2], bytes[x + 3]]);
    }
    out
}

/// Eight lanes per `vpgatherdd`.
///
/// # Safety
/// The CPU has AVX2; for every lane `a[l] + o + 4 <= bytes.len() <= i32::MAX` (no wrap).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn gather_avx2<const N: usize>(bytes: &[u8], a: &[u32; N], o: u32, out: &mut [u32; N]) {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi32, _mm256_i32gather_epi32, _mm256_loadu_si256, _mm256_set1_epi32,
        _mm256_storeu_si256,
    };
    let base = bytes.as_ptr() as *const i32;
    let vo = _mm256_set1_epi32(o as i32);
    for (c, r) in a.as_chunks::<8>().0.iter().zip(out.as_chunks_mut::<8>().0) {
        // SAFETY: `c` and `r` are 8 u32s each (32 bytes, unaligned access); every offset
        // `c[j] + o` leaves 4 readable bytes of `bytes` (the caller's contract).
        unsafe {
            let idx = _mm256_add_epi32(_mm256_loadu_si256(c.as_ptr() as *const __m256i), vo);
            let g = _mm256_i32gather_epi32::<1>(base, idx);
            _mm256_storeu_si256(r.as_mut_ptr() as *mut __m256i, g);
        }
    }
}
