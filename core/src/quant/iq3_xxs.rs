//! IQ3_XXS: 3.0625 bits per weight. Super-blocks of 256 in 8 sub-blocks of 32, each sub-block
//! 4 groups of 8; a group is two entries of a 256-entry grid of 4 magnitudes (4..62) with 7
//! stored sign bits (the eighth makes the count of negatives even), and each sub-block has a
//! 4-bit scale s: x = d * (0.5 + s) * 0.5 * grid[j] * sign[j]. Dotted against Q8_K
//! activations.
//!
//! Layout (98 bytes): `d: f16` at 0, `qs: [u8; 64]` at 2 (8 grid indices per sub-block, two
//! per group), then at 66 one little-endian u32 per sub-block whose bits 7l..7l+7 are group
//! l's signs and bits 28..32 the scale s.
//!
//! Every field is exactly as wide as its table is long (an 8-bit index into 256 grid entries,
//! a 7-bit index into 128 sign patterns), so no byte of a file can reach outside a table.

use super::common::{f16_at, grid_dot_q8_k, u32_at};
pub use smolrun_kernels::iq_grids::{IQ3XXS_GRID, KSIGNS_IQ2XS};

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 98;
pub const OFF_D: usize = 0;
pub const OFF_QS: usize = 2;
pub const OFF_SIGNS: usize = 66;

/// Magnitude j (0..4) of grid entry `index`.
#[inline(always)]
pub fn grid(index: u8, j: usize) -> i32 {
    (IQ3XXS_GRID[index as usize] >> (8 * (j & 3))) as u8 as i32
}

/// The sign byte of the group whose 7 stored bits are `bits` (higher bits ignored): bit j set
/// = element j negative.
#[inline(always)]
pub fn signs(bits: u32) -> u8 {
    KSIGNS_IQ2XS[(bits & 127) as usize]
}

/// Element j (0..8) of group l's magnitudes in sub-block `ib`: the group's first grid entry
/// holds elements 0..4, its second 4..8.
#[inline(always)]
fn magnitude(b: &[u8], ib: usize, l: usize, j: usize) -> i32 {
    grid(b[OFF_QS + 8 * ib + 2 * l + j / 4], j % 4)
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let aux = u32_at(b, OFF_SIGNS + 4 * ib);
            // ggml's order: (d * (0.5 + s)) * 0.5, then (db * grid) * +-1.
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let s = signs(aux >> (7 * l));
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
        let aux = u32_at(b, OFF_SIGNS + 4 * ib);
        let ls = 2 * (aux >> 28) as i32 + 1;
        let mut sumi = 0i32;
        for l in 0..4 {
            let s = signs(aux >> (7 * l));
            let q8 = &q8[32 * ib + 8 * l..32 * ib + 8 * l + 8];
            for (j, &q) in q8.iter().enumerate() {
                let p = magnitude(b, ib, l, j) * q as i8 as i32;
                sumi += if s & (1 << j) != 0 { -p } else { p };
            }
        }
        bsum += sumi * ls;
    }
    bsum
}

/// IQ3_XXS . Q8_K (ggml's `ggml_vec_dot_iq3_xxs_q8_K_generic`): per super-block an exact
/// integer ([`block_sum`]), sumf += (f16(d) * dy) * bsum in block order, then 0.25 * sumf.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let sumf = grid_dot_q8_k(n, w, act, BLOCK_BYTES, OFF_D, block_sum);
    0.25 * sumf
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn grid_is_ggmls() {
        // Spot values of ggml-common.h's table (the whole table comes from it by script).
        assert_eq!(IQ3XXS_GRID[0], 0x04040404);
        assert!(IQ3XXS_GRID
            .iter()
            .all(|g| g.to_le_bytes().iter().all(|&b| (4..=62).contains(&b))));
    }

    #[test]
    fn dequantize_known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[0..2].copy_from_slice(&half::f16::from_f32(2.0).to_bits().to_le_bytes());
        // Sub-block 0, group 0: grid entries 0 (4, 4, 4, 4) and 0; signs of group 0 = bits 3
        // (elements 0 and 1 negative), s = 1: db = 2 * 1.5 * 0.5 = 1.5.
        b[OFF_SIGNS..OFF_SIGNS + 4].copy_from_slice(&(3u32 | (1 << 28)).to_le_bytes());
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!(&y[..8], &[-6.0, -6.0, 6.0, 6.0, 6.0, 6.0, 6.0, 6.0]);
        // Sub-block 1 (s = 0: db = 0.5), group 0's second entry = grid 255.
        b[OFF_QS + 9] = 255;
        dequantize_row(&b, &mut y);
        let g = IQ3XXS_GRID[255].to_le_bytes();
        for j in 0..4 {
            assert_eq!(y[32 + 4 + j], 0.5 * g[j] as f32);
        }
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::IQ3_XXS, 2);
    }
}
