//! AVX2 IQ4_XS prompt kernel with TOKENS in the lanes (`ColsFn`), and the one-row dot that
//! gives its bits (`VecDotFn`, the prompt kernel's `cols_twin`): `avx2_kt`'s scheme (see its
//! module docs) for IQ4_XS (#33).
//!
//! The activations of up to 32 tokens are transposed once per chunk of blocks so that vector
//! k of a block holds dword k (4 activations) of 8 tokens, one token per lane; each dword of
//! a weight row's level planes (below; in element order, on the stack) is broadcast against
//! them. The
//! file-layout kernel (`avx2_iq4`, decode's) pays an `abs`, a `sign` and a `pmaddwd` by the
//! scale for every 32 multiply-adds of one token.
//!
//! The levels (kvalues_iq4nl, -127..113) are signed and span 240 values: as the unsigned
//! operand of `pmaddubsw` they would make a lane of two products up to 2 x 241 x 128, past
//! i16 (and decode's sign trick, |y| against the level with y's sign, leaves no room to sum
//! lanes in i16: a `pmaddwd` per dword). So each level is stored as L + 128 (1..241) and
//! split into its nibbles, L + 128 = 16 h + l (h, l in 0..15; one table lookup each, the l
//! and h planes), each meeting the signed activations in its own `pmaddubsw`: sum L y = 16
//! sum h y + sum l y - 128 sum y, the last from the bsums (as Q4_K's mins). That is two
//! `pmaddubsw` per 4 weights and 8 tokens, twice Q4_K's.
//!
//! i16 headroom: a `pmaddubsw` lane is two products of a nibble (0..15) and an activation
//! (-128..127), at most 3840 in magnitude; a 32-element sub-block is 8 dwords, so its h and l
//! sums are at most 8 x 3840 = 30720 (>= -30720 for activations of -128): no saturation.
//! They meet 16 x scale and the scale (|16 x scale| <= 512) in `pmaddwd`.
//!
//! Exactness: both entry points compute, per (row, token, block), the exact integer S = sum
//! over sub-blocks of (ls - 32) x (levels . activations) (|S| < 8 x 32 x 32 x 127 x 128 <
//! 2^31), then the same float operations in the same order: dd = f32(d) * d_act (one
//! rounding), acc = fma(dd, f32(S), acc), blocks in order (`avx2_kt`'s float steps). The
//! one-row dot reaches S by decode's sign trick in the file layout and a horizontal integer
//! sum per block. Decoding keeps `avx2_iq4`'s kernel (8 float lanes per row, faster for one
//! token); a prompt runs these for every batch size (`cols_twin`), so it gives the same logits
//! however it is split. The scalar reference rounds each sub-block's product instead: the
//! twin differs from it by float rounding only.
//!
//! The packing, tiling and pass structure are `avx2_kt`'s, used from there; the level table,
//! scales and the file-layout sub-block dot are `avx2_iq4`'s and `avx2_q0`'s.
//!
//! Every function reads only whole blocks inside the slices.
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use super::avx2::*;
use super::avx2_iq4::{block_sumi, sub_scales};
// The packing, the loops and the tile sizes are avx2_kt's; this file adds one format.
use super::avx2_kt::{bsum_pairs_of_32, fma1, hsum_epi32, matmul, Format, Packed, MAX_VECS};
use super::avx2_q0::{iq4nl_table, nibbles};
use core::arch::x86_64::*;

/// Where the 128 bytes of 4-bit indices start in a block (after d, scales_h, scales_l).
const IQ4_XS_QS: usize = 8;

struct IQ4XS;

impl Format for IQ4XS {
    const BYTES: usize = IQ4_XS_BYTES;
    const MINS: bool = false;

