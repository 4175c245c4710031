//! AVX2 faces of the grid i-quants against Q8_K (#33): IQ2_XXS, IQ3_XXS, IQ2_XS, IQ2_S and
//! IQ3_S, IQ1_S and IQ1_M, each a one-row dot with the signature of `smolrun_core::quant::VecDotFn` and a
//! small-batch matmul (prompts) with that of `smolrun_core::kernels::ColsFn`.
//!
//! Per sub-block of 32 (4 groups of 8): the grid entries (4 of 8 magnitudes for IQ2_XXS,
//! IQ2_XS, IQ2_S; 8 of 4 for IQ3_XXS, IQ3_S; each index a masked field of exactly its table's
//! width: in bounds by construction) are gathered into one register of 32 unsigned magnitudes,
//! and the signs into one register of 32 byte masks (0xFF = negative): from the 7-bit fields
//! through the 128-entry [`KSIGNS64`] (IQ2_XXS, IQ3_XXS, IQ2_XS), or spread from 4 whole sign
//! bytes by a shuffle and a compare (IQ2_S, IQ3_S). The signed dot is then
//! `maddubs(|g| on positive lanes, q8) - maddubs(|g| on negative lanes, q8)`: each i16 lane
//! is at most 2 * 62 * 128 in magnitude, so neither the saturating `maddubs` nor the
//! difference can overflow, for every activation byte (-128 included: negating the
//! activations with `sign_epi8`, as a shorter kernel would, turns -128 into -128).
//! `madd` by the odd scale 2s + 1 (one per sub-block, or one per 16 weights for IQ2_XS and
//! IQ2_S: a 128-bit half each) widens to i32 lanes, whose sum over the super-block is the
//! scalar twin's exact integer; the float steps are then the twin's own (`sumf += (f16(d) *
//! dy) * bsum` in block order, then `0.125 * sumf` for the 2-bit ones, `0.25 * sumf` for
//! IQ3_XXS, `sumf` for IQ3_S), so every face gives the scalar result bit for bit
//! (`smolrun_core::quant::{iq2_xxs, iq3_xxs, iq2_xs, iq2_s, iq3_s}::vec_dot`).
//!
//! `matmul` unpacks each weight sub-block once for up to [`GROUP`] activation rows and gives
//! each (row, activation) pair exactly `vec_dot`'s operations, so a prompt gives decode's bits.
//! IQ2_XXS and IQ3_XXS prompts of 4 tokens or more take `lanes` instead: tokens in the
//! lanes, the same integers and float steps, so the same bits.
//!
//! Every function reads only whole blocks inside the slices.
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use super::avx2::*;
use crate::iq_grids::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS64,
};
use core::arch::x86_64::*;

/// Bytes of an IQ2_XXS super-block: d: f16, then 8 sub-blocks of 4 index bytes and a u32 of
/// signs and scale.
pub const IQ2_XXS_BYTES: usize = 66;

/// Bytes of an IQ3_XXS super-block: d: f16, 64 index bytes (8 per sub-block), then 8 u32 of
/// signs and scale.
pub const IQ3_XXS_BYTES: usize = 98;

/// Bytes of an IQ2_XS super-block: d: f16, 32 u16 of 9-bit index and 7-bit signs, then 8
/// scale bytes (a nibble per 16 weights).
pub const IQ2_XS_BYTES: usize = 74;

/// Bytes of an IQ2_S super-block: d: f16, 32 low index bytes, 32 sign bytes, 8 bytes of high
/// index bits, 8 scale bytes (a nibble per 16 weights).
pub const IQ2_S_BYTES: usize = 82;

/// Bytes of an IQ3_S super-block: d: f16, 64 low index bytes, 8 bytes of 9th index bits, 32
/// sign bytes, 4 scale bytes (a nibble per sub-block).
pub const IQ3_S_BYTES: usize = 110;

/// Bytes of an IQ1_S super-block: d: f16, 32 low index bytes, 8 u16 of 3-bit index tops,
/// 3-bit scale and shift sign.
pub const IQ1_S_BYTES: usize = 50;

/// Bytes of an IQ1_M super-block: 32 low index bytes, 16 bytes of index tops and shift signs,
/// 4 scale words (whose top nibbles make d).
pub const IQ1_M_BYTES: usize = 56;

/// Activation rows dotted with one unpacked weight sub-block in the matmul.
pub const GROUP: usize = 4;

/// Weight rows dotted with every activation group before moving on (the tile stays in L1).
const ROW_TILE: usize = 16;

/// One unpacked sub-block: the magnitudes on positive lanes, those on negative lanes, and the
/// scale 2s + 1 in every i16 lane.
#[derive(Clone, Copy)]
struct Sub {
    pos: __m256i,
    neg: __m256i,
    scale: __m256i,
}

#[inline(always)]
fn u32_at(p: *const u8) -> u32 {
    // SAFETY: callers pass pointers to 4 readable bytes inside a block.
    unsafe { (p as *const u32).read_unaligned() }
}

/// The sign masks of 4 groups from their 7-bit fields at bits 0, 7, 14, 21 of `aux`.
#[inline(always)]
unsafe fn sign_masks(aux: u32) -> __m256i {
    let s = |l: u32| KSIGNS64[((aux >> (7 * l)) & 127) as usize] as i64;
    _mm256_set_epi64x(s(3), s(2), s(1), s(0))
}

