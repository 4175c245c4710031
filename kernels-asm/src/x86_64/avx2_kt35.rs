//! AVX2 Q3_K and Q5_K prompt kernels with TOKENS in the lanes (`ColsFn`), and the one-row
//! dots that give their bits (`VecDotFn`, the prompt kernels' `cols_twin`): `avx2_kt`'s
//! scheme (see its module docs) for the two K-quants it does not cover.
//!
//! The activations of up to 32 tokens are transposed once per chunk of blocks so that vector
//! k of a block holds dword k (4 activations) of 8 tokens, one token per lane; each dword of
//! a weight row's unpacked quants (in element order, on the stack) is broadcast against them.
//! A lane holds one (row, token) pair, so a sub-block's `pmaddubsw` results are summed in i16
//! and meet the sub-block's (broadcast) scale in one `pmaddwd` per 8 tokens. The file-layout
//! kernels these replace (`avx2_3bit`, `avx2_cols`) pay a `pmaddwd` by the scale for every 32
//! multiply-adds of one token.
//!
//! Q5_K is Q4_K with a fifth bit: quants 0..31, scales and mins packed as Q4_K's, the mins
//! term from the bsums. Q3_K is Q6_K's shape: 16 sub-blocks of 16 with signed scales, quants
//! -4..3 stored here as q + 4 (0..7, the unsigned operand of `pmaddubsw`) and the 4 taken off
//! through the bsums: sum (q + 4) y - 4 sum_b scale_b bsum_b.
//!
//! i16 headroom: a `pmaddubsw` lane is two products of a quant and an activation (-128..127).
//! Q5_K: |q y| <= 31 x 128, a lane at most 7936, so a 32-quant sub-block (8 dwords) is summed
//! in two halves of 4 (4 x 7936 = 31744 <= 32767, and >= -32768 for activations of -128).
//! Q3_K: |q y| <= 7 x 128, a lane at most 1792; a 16-quant sub-block is 4 dwords, 7168.
//!
//! Exactness: both entry points of a type compute, per (row, token, block), the exact
//! integers S = sum over sub-blocks of scale x (quants . activations) (Q3_K's offset folded in
//! through the bsums), for Q5_K also M = sum of min x (bsum pair); then the same float
//! operations in the same order: dd = f32(d) * d_act (one rounding), acc = fma(dd, f32(S),
//! acc), for Q5_K also accm = fma(f32(dmin) * d_act, f32(M), accm), blocks in order; the
//! result is acc (Q3_K) or acc - accm (Q5_K) (`avx2_kt`'s float steps). The one-row dots reach
//! S by file-layout vectors and a horizontal integer sum per block. Decoding keeps the faster
//! decode kernels (`avx2_3bit`, `avx2`); a prompt runs these for every batch size
//! (`cols_twin`), so it gives the same logits however it is split.
//!
//! The packing, tiling and pass structure are `avx2_kt`'s, used from there (`Packed`,
//! `Format`, `matmul`); this file adds the two formats.
//!
//! Every function reads only whole blocks inside the slices.
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use super::avx2::*;
use super::avx2_k::{add8, q4_k_scales_mins, spread_i16};
// The packing, the loops and the tile sizes are avx2_kt's; this file adds two formats.
use super::avx2_kt::{
    bsum_pairs_of_32, fma1, hsum_epi32, matmul, transpose8, Format, Packed, MAX_VECS,
};
use core::arch::x86_64::*;

const Q3_K_BYTES: usize = 110; // hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: f16
const Q3_K_QS: usize = 32;
const Q3_K_SCALES: usize = 96;
const Q3_K_D: usize = 108;
const Q5_K_QH: usize = 16;
const Q5_K_QS: usize = 48;

/// The f16 pair (d, dmin) at `x` as f32 in lanes 0 and 1.
#[inline(always)]
unsafe fn d_dmin_at(x: *const u8) -> __m128 {
    _mm_cvtph_ps(_mm_cvtsi32_si128(
        u32::from_le_bytes([*x, *x.add(1), *x.add(2), *x.add(3)]) as i32,
    ))
}

