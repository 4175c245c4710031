//! Little helpers every block format shares, like ggml-common.h / ggml-impl.h: half-precision
//! fields read from unaligned bytes, the bf16 rounding rule, and ggml's rounding tricks.
//!
//! Blocks are read straight from the mapped file, at any alignment, so fields are decoded from
//! bytes with `from_le_bytes` instead of casting the slice to a struct.

use half::f16;

/// The f16 stored little-endian at `bytes[off..off + 2]`, widened to f32 (exact).
#[inline(always)]
pub(crate) fn f16_at(bytes: &[u8], off: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([bytes[off], bytes[off + 1]])).to_f32()
}

/// Stores `v` rounded to f16 at `bytes[off..off + 2]` the way ggml's reference
/// `ggml_compute_fp32_to_fp16` does: round to nearest even, overflow to infinity, and every NaN
/// to the canonical quiet NaN 0x7E00 with its sign (the `half` crate would keep the payload).
#[inline(always)]
pub(crate) fn put_f16(bytes: &mut [u8], off: usize, v: f32) {
    let bits = if v.is_nan() {
        ((v.to_bits() >> 16) & 0x8000) as u16 | 0x7E00
    } else {
        f16::from_f32(v).to_bits()
    };
    bytes[off..off + 2].copy_from_slice(&bits.to_le_bytes());
}

/// C's `MAX(a, b)` macro, `a > b ? a : b`, which ggml's Q8_0/Q8_1 quantizers fold over |x|:
/// unlike `f32::max` it lets a NaN through (and a later number replace it), so the scale of a
/// block holding a NaN comes out as ggml's does.
#[inline(always)]
pub(crate) fn c_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// sum over k of a[k] * b[k], both read as 32 signed bytes: the exact integer of a 32-element
/// block's dot product (any order gives the same sum). A function of its own, never inlined:
/// LLVM vectorizes this reduction only here; inlined into a block loop, the loop is unrolled to
/// 32 scalar multiplies, 2.5-3.5x slower per block (measured, x86-64 baseline). The scalar
/// faces are the kernel set of every target without SIMD kernels, and of most model tests.
#[inline(never)]
pub(crate) fn dot_i8_32(a: &[u8; 32], b: &[u8; 32]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&a, &b)| a as i8 as i32 * b as i8 as i32)
        .sum()
}

/// The 32 quant bytes of a Q8_0 block at `off` of `block` (in bounds: the caller's block
/// holds them).
#[inline(always)]
pub(crate) fn qs32(block: &[u8], off: usize) -> &[u8; 32] {
    block[off..off + 32].try_into().expect("32 quant bytes")
}

#[inline(always)]
pub(crate) fn f32_at(bytes: &[u8], off: usize) -> f32 {
    f32::from_le_bytes([bytes[off], bytes[off + 1], bytes[off + 2], bytes[off + 3]])
}

#[inline(always)]
pub(crate) fn u32_at(bytes: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([bytes[off], bytes[off + 1], bytes[off + 2], bytes[off + 3]])
}

#[inline(always)]
pub(crate) fn i16_at(bytes: &[u8], off: usize) -> i16 {
    i16::from_le_bytes([bytes[off], bytes[off + 1]])
}

/// The bf16 stored at `bytes[off..off + 2]`, widened to f32 (exact: bf16 is the top half of an f32).
#[inline(always)]
pub(crate) fn bf16_at(bytes: &[u8], off: usize) -> f32 {
    f32::from_bits((u16::from_le_bytes([bytes[off], bytes[off + 1]]) as u32) << 16)
}

