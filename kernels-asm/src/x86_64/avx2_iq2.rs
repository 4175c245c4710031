//! AVX2 faces of the grid i-quants against Q8_K (#33): IQ2_XXS and IQ3_XXS, each a one-row dot
//! with the signature of `smolrun_core::quant::VecDotFn` and a small-batch matmul (prompts)
//! with that of `smolrun_core::kernels::ColsFn`.
//!
//! Per sub-block of 32 (4 groups of 8): the grid entries (4 of 8 magnitudes for IQ2_XXS, 8 of
//! 4 for IQ3_XXS; one byte of index each, into a 256-entry table: in bounds by construction)
//! are gathered into one register of 32 unsigned magnitudes, and the 4 groups' 7-bit sign fields (into the 128-entry [`KSIGNS64`]) into
//! one register of 32 byte masks (0xFF = negative). The signed dot is then
//! `maddubs(|g| on positive lanes, q8) - maddubs(|g| on negative lanes, q8)`: each i16 lane
//! is at most 2 * 62 * 128 in magnitude, so neither the saturating `maddubs` nor the
//! difference can overflow, for every activation byte (-128 included: negating the
//! activations with `sign_epi8`, as a shorter kernel would, turns -128 into -128).
//! `madd` by the sub-block's odd scale 2s + 1 widens to i32 lanes, whose sum over the
//! super-block is the scalar twin's exact integer; the float steps are then the twin's own
//! (`sumf += (f16(d) * dy) * bsum` in block order, then `0.125 * sumf` for IQ2_XXS, `0.25 *
//! sumf` for IQ3_XXS), so both faces give the scalar result bit for bit
//! (`smolrun_core::quant::{iq2_xxs, iq3_xxs}::vec_dot`).
//!
//! `matmul` unpacks each weight sub-block once for up to [`GROUP`] activation rows and gives
//! each (row, activation) pair exactly `vec_dot`'s operations, so a prompt gives decode's bits.
//!
//! Every function reads only whole blocks inside the slices.
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use super::avx2::*;
use crate::iq_grids::{IQ2XXS_GRID, IQ3XXS_GRID, KSIGNS64};
use core::arch::x86_64::*;

/// Bytes of an IQ2_XXS super-block: d: f16, then 8 sub-blocks of 4 index bytes and a u32 of
/// signs and scale.
pub const IQ2_XXS_BYTES: usize = 66;

/// Bytes of an IQ3_XXS super-block: d: f16, 64 index bytes (8 per sub-block), then 8 u32 of
/// signs and scale.
pub const IQ3_XXS_BYTES: usize = 98;

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
    let signs = sign_masks(aux);
    Sub {
        pos: _mm256_andnot_si256(signs, grid),
        neg: _mm256_and_si256(signs, grid),
        scale: _mm256_set1_epi16((2 * (aux >> 28) + 1) as i16),
    }
}

/// A grid format: its super-block size, how a sub-block unpacks, and the constant the twin
/// multiplies its sum by at the end.
trait Grid {
    const BYTES: usize;
    const FINAL: f32;
    unsafe fn sub(x: *const u8, ib: usize) -> Sub;
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
        let dx = f16_at(x);
        for j in 0..N {
            let d = dx * f32_at(ys[j].add(i * Q8_K_BYTES));
            sumf[j] += d * hsum_epi32(acc[j]) as f32;
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

/// IQ2_XXS . Q8_K, one row.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_iq2_xxs_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    vec_dot::<Iq2Xxs>(n, w, act)
}

/// IQ2_XXS weight rows x Q8_K activation rows: `out[t * n_rows + r]`, each value `vec_dot`'s
/// bits.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_iq2_xxs_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Iq2Xxs>(n, w, acts, n_acts, out)
}

/// IQ3_XXS . Q8_K, one row.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_iq3_xxs_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    vec_dot::<Iq3Xxs>(n, w, act)
}

/// IQ3_XXS weight rows x Q8_K activation rows: `out[t * n_rows + r]`, each value `vec_dot`'s
/// bits.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_iq3_xxs_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Iq3Xxs>(n, w, acts, n_acts, out)
}
