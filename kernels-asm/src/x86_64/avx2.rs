//! AVX2 + FMA + F16C dot products, one weight row against one activation row, with the
//! signature of `smolrun_core::quant::VecDotFn` (n elements, raw bytes of both rows).
//!
//! The block layouts are ggml's (see `smolrun_core::quant::<format>` for the scalar truth);
//! this crate cannot see core, so the byte offsets are repeated below, and core's tests check
//! every kernel against its scalar twin.
//!
//! How the integers are made exact: weights and activations meet in `_mm256_maddubs_epi16`
//! (unsigned byte x signed byte, adjacent pairs summed into i16) only where the unsigned side
//! is a raw quant (0..63 at most), so a pair is at most 63 * 128 * 2 = 16128 and never
//! saturates; signed offsets (Q4_0's -8, Q5_0's -16, Q6_K's -32) are subtracted afterwards as
//! integers. Q8_0 x Q8_0 (both sides signed, -128 possible in a file) widens to i16 instead.
//! The float side differs from the scalar code only in summation order: per-block integer sums
//! are scaled and accumulated in 8 f32 lanes with FMA, and the lanes summed at the end.
//!
//! Every function reads only whole blocks that lie inside both slices (like the scalar code's
//! `chunks_exact`), so short slices give a short sum, never an out-of-bounds read.
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use core::arch::x86_64::*;

pub(super) const QK_K: usize = 256;
pub(super) const Q8_K_BYTES: usize = 292; // d: f32, qs: [i8; 256], bsums: [i16; 16]
pub(super) const Q8_K_QS: usize = 4;
pub(super) const Q8_K_BSUMS: usize = 260;
pub(super) const Q4_K_BYTES: usize = 144; // d, dmin: f16, scales: [u8; 12], qs: [u8; 128]
pub(super) const Q5_K_BYTES: usize = 176; // d, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]
pub(super) const Q6_K_BYTES: usize = 210; // ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16
pub(super) const QK8_0: usize = 32;
pub(super) const Q8_0_BYTES: usize = 34; // d: f16, qs: [i8; 32]
pub(super) const Q4_0_BYTES: usize = 18; // d: f16, qs: [u8; 16]
pub(super) const Q5_0_BYTES: usize = 22; // d: f16, qh: u32, qs: [u8; 16]
pub(super) const IQ4_NL_BYTES: usize = 18; // d: f16, qs: [u8; 16] (indices into kvalues_iq4nl)
pub(super) const IQ4_XS_BYTES: usize = 136; // d: f16, scales_h: u16, scales_l: [u8; 4], qs: [u8; 128]

#[inline(always)]
pub(super) unsafe fn load256(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

#[inline(always)]
pub(super) unsafe fn load128(p: *const u8) -> __m128i {
    _mm_loadu_si128(p as *const __m128i)
}

/// The f16 at `p` (little-endian, any alignment) as f32, exactly.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes([*p, *p.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

#[inline(always)]
pub(super) unsafe fn f32_at(p: *const u8) -> f32 {
    f32::from_le_bytes([*p, *p.add(1), *p.add(2), *p.add(3)])
}

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The 8 six-bit scales and 8 six-bit mins of a Q4_K/Q5_K super-block from its 12 packed
/// bytes (the layout `scale_min_k4` decodes one at a time), done four at a time in u32 words.
#[inline(always)]
pub(super) unsafe fn scales_mins_k4(p: *const u8) -> ([u8; 8], [u8; 8]) {
    let w = |i: usize| u32::from_le_bytes([*p.add(i), *p.add(i + 1), *p.add(i + 2), *p.add(i + 3)]);
    let (s0, s1, s2) = (w(0), w(4), w(8));
    let sc_lo = s0 & 0x3f3f_3f3f;
    let mn_lo = s1 & 0x3f3f_3f3f;
    let sc_hi = (s2 & 0x0f0f_0f0f) | (((s0 >> 6) & 0x0303_0303) << 4);
    let mn_hi = ((s2 >> 4) & 0x0f0f_0f0f) | (((s1 >> 6) & 0x0303_0303) << 4);
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    sc[..4].copy_from_slice(&sc_lo.to_le_bytes());
    sc[4..].copy_from_slice(&sc_hi.to_le_bytes());
    mn[..4].copy_from_slice(&mn_lo.to_le_bytes());
    mn[4..].copy_from_slice(&mn_hi.to_le_bytes());
    (sc, mn)
}

/// Sum over the 8 sub-blocks of min[s] * (bsum[2s] + bsum[2s+1]), as 8 i32 lanes (one per
/// sub-block): the integer part of the min term of Q4_K and Q5_K.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mins_times_bsums(mins: &[u8; 8], y: *const u8) -> __m256i {
    let mut pairs = [0u8; 16];
    for (s, &m) in mins.iter().enumerate() {
        pairs[2 * s] = m;
        pairs[2 * s + 1] = m;
    }
    let mins16 = _mm256_cvtepu8_epi16(load128(pairs.as_ptr()));
    let bsums = load256(y.add(Q8_K_BSUMS));
    _mm256_madd_epi16(bsums, mins16)
}

