//! AVX2 + FMA + F16C faces of the attention loops over an f16 KV cache, bit for bit equal to
//! the scalar code in `smolrun_core::math::attention_head` (the golden tests depend on those
//! bits: they reproduce llama.cpp's flash attention).
//!
//! Why the bits can be the same:
//! - `vcvtph2ps` converts f16 to f32 exactly, like `half::f16::to_f32` (every f16, subnormals
//!   included, is an f32; NaNs come out quiet with the payload kept, as `half` does).
//! - `vcvtps2ph` with round-to-nearest-even is IEEE's f32 -> f16 conversion, which is what
//!   `half::f16::from_f32` implements in software (overflow to inf, subnormal results rounded).
//! - `vfmadd` rounds once, like `libm::fmaf`.
//! - Every sum keeps the scalar code's order: the same lanes, the same pairwise reduction, the
//!   same sequential chains; only independent chains run side by side in vector lanes.
//!
//! Keys and values are read as rows of `dim` f16 at `stride` apart (one KV head of the cache
//! at consecutive positions). Each function clamps the number of rows to what the slice
//! holds, so a short slice gives fewer results, never an out-of-bounds read.
//!
//! # Safety (all functions)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use core::arch::x86_64::*;

/// How many rows of `dim` elements at `stride` apart `data` holds.
#[inline(always)]
fn rows_in(data: &[u16], dim: usize, stride: usize) -> usize {
    if dim == 0 || data.len() < dim {
        0
    } else {
        (data.len() - dim) / stride.max(1) + 1
    }
}

#[inline(always)]
unsafe fn f16x8(p: *const u16) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_to_f32(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// `scores[i]` = the dot product of `q` with key row `i`, summed like
/// `smolrun_core::math::dot_f16_in_lanes`: 64 lanes (here 8 registers of 8) each take every
/// 64th product with a fused multiply-add, then registers 4..7 are added onto 0..3, 2,3 onto
/// 0,1, 1 onto 0, and the 8 lanes are halved to 4, 2, 1; the dimensions past the last whole
/// 64 are added one by one in f64 (f32 products), as the scalar code does.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn key_dots_lanes64(q: &[f32], keys: &[u16], stride: usize, scores: &mut [f32]) {
    let dim = q.len();
    let n = scores.len().min(rows_in(keys, dim, stride));
    let n_full = dim / 64 * 64;
    let qp = q.as_ptr();
    for (i, score) in scores[..n].iter_mut().enumerate() {
        let kp = keys.as_ptr().add(i * stride);
        let mut acc = [_mm256_setzero_ps(); 8];
        let mut c = 0;
        while c < n_full {
            for (r, a) in acc.iter_mut().enumerate() {
                let o = c + r * 8;
                *a = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(o)), f16x8(kp.add(o)), *a);
            }
            c += 64;
        }
        let r0 = _mm256_add_ps(acc[0], acc[4]);
        let r1 = _mm256_add_ps(acc[1], acc[5]);
        let r2 = _mm256_add_ps(acc[2], acc[6]);
        let r3 = _mm256_add_ps(acc[3], acc[7]);
        let r0 = _mm256_add_ps(r0, r2);
        let r1 = _mm256_add_ps(r1, r3);
        *score = finish_key_dot(_mm256_add_ps(r0, r1), qp, kp, n_full, dim);
    }
}

/// The end of a key's dot product from its 8 lane sums `t8`: halved to 4, 2, 1 (lanes
/// l + 4 onto l, then l + 2, then 1 onto 0), then the dimensions past the last whole 64
/// added one by one in f64 (f32 products), as `dot_f16_in_lanes` does.
#[inline(always)]
unsafe fn finish_key_dot(
    t8: __m256,
    qp: *const f32,
    kp: *const u16,
    n_full: usize,
    dim: usize,
) -> f32 {
    let t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
    // [t4[0] + t4[2], t4[1] + t4[3], ..], then lane 0 + lane 1.
    let t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
    let t1 = _mm_add_ss(t2, _mm_movehdup_ps(t2));
    let mut sum = _mm_cvtss_f32(t1) as f64;
    for d in n_full..dim {
        sum += (*qp.add(d) * f16_to_f32(*kp.add(d))) as f64;
    }
    sum as f32
}

