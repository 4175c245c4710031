//! AVX2 dot products of the 1-bit, 2-bit and ternary formats: Q1_0 and Q2_0 against Q8_0
//! activations, TQ1_0 against Q8_K, with the signature of `smolrun_core::quant::VecDotFn`.
//! Layouts and scalar truth: `smolrun_core::quant::{q1_0, q2_0, tq1_0}`.
//!
//! The weights are unpacked into unsigned bytes u (Q1_0: 2 * bit, so 0 or 2; Q2_0: the code
//! 0..3; TQ1_0: the base-3 digit 0..2), each meaning u - 1. `_mm256_maddubs_epi16(u, y)` is
//! exact for these (a pair is at most 2 * 3 * 128), and the offset is taken off as
//! `maddubs(1, y)`, so an activation of -128 is as exact as any other (negating it in a byte,
//! as `_mm256_sign_epi8` would, wraps).
//!
//! Bit for bit the scalar twins: each integer sum the scalar code converts to f32 (per Q8_0
//! block for Q1_0 and Q2_0, per super-block for TQ1_0) is summed exactly across the lanes
//! first, and the float operations that follow are the scalar ones in the same order. They
//! are few (one or four per 64-256 weights), so keeping the order costs little.
//!
//! Every function reads only whole blocks that lie inside both slices.
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use super::avx2::{f16_at, f32_at, load128, load256, Q8_0_BYTES, Q8_K_BYTES, Q8_K_QS, QK_K};
use core::arch::x86_64::*;

const Q1_0_ELEMS: usize = 128;
const Q1_0_BYTES: usize = 18; // d: f16, qs: [u8; 16] (bit j % 8 of byte j / 8 is element j)
const Q2_0_ELEMS: usize = 64;
const Q2_0_BYTES: usize = 18; // d: f16, qs: [u8; 16] (bits 2(j%4).. of byte j / 4)
const TQ1_0_BYTES: usize = 54; // qs: [u8; 48], qh: [u8; 4], d: f16 at 52

/// sum (u - 1) * y over 32 bytes, as 16 i16 lanes: |lane| <= 2 * 3 * 128 + 2 * 128.
#[inline(always)]
unsafe fn offset_pairs(u: __m256i, y: __m256i) -> __m256i {
    _mm256_sub_epi16(
        _mm256_maddubs_epi16(u, y),
        _mm256_maddubs_epi16(_mm256_set1_epi8(1), y),
    )
}

/// The sum of the 16 i16 lanes, exactly, as i32.
#[inline(always)]
unsafe fn hsum_epi16(v: __m256i) -> i32 {
    let v = _mm256_madd_epi16(v, _mm256_set1_epi16(1));
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// 32 sign bits (a little-endian u32: bit j % 8 of byte j / 8 is element j) as bytes 0 or 2.
#[inline(always)]
unsafe fn bits_to_twos(bits: u32) -> __m256i {
    // Byte j of the result takes source byte j / 8 (pshufb works within each 128-bit half,
    // and the word is broadcast to both), then tests its bit j % 8.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits as i32),
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_and_si256(set, _mm256_set1_epi8(2))
}

/// Q1_0 weights . Q8_0 activations (4 Q8_0 blocks per Q1_0 block). Bit-identical to
/// `smolrun_core::quant::q1_0::vec_dot`.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q1_0_q8_0(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / Q1_0_ELEMS)
        .min(w.len() / Q1_0_BYTES)
        .min(act.len() / (4 * Q8_0_BYTES));
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let x = w.as_ptr().add(i * Q1_0_BYTES);
        let ys = act.as_ptr().add(i * 4 * Q8_0_BYTES);
        let mut parts = [_mm256_setzero_si256(); 4];
        for (k, part) in parts.iter_mut().enumerate() {
            let bits = u32::from_le_bytes(*(x.add(2 + 4 * k) as *const [u8; 4]));
            let y = load256(ys.add(k * Q8_0_BYTES + 2));
            *part = offset_pairs(bits_to_twos(bits), y);
        }
        let d8 = |k: usize| u16::from_le_bytes(*(ys.add(k * Q8_0_BYTES) as *const [u8; 2]));
        let p = scaled_sums4(parts, [d8(0), d8(1), d8(2), d8(3)]);
        let mut sumi = 0.0f32;
        for p in p {
            sumi += p;
        }
        sumf += f16_at(x) * sumi;
    }
    sumf
}