/// The magnitudes `grid` with the signs and scale of the word `aux`.
#[inline(always)]
unsafe fn signed_sub(grid: __m256i, aux: u32) -> Sub {
    split(
        grid,
        sign_masks(aux),
        _mm256_set1_epi16((2 * (aux >> 28) + 1) as i16),
    )
}

/// The magnitudes `grid` on positive and on negative lanes by the byte masks `signs`.
#[inline(always)]
unsafe fn split(grid: __m256i, signs: __m256i, scale: __m256i) -> Sub {
    Sub {
        pos: _mm256_andnot_si256(signs, grid),
        neg: _mm256_and_si256(signs, grid),
        scale,
    }
}

/// The byte masks (0xFF = negative) of 4 whole sign bytes, group l's in byte l of `bits`
/// (bit j = element j): IQ2_S and IQ3_S store them without a parity rule.
#[inline(always)]
unsafe fn byte_sign_masks(bits: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits as i32),
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit)
}

/// Scale 2s1 + 1 on the i16 lanes of the first 16 weights, 2s2 + 1 on the last 16.
#[inline(always)]
unsafe fn half_scales(s1: u32, s2: u32) -> __m256i {
    _mm256_set_m128i(
        _mm_set1_epi16((2 * s2 + 1) as i16),
        _mm_set1_epi16((2 * s1 + 1) as i16),
    )
}

/// A grid format: its super-block size, how a sub-block unpacks, and the constant the twin
/// multiplies its sum by at the end.
trait Grid {
    const BYTES: usize;
    const FINAL: f32;
    unsafe fn sub(x: *const u8, ib: usize) -> Sub;
    /// The super-block's d (an f16 at its byte 0, but for IQ1_M).
    #[inline(always)]
    unsafe fn d(x: *const u8) -> f32 {
        f16_at(x)
    }
    /// What the twin adds to its sum for super-block `x` (f16 d `dx`) against the Q8_K block
    /// `y`, whose block integer is `isum`: (dx * dy) * isum.
    #[inline(always)]
    unsafe fn block_value(_x: *const u8, y: *const u8, dx: f32, isum: i32) -> f32 {
        dx * f32_at(y) * isum as f32
    }
}

struct Iq2Xxs;
impl Grid for Iq2Xxs {
    const BYTES: usize = IQ2_XXS_BYTES;
    const FINAL: f32 = 0.125;
    #[inline(always)]
    unsafe fn sub(x: *const u8, ib: usize) -> Sub {
        let q = x.add(2 + 8 * ib);
        let g = |l: usize| IQ2XXS_GRID[*q.add(l) as usize] as i64;
        signed_sub(_mm256_set_epi64x(g(3), g(2), g(1), g(0)), u32_at(q.add(4)))
    }
}

struct Iq3Xxs;
impl Grid for Iq3Xxs {
    const BYTES: usize = IQ3_XXS_BYTES;
    const FINAL: f32 = 0.25;
    #[inline(always)]
    unsafe fn sub(x: *const u8, ib: usize) -> Sub {
        let q = x.add(2 + 8 * ib);
        let g = |l: usize| IQ3XXS_GRID[*q.add(l) as usize] as i32;
        let grid = _mm256_set_epi32(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0));
        signed_sub(grid, u32_at(x.add(66 + 4 * ib)))
    }
}

struct Iq2Xs;
impl Grid for Iq2Xs {
    const BYTES: usize = IQ2_XS_BYTES;
    const FINAL: f32 = 0.125;
    #[inline(always)]
    unsafe fn sub(x: *const u8, ib: usize) -> Sub {
        let q = x.add(2 + 8 * ib) as *const u16;
        let w = |l: usize| q.add(l).read_unaligned() as usize;
        let g = |l: usize| IQ2XS_GRID[w(l) & 511] as i64;
        let m = |l: usize| KSIGNS64[(w(l) >> 9) & 127] as i64;
        let sc = *x.add(66 + ib) as u32;
        split(
            _mm256_set_epi64x(g(3), g(2), g(1), g(0)),
            _mm256_set_epi64x(m(3), m(2), m(1), m(0)),
            half_scales(sc & 15, sc >> 4),
        )
    }
}

struct Iq2S;
impl Grid for Iq2S {
    const BYTES: usize = IQ2_S_BYTES;
    const FINAL: f32 = 0.125;
    #[inline(always)]
    unsafe fn sub(x: *const u8, ib: usize) -> Sub {
        let qs = x.add(2 + 4 * ib);
        let qh = *x.add(66 + ib) as usize;
        let g =
            |l: usize| IQ2S_GRID[(*qs.add(l) as usize | ((qh >> (2 * l)) & 3) << 8) & 1023] as i64;
        let sc = *x.add(74 + ib) as u32;
        split(
            _mm256_set_epi64x(g(3), g(2), g(1), g(0)),
            byte_sign_masks(u32_at(x.add(34 + 4 * ib))),
            half_scales(sc & 15, sc >> 4),
        )
    }
}

