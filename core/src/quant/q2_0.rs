//! Q2_0: blocks of 64 two-bit codes and one f16 scale; code c in {0, 1, 2, 3} means
//! x = (c - 1) * d, i.e. {-d, 0, d, 2d}. Bits 2*(j%4)..2*(j%4)+2 of byte j/4 belong to
//! element j. Dotted against Q8_0 activations: one Q2_0 block spans two Q8_0 blocks.
//!
//! Layout (18 bytes): `d: f16` at 0, `qs: [u8; 16]` at 2.

use super::common::{c_f32_to_i32, f16_at, put_f16, roundf};
use super::q8_0;

pub const BLOCK_ELEMS: usize = 64;
pub const BLOCK_BYTES: usize = 18;
pub const OFF_D: usize = 0;
pub const OFF_QS: usize = 2;

#[inline(always)]
fn code(b: &[u8], j: usize) -> i32 {
    ((b[OFF_QS + j / 4] >> (2 * (j % 4))) & 3) as i32 - 1
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        for (j, y) in y.iter_mut().enumerate() {
            *y = code(b, j) as f32 * d;
        }
    }
}

/// ggml's `quantize_row_q2_0_ref`: d = max |x|, code = clamp((int)roundf(x / d) + 1, 0, 3);
/// the code 3 (+2d) is never reached from |x| <= d, but the clamp is ggml's.
pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / BLOCK_ELEMS * BLOCK_BYTES, out.len());
    for (b, x) in out
        .chunks_exact_mut(BLOCK_BYTES)
        .zip(x.chunks_exact(BLOCK_ELEMS))
    {
        let mut amax = 0.0f32;
        for v in x {
            if v.abs() > amax {
                amax = v.abs();
            }
        }
        let id = if amax > 0.0 { 1.0 / amax } else { 0.0 };
        put_f16(b, OFF_D, amax);
        let qs = &mut b[OFF_QS..OFF_QS + BLOCK_ELEMS / 4];
        qs.fill(0);
        for (j, &v) in x.iter().enumerate() {
            let q = c_f32_to_i32(roundf(v * id)).wrapping_add(1).clamp(0, 3);
            qs[j / 4] |= (q as u8) << (2 * (j % 4));
        }
    }
}

/// Q2_0 . Q8_0 (ggml's `ggml_vec_dot_q2_0_q8_0_generic`): same shape as Q1_0's.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * 2 * q8_0::BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, ys) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(2 * q8_0::BLOCK_BYTES))
    {
        let mut sumi = 0.0f32;
        for (k, y) in ys.chunks_exact(q8_0::BLOCK_BYTES).enumerate() {
            let mut sumi_block = 0i32;
            for (l, &qy) in y[q8_0::OFF_QS..].iter().enumerate() {
                sumi_block += code(x, 32 * k + l) * (qy as i8 as i32);
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
        b[0..2].copy_from_slice(&half::f16::from_f32(1.5).to_bits().to_le_bytes());
        b[OFF_QS] = 0b11_10_01_00;
        let mut y = [0f32; 64];
        dequantize_row(&b, &mut y);
        assert_eq!(&y[0..5], &[-1.5, 0.0, 1.5, 3.0, -1.5]);
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::Q2_0, 3);
    }
}