/// Q1_0 weight rows . one Q8_0 activation row (`out.len()` rows of `n` elements back to back in
/// `w`). Bit-identical to `vec_dot_q1_0_q8_0` on every row.
///
/// Eight rows at a time, with row r in lane r of every float vector: each lane runs the scalar
/// twin's float operations in its order (`sumi += d8 * isum`, then `sumf += d * sumi`), so the
/// serial float chain that bounds the one-row kernel (four dependent adds per 128 weights) is
/// paid once per eight rows, and the activation's loads, its scales and its per-block sums
/// `maddubs(1, y)` are shared by the eight rows. The integer sums of the eight rows reach their
/// lanes through one hadd tree per Q8_0 block. Rows past the last eight run the one-row kernel.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matvec_q1_0_q8_0(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
    let nb = n / Q1_0_ELEMS;
    let w_row = nb * Q1_0_BYTES;
    let n_rows = out.len();
    if w.len() < n_rows * w_row || act.len() < nb * 4 * Q8_0_BYTES {
        return;
    }
    let mut r = 0;
    while r + 8 <= n_rows {
        let v = rows8_q1_0(nb, w.as_ptr().add(r * w_row), w_row, act.as_ptr());
        _mm256_storeu_ps(out.as_mut_ptr().add(r), v);
        r += 8;
    }
    while r < n_rows {
        out[r] = vec_dot_q1_0_q8_0(n, &w[r * w_row..(r + 1) * w_row], act);
        r += 1;
    }
}

/// [`matvec_q1_0_q8_0`] with AVX-512 VNNI at 256-bit width: a row's 32 sign bits for a Q8_0
/// block are an `__mmask32`, so the activation bytes whose bit is set are one masked move, and
/// `vpdpbusd(1, ·)` sums them four to a lane with no i16 step: sum (2 bit - 1) y becomes
/// 2 * (sum of the kept bytes) - (sum of all bytes), the last shared by the eight rows. Three
/// instructions per row and 32 weights instead of eight; the same exact integers, then the same
/// float operations in the same lanes, so the same bits as the AVX2 kernel and `vec_dot`.
///
/// # Safety
/// AVX2, FMA, F16C, AVX512F, AVX512BW, AVX512VL and AVX512-VNNI must be available
/// (`super::avx512_vnni_usable`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn matvec_q1_0_q8_0_vnni(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
    let nb = n / Q1_0_ELEMS;
    let w_row = nb * Q1_0_BYTES;
    let n_rows = out.len();
    if w.len() < n_rows * w_row || act.len() < nb * 4 * Q8_0_BYTES {
        return;
    }
    let mut r = 0;
    while r + 8 <= n_rows {
        let v = rows8_q1_0_vnni(nb, w.as_ptr().add(r * w_row), w_row, act.as_ptr());
        _mm256_storeu_ps(out.as_mut_ptr().add(r), v);
        r += 8;
    }
    while r < n_rows {
        out[r] = vec_dot_q1_0_q8_0(n, &w[r * w_row..(r + 1) * w_row], act);
        r += 1;
    }
}

#[inline(always)]
unsafe fn rows8_q1_0_vnni(nb: usize, x0: *const u8, stride: usize, y: *const u8) -> __m256 {
    let ones8 = _mm256_set1_epi8(1);
    let zero = _mm256_setzero_si256();
    let mut sumf = _mm256_setzero_ps();
    for i in 0..nb {
        let ys = y.add(i * 4 * Q8_0_BYTES);
        let xs = x0.add(i * Q1_0_BYTES);
        let mut sumi = _mm256_setzero_ps();
        for k in 0..4 {
            let yk = load256(ys.add(k * Q8_0_BYTES + 2));
            // the block's sum of all 32 activations, in every lane
            let all = _mm256_dpbusd_epi32(zero, ones8, yk);
            let all = _mm_add_epi32(
                _mm256_castsi256_si128(all),
                _mm256_extracti128_si256(all, 1),
            );
            let all = _mm_add_epi32(all, _mm_shuffle_epi32(all, 0b01_00_11_10));
            let all = _mm_add_epi32(all, _mm_shuffle_epi32(all, 0b10_11_00_01));
            let all = _mm256_broadcastd_epi32(all);
            let mut m = [zero; 8];
            for (r, m) in m.iter_mut().enumerate() {
                let bits = u32::from_le_bytes(*(xs.add(r * stride + 2 + 4 * k) as *const [u8; 4]));
                let kept = _mm256_maskz_mov_epi8(bits, yk);
                *m = _mm256_dpbusd_epi32(zero, ones8, kept);
            }
            let kept = row_sums8(m);
            let isum = _mm256_sub_epi32(_mm256_slli_epi32(kept, 1), all);
            let d8 = _mm256_set1_ps(f16_at(ys.add(k * Q8_0_BYTES)));
            sumi = _mm256_add_ps(sumi, _mm256_mul_ps(d8, _mm256_cvtepi32_ps(isum)));
        }
        sumf = _mm256_add_ps(sumf, _mm256_mul_ps(row_scales8(xs, stride), sumi));
    }
    sumf
}

