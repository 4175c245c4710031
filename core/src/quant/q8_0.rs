//! Q8_0: blocks of 32 elements, one f16 scale and 32 signed bytes; x = d * q.
//! It is both a weight format and the activation format that Q4_0, Q5_0, Q8_0, Q1_0 and Q2_0
//! weights are dotted against. Two quantizers: [`quantize_row`], ggml's reference (byte for
//! byte, tests/tests/quant_blocks.rs), and [`quantize_activation`], the rounding of
//! llama.cpp's x86 build, which the engine runs on every matvec input.
//!
//! Layout (34 bytes): `d: f16` at 0, `qs: [i8; 32]` at 2.

use super::common::{
    c_max, dot_i8_32, f16_at, put_f16, put_f16_keep_nan, qs32, quantize_block_half_even, roundf,
};

pub const BLOCK_ELEMS: usize = 32;
pub const BLOCK_BYTES: usize = 34;
pub const OFF_D: usize = 0;
pub const OFF_QS: usize = 2;

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        for (y, &q) in y.iter_mut().zip(&b[OFF_QS..OFF_QS + BLOCK_ELEMS]) {
            *y = (q as i8) as f32 * d;
        }
    }
}

/// ggml's `quantize_row_q8_0_ref`: d = max|x| / 127, q = roundf(x / d) (ties away from zero).
/// The quants use the f32 scale; only the stored copy is rounded to f16.
pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / BLOCK_ELEMS * BLOCK_BYTES, out.len());
    for (b, x) in out
        .chunks_exact_mut(BLOCK_BYTES)
        .zip(x.chunks_exact(BLOCK_ELEMS))
    {
        let amax = x.iter().fold(0.0f32, |m, v| c_max(m, v.abs()));
        let d = amax / 127.0;
        // C's `d ? 1.0f/d : 0.0f`: NaN counts as true.
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(b, OFF_D, d);
        for (q, &v) in b[OFF_QS..].iter_mut().zip(x) {
            *q = roundf(v * id) as i8 as u8;
        }
    }
}

/// The Q8_0 quantizer of the matvec input, the one every `kernels::KernelSet` installs:
/// rounded as the reference engine's x86 build rounds it, not as [`quantize_row`] does.
///
/// Activations with large outliers (Gemma 3's residual stream reaches the thousands) make the
/// Q8_0/Q8_1 rounding visible in the logits: llama.cpp's x86 build quantizes with `127 / amax`
/// and round-half-to-even (its AVX2 `quantize_row_q8_0` / `quantize_row_q8_1`), while ggml's
/// scalar reference uses `1 / (amax / 127)` and round-half-away-from-zero. A different integer
/// in one block moves Gemma 3's logits by ~0.05, so we round as the reference's x86 build does.
pub fn quantize_activation(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / BLOCK_ELEMS * BLOCK_BYTES, out.len());
    for (xs, b) in x
        .chunks_exact(BLOCK_ELEMS)
        .zip(out.chunks_exact_mut(BLOCK_BYTES))
    {
        let (d, _) = quantize_block_half_even(xs, &mut b[OFF_QS..]);
        put_f16_keep_nan(b, OFF_D, d);
    }
}

/// Q8_0 weights . Q8_0 activations (ggml's `ggml_vec_dot_q8_0_q8_0_generic`): an exact integer
/// sum per block, scaled by (dx * dy), accumulated in f32.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, y) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(BLOCK_BYTES))
    {
        let sumi = dot_i8_32(qs32(x, OFF_QS), qs32(y, OFF_QS));
        sumf += sumi as f32 * (f16_at(x, OFF_D) * f16_at(y, OFF_D));
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn round_trip_error_is_at_most_half_a_step() {
        let x = ramp(64, 0.37);
        let mut q = [0u8; 2 * BLOCK_BYTES];
        quantize_row(&x, &mut q);
        let mut y = [0f32; 64];
        dequantize_row(&q, &mut y);
        for blk in 0..2 {
            let d = f16_at(&q[blk * BLOCK_BYTES..], OFF_D);
            for i in blk * 32..blk * 32 + 32 {
                // d is stored rounded to f16, so allow its relative error (2^-11) on top.
                assert!(
                    (x[i] - y[i]).abs() <= d * 0.5 + x[i].abs() * 1e-3,
                    "{i}: {} vs {}",
                    x[i],
                    y[i]
                );
            }
        }
    }

    #[test]
    fn zero_block_quantizes_to_zero() {
        let mut q = [0xAAu8; BLOCK_BYTES];
        quantize_row(&[0.0; 32], &mut q);
        assert!(q.iter().all(|&b| b == 0));
    }

    #[test]
    fn max_element_maps_to_127() {
        let mut x = [0.0f32; 32];
        x[3] = -5.0;
        x[4] = 2.5;
        let mut q = [0u8; BLOCK_BYTES];
        quantize_row(&x, &mut q);
        assert_eq!(q[OFF_QS + 3] as i8, -127);
        assert_eq!(q[OFF_QS + 4] as i8, 64); // 63.5 rounds away from zero
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::Q8_0, 3);
    }
}
