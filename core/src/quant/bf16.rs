//! BF16: the top 16 bits of an f32, little-endian. As a weight type it pairs with BF16
//! activations (ggml's `vec_dot_type`).

use super::common::{bf16_at, f32_to_bf16_bits};

pub const BLOCK_ELEMS: usize = 1;
pub const BLOCK_BYTES: usize = 2;

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len(), out.len() * BLOCK_BYTES);
    for (y, b) in out.iter_mut().zip(src.chunks_exact(BLOCK_BYTES)) {
        *y = bf16_at(b, 0);
    }
}

/// ggml's `ggml_fp32_to_bf16_row_ref`: round to nearest even, NaN made quiet.
pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(out.len(), x.len() * BLOCK_BYTES);
    for (b, &v) in out.chunks_exact_mut(BLOCK_BYTES).zip(x) {
        b.copy_from_slice(&f32_to_bf16_bits(v).to_le_bytes());
    }
}

/// ggml's scalar `ggml_vec_dot_bf16`: products in f32, summed in f64.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    debug_assert!(w.len() == n * BLOCK_BYTES && act.len() == n * BLOCK_BYTES);
    let mut sum = 0.0f64;
    for (a, b) in w.chunks_exact(2).zip(act.chunks_exact(2)) {
        sum += (bf16_at(a, 0) * bf16_at(b, 0)) as f64;
    }
    sum as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_eight_mantissa_bits() {
        let x = [1.0f32, -2.0, 3.140625, 1.0 + 1.0 / 256.0];
        let mut bytes = [0u8; 8];
        quantize_row(&x, &mut bytes);
        let mut y = [0f32; 4];
        dequantize_row(&bytes, &mut y);
        assert_eq!(y, [1.0, -2.0, 3.140625, 1.0]);
    }

    #[test]
    fn dot_of_small_row() {
        let (mut w, mut a) = ([0u8; 4], [0u8; 4]);
        quantize_row(&[1.5, -2.0], &mut w);
        quantize_row(&[2.0, 0.5], &mut a);
        assert_eq!(vec_dot(2, &w, &a), 2.0);
    }
}
