//! AVX2 Q3_K . Q8_K, one row (`vec_dot_q3_k_q8_k`) and a batch of activation rows
//! (`matmul_q3_k_q8_k`, a prompt's tokens), both bit for bit the scalar twin
//! `smolrun_core::quant::q3_k::vec_dot`.
//!
//! Q3_K super-block (110 bytes): hmask [u8; 32] at 0, qs [u8; 64] at 32, 12 bytes of packed
//! 6-bit sub-block scales (stored +32) at 96, f16 d at 108. Element 128h + 32s + l has its low
//! two bits at bits 2s.. of qs[32h + l] and its third bit (set: not lowered by 4) at bit
//! 4h + s of hmask[l]; q = low - 4 * (1 - bit), in -4..3.
//!
//! Exactness: the twin keeps 8 f32 lanes, lane L summing (d * dy) * aux[L] block by block,
//! where aux[L] is the exact integer sum over the elements e = L (mod 8) of
//! scale(e / 16) * q * y. `maddubs` + `madd` sum 4 neighbouring bytes into one i32, so the
//! bytes are first put in an order where the 4 bytes of an i32 belong to one lane: every run
//! of 32 elements (two sub-blocks) is permuted (`vpermd` + `pshufb`) so that dword L holds
//! elements L, L + 8 (the even sub-block) and L + 16, L + 24 (the odd one). The weights' byte
//! order is the same for all 8 runs (byte l of qs and hmask), so qs and hmask are permuted once
//! per block; each activation run is permuted as it is loaded. Then `maddubs` gives, per i16,
//! one sub-block's two products of the lane, and `madd` with (scale even, scale odd) pairs the
//! i32 lane's exact integer. The float steps are the twin's (product, then sum, never fused;
//! the 8 lane sums added in order at the end).
//!
//! The -4 offset: `maddubs` wants unsigned weights, so it meets the low bits (0..3) and, in a
//! second `maddubs`, 4 * (1 - bit) (0 or 4), subtracted in i16: each i16 is at most
//! 2 * 3 * 128 + 2 * 4 * 128 in magnitude, no saturation, for every activation byte (-128
//! included).
//!
//! Every function reads only whole blocks inside the slices.
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use super::avx2::*;
use super::avx2_cols::{matmul_by_groups, ColGroup};
use core::arch::x86_64::*;

const Q3_K_BYTES: usize = 110;
const Q3_K_QS: usize = 32;
const Q3_K_SCALES: usize = 96;
const Q3_K_D: usize = 108;

/// Puts the 32 bytes of `v` in lane order: dword L (0..7) holds bytes L, L + 8, L + 16, L + 24.
#[inline(always)]
unsafe fn lane_order(v: __m256i) -> __m256i {
    // Dwords 0, 2, 4, 6 (bytes 8m..8m + 4) to the low half, 1, 3, 5, 7 to the high half; then
    // a 4x4 byte transpose in each half.
    let v = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
    let t = _mm256_setr_epi8(
        0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, //
        0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
    );
    _mm256_shuffle_epi8(v, t)
}

/// One super-block's weights in lane order: for each run of 32 elements (h, s) the low bits
/// and 4 * (1 - third bit), and the 8 (even, odd) scale pairs as i16 pairs in a dword.
struct Q3KBlock {
    low: [__m256i; 8],
    lowered: [__m256i; 8],
    scales: [i32; 8],
    d: f32,
}

/// The 16 scales minus 32, as bytes, from the 12 packed bytes (four at a time in u32 words).
#[inline(always)]
unsafe fn scales_q3_k(p: *const u8) -> [i8; 16] {
    let w = |i: usize| u32::from_le_bytes([*p.add(i), *p.add(i + 1), *p.add(i + 2), *p.add(i + 3)]);
    let (a0, a1, a2) = (w(0), w(4), w(8));
    let lo = 0x0f0f_0f0f;
    let hi = 0x0303_0303;
    let words = [
        (a0 & lo) | ((a2 & hi) << 4),
        (a1 & lo) | (((a2 >> 2) & hi) << 4),
        ((a0 >> 4) & lo) | (((a2 >> 4) & hi) << 4),
        ((a1 >> 4) & lo) | (((a2 >> 6) & hi) << 4),
    ];
    let mut out = [0i8; 16];
    for (g, word) in words.iter().enumerate() {
        for (j, b) in word.to_le_bytes().iter().enumerate() {
            out[4 * g + j] = *b as i8 - 32;
        }
    }
    out
}

