//! Q8_1: like Q8_0, plus `s = d * sum(q)` so that weights with an offset (Q4_1, Q5_1) can add
//! `m * s` instead of summing the activations again. Activation format only: ggml has no
//! Q8_1 . Q8_1 dot product, and neither does smolrun.
//!
//! Layout (36 bytes): `d: f16` at 0, `s: f16` at 2, `qs: [i8; 32]` at 4.
//!
//! As for Q8_0, two quantizers: [`quantize_row`], ggml's reference, and
//! [`quantize_activation`], llama.cpp's x86 rounding, which the engine runs.

use super::common::{c_max, f16_at, put_f16, put_f16_keep_nan, quantize_block_half_even, roundf};

pub const BLOCK_ELEMS: usize = 32;
pub const BLOCK_BYTES: usize = 36;
pub const OFF_D: usize = 0;
pub const OFF_S: usize = 2;
pub const OFF_QS: usize = 4;

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

/// ggml's `quantize_row_q8_1_ref`: as Q8_0, and s = (sum of the quants) * d in f32, stored as f16.
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
        let mut sum = 0i32;
        for (q, &v) in b[OFF_QS..].iter_mut().zip(x) {
            let qi = roundf(v * id) as i8;
            *q = qi as u8;
            sum += qi as i32;
        }
        put_f16(b, OFF_D, d);
        put_f16(b, OFF_S, sum as f32 * d);
    }
}

/// The Q8_1 quantizer of the matvec input, the one every `kernels::KernelSet` installs:
/// Q8_0's rounding of llama.cpp's x86 build (`q8_0::quantize_activation` says why), and
/// `s = d * sum(q)` in f32, stored as f16.
pub fn quantize_activation(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / BLOCK_ELEMS * BLOCK_BYTES, out.len());
    for (xs, b) in x
        .chunks_exact(BLOCK_ELEMS)
        .zip(out.chunks_exact_mut(BLOCK_BYTES))
    {
        let (d, sum) = quantize_block_half_even(xs, &mut b[OFF_QS..]);
        put_f16_keep_nan(b, OFF_D, d);
        put_f16_keep_nan(b, OFF_S, d * sum as f32);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn round_trip_and_block_sum() {
        let x = ramp(64, 0.29);
        let mut q = [0u8; 2 * BLOCK_BYTES];
        quantize_row(&x, &mut q);
        let mut y = [0f32; 64];
        dequantize_row(&q, &mut y);
        for blk in 0..2 {
            let b = &q[blk * BLOCK_BYTES..(blk + 1) * BLOCK_BYTES];
            let d = f16_at(b, OFF_D);
            let sum: i32 = b[OFF_QS..].iter().map(|&v| v as i8 as i32).sum();
            let s = f16_at(b, OFF_S);
            assert!((s - sum as f32 * d).abs() <= (sum as f32 * d).abs() * 1e-3 + 1e-6);
            for i in blk * 32..blk * 32 + 32 {
                assert!((x[i] - y[i]).abs() <= d * 0.5 + x[i].abs() * 1e-3);
            }
        }
    }
}
