//! AVX2 Q4_1 and Q5_1 . Q8_1, one row and a batch of activation rows (a prompt's tokens), bit
//! for bit the scalar twins
//! (`smolrun_core::quant::{q4_1, q5_1}::vec_dot`).
//!
//! Q4_1 block (20 bytes): f16 d at 0, f16 m at 2, 16 nibble bytes at 4 (element j in the low
//! nibble of byte j, element j + 16 in its high nibble). Q5_1 (24 bytes): d, m, the fifth bits
//! as a u32 at 4 (bit j for element j), the nibbles at 8. Q8_1 (36 bytes): f16 d at 0, f16 s
//! (d times the sum of the quants) at 2, 32 signed bytes at 4.
//!
//! The twins add, block by block, `(d * dy) * sumi + m * s` to one f32 sum, with sumi the
//! block's exact integer dot. Here the quants (unsigned, 0..31) meet the activations in
//! `maddubs` (pairs at most 2 * 31 * 128, no saturation), two blocks' sums are reduced
//! together, and the float steps are the twin's, in Rust, in its order.
//!
//! Every function reads only whole blocks inside the slices.
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use super::avx2::*;
use super::avx2_cols::{matmul_by_groups, ColGroup};
use core::arch::x86_64::*;

const Q4_1_BYTES: usize = 20;
const Q5_1_BYTES: usize = 24;
const Q8_1_BYTES: usize = 36;

/// The sums of the 8 i32 lanes of `a` and of `b` (exact integer additions).
#[inline(always)]
unsafe fn hsum2_epi32(a: __m256i, b: __m256i) -> (i32, i32) {
    let h = _mm256_hadd_epi32(a, b);
    let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    let s = _mm_hadd_epi32(s, s);
    (_mm_cvtsi128_si32(s), _mm_extract_epi32(s, 1))
}

/// The 32 quants of one block in element order, unsigned (Q4_1: 0..15; Q5_1: 0..31).
#[inline(always)]
unsafe fn quants<const FIVE: bool>(x: *const u8) -> __m256i {
    if !FIVE {
        return nibbles_0(x.add(4));
    }
    // Byte j of the spread holds qh's byte j / 8; tested against bit j % 8.
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let qh = u32::from_le_bytes([*x.add(4), *x.add(5), *x.add(6), *x.add(7)]);
    let spread_qh = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), spread);
    let is_set = _mm256_cmpeq_epi8(_mm256_and_si256(spread_qh, bit), bit);
    _mm256_or_si256(
        nibbles_0(x.add(8)),
        _mm256_and_si256(is_set, _mm256_set1_epi8(16)),
    )
}

/// One block's integer dot in 8 i32 lanes.
#[inline(always)]
unsafe fn block_lanes<const FIVE: bool>(x: *const u8, y: *const u8) -> __m256i {
    let p = _mm256_maddubs_epi16(quants::<FIVE>(x), load256(y.add(4)));
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// The twin's float step of one block: `sumf += (d * dy) * sumi + m * s`.
#[inline(always)]
unsafe fn step(sumf: f32, x: *const u8, y: *const u8, sumi: i32) -> f32 {
    let dxdy = f16_at(x) * f16_at(y);
    sumf + (dxdy * sumi as f32 + f16_at(x.add(2)) * f16_at(y.add(2)))
}

#[inline(always)]
unsafe fn dot<const FIVE: bool>(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let bytes = if FIVE { Q5_1_BYTES } else { Q4_1_BYTES };
    let nb = (n / QK8_0).min(w.len() / bytes).min(act.len() / Q8_1_BYTES);
    let x = |i: usize| w.as_ptr().add(i * bytes);
    let y = |i: usize| act.as_ptr().add(i * Q8_1_BYTES);
    let mut sumf = 0.0f32;
    let mut i = 0;
    while i + 2 <= nb {
        let (s0, s1) = hsum2_epi32(
            block_lanes::<FIVE>(x(i), y(i)),
            block_lanes::<FIVE>(x(i + 1), y(i + 1)),
        );
        sumf = step(sumf, x(i), y(i), s0);
        sumf = step(sumf, x(i + 1), y(i + 1), s1);
        i += 2;
    }
    if i < nb {
        let (s0, _) = hsum2_epi32(block_lanes::<FIVE>(x(i), y(i)), _mm256_setzero_si256());
        sumf = step(sumf, x(i), y(i), s0);
    }
    sumf
}

/// Q4_1 weights . Q8_1 activations (one row), bit for bit the scalar twin.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q4_1_q8_1(n: usize, w: &[u8], act: &[u8]) -> f32 {
    dot::<false>(n, w, act)
}

/// Q5_1 weights . Q8_1 activations (one row), bit for bit the scalar twin.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q5_1_q8_1(n: usize, w: &[u8], act: &[u8]) -> f32 {
    dot::<true>(n, w, act)
}

/// Q4_1 and Q5_1 in the batch loop of `avx2_cols`: each block's quants unpacked once for up to
/// 4 activation rows, each row's float steps the twin's, in its order.
struct Q1<const FIVE: bool>;

impl<const FIVE: bool> ColGroup for Q1<FIVE> {
    const QK: usize = QK8_0;
    const W_BYTES: usize = if FIVE { Q5_1_BYTES } else { Q4_1_BYTES };
    const A_BYTES: usize = Q8_1_BYTES;

    #[inline(always)]
    unsafe fn dot_group<const N: usize>(nb: usize, xr: *const u8, ys: [*const u8; N]) -> [f32; N] {
        let mut sumf = [0.0f32; N];
        for i in 0..nb {
            let x = xr.add(i * Self::W_BYTES);
            let q = quants::<FIVE>(x);
            let mut j = 0;
            while j + 2 <= N {
                let (y0, y1) = (ys[j].add(i * Q8_1_BYTES), ys[j + 1].add(i * Q8_1_BYTES));
                let lanes = |y: *const u8| {
                    _mm256_madd_epi16(
                        _mm256_maddubs_epi16(q, load256(y.add(4))),
                        _mm256_set1_epi16(1),
                    )
                };
                let (s0, s1) = hsum2_epi32(lanes(y0), lanes(y1));
                sumf[j] = step(sumf[j], x, y0, s0);
                sumf[j + 1] = step(sumf[j + 1], x, y1, s1);
                j += 2;
            }
            if j < N {
                let y = ys[j].add(i * Q8_1_BYTES);
                let p = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(q, load256(y.add(4))),
                    _mm256_set1_epi16(1),
                );
                let (s0, _) = hsum2_epi32(p, _mm256_setzero_si256());
                sumf[j] = step(sumf[j], x, y, s0);
            }
        }
        sumf
    }
}

/// Q4_1 weights x Q8_1 activation rows (`out[t * n_rows + r]`), bit for bit the vec_dot.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q4_1_q8_1(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul_by_groups::<Q1<false>>(n, w, acts, n_acts, out)
}

/// Q5_1 weights x Q8_1 activation rows (`out[t * n_rows + r]`), bit for bit the vec_dot.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q5_1_q8_1(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul_by_groups::<Q1<true>>(n, w, acts, n_acts, out)
}