/// The f16 scales of eight blocks `stride` bytes apart (one per row), as f32 in lanes 0..8.
#[inline(always)]
unsafe fn row_scales8(xs: *const u8, stride: usize) -> __m256 {
    let h = |r: usize| i16::from_le_bytes(*(xs.add(r * stride) as *const [u8; 2]));
    _mm256_cvtph_ps(_mm_setr_epi16(
        h(0),
        h(1),
        h(2),
        h(3),
        h(4),
        h(5),
        h(6),
        h(7),
    ))
}

/// The eight row sums of one Q8_0 block, lane r = sum of the eight i32 lanes of `m[r]`.
#[inline(always)]
unsafe fn row_sums8(m: [__m256i; 8]) -> __m256i {
    let h01 = _mm256_hadd_epi32(m[0], m[1]);
    let h23 = _mm256_hadd_epi32(m[2], m[3]);
    let h45 = _mm256_hadd_epi32(m[4], m[5]);
    let h67 = _mm256_hadd_epi32(m[6], m[7]);
    // per 128-bit half: the half's sums of rows 0..3 (and 4..7)
    let h0123 = _mm256_hadd_epi32(h01, h23);
    let h4567 = _mm256_hadd_epi32(h45, h67);
    let lo = _mm256_permute2x128_si256(h0123, h4567, 0x20);
    let hi = _mm256_permute2x128_si256(h0123, h4567, 0x31);
    _mm256_add_epi32(lo, hi)
}

/// Eight Q1_0 rows starting at `x0`, `stride` bytes apart, against the activation row `y`.
#[inline(always)]
unsafe fn rows8_q1_0(nb: usize, x0: *const u8, stride: usize, y: *const u8) -> __m256 {
    let ones8 = _mm256_set1_epi8(1);
    let ones16 = _mm256_set1_epi16(1);
    let mut sumf = _mm256_setzero_ps();
    for i in 0..nb {
        let ys = y.add(i * 4 * Q8_0_BYTES);
        let xs = x0.add(i * Q1_0_BYTES);
        let mut sumi = _mm256_setzero_ps();
        for k in 0..4 {
            let yk = load256(ys.add(k * Q8_0_BYTES + 2));
            // sum (2 bit - 1) y = maddubs(2 bit, y) - maddubs(1, y); the second is the row's
            // activation alone, shared by the eight rows
            let ysum = _mm256_maddubs_epi16(ones8, yk);
            let mut m = [_mm256_setzero_si256(); 8];
            for (r, m) in m.iter_mut().enumerate() {
                let bits = u32::from_le_bytes(*(xs.add(r * stride + 2 + 4 * k) as *const [u8; 4]));
                let p = _mm256_sub_epi16(_mm256_maddubs_epi16(bits_to_twos(bits), yk), ysum);
                *m = _mm256_madd_epi16(p, ones16);
            }
            let isum = _mm256_cvtepi32_ps(row_sums8(m));
            let d8 = _mm256_set1_ps(f16_at(ys.add(k * Q8_0_BYTES)));
            sumi = _mm256_add_ps(sumi, _mm256_mul_ps(d8, isum));
        }
        sumf = _mm256_add_ps(sumf, _mm256_mul_ps(row_scales8(xs, stride), sumi));
    }
    sumf
}

/// The exact integer sums of the four i16 vectors, each converted to f32 and multiplied by
/// its f16 scale (one rounding, as the scalar `d8 * sumi_block as f32`), in 4 lanes: the
/// reductions share their horizontal adds instead of running one after another.
#[inline(always)]
unsafe fn scaled_sums4(parts: [__m256i; 4], d: [u16; 4]) -> [f32; 4] {
    let ones = _mm256_set1_epi16(1);
    let m = parts.map(|p| _mm256_madd_epi16(p, ones));
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(m[0], m[1]), _mm256_hadd_epi32(m[2], m[3]));
    let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    let d = _mm_cvtph_ps(_mm_set_epi64x(
        0,
        (d[0] as u64 | (d[1] as u64) << 16 | (d[2] as u64) << 32 | (d[3] as u64) << 48) as i64,
    ));
    let mut out = [0f32; 4];
    _mm_storeu_ps(out.as_mut_ptr(), _mm_mul_ps(_mm_cvtepi32_ps(s), d));
    out
}