struct Iq3S;
impl Grid for Iq3S {
    const BYTES: usize = IQ3_S_BYTES;
    const FINAL: f32 = 1.0;
    #[inline(always)]
    unsafe fn sub(x: *const u8, ib: usize) -> Sub {
        let qs = x.add(2 + 8 * ib);
        let qh = *x.add(66 + ib) as usize;
        let g = |k: usize| IQ3S_GRID[(*qs.add(k) as usize | ((qh >> k) & 1) << 8) & 511] as i32;
        let grid = _mm256_set_epi32(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0));
        let s = (*x.add(106 + ib / 2) >> (4 * (ib & 1))) & 15;
        split(
            grid,
            byte_sign_masks(u32_at(x.add(74 + 4 * ib))),
            _mm256_set1_epi16((2 * s + 1) as i16),
        )
    }
}

/// IQ1_S: the grid's signed values -1, 0, 1 taken as g + 1 (0, 1, 2) on the "positive" side
/// and 1 on the "negative" one, so the difference of the two `maddubs` is sum(g * q8); the
/// shift of +-1/8 is the twin's second integer, from the Q8_K block sums, in `block_value`.
struct Iq1S;
impl Grid for Iq1S {
    const BYTES: usize = IQ1_S_BYTES;
    const FINAL: f32 = 1.0;
    #[inline(always)]
    unsafe fn sub(x: *const u8, ib: usize) -> Sub {
        let qs = x.add(2 + 4 * ib);
        let h = (x.add(34 + 2 * ib) as *const u16).read_unaligned() as usize;
        let g =
            |l: usize| IQ1S_GRID[(*qs.add(l) as usize | ((h >> (3 * l)) & 7) << 8) & 2047] as i64;
        let one = _mm256_set1_epi8(1);
        Sub {
            pos: _mm256_add_epi8(_mm256_set_epi64x(g(3), g(2), g(1), g(0)), one),
            neg: one,
            scale: _mm256_set1_epi16((2 * ((h >> 12) & 7) + 1) as i16),
        }
    }
    #[inline(always)]
    unsafe fn block_value(x: *const u8, y: *const u8, dx: f32, isum: i32) -> f32 {
        let mut sumi1 = 0i32;
        for ib in 0..8 {
            let h = (x.add(34 + 2 * ib) as *const u16).read_unaligned() as i32;
            let ls = 2 * ((h >> 12) & 7) + 1;
            let bs = y.add(Q8_K_QS + 256 + 4 * ib) as *const i16;
            let sum = bs.read_unaligned() as i32 + bs.add(1).read_unaligned() as i32;
            sumi1 += if h & 0x8000 != 0 { -ls * sum } else { ls * sum };
        }
        dx * f32_at(y) * (isum as f32 + 0.125 * sumi1 as f32)
    }
}

/// IQ1_M: each group's values g (-1, 0, 1) and its shift sign e (+-1) become one weight
/// 8g + e (-9..9), taken as 8g + e + 9 (0..18) against the activations minus 9 against them
/// (maddubs pairs at most 2 * 18 * 128), madd by the half sub-blocks' 2s + 1: the block's
/// S = 8 * sumi1 + sumi2 of the twin's two integers, exactly. The twin's float step takes
/// f32(sumi1) + 0.125 * f32(sumi2), both terms exact (|sumi1| < 2^19), so one rounding of
/// sumi1 + sumi2 / 8; f32(S) * 0.125 is one rounding of the same value scaled by 8 (a power of
/// two, far from f32's range limits): the same bits.
struct Iq1M;
impl Grid for Iq1M {
    const BYTES: usize = IQ1_M_BYTES;
    const FINAL: f32 = 1.0;
    #[inline(always)]
    unsafe fn sub(x: *const u8, ib: usize) -> Sub {
        let qs = x.add(4 * ib);
        let qh = [*x.add(32 + 2 * ib) as usize, *x.add(33 + 2 * ib) as usize];
        let h = |l: usize| qh[l / 2] >> (4 * (l % 2));
        let g = |l: usize| IQ1S_GRID[(*qs.add(l) as usize | (h(l) & 7) << 8) & 2047] as i64;
        // 9 + e in every byte of group l: 8 for a negative shift, 10 for a positive one
        let e = |l: usize| {
            if h(l) & 8 != 0 {
                0x0808_0808_0808_0808u64 as i64
            } else {
                0x0a0a_0a0a_0a0a_0a0au64 as i64
            }
        };
        let g1 = _mm256_set_epi64x(g(3), g(2), g(1), g(0));
        let g2 = _mm256_add_epi8(g1, g1);
        let g4 = _mm256_add_epi8(g2, g2);
        let g8 = _mm256_add_epi8(g4, g4);
        let w =
            ((x.add(48 + 2 * (ib / 2)) as *const u16).read_unaligned() >> (6 * (ib % 2))) as u32;
        Sub {
            pos: _mm256_add_epi8(g8, _mm256_set_epi64x(e(3), e(2), e(1), e(0))),
            neg: _mm256_set1_epi8(9),
            scale: half_scales(w & 7, (w >> 3) & 7),
        }
    }
    #[inline(always)]
    unsafe fn d(x: *const u8) -> f32 {
        let sc = |k: usize| (x.add(48 + 2 * k) as *const u16).read_unaligned();
        let bits =
            (sc(0) >> 12) | ((sc(1) >> 8) & 0x00f0) | ((sc(2) >> 4) & 0x0f00) | (sc(3) & 0xf000);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }
    #[inline(always)]
    unsafe fn block_value(_x: *const u8, y: *const u8, dx: f32, isum: i32) -> f32 {
        dx * f32_at(y) * (isum as f32 * 0.125)
    }
}

