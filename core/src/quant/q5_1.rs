//! Q5_1: Q5_0's 5-bit quants with a min, like Q4_1: x = d * q + m. Dotted against Q8_1.
//!
//! Layout (24 bytes): `d: f16` at 0, `m: f16` at 2, `qh: u32 (LE)` at 4, `qs: [u8; 16]` at 8.

use super::common::{f16_at, u32_at};

pub const BLOCK_ELEMS: usize = 32;
pub const BLOCK_BYTES: usize = 24;
pub const OFF_D: usize = 0;
pub const OFF_M: usize = 2;
pub const OFF_QH: usize = 4;
pub const OFF_QS: usize = 8;

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
        let m = f16_at(b, OFF_M);
        let qh = u32_at(b, OFF_QH);
        for j in 0..16 {
            let (q0, q1) = quants(b, qh, j);
            y[j] = q0 as f32 * d + m;
            y[j + 16] = q1 as f32 * d + m;
        }
    }
}

/// Q5_1 . Q8_1 (ggml's `ggml_vec_dot_q5_1_q8_1_generic`): sumf += (dx * dy) * sumi + mx * sy.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    use super::q8_1;
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * q8_1::BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, y) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(q8_1::BLOCK_BYTES))
    {
        let qh = u32_at(x, OFF_QH);
        let yq = &y[q8_1::OFF_QS..];
        let (mut sumi0, mut sumi1) = (0i32, 0i32);
        for j in 0..16 {
            let (q0, q1) = quants(x, qh, j);
            sumi0 += q0 * (yq[j] as i8 as i32);
            sumi1 += q1 * (yq[j + 16] as i8 as i32);
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
        b[0..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        b[2..4].copy_from_slice(&half::f16::from_f32(-4.0).to_bits().to_le_bytes());
        b[OFF_QH..OFF_QH + 4].copy_from_slice(&(1u32 << 16).to_le_bytes());
        b[OFF_QS] = 0xF1;
        let mut y = [0f32; 32];
        dequantize_row(&b, &mut y);
        assert_eq!((y[0], y[16], y[1]), (-3.5, 11.5, -4.0));
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::Q5_1, 4);
    }
}