/// Shared body of Q4_K and Q5_K: 4 chunks of 64 elements, each 32 bytes of quants split into
/// low nibbles (sub-block 2c) and high nibbles (sub-block 2c + 1), plus the fifth bit for Q5_K.
#[inline(always)]
unsafe fn q45_k_dot<const FIVE_BITS: bool>(
    n: usize,
    w: &[u8],
    act: &[u8],
    block_bytes: usize,
    qs_off: usize,
) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / block_bytes)
        .min(act.len() / Q8_K_BYTES);
    let low4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    let mut acc_mins = _mm256_setzero_ps();
    for i in 0..nb {
        let x = w.as_ptr().add(i * block_bytes);
        let y = act.as_ptr().add(i * Q8_K_BYTES);
        let dy = f32_at(y);
        let d = f16_at(x) * dy;
        let dmin = f16_at(x.add(2)) * dy;
        let (sc, mn) = scales_mins_k4(x.add(4));
        acc_mins = _mm256_fmadd_ps(
            _mm256_set1_ps(dmin),
            _mm256_cvtepi32_ps(mins_times_bsums(&mn, y)),
            acc_mins,
        );
        // Q5_K's fifth bits: bit 2c of qh[l] for low nibbles of chunk c, bit 2c + 1 for high.
        let mut qh = if FIVE_BITS {
            load256(x.add(16))
        } else {
            _mm256_setzero_si256()
        };
        let mut sumi = _mm256_setzero_si256();
        for c in 0..4 {
            let q = load256(x.add(qs_off + 32 * c));
            let mut lo = _mm256_and_si256(q, low4);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
            if FIVE_BITS {
                // Masking to bit 0 after the 16-bit shift drops what crossed from the next
                // byte; shifting that bit left by 4 stays inside its byte.
                let h_lo = _mm256_slli_epi16(_mm256_and_si256(qh, one), 4);
                let h_hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4);
                lo = _mm256_or_si256(lo, h_lo);
                hi = _mm256_or_si256(hi, h_hi);
                qh = _mm256_srli_epi16(qh, 2);
            }
            let y_lo = load256(y.add(Q8_K_QS + 64 * c));
            let y_hi = load256(y.add(Q8_K_QS + 64 * c + 32));
            let p_lo = _mm256_madd_epi16(
                _mm256_maddubs_epi16(lo, y_lo),
                _mm256_set1_epi16(sc[2 * c] as i16),
            );
            let p_hi = _mm256_madd_epi16(
                _mm256_maddubs_epi16(hi, y_hi),
                _mm256_set1_epi16(sc[2 * c + 1] as i16),
            );
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_lo, p_hi));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc) - hsum_ps(acc_mins)
}

/// Q4_K weights . Q8_K activations.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q4_k_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    q45_k_dot::<false>(n, w, act, Q4_K_BYTES, 16)
}

/// Q5_K weights . Q8_K activations.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q5_k_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    q45_k_dot::<true>(n, w, act, Q5_K_BYTES, 48)
}

/// Bits SHIFT and SHIFT + 1 of every byte of `qh`, moved to bits 4 and 5: the high part of
/// one quarter of a Q6_K half. (Bits that the 16-bit shift moves across bytes are masked off.)
#[inline(always)]
pub(super) unsafe fn q6_high<const SHIFT: i32>(qh: __m256i, two_bits: __m256i) -> __m256i {
    let bits = match SHIFT {
        0 => qh,
        2 => _mm256_srli_epi16(qh, 2),
        4 => _mm256_srli_epi16(qh, 4),
        _ => _mm256_srli_epi16(qh, 6),
    };
    _mm256_slli_epi16(_mm256_and_si256(bits, two_bits), 4)
}

