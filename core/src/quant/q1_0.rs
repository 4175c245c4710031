//! Q1_0: blocks of 128 signs and one f16 scale; x = +d if the bit is set, else -d.
//! Bit j % 8 of byte j / 8 belongs to element j. Dotted against Q8_0 activations: one Q1_0
//! block spans four Q8_0 blocks.
//!
//! Layout (18 bytes): `d: f16` at 0, `qs: [u8; 16]` at 2.

use super::common::{f16_at, put_f16};
use super::q8_0;

pub const BLOCK_ELEMS: usize = 128;
pub const BLOCK_BYTES: usize = 18;
pub const OFF_D: usize = 0;
pub const OFF_QS: usize = 2;

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        for (j, y) in y.iter_mut().enumerate() {
            let bit = (b[OFF_QS + j / 8] >> (j % 8)) & 1;
            *y = if bit != 0 { d } else { -d };
        }
    }
}

/// ggml's `quantize_row_q1_0_ref`: d = mean |x| over the block (summed in element order),
/// bit set where x >= 0 (so -0.0 and +0.0 both count as positive, a NaN as negative).
pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / BLOCK_ELEMS * BLOCK_BYTES, out.len());
    for (b, x) in out
        .chunks_exact_mut(BLOCK_BYTES)
        .zip(x.chunks_exact(BLOCK_ELEMS))
    {
        let sum_abs = x.iter().fold(0.0f32, |s, v| s + v.abs());
        put_f16(b, OFF_D, sum_abs / BLOCK_ELEMS as f32);
        let qs = &mut b[OFF_QS..OFF_QS + BLOCK_ELEMS / 8];
        qs.fill(0);
        for (j, &v) in x.iter().enumerate() {
            if v >= 0.0 {
                qs[j / 8] |= 1 << (j % 8);
            }
        }
    }
}

/// Q1_0 . Q8_0 (ggml's `ggml_vec_dot_q1_0_q8_0_generic`): an integer signed sum per Q8_0
/// block, scaled by that block's d and summed in f32 within the Q1_0 block, then scaled by
/// the Q1_0 scale.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * 4 * q8_0::BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, ys) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(4 * q8_0::BLOCK_BYTES))
    {
        let mut sumi = 0.0f32;
        for (k, y) in ys.chunks_exact(q8_0::BLOCK_BYTES).enumerate() {
            let mut sumi_block = 0i32;
            for (l, &qy) in y[q8_0::OFF_QS..].iter().enumerate() {
                let bit = (x[OFF_QS + 4 * k + l / 8] >> (l % 8)) & 1;
                let qy = qy as i8 as i32;
                sumi_block += if bit != 0 { qy } else { -qy };
            }
            sumi += f16_at(y, q8_0::OFF_D) * sumi_block as f32;
        }
        sumf += f16_at(x, OFF_D) * sumi;
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
        b[0..2].copy_from_slice(&half::f16::from_f32(0.75).to_bits().to_le_bytes());
        b[OFF_QS] = 0b0000_0101;
        b[OFF_QS + 15] = 0x80;
        let mut y = [0f32; 128];
        dequantize_row(&b, &mut y);
        assert_eq!(
            (y[0], y[1], y[2], y[126], y[127]),
            (0.75, -0.75, 0.75, -0.75, 0.75)
        );
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::Q1_0, 3);
    }
}