/// The 32 activations at `y` against an unpacked sub-block, times its scale, in 8 i32 lanes.
#[inline(always)]
unsafe fn dot_sub(w: Sub, y: *const u8) -> __m256i {
    let q8 = load256(y);
    let d = _mm256_sub_epi16(
        _mm256_maddubs_epi16(w.pos, q8),
        _mm256_maddubs_epi16(w.neg, q8),
    );
    _mm256_madd_epi16(d, w.scale)
}

/// Sum of 8 i32 lanes (exact: the caller's sums fit in i32).
#[inline(always)]
unsafe fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01));
    _mm_cvtsi128_si32(s)
}

/// `nb` super-blocks of the weight row at `xr` against N activation rows.
#[inline(always)]
unsafe fn cols_dot<G: Grid, const N: usize>(
    nb: usize,
    xr: *const u8,
    ys: [*const u8; N],
) -> [f32; N] {
    let mut sumf = [0f32; N];
    for i in 0..nb {
        let x = xr.add(i * G::BYTES);
        let mut acc = [_mm256_setzero_si256(); N];
        for ib in 0..8 {
            let w = G::sub(x, ib);
            for j in 0..N {
                let y = ys[j].add(i * Q8_K_BYTES + Q8_K_QS + 32 * ib);
                acc[j] = _mm256_add_epi32(acc[j], dot_sub(w, y));
            }
        }
        let dx = G::d(x);
        for j in 0..N {
            let y = ys[j].add(i * Q8_K_BYTES);
            sumf[j] += G::block_value(x, y, dx, hsum_epi32(acc[j]));
        }
    }
    let mut out = [0f32; N];
    for j in 0..N {
        out[j] = G::FINAL * sumf[j];
    }
    out
}

/// `G` . Q8_K, one row.
#[inline(always)]
unsafe fn vec_dot<G: Grid>(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / G::BYTES)
        .min(act.len() / Q8_K_BYTES);
    cols_dot::<G, 1>(nb, w.as_ptr(), [act.as_ptr()])[0]
}

/// `W` . Q8_K, one row, by [`whole::dot`].
#[inline(always)]
unsafe fn whole_dot<W: whole::Words>(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / W::BYTES)
        .min(act.len() / Q8_K_BYTES);
    whole::dot::<W, 1>(nb, [w.as_ptr()], act.as_ptr())[0]
}

/// `W` weight rows . one Q8_K row: `out[r]`, two rows at a time, each value `whole_dot`'s bits.
#[inline(always)]
unsafe fn whole_matvec<W: whole::Words>(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
    let nb = n / QK_K;
    let w_row = nb * W::BYTES;
    if w.len() < out.len() * w_row || act.len() < nb * Q8_K_BYTES {
        // The caller (WeightKernel::matvec) checked the shapes; never read past the slices.
        return;
    }
    let x = |r: usize| w.as_ptr().add(r * w_row);
    let even = out.len() & !1;
    for (k, o) in out[..even].chunks_exact_mut(2).enumerate() {
        o.copy_from_slice(&whole::dot::<W, 2>(
            nb,
            [x(2 * k), x(2 * k + 1)],
            act.as_ptr(),
        ));
    }
    if even < out.len() {
        out[even] = whole::dot::<W, 1>(nb, [x(even)], act.as_ptr())[0];
    }
}

/// `G` weight rows x Q8_K activation rows: `out[t * n_rows + r]`, each value `vec_dot`'s bits.
#[inline(always)]
unsafe fn matmul<G: Grid>(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    if n_acts == 0 {
        return;
    }
    let n_rows = out.len() / n_acts;
    let nb = n / QK_K;
    let (w_row, a_row) = (nb * G::BYTES, nb * Q8_K_BYTES);
    if w.len() < n_rows * w_row || acts.len() < n_acts * a_row {
        // The caller (WeightKernel::matmul) checked the shapes; never read past the slices.
        return;
    }
    let y = |t: usize| acts.as_ptr().add(t * a_row);
    let x = |r: usize| w.as_ptr().add(r * w_row);
    for r0 in (0..n_rows).step_by(ROW_TILE) {
        let mut t = 0;
        while t < n_acts {
            let g = (n_acts - t).min(GROUP);
            for r in r0..(r0 + ROW_TILE).min(n_rows) {
                let mut put = |v: &[f32]| {
                    for (j, &v) in v.iter().enumerate() {
                        out[(t + j) * n_rows + r] = v;
                    }
                };
                match g {
                    4 => put(&cols_dot::<G, 4>(
                        nb,
                        x(r),
                        [y(t), y(t + 1), y(t + 2), y(t + 3)],
                    )),
                    3 => put(&cols_dot::<G, 3>(nb, x(r), [y(t), y(t + 1), y(t + 2)])),
                    2 => put(&cols_dot::<G, 2>(nb, x(r), [y(t), y(t + 1)])),
                    _ => put(&cols_dot::<G, 1>(nb, x(r), [y(t)])),
                }
            }
            t += g;
        }
    }
}

