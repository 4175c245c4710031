//! Q2_K: super-blocks of 256 = 16 sub-blocks of 16. Each sub-block has a 4-bit scale and a
//! 4-bit min (one byte: scale low, min high), scaled by the super-block's f16 `d` and `dmin`;
//! x = d * scale * q - dmin * min, q in 0..3.
//!
//! Quant order: the 256 elements are two halves of 128; in half h, element 32*s + l
//! (s = 0..3 shift step, l = 0..31) is bits 2s..2s+2 of byte qs[32h + l].
//! Dotted against Q8_K.
//!
//! Layout (84 bytes): `scales: [u8; 16]` at 0, `qs: [u8; 64]` at 16, `d: f16` at 80,
//! `dmin: f16` at 82.

use super::common::{f16_at, make_qkx2_quants, nearest_int, put_f16};
use super::q8_k;

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 84;
pub const OFF_SCALES: usize = 0;
pub const OFF_QS: usize = 16;
pub const OFF_D: usize = 80;
pub const OFF_DMIN: usize = 82;

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        let min = f16_at(b, OFF_DMIN);
        let mut is = 0;
        let mut yi = 0;
        for half in 0..2 {
            let q = &b[OFF_QS + 32 * half..OFF_QS + 32 * half + 32];
            for shift in [0, 2, 4, 6] {
                for lo in [0, 16] {
                    let sc = b[OFF_SCALES + is];
                    is += 1;
                    let dl = d * (sc & 0xF) as f32;
                    let ml = min * (sc >> 4) as f32;
                    for &ql in &q[lo..lo + 16] {
                        y[yi] = dl * ((ql >> shift) & 3) as f32 - ml;
                        yi += 1;
                    }
                }
            }
        }
    }
}

/// ggml's `quantize_row_q2_K_ref` (no importance matrix, what llama-quantize writes then):
/// per 16-element sub-block, a scale and min fitted by `make_qkx2_quants` (weights |x|,
/// absolute error); both quantized to 4 bits against the largest of each (d = max_scale / 15,
/// dmin = max_min / 15); then every element re-quantized against the *stored* values:
/// q = clamp(round((x + dmin * m) / (d * sc)), 0, 3). A sub-block whose stored d * sc is 0
/// keeps the quants of its fit.
pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / BLOCK_ELEMS * BLOCK_BYTES, out.len());
    const Q4SCALE: f32 = 15.0;
    let mut l = [0u8; BLOCK_ELEMS];
    let mut laux = [0u8; 16];
    let mut weights = [0f32; 16];
    for (b, x) in out
        .chunks_exact_mut(BLOCK_BYTES)
        .zip(x.chunks_exact(BLOCK_ELEMS))
    {
        let mut scales = [0f32; 16];
        let mut mins = [0f32; 16];
        let (mut max_scale, mut max_min) = (0f32, 0f32);
        let subs = x.as_chunks::<16>().0.iter().zip(l.as_chunks_mut::<16>().0);
        for (j, (xs, sub)) in subs.enumerate() {
            for (w, v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            (scales[j], mins[j]) =
                make_qkx2_quants(3, xs, &weights, sub, &mut laux, -0.5, 0.1, 15, true);
            if scales[j] > max_scale {
                max_scale = scales[j];
            }
            if mins[j] > max_min {
                max_min = mins[j];
            }
        }
        let sc = &mut b[OFF_SCALES..OFF_SCALES + 16];
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..16 {
                sc[j] = nearest_int(iscale * scales[j]) as u8;
            }
            put_f16(b, OFF_D, max_scale / Q4SCALE);
        } else {
            sc.fill(0);
            put_f16(b, OFF_D, 0.0);
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..16 {
                let m = nearest_int(iscale * mins[j]);
                b[OFF_SCALES + j] |= (m << 4) as u8;
            }
            put_f16(b, OFF_DMIN, max_min / Q4SCALE);
        } else {
            put_f16(b, OFF_DMIN, 0.0);
        }
        let (d_all, dmin_all) = (f16_at(b, OFF_D), f16_at(b, OFF_DMIN));
        for j in 0..16 {
            let s = b[OFF_SCALES + j];
            let d = d_all * (s & 0xF) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = dmin_all * (s >> 4) as f32;
            for i in 16 * j..16 * j + 16 {
                l[i] = nearest_int((x[i] + dm) / d).clamp(0, 3) as u8;
            }
        }
        for h in 0..2 {
            for i in 0..32 {
                let e = 128 * h + i;
                b[OFF_QS + 32 * h + i] =
                    l[e] | (l[e + 32] << 2) | (l[e + 64] << 4) | (l[e + 96] << 6);
            }
        }
    }
}

/// Q2_K . Q8_K (ggml's `ggml_vec_dot_q2_K_q8_K_generic`): the mins meet the activation's
/// 16-element sums; per super-block sumf += (dy * d) * isum - (dy * dmin) * summs.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * q8_k::BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, y) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(q8_k::BLOCK_BYTES))
    {
        let sc = &x[OFF_SCALES..OFF_SCALES + 16];
        let q8 = &y[q8_k::OFF_QS..q8_k::OFF_QS + 256];
        let mut summs = 0i32;
        for (j, &s) in sc.iter().enumerate() {
            summs += q8_k::bsum(y, j) * (s >> 4) as i32;
        }
        let dy = super::common::f32_at(y, q8_k::OFF_D);
        let dall = dy * f16_at(x, OFF_D);
        let dmin = dy * f16_at(x, OFF_DMIN);

        let mut isum = 0i32;
        let mut is = 0;
        let mut e = 0; // element index into q8
        for half in 0..2 {
            let q2 = &x[OFF_QS + 32 * half..OFF_QS + 32 * half + 32];
            for shift in [0, 2, 4, 6] {
                for lo in [0, 16] {
                    let d = (sc[is] & 0xF) as i32;
                    is += 1;
                    let mut isuml = 0i32;
                    for l in lo..lo + 16 {
                        isuml += (q8[e + l] as i8 as i32) * ((q2[l] >> shift) & 3) as i32;
                    }
                    isum += d * isuml;
                }
                e += 32;
            }
        }
        sumf += dall * isum as f32 - dmin * summs as f32;
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
        b[OFF_DMIN..OFF_DMIN + 2]
            .copy_from_slice(&half::f16::from_f32(0.25).to_bits().to_le_bytes());
        b[OFF_SCALES] = 0x23; // sub-block 0: scale 3, min 2
        b[OFF_SCALES + 2] = 0x01; // sub-block 2 (elements 32..48): scale 1, min 0
        b[OFF_QS] = 0b0000_1011; // element 0: 3, element 32: 2
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!(
            (y[0], y[1], y[32], y[33]),
            (0.5 * 3.0 * 3.0 - 0.5, -0.5, 1.0, 0.0)
        );
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::Q2_K, 2);
    }
}
