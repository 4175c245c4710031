//! IQ2_S: 2.5625 bits per weight. Super-blocks of 256 in 8 sub-blocks of 32, each sub-block
//! 4 groups of 8; a group is a 10-bit index into a 1024-entry grid of 8 magnitudes (each 8, 25
//! or 43) and a whole byte of signs (bit j set = element j negative, no parity rule). Each half
//! sub-block (2 groups, 16 weights) has a 4-bit scale s:
//! x = d * (0.5 + s) * 0.25 * grid[j] * sign[j]. Dotted against Q8_K activations.
//!
//! Layout (82 bytes): `d: f16` at 0, `qs: [u8; 32]` at 2 (group g's low 8 index bits), the
//! sign bytes `[u8; 32]` at 34 (group g's at 34 + g), `qh: [u8; 8]` at 66 (sub-block ib's
//! byte: bits 2l..2l+2 are the top 2 index bits of its group l), `scales: [u8; 8]` at 74
//! (sub-block ib's byte: low nibble for groups 0-1, high nibble for groups 2-3).
//!
//! The index is 8 + 2 bits, exactly as wide as the 1024-entry grid is long, so no byte of a
//! file can reach outside it.

use super::common::{f16_at, grid_dot_q8_k};
pub use smolrun_kernels::iq_grids::IQ2S_GRID;

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 82;
pub const OFF_D: usize = 0;
pub const OFF_QS: usize = 2;
pub const OFF_SIGNS: usize = 34;
pub const OFF_QH: usize = 66;
pub const OFF_SCALES: usize = 74;

/// The grid index (10 bits) of group `g` (0..32) of the super-block `b`.
#[inline(always)]
pub fn index(b: &[u8], g: usize) -> usize {
    let hi = (b[OFF_QH + g / 4] >> (2 * (g % 4))) & 3;
    b[OFF_QS + g] as usize | (hi as usize) << 8
}

/// Magnitude j (0..8) of grid entry `index` (its low 10 bits).
#[inline(always)]
pub fn grid(index: usize, j: usize) -> i32 {
    (IQ2S_GRID[index & 1023] >> (8 * (j & 7))) as u8 as i32
}

/// The 4-bit scale of group `g` (0..32): its sub-block's low nibble for the first two groups,
/// the high nibble for the last two.
#[inline(always)]
fn scale(b: &[u8], g: usize) -> u32 {
    (b[OFF_SCALES + g / 4] >> (4 * ((g / 2) & 1)) & 15) as u32
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        for (g, y) in y.chunks_exact_mut(8).enumerate() {
            // ggml's order: (d * (0.5 + s)) * 0.25, then (db * grid) * +-1.
            let db = d * (0.5 + scale(b, g) as f32) * 0.25;
            let (k, s) = (index(b, g), b[OFF_SIGNS + g]);
            for (j, y) in y.iter_mut().enumerate() {
                let sign = if s & (1 << j) != 0 { -1.0 } else { 1.0 };
                *y = db * grid(k, j) as f32 * sign;
            }
        }
    }
}

/// The exact integer of one super-block against its Q8_K quants `q8` (256 of them):
/// sum over half sub-blocks of (2s + 1) * sum(grid * sign * q8). What every SIMD face
/// computes too.
#[inline(always)]
pub fn block_sum(b: &[u8], q8: &[u8]) -> i32 {
    let mut bsum = 0i32;
    for half in 0..16 {
        let ls = 2 * scale(b, 2 * half) as i32 + 1;
        let mut sumi = 0i32;
        for g in 2 * half..2 * half + 2 {
            let (k, s) = (index(b, g), b[OFF_SIGNS + g]);
            for (j, &a) in q8[8 * g..8 * g + 8].iter().enumerate() {
                let p = grid(k, j) * a as i8 as i32;
                sumi += if s & (1 << j) != 0 { -p } else { p };
            }
        }
        bsum += sumi * ls;
    }
    bsum
}

/// IQ2_S . Q8_K (ggml's `ggml_vec_dot_iq2_s_q8_K_generic`): per super-block an exact integer
/// ([`block_sum`]), sumf += (f16(d) * dy) * bsum in block order, then 0.125 * sumf.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let sumf = grid_dot_q8_k(n, w, act, BLOCK_BYTES, OFF_D, block_sum);
    0.125 * sumf
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn grid_is_ggmls() {
        // Spot values of ggml-common.h's table (the whole table comes from it by script).
        assert_eq!(IQ2S_GRID[0], 0x0808080808080808);
        assert_eq!(IQ2S_GRID[1023], 0x2b2b2b2b2b2b2b2b);
        assert!(IQ2S_GRID
            .iter()
            .all(|g| g.to_le_bytes().iter().all(|b| [8, 25, 43].contains(b))));
    }

    #[test]
    fn dequantize_known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[0..2].copy_from_slice(&half::f16::from_f32(2.0).to_bits().to_le_bytes());
        // Group 0: index 1023 (qs 255, qh bits 0-1 = 3), signs 0b11; sub-block 0's low
        // nibble 1: db = 2 * 1.5 * 0.25 = 0.75.
        b[OFF_QS] = 255;
        b[OFF_QH] = 3;
        b[OFF_SIGNS] = 3;
        b[OFF_SCALES] = 1;
        // Group 31 (sub-block 7, group 3): index 0, sign byte 0x01 (no parity: only element
        // 0), high nibble 15: db = 2 * 15.5 * 0.25 = 7.75.
        b[OFF_SIGNS + 31] = 1;
        b[OFF_SCALES + 7] = 0xf0;
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        let v = 0.75 * 43.0;
        assert_eq!(&y[..8], &[-v, -v, v, v, v, v, v, v]);
        assert_eq!(&y[64..72], &[2.0; 8]);
        let v = 7.75 * 8.0;
        assert_eq!(&y[248..], &[-v, v, v, v, v, v, v, v]);
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::IQ2_S, 2);
    }
}