/// Q6_K weights . Q8_K activations. Quants are dotted as unsigned 0..63; the -32 offset is
/// taken off afterwards through the activation's 16-element sums: 32 * sum_j scale[j] * bsum[j].
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q6_k_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / Q6_K_BYTES)
        .min(act.len() / Q8_K_BYTES);
    let low4 = _mm256_set1_epi8(0x0F);
    let two_bits = _mm256_set1_epi8(3);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let x = w.as_ptr().add(i * Q6_K_BYTES);
        let y = act.as_ptr().add(i * Q8_K_BYTES);
        let d = f16_at(x.add(208)) * f32_at(y);
        let scales = x.add(192);
        let scales16 = _mm256_cvtepi8_epi16(load128(scales));
        let offset = _mm256_madd_epi16(load256(y.add(Q8_K_BSUMS)), scales16);
        let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5));
        for h in 0..2 {
            let ql0 = load256(x.add(64 * h));
            let ql1 = load256(x.add(64 * h + 32));
            let qh = load256(x.add(128 + 32 * h));
            // Quarter k holds elements 128h + 32k .. + 32: sub-blocks 8h + 2k and 8h + 2k + 1.
            let quarters = [
                _mm256_or_si256(_mm256_and_si256(ql0, low4), q6_high::<0>(qh, two_bits)),
                _mm256_or_si256(_mm256_and_si256(ql1, low4), q6_high::<2>(qh, two_bits)),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                    q6_high::<4>(qh, two_bits),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                    q6_high::<6>(qh, two_bits),
                ),
            ];
            for (k, &q) in quarters.iter().enumerate() {
                let yq = load256(y.add(Q8_K_QS + 128 * h + 32 * k));
                let s = 8 * h + 2 * k;
                let sc = _mm256_set_m128i(
                    _mm_set1_epi16(*scales.add(s + 1) as i8 as i16),
                    _mm_set1_epi16(*scales.add(s) as i8 as i16),
                );
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, yq), sc);
                sumi = _mm256_add_epi32(sumi, p);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc)
}

/// Q8_0 weights . Q8_0 activations. Both sides are signed and a file may hold -128, so the
/// bytes are widened to i16 and multiplied with `madd_epi16` (exact for every input).
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q8_0_q8_0(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK8_0)
        .min(w.len() / Q8_0_BYTES)
        .min(act.len() / Q8_0_BYTES);
    let mut acc = [_mm256_setzero_ps(); 2];
    for i in 0..nb {
        let x = w.as_ptr().add(i * Q8_0_BYTES);
        let y = act.as_ptr().add(i * Q8_0_BYTES);
        // The product of two f16 values is exact in f32.
        let d = f16_at(x) * f16_at(y);
        let x_lo = _mm256_cvtepi8_epi16(load128(x.add(2)));
        let x_hi = _mm256_cvtepi8_epi16(load128(x.add(18)));
        let y_lo = _mm256_cvtepi8_epi16(load128(y.add(2)));
        let y_hi = _mm256_cvtepi8_epi16(load128(y.add(18)));
        let sumi = _mm256_add_epi32(_mm256_madd_epi16(x_lo, y_lo), _mm256_madd_epi16(x_hi, y_hi));
        // Two accumulators so consecutive blocks do not wait on each other's FMA.
        acc[i & 1] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[i & 1]);
    }
    hsum_ps(_mm256_add_ps(acc[0], acc[1]))
}

/// 32 quants of a Q4_0/Q5_0 block as bytes 0..15: low nibbles (elements 0..15) in the low
/// 128 bits, high nibbles (elements 16..31) in the high 128 bits.
#[inline(always)]
pub(super) unsafe fn nibbles_0(qs: *const u8) -> __m256i {
    let q = load128(qs);
    let low4 = _mm_set1_epi8(0x0F);
    _mm256_set_m128i(
        _mm_and_si128(_mm_srli_epi16(q, 4), low4),
        _mm_and_si128(q, low4),
    )
}

