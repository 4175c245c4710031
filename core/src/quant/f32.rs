//! F32: plain little-endian IEEE single precision, one element per "block" of 4 bytes.
//! As a weight type it pairs with F32 activations (ggml's `vec_dot_type`).

use super::common::f32_at;

pub const BLOCK_ELEMS: usize = 1;
pub const BLOCK_BYTES: usize = 4;

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len(), out.len() * BLOCK_BYTES);
    for (y, b) in out.iter_mut().zip(src.chunks_exact(BLOCK_BYTES)) {
        *y = f32_at(b, 0);
    }
}

pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(out.len(), x.len() * BLOCK_BYTES);
    for (b, v) in out.chunks_exact_mut(BLOCK_BYTES).zip(x) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

/// ggml's scalar `ggml_vec_dot_f32`: each product rounded to f32, summed in f64, the total
/// rounded once at the end.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    debug_assert!(w.len() == n * BLOCK_BYTES && act.len() == n * BLOCK_BYTES);
    let mut sum = 0.0f64;
    for (a, b) in w.chunks_exact(4).zip(act.chunks_exact(4)) {
        sum += (f32_at(a, 0) * f32_at(b, 0)) as f64;
    }
    sum as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_is_exact() {
        let x = [1.5f32, -0.0, f32::MAX, f32::MIN_POSITIVE, -3.25];
        let mut bytes = [0u8; 20];
        quantize_row(&x, &mut bytes);
        let mut y = [0f32; 5];
        dequantize_row(&bytes, &mut y);
        assert_eq!(x.map(f32::to_bits), y.map(f32::to_bits));
    }

    #[test]
    fn dot_sums_in_double() {
        // In f32, 1e8 + 1 - 1e8 loses the 1; summed in f64 it survives.
        let w = [1e8f32, 1.0, -1e8];
        let a = [1.0f32, 1.0, 1.0];
        let (mut wb, mut ab) = ([0u8; 12], [0u8; 12]);
        quantize_row(&w, &mut wb);
        quantize_row(&a, &mut ab);
        assert_eq!(vec_dot(3, &wb, &ab), 1.0);
    }
}
