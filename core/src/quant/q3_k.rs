//! Q3_K: super-blocks of 256 = 16 sub-blocks of 16, each with a 6-bit signed scale (stored
//! +32), one f16 super-scale; x = d * (scale - 32) * q, q in -4..3. The low two bits of q sit in
//! `qs` (Q2_K order); the third bit in `hmask`: bit k of hmask[l] is set when element
//! 32*k + l is NOT lowered by 4.
//!
//! The 16 scales are packed in 12 bytes: scale i (group g = i / 4, j = i % 4) has its low
//! nibble in byte j + 4*(g & 1) (low nibble for g < 2, high for g >= 2) and its top two bits
//! at bits 2g..2g+2 of byte 8 + j.
//!
//! Layout (110 bytes): `hmask: [u8; 32]` at 0, `qs: [u8; 64]` at 32, `scales: [u8; 12]` at 96,
//! `d: f16` at 108.

use super::common::{f16_at, f32_at};
use super::q8_k;

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 110;
pub const OFF_HMASK: usize = 0;
pub const OFF_QS: usize = 32;
pub const OFF_SCALES: usize = 96;
pub const OFF_D: usize = 108;

/// Sub-block scale i (0..16), already minus 32.
#[inline(always)]
fn scale(b: &[u8], i: usize) -> i32 {
    let s = &b[OFF_SCALES..OFF_SCALES + 12];
    let (g, j) = (i / 4, i % 4);
    let low = (s[j + 4 * (g & 1)] >> (4 * (g >> 1))) & 0xF;
    let high = (s[8 + j] >> (2 * g)) & 3;
    (low | (high << 4)) as i32 - 32
}

/// Quant of element e (0..256), in -4..3.
#[inline(always)]
fn quant(b: &[u8], e: usize) -> i32 {
    let (half, shift_step, l) = (e / 128, (e % 128) / 32, e % 32);
    let low = (b[OFF_QS + 32 * half + l] >> (2 * shift_step)) & 3;
    let kept = b[OFF_HMASK + l] & (1 << (4 * half + shift_step)) != 0;
    low as i32 - if kept { 0 } else { 4 }
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d_all = f16_at(b, OFF_D);
        for (i, y) in y.chunks_exact_mut(16).enumerate() {
            let dl = d_all * scale(b, i) as f32;
            for (l, y) in y.iter_mut().enumerate() {
                *y = dl * quant(b, 16 * i + l) as f32;
            }
        }
    }
}

/// Q3_K . Q8_K (ggml's `ggml_vec_dot_q3_K_q8_K_generic`): integer sums kept in 8 lanes
/// (element e goes to lane e % 8), each lane scaled by (dx * dy) into its own f32 running sum
/// across super-blocks; the 8 lane sums are added in order at the very end.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * q8_k::BLOCK_BYTES);
    let mut sums = [0.0f32; 8];
    for (x, y) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(q8_k::BLOCK_BYTES))
    {
        let q8 = &y[q8_k::OFF_QS..q8_k::OFF_QS + 256];
        let mut aux32 = [0i32; 8];
        for i in 0..16 {
            let sc = scale(x, i);
            for e in 16 * i..16 * i + 16 {
                aux32[e % 8] += sc * (q8[e] as i8 as i32 * quant(x, e));
            }
        }
        let d = f16_at(x, OFF_D) * f32_at(y, q8_k::OFF_D);
        for (s, &a) in sums.iter_mut().zip(&aux32) {
            *s += d * a as f32;
        }
    }
    let mut sumf = 0.0f32;
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
    fn scale_unpacking_covers_all_sixteen() {
        // Pack known scales the way the layout describes, then read them back.
        let mut b = [0u8; BLOCK_BYTES];
        let want: [u8; 16] = core::array::from_fn(|i| (i as u8 * 7 + 5) % 64);
        for (i, &v) in want.iter().enumerate() {
            let (g, j) = (i / 4, i % 4);
            b[OFF_SCALES + j + 4 * (g & 1)] |= (v & 0xF) << (4 * (g >> 1));
            b[OFF_SCALES + 8 + j] |= (v >> 4) << (2 * g);
        }
        for (i, &v) in want.iter().enumerate() {
            assert_eq!(scale(&b, i), v as i32 - 32, "scale {i}");
        }
    }

    #[test]
    fn dequantize_known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[OFF_D..OFF_D + 2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        // every scale = 33 (i.e. +1): low nibble 1 in all 8 nibbles, high bits 2 (=32) in all.
        for j in 0..8 {
            b[OFF_SCALES + j] = 0x11;
        }
        for j in 8..12 {
            b[OFF_SCALES + j] = 0xAA;
        }
        b[OFF_QS] = 0b0000_0011; // element 0: low bits 3
        b[OFF_HMASK] = 0b0000_0001; // element 0 kept (3), element 32 lowered (0 - 4)
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!((y[0], y[32], y[128]), (1.5, -2.0, -2.0));
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::Q3_K, 2);
    }
}