/// IQ2_XXS and IQ3_XXS one-row dots with the sign and scale fields of a whole super-block
/// decoded at once.
///
/// Why: `cols_dot` spends most of a sub-block's ~50 instructions on the four 7-bit sign
/// fields (a shift, a mask and a [`KSIGNS64`] load each, then three inserts) and on its scale
/// (shift, or, move, broadcast); decoding is bound by that instruction count. Here the 8
/// signs-and-scale words of a super-block sit in one vector, and a few shifts give, for all
/// 32 groups at once, the whole sign byte: the 7 stored bits and the eighth, their parity
/// (the rule that makes the count of negatives even; xor-folding the byte by 4, 2, 1 leaves
/// it in bit 7). A sub-block then broadcasts its 4 sign bytes and scale from the stack and
/// spreads the signs to byte masks with a shuffle and a compare, as IQ2_S does. The integers
/// and the float steps are `cols_dot`'s (the scalar twin's): the same bits.
mod whole {
    use super::*;

    /// A format whose super-block keeps one signs-and-scale word per sub-block (7-bit sign
    /// fields at bits 0, 7, 14, 21, the scale at 28..32).
    pub(super) trait Words: Grid {
        /// The 8 words of the super-block `x`, sub-block ib's in dword ib.
        unsafe fn words(x: *const u8) -> __m256i;
        /// The 32 magnitudes of sub-block `ib`.
        unsafe fn grid(x: *const u8, ib: usize) -> __m256i;
    }

    impl Words for Iq2Xxs {
        #[inline(always)]
        unsafe fn words(x: *const u8) -> __m256i {
            // Sub-block ib's 8 bytes at 2 + 8 ib: 4 indices, then its word (odd dwords).
            let v0 = _mm256_castsi256_ps(load256(x.add(2)));
            let v1 = _mm256_castsi256_ps(load256(x.add(34)));
            // Per 128-bit half: words of sub-blocks (0, 1, 4, 5) and (2, 3, 6, 7) ...
            let w = _mm256_castps_si256(_mm256_shuffle_ps(v0, v1, 0b11_01_11_01));
            // ... put in order by their qword pairs.
            _mm256_permute4x64_epi64(w, 0b11_01_10_00)
        }
        #[inline(always)]
        unsafe fn grid(x: *const u8, ib: usize) -> __m256i {
            let q = x.add(2 + 8 * ib);
            // u8 indices into 256 entries: in bounds for every byte.
            let g = |l: usize| IQ2XXS_GRID[*q.add(l) as usize] as i64;
            _mm256_set_epi64x(g(3), g(2), g(1), g(0))
        }
    }

    impl Words for Iq3Xxs {
        #[inline(always)]
        unsafe fn words(x: *const u8) -> __m256i {
            load256(x.add(66))
        }
        #[inline(always)]
        unsafe fn grid(x: *const u8, ib: usize) -> __m256i {
            let q = x.add(2 + 8 * ib);
            let g = |l: usize| IQ3XXS_GRID[*q.add(l) as usize] as i32;
            _mm256_set_epi32(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0))
        }
    }

    /// From the 8 words: per dword, the 4 groups' whole sign bytes (group l in byte l, bit j
    /// = element j negative), and the scale 2s + 1 in both i16 halves.
    #[inline(always)]
    unsafe fn signs_scales(w: __m256i) -> (__m256i, __m256i) {
        let f = |mask: i32, field: __m256i| _mm256_and_si256(field, _mm256_set1_epi32(mask));
        // Field l (bits 7l..7l+7) moved to bits 8l..8l+7 by a left shift of l.
        let b = _mm256_or_si256(
            _mm256_or_si256(f(0x7F, w), f(0x7F00, _mm256_slli_epi32(w, 1))),
            _mm256_or_si256(
                f(0x7F_0000, _mm256_slli_epi32(w, 2)),
                f(0x7F00_0000, _mm256_slli_epi32(w, 3)),
            ),
        );
        // Bit 7 of each byte after p ^= p << 4, << 2, << 1: the xor of the byte's bits 0..7
        // (bit 7 is 0 here); the lower bits, which the shifts fill from the byte below, are
        // not used.
        let mut p = _mm256_xor_si256(b, _mm256_slli_epi32(b, 4));
        p = _mm256_xor_si256(p, _mm256_slli_epi32(p, 2));
        p = _mm256_xor_si256(p, _mm256_slli_epi32(p, 1));
        let signs = _mm256_or_si256(b, _mm256_and_si256(p, _mm256_set1_epi8(-128)));
        let s = _mm256_or_si256(_mm256_srli_epi32(w, 27), _mm256_set1_epi32(1));
        (signs, _mm256_or_si256(s, _mm256_slli_epi32(s, 16)))
    }

    /// `nb` super-blocks of the R rows at `xs` against the Q8_K row at `yr` (R = 2 for the
    /// matvec: two rows' independent lookups in flight, the activations and |y| loaded once).
    #[inline(always)]
    pub(super) unsafe fn dot<W: Words, const R: usize>(
        nb: usize,
        xs: [*const u8; R],
        yr: *const u8,
    ) -> [f32; R] {
        #[repr(C, align(32))]
        struct Fields {
            signs: [u32; 8],
            scales: [u32; 8],
        }
        let mut f: [Fields; R] = core::array::from_fn(|_| Fields {
            signs: [0; 8],
            scales: [0; 8],
        });
        let mut sumf = [0f32; R];
        for i in 0..nb {
            let y = yr.add(i * Q8_K_BYTES);
            for r in 0..R {
                let (signs, scales) = signs_scales(W::words(xs[r].add(i * W::BYTES)));
                _mm256_store_si256(f[r].signs.as_mut_ptr() as *mut __m256i, signs);
                _mm256_store_si256(f[r].scales.as_mut_ptr() as *mut __m256i, scales);
            }
            let mut acc = [_mm256_setzero_si256(); R];
            for ib in 0..8 {
                let q8 = load256(y.add(Q8_K_QS + 32 * ib));
                let ay = _mm256_abs_epi8(q8);
                for r in 0..R {
                    // The signed weights (|w| <= 62 fits an i8) take the activations' signs
                    // too, and meet |y| (0..128, unsigned: exact for -128) in one maddubs; a
                    // pair is at most 2 x 62 x 128.
                    let m = byte_sign_masks(f[r].signs[ib]);
                    let g = W::grid(xs[r].add(i * W::BYTES), ib);
                    let w = _mm256_sub_epi8(_mm256_xor_si256(g, m), m);
                    let p = _mm256_maddubs_epi16(ay, _mm256_sign_epi8(w, q8));
                    let sc = _mm256_set1_epi32(f[r].scales[ib] as i32);
                    acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(p, sc));
                }
            }
            for r in 0..R {
                let x = xs[r].add(i * W::BYTES);
                sumf[r] += W::block_value(x, y, W::d(x), hsum_epi32(acc[r]));
            }
        }
        sumf.map(|s| W::FINAL * s)
    }
}

