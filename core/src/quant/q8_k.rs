//! Q8_K: the activation format of the K-quants and the ternary formats. 256 elements, an f32
//! scale (not f16: it carries the full precision of the activation's range), 256 signed bytes,
//! and the sum of every group of 16 quants so that the weight formats with a per-sub-block min
//! can apply it without touching the quants again.
//!
//! Layout (292 bytes): `d: f32` at 0, `qs: [i8; 256]` at 4, `bsums: [i16; 16]` at 260.

use super::common::{f32_at, i16_at, nearest_int};

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 292;
pub const OFF_D: usize = 0;
pub const OFF_QS: usize = 4;
pub const OFF_BSUMS: usize = 260;

/// Sum of quants 16*j .. 16*j+16 of a block.
#[inline(always)]
pub fn bsum(block: &[u8], j: usize) -> i32 {
    i16_at(block, OFF_BSUMS + 2 * j) as i32
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f32_at(b, OFF_D);
        for (y, &q) in y.iter_mut().zip(&b[OFF_QS..OFF_QS + BLOCK_ELEMS]) {
            *y = d * (q as i8) as f32;
        }
    }
}

/// ggml's `quantize_row_q8_K_ref`. The scale comes from the element of largest magnitude *with
/// its sign* (the first one on ties): iscale = -127 / max, so that element maps to -127 and the
/// other end of the range may reach +128, which is clamped to 127. d = 1 / iscale.
/// An all-zero block gets d = 0 and zero quants (ggml leaves its bsums unwritten; we zero them).
pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / BLOCK_ELEMS * BLOCK_BYTES, out.len());
    for (b, x) in out
        .chunks_exact_mut(BLOCK_BYTES)
        .zip(x.chunks_exact(BLOCK_ELEMS))
    {
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            b.fill(0);
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b[OFF_QS..OFF_QS + BLOCK_ELEMS].iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8 as u8;
        }
        for j in 0..BLOCK_ELEMS / 16 {
            let group = &b[OFF_QS + 16 * j..OFF_QS + 16 * j + 16];
            let sum: i32 = group.iter().map(|&q| q as i8 as i32).sum();
            b[OFF_BSUMS + 2 * j..OFF_BSUMS + 2 * j + 2]
                .copy_from_slice(&(sum as i16).to_le_bytes());
        }
        b[OFF_D..OFF_D + 4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn round_trip_and_group_sums() {
        let x = ramp(512, 0.013);
        let mut q = [0u8; 2 * BLOCK_BYTES];
        quantize_row(&x, &mut q);
        let mut y = [0f32; 512];
        dequantize_row(&q, &mut y);
        for blk in 0..2 {
            let b = &q[blk * BLOCK_BYTES..(blk + 1) * BLOCK_BYTES];
            let d = f32_at(b, OFF_D).abs();
            for j in 0..16 {
                let s: i32 = b[OFF_QS + 16 * j..OFF_QS + 16 * j + 16]
                    .iter()
                    .map(|&v| v as i8 as i32)
                    .sum();
                assert_eq!(bsum(b, j), s);
            }
            for i in blk * 256..blk * 256 + 256 {
                assert!(
                    (x[i] - y[i]).abs() <= d * 0.5 * 1.0001,
                    "{i}: {} vs {}",
                    x[i],
                    y[i]
                );
            }
        }
    }

    #[test]
    fn largest_element_maps_to_minus_127_and_zero_block_is_zero() {
        let mut x = [0.0f32; 256];
        x[7] = 3.0;
        x[9] = -3.0;
        let mut q = [0x55u8; BLOCK_BYTES];
        quantize_row(&x, &mut q);
        assert_eq!(q[OFF_QS + 7] as i8, -127);
        assert_eq!(q[OFF_QS + 9] as i8, 127);
        assert_eq!(f32_at(&q, OFF_D), 1.0 / (-127.0f32 / 3.0));
        quantize_row(&[0.0; 256], &mut q);
        assert!(q.iter().all(|&b| b == 0));
    }
}