/// Q2_0 weights . Q8_0 activations (2 Q8_0 blocks per Q2_0 block). Bit-identical to
/// `smolrun_core::quant::q2_0::vec_dot`.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q2_0_q8_0(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / Q2_0_ELEMS)
        .min(w.len() / Q2_0_BYTES)
        .min(act.len() / (2 * Q8_0_BYTES));
    let three = _mm_set1_epi8(3);
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let x = w.as_ptr().add(i * Q2_0_BYTES);
        let y = act.as_ptr().add(i * 2 * Q8_0_BYTES);
        // Element 4b + s is field s of byte b: the four fields of all 16 bytes, then
        // interleaved byte by byte and pair by pair back into element order.
        let q = load128(x.add(2));
        let f0 = _mm_and_si128(q, three);
        let f1 = _mm_and_si128(_mm_srli_epi16(q, 2), three);
        let f2 = _mm_and_si128(_mm_srli_epi16(q, 4), three);
        let f3 = _mm_and_si128(_mm_srli_epi16(q, 6), three);
        let (a, b) = (_mm_unpacklo_epi8(f0, f1), _mm_unpacklo_epi8(f2, f3));
        let lo = _mm256_set_m128i(_mm_unpackhi_epi16(a, b), _mm_unpacklo_epi16(a, b));
        let (a, b) = (_mm_unpackhi_epi8(f0, f1), _mm_unpackhi_epi8(f2, f3));
        let hi = _mm256_set_m128i(_mm_unpackhi_epi16(a, b), _mm_unpacklo_epi16(a, b));
        let y1 = y.add(Q8_0_BYTES);
        let zero = _mm256_setzero_si256();
        let parts = [
            offset_pairs(lo, load256(y.add(2))),
            offset_pairs(hi, load256(y1.add(2))),
            zero,
            zero,
        ];
        let d8 = |y: *const u8| u16::from_le_bytes(*(y as *const [u8; 2]));
        let p = scaled_sums4(parts, [d8(y), d8(y1), 0, 0]);
        let mut sumi = 0.0f32;
        sumi += p[0];
        sumi += p[1];
        sumf += f16_at(x) * sumi;
    }
    sumf
}

/// Base-3 digit n of each byte b, given q = b * 3^n (mod 256): (3q) >> 8, which is
/// (q >= 86) + (q >= 171); returned as 0..=2.
#[inline(always)]
unsafe fn digits(q: __m256i) -> __m256i {
    let ge = |c: i8| _mm256_cmpeq_epi8(_mm256_max_epu8(q, _mm256_set1_epi8(c)), q);
    // Each comparison is -1 where true.
    _mm256_sub_epi8(
        _mm256_setzero_si256(),
        _mm256_add_epi8(ge(86), ge(171u8 as i8)),
    )
}

/// Times 3, byte by byte (mod 256).
#[inline(always)]
unsafe fn times3(q: __m256i) -> __m256i {
    _mm256_add_epi8(_mm256_add_epi8(q, q), q)
}

