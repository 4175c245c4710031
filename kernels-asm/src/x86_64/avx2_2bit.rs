//! AVX2 Q2_K and TQ2_0 kernels (2-bit weights dotted with Q8_K activations, one row).
//!
//! Both formats keep their 2-bit codes in the same order: element 128h + 32s + l is bits
//! 2s..2s+2 of byte 32h + l of the quants, so one 32-byte load and a shift give 32 codes in
//! element order, and the codes 0..3 are unsigned, which is what `maddubs` wants for its first
//! operand. Each i16 lane of `maddubs` sums two products of at most 3 * 128, so no lane can
//! saturate.
//!
//! Exactness: the scalar twins (`smolrun_core::quant::{q2_k, tq2_0}::vec_dot`) compute, per
//! super-block, exact integer sums and then a few f32 operations. These kernels compute the
//! same integers in lanes (integer addition is associative, so the lane layout does not
//! matter) and then perform the scalar twin's f32 operations, in Rust, in its order. So the
//! result is the scalar one bit for bit on every input, whatever the scales (NaN, infinity and
//! subnormals included). The price is one horizontal integer sum per 256 weights, a few
//! instructions beside the 30-odd that unpack and multiply the block.
//!
//! TQ2_0's code c means c - 1. The -1 is applied by subtracting the activation's own sum,
//! taken from its quants (a second `maddubs` against ones), not from its stored bsums: the
//! scalar twin never reads the bsums, so this kernel must not trust them either.
//!
//! Every function reads only whole blocks inside the slices.
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use super::avx2::*;
use super::avx2_k::{prefetch_ahead, spread_i16};
use core::arch::x86_64::*;

const Q2_K_BYTES: usize = 84; // scales: [u8; 16], qs: [u8; 64], d, dmin: f16
const Q2_K_QS: usize = 16;
const Q2_K_D: usize = 80;
const Q2_K_DMIN: usize = 82;
const TQ2_0_BYTES: usize = 66; // qs: [u8; 64], d: f16
const TQ2_0_D: usize = 64;

/// The four 32-code vectors of one 32-byte run of quants (shift steps 0..3).
#[inline(always)]
unsafe fn codes(qs: __m256i) -> [__m256i; 4] {
    let three = _mm256_set1_epi8(3);
    // 16-bit shifts move bits across bytes only above bit 1 of each byte, which the mask drops.
    [
        _mm256_and_si256(qs, three),
        _mm256_and_si256(_mm256_srli_epi16(qs, 2), three),
        _mm256_and_si256(_mm256_srli_epi16(qs, 4), three),
        _mm256_and_si256(_mm256_srli_epi16(qs, 6), three),
    ]
}

/// The sums of the 8 lanes of `a` and of `b` (exact integer additions).
#[inline(always)]
unsafe fn hsum2_epi32(a: __m256i, b: __m256i) -> (i32, i32) {
    // a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7
    let h = _mm256_hadd_epi32(a, b);
    let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    let s = _mm_hadd_epi32(s, s); // a, b, a, b
    (_mm_cvtsi128_si32(s), _mm_extract_epi32(s, 1))
}

