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

// =============================================================================================
// Q2_K rows interleaved by 8 (`q2_k_x8`): the row in the lane.
// =============================================================================================
//
// The one-row kernel above spends most of a super-block on work that is per row and not per
// weight: spreading 16 scales over the lanes (a pshufb per 32 weights, which LLVM turns into
// two or three port-5 shuffles), one horizontal sum and a scalar float step. Here lane r of
// every vector is row r of an 8-row group, so nothing is spread or summed across lanes: each
// activation dword is broadcast once and multiplied into all eight rows, a sub-block's sum of
// the eight rows is one vector, and its scale is one byte per lane, zero-extended. The float
// steps of the scalar twin run in the lanes, in its order, so every row keeps its bits.
//
// Group block (672 bytes, the size of the 8 rows' blocks in the file, so the layout costs no
// memory):
//   0    d: 8 x f16 (row r at 2r)
//   16   dmin: 8 x f16
//   32   scale bytes (scale | min << 4), 8 records of 16 bytes: record p holds row r's bytes of
//        sub-blocks 2p and 2p + 1 at 2r and 2r + 1 (a `vpmovzxbw` gives lane r the pair)
//   160  codes, 16 records of 32 bytes, one per sub-block j: byte 4r + k holds row r's codes of
//        elements 16j + 4t + k (t = 0..3) in bits 2t..2t + 2, so one load and three shifts give
//        four vectors whose dword r is 4 codes of row r against one broadcast activation dword.
// Rows that fill no group follow the groups verbatim (file layout) and run the one-row kernel.

/// Rows per group of the `q2_k_x8` layout.
pub const Q2_K_X8_ROWS: usize = 8;
const X8_BYTES: usize = Q2_K_X8_ROWS * Q2_K_BYTES;
const X8_DMIN: usize = 16;
const X8_SCALES: usize = 32;
const X8_QS: usize = 160;

/// Bytes of `n_rows` Q2_K rows of `n_cols` elements in the `q2_k_x8` layout (as in the file);
/// `None` unless `n_cols` is a whole number of super-blocks.
pub fn q2_k_x8_bytes(n_rows: usize, n_cols: usize) -> Option<usize> {
    if !n_cols.is_multiple_of(QK_K) {
        return None;
    }
    n_rows.checked_mul(n_cols / QK_K)?.checked_mul(Q2_K_BYTES)
}

/// One group block from the same super-block of 8 rows (84 bytes each).
fn pack_q2_k_x8(rows: [&[u8]; Q2_K_X8_ROWS], out: &mut [u8]) {
    out[X8_QS..X8_BYTES].fill(0);
    for (r, b) in rows.iter().enumerate() {
        out[2 * r..2 * r + 2].copy_from_slice(&b[Q2_K_D..Q2_K_D + 2]);
        out[X8_DMIN + 2 * r..X8_DMIN + 2 * r + 2].copy_from_slice(&b[Q2_K_DMIN..Q2_K_DMIN + 2]);
        for j in 0..16 {
            out[X8_SCALES + 16 * (j / 2) + 2 * r + j % 2] = b[j];
        }
        for e in 0..QK_K {
            // file order: element 128h + 32s + l is bits 2s.. of byte 32h + l of the codes
            let (h, s, l) = (e / 128, e % 128 / 32, e % 32);
            let code = (b[Q2_K_QS + 32 * h + l] >> (2 * s)) & 3;
            let (j, t, k) = (e / 16, e % 16 / 4, e % 4);
            out[X8_QS + 32 * j + 4 * r + k] |= code << (2 * t);
        }
    }
}