/// IQ2_XXS and IQ3_XXS prompts with TOKENS in the lanes (the pattern of `avx2_kt`).
///
/// Why: the file-layout `matmul` above pays, per 32 multiply-adds, two `maddubs` (positive
/// and negative lanes), a subtraction and a `madd`, and unpacks each sub-block for only
/// [`GROUP`] activation rows. Here the Q8_K activations of up to 32 tokens are transposed
/// once per chunk of blocks (vector k of a block holds dword k of 8 tokens, one per lane) and
/// each dword of a sub-block's SIGNED weights (|w| <= 62 for IQ3_XXS, 43 for IQ2_XXS: they fit
/// an i8) is broadcast against them: one `maddubs`, one `madd` by the scale and one add per 32
/// multiply-adds, the sub-block unpacked once for all tokens.
///
/// `maddubs` wants one operand unsigned: the activations are packed as y + 128 (0..255, by
/// flipping the top bit), so a lane gives sum(w (y + 128)) and the block's integer is
/// S = sum_sb (2s + 1) sum(w y') - 128 sum_sb (2s + 1) sum(w), the second term once per row
/// and block, for every token. No step saturates or overflows: a `maddubs` pair is at most
/// 2 x 62 x 255 = 31620 < 32767, a block's sum(w y') times the scales at most
/// 256 x 62 x 255 x 31 < 2^27. S is the scalar twin's exact integer (every activation byte,
/// -128 included), and the float steps are the twin's ((f16(d) * dy) * f32(S) added in block
/// order, then FINAL * sum) lane by lane: a prompt gives the one-row dot's bits, the scalar
/// reference's, for any split of the batch.
mod lanes {
    use super::*;
    use crate::x86_64::avx2_kt::transpose8;

    /// Token vectors (8 tokens each) per pass: 32 tokens.
    const MAX_VECS: usize = 4;
    /// Blocks packed at once (2 x 8 KB: the packed activations stay in L1 while a tile of rows
    /// goes by).
    const K_CHUNK: usize = 2;
    /// Weight rows whose float accumulators are kept across the chunks of blocks.
    const ROW_TILE: usize = 32;
    /// Below this many tokens the packing does not pay; the one-row dot gives the same bits.
    pub(super) const MIN_TOKENS: usize = 4;

    /// The activations (y + 128) of K_CHUNK blocks of up to 32 tokens: `q[i][k][g]` dword k of
    /// block i for tokens 8g .. 8g + 7, `d[i][g]` their scales.
    #[repr(C, align(32))]
    struct Packed {
        q: [[[__m256i; MAX_VECS]; 64]; K_CHUNK],
        d: [[__m256; MAX_VECS]; K_CHUNK],
    }

    /// A grid format whose sub-blocks unpack to 32 signed i8 weights and one scale.
    pub(super) trait Signed: Grid {
        /// Sub-block `ib` of the super-block `x`: its signed weights (grid magnitude, negated
        /// where the sign mask says) and 2s + 1.
        unsafe fn signed(x: *const u8, ib: usize) -> (__m256i, i16);
    }

    /// The magnitudes `grid` negated on the lanes of `aux`'s sign masks: (g ^ m) - m.
    #[inline(always)]
    unsafe fn apply(grid: __m256i, aux: u32) -> (__m256i, i16) {
        let m = sign_masks(aux);
        let w = _mm256_sub_epi8(_mm256_xor_si256(grid, m), m);
        (w, (2 * (aux >> 28) + 1) as i16)
    }

    impl Signed for Iq2Xxs {
        #[inline(always)]
        unsafe fn signed(x: *const u8, ib: usize) -> (__m256i, i16) {
            let q = x.add(2 + 8 * ib);
            // u8 indices into 256 entries: in bounds for every byte.
            let g = |l: usize| IQ2XXS_GRID[*q.add(l) as usize] as i64;
            apply(_mm256_set_epi64x(g(3), g(2), g(1), g(0)), u32_at(q.add(4)))
        }
    }