/// Q2_K . Q8_K for one super-block: (isum, summs) of the scalar twin, exact.
/// isum = sum over sub-blocks j of (scale j) * sum q y; summs = sum over j of (min j) * bsum j.
#[inline(always)]
unsafe fn q2_k_block_sums(x: *const u8, y: *const u8) -> (i32, i32) {
    let low4 = _mm_set1_epi8(0x0F);
    let packed = load128(x);
    let scales = _mm_and_si128(packed, low4);
    let mins = _mm_and_si128(_mm_srli_epi16(packed, 4), low4);
    // The mins meet the activation's 16 group sums: 8 lanes of two products each.
    let summs = _mm256_madd_epi16(load256(y.add(Q8_K_BSUMS)), _mm256_cvtepu8_epi16(mins));
    let mut p = [_mm256_setzero_si256(); 8];
    for h in 0..2 {
        let q = codes(load256(x.add(Q2_K_QS + 32 * h)));
        // Scales 8h..8h + 7 as i16 in both 128-bit halves: vector s holds sub-block 8h + 2s
        // in its low half and 8h + 2s + 1 in its high half.
        let half = if h == 0 {
            scales
        } else {
            _mm_srli_si128(scales, 8)
        };
        let sc_h = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(half));
        for s in 0..4 {
            let yq = load256(y.add(Q8_K_QS + 128 * h + 32 * s));
            let sc = _mm256_shuffle_epi8(sc_h, spread_i16(2 * s as i32, 2 * s as i32 + 1));
            // Pair sums <= 2 * 3 * 128, times a scale <= 15, two per i32 lane: exact.
            p[4 * h + s] = _mm256_madd_epi16(_mm256_maddubs_epi16(q[s], yq), sc);
        }
    }
    let a = _mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3]));
    let b = _mm256_add_epi32(_mm256_add_epi32(p[4], p[5]), _mm256_add_epi32(p[6], p[7]));
    hsum2_epi32(_mm256_add_epi32(a, b), summs)
}

/// TQ2_0 . Q8_K for one super-block: sum of (c - 1) y, exact.
#[inline(always)]
unsafe fn tq2_0_block_sum(x: *const u8, y: *const u8) -> i32 {
    let ones8 = _mm256_set1_epi8(1);
    // Two chains per sum; every i16 lane ends at most 4 * 2 * 3 * 128 (c y) and 4 * 2 * 128
    // (y) in magnitude, far from saturation.
    let mut cy = [_mm256_setzero_si256(); 2];
    let mut sy = [_mm256_setzero_si256(); 2];
    for h in 0..2 {
        let c = codes(load256(x.add(32 * h)));
        for (l, &c) in c.iter().enumerate() {
            let yq = load256(y.add(Q8_K_QS + 128 * h + 32 * l));
            let k = l & 1;
            cy[k] = _mm256_add_epi16(cy[k], _mm256_maddubs_epi16(c, yq));
            sy[k] = _mm256_add_epi16(sy[k], _mm256_maddubs_epi16(ones8, yq));
        }
    }
    let d = _mm256_sub_epi16(
        _mm256_add_epi16(cy[0], cy[1]),
        _mm256_add_epi16(sy[0], sy[1]),
    );
    let d = _mm256_madd_epi16(d, _mm256_set1_epi16(1));
    hsum2_epi32(d, _mm256_setzero_si256()).0
}

/// Q2_K weights . Q8_K activations (one row), bit for bit the scalar twin.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q2_k_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / Q2_K_BYTES)
        .min(act.len() / Q8_K_BYTES);
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let x = w.as_ptr().add(i * Q2_K_BYTES);
        let y = act.as_ptr().add(i * Q8_K_BYTES);
        prefetch_ahead::<Q2_K_BYTES>(x);
        let (isum, summs) = q2_k_block_sums(x, y);
        // The scalar twin's float operations, in its order (Rust never fuses them).
        let dy = f32_at(y);
        let dall = dy * f16_at(x.add(Q2_K_D));
        let dmin = dy * f16_at(x.add(Q2_K_DMIN));
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}

/// TQ2_0 weights . Q8_K activations (one row), bit for bit the scalar twin.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_tq2_0_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / TQ2_0_BYTES)
        .min(act.len() / Q8_K_BYTES);
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let x = w.as_ptr().add(i * TQ2_0_BYTES);
        let y = act.as_ptr().add(i * Q8_K_BYTES);
        prefetch_ahead::<TQ2_0_BYTES>(x);
        let sumi = tq2_0_block_sum(x, y);
        let d = f32_at(y) * f16_at(x.add(TQ2_0_D));
        sumf += sumi as f32 * d;
    }
    sumf
}
