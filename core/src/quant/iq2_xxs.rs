//! IQ2_XXS: 2.0625 bits per weight. Super-blocks of 256 in 8 sub-blocks of 32, each sub-block
//! 4 groups of 8; a group is one entry of a 256-entry grid of 8 magnitudes (each 8, 25 or 43)
//! with 7 stored sign bits (the eighth makes the count of negatives even), and each sub-block
//! has a 4-bit scale s: x = d * (0.5 + s) * 0.25 * grid[j] * sign[j]. Dotted against Q8_K
//! activations.
//!
//! Layout (66 bytes): `d: f16` at 0, then 8 sub-blocks of 8 bytes at 2: bytes 0..4 are the
//! 4 groups' grid indices, bytes 4..8 a little-endian u32 whose bits 7l..7l+7 are group l's
//! signs and bits 28..32 the scale s.
//!
//! Every field is exactly as wide as its table is long (an 8-bit index into 256 grid entries,
//! a 7-bit index into 128 sign patterns), so no byte of a file can reach outside a table.

use super::common::{f16_at, grid_dot_q8_k, u32_at};
pub use smolrun_kernels::iq_grids::{IQ2XXS_GRID, KSIGNS_IQ2XS};

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 66;
pub const OFF_D: usize = 0;
pub const OFF_QS: usize = 2;

/// Magnitude j (0..8) of grid entry `index`.
#[inline(always)]
pub fn grid(index: u8, j: usize) -> i32 {
    (IQ2XXS_GRID[index as usize] >> (8 * (j & 7))) as u8 as i32
}

/// The sign byte of the group whose 7 stored bits are `bits` (higher bits ignored): bit j set
/// = element j negative.
#[inline(always)]
pub fn signs(bits: u32) -> u8 {
    KSIGNS_IQ2XS[(bits & 127) as usize]
}

/// Sub-block `ib` (0..8) of the super-block `b`: its 4 grid indices and its signs-and-scale
/// word.
#[inline(always)]
fn sub_block(b: &[u8], ib: usize) -> ([u8; 4], u32) {
    let o = OFF_QS + 8 * ib;
    ([b[o], b[o + 1], b[o + 2], b[o + 3]], u32_at(b, o + 4))
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let (idx, aux) = sub_block(b, ib);
            // ggml's order: (d * (0.5 + s)) * 0.25, then (db * grid) * +-1.
            let db = d * (0.5 + (aux >> 28) as f32) * 0.25;
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let s = signs(aux >> (7 * l));
                for (j, y) in y.iter_mut().enumerate() {
                    let sign = if s & (1 << j) != 0 { -1.0 } else { 1.0 };
                    *y = db * grid(idx[l], j) as f32 * sign;
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
        let (idx, aux) = sub_block(b, ib);
        let ls = 2 * (aux >> 28) as i32 + 1;
        let mut sumi = 0i32;
        for l in 0..4 {
            let s = signs(aux >> (7 * l));
            let q8 = &q8[32 * ib + 8 * l..32 * ib + 8 * l + 8];
            for (j, &q) in q8.iter().enumerate() {
                let p = grid(idx[l], j) * q as i8 as i32;
                sumi += if s & (1 << j) != 0 { -p } else { p };
            }
        }
        bsum += sumi * ls;
    }
    bsum
}

/// IQ2_XXS . Q8_K (ggml's `ggml_vec_dot_iq2_xxs_q8_K_generic`): per super-block an exact
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
    fn grid_and_signs_are_ggmls() {
        // Spot values of ggml-common.h's tables (the whole tables come from it by script).
        assert_eq!(IQ2XXS_GRID[0], 0x0808080808080808);
        assert_eq!(IQ2XXS_GRID[255], 0x2b2b2b1908081908);
        assert!(IQ2XXS_GRID
            .iter()
            .all(|g| g.to_le_bytes().iter().all(|b| [8, 25, 43].contains(b))));
        // Each sign byte: the 7 bits, and the parity bit that makes the negatives even.
        for (i, &s) in KSIGNS_IQ2XS.iter().enumerate() {
            assert_eq!(s & 127, i as u8);
            assert_eq!(s.count_ones() % 2, 0);
        }
    }

    #[test]
    fn dequantize_known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[0..2].copy_from_slice(&half::f16::from_f32(2.0).to_bits().to_le_bytes());
        // Sub-block 0: group 0 = grid 1 (0x080808080808082b), signs of group 0 = bits 3
        // (elements 0 and 1 negative), s = 1: db = 2 * 1.5 * 0.25 = 0.75.
        b[OFF_QS] = 1;
        b[OFF_QS + 4..OFF_QS + 8].copy_from_slice(&(3u32 | (1 << 28)).to_le_bytes());
        // Sub-block 7: group 3 = grid 255, signs 1 (element 0 and, by parity, element 7), s = 15.
        b[OFF_QS + 56 + 3] = 255;
        b[OFF_QS + 60..OFF_QS + 64].copy_from_slice(&((1u32 << 21) | (15 << 28)).to_le_bytes());
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!(&y[..8], &[-32.25, -6.0, 6.0, 6.0, 6.0, 6.0, 6.0, 6.0]);
        // db = 2 * 15.5 * 0.25 = 7.75; grid 255 = bytes 08 19 08 08 19 2b 2b 2b.
        let g = [8.0, 25.0, 8.0, 8.0, 25.0, 43.0, 43.0, 43.0];
        let want: [f32; 8] = core::array::from_fn(|j| {
            let v = 7.75 * g[j];
            if j == 0 || j == 7 {
                -v
            } else {
                v
            }
        });
        assert_eq!(&y[248..], &want);
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::IQ2_XXS, 2);
    }
}