    impl Signed for Iq3Xxs {
        #[inline(always)]
        unsafe fn signed(x: *const u8, ib: usize) -> (__m256i, i16) {
            let q = x.add(2 + 8 * ib);
            let g = |l: usize| IQ3XXS_GRID[*q.add(l) as usize] as i32;
            let grid = _mm256_set_epi32(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0));
            apply(grid, u32_at(x.add(66 + 4 * ib)))
        }
    }

    /// Packs block `ib` of the G x 8 activation rows `ys` (null: a missing token, for which
    /// the zero block `zero` stands) into slot `i` of `p`.
    #[inline(always)]
    unsafe fn pack_block<const G: usize>(
        ys: &[*const u8; 32],
        zero: *const u8,
        ib: usize,
        p: &mut Packed,
        i: usize,
    ) {
        let flip = _mm256_set1_epi8(-128);
        for g in 0..G {
            let y: [*const u8; 8] = core::array::from_fn(|l| {
                let y = ys[8 * g + l];
                if y.is_null() {
                    zero
                } else {
                    y.add(ib * Q8_K_BYTES)
                }
            });
            for m in 0..8 {
                let t = transpose8(core::array::from_fn(|l| {
                    _mm256_xor_si256(load256(y[l].add(Q8_K_QS + 32 * m)), flip)
                }));
                for (k, &t) in t.iter().enumerate() {
                    p.q[i][8 * m + k][g] = t;
                }
            }
            let d: [f32; 8] = core::array::from_fn(|l| f32_at(y[l]));
            p.d[i][g] = _mm256_loadu_ps(d.as_ptr());
        }
    }

    /// Adds block `i` of `p` against the weight block at `x` into one row's accumulators.
    #[inline(always)]
    unsafe fn row_block<S: Signed, const G: usize>(
        x: *const u8,
        p: &Packed,
        i: usize,
        acc: &mut [__m256; MAX_VECS],
    ) {
        #[repr(align(32))]
        struct Dwords([i32; 8]);
        let mut w = Dwords([0; 8]);
        let ones = _mm256_set1_epi8(1);
        let mut corr = _mm256_setzero_si256();
        let mut sumi = [_mm256_setzero_si256(); G];
        for ib in 0..8 {
            let (ws, sc) = S::signed(x, ib);
            let sc = _mm256_set1_epi16(sc);
            // sum (2s + 1) w, for the -128 sum(...) term.
            corr = _mm256_add_epi32(corr, _mm256_madd_epi16(_mm256_maddubs_epi16(ones, ws), sc));
            // Through memory: a broadcast load per dword, no shuffle port.
            _mm256_store_si256(w.0.as_mut_ptr() as *mut __m256i, ws);
            for k in 0..8 {
                let wb = _mm256_set1_epi32(w.0[k]);
                for (g, s) in sumi.iter_mut().enumerate() {
                    let pr = _mm256_maddubs_epi16(p.q[i][8 * ib + k][g], wb);
                    *s = _mm256_add_epi32(*s, _mm256_madd_epi16(pr, sc));
                }
            }
        }
        let corr = _mm256_set1_epi32(hsum_epi32(corr) << 7);
        let d = _mm256_set1_ps(S::d(x));
        for g in 0..G {
            let s = _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[g], corr));
            // The twin's (dx * dy) * f32(S), then the add: no fused step.
            acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(_mm256_mul_ps(d, p.d[i][g]), s));
        }
    }

    /// Up to 32 tokens (`nt`, in G vectors) against all rows.
    #[inline(always)]
    unsafe fn tokens_pass<S: Signed, const G: usize>(
        (nb, w, w_row, n_rows): (usize, *const u8, usize, usize),
        ys: &[*const u8; 32],
        zero: *const u8,
        nt: usize,
        out: *mut f32,
        p: &mut Packed,
    ) {
        let mut acc = [[_mm256_setzero_ps(); MAX_VECS]; ROW_TILE];
        let fin = _mm256_set1_ps(S::FINAL);
        for r0 in (0..n_rows).step_by(ROW_TILE) {
            let rows = ROW_TILE.min(n_rows - r0);
            acc[..rows].fill([_mm256_setzero_ps(); MAX_VECS]);
            for k0 in (0..nb).step_by(K_CHUNK) {
                let kn = K_CHUNK.min(nb - k0);
                for i in 0..kn {
                    pack_block::<G>(ys, zero, k0 + i, p, i);
                }
                for (r, acc) in acc[..rows].iter_mut().enumerate() {
                    let x = w.add((r0 + r) * w_row + k0 * S::BYTES);
                    for i in 0..kn {
                        row_block::<S, G>(x.add(i * S::BYTES), p, i, acc);
                    }
                }
            }
            for (r, acc) in acc[..rows].iter().enumerate() {
                for (g, &a) in acc[..G].iter().enumerate() {
                    let mut v = [0f32; 8];
                    _mm256_storeu_ps(v.as_mut_ptr(), _mm256_mul_ps(fin, a));
                    for (l, &v) in v.iter().enumerate() {
                        let t = 8 * g + l;
                        if t < nt {
                            *out.add(t * n_rows + r0 + r) = v;
                        }
                    }
                }
            }
        }
    }

    /// `out[t * n_rows + r] = weights[r] . acts[t]`: up to 32 tokens per pass over the rows.
    #[inline(always)]
    pub(super) unsafe fn matmul<S: Signed>(
        n: usize,
        w: &[u8],
        acts: &[u8],
        n_acts: usize,
        out: &mut [f32],
    ) {
        if n_acts < MIN_TOKENS {
            return super::matmul::<S>(n, w, acts, n_acts, out);
        }
        let n_rows = out.len() / n_acts;
        let nb = n / QK_K;
        let (w_row, a_row) = (nb * S::BYTES, nb * Q8_K_BYTES);
        if w.len() < n_rows * w_row || acts.len() < n_acts * a_row {
            // The caller (WeightKernel::matmul) checked the shapes; never read past the slices.
            return;
        }
        let y = |t: usize| acts.as_ptr().add(t * a_row);
        // Missing tokens of the last vector read this zero block.
        let zero_block = [0u8; Q8_K_BYTES];
        let mut p = Packed {
            q: [[[_mm256_setzero_si256(); MAX_VECS]; 64]; K_CHUNK],
            d: [[_mm256_setzero_ps(); MAX_VECS]; K_CHUNK],
        };
        for t0 in (0..n_acts).step_by(8 * MAX_VECS) {
            let nt = (8 * MAX_VECS).min(n_acts - t0);
            let ys: [*const u8; 32] =
                core::array::from_fn(|t| if t < nt { y(t0 + t) } else { core::ptr::null() });
            let out_t = out.as_mut_ptr().add(t0 * n_rows);
            let args = (nb, w.as_ptr(), w_row, n_rows);
            let z = zero_block.as_ptr();
            match nt.div_ceil(8) {
                1 => tokens_pass::<S, 1>(args, &ys, z, nt, out_t, &mut p),
                2 => tokens_pass::<S, 2>(args, &ys, z, nt, out_t, &mut p),
                3 => tokens_pass::<S, 3>(args, &ys, z, nt, out_t, &mut p),
                _ => tokens_pass::<S, 4>(args, &ys, z, nt, out_t, &mut p),
            }
        }
    }
}