// ---------------------------------------------------------------------------------------------
// Q5_K: d, dmin (f16) at 0, 12 packed scale/min bytes at 4 (Q4_K's), qh [u8; 32] at 16, qs
// [u8; 128] at 48. Element 64c + l (l < 32) is the low nibble of qs[32c + l] plus 16 x bit 2c
// of qh[l]; element 64c + 32 + l the high nibble plus 16 x bit 2c + 1. Sub-block s (32
// elements) has scale s and min s.
// ---------------------------------------------------------------------------------------------

/// The 256 quants (0..31) of the Q5_K block at `x` in element order: sub-block s in `q[s]`.
#[inline(always)]
unsafe fn q5_k_quants(x: *const u8) -> [__m256i; 8] {
    let low4 = _mm256_set1_epi8(0x0F);
    let bit4 = _mm256_set1_epi8(0x10);
    let mut qh = load256(x.add(Q5_K_QH));
    let mut q = [_mm256_setzero_si256(); 8];
    for c in 0..4 {
        let bytes = load256(x.add(Q5_K_QS + 32 * c));
        // qh has been shifted right by 2c (16-bit shifts: bits 0 and 1 of each byte are still
        // its own bits 2c and 2c + 1, since 2c + 1 <= 7); moving bit 0 (bit 1) to bit 4 by a
        // 16-bit left shift of 4 (3) keeps it inside its byte, and the mask keeps only it.
        let h_lo = _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4);
        let h_hi = _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4);
        q[2 * c] = _mm256_or_si256(_mm256_and_si256(bytes, low4), h_lo);
        q[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4), h_hi);
        qh = _mm256_srli_epi16(qh, 2);
    }
    q
}

struct Q5K;

impl Format for Q5K {
    const BYTES: usize = Q5_K_BYTES;
    const MINS: bool = true;

    /// The sums of the 32-element sub-blocks, meeting mins 2p and 2p + 1.
    #[inline(always)]
    unsafe fn pack_bsums(b: [__m256i; 8]) -> [__m256i; 8] {
        bsum_pairs_of_32(b)
    }