/// Integer dot of unsigned quants `q` with signed activations `y`, minus `offset` times the
/// activations' sum: sum (q - offset) * y in 8 i32 lanes, exact for every byte input.
#[inline(always)]
pub(super) unsafe fn offset_dot(q: __m256i, y: __m256i, offset: __m256i) -> __m256i {
    let p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, y), _mm256_maddubs_epi16(offset, y));
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// Q4_0 weights . Q8_0 activations.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q4_0_q8_0(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK8_0)
        .min(w.len() / Q4_0_BYTES)
        .min(act.len() / Q8_0_BYTES);
    let eight = _mm256_set1_epi8(8);
    let mut acc = [_mm256_setzero_ps(); 2];
    for i in 0..nb {
        let x = w.as_ptr().add(i * Q4_0_BYTES);
        let y = act.as_ptr().add(i * Q8_0_BYTES);
        let d = f16_at(x) * f16_at(y);
        let sumi = offset_dot(nibbles_0(x.add(2)), load256(y.add(2)), eight);
        acc[i & 1] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[i & 1]);
    }
    hsum_ps(_mm256_add_ps(acc[0], acc[1]))
}

/// Q5_0 weights . Q8_0 activations. Bit j of `qh` is the fifth bit of element j: the u32 is
/// spread so that byte j holds qh's byte j / 8, then tested against bit j % 8.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q5_0_q8_0(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK8_0)
        .min(w.len() / Q5_0_BYTES)
        .min(act.len() / Q8_0_BYTES);
    let sixteen = _mm256_set1_epi8(16);
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let mut acc = [_mm256_setzero_ps(); 2];
    for i in 0..nb {
        let x = w.as_ptr().add(i * Q5_0_BYTES);
        let y = act.as_ptr().add(i * Q8_0_BYTES);
        let d = f16_at(x) * f16_at(y);
        let qh = u32::from_le_bytes([*x.add(2), *x.add(3), *x.add(4), *x.add(5)]);
        let spread_qh = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), spread);
        let is_set = _mm256_cmpeq_epi8(_mm256_and_si256(spread_qh, bit), bit);
        let q = _mm256_or_si256(nibbles_0(x.add(6)), _mm256_and_si256(is_set, sixteen));
        let sumi = offset_dot(q, load256(y.add(2)), sixteen);
        acc[i & 1] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[i & 1]);
    }
    hsum_ps(_mm256_add_ps(acc[0], acc[1]))
}

/// F32 weights . F32 activations: 4 x 8 FMA lanes, then 8 at a time, then a scalar tail.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_f32(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let n = n.min(w.len() / 4).min(act.len() / 4);
    let (wp, ap) = (w.as_ptr() as *const f32, act.as_ptr() as *const f32);
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let j = i + 8 * k;
            *acc = _mm256_fmadd_ps(_mm256_loadu_ps(wp.add(j)), _mm256_loadu_ps(ap.add(j)), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(
            _mm256_loadu_ps(wp.add(i)),
            _mm256_loadu_ps(ap.add(i)),
            acc[0],
        );
        i += 8;
    }
    let mut sum = hsum_ps(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    while i < n {
        sum += f32_at(w.as_ptr().add(4 * i)) * f32_at(act.as_ptr().add(4 * i));
        i += 1;
    }
    sum
}

/// 8 f16 values from `p + 2 * j`, widened to f32.
#[inline(always)]
unsafe fn load8(p: *const u8, j: usize) -> __m256 {
    _mm256_cvtph_ps(load128(p.add(2 * j)))
}

/// F16 weights . F16 activations, widened with F16C: the product of two f16 values is exact
/// in f32, so the only rounding is in the f32 sums (the scalar twin sums in f64).
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_f16(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let n = n.min(w.len() / 2).min(act.len() / 2);
    let (wp, ap) = (w.as_ptr(), act.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let j = i + 8 * k;
            *acc = _mm256_fmadd_ps(load8(wp, j), load8(ap, j), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(load8(wp, i), load8(ap, i), acc[0]);
        i += 8;
    }
    let mut sum = hsum_ps(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    while i < n {
        sum += f16_at(wp.add(2 * i)) * f16_at(ap.add(2 * i));
        i += 1;
    }
    sum
}
