//! Q6_K: super-blocks of 256 = 16 sub-blocks of 16, each with a signed 8-bit scale, one f16
//! super-scale; x = d * scale * (q - 32), q in 0..63. Low 4 bits in `ql`, high 2 bits in `qh`.
//! In half h (128 elements; ql[64h..], qh[32h..]), for l in 0..32:
//!   element 128h + l      = ql[l]      low nibble, qh[l] bits 0-1
//!   element 128h + l + 32 = ql[l + 32] low nibble, qh[l] bits 2-3
//!   element 128h + l + 64 = ql[l]      high nibble, qh[l] bits 4-5
//!   element 128h + l + 96 = ql[l + 32] high nibble, qh[l] bits 6-7
//! Dotted against Q8_K.
//!
//! Layout (210 bytes): `ql: [u8; 128]` at 0, `qh: [u8; 64]` at 128, `scales: [i8; 16]` at 192,
//! `d: f16` at 208.

use super::common::{f16_at, f32_at};
use super::q8_k;

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 210;
pub const OFF_QL: usize = 0;
pub const OFF_QH: usize = 128;
pub const OFF_SCALES: usize = 192;
pub const OFF_D: usize = 208;

/// Quant of element e, already minus 32 (in -32..31).
#[inline(always)]
fn quant(b: &[u8], e: usize) -> i32 {
    let (h, quarter, l) = (e / 128, (e % 128) / 32, e % 32);
    let ql = b[OFF_QL + 64 * h + l + 32 * (quarter & 1)];
    let low = (ql >> (4 * (quarter >> 1))) & 0xF;
    let high = (b[OFF_QH + 32 * h + l] >> (2 * quarter)) & 3;
    (low | (high << 4)) as i32 - 32
}

#[inline(always)]
fn scale(b: &[u8], i: usize) -> i32 {
    b[OFF_SCALES + i] as i8 as i32
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        for (i, y) in y.chunks_exact_mut(16).enumerate() {
            // ggml: d * sc * q, evaluated left to right.
            let dsc = d * scale(b, i) as f32;
            for (l, y) in y.iter_mut().enumerate() {
                *y = dsc * quant(b, 16 * i + l) as f32;
            }
        }
    }
}

/// Q6_K . Q8_K (ggml's `ggml_vec_dot_q6_K_q8_K_generic`): 8 integer lanes per super-block,
/// scaled into 8 f32 lane sums, added in order at the end.
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
    fn dequantize_known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[OFF_D..OFF_D + 2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        for i in 0..16 {
            b[OFF_SCALES + i] = (-2i8) as u8;
        }
        b[OFF_QL] = 0x1F; // element 0 low 15, element 64 low 1
        b[OFF_QH] = 0b10_00_00_11; // element 0 high 3 (q = 63), element 96 high 2 (q = 32)
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        // element 0: 63 - 32 = 31; element 64: 1 - 32 = -31; element 96: 32 - 32 = 0
        assert_eq!((y[0], y[64], y[96], y[1]), (-31.0, 31.0, 0.0, 32.0));
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::Q6_K, 2);
    }
}
