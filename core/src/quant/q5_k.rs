//! Q5_K: Q4_K plus a fifth bit per element: bit 2c (low nibbles) or 2c + 1 (high nibbles) of
//! qh[l] adds 16 to the quant of element 64c + 32*hi + l. x = d * scale * q - dmin * min,
//! q in 0..31. Dotted against Q8_K.
//!
//! Layout (176 bytes): `d: f16` at 0, `dmin: f16` at 2, `scales: [u8; 12]` at 4,
//! `qh: [u8; 32]` at 16, `qs: [u8; 128]` at 48.

use super::common::{accumulate_lanes, dequantize_row_scale_min, f16_at, f32_at, scale_min_k4};
use super::q8_k;

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 176;
pub const OFF_D: usize = 0;
pub const OFF_DMIN: usize = 2;
pub const OFF_SCALES: usize = 4;
pub const OFF_QH: usize = 16;
pub const OFF_QS: usize = 48;

#[inline(always)]
fn quant(b: &[u8], e: usize) -> u8 {
    let (sub, hi, l) = (e / 32, (e % 64) / 32, e % 32);
    let low = (b[OFF_QS + 32 * (e / 64) + l] >> (4 * hi)) & 0xF;
    let high = (b[OFF_QH + l] >> sub) & 1;
    low | (high << 4)
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    dequantize_row_scale_min(src, out, BLOCK_BYTES, quant);
}

/// Q5_K . Q8_K (ggml's `ggml_vec_dot_q5_K_q8_K_generic`): same accumulation as Q4_K.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * q8_k::BLOCK_BYTES);
    let mut sums = [0.0f32; 8];
    let mut sumf = 0.0f32;
    for (x, y) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(q8_k::BLOCK_BYTES))
    {
        let q8 = &y[q8_k::OFF_QS..q8_k::OFF_QS + 256];
        let scales = &x[OFF_SCALES..OFF_SCALES + 12];
        // Unpack the 5-bit quants once, in element order, then multiply 8 lanes at a time.
        let mut a = [0i8; 256];
        let qh = &x[OFF_QH..OFF_QH + 32];
        for (c, qs) in x[OFF_QS..OFF_QS + 128].chunks_exact(32).enumerate() {
            for (l, (&q, &h)) in qs.iter().zip(qh).enumerate() {
                a[64 * c + l] = ((q & 0xF) | (((h >> (2 * c)) & 1) << 4)) as i8;
                a[64 * c + 32 + l] = ((q >> 4) | (((h >> (2 * c + 1)) & 1) << 4)) as i8;
            }
        }
        let mut aux32 = [0i32; 8];
        let mut sumi_mins = 0i32;
        for s in 0..8 {
            let (sc, m) = scale_min_k4(s, scales);
            sumi_mins += (q8_k::bsum(y, 2 * s) + q8_k::bsum(y, 2 * s + 1)) * m as i32;
            let sub = 32 * s..32 * s + 32;
            accumulate_lanes(&mut aux32, sc as i32, &q8[sub.clone()], &a[sub]);
        }
        let dy = f32_at(y, q8_k::OFF_D);
        let d = f16_at(x, OFF_D) * dy;
        for (s, &a) in sums.iter_mut().zip(&aux32) {
            *s += d * a as f32;
        }
        let dmin = f16_at(x, OFF_DMIN) * dy;
        sumf -= dmin * sumi_mins as f32;
    }
    for s in sums {
        sumf += s;
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
        b[OFF_SCALES + 1] = 1; // sub-block 1: scale 1
        b[OFF_SCALES + 3] = 2; // sub-block 3: scale 2
        b[OFF_QS + 32] = 0x50; // element 96 (chunk 1, high): 5
        b[OFF_QH] = 0b0000_1000; // element 96 (sub-block 3) gets +16
        b[OFF_QS] = 0x30; // element 32 (chunk 0, high): 3
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!((y[32], y[96], y[0]), (3.0, 42.0, 0.0));
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::Q5_K, 2);
    }
}