/// Transposes 8 rows of 8 u16 into 8 columns: `out[m]` holds element `m` of rows 0..7.
#[inline(always)]
unsafe fn transpose_8x8_u16(a: [__m128i; 8]) -> [__m128i; 8] {
    let t0 = _mm_unpacklo_epi16(a[0], a[1]);
    let t1 = _mm_unpackhi_epi16(a[0], a[1]);
    let t2 = _mm_unpacklo_epi16(a[2], a[3]);
    let t3 = _mm_unpackhi_epi16(a[2], a[3]);
    let t4 = _mm_unpacklo_epi16(a[4], a[5]);
    let t5 = _mm_unpackhi_epi16(a[4], a[5]);
    let t6 = _mm_unpacklo_epi16(a[6], a[7]);
    let t7 = _mm_unpackhi_epi16(a[6], a[7]);
    let u0 = _mm_unpacklo_epi32(t0, t2);
    let u1 = _mm_unpackhi_epi32(t0, t2);
    let u2 = _mm_unpacklo_epi32(t4, t6);
    let u3 = _mm_unpackhi_epi32(t4, t6);
    let u4 = _mm_unpacklo_epi32(t1, t3);
    let u5 = _mm_unpackhi_epi32(t1, t3);
    let u6 = _mm_unpacklo_epi32(t5, t7);
    let u7 = _mm_unpackhi_epi32(t5, t7);
    [
        _mm_unpacklo_epi64(u0, u2),
        _mm_unpackhi_epi64(u0, u2),
        _mm_unpacklo_epi64(u1, u3),
        _mm_unpackhi_epi64(u1, u3),
        _mm_unpacklo_epi64(u4, u6),
        _mm_unpackhi_epi64(u4, u6),
        _mm_unpacklo_epi64(u5, u7),
        _mm_unpackhi_epi64(u5, u7),
    ]
}

/// `scores[i]` = the dot product of `q` with key row `i` as Rust's `Iterator::sum` of the f32
/// products computes it: one sequential chain per key, starting at -0.0, each product rounded
/// before its addition. The chain of one key cannot be split, so the lanes run over keys
/// instead: 8 keys at a time, their rows transposed 8 dimensions at a time.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn key_dots_sequential(q: &[f32], keys: &[u16], stride: usize, scores: &mut [f32]) {
    let dim = q.len();
    let n = scores.len().min(rows_in(keys, dim, stride));
    let dim8 = dim / 8 * 8;
    let qp = q.as_ptr();
    let mut i0 = 0;
    while i0 + 8 <= n {
        let kp = keys.as_ptr().add(i0 * stride);
        let mut acc = _mm256_set1_ps(-0.0);
        let mut d = 0;
        while d < dim8 {
            let mut rows = [_mm_setzero_si128(); 8];
            for (j, r) in rows.iter_mut().enumerate() {
                *r = _mm_loadu_si128(kp.add(j * stride + d) as *const __m128i);
            }
            for (m, col) in transpose_8x8_u16(rows).into_iter().enumerate() {
                let prod = _mm256_mul_ps(_mm256_set1_ps(*qp.add(d + m)), _mm256_cvtph_ps(col));
                acc = _mm256_add_ps(acc, prod);
            }
            d += 8;
        }
        for d in dim8..dim {
            let mut col = [0u16; 8];
            for (j, c) in col.iter_mut().enumerate() {
                *c = *kp.add(j * stride + d);
            }
            let col = _mm256_cvtph_ps(_mm_loadu_si128(col.as_ptr() as *const __m128i));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(*qp.add(d)), col));
        }
        _mm256_storeu_ps(scores.as_mut_ptr().add(i0), acc);
        i0 += 8;
    }
    for (i, score) in scores[..n].iter_mut().enumerate().skip(i0) {
        let kp = keys.as_ptr().add(i * stride);
        let mut sum = -0.0f32;
        for d in 0..dim {
            sum += *qp.add(d) * f16_to_f32(*kp.add(d));
        }
        *score = sum;
    }
}

