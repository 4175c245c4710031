//! Q4_K: super-blocks of 256 = 8 sub-blocks of 32, each with a 6-bit scale and 6-bit min
//! (packed 12 bytes, see `common::scale_min_k4`), scaled by f16 `d` and `dmin`;
//! x = d * scale * q - dmin * min, q in 0..15.
//! Quants: 64-element chunks c = 0..3 share 32 bytes qs[32c..32c+32]; sub-block 2c is the low
//! nibbles, sub-block 2c + 1 the high nibbles. Dotted against Q8_K.
//!
//! Layout (144 bytes): `d: f16` at 0, `dmin: f16` at 2, `scales: [u8; 12]` at 4,
//! `qs: [u8; 128]` at 16.

use super::common::{
    accumulate_lanes, dequantize_row_scale_min, f16_at, f32_at, make_qkx2_quants, nearest_int,
    put_f16, scale_min_k4,
};
use super::q8_k;

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 144;
pub const OFF_D: usize = 0;
pub const OFF_DMIN: usize = 2;
pub const OFF_SCALES: usize = 4;
pub const OFF_QS: usize = 16;

#[inline(always)]
fn quant(b: &[u8], e: usize) -> u8 {
    let (chunk, hi, l) = (e / 64, (e % 64) / 32, e % 32);
    (b[OFF_QS + 32 * chunk + l] >> (4 * hi)) & 0xF
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    dequantize_row_scale_min(src, out, BLOCK_BYTES, quant);
}

/// ggml's `quantize_row_q4_K_ref` (no importance matrix, what llama-quantize writes then):
/// per 32-element sub-block, a scale and min fitted by `make_qkx2_quants` with weights
/// av_x + |x| (av_x the sub-block's RMS); the 8 scales and 8 mins are quantized to 6 bits against
/// the largest of each (d = max_scale / 63, dmin = max_min / 63); then every element is
/// re-quantized against the *stored* scales: q = clamp(round((x + dmin * m) / (d * sc)), 0, 15).
/// A sub-block whose stored d * sc is 0 keeps the quants of its fit.
pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / BLOCK_ELEMS * BLOCK_BYTES, out.len());
    let mut l = [0u8; BLOCK_ELEMS];
    let mut laux = [0u8; 32];
    let mut weights = [0f32; 32];
    for (b, x) in out
        .chunks_exact_mut(BLOCK_BYTES)
        .zip(x.chunks_exact(BLOCK_ELEMS))
    {
        let mut scales = [0f32; 8];
        let mut mins = [0f32; 8];
        let (mut max_scale, mut max_min) = (0f32, 0f32);
        let subs = x.as_chunks::<32>().0.iter().zip(l.as_chunks_mut::<32>().0);
        for (j, (xs, sub)) in subs.enumerate() {
            let sum_x2 = xs.iter().fold(0f32, |s, &v| s + v * v);
            let av_x = libm::sqrtf(sum_x2 / 32.0);
            for (w, v) in weights.iter_mut().zip(xs) {
                *w = av_x + v.abs();
            }
            (scales[j], mins[j]) =
                make_qkx2_quants(15, xs, &weights, sub, &mut laux, -1.0, 0.1, 20, false);
            if scales[j] > max_scale {
                max_scale = scales[j];
            }
            if mins[j] > max_min {
                max_min = mins[j];
            }
        }
        let inv_scale = if max_scale > 0.0 {
            63.0 / max_scale
        } else {
            0.0
        };
        let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
        let sc = &mut b[OFF_SCALES..OFF_SCALES + 12];
        for j in 0..8 {
            // C stores nearest_int's int in a uint8_t (mod 256) before the MIN.
            let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
            let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
            if j < 4 {
                sc[j] = ls;
                sc[j + 4] = lm;
            } else {
                sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
                sc[j - 4] |= (ls >> 4) << 6;
                sc[j] |= (lm >> 4) << 6;
            }
        }
        put_f16(b, OFF_D, max_scale / 63.0);
        put_f16(b, OFF_DMIN, max_min / 63.0);
        let (d_all, dmin_all) = (f16_at(b, OFF_D), f16_at(b, OFF_DMIN));
        for j in 0..8 {
            let (s, m) = scale_min_k4(j, &b[OFF_SCALES..OFF_SCALES + 12]);
            let d = d_all * s as f32;
            if d == 0.0 {
                continue;
            }
            let dm = dmin_all * m as f32;
            for i in 32 * j..32 * j + 32 {
                l[i] = nearest_int((x[i] + dm) / d).clamp(0, 15) as u8;
            }
        }
        for (c, q) in b[OFF_QS..OFF_QS + 128].chunks_exact_mut(32).enumerate() {
            for (i, q) in q.iter_mut().enumerate() {
                *q = l[64 * c + i] | (l[64 * c + 32 + i] << 4);
            }
        }
    }
}

/// Q4_K . Q8_K (ggml's `ggml_vec_dot_q4_K_q8_K_generic`): quants times activations in 8
/// integer lanes (element e to lane e % 8) scaled per super-block into 8 f32 lane sums; the
/// mins are applied through the activation's 16-element sums and subtracted from a separate
/// running total, to which the 8 lane sums are added in order at the end.
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
        // Unpack the nibbles once, in element order, then multiply 8 lanes at a time.
        let mut a = [0i8; 256];
        for (c, qs) in x[OFF_QS..OFF_QS + 128].chunks_exact(32).enumerate() {
            for (l, &q) in qs.iter().enumerate() {
                a[64 * c + l] = (q & 0xF) as i8;
                a[64 * c + 32 + l] = (q >> 4) as i8;
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
    fn scale_min_unpacking() {
        let mut s = [0u8; 12];
        let sc: [u8; 8] = core::array::from_fn(|i| (i as u8 * 9 + 3) % 64);
        let mn: [u8; 8] = core::array::from_fn(|i| (i as u8 * 13 + 1) % 64);
        for j in 0..4 {
            s[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
            s[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6);
            s[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4);
        }
        for j in 0..8 {
            assert_eq!(scale_min_k4(j, &s), (sc[j], mn[j]), "sub-block {j}");
        }
    }

    #[test]
    fn dequantize_known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[0..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        b[2..4].copy_from_slice(&half::f16::from_f32(1.0).to_bits().to_le_bytes());
        b[OFF_SCALES] = 2; // sub-block 0: scale 2
        b[OFF_SCALES + 1] = 1; // sub-block 1: scale 1
        b[OFF_SCALES + 4] = 3; // sub-block 0: min 3
        b[OFF_QS] = 0x7F; // element 0: 15, element 32: 7
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!((y[0], y[1], y[32]), (15.0 - 3.0, -3.0, 3.5));
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::Q4_K, 2);
    }
}