/// TQ1_0 weights . Q8_K activations. Bit-identical to `smolrun_core::quant::tq1_0::vec_dot`.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_tq1_0_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / TQ1_0_BYTES)
        .min(act.len() / Q8_K_BYTES);
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let x = w.as_ptr().add(i * TQ1_0_BYTES);
        let y = act.as_ptr().add(i * Q8_K_BYTES);
        let q8 = y.add(Q8_K_QS);
        // i16 lanes: 8 chunks of at most 768 each.
        let mut acc = _mm256_setzero_si256();
        // qs[0..32]: digit n is elements 32n..32n+32.
        let mut q = load256(x);
        for n in 0..5 {
            acc = _mm256_add_epi16(acc, offset_pairs(digits(q), load256(q8.add(32 * n))));
            q = times3(q);
        }
        // qs[32..48]: digit n is elements 160 + 16n..: digits n and n + 1 side by side make
        // 32 consecutive elements.
        let c = load128(x.add(32));
        let c3 = _mm_add_epi8(_mm_add_epi8(c, c), c);
        let mut q = _mm256_set_m128i(c3, c);
        for n in [0, 2] {
            acc = _mm256_add_epi16(acc, offset_pairs(digits(q), load256(q8.add(160 + 16 * n))));
            q = times3(times3(q));
        }
        // Digit 4 of qs[32..48] (elements 224..240) and qh[0..4] (240..256: digit n of byte
        // j is element 240 + 4n + j): the word times 1, 3, 9, 27 in its four 32-bit lanes.
        let h = _mm_set1_epi32(i32::from_le_bytes(*(x.add(48) as *const [u8; 4])));
        let h3 = _mm_add_epi8(_mm_add_epi8(h, h), h);
        let h9 = _mm_add_epi8(_mm_add_epi8(h3, h3), h3);
        let h27 = _mm_add_epi8(_mm_add_epi8(h9, h9), h9);
        let h = _mm_blend_epi32(_mm_blend_epi32(h, h3, 0b0010), h9, 0b0100);
        let h = _mm_blend_epi32(h, h27, 0b1000);
        let q = _mm256_set_m128i(h, _mm256_extracti128_si256(q, 0));
        acc = _mm256_add_epi16(acc, offset_pairs(digits(q), load256(q8.add(224))));
        let sum = hsum_epi16(acc);
        sumf += sum as f32 * (f16_at(x.add(52)) * f32_at(y));
    }
    sumf
}

// =============================================================================================
// Q1_0 rows interleaved by 16 (`q1_0_x16`, AVX-512 VNNI): the row in the lane.
// =============================================================================================
//
// The eight-row kernels above get each row's integer sum of a Q8_0 block as eight lanes and
// fold the eight rows into one vector with six `vphaddd` (three uops each, port 5) and two
// permutes: the fold, not the multiply, is most of their work. Here the weights are repacked
// so that the fold never happens: one 64-bit mask holds 4 weights of each of 16 rows (bit
// 4r + t is row r's weight 4g + t), a masked move turns it into bytes 2 or 0 with row r in
// dword r of a 512-bit vector, and `vpdpbusd` against the broadcast activation dword g adds
// sum 2 bit * y of those four weights into lane r. Eight such steps starting from -sum y (the
// block's activations, summed once for the 16 rows) leave sum (2 bit - 1) y, the scalar twin's
// exact integer, in lane r; the float steps then run in the lanes in the scalar order, as
// above. (An 8-row version of this at 256-bit width measured 1.4x slower per row: each
// broadcast, mask load and instruction serves half the rows.)
//
// Group block (288 bytes, the size of the 16 rows' blocks in the file): d: 16 x f16 at 0 (row
// r at 2r); then for Q8_0 block k (0..3) and activation dword g (0..7), the u64 mask at
// 32 + 64k + 8g. Rows that fill no group follow the groups verbatim and run the one-row kernel.

/// Rows per group of the `q1_0_x16` layout.
pub const Q1_0_X16_ROWS: usize = 16;
const Q1_X16_BYTES: usize = Q1_0_X16_ROWS * Q1_0_BYTES;

/// Bytes of `n_rows` Q1_0 rows of `n_cols` elements in the `q1_0_x16` layout (as in the
/// file); `None` unless `n_cols` is a whole number of blocks.
pub fn q1_0_x16_bytes(n_rows: usize, n_cols: usize) -> Option<usize> {
    if !n_cols.is_multiple_of(Q1_0_ELEMS) {
        return None;
    }
    n_rows
        .checked_mul(n_cols / Q1_0_ELEMS)?
        .checked_mul(Q1_0_BYTES)
}

/// One group block from the same block of 16 rows (18 bytes each).
fn pack_q1_0_x16(rows: [&[u8]; Q1_0_X16_ROWS], out: &mut [u8]) {
    out[32..Q1_X16_BYTES].fill(0);
    for (r, b) in rows.iter().enumerate() {
        out[2 * r..2 * r + 2].copy_from_slice(&b[..2]);
        for e in 0..Q1_0_ELEMS {
            let bit = (b[2 + e / 8] >> (e % 8)) & 1;
            // element e = 32k + 4g + t goes to bit 4r + t of mask (k, g)
            let (kg, t) = (e / 4, e % 4);
            out[32 + 8 * kg + (4 * r + t) / 8] |= bit << ((4 * r + t) % 8);
        }
    }
}

