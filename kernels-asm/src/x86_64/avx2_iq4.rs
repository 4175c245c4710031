//! AVX2 IQ4_XS . Q8_K (#33): the one-row dot (decode) with the signature of
//! `smolrun_core::quant::VecDotFn`, and the sub-block pieces `avx2_kt_iq4` (the prompt kernel,
//! tokens in the lanes) shares. (IQ4_NL, a 32-element format against Q8_0, is in
//! [`super::avx2_q0`].)
//!
//! Per sub-block of 32: the 16 index bytes become 32 nibbles in element order (low nibbles are
//! elements 0..15, high ones 16..31, as [`super::avx2_q0`]'s `nibbles` lays them), one `pshufb`
//! looks them up in `kvalues_iq4nl` (a nibble is 0..15, so always inside the table: no byte of
//! a file reaches outside it). The levels stay i8 and meet the activations in one `pmaddubsw`:
//! the activation's magnitude is the unsigned factor and the level takes the activation's sign
//! (`psignb`; a level is in -127..113, so either sign fits i8, and |-128| = 0x80 is 128 as u8,
//! so every activation is exact; a pair is at most 2 * 128 * 127 < 2^15). One `pmaddwd` by the
//! sub-block's scale (ls - 32) makes i32 lanes. The eight sub-blocks' sums stay integers in 8
//! i32 lanes (at most 8 * 32 * 2 * 32512 < 2^24 each), so the super-block's integer is exact;
//! then one FMA of (f16(d) * d_act) into 8 f32 lanes, the lanes summed at the end. The scalar
//! twin instead scales each sub-block in f32: the results differ only in float rounding, within
//! the bound core's exactness tests hold every kernel to. (Widening levels and activations to
//! i16 and multiplying by the scale there, as this kernel did first, took about twice the
//! instructions per weight: decode at 0.82x llama.cpp's on Qwen2.5-Coder-1.5B IQ4_XS.)
//!
//! Every function reads only whole blocks inside the slices.
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use super::avx2::*;
use super::avx2_q0::{iq4nl_table, nibbles};
use core::arch::x86_64::*;

/// The 8 sub-block scales of an IQ4_XS super-block (ls - 32, in -32..31).
#[inline(always)]
pub(super) unsafe fn sub_scales(x: *const u8) -> [i16; 8] {
    let h = u16::from_le_bytes([*x.add(2), *x.add(3)]);
    let mut s = [0i16; 8];
    for (ib, s) in s.iter_mut().enumerate() {
        let low = (*x.add(4 + ib / 2) >> (4 * (ib % 2))) & 0xF;
        let high = ((h >> (2 * ib)) & 3) as u8;
        *s = (low | (high << 4)) as i16 - 32;
    }
    s
}

/// Sub-block `ib`'s 32 levels (i8, in element order), looked up once for every activation row.
#[inline(always)]
pub(super) unsafe fn levels(x: *const u8, ib: usize, table: __m256i) -> __m256i {
    _mm256_shuffle_epi8(table, nibbles(x.add(8 + 16 * ib)))
}

/// 32 levels . the 32 activations at `y`, times the sub-block's scale (in every i16 lane of
/// `scale`): 8 exact i32 lanes (see the module docs for the sign trick and its bounds).
#[inline(always)]
pub(super) unsafe fn dot_sub(levels: __m256i, scale: __m256i, y: *const u8) -> __m256i {
    let y = load256(y);
    let pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(y), _mm256_sign_epi8(levels, y));
    _mm256_madd_epi16(pairs, scale)
}

/// Block `x` . the Q8_K block `y`: its 8 sub-blocks' scaled sums in 8 exact i32 lanes (the
/// block's integer is their sum), for decode's dot below and the prompt kernel's twin.
#[inline(always)]
pub(super) unsafe fn block_sumi(x: *const u8, y: *const u8, table: __m256i) -> __m256i {
    let scales = sub_scales(x);
    let mut sumi = _mm256_setzero_si256();
    for (ib, &sc) in scales.iter().enumerate() {
        let (v, scale) = (levels(x, ib, table), _mm256_set1_epi16(sc));
        sumi = _mm256_add_epi32(sumi, dot_sub(v, scale, y.add(Q8_K_QS + 32 * ib)));
    }
    sumi
}

/// IQ4_XS . Q8_K, one row (decode; prompts run `avx2_kt_iq4`, with their own one-row twin).
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_iq4_xs_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / IQ4_XS_BYTES)
        .min(act.len() / Q8_K_BYTES);
    let (xr, yr) = (w.as_ptr(), act.as_ptr());
    let table = iq4nl_table();
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let x = xr.add(i * IQ4_XS_BYTES);
        let y = yr.add(i * Q8_K_BYTES);
        let sumi = block_sumi(x, y, table);
        let d = _mm256_set1_ps(f16_at(x) * f32_at(y));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc)
}
