//! IQ3_S: 3.4375 bits per weight. Super-blocks of 256 in 8 sub-blocks of 32, each sub-block
//! 4 groups of 8; a group is two 9-bit indices into a 512-entry grid of 4 magnitudes (odd,
//! 1..15) and a whole byte of signs (bit j set = element j negative, no parity rule). Each
//! sub-block has a 4-bit scale s: x = d * (1 + 2s) * grid[j] * sign[j]. Dotted against Q8_K
//! activations.
//!
//! Layout (110 bytes): `d: f16` at 0, `qs: [u8; 64]` at 2 (sub-block ib's 8 low index bytes
//! at 2 + 8ib), `qh: [u8; 8]` at 66 (sub-block ib's byte: bit k is the 9th bit of its index
//! k), the sign bytes `[u8; 32]` at 74 (group g's at 74 + g), `scales: [u8; 4]` at 106
//! (sub-block ib's nibble: the low one of byte ib/2 for even ib, the high one for odd).
//!
//! The index is 8 + 1 bits, exactly as wide as the 512-entry grid is long, so no byte of a
//! file can reach outside it.

use super::common::{f16_at, grid_dot_q8_k};
pub use smolrun_kernels::iq_grids::IQ3S_GRID;

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 110;
pub const OFF_D: usize = 0;
pub const OFF_QS: usize = 2;
pub const OFF_QH: usize = 66;
pub const OFF_SIGNS: usize = 74;
pub const OFF_SCALES: usize = 106;

/// Grid index k (0..8) of sub-block `ib` (0..8) of the super-block `b` (9 bits).
#[inline(always)]
pub fn index(b: &[u8], ib: usize, k: usize) -> usize {
    let hi = (b[OFF_QH + ib] >> k) & 1;
    b[OFF_QS + 8 * ib + k] as usize | (hi as usize) << 8
}

/// Magnitude j (0..4) of grid entry `index` (its low 9 bits).
#[inline(always)]
pub fn grid(index: usize, j: usize) -> i32 {
    (IQ3S_GRID[index & 511] >> (8 * (j & 3))) as u8 as i32
}

/// The 4-bit scale of sub-block `ib` (0..8).
#[inline(always)]
fn scale(b: &[u8], ib: usize) -> u32 {
    (b[OFF_SCALES + ib / 2] >> (4 * (ib & 1)) & 15) as u32
}

/// Magnitude j (0..8) of group l (0..4) of sub-block `ib`: two grid entries of 4.
#[inline(always)]
fn magnitude(b: &[u8], ib: usize, l: usize, j: usize) -> i32 {
    grid(index(b, ib, 2 * l + j / 4), j % 4)
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            // ggml's order: d * f32(1 + 2s), then (db * grid) * +-1.
            let db = d * (1 + 2 * scale(b, ib)) as f32;
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let s = b[OFF_SIGNS + 4 * ib + l];
                for (j, y) in y.iter_mut().enumerate() {
                    let sign = if s & (1 << j) != 0 { -1.0 } else { 1.0 };
                    *y = db * magnitude(b, ib, l, j) as f32 * sign;
                }
            }
        }
    }
}

/// The exact integer of one super-block against its Q8_K quants `q8` (256 of them):
/// sum over sub-blocks of (2s + 1) * sum(grid * sign * q8). What every SIMD face computes too.
#[inline(always)]
pub fn block_sum(b: &[u8], q8: &[u8]) -> i32 {
    let mut bsum = 0i32;
    for ib in 0..8 {
        let ls = 2 * scale(b, ib) as i32 + 1;
        let mut sumi = 0i32;
        for l in 0..4 {
            let s = b[OFF_SIGNS + 4 * ib + l];
            let q8 = &q8[32 * ib + 8 * l..32 * ib + 8 * l + 8];
            for (j, &a) in q8.iter().enumerate() {
                let p = magnitude(b, ib, l, j) * a as i8 as i32;
                sumi += if s & (1 << j) != 0 { -p } else { p };
            }
        }
        bsum += sumi * ls;
    }
    bsum
}

/// IQ3_S . Q8_K (ggml's `ggml_vec_dot_iq3_s_q8_K_generic`): per super-block an exact integer
/// ([`block_sum`]), sumf += (f16(d) * dy) * bsum in block order; no final factor.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    grid_dot_q8_k(n, w, act, BLOCK_BYTES, OFF_D, block_sum)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn grid_is_ggmls() {
        // Spot values of ggml-common.h's table (the whole table comes from it by script).
        assert_eq!(IQ3S_GRID[0], 0x01010101);
        assert_eq!(IQ3S_GRID[511], 0x0f0f0101);
        assert!(IQ3S_GRID
            .iter()
            .all(|g| g.to_le_bytes().iter().all(|b| b % 2 == 1 && *b <= 15)));
    }

    #[test]
    fn dequantize_known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[0..2].copy_from_slice(&half::f16::from_f32(2.0).to_bits().to_le_bytes());
        // Sub-block 0, group 0: indices 511 (qs 255, qh bit 0) and 0, signs 0b11; scale 1:
        // db = 2 * 3 = 6.
        b[OFF_QS] = 255;
        b[OFF_QH] = 1;
        b[OFF_SIGNS] = 3;
        b[OFF_SCALES] = 1;
        // Sub-block 7 (the high nibble of byte 3) = 15: db = 2 * 31 = 62; its group 3's sign
        // byte 0x80 (element 7 only).
        b[OFF_SIGNS + 31] = 0x80;
        b[OFF_SCALES + 3] = 0xf0;
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!(&y[..8], &[-6.0, -6.0, 90.0, 90.0, 6.0, 6.0, 6.0, 6.0]);
        assert_eq!(
            &y[248..],
            &[62.0, 62.0, 62.0, 62.0, 62.0, 62.0, 62.0, -62.0]
        );
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::IQ3_S, 2);
    }
}
