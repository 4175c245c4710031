//! IQ2_XS: 2.3125 bits per weight. Super-blocks of 256 in 8 sub-blocks of 32, each sub-block
//! 4 groups of 8; a group is one u16: 9 bits of index into a 512-entry grid of 8 magnitudes
//! (each 8, 25 or 43) and 7 stored sign bits (the eighth makes the count of negatives even).
//! Each half sub-block (2 groups, 16 weights) has a 4-bit scale s:
//! x = d * (0.5 + s) * 0.25 * grid[j] * sign[j]. Dotted against Q8_K activations.
//!
//! Layout (74 bytes): `d: f16` at 0, `qs: [u16; 32]` at 2 (group g of the super-block at
//! 2 + 2g: bits 0..9 the grid index, bits 9..16 the sign field), `scales: [u8; 8]` at 66
//! (sub-block ib's byte: low nibble for groups 0-1, high nibble for groups 2-3).
//!
//! Every field is exactly as wide as its table is long (a 9-bit index into 512 grid entries,
//! a 7-bit index into 128 sign patterns), so no byte of a file can reach outside a table.

use super::common::{f16_at, grid_dot_q8_k};
pub use smolrun_kernels::iq_grids::{IQ2XS_GRID, KSIGNS_IQ2XS};

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 74;
pub const OFF_D: usize = 0;
pub const OFF_QS: usize = 2;
pub const OFF_SCALES: usize = 66;

/// Magnitude j (0..8) of the grid entry of group word `q` (its low 9 bits).
#[inline(always)]
pub fn grid(q: u16, j: usize) -> i32 {
    (IQ2XS_GRID[(q & 511) as usize] >> (8 * (j & 7))) as u8 as i32
}

/// The sign byte of group word `q` (its top 7 bits): bit j set = element j negative.
#[inline(always)]
pub fn signs(q: u16) -> u8 {
    KSIGNS_IQ2XS[(q >> 9) as usize & 127]
}

/// Group word `g` (0..32) of the super-block `b`.
#[inline(always)]
fn group(b: &[u8], g: usize) -> u16 {
    u16::from_le_bytes([b[OFF_QS + 2 * g], b[OFF_QS + 2 * g + 1]])
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
            let q = group(b, g);
            let s = signs(q);
            for (j, y) in y.iter_mut().enumerate() {
                let sign = if s & (1 << j) != 0 { -1.0 } else { 1.0 };
                *y = db * grid(q, j) as f32 * sign;
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
            let q = group(b, g);
            let s = signs(q);
            for (j, &a) in q8[8 * g..8 * g + 8].iter().enumerate() {
                let p = grid(q, j) * a as i8 as i32;
                sumi += if s & (1 << j) != 0 { -p } else { p };
            }
        }
        bsum += sumi * ls;
    }
    bsum
}

/// IQ2_XS . Q8_K (ggml's `ggml_vec_dot_iq2_xs_q8_K_generic`): per super-block an exact
/// integer ([`block_sum`]), sumf += (f16(d) * dy) * bsum in block order, then 0.125 * sumf.
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
        assert_eq!(IQ2XS_GRID[0], 0x0808080808080808);
        assert_eq!(IQ2XS_GRID[511], 0x2b2b2b2b2b2b2b2b);
        assert!(IQ2XS_GRID
            .iter()
            .all(|g| g.to_le_bytes().iter().all(|b| [8, 25, 43].contains(b))));
    }

    #[test]
    fn dequantize_known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[0..2].copy_from_slice(&half::f16::from_f32(2.0).to_bits().to_le_bytes());
        // Group 0: grid 511, signs field 3 (elements 0 and 1 negative); sub-block 0's low
        // nibble 1: db = 2 * 1.5 * 0.25 = 0.75.
        b[OFF_QS..OFF_QS + 2].copy_from_slice(&(511u16 | (3 << 9)).to_le_bytes());
        // Group 31 (sub-block 7, second half): grid 0, signs field 1 (element 0 and, by
        // parity, element 7), high nibble 15: db = 2 * 15.5 * 0.25 = 7.75.
        b[OFF_QS + 62..OFF_QS + 64].copy_from_slice(&(1u16 << 9).to_le_bytes());
        b[OFF_SCALES] = 1;
        b[OFF_SCALES + 7] = 0xf0;
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        let v = 0.75 * 43.0;
        assert_eq!(&y[..8], &[-v, -v, v, v, v, v, v, v]);
        // Group 8 (sub-block 1, scale 0): db = 2 * 0.5 * 0.25 = 0.25, grid 0 = all 8.
        assert_eq!(&y[64..72], &[2.0; 8]);
        let v = 7.75 * 8.0;
        assert_eq!(&y[248..], &[-v, v, v, v, v, v, v, -v]);
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::IQ2_XS, 2);
    }
}