/// f32 -> bf16 bits the way ggml rounds (`ggml_compute_fp32_to_bf16`): round to nearest even,
/// NaN forced to a quiet NaN. Not `half::bf16::from_f32`, whose NaN handling differs.
#[inline(always)]
pub(crate) fn f32_to_bf16_bits(v: f32) -> u16 {
    let u = v.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

/// ggml's `nearest_int`: round to nearest, ties to even, by adding 1.5 * 2^23 so the FPU's own
/// rounding does the work; valid for |v| <= 4194303, which every caller guarantees. Kept as the
/// same bit trick (not `round`) so ties and out-of-range inputs land where ggml's do.
#[inline(always)]
pub(crate) fn nearest_int(v: f32) -> i32 {
    let biased = v + 12_582_912.0;
    (biased.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// C `roundf`: ties away from zero (ggml's Q8_0/Q8_1 quantizers use it).
#[inline(always)]
pub(crate) fn roundf(v: f32) -> f32 {
    libm::roundf(v)
}

/// One block of 32 activations rounded as llama.cpp's x86 build quantizes Q8_0 and Q8_1 (the
/// engine's rounding; `q8_0::quantize_activation` says why): `d = amax / 127` and each quant
/// `x * (127 / amax)` rounded half to even. Writes the 32 quants to `qs` and returns `d` (before
/// its f16 store) and the sum of the quants.
#[inline(always)]
pub(crate) fn quantize_block_half_even(xs: &[f32], qs: &mut [u8]) -> (f32, i32) {
    let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(xs) {
        // Half to even, like _mm256_round_ps(_MM_ROUND_NEAREST) (and libm::rintf): the
        // value is within 127 in magnitude (or infinite/NaN when amax is 0 or tiny),
        // where round_half_even_small is exact, and unlike rintf it is no call.
        let qi = crate::math::round_half_even_small(v * id) as i32;
        sum += qi;
        *q = qi as i8 as u8;
    }
    (d, sum)
}

/// Stores `v` as f16 with `half`'s conversion, the one the engine's activation quantizers
/// always used: unlike [`put_f16`] it keeps a NaN's payload (ggml's reference canonicalizes it).
#[inline(always)]
pub(crate) fn put_f16_keep_nan(bytes: &mut [u8], off: usize, v: f32) {
    bytes[off..off + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K super-block, packed in 12
/// bytes: sub-blocks 0..3 keep them in the low 6 bits of bytes j and j+4; sub-blocks 4..7 split
/// them into a low nibble in byte j+4 and two high bits in the top of bytes j-4 and j.
/// (ggml's `get_scale_min_k4`.)
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Dequantizes the K formats with a 6-bit scale and min per 32-element sub-block (Q4_K, Q5_K):
/// `d: f16` at 0, `dmin: f16` at 2, the 12 packed scale bytes at 4, and `quant(block, e)`
/// giving element e's unsigned quant. x = d * scale * q - dmin * min, in ggml's float order.
#[inline(always)]
pub(crate) fn dequantize_row_scale_min(
    src: &[u8],
    out: &mut [f32],
    block_bytes: usize,
    quant: fn(&[u8], usize) -> u8,
) {
    debug_assert_eq!(src.len() / block_bytes * 256, out.len());
    for (y, b) in out.chunks_exact_mut(256).zip(src.chunks_exact(block_bytes)) {
        let d = f16_at(b, 0);
        let min = f16_at(b, 2);
        let scales = &b[4..16];
        for (s, y) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(s, scales);
            let d1 = d * sc as f32;
            let m1 = min * m as f32;
            for (l, y) in y.iter_mut().enumerate() {
                *y = d1 * quant(b, 32 * s + l) as f32 - m1;
            }
        }
    }
}

/// The integer core of the K-quant dot products, as ggml's scalar code arranges it: element e
/// of a sub-block goes to lane e % 8, `aux32[lane] += scale * q8[e] * w[e]`. Integer sums are
/// exact (|aux32| stays below 2^25 for every K format), so only the lane layout matters: it
/// decides which f32 sums the lanes feed later.
#[inline(always)]
pub(crate) fn accumulate_lanes(aux32: &mut [i32; 8], scale: i32, q8: &[u8], w: &[i8]) {
    for (q, w) in q8.chunks_exact(8).zip(w.chunks_exact(8)) {
        for l in 0..8 {
            aux32[l] += scale * (q[l] as i8 as i32 * w[l] as i32);
        }
    }
}

/// C's `(int8_t)f` on x86-64 as GCC compiles it (ggml's Q4_0/Q5_0 quantizers): `cvttss2si`
/// to a 32-bit int, truncating toward zero, then the low byte; a NaN or a value outside the
/// i32 range gives 0x80000000, whose low byte is 0.
#[inline(always)]
pub(crate) fn c_f32_to_i8(v: f32) -> i32 {
    c_f32_to_i32(v) as i8 as i32
}

/// C's `(int)f` on x86-64 (`cvttss2si`): truncation toward zero; NaN and out-of-range values
/// give i32::MIN (Rust's `as` would saturate and map NaN to 0).
#[inline(always)]
pub(crate) fn c_f32_to_i32(v: f32) -> i32 {
    if v > -2_147_483_904.0 && v < 2_147_483_648.0 {
        v as i32
    } else {
        i32::MIN
    }
}

/// C's `(int)lroundf(f)` on x86-64 glibc (ggml's TQ1_0/TQ2_0 quantizers): round half away from
/// zero; NaN and values beyond the long range give LONG_MIN, whose low 32 bits are 0.
#[inline(always)]
pub(crate) fn c_lroundf_as_int(v: f32) -> i32 {
    let r = libm::roundf(v);
    if (-9.223_372e18..9.223_372e18).contains(&r) {
        r as i64 as i32
    } else {
        0
    }
}

/// ggml's `make_qkx2_quants`: the scale and min of one sub-block of `x` for quants 0..=nmax,
/// minimising the `weights`-weighted error (absolute when `use_mad`, else squared) over the
/// plain min/max fit and `nstep + 1` nudged scales (rmin + rdelta * is). Writes the quants to
/// `l` (`laux` is scratch) and returns (scale, -min). N is the sub-block (16 or 32): fixed
/// sizes let the loops run without bounds checks.
///
/// Every float operation is in ggml's order (C evaluates `a * b * c` as `(a * b) * c`, ints
/// are converted where C converts them) because llama-quantize's output is the contract: the
/// oracle's ggml-base is compiled for baseline x86-64 (SSE2, no FMA), so none of it is fused.
#[allow(clippy::too_many_arguments)]
pub(crate) fn make_qkx2_quants<const N: usize>(
    nmax: i32,
    x: &[f32; N],
    weights: &[f32; N],
    l: &mut [u8; N],
    laux: &mut [u8; N],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = N;
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let error = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l[i] = q as u8;
        let diff = scale * l[i] as f32 + min - x[i];
        best_error += weights[i] * error(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = q as u8;
            let w = weights[i];
            let lf = q as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * error(diff);
            }
            if cur_error < best_error {
                *l = *laux;
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// The index of the first element of largest magnitude and that element (ggml's Q4_0/Q5_0
/// loop `if (amax < fabsf(v)) { amax = fabsf(v); max = v; }`): the signed value, so that the
/// scale's sign puts the extreme element on the quant range's longer side.
#[inline(always)]
pub(crate) fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// The super-block loop of the grid i-quants' Q8_K dots (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
/// IQ3_S), as ggml's `_generic` dots run it: per 256-weight block an exact integer
/// (`block_sum` of the block and the activation's 256 quants), then sumf += (f16(d) * dy) *
/// bsum in block order. Each type applies its own final factor.
pub(crate) fn grid_dot_q8_k(
    n: usize,
    w: &[u8],
    act: &[u8],
    block_bytes: usize,
    off_d: usize,
    block_sum: fn(&[u8], &[u8]) -> i32,
) -> f32 {
    use super::q8_k;
    let nb = n / 256;
    debug_assert!(w.len() == nb * block_bytes && act.len() == nb * q8_k::BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, y) in w
        .chunks_exact(block_bytes)
        .zip(act.chunks_exact(q8_k::BLOCK_BYTES))
    {
        let d = f16_at(x, off_d) * f32_at(y, q8_k::OFF_D);
        sumf += d * block_sum(x, &y[q8_k::OFF_QS..q8_k::OFF_QS + 256]) as f32;
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(126.7), 127);
        assert_eq!(nearest_int(-127.2), -127);
    }

    #[test]
    fn bf16_rounding_matches_ggml() {
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        // 1 + 2^-8 is a tie between 1.0 and 1 + 2^-7: ties go to the even mantissa (1.0).
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x7f80_0001)), 0x7fc0);
    }

    #[test]
    fn f16_nan_is_canonical_like_ggml() {
        let mut b = [0u8; 2];
        put_f16(&mut b, 0, f32::from_bits(0xffc1_2345));
        assert_eq!(u16::from_le_bytes(b), 0xFE00);
        put_f16(&mut b, 0, 1e6);
        assert_eq!(u16::from_le_bytes(b), 0x7C00);
    }

    #[test]
    fn c_max_lets_nan_through_like_the_c_macro() {
        assert!(c_max(1.0, f32::NAN).is_nan());
        assert_eq!(c_max(f32::NAN, 2.0), 2.0);
    }
}
