//! AVX2 Q3_K . Q8_K, one row (`vec_dot_q3_k_q8_k`) and several rows (`matvec_q3_k_q8_k`), both
//! bit for bit the scalar twin `smolrun_core::quant::q3_k::vec_dot` (decoding; prompts are
//! [`super::avx2_kt35`]'s).
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
//! per block; in the vec_dot each activation run is permuted as it is loaded, in the batched
//! kernels (`matmul`, prompts, and `matvec`, decode) once per tile of weight rows. Then
//! `maddubs` gives, per i16, one sub-block's two products of the lane, and `madd` with (scale
//! even, scale odd) pairs the i32 lane's exact integer. The float steps are the twin's
//! (product, then sum, never fused; the 8 lane sums added in order at the end).
//!
//! The signed quants: `maddubs` wants one unsigned operand, so it meets |y| and q with y's
//! sign (see `run_dot`), one multiply per run instead of two (low bits and the -4 apart).
//!
//! Every function reads only whole blocks inside the slices.
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use super::avx2::*;
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

/// One super-block's weights in lane order: for each run of 32 elements (h, s) the signed
/// quants (-4..3), and the 8 (even, odd) scale pairs as i16 pairs in a dword.
struct Q3KBlock {
    q: [__m256i; 8],
    scales: [i32; 8],
    d: f32,
}

/// The 16 scales minus 32 as i16, from the 12 packed bytes: words a0, a1 (bytes 0..8) hold
/// the low nibbles (scales 0..8 low, 8..16 high nibble), word a2 (bytes 8..12) the top two
/// bits, scale 4g + j's at bits 2g.. of byte j. Scales 2r and 2r + 1 share dword r.
#[inline(always)]
unsafe fn scales_q3_k(p: *const u8) -> __m256i {
    let a = _mm_loadu_si64(p);
    let a2 = _mm_set1_epi32((p.add(8) as *const i32).read_unaligned());
    // Dwords (a0, a1, a0 >> 4, a1 >> 4) & 0x0f: scales 0..4, 4..8, 8..12, 12..16, low bits.
    let low = _mm_and_si128(
        _mm_srlv_epi32(_mm_unpacklo_epi64(a, a), _mm_setr_epi32(0, 0, 4, 4)),
        _mm_set1_epi8(0x0f),
    );
    // Dword g: (a2 >> 2g) & 3 in each byte, moved to bits 4..6 (within the byte).
    let high = _mm_slli_epi32(
        _mm_and_si128(
            _mm_srlv_epi32(a2, _mm_setr_epi32(0, 2, 4, 6)),
            _mm_set1_epi8(3),
        ),
        4,
    );
    let sc = _mm_sub_epi8(_mm_or_si128(low, high), _mm_set1_epi8(32));
    _mm256_cvtepi8_epi16(sc)
}

#[inline(always)]
unsafe fn unpack_q3_k(x: *const u8) -> Q3KBlock {
    let three = _mm256_set1_epi8(3);
    let four = _mm256_set1_epi8(4);
    // Lowered where the bit is clear: work on the inverted mask.
    let not_hm = _mm256_xor_si256(lane_order(load256(x)), _mm256_set1_epi8(-1));
    let mut q = [_mm256_setzero_si256(); 8];
    for h in 0..2 {
        let qs = lane_order(load256(x.add(Q3_K_QS + 32 * h)));
        // 16-bit shifts: the masks keep only bits that stayed inside their byte.
        q[4 * h] = _mm256_and_si256(qs, three);
        q[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(qs, 2), three);
        q[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(qs, 4), three);
        q[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(qs, 6), three);
    }
    // Bit k = 4h + s of not_hm moved to bit 2: 4 where run k is lowered.
    let lowered = [
        _mm256_slli_epi16(not_hm, 2),
        _mm256_slli_epi16(not_hm, 1),
        not_hm,
        _mm256_srli_epi16(not_hm, 1),
        _mm256_srli_epi16(not_hm, 2),
        _mm256_srli_epi16(not_hm, 3),
        _mm256_srli_epi16(not_hm, 4),
        _mm256_srli_epi16(not_hm, 5),
    ];
    for (q, l) in q.iter_mut().zip(lowered) {
        *q = _mm256_sub_epi8(*q, _mm256_and_si256(l, four));
    }
    let mut scales = [0i32; 8];
    _mm256_storeu_si256(
        scales.as_mut_ptr() as *mut __m256i,
        scales_q3_k(x.add(Q3_K_SCALES)),
    );
    Q3KBlock {
        q,
        scales,
        d: f16_at(x.add(Q3_K_D)),
    }
}

/// One run of 32 products, exact: `maddubs` wants its first operand unsigned, so it meets
/// |y| (0..128, -128 included) and q carrying y's sign (-4..4); each i16 is at most
/// 2 * 4 * 128 in magnitude, no saturation. Then `madd` with the (even, odd) scale pair.
#[inline(always)]
unsafe fn run_dot(q: __m256i, y: __m256i, scales: i32) -> __m256i {
    run_dot_abs(q, y, _mm256_abs_epi8(y), scales)
}