/// `out[d] += weights[i] * value_i[d]` for the value rows `i` in order (each product rounded,
/// then the sum): the f32 kernel's weighted sum. `out` stays in registers 32 dimensions at a
/// time while all rows go by.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn weighted_values(out: &mut [f32], weights: &[f32], values: &[u16], stride: usize) {
    let dim = out.len();
    let n = weights.len().min(rows_in(values, dim, stride));
    let (op, vp) = (out.as_mut_ptr(), values.as_ptr());
    let mut d = 0;
    while d + 32 <= dim {
        let mut acc = [
            _mm256_loadu_ps(op.add(d)),
            _mm256_loadu_ps(op.add(d + 8)),
            _mm256_loadu_ps(op.add(d + 16)),
            _mm256_loadu_ps(op.add(d + 24)),
        ];
        for (i, &w) in weights[..n].iter().enumerate() {
            let w = _mm256_set1_ps(w);
            let row = vp.add(i * stride + d);
            for (r, a) in acc.iter_mut().enumerate() {
                *a = _mm256_add_ps(*a, _mm256_mul_ps(w, f16x8(row.add(r * 8))));
            }
        }
        for (r, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(op.add(d + r * 8), *a);
        }
        d += 32;
    }
    while d + 8 <= dim {
        let mut acc = _mm256_loadu_ps(op.add(d));
        for (i, &w) in weights[..n].iter().enumerate() {
            let v = f16x8(vp.add(i * stride + d));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(w), v));
        }
        _mm256_storeu_ps(op.add(d), acc);
        d += 8;
    }
    for d in d..dim {
        let mut acc = *op.add(d);
        for (i, &w) in weights[..n].iter().enumerate() {
            acc += w * f16_to_f32(*vp.add(i * stride + d));
        }
        *op.add(d) = acc;
    }
}

/// f32 -> nearest f16 (ties to even) -> f32, 8 lanes.
#[inline(always)]
unsafe fn round_f16(x: __m256) -> __m256 {
    _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x))
}

/// f32 -> nearest f16 (ties to even) -> f32, one value.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn round_f16_1(x: f32) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
        _mm_set_ss(x),
    )))
}

/// `out[d] = f16(out[d] * ms)`: the f16 accumulator rescaled when a new maximum score
/// arrives.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rescale_f16(out: &mut [f32], ms: f32) {
    let (dim, op) = (out.len(), out.as_mut_ptr());
    let m = _mm256_set1_ps(ms);
    let mut d = 0;
    while d + 8 <= dim {
        let x = _mm256_mul_ps(_mm256_loadu_ps(op.add(d)), m);
        _mm256_storeu_ps(op.add(d), round_f16(x));
        d += 8;
    }
    for d in d..dim {
        *op.add(d) = round_f16_1(*op.add(d) * ms);
    }
}

/// `out[d] = f16(fma(value[d], vs, out[d]))`: one value row added to the f16 accumulator.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn accumulate_f16(out: &mut [f32], value: &[u16], vs: f32) {
    let dim = out.len().min(value.len());
    let (op, vp) = (out.as_mut_ptr(), value.as_ptr());
    let s = _mm256_set1_ps(vs);
    let mut d = 0;
    while d + 8 <= dim {
        let x = _mm256_fmadd_ps(f16x8(vp.add(d)), s, _mm256_loadu_ps(op.add(d)));
        _mm256_storeu_ps(op.add(d), round_f16(x));
        d += 8;
    }
    for d in d..dim {
        let x = _mm_fmadd_ss(
            _mm_set_ss(f16_to_f32(*vp.add(d))),
            _mm_set_ss(vs),
            _mm_set_ss(*op.add(d)),
        );
        *op.add(d) = round_f16_1(_mm_cvtss_f32(x));
    }
}

