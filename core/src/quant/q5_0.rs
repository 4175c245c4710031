//! Q5_0: blocks of 32, an f16 scale, the fifth bit of every element in a 32-bit mask, and the
//! low four bits as nibbles (Q4_0 order); x = d * (q - 16). Dotted against Q8_0 activations.
//!
//! Layout (22 bytes): `d: f16` at 0, `qh: u32 (LE)` at 2 (bit j = high bit of element j),
//! `qs: [u8; 16]` at 6.

use super::common::{c_f32_to_i8, dot_i8_32, f16_at, put_f16, qs32, signed_absmax, u32_at};

pub const BLOCK_ELEMS: usize = 32;
pub const BLOCK_BYTES: usize = 22;
pub const OFF_D: usize = 0;
pub const OFF_QH: usize = 2;
pub const OFF_QS: usize = 6;

/// The two 5-bit quants (elements j and j + 16) stored in nibble byte j.
#[inline(always)]
fn quants(b: &[u8], qh: u32, j: usize) -> (i32, i32) {
    let q = b[OFF_QS + j];
    let h0 = ((qh >> j) & 1) << 4;
    let h1 = ((qh >> (j + 16)) & 1) << 4;
    ((q & 0x0F) as i32 | h0 as i32, (q >> 4) as i32 | h1 as i32)
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        let qh = u32_at(b, OFF_QH);
        for j in 0..16 {
            let (q0, q1) = quants(b, qh, j);
            y[j] = (q0 - 16) as f32 * d;
            y[j + 16] = (q1 - 16) as f32 * d;
        }
    }
}

/// ggml's `quantize_row_q5_0_ref`: Q4_0's rule with 32 levels: d = -max / 16,
/// q = min(31, (int8)(x/d + 16.5)); bit 4 of element j goes to bit j of `qh`.
pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / BLOCK_ELEMS * BLOCK_BYTES, out.len());
    for (b, x) in out
        .chunks_exact_mut(BLOCK_BYTES)
        .zip(x.chunks_exact(BLOCK_ELEMS))
    {
        let d = signed_absmax(x) / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(b, OFF_D, d);
        let mut qh = 0u32;
        for j in 0..16 {
            let q0 = c_f32_to_i8(x[j] * id + 16.5).min(31) as u8;
            let q1 = c_f32_to_i8(x[j + 16] * id + 16.5).min(31) as u8;
            b[OFF_QS + j] = (q0 & 0x0F) | ((q1 & 0x0F) << 4);
            qh |= (((q0 & 0x10) >> 4) as u32) << j;
            qh |= (((q1 & 0x10) >> 4) as u32) << (j + 16);
        }
        b[OFF_QH..OFF_QH + 4].copy_from_slice(&qh.to_le_bytes());
    }
}

/// Q5_0 . Q8_0 (ggml's `ggml_vec_dot_q5_0_q8_0_generic`): sumf += (dx * dy) * sumi.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    use super::q8_0;
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * q8_0::BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, y) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(q8_0::BLOCK_BYTES))
    {
        // The 32 weights (-16..15) as signed bytes, then one exact integer sum (ggml sums the
        // two halves apart; an integer sum is the same in any order).
        let qh = u32_at(x, OFF_QH);
        let mut w = [0u8; 32];
        for j in 0..16 {
            let (q0, q1) = quants(x, qh, j);
            w[j] = (q0 - 16) as i8 as u8;
            w[j + 16] = (q1 - 16) as i8 as u8;
        }
        let sumi = dot_i8_32(&w, qs32(y, q8_0::OFF_QS));
        sumf += (f16_at(x, OFF_D) * f16_at(y, q8_0::OFF_D)) * sumi as f32;
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
        b[0..2].copy_from_slice(&half::f16::from_f32(1.0).to_bits().to_le_bytes());
        b[OFF_QH..OFF_QH + 4].copy_from_slice(&(1u32 | 1 << 17).to_le_bytes());
        b[OFF_QS] = 0xF3; // element 0: 16 + 3, element 16: 15 (no high bit)
        b[OFF_QS + 1] = 0x10; // element 1: 0, element 17: 16 + 1
        let mut y = [0f32; 32];
        dequantize_row(&b, &mut y);
        assert_eq!((y[0], y[16], y[1], y[17]), (3.0, -1.0, -16.0, 1.0));
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::Q5_0, 4);
    }
}