/// Repacks `n_rows` Q2_K rows (file layout) into `q2_k_x8`; `None`, writing nothing, if `src`
/// or `dst` has the wrong size.
pub fn repack_q2_k_x8(src: &[u8], n_rows: usize, n_cols: usize, dst: &mut [u8]) -> Option<()> {
    let len = q2_k_x8_bytes(n_rows, n_cols)?;
    if src.len() != len || dst.len() != len {
        return None;
    }
    let nb = n_cols / QK_K;
    let row_bytes = nb * Q2_K_BYTES;
    let groups = n_rows / Q2_K_X8_ROWS;
    for g in 0..groups {
        for i in 0..nb {
            let rows = core::array::from_fn(|r| {
                &src[(Q2_K_X8_ROWS * g + r) * row_bytes + i * Q2_K_BYTES..][..Q2_K_BYTES]
            });
            pack_q2_k_x8(rows, &mut dst[(g * nb + i) * X8_BYTES..][..X8_BYTES]);
        }
    }
    let packed = groups * Q2_K_X8_ROWS * row_bytes;
    dst[packed..].copy_from_slice(&src[packed..]);
    Some(())
}

/// `sum over the 16 elements of sub-block record w` of code * y, for the 8 rows: with VNNI as
/// 8 i32 lanes (row r in lane r); without, as 8 pairs of i16 lanes whose two halves sum to
/// row r's value (|half| <= 4 * 2 * 3 * 128, no saturation).
#[inline(always)]
unsafe fn x8_sub_block<const VNNI: bool>(w: *const u8, y: *const u8) -> __m256i {
    let c = codes(load256(w));
    let y = |t: usize| _mm256_set1_epi32((y.add(4 * t) as *const i32).read_unaligned());
    if VNNI {
        let s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), c[0], y(0));
        let s = _mm256_dpbusd_epi32(s, c[1], y(1));
        let s = _mm256_dpbusd_epi32(s, c[2], y(2));
        _mm256_dpbusd_epi32(s, c[3], y(3))
    } else {
        _mm256_add_epi16(
            _mm256_add_epi16(
                _mm256_maddubs_epi16(c[0], y(0)),
                _mm256_maddubs_epi16(c[1], y(1)),
            ),
            _mm256_add_epi16(
                _mm256_maddubs_epi16(c[2], y(2)),
                _mm256_maddubs_epi16(c[3], y(3)),
            ),
        )
    }
}

/// One 8-row group (`nb` group blocks at `x`) against the activation `y`: lane r is row r's
/// `vec_dot`, bit for bit.
#[inline(always)]
unsafe fn q2_k_x8_group<const VNNI: bool>(nb: usize, x: *const u8, y: *const u8) -> __m256 {
    let low4 = _mm256_set1_epi16(0x0F);
    let mut sumf = _mm256_setzero_ps();
    for i in 0..nb {
        let g = x.add(i * X8_BYTES);
        let yb = y.add(i * Q8_K_BYTES);
        prefetch_ahead::<X8_BYTES>(g);
        let mut isum = _mm256_setzero_si256();
        let mut summs = _mm256_setzero_si256();
        for p in 0..8 {
            // lane r: row r's scale bytes of sub-blocks 2p, 2p + 1 as two i16
            let pair = _mm256_cvtepu8_epi16(load128(g.add(X8_SCALES + 16 * p)));
            let sc = _mm256_and_si256(pair, low4);
            let mn = _mm256_srli_epi16(pair, 4);
            // min * bsum of both sub-blocks (the two bsums are consecutive i16)
            let bsums = (yb.add(Q8_K_BSUMS + 4 * p) as *const i32).read_unaligned();
            summs = _mm256_add_epi32(summs, _mm256_madd_epi16(mn, _mm256_set1_epi32(bsums)));
            let s0 = x8_sub_block::<VNNI>(g.add(X8_QS + 64 * p), yb.add(Q8_K_QS + 32 * p));
            let s1 =
                x8_sub_block::<VNNI>(g.add(X8_QS + 64 * p + 32), yb.add(Q8_K_QS + 32 * p + 16));
            if VNNI {
                // |s| <= 16 * 3 * 128 fits an i16: put s0 and s1 side by side in each dword
                // and let one madd apply both scales.
                let s = _mm256_blend_epi16(s0, _mm256_slli_epi32(s1, 16), 0b1010_1010);
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(s, sc));
            } else {
                // each dword of s0 (s1) is two i16 halves of one sum: the scale goes on both
                let sc0 = _mm256_shuffle_epi8(sc, spread_dword(0));
                let sc1 = _mm256_shuffle_epi8(sc, spread_dword(1));
                isum = _mm256_add_epi32(
                    isum,
                    _mm256_add_epi32(_mm256_madd_epi16(s0, sc0), _mm256_madd_epi16(s1, sc1)),
                );
            }
        }
        // The scalar twin's float operations, in its order, one row per lane.
        let dy = _mm256_set1_ps(f32_at(yb));
        let dall = _mm256_mul_ps(dy, _mm256_cvtph_ps(load128(g)));
        let dmin = _mm256_mul_ps(dy, _mm256_cvtph_ps(load128(g.add(X8_DMIN))));
        let t = _mm256_sub_ps(
            _mm256_mul_ps(dall, _mm256_cvtepi32_ps(isum)),
            _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(summs)),
        );
        sumf = _mm256_add_ps(sumf, t);
    }
    sumf
}