/// [`rescale_f16`] then [`accumulate_f16`] for each value row in order, the rescale only where
/// `ms[i] != 1.0` (`smolrun_core::math::accumulate_rows_f16`): 64 dimensions of the
/// accumulator stay in 8 registers while every row goes by, then the next 64. The same
/// operations per element as the one-row loops, so the same bits.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn accumulate_rows_f16(
    out: &mut [f32],
    values: &[u16],
    stride: usize,
    ms: &[f32],
    vs: &[f32],
) {
    let dim = out.len();
    let n = ms.len().min(vs.len()).min(rows_in(values, dim, stride));
    let (op, vp) = (out.as_mut_ptr(), values.as_ptr());
    let mut d = 0;
    while d + 64 <= dim {
        let mut acc = [_mm256_setzero_ps(); 8];
        for (r, a) in acc.iter_mut().enumerate() {
            *a = _mm256_loadu_ps(op.add(d + 8 * r));
        }
        for i in 0..n {
            let (m, v) = (*ms.get_unchecked(i), *vs.get_unchecked(i));
            if m != 1.0 {
                let m = _mm256_set1_ps(m);
                for a in acc.iter_mut() {
                    *a = round_f16(_mm256_mul_ps(*a, m));
                }
            }
            let v = _mm256_set1_ps(v);
            let row = vp.add(i * stride + d);
            for (r, a) in acc.iter_mut().enumerate() {
                *a = round_f16(_mm256_fmadd_ps(f16x8(row.add(8 * r)), v, *a));
            }
        }
        for (r, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(op.add(d + 8 * r), *a);
        }
        d += 64;
    }
    rows_tail_f16(out, d, values, stride, &ms[..n], &vs[..n]);
}

/// Dimensions `d0..` of the accumulator through every row (`ms.len()` of them, all within
/// `values`), one row at a time with the one-row loops: the tail of the register-blocked
/// `accumulate_rows_f16` faces.
#[inline(always)]
unsafe fn rows_tail_f16(
    out: &mut [f32],
    d0: usize,
    values: &[u16],
    stride: usize,
    ms: &[f32],
    vs: &[f32],
) {
    let rest = &mut out[d0..];
    if rest.is_empty() {
        return;
    }
    for (i, (&ms, &vs)) in ms.iter().zip(vs).enumerate() {
        if ms != 1.0 {
            rescale_f16(rest, ms);
        }
        accumulate_f16(rest, &values[i * stride + d0..][..rest.len()], vs);
    }
}

/// [`key_dots_lanes64`] with AVX-512: the 64 lanes are 4 registers of 16, reduced as the
/// AVX2 face reduces its 8 registers of 8 (lanes 32..63 onto 0..31, 16..31 onto 0..15, then
/// halves of 8, 4, 2, 1), so the same bits.
///
/// # Safety
/// AVX2, FMA, F16C and AVX512F must be available.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub unsafe fn key_dots_lanes64_512(q: &[f32], keys: &[u16], stride: usize, scores: &mut [f32]) {
    let dim = q.len();
    let n = scores.len().min(rows_in(keys, dim, stride));
    let n_full = dim / 64 * 64;
    let qp = q.as_ptr();
    for (i, score) in scores[..n].iter_mut().enumerate() {
        let kp = keys.as_ptr().add(i * stride);
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut c = 0;
        while c < n_full {
            for (r, a) in acc.iter_mut().enumerate() {
                let o = c + r * 16;
                let k = _mm512_cvtph_ps(_mm256_loadu_si256(kp.add(o) as *const __m256i));
                *a = _mm512_fmadd_ps(_mm512_loadu_ps(qp.add(o)), k, *a);
            }
            c += 64;
        }
        let r0 = _mm512_add_ps(acc[0], acc[2]);
        let r1 = _mm512_add_ps(acc[1], acc[3]);
        let r = _mm512_add_ps(r0, r1);
        // The upper 8 floats taken as 4 doubles: `extractf64x4` is AVX512F, where
        // `extractf32x8` is AVX512DQ, which this function does not enable (so it was a call).
        let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(r)));
        let t8 = _mm256_add_ps(_mm512_castps512_ps256(r), high);
        *score = finish_key_dot(t8, qp, kp, n_full, dim);
    }
}

/// f32 -> nearest f16 (ties to even) -> f32, 16 lanes.
#[inline(always)]
unsafe fn round_f16_16(x: __m512) -> __m512 {
    _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x))
}