    #[inline(always)]
    unsafe fn row_block<const G: usize>(
        x: *const u8,
        p: &Packed,
        i: usize,
        acc: &mut [__m256; MAX_VECS],
        accm: &mut [__m256; MAX_VECS],
    ) {
        // The quants on the stack, broadcast a dword (4 elements) at a time.
        let quants = q5_k_quants(x);
        let qp = quants.as_ptr() as *const u8;
        let mut scmn = [0u8; 16];
        _mm_storeu_si128(
            scmn.as_mut_ptr() as *mut __m128i,
            q4_k_scales_mins(x.add(4)),
        );
        let mut sumi = [_mm256_setzero_si256(); G];
        for (s, &scale) in scmn[..8].iter().enumerate() {
            // Sub-block s: dwords 8s .. 8s + 7, summed in i16 four at a time (at most 31744).
            let sc = _mm256_set1_epi16(scale as i16);
            for half in 0..2 {
                let mut s16 = [_mm256_setzero_si256(); G];
                for k in 8 * s + 4 * half..8 * s + 4 * half + 4 {
                    let w =
                        _mm256_set1_epi32(core::ptr::read_unaligned(qp.add(4 * k) as *const i32));
                    for (g, s) in s16.iter_mut().enumerate() {
                        *s = _mm256_add_epi16(*s, _mm256_maddubs_epi16(w, p.q[i][k][g]));
                    }
                }
                for g in 0..G {
                    sumi[g] = _mm256_add_epi32(sumi[g], _mm256_madd_epi16(s16[g], sc));
                }
            }
        }
        let mut mins = [_mm256_setzero_si256(); G];
        for q in 0..4 {
            let mn = _mm256_set1_epi32(scmn[8 + 2 * q] as i32 | (scmn[9 + 2 * q] as i32) << 16);
            for (g, m) in mins.iter_mut().enumerate() {
                *m = _mm256_add_epi32(*m, _mm256_madd_epi16(p.pairs[i][q][g], mn));
            }
        }
        let d_dmin = d_dmin_at(x);
        let d = _mm256_broadcastss_ps(d_dmin);
        let dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(d_dmin));
        for g in 0..G {
            let dy = p.d[i][g];
            acc[g] = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(sumi[g]), acc[g]);
            accm[g] = _mm256_fmadd_ps(
                _mm256_mul_ps(dmin, dy),
                _mm256_cvtepi32_ps(mins[g]),
                accm[g],
            );
        }
    }

    #[inline(always)]
    unsafe fn dot(nb: usize, xr: *const u8, yr: *const u8) -> f32 {
        let (mut acc, mut accm) = (0f32, 0f32);
        for i in 0..nb {
            let x = xr.add(i * Q5_K_BYTES);
            let y = yr.add(i * Q8_K_BYTES);
            let q = q5_k_quants(x);
            let scmn = q4_k_scales_mins(x.add(4));
            // Scales as i16 in both halves (pshufb spreads one over a vector); mins as i16
            // pairs (m0, m0, m1, m1, ...): min s meets bsums 2s and 2s + 1.
            let sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scmn));
            let mins16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(
                scmn,
                _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15),
            ));
            // One vector's pmaddubsw lanes are at most 7936 in magnitude: no saturation.
            // A loop, not `array::from_fn`: a closure does not inherit this function's target
            // features, so LLVM may leave its intrinsics as calls (tools/check-intrinsics-inlined.sh).
            let mut p = [_mm256_setzero_si256(); 8];
            for (s, p) in p.iter_mut().enumerate() {
                let yq = load256(y.add(Q8_K_QS + 32 * s));
                let sc = _mm256_shuffle_epi8(sc16, spread_i16(s as i32, s as i32));
                *p = _mm256_madd_epi16(_mm256_maddubs_epi16(q[s], yq), sc);
            }
            let s = hsum_epi32(add8(p));
            let m = hsum_epi32(_mm256_madd_epi16(load256(y.add(Q8_K_BSUMS)), mins16));
            let dy = f32_at(y);
            let d_dmin = d_dmin_at(x);
            let d = _mm_cvtss_f32(d_dmin);
            let dmin = _mm_cvtss_f32(_mm_movehdup_ps(d_dmin));
            acc = fma1(d * dy, s as f32, acc);
            accm = fma1(dmin * dy, m as f32, accm);
        }
        acc - accm
    }
}

// ---------------------------------------------------------------------------------------------
// Q3_K: hmask [u8; 32] at 0, qs [u8; 64] at 32, 12 packed 6-bit scales (stored + 32) at 96,
// f16 d at 108. Element 128h + 32s + l has its low two bits at bits 2s of qs[32h + l] and its
// third bit (set: not lowered by 4) at bit 4h + s of hmask[l]: q = low - 4 (1 - bit), so
// q + 4 = low + 4 bit. Sub-block b is elements 16b .. 16b + 15.
// ---------------------------------------------------------------------------------------------

