//! IQ1_M: 1.75 bits per weight. Super-blocks of 256 in 8 sub-blocks of 32, each sub-block
//! 4 groups of 8; a group is an 11-bit index into IQ1_S's 2048-entry grid of 8 signed values
//! (-1, 0 or 1) and a sign bit for a shift of 1/8; each half sub-block (16 weights) has a
//! 3-bit scale s: x = d * (2s + 1) * (grid[j] +- 0.125). The f16 d has no field of its own:
//! its 16 bits are the top nibbles of the 4 scale words. Dotted against Q8_K activations.
//!
//! Layout (56 bytes): `qs: [u8; 32]` at 0 (group g's low 8 index bits), `qh: [u8; 16]` at 32
//! (byte 2ib + h of sub-block ib: bits 0..3 the top of group 2h's index, bit 3 its shift sign,
//! bits 4..7 and bit 7 the same for group 2h + 1), `scales: [u16; 4]` at 48 (word ib/2: bits
//! 6(ib%2)..+3 and +3..+6 the scales of sub-block ib's halves; bits 12..16 a nibble of d).
//!
//! The index is 8 + 3 bits, exactly as wide as the 2048-entry grid is long, so no byte of a
//! file can reach outside it.

use super::common::f32_at;
use super::q8_k;
pub use smolrun_kernels::iq_grids::IQ1S_GRID;

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 56;
pub const OFF_QS: usize = 0;
pub const OFF_QH: usize = 32;
pub const OFF_SCALES: usize = 48;
/// ggml's IQ1M_DELTA.
pub const DELTA: f32 = 0.125;

#[inline(always)]
fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

/// The bits of the super-block's f16 d, gathered from the top nibbles of its scale words.
#[inline(always)]
pub fn d_bits(b: &[u8]) -> u16 {
    let sc = |k: usize| u16_at(b, OFF_SCALES + 2 * k);
    (sc(0) >> 12) | ((sc(1) >> 8) & 0x00f0) | ((sc(2) >> 4) & 0x0f00) | (sc(3) & 0xf000)
}

/// The super-block's d.
#[inline(always)]
pub fn d(b: &[u8]) -> f32 {
    half::f16::from_bits(d_bits(b)).to_f32()
}

/// Value j (0..8) of grid entry `index` (its low 11 bits): -1, 0 or 1.
#[inline(always)]
fn grid(index: usize, j: usize) -> i32 {
    (IQ1S_GRID[index & 2047] >> (8 * (j & 7))) as u8 as i8 as i32
}

/// Group l (0..4) of sub-block `ib`: its grid index (11 bits) and shift sign (+1 or -1).
#[inline(always)]
fn group(b: &[u8], ib: usize, l: usize) -> (usize, i32) {
    let h = (b[OFF_QH + 2 * ib + l / 2] >> (4 * (l % 2))) as usize;
    let index = b[OFF_QS + 4 * ib + l] as usize | (h & 7) << 8;
    (index, if h & 8 != 0 { -1 } else { 1 })
}

/// The odd scales 2s + 1 of sub-block `ib`'s two halves.
#[inline(always)]
fn scales(b: &[u8], ib: usize) -> [i32; 2] {
    let w = u16_at(b, OFF_SCALES + 2 * (ib / 2)) as i32 >> (6 * (ib % 2));
    [2 * (w & 7) + 1, 2 * ((w >> 3) & 7) + 1]
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = d(b);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            // ggml's order: d * f32(2s + 1), then dl * (grid + delta).
            let ls = scales(b, ib);
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let dl = d * ls[l / 2] as f32;
                let (k, sign) = group(b, ib, l);
                let delta = if sign < 0 { -DELTA } else { DELTA };
                for (j, y) in y.iter_mut().enumerate() {
                    *y = dl * (grid(k, j) as f32 + delta);
                }
            }
        }
    }
}

/// The exact integers of one super-block against its Q8_K quants `q8` (256 of them): sum of
/// (2s + 1) * grid . q8 over the halves, and of (2s + 1) * (+-1) * (the group's activation
/// sum) over the groups. What every SIMD face computes too.
#[inline(always)]
pub fn block_sums(b: &[u8], q8: &[u8]) -> (i32, i32) {
    let (mut sumi1, mut sumi2) = (0i32, 0i32);
    for ib in 0..8 {
        let ls = scales(b, ib);
        for l in 0..4 {
            let (k, sign) = group(b, ib, l);
            let (mut lsum1, mut lsum2) = (0i32, 0i32);
            for (j, &a) in q8[32 * ib + 8 * l..32 * ib + 8 * l + 8].iter().enumerate() {
                lsum1 += a as i8 as i32 * grid(k, j);
                lsum2 += a as i8 as i32;
            }
            sumi1 += ls[l / 2] * lsum1;
            sumi2 += ls[l / 2] * sign * lsum2;
        }
    }
    (sumi1, sumi2)
}

/// IQ1_M . Q8_K (ggml's `ggml_vec_dot_iq1_m_q8_K_generic`): per super-block the exact
/// integers ([`block_sums`]), sumf += (f16(d) * dy) * (f32(sumi1) + 0.125 * f32(sumi2)) in
/// block order; no final factor.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * q8_k::BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, y) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(q8_k::BLOCK_BYTES))
    {
        let (sumi1, sumi2) = block_sums(x, &y[q8_k::OFF_QS..q8_k::OFF_QS + 256]);
        sumf += d(x) * f32_at(y, q8_k::OFF_D) * (sumi1 as f32 + DELTA * sumi2 as f32);
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    /// A block whose d (spread over the scale words' top nibbles) is `d`, scales 0.
    fn with_d(d: f32) -> [u8; BLOCK_BYTES] {
        let bits = half::f16::from_f32(d).to_bits();
        let mut b = [0u8; BLOCK_BYTES];
        for k in 0..4 {
            let w = ((bits >> (4 * k)) & 15) << 12;
            b[OFF_SCALES + 2 * k..OFF_SCALES + 2 * k + 2].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    #[test]
    fn d_is_gathered_from_the_scale_words() {
        for d in [2.0f32, -0.001, 65504.0] {
            let b = with_d(d);
            assert_eq!(super::d(&b), half::f16::from_f32(d).to_f32());
        }
    }

    #[test]
    fn dequantize_known_block() {
        let mut b = with_d(2.0);
        // Sub-block 0, group 0: grid 1 (element 0 is 1, the others -1), shift +1/8; group 1:
        // grid 0 (all -1), shift -1/8 (bit 7 of qh[0]); first half's scale s = 1 (dl = 6).
        b[OFF_QS] = 1;
        b[OFF_QH] = 0x80;
        b[OFF_SCALES] |= 1;
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!(
            &y[..8],
            &[6.75, -5.25, -5.25, -5.25, -5.25, -5.25, -5.25, -5.25]
        );
        assert_eq!(&y[8..16], &[-6.75; 8]);
        // Second half, scale 0: dl = 2, grid 0, shift +1/8.
        assert_eq!(&y[16..24], &[-1.75; 8]);
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::IQ1_M, 2);
    }
}