    /// The sums of the 32-element sub-blocks, meeting scales 2p and 2p + 1.
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
        _accm: &mut [__m256; MAX_VECS],
    ) {
        // L + 128 as u8 is L with its top bit flipped; its nibble tables give l and h of each
        // index (a nibble index stays inside a table).
        let low4 = _mm256_set1_epi8(0x0F);
        let biased = _mm256_xor_si256(iq4nl_table(), _mm256_set1_epi8(i8::MIN));
        let tables = [
            _mm256_and_si256(biased, low4),
            _mm256_and_si256(_mm256_srli_epi16(biased, 4), low4),
        ];
        // The l and h planes of the 256 levels in element order (two lookups per sub-block,
        // not a shift and masks per broadcast dword), broadcast a dword at a time.
        let mut l_plane = [_mm256_setzero_si256(); 8];
        let mut h_plane = [_mm256_setzero_si256(); 8];
        for (ib, (l, h)) in l_plane.iter_mut().zip(h_plane.iter_mut()).enumerate() {
            let idx = nibbles(x.add(IQ4_XS_QS + 16 * ib));
            *l = _mm256_shuffle_epi8(tables[0], idx);
            *h = _mm256_shuffle_epi8(tables[1], idx);
        }
        let (lp, hp) = (
            l_plane.as_ptr() as *const i32,
            h_plane.as_ptr() as *const i32,
        );
        let scales = sub_scales(x);
        let mut sumi = [_mm256_setzero_si256(); G];
        for (ib, &scale) in scales.iter().enumerate() {
            // Sub-block ib: dwords 8ib .. 8ib + 7, its l and h sums in i16 (at most 30720).
            let mut lo16 = [_mm256_setzero_si256(); G];
            let mut hi16 = [_mm256_setzero_si256(); G];
            for k in 8 * ib..8 * ib + 8 {
                let lo = _mm256_set1_epi32(*lp.add(k));
                let hi = _mm256_set1_epi32(*hp.add(k));
                for g in 0..G {
                    let a = p.q[i][k][g];
                    lo16[g] = _mm256_add_epi16(lo16[g], _mm256_maddubs_epi16(lo, a));
                    hi16[g] = _mm256_add_epi16(hi16[g], _mm256_maddubs_epi16(hi, a));
                }
            }
            let sc_lo = _mm256_set1_epi16(scale);
            let sc_hi = _mm256_set1_epi16(16 * scale);
            for g in 0..G {
                let s = _mm256_add_epi32(
                    _mm256_madd_epi16(lo16[g], sc_lo),
                    _mm256_madd_epi16(hi16[g], sc_hi),
                );
                sumi[g] = _mm256_add_epi32(sumi[g], s);
            }
        }
        // sum L y = sum (L + 128) y - 128 sum_ib scale_ib bsum_ib.
        let mut offset = [_mm256_setzero_si256(); G];
        for q in 0..4 {
            let pair = (scales[2 * q] as u16 as i32) | (scales[2 * q + 1] as i32) << 16;
            let sc = _mm256_set1_epi32(pair);
            for (g, o) in offset.iter_mut().enumerate() {
                *o = _mm256_add_epi32(*o, _mm256_madd_epi16(p.pairs[i][q][g], sc));
            }
        }
        let d = _mm256_set1_ps(f16_at(x));
        for g in 0..G {
            let s = _mm256_sub_epi32(sumi[g], _mm256_slli_epi32(offset[g], 7));
            acc[g] = _mm256_fmadd_ps(_mm256_mul_ps(d, p.d[i][g]), _mm256_cvtepi32_ps(s), acc[g]);
        }
    }

    #[inline(always)]
    unsafe fn dot(nb: usize, xr: *const u8, yr: *const u8) -> f32 {
        let table = iq4nl_table();
        let mut acc = 0f32;
        for i in 0..nb {
            let x = xr.add(i * IQ4_XS_BYTES);
            let y = yr.add(i * Q8_K_BYTES);
            let sumi = block_sumi(x, y, table);
            acc = fma1(f16_at(x) * f32_at(y), hsum_epi32(sumi) as f32, acc);
        }
        acc
    }
}

/// IQ4_XS weights . Q8_K activations (one row), with the bits of [`matmul_iq4_xs_q8_k`].
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_iq4_xs_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / IQ4_XS_BYTES)
        .min(act.len() / Q8_K_BYTES);
    IQ4XS::dot(nb, w.as_ptr(), act.as_ptr())
}

/// IQ4_XS weights x Q8_K activation rows, tokens in the lanes; every output bit for bit
/// [`vec_dot_iq4_xs_q8_k`] (this module's, not `avx2_iq4`'s).
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_iq4_xs_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<IQ4XS>(n, w, acts, n_acts, out)
}