#[inline(always)]
unsafe fn unpack_q3_k(x: *const u8) -> Q3KBlock {
    let three = _mm256_set1_epi8(3);
    let four = _mm256_set1_epi8(4);
    // Lowered where the bit is clear: work on the inverted mask.
    let not_hm = _mm256_xor_si256(lane_order(load256(x)), _mm256_set1_epi8(-1));
    let mut low = [_mm256_setzero_si256(); 8];
    let mut lowered = [_mm256_setzero_si256(); 8];
    for h in 0..2 {
        let qs = lane_order(load256(x.add(Q3_K_QS + 32 * h)));
        // 16-bit shifts: the masks keep only bits that stayed inside their byte.
        low[4 * h] = _mm256_and_si256(qs, three);
        low[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(qs, 2), three);
        low[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(qs, 4), three);
        low[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(qs, 6), three);
    }
    // Bit k = 4h + s of not_hm moved to bit 2.
    lowered[0] = _mm256_and_si256(_mm256_slli_epi16(not_hm, 2), four);
    lowered[1] = _mm256_and_si256(_mm256_slli_epi16(not_hm, 1), four);
    lowered[2] = _mm256_and_si256(not_hm, four);
    lowered[3] = _mm256_and_si256(_mm256_srli_epi16(not_hm, 1), four);
    lowered[4] = _mm256_and_si256(_mm256_srli_epi16(not_hm, 2), four);
    lowered[5] = _mm256_and_si256(_mm256_srli_epi16(not_hm, 3), four);
    lowered[6] = _mm256_and_si256(_mm256_srli_epi16(not_hm, 4), four);
    lowered[7] = _mm256_and_si256(_mm256_srli_epi16(not_hm, 5), four);
    let sc = scales_q3_k(x.add(Q3_K_SCALES));
    let scales = core::array::from_fn(|r| {
        let (e, o) = (
            sc[2 * r] as i16 as u16 as u32,
            sc[2 * r + 1] as i16 as u16 as u32,
        );
        (e | (o << 16)) as i32
    });
    Q3KBlock {
        low,
        lowered,
        scales,
        d: f16_at(x.add(Q3_K_D)),
    }
}

/// The twin's 8 integer lanes of one super-block against the Q8_K block at `y`, exact.
#[inline(always)]
unsafe fn block_lanes(b: &Q3KBlock, y: *const u8) -> __m256i {
    let mut sum = [_mm256_setzero_si256(); 2];
    for r in 0..8 {
        // Run r = 4h + s: elements 128h + 32s.., sub-blocks 2r and 2r + 1.
        let yq = lane_order(load256(y.add(Q8_K_QS + 32 * r)));
        let p = _mm256_sub_epi16(
            _mm256_maddubs_epi16(b.low[r], yq),
            _mm256_maddubs_epi16(b.lowered[r], yq),
        );
        let p = _mm256_madd_epi16(p, _mm256_set1_epi32(b.scales[r]));
        sum[r & 1] = _mm256_add_epi32(sum[r & 1], p);
    }
    _mm256_add_epi32(sum[0], sum[1])
}

/// The twin's end: the 8 lane sums added in order.
#[inline(always)]
unsafe fn sum_lanes(acc: __m256) -> f32 {
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
    let mut sumf = 0.0f32;
    for s in lanes {
        sumf += s;
    }
    sumf
}

/// Q3_K weights . Q8_K activations (one row), bit for bit the scalar twin.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q3_k_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / Q3_K_BYTES)
        .min(act.len() / Q8_K_BYTES);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let x = w.as_ptr().add(i * Q3_K_BYTES);
        let y = act.as_ptr().add(i * Q8_K_BYTES);
        let b = unpack_q3_k(x);
        let lanes = block_lanes(&b, y);
        // The twin's `d * a as f32` then `+=`, lane by lane (Rust never fuses them).
        let d = _mm256_set1_ps(b.d * f32_at(y));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(lanes)));
    }
    sum_lanes(acc)
}

/// Q3_K in the batch loop of `avx2_cols`: each block unpacked once for up to 4 activation rows.
struct Q3K;

impl ColGroup for Q3K {
    const QK: usize = QK_K;
    const W_BYTES: usize = Q3_K_BYTES;
    const A_BYTES: usize = Q8_K_BYTES;

    #[inline(always)]
    unsafe fn dot_group<const N: usize>(nb: usize, xr: *const u8, ys: [*const u8; N]) -> [f32; N] {
        let mut acc = [_mm256_setzero_ps(); N];
        for i in 0..nb {
            let b = unpack_q3_k(xr.add(i * Q3_K_BYTES));
            for j in 0..N {
                let y = ys[j].add(i * Q8_K_BYTES);
                let lanes = block_lanes(&b, y);
                let d = _mm256_set1_ps(b.d * f32_at(y));
                acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(d, _mm256_cvtepi32_ps(lanes)));
            }
        }
        core::array::from_fn(|j| sum_lanes(acc[j]))
    }
}

/// Q3_K weights x Q8_K activation rows (`out[t * n_rows + r]`), bit for bit the vec_dot above
/// (and so the scalar twin) for every pair.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q3_k_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul_by_groups::<Q3K>(n, w, acts, n_acts, out)
}