/// IQ2_XXS . Q8_K, one row.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_iq2_xxs_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    whole_dot::<Iq2Xxs>(n, w, act)
}

/// IQ2_XXS weight rows . one Q8_K row: `out[r]`, each value [`vec_dot_iq2_xxs_q8_k`]'s bits.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matvec_iq2_xxs_q8_k(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
    whole_matvec::<Iq2Xxs>(n, w, act, out)
}

/// IQ2_XXS weight rows x Q8_K activation rows: `out[t * n_rows + r]`, each value `vec_dot`'s
/// bits.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_iq2_xxs_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    lanes::matmul::<Iq2Xxs>(n, w, acts, n_acts, out)
}

/// IQ3_XXS . Q8_K, one row.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_iq3_xxs_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    whole_dot::<Iq3Xxs>(n, w, act)
}

/// IQ3_XXS weight rows . one Q8_K row: `out[r]`, each value [`vec_dot_iq3_xxs_q8_k`]'s bits.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matvec_iq3_xxs_q8_k(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
    whole_matvec::<Iq3Xxs>(n, w, act, out)
}

/// IQ3_XXS weight rows x Q8_K activation rows: `out[t * n_rows + r]`, each value `vec_dot`'s
/// bits.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_iq3_xxs_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    lanes::matmul::<Iq3Xxs>(n, w, acts, n_acts, out)
}

/// IQ2_XS . Q8_K, one row.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_iq2_xs_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    vec_dot::<Iq2Xs>(n, w, act)
}

/// IQ2_XS weight rows x Q8_K activation rows: `out[t * n_rows + r]`, each value `vec_dot`'s
/// bits.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_iq2_xs_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Iq2Xs>(n, w, acts, n_acts, out)
}

/// IQ2_S . Q8_K, one row.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_iq2_s_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    vec_dot::<Iq2S>(n, w, act)
}

/// IQ2_S weight rows x Q8_K activation rows: `out[t * n_rows + r]`, each value `vec_dot`'s
/// bits.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_iq2_s_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Iq2S>(n, w, acts, n_acts, out)
}

/// IQ3_S . Q8_K, one row.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_iq3_s_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    vec_dot::<Iq3S>(n, w, act)
}

/// IQ3_S weight rows x Q8_K activation rows: `out[t * n_rows + r]`, each value `vec_dot`'s
/// bits.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_iq3_s_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Iq3S>(n, w, acts, n_acts, out)
}

/// IQ1_S . Q8_K, one row.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_iq1_s_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    vec_dot::<Iq1S>(n, w, act)
}

/// IQ1_S weight rows x Q8_K activation rows: `out[t * n_rows + r]`, each value `vec_dot`'s
/// bits.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_iq1_s_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Iq1S>(n, w, acts, n_acts, out)
}

/// IQ1_M . Q8_K, one row.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_iq1_m_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    vec_dot::<Iq1M>(n, w, act)
}

/// IQ1_M weight rows x Q8_K activation rows: `out[t * n_rows + r]`, each value `vec_dot`'s
/// bits.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_iq1_m_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Iq1M>(n, w, acts, n_acts, out)
}
