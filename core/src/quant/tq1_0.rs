//! TQ1_0: ternary weights {-1, 0, +1} * d, 256 per super-block, 1.6875 bits each. Five trits
//! are packed per byte as a base-3 fixed-point fraction: byte = ceil(t * 256 / 243) where t is
//! the 5-digit base-3 number; digit n is recovered by multiplying the byte by 3^n (mod 256)
//! and taking the top of (byte * 3), i.e. ((b * 3^n) as u8 as u16 * 3) >> 8.
//!
//! Element order: qs[0..32] hold elements 32n + m (n = digit 0..5, m = byte 0..32), i.e. 0..160;
//! qs[32..48] hold 160 + 16n + m; qh[0..4] hold 4 trits each for elements 240 + 4n + j.
//! Dotted against Q8_K.
//!
//! Layout (54 bytes): `qs: [u8; 48]` at 0, `qh: [u8; 4]` at 48, `d: f16` at 52.

use super::common::{c_lroundf_as_int, c_max, f16_at, f32_at, put_f16};
use super::q8_k;

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 54;
pub const OFF_QS: usize = 0;
pub const OFF_QH: usize = 48;
pub const OFF_D: usize = 52;

const POW3: [u8; 6] = [1, 3, 9, 27, 81, 243];

/// Digit `n` of a packed byte, in 0..=2 (subtract 1 for the trit).
#[inline(always)]
fn digit(byte: u8, n: usize) -> i32 {
    let q = byte.wrapping_mul(POW3[n]);
    ((q as u16 * 3) >> 8) as i32
}

/// Calls `f(element, trit)` for every element of the block, in storage order.
#[inline(always)]
fn for_each_trit(b: &[u8], mut f: impl FnMut(usize, i32)) {
    for n in 0..5 {
        for m in 0..32 {
            f(32 * n + m, digit(b[OFF_QS + m], n) - 1);
        }
    }
    for n in 0..5 {
        for m in 0..16 {
            f(160 + 16 * n + m, digit(b[OFF_QS + 32 + m], n) - 1);
        }
    }
    for n in 0..4 {
        for j in 0..4 {
            f(240 + 4 * n + j, digit(b[OFF_QH + j], n) - 1);
        }
    }
}

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        for_each_trit(b, |e, t| y[e] = t as f32 * d);
    }
}

/// ggml's `quantize_row_tq1_0_ref`: d = max |x|, trit = lroundf(x / d) in -1..=1, stored + 1;
/// five trits (four in `qh`, shifted up one digit) make a base-3 number t, stored as
/// ceil(t * 256 / 243). Element order as [`for_each_trit`] reads it.
pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / BLOCK_ELEMS * BLOCK_BYTES, out.len());
    for (b, x) in out
        .chunks_exact_mut(BLOCK_BYTES)
        .zip(x.chunks_exact(BLOCK_ELEMS))
    {
        let amax = x.iter().fold(0.0f32, |m, v| c_max(m, v.abs()));
        let id = if amax != 0.0 { 1.0 / amax } else { 0.0 };
        put_f16(b, OFF_D, amax);
        // The trits of elements first, first + step, ... as one byte (u8 arithmetic, as in C).
        let pack = |first: usize, step: usize, count: usize| -> u8 {
            let mut q = 0u8;
            for n in 0..count {
                let t = c_lroundf_as_int(x[first + n * step] * id) + 1;
                q = q.wrapping_mul(3).wrapping_add(t as u8);
            }
            q
        };
        let ceil_256_243 = |q: u8| (q as u16 * 256).div_ceil(243) as u8;
        for m in 0..32 {
            b[OFF_QS + m] = ceil_256_243(pack(m, 32, 5));
        }
        for m in 0..16 {
            b[OFF_QS + 32 + m] = ceil_256_243(pack(160 + m, 16, 5));
        }
        for j in 0..4 {
            b[OFF_QH + j] = ceil_256_243(pack(240 + j, 4, 4).wrapping_mul(3));
        }
    }
}

/// TQ1_0 . Q8_K (ggml's `ggml_vec_dot_tq1_0_q8_K_generic`): an exact integer sum per
/// super-block, times (dx * dy).
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * q8_k::BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, y) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(q8_k::BLOCK_BYTES))
    {
        let q8 = &y[q8_k::OFF_QS..q8_k::OFF_QS + 256];
        let mut sum = 0i32;
        for_each_trit(x, |e, t| sum += t * q8[e] as i8 as i32);
        sumf += sum as f32 * (f16_at(x, OFF_D) * f32_at(y, q8_k::OFF_D));
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    /// Packs five trits (each -1..=1, first = most significant digit) the way ggml does.
    fn pack5(t: [i32; 5]) -> u8 {
        let v = t.iter().fold(0u16, |acc, &x| acc * 3 + (x + 1) as u16);
        ((v * 256).div_ceil(243)) as u8
    }

    #[test]
    fn digits_unpack_in_order() {
        for v in [
            [1, 0, -1, -1, 1],
            [-1, -1, -1, -1, -1],
            [1, 1, 1, 1, 1],
            [0, 1, 0, -1, 0],
        ] {
            let b = pack5(v);
            for (n, &t) in v.iter().enumerate() {
                assert_eq!(digit(b, n) - 1, t, "{v:?} digit {n}");
            }
        }
    }

    #[test]
    fn dequantize_known_block() {
        let mut b = [pack5([0; 5]); BLOCK_BYTES];
        b[OFF_D..OFF_D + 2].copy_from_slice(&half::f16::from_f32(2.0).to_bits().to_le_bytes());
        b[OFF_QS + 1] = pack5([1, -1, 0, 0, 0]); // elements 1 and 33
        b[OFF_QS + 32] = pack5([0, 0, 0, 0, 1]); // element 160 + 64
        b[OFF_QH + 3] = pack5([0, 1, 0, 0, 0]); // element 240 + 4 + 3
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!(
            (y[1], y[33], y[224], y[247], y[0]),
            (2.0, -2.0, 2.0, 2.0, 0.0)
        );
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::TQ1_0, 2);
    }
}