/// [`accumulate_rows_f16`] with AVX-512: 128 dimensions of the accumulator in 8 registers of
/// 16, then 16 at a time; the last dimensions (fewer than 16) through the AVX2 loops.
///
/// # Safety
/// AVX2, FMA, F16C and AVX512F must be available.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub unsafe fn accumulate_rows_f16_512(
    out: &mut [f32],
    values: &[u16],
    stride: usize,
    ms: &[f32],
    vs: &[f32],
) {
    let dim = out.len();
    let n = ms.len().min(vs.len()).min(rows_in(values, dim, stride));
    let (op, vp) = (out.as_mut_ptr(), values.as_ptr());
    let mut d = 0;
    while d + 16 <= dim {
        // 8 registers while 128 dimensions remain, then one.
        if d + 128 <= dim {
            rows_f16_512::<8>(op.add(d), vp.add(d), stride, n, ms, vs);
            d += 128;
        } else {
            rows_f16_512::<1>(op.add(d), vp.add(d), stride, n, ms, vs);
            d += 16;
        }
    }
    rows_tail_f16(out, d, values, stride, &ms[..n], &vs[..n]);
}

/// `R` registers of 16 accumulator values at `op` through rows `0..n` of the values at `vp`.
#[inline(always)]
unsafe fn rows_f16_512<const R: usize>(
    op: *mut f32,
    vp: *const u16,
    stride: usize,
    n: usize,
    ms: &[f32],
    vs: &[f32],
) {
    let mut acc = [_mm512_setzero_ps(); R];
    for (r, a) in acc.iter_mut().enumerate() {
        *a = _mm512_loadu_ps(op.add(16 * r));
    }
    for i in 0..n {
        let (m, v) = (*ms.get_unchecked(i), *vs.get_unchecked(i));
        if m != 1.0 {
            let m = _mm512_set1_ps(m);
            for a in acc.iter_mut() {
                *a = round_f16_16(_mm512_mul_ps(*a, m));
            }
        }
        let v = _mm512_set1_ps(v);
        let row = vp.add(i * stride);
        for (r, a) in acc.iter_mut().enumerate() {
            let x = _mm512_cvtph_ps(_mm256_loadu_si256(row.add(16 * r) as *const __m256i));
            *a = round_f16_16(_mm512_fmadd_ps(x, v, *a));
        }
    }
    for (r, a) in acc.iter().enumerate() {
        _mm512_storeu_ps(op.add(16 * r), *a);
    }
}

// =============================================================================================
// A q8_0 KV cache (`smolrun_core::kv_q8`): the keys' Q8_0 dots with the quantized query, and
// the dequantized value rows into an f32 accumulator, bit for bit `kv_q8::key_dots` and
// `kv_q8::accumulate_rows`. The integer sums are exact; each block's float steps are the
// scalar code's (isum as f32 * (dk * dq), added block after block; q as f32 * d, then one
// fused multiply-add per value).
// =============================================================================================

/// Bytes of a Q8_0 block and values in it.
const Q8_BYTES: usize = 34;
const Q8_ELEMS: usize = 32;