/// The 256 quants plus 4 (0..7) of the Q3_K block at `x` in element order: elements 32r ..
/// 32r + 31 in `q[r]`.
#[inline(always)]
unsafe fn q3_k_quants(x: *const u8) -> [__m256i; 8] {
    let three = _mm256_set1_epi8(3);
    let four = _mm256_set1_epi8(4);
    let hm = load256(x);
    // Bit r = 4h + s of each hmask byte moved to bit 2 (a shift by r - 2, left for r < 2):
    // bit 2 of a byte then holds that byte's own bit r (0 <= r <= 7; 16-bit shifts move bits
    // across bytes only elsewhere), and the mask keeps only bit 2.
    let bits = [
        _mm256_slli_epi16(hm, 2),
        _mm256_slli_epi16(hm, 1),
        hm,
        _mm256_srli_epi16(hm, 1),
        _mm256_srli_epi16(hm, 2),
        _mm256_srli_epi16(hm, 3),
        _mm256_srli_epi16(hm, 4),
        _mm256_srli_epi16(hm, 5),
    ];
    let mut q = [_mm256_setzero_si256(); 8];
    for h in 0..2 {
        let qs = load256(x.add(Q3_K_QS + 32 * h));
        // Bits 2s, 2s + 1 to bits 0, 1; the mask drops what crossed from the next byte.
        let low = [
            qs,
            _mm256_srli_epi16(qs, 2),
            _mm256_srli_epi16(qs, 4),
            _mm256_srli_epi16(qs, 6),
        ];
        for s in 0..4 {
            q[4 * h + s] = _mm256_or_si256(
                _mm256_and_si256(low[s], three),
                _mm256_and_si256(bits[4 * h + s], four),
            );
        }
    }
    q
}

/// The 16 sub-block scales (-32..31) from the 12 packed bytes at `p`: scale 4g + j has its low
/// nibble in byte j + 4 (g & 1) (low nibble for g < 2, high for g >= 2) and its top two bits
/// at bits 2g of byte 8 + j; done four at a time in u32 words.
#[inline(always)]
unsafe fn q3_k_scales(p: *const u8) -> [i8; 16] {
    let w = |i: usize| u32::from_le_bytes([*p.add(i), *p.add(i + 1), *p.add(i + 2), *p.add(i + 3)]);
    let (a0, a1, a2) = (w(0), w(4), w(8));
    let (nib, top) = (0x0f0f_0f0fu32, 0x0303_0303u32);
    let words = [
        (a0 & nib) | (a2 & top) << 4,
        (a1 & nib) | ((a2 >> 2) & top) << 4,
        ((a0 >> 4) & nib) | ((a2 >> 4) & top) << 4,
        ((a1 >> 4) & nib) | ((a2 >> 6) & top) << 4,
    ];
    let mut sc = [0i8; 16];
    for (k, word) in words.iter().enumerate() {
        for (j, b) in word.to_le_bytes().into_iter().enumerate() {
            // b <= 63.
            sc[4 * k + j] = b as i8 - 32;
        }
    }
    sc
}

struct Q3K;

impl Format for Q3K {
    const BYTES: usize = Q3_K_BYTES;
    const MINS: bool = false;

    /// Pair p: (b2p, b2p+1), the bsums of sub-blocks 2p and 2p + 1 (16 quants each).
    #[inline(always)]
    unsafe fn pack_bsums(b: [__m256i; 8]) -> [__m256i; 8] {
        transpose8(b)
    }

    #[inline(always)]
    unsafe fn row_block<const G: usize>(
        x: *const u8,
        p: &Packed,
        i: usize,
        acc: &mut [__m256; MAX_VECS],
        _accm: &mut [__m256; MAX_VECS],
    ) {
        // The quants plus 4 on the stack, broadcast a dword (4 elements) at a time.
        let quants = q3_k_quants(x);
        let qp = quants.as_ptr() as *const u8;
        let scales = q3_k_scales(x.add(Q3_K_SCALES));
        let mut sumi = [_mm256_setzero_si256(); G];
        for (b, &scale) in scales.iter().enumerate() {
            // Sub-block b: dwords 4b .. 4b + 3, summed in i16 (at most 4 x 1792 = 7168).
            let sc = _mm256_set1_epi16(scale as i16);
            let mut s16 = [_mm256_setzero_si256(); G];
            for k in 4 * b..4 * b + 4 {
                let w = _mm256_set1_epi32(core::ptr::read_unaligned(qp.add(4 * k) as *const i32));
                for (g, s) in s16.iter_mut().enumerate() {
                    *s = _mm256_add_epi16(*s, _mm256_maddubs_epi16(w, p.q[i][k][g]));
                }
            }
            for g in 0..G {
                sumi[g] = _mm256_add_epi32(sumi[g], _mm256_madd_epi16(s16[g], sc));
            }
        }
        // sum q y = sum (q + 4) y - 4 sum_b scale_b bsum_b.
        let mut offset = [_mm256_setzero_si256(); G];
        for q in 0..8 {
            let pair = (scales[2 * q] as i16 as u16 as i32) | (scales[2 * q + 1] as i32) << 16;
            let sc = _mm256_set1_epi32(pair);
            for (g, o) in offset.iter_mut().enumerate() {
                *o = _mm256_add_epi32(*o, _mm256_madd_epi16(p.pairs[i][q][g], sc));
            }
        }
        let d = _mm256_set1_ps(f16_at(x.add(Q3_K_D)));
        for g in 0..G {
            let s = _mm256_sub_epi32(sumi[g], _mm256_slli_epi32(offset[g], 2));
            acc[g] = _mm256_fmadd_ps(_mm256_mul_ps(d, p.d[i][g]), _mm256_cvtepi32_ps(s), acc[g]);
        }
    }

