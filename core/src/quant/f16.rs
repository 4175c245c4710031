//! F16: IEEE half precision, little-endian, 2 bytes per element. As a weight type it pairs with
//! F16 activations (ggml's `vec_dot_type`), so the activation row is rounded to f16 first.

use super::common::{f16_at, put_f16};

pub const BLOCK_ELEMS: usize = 1;
pub const BLOCK_BYTES: usize = 2;

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len(), out.len() * BLOCK_BYTES);
    for (y, b) in out.iter_mut().zip(src.chunks_exact(BLOCK_BYTES)) {
        *y = f16_at(b, 0);
    }
}

/// Round to nearest even, as F16C's `vcvtps2ph` does for ggml's `ggml_cpu_fp32_to_fp16`.
pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(out.len(), x.len() * BLOCK_BYTES);
    for (b, &v) in out.chunks_exact_mut(BLOCK_BYTES).zip(x) {
        put_f16(b, 0, v);
    }
}

/// ggml's scalar `ggml_vec_dot_f16`: products of the widened halves in f32, summed in f64.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    debug_assert!(w.len() == n * BLOCK_BYTES && act.len() == n * BLOCK_BYTES);
    let mut sum = 0.0f64;
    for (a, b) in w.chunks_exact(2).zip(act.chunks_exact(2)) {
        sum += (f16_at(a, 0) * f16_at(b, 0)) as f64;
    }
    sum as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_rounds_to_nearest_even() {
        // 1 + 2^-11 is halfway between two halves: ties to the even one (1.0).
        let x = [1.0f32, 1.0 + 1.0 / 2048.0, 65504.0, -2.5, 70000.0];
        let mut bytes = [0u8; 10];
        quantize_row(&x, &mut bytes);
        let mut y = [0f32; 5];
        dequantize_row(&bytes, &mut y);
        assert_eq!(y, [1.0, 1.0, 65504.0, -2.5, f32::INFINITY]);
    }

    #[test]
    fn dot_of_small_row() {
        let (mut w, mut a) = ([0u8; 6], [0u8; 6]);
        quantize_row(&[1.0, 2.0, -0.5], &mut w);
        quantize_row(&[3.0, 0.25, 4.0], &mut a);
        assert_eq!(vec_dot(3, &w, &a), 1.5);
    }
}