/// `pshufb` mask that copies i16 element `e` (0 or 1) of each dword into both of its halves.
#[inline(always)]
unsafe fn spread_dword(e: i8) -> __m256i {
    let (a, b) = (2 * e, 2 * e + 1);
    _mm256_setr_epi8(
        a,
        b,
        a,
        b,
        4 + a,
        4 + b,
        4 + a,
        4 + b,
        8 + a,
        8 + b,
        8 + a,
        8 + b,
        12 + a,
        12 + b,
        12 + a,
        12 + b,
        a,
        b,
        a,
        b,
        4 + a,
        4 + b,
        4 + a,
        4 + b,
        8 + a,
        8 + b,
        8 + a,
        8 + b,
        12 + a,
        12 + b,
        12 + a,
        12 + b,
    )
}

#[inline(always)]
unsafe fn matvec_q2_k_x8<const VNNI: bool>(n: usize, packed: &[u8], act: &[u8], out: &mut [f32]) {
    let nb = n / QK_K;
    let row_bytes = nb * Q2_K_BYTES;
    if packed.len() < out.len() * row_bytes || act.len() < nb * Q8_K_BYTES {
        return;
    }
    let groups = out.len() / Q2_K_X8_ROWS;
    for g in 0..groups {
        let x = packed.as_ptr().add(g * Q2_K_X8_ROWS * row_bytes);
        let v = q2_k_x8_group::<VNNI>(nb, x, act.as_ptr());
        _mm256_storeu_ps(out.as_mut_ptr().add(g * Q2_K_X8_ROWS), v);
    }
    let tail = groups * Q2_K_X8_ROWS;
    for (r, y) in out.iter_mut().enumerate().skip(tail) {
        *y = vec_dot_q2_k_q8_k(n, &packed[r * row_bytes..(r + 1) * row_bytes], act);
    }
}

/// `out[r] = row r . act` for Q2_K rows repacked by [`repack_q2_k_x8`] (`out.len()` rows of
/// `n` elements), bit for bit the scalar twin on every row. Nothing is written if the slices
/// are short.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matvec_q2_k_x8_q8_k(n: usize, packed: &[u8], act: &[u8], out: &mut [f32]) {
    matvec_q2_k_x8::<false>(n, packed, act, out)
}

/// [`matvec_q2_k_x8_q8_k`] with VNNI's `vpdpbusd` (at 256-bit width): four codes times four
/// activations summed into the row's lane in one instruction, the same exact integers, so the
/// same bits.
///
/// # Safety
/// AVX2, FMA, F16C, AVX512F, AVX512BW, AVX512VL and AVX512-VNNI must be available
/// (`super::avx512_vnni_usable`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn matvec_q2_k_x8_q8_k_vnni(n: usize, packed: &[u8], act: &[u8], out: &mut [f32]) {
    matvec_q2_k_x8::<true>(n, packed, act, out)
}