/// Repacks `n_rows` Q1_0 rows (file layout) into `q1_0_x16`; `None`, writing nothing, if
/// `src` or `dst` has the wrong size.
pub fn repack_q1_0_x16(src: &[u8], n_rows: usize, n_cols: usize, dst: &mut [u8]) -> Option<()> {
    let len = q1_0_x16_bytes(n_rows, n_cols)?;
    if src.len() != len || dst.len() != len {
        return None;
    }
    let nb = n_cols / Q1_0_ELEMS;
    let row_bytes = nb * Q1_0_BYTES;
    let groups = n_rows / Q1_0_X16_ROWS;
    for g in 0..groups {
        for i in 0..nb {
            let rows = core::array::from_fn(|r| {
                &src[(Q1_0_X16_ROWS * g + r) * row_bytes + i * Q1_0_BYTES..][..Q1_0_BYTES]
            });
            pack_q1_0_x16(
                rows,
                &mut dst[(g * nb + i) * Q1_X16_BYTES..][..Q1_X16_BYTES],
            );
        }
    }
    let packed = groups * Q1_0_X16_ROWS * row_bytes;
    dst[packed..].copy_from_slice(&src[packed..]);
    Some(())
}

/// `out[r] = row r . act` for Q1_0 rows repacked by [`repack_q1_0_x16`] (`out.len()` rows of
/// `n` elements), bit for bit `vec_dot_q1_0_q8_0` (and the scalar twin) on every row. Nothing
/// is written if the slices are short.
///
/// # Safety
/// AVX2, FMA, F16C, AVX512F, AVX512BW, AVX512VL and AVX512-VNNI must be available
/// (`super::avx512_vnni_usable`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn matvec_q1_0_x16_q8_0_vnni(n: usize, packed: &[u8], act: &[u8], out: &mut [f32]) {
    let nb = n / Q1_0_ELEMS;
    let row_bytes = nb * Q1_0_BYTES;
    if packed.len() < out.len() * row_bytes || act.len() < nb * 4 * Q8_0_BYTES {
        return;
    }
    let groups = out.len() / Q1_0_X16_ROWS;
    for g in 0..groups {
        let x = packed.as_ptr().add(g * Q1_0_X16_ROWS * row_bytes);
        let v = q1_0_x16_group(nb, x, act.as_ptr());
        _mm512_storeu_ps(out.as_mut_ptr().add(g * Q1_0_X16_ROWS), v);
    }
    let tail = groups * Q1_0_X16_ROWS;
    for (r, y) in out.iter_mut().enumerate().skip(tail) {
        *y = vec_dot_q1_0_q8_0(n, &packed[r * row_bytes..(r + 1) * row_bytes], act);
    }
}

/// One 16-row group (`nb` group blocks at `x`) against the activation row `y`: lane r is row
/// r's dot.
#[inline(always)]
unsafe fn q1_0_x16_group(nb: usize, x: *const u8, y: *const u8) -> __m512 {
    let ones8 = _mm256_set1_epi8(1);
    let twos8 = _mm512_set1_epi8(2);
    let mut sumf = _mm512_setzero_ps();
    for i in 0..nb {
        let xs = x.add(i * Q1_X16_BYTES);
        let ys = y.add(i * 4 * Q8_0_BYTES);
        let mut sumi = _mm512_setzero_ps();
        for k in 0..4 {
            let yk = ys.add(k * Q8_0_BYTES + 2);
            // -(sum of the block's 32 activations) in every lane
            let all = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones8, load256(yk));
            let all = _mm256_add_epi32(all, _mm256_shuffle_epi32(all, 0b01_00_11_10));
            let all = _mm256_add_epi32(all, _mm256_shuffle_epi32(all, 0b10_11_00_01));
            let all = _mm_add_epi32(
                _mm256_castsi256_si128(all),
                _mm256_extracti128_si256(all, 1),
            );
            let mut isum = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_broadcastd_epi32(all));
            let masks = xs.add(32 + 64 * k);
            for g in 0..8 {
                let m = (masks.add(8 * g) as *const u64).read_unaligned();
                let yg = _mm512_set1_epi32((yk.add(4 * g) as *const i32).read_unaligned());
                isum = _mm512_dpbusd_epi32(isum, _mm512_maskz_mov_epi8(m, twos8), yg);
            }
            let d8 = _mm512_set1_ps(f16_at(ys.add(k * Q8_0_BYTES)));
            sumi = _mm512_add_ps(sumi, _mm512_mul_ps(d8, _mm512_cvtepi32_ps(isum)));
        }
        sumf = _mm512_add_ps(sumf, _mm512_mul_ps(_mm512_cvtph_ps(load256(xs)), sumi));
    }
    sumf
}
