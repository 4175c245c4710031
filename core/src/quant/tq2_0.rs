//! TQ2_0: ternary weights stored as 2-bit codes c in {0, 1, 2} (3 is never written by ggml's
//! quantizer but decodes as +2), x = (c - 1) * d, 256 per super-block.
//! Element 128h + 32l + m is bits 2l..2l+2 of qs[32h + m]. Dotted against Q8_K.
//!
//! Layout (66 bytes): `qs: [u8; 64]` at 0, `d: f16` at 64.

use super::common::{c_lroundf_as_int, c_max, f16_at, f32_at, put_f16};
use super::q8_k;

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 66;
pub const OFF_QS: usize = 0;
pub const OFF_D: usize = 64;

#[inline(always)]
fn code(b: &[u8], e: usize) -> i32 {
    let (h, l, m) = (e / 128, (e % 128) / 32, e % 32);
    ((b[OFF_QS + 32 * h + m] >> (2 * l)) & 3) as i32 - 1
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        for (e, y) in y.iter_mut().enumerate() {
            *y = code(b, e) as f32 * d;
        }
    }
}

/// ggml's `quantize_row_tq2_0_ref`: d = max |x|, code = lroundf(x / d) + 1 in 0..=2, two bits
/// each, element 128h + 32l + m at bits 2l of qs[32h + m].
pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / BLOCK_ELEMS * BLOCK_BYTES, out.len());
    for (b, x) in out
        .chunks_exact_mut(BLOCK_BYTES)
        .zip(x.chunks_exact(BLOCK_ELEMS))
    {
        let amax = x.iter().fold(0.0f32, |m, v| c_max(m, v.abs()));
        let id = if amax != 0.0 { 1.0 / amax } else { 0.0 };
        put_f16(b, OFF_D, amax);
        for h in 0..2 {
            for m in 0..32 {
                let mut q = 0u8;
                for l in 0..4 {
                    let c = c_lroundf_as_int(x[128 * h + 32 * l + m] * id) + 1;
                    q = q.wrapping_add(((c & 3) as u8) << (2 * l));
                }
                b[OFF_QS + 32 * h + m] = q;
            }
        }
    }
}

/// TQ2_0 . Q8_K (ggml's `ggml_vec_dot_tq2_0_q8_K_generic`): integer sum, times (dy * dx).
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * q8_k::BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, y) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(q8_k::BLOCK_BYTES))
    {
        let q8 = &y[q8_k::OFF_QS..q8_k::OFF_QS + 256];
        let mut sumi = 0i32;
        for (e, &q) in q8.iter().enumerate() {
            sumi += (q as i8 as i32) * code(x, e);
        }
        let d = f32_at(y, q8_k::OFF_D) * f16_at(x, OFF_D);
        sumf += sumi as f32 * d;
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn dequantize_known_block() {
        let mut b = [0x55u8; BLOCK_BYTES]; // every code 1 = zero
        b[OFF_D..OFF_D + 2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        b[OFF_QS + 33] = 0b01_10_00_01; // elements 129 (0), 161 (-1), 193 (+1), 225 (0)
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!(
            (y[0], y[129], y[161], y[193], y[225]),
            (0.0, 0.0, -0.5, 0.5, 0.0)
        );
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::TQ2_0, 2);
    }
}