    #[inline(always)]
    unsafe fn dot(nb: usize, xr: *const u8, yr: *const u8) -> f32 {
        let mut acc = 0f32;
        for i in 0..nb {
            let x = xr.add(i * Q3_K_BYTES);
            let y = yr.add(i * Q8_K_BYTES);
            let q = q3_k_quants(x);
            let scales = q3_k_scales(x.add(Q3_K_SCALES));
            let sc8 = _mm_loadu_si128(scales.as_ptr() as *const __m128i);
            let scales16 = _mm256_cvtepi8_epi16(sc8);
            // Scales 8h .. 8h + 7 as i16 in both halves; run r = 4h + k meets scales 2r (its
            // low 16 bytes) and 2r + 1 (high).
            let sc_h = [
                _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8)),
                _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8))),
            ];
            // One vector's pmaddubsw lanes are at most 1792 in magnitude: no saturation.
            // A loop, not `array::from_fn` (see Q5_K's dot).
            let mut p = [_mm256_setzero_si256(); 8];
            for (r, p) in p.iter_mut().enumerate() {
                let yq = load256(y.add(Q8_K_QS + 32 * r));
                let k = 2 * (r % 4) as i32;
                let sc = _mm256_shuffle_epi8(sc_h[r / 4], spread_i16(k, k + 1));
                *p = _mm256_madd_epi16(_mm256_maddubs_epi16(q[r], yq), sc);
            }
            let offset = hsum_epi32(_mm256_madd_epi16(load256(y.add(Q8_K_BSUMS)), scales16));
            let s = hsum_epi32(add8(p)) - 4 * offset;
            acc = fma1(f16_at(x.add(Q3_K_D)) * f32_at(y), s as f32, acc);
        }
        acc
    }
}

/// Q3_K weights . Q8_K activations (one row), with the bits of [`matmul_q3_k_q8_k`].
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q3_k_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / Q3_K_BYTES)
        .min(act.len() / Q8_K_BYTES);
    Q3K::dot(nb, w.as_ptr(), act.as_ptr())
}

/// Q5_K weights . Q8_K activations (one row), with the bits of [`matmul_q5_k_q8_k`].
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q5_k_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / Q5_K_BYTES)
        .min(act.len() / Q8_K_BYTES);
    Q5K::dot(nb, w.as_ptr(), act.as_ptr())
}

/// Q3_K weights x Q8_K activation rows, tokens in the lanes; every output bit for bit
/// [`vec_dot_q3_k_q8_k`] (this module's, not `avx2_3bit`'s).
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q3_k_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Q3K>(n, w, acts, n_acts, out)
}

/// Q5_K weights x Q8_K activation rows, tokens in the lanes; every output bit for bit
/// [`vec_dot_q5_k_q8_k`] (this module's, not `avx2`'s).
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q5_k_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Q5K>(n, w, acts, n_acts, out)
}
