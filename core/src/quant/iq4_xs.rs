//! IQ4_XS: IQ4_NL's non-linear 4-bit grid ([`iq4_nl::KVALUES`]) in super-blocks of 256: one f16
//! scale d and a 6-bit scale per sub-block of 32, stored minus 32 (ls in 0..63 means ls - 32);
//! x = d * (ls - 32) * KVALUES[q]. Inside each sub-block of 32 the indices are packed as in
//! IQ4_NL (byte j: element j low, element j + 16 high). Dotted against Q8_K activations.
//!
//! Layout (136 bytes): `d: f16` at 0, `scales_h: u16` at 2 (two high bits per sub-block,
//! sub-block ib at bits 2ib..2ib+2), `scales_l: [u8; 4]` at 4 (the low nibbles, sub-block ib in
//! byte ib / 2, low nibble for even ib), `qs: [u8; 128]` at 8.
//!
//! As in IQ4_NL every index is a nibble, so no byte of a block can reach outside the grid.

use super::common::{f16_at, f32_at, nearest_int, put_f16};
use super::iq4_nl::{best_index, best_scale, level, pack_indices};
use super::q8_k;

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 136;
pub const OFF_D: usize = 0;
pub const OFF_SCALES_H: usize = 2;
pub const OFF_SCALES_L: usize = 4;
pub const OFF_QS: usize = 8;

/// The stored 6-bit scale of sub-block `ib` (0..8), 0..63; the scale it means is this - 32.
#[inline(always)]
pub fn sub_scale(b: &[u8], ib: usize) -> i32 {
    let h = u16::from_le_bytes([b[OFF_SCALES_H], b[OFF_SCALES_H + 1]]);
    let low = (b[OFF_SCALES_L + ib / 2] >> (4 * (ib % 2))) & 0xF;
    let high = ((h >> (2 * ib)) & 3) as u8;
    (low | (high << 4)) as i32
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let dl = d * (sub_scale(b, ib) - 32) as f32;
            let qs = &b[OFF_QS + 16 * ib..OFF_QS + 16 * ib + 16];
            for (j, &q) in qs.iter().enumerate() {
                y[j] = dl * level(q) as f32;
                y[j + 16] = dl * level(q >> 4) as f32;
            }
        }
    }
}

/// llama-quantize's IQ4_XS without an importance matrix (ggml's `quantize_iq4_xs`): each
/// sub-block's best scale ([`best_scale`]), d = -(the scale of largest magnitude) / 32 stored
/// as f16, each sub-block's scale rounded to l = nearest(scale / d) in -32..31, and each
/// element's nearest level for x / (d * l), with the f32 d (not its f16 rounding), as ggml does.
/// An all-zero super-block stores d = -0.0 and every l = 0.
pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / BLOCK_ELEMS * BLOCK_BYTES, out.len());
    let mut l = [0u8; 32];
    for (b, x) in out
        .chunks_exact_mut(BLOCK_BYTES)
        .zip(x.chunks_exact(BLOCK_ELEMS))
    {
        let mut scales = [0f32; 8];
        let (mut max_scale, mut amax_scale) = (0f32, 0f32);
        for (s, xb) in scales.iter_mut().zip(x.chunks_exact(32)) {
            *s = best_scale(xb);
            if s.abs() > amax_scale {
                amax_scale = s.abs();
                max_scale = *s;
            }
        }
        let d = -max_scale / 32.0;
        put_f16(b, OFF_D, d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        b[OFF_SCALES_L..OFF_SCALES_L + 4].fill(0);
        for (ib, xb) in x.chunks_exact(32).enumerate() {
            let ls = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * ls as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for (l, &v) in l.iter_mut().zip(xb) {
                *l = best_index(idl * v);
            }
            pack_indices(&l, &mut b[OFF_QS + 16 * ib..OFF_QS + 16 * ib + 16]);
            let stored = (ls + 32) as u8;
            b[OFF_SCALES_L + ib / 2] |= (stored & 0xF) << (4 * (ib % 2));
            scales_h |= ((stored >> 4) as u16) << (2 * ib);
        }
        b[OFF_SCALES_H..OFF_SCALES_H + 2].copy_from_slice(&scales_h.to_le_bytes());
    }
}

/// IQ4_XS . Q8_K (ggml's `ggml_vec_dot_iq4_xs_q8_K_generic`): per sub-block of 32,
/// sumf += (d * dy * (ls - 32)) * (sumi1 + sumi2), sub-blocks in order.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * q8_k::BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, y) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(q8_k::BLOCK_BYTES))
    {
        let d4d8 = f16_at(x, OFF_D) * f32_at(y, q8_k::OFF_D);
        let q8 = &y[q8_k::OFF_QS..q8_k::OFF_QS + 256];
        for ib in 0..8 {
            let dl = d4d8 * (sub_scale(x, ib) - 32) as f32;
            let qs = &x[OFF_QS + 16 * ib..OFF_QS + 16 * ib + 16];
            let q8 = &q8[32 * ib..32 * ib + 32];
            let (mut sumi1, mut sumi2) = (0i32, 0i32);
            for (j, &q) in qs.iter().enumerate() {
                sumi1 += (q8[j] as i8 as i32) * level(q);
                sumi2 += (q8[j + 16] as i8 as i32) * level(q >> 4);
            }
            sumf += dl * (sumi1 + sumi2) as f32;
        }
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
        // Sub-block 0: stored 33 (scale 1) = low 1, high 2; sub-block 3: stored 30 (scale -2)
        // = low 14, high 1.
        b[OFF_SCALES_L] = 0x01;
        b[OFF_SCALES_L + 1] = 0xE0;
        b[OFF_SCALES_H..OFF_SCALES_H + 2].copy_from_slice(&((2u16) | (1 << 6)).to_le_bytes());
        b[OFF_QS] = 0xF0; // elements 0 (-127) and 16 (113)
        b[OFF_QS + 48] = 0x08; // element 96: level 1
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!((sub_scale(&b, 0), sub_scale(&b, 3)), (33, 30));
        assert_eq!((y[0], y[16], y[96], y[112]), (-63.5, 56.5, -1.0, 127.0));
    }

    #[test]
    fn zero_super_block_stores_minus_zero_and_scale_zero() {
        let mut b = [0xAAu8; BLOCK_BYTES];
        quantize_row(&[0.0; 256], &mut b);
        assert_eq!(&b[..2], &0x8000u16.to_le_bytes());
        assert!((0..8).all(|ib| sub_scale(&b, ib) == 32));
        assert!(b[OFF_QS..].iter().all(|&q| q == 0x88));
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::IQ4_XS, 2);
    }
}
