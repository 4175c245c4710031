//! Q4_1: blocks of 32, an f16 scale d and f16 min m, 32 nibbles; x = d * q + m.
//! Nibble order as Q4_0. Dotted against Q8_1 activations, whose `s` carries d_y * sum(q_y) so
//! the min contributes m * s per block.
//!
//! Layout (20 bytes): `d: f16` at 0, `m: f16` at 2, `qs: [u8; 16]` at 4.

use super::common::f16_at;

pub const BLOCK_ELEMS: usize = 32;
pub const BLOCK_BYTES: usize = 20;
pub const OFF_D: usize = 0;
pub const OFF_M: usize = 2;
pub const OFF_QS: usize = 4;

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        let m = f16_at(b, OFF_M);
        for j in 0..16 {
            let q = b[OFF_QS + j];
            y[j] = (q & 0x0F) as f32 * d + m;
            y[j + 16] = (q >> 4) as f32 * d + m;
        }
    }
}

/// Q4_1 . Q8_1 (ggml's `ggml_vec_dot_q4_1_q8_1_generic`): sumf += (dx * dy) * sumi + mx * sy.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    use super::q8_1;
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * q8_1::BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, y) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(q8_1::BLOCK_BYTES))
    {
        let yq = &y[q8_1::OFF_QS..];
        let (mut sumi0, mut sumi1) = (0i32, 0i32);
        for j in 0..16 {
            let q = x[OFF_QS + j];
            sumi0 += (q & 0x0F) as i32 * (yq[j] as i8 as i32);
            sumi1 += (q >> 4) as i32 * (yq[j + 16] as i8 as i32);
        }
        let dxdy = f16_at(x, OFF_D) * f16_at(y, q8_1::OFF_D);
        sumf += dxdy * (sumi0 + sumi1) as f32 + f16_at(x, OFF_M) * f16_at(y, q8_1::OFF_S);
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn dequantize_known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[0..2].copy_from_slice(&half::f16::from_f32(0.25).to_bits().to_le_bytes());
        b[2..4].copy_from_slice(&half::f16::from_f32(-1.0).to_bits().to_le_bytes());
        b[OFF_QS] = 0xF0;
        let mut y = [0f32; 32];
        dequantize_row(&b, &mut y);
        assert_eq!((y[0], y[16], y[1]), (-1.0, 2.75, -1.0));
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::Q4_1, 4);
    }
}
