//! IQ1_S: 1.5625 bits per weight. Super-blocks of 256 in 8 sub-blocks of 32, each sub-block
//! 4 groups of 8; a group is an 11-bit index into a 2048-entry grid of 8 signed values (-1, 0
//! or 1). Each sub-block has a 3-bit scale s and a sign bit for a shift of 1/8:
//! x = d * (2s + 1) * (grid[j] +- 0.125). Dotted against Q8_K activations (and their block
//! sums, for the shift).
//!
//! Layout (50 bytes): `d: f16` at 0, `qs: [u8; 32]` at 2 (group g's low 8 index bits),
//! `qh: [u16; 8]` at 34 (sub-block ib's word: bits 3l..3l+3 the top 3 index bits of its group
//! l, bits 12..15 the scale s, bit 15 set = the shift is -1/8).
//!
//! The index is 8 + 3 bits, exactly as wide as the 2048-entry grid is long, so no byte of a
//! file can reach outside it.

use super::common::{f16_at, f32_at, i16_at};
use super::q8_k;
pub use smolrun_kernels::iq_grids::IQ1S_GRID;

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 50;
pub const OFF_D: usize = 0;
pub const OFF_QS: usize = 2;
pub const OFF_QH: usize = 34;
/// ggml's IQ1S_DELTA: the shift of every value of a sub-block, by the sign of its bit 15.
pub const DELTA: f32 = 0.125;

/// Sub-block `ib`'s word of high index bits, scale and shift sign.
#[inline(always)]
pub fn qh(b: &[u8], ib: usize) -> u16 {
    u16::from_le_bytes([b[OFF_QH + 2 * ib], b[OFF_QH + 2 * ib + 1]])
}

/// Value j (0..8) of grid entry `index` (its low 11 bits): -1, 0 or 1.
#[inline(always)]
pub fn grid(index: usize, j: usize) -> i32 {
    (IQ1S_GRID[index & 2047] >> (8 * (j & 7))) as u8 as i8 as i32
}

/// The grid index (11 bits) of group l (0..4) of sub-block `ib`.
#[inline(always)]
fn index(b: &[u8], ib: usize, l: usize) -> usize {
    b[OFF_QS + 4 * ib + l] as usize | ((qh(b, ib) as usize >> (3 * l)) & 7) << 8
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let h = qh(b, ib);
            // ggml's order: d * f32(2s + 1), then dl * (grid + delta).
            let dl = d * (2 * ((h >> 12) & 7) as i32 + 1) as f32;
            let delta = if h & 0x8000 != 0 { -DELTA } else { DELTA };
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let k = index(b, ib, l);
                for (j, y) in y.iter_mut().enumerate() {
                    *y = dl * (grid(k, j) as f32 + delta);
                }
            }
        }
    }
}

/// The exact integers of one super-block against its Q8_K block `y` (whole, with its block
/// sums): sum over sub-blocks of (2s + 1) * sum(grid * q8), and of (2s + 1) * (+-1) * (the
/// sub-block's activation sum). What every SIMD face computes too.
#[inline(always)]
pub fn block_sums(b: &[u8], y: &[u8]) -> (i32, i32) {
    let (mut sumi, mut sumi1) = (0i32, 0i32);
    for ib in 0..8 {
        let h = qh(b, ib);
        let ls = 2 * ((h >> 12) & 7) as i32 + 1;
        let mut lsum = 0i32;
        for l in 0..4 {
            let k = index(b, ib, l);
            let q8 = &y[q8_k::OFF_QS + 32 * ib + 8 * l..q8_k::OFF_QS + 32 * ib + 8 * l + 8];
            for (j, &a) in q8.iter().enumerate() {
                lsum += a as i8 as i32 * grid(k, j);
            }
        }
        sumi += ls * lsum;
        sumi1 += shift_sum(h, y, ib);
    }
    (sumi, sumi1)
}

/// (2s + 1) * (+-1) * (sub-block `ib`'s activation sum, from the Q8_K block sums of `y`), for
/// the sub-block word `h`.
#[inline(always)]
pub fn shift_sum(h: u16, y: &[u8], ib: usize) -> i32 {
    let ls = 2 * ((h >> 12) & 7) as i32 + 1;
    let delta = if h & 0x8000 != 0 { -1 } else { 1 };
    let bs =
        i16_at(y, q8_k::OFF_BSUMS + 4 * ib) as i32 + i16_at(y, q8_k::OFF_BSUMS + 4 * ib + 2) as i32;
    ls * delta * bs
}

/// ggml's float step of one super-block: (f16(d) * dy) * (f32(sumi) + 0.125 * f32(sumi1)).
#[inline(always)]
pub fn block_value(d: f32, dy: f32, sumi: i32, sumi1: i32) -> f32 {
    d * dy * (sumi as f32 + DELTA * sumi1 as f32)
}

/// IQ1_S . Q8_K (ggml's `ggml_vec_dot_iq1_s_q8_K_generic`): per super-block the exact
/// integers ([`block_sums`]), sumf += [`block_value`] in block order; no final factor.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * q8_k::BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, y) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(q8_k::BLOCK_BYTES))
    {
        let (sumi, sumi1) = block_sums(x, y);
        sumf += block_value(f16_at(x, OFF_D), f32_at(y, q8_k::OFF_D), sumi, sumi1);
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn grid_is_ggmls() {
        // Spot values of ggml-common.h's table (the whole table comes from it by script).
        assert_eq!(IQ1S_GRID[0], 0xffffffffffffffff);
        assert_eq!(IQ1S_GRID[1], 0xffffffffffffff01);
        assert!(IQ1S_GRID
            .iter()
            .all(|g| g.to_le_bytes().iter().all(|b| [0xff, 0, 1].contains(b))));
    }

    #[test]
    fn dequantize_known_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[0..2].copy_from_slice(&half::f16::from_f32(2.0).to_bits().to_le_bytes());
        // Sub-block 0: group 0 = grid 1 (element 0 is 1, the others -1), s = 1 (dl = 6),
        // shift +1/8.
        b[OFF_QS] = 1;
        b[OFF_QH..OFF_QH + 2].copy_from_slice(&(1u16 << 12).to_le_bytes());
        // Sub-block 7: s = 0 (dl = 2), shift -1/8, group 3 = grid 0 (all -1).
        b[OFF_QH + 14..OFF_QH + 16].copy_from_slice(&0x8000u16.to_le_bytes());
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!(
            &y[..8],
            &[6.75, -5.25, -5.25, -5.25, -5.25, -5.25, -5.25, -5.25]
        );
        assert_eq!(&y[248..], &[-2.25; 8]);
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::IQ1_S, 2);
    }
}