/// How many rows of `bytes` bytes at `stride` apart `data` holds.
#[inline(always)]
fn byte_rows_in(data: &[u8], bytes: usize, stride: usize) -> usize {
    if bytes == 0 || data.len() < bytes {
        0
    } else {
        (data.len() - bytes) / stride.max(1) + 1
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_scale(p: *const u8) -> f32 {
    f16_to_f32(u16::from_le_bytes([*p, *p.add(1)]))
}

/// The exact i32 sum of the products of 32 signed bytes at `a` and at `b`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_isum(a: *const u8, b: *const u8) -> i32 {
    let ld = |p: *const u8| _mm256_cvtepi8_epi16(_mm_loadu_si128(p as *const __m128i));
    let s = _mm256_add_epi32(
        _mm256_madd_epi16(ld(a), ld(b)),
        _mm256_madd_epi16(ld(a.add(16)), ld(b.add(16))),
    );
    let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// `scores[i]` = the Q8_0 dot of the quantized query `qq` (whole blocks) with key row `i`,
/// rows at `stride` bytes apart: `smolrun_core::kv_q8::key_dots`.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn key_dots_q8_0(qq: &[u8], keys: &[u8], stride: usize, scores: &mut [f32]) {
    let nb = qq.len() / Q8_BYTES;
    let n = scores.len().min(byte_rows_in(keys, nb * Q8_BYTES, stride));
    let qp = qq.as_ptr();
    for (i, score) in scores[..n].iter_mut().enumerate() {
        let kp = keys.as_ptr().add(i * stride);
        let mut sum = 0f32;
        for b in 0..nb {
            let (k, q) = (kp.add(b * Q8_BYTES), qp.add(b * Q8_BYTES));
            let isum = q8_isum(k.add(2), q.add(2));
            sum += isum as f32 * (q8_scale(k) * q8_scale(q));
        }
        *score = sum;
    }
}

/// For each value row `i` in order: `out *= ms[i]` where it is not 1, then (unless
/// `vs[i] == 0`, a skipped row, not read) `out[d] = fma(q[d] as f32 * scale, vs[i], out[d])`:
/// `smolrun_core::kv_q8::accumulate_rows`. 64 values of the accumulator stay in 8 registers
/// while every row goes by, then the next 64 (a last 32 in 4).
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn accumulate_rows_q8_0(
    out: &mut [f32],
    values: &[u8],
    stride: usize,
    ms: &[f32],
    vs: &[f32],
) {
    let nb = out.len() / Q8_ELEMS;
    let n = ms
        .len()
        .min(vs.len())
        .min(byte_rows_in(values, nb * Q8_BYTES, stride));
    let (op, vp) = (out.as_mut_ptr(), values.as_ptr());
    let mut b = 0;
    while b + 2 <= nb {
        rows_q8_0::<2>(
            op.add(b * Q8_ELEMS),
            vp.add(b * Q8_BYTES),
            stride,
            n,
            ms,
            vs,
        );
        b += 2;
    }
    if b < nb {
        rows_q8_0::<1>(
            op.add(b * Q8_ELEMS),
            vp.add(b * Q8_BYTES),
            stride,
            n,
            ms,
            vs,
        );
    }
    // Values past the last whole block are only rescaled, as the scalar code does.
    for d in nb * Q8_ELEMS..out.len() {
        for &m in &ms[..n] {
            if m != 1.0 {
                *op.add(d) *= m;
            }
        }
    }
}

/// `B` blocks (32 values each, 4 registers) of the accumulator at `op` through rows `0..n` of
/// the values at `vp`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_q8_0<const B: usize>(
    op: *mut f32,
    vp: *const u8,
    stride: usize,
    n: usize,
    ms: &[f32],
    vs: &[f32],
) {
    let mut acc = [[_mm256_setzero_ps(); 4]; B];
    for (b, regs) in acc.iter_mut().enumerate() {
        for (r, a) in regs.iter_mut().enumerate() {
            *a = _mm256_loadu_ps(op.add(b * Q8_ELEMS + 8 * r));
        }
    }
    for i in 0..n {
        let (m, v) = (*ms.get_unchecked(i), *vs.get_unchecked(i));
        if m != 1.0 {
            let m = _mm256_set1_ps(m);
            for a in acc.iter_mut().flatten() {
                *a = _mm256_mul_ps(*a, m);
            }
        }
        if v == 0.0 {
            continue;
        }
        let w = _mm256_set1_ps(v);
        for (b, regs) in acc.iter_mut().enumerate() {
            let blk = vp.add(i * stride + b * Q8_BYTES);
            let d = _mm256_set1_ps(q8_scale(blk));
            for (r, a) in regs.iter_mut().enumerate() {
                let q = _mm_loadl_epi64(blk.add(2 + 8 * r) as *const __m128i);
                let x = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
                *a = _mm256_fmadd_ps(x, w, *a);
            }
        }
    }
    for (b, regs) in acc.iter().enumerate() {
        for (r, a) in regs.iter().enumerate() {
            _mm256_storeu_ps(op.add(b * Q8_ELEMS + 8 * r), *a);
        }
    }
}