/// [`run_dot`] with |y| at hand.
#[inline(always)]
unsafe fn run_dot_abs(q: __m256i, y: __m256i, y_abs: __m256i, scales: i32) -> __m256i {
    let p = _mm256_maddubs_epi16(y_abs, _mm256_sign_epi8(q, y));
    _mm256_madd_epi16(p, _mm256_set1_epi32(scales))
}

/// The twin's 8 integer lanes of one super-block against the Q8_K block at `y`, exact.
#[inline(always)]
unsafe fn block_lanes(b: &Q3KBlock, y: *const u8) -> __m256i {
    let mut sum = [_mm256_setzero_si256(); 2];
    for r in 0..8 {
        // Run r = 4h + s: elements 128h + 32s.., sub-blocks 2r and 2r + 1.
        let yq = lane_order(load256(y.add(Q8_K_QS + 32 * r)));
        sum[r & 1] = _mm256_add_epi32(sum[r & 1], run_dot(b.q[r], yq, b.scales[r]));
    }
    _mm256_add_epi32(sum[0], sum[1])
}

/// [`block_lanes`] with the activation runs already in lane order, and their magnitudes.
#[inline(always)]
unsafe fn block_lanes_ordered(b: &Q3KBlock, yq: &[__m256i; 8], y_abs: &[__m256i; 8]) -> __m256i {
    let mut sum = [_mm256_setzero_si256(); 2];
    for r in 0..8 {
        let p = run_dot_abs(b.q[r], yq[r], y_abs[r], b.scales[r]);
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

/// Weight rows dotted with a group of activation rows before moving on.
const ROW_TILE: usize = 16;
/// Activation blocks put in lane order at a time, per activation row (16 KB of stack for 4
/// rows, with the magnitudes).
const CHUNK: usize = 8;

/// `out[k][j] = rows[k] . ys[j]` for up to [`ROW_TILE`] weight rows and N activation rows.
/// The activation runs are put in lane order once per chunk of blocks and reused by every
/// row of the tile (in [`vec_dot_q3_k_q8_k`] every row does it again); each (row, activation)
/// pair keeps its own accumulator, so its float steps are the vec_dot's, block by block.
#[inline(always)]
unsafe fn dot_tile<const N: usize>(
    nb: usize,
    rows: &[*const u8],
    ys: [*const u8; N],
    out: &mut [[f32; N]; ROW_TILE],
) {
    let mut acc = [[_mm256_setzero_ps(); N]; ROW_TILE];
    let mut ordered = [[[_mm256_setzero_si256(); 8]; CHUNK]; N];
    let mut ordered_abs = [[[_mm256_setzero_si256(); 8]; CHUNK]; N];
    let mut i0 = 0;
    while i0 < nb {
        let len = CHUNK.min(nb - i0);
        for j in 0..N {
            for i in 0..len {
                let y = ys[j].add((i0 + i) * Q8_K_BYTES + Q8_K_QS);
                for r in 0..8 {
                    let v = lane_order(load256(y.add(32 * r)));
                    ordered[j][i][r] = v;
                    ordered_abs[j][i][r] = _mm256_abs_epi8(v);
                }
            }
        }
        for (k, &xr) in rows.iter().enumerate() {
            for i in 0..len {
                let b = unpack_q3_k(xr.add((i0 + i) * Q3_K_BYTES));
                for j in 0..N {
                    let lanes = block_lanes_ordered(&b, &ordered[j][i], &ordered_abs[j][i]);
                    let d = _mm256_set1_ps(b.d * f32_at(ys[j].add((i0 + i) * Q8_K_BYTES)));
                    acc[k][j] =
                        _mm256_add_ps(acc[k][j], _mm256_mul_ps(d, _mm256_cvtepi32_ps(lanes)));
                }
            }
        }
        i0 += len;
    }
    for k in 0..rows.len() {
        for j in 0..N {
            out[k][j] = sum_lanes(acc[k][j]);
        }
    }
}

/// Consecutive Q3_K weight rows . one Q8_K activation row (`out[r]`, decode's matvec), bit for
/// bit the vec_dot above: the activation is put in lane order once per tile of rows.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matvec_q3_k_q8_k(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
    let n_rows = out.len();
    let nb = n / QK_K;
    let w_row = nb * Q3_K_BYTES;
    if w.len() < n_rows * w_row || act.len() < nb * Q8_K_BYTES {
        return;
    }
    let mut tile = [[0f32; 1]; ROW_TILE];
    for r0 in (0..n_rows).step_by(ROW_TILE) {
        let r1 = (r0 + ROW_TILE).min(n_rows);
        let rows: [*const u8; ROW_TILE] =
            core::array::from_fn(|k| w.as_ptr().add((r0 + k).min(r1 - 1) * w_row));
        dot_tile::<1>(nb, &rows[..r1 - r0], [act.as_ptr()], &mut tile);
        for (o, v) in out[r0..r1].iter_mut().zip(tile) {
            *o = v[0];
        }
    }
}
