//! Q4_0: blocks of 32, one f16 scale and 32 unsigned nibbles; x = d * (q - 8).
//! Byte j holds element j in its low nibble and element j + 16 in its high nibble.
//! Dotted against Q8_0 activations.
//!
//! Layout (18 bytes): `d: f16` at 0, `qs: [u8; 16]` at 2.

use super::common::{c_f32_to_i8, dot_i8_32, f16_at, put_f16, qs32, signed_absmax};

pub const BLOCK_ELEMS: usize = 32;
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
        for j in 0..16 {
            let q = b[OFF_QS + j];
            y[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
            y[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

/// ggml's `quantize_row_q4_0_ref`: d = -max / 8 where max is the element of largest magnitude
/// (signed), so it maps to quant 0 and the other side gets 15 levels; q = min(15, (int8)(x/d +
/// 8.5)), which truncates, i.e. rounds half up.
pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / BLOCK_ELEMS * BLOCK_BYTES, out.len());
    for (b, x) in out
        .chunks_exact_mut(BLOCK_BYTES)
        .zip(x.chunks_exact(BLOCK_ELEMS))
    {
        let d = signed_absmax(x) / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(b, OFF_D, d);
        for j in 0..16 {
            let q0 = c_f32_to_i8(x[j] * id + 8.5).min(15) as u8;
            let q1 = c_f32_to_i8(x[j + 16] * id + 8.5).min(15) as u8;
            b[OFF_QS + j] = q0 | (q1 << 4);
        }
    }
}

/// Q4_0 . Q8_0 (ggml's `ggml_vec_dot_q4_0_q8_0_generic`): sumf += (sumi * dx) * dy per block.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    use super::q8_0;
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * q8_0::BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, y) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(q8_0::BLOCK_BYTES))
    {
        // The 32 weights (-8..7) as signed bytes, then one exact integer sum (as Q5_0's).
        let mut w = [0u8; 32];
        for j in 0..16 {
            let q = x[OFF_QS + j];
            w[j] = ((q & 0x0F) as i8 - 8) as u8;
            w[j + 16] = ((q >> 4) as i8 - 8) as u8;
        }
        let sumi = dot_i8_32(&w, qs32(y, q8_0::OFF_QS));
        sumf += sumi as f32 * f16_at(x, OFF_D) * f16_at(y, q8_0::OFF_D);
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
        b[0..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        b[OFF_QS] = 0xF0; // element 0: 0 - 8, element 16: 15 - 8
        b[OFF_QS + 1] = 0x88; // elements 1 and 17: 0
        let mut y = [0f32; 32];
        dequantize_row(&b, &mut y);
        assert_eq!((y[0], y[16], y[1], y[17]), (-4.0, 3.5, 0.0, 0.0));
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::Q4_0, 4);
    }
}
