//! IQ4_NL: blocks of 32, one f16 scale and 32 4-bit indices into a fixed 16-value non-linear
//! grid ([`KVALUES`], denser near zero, where most weights are); x = d * KVALUES[q].
//! Byte j holds element j in its low nibble and element j + 16 in its high nibble (as Q4_0).
//! Dotted against Q8_0 activations.
//!
//! Layout (18 bytes): `d: f16` at 0, `qs: [u8; 16]` at 2.
//!
//! An index is a nibble, so every lookup `KVALUES[q & 0xF]` / `KVALUES[q >> 4]` is in range
//! whatever bytes a file holds: a hostile block can carry a NaN or infinite scale (the loader's
//! scale check catches it), never an out-of-bounds table read.
//!
//! The quantizer here ([`quantize_row`], and [`best_scale`] which IQ4_XS shares) is the one
//! llama-quantize runs without an importance matrix (ggml's `quantize_iq4_nl`, i.e.
//! `quantize_row_iq4_nl_impl` with ntry = 7 and weights x^2), not `quantize_row_iq4_nl_ref`.

use super::common::{f16_at, put_f16};

pub const BLOCK_ELEMS: usize = 32;
pub const BLOCK_BYTES: usize = 18;
pub const OFF_D: usize = 0;
pub const OFF_QS: usize = 2;

/// ggml's `kvalues_iq4nl`: the 16 levels a 4-bit index selects, ascending.
pub const KVALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The level of a nibble (the mask makes every index in range).
#[inline(always)]
pub fn level(nibble: u8) -> i32 {
    KVALUES[(nibble & 0x0F) as usize] as i32
}

/// Smallest amax of a sub-block that gets a scale (ggml's GROUP_MAX_EPS).
const GROUP_MAX_EPS: f32 = 1e-15;

/// The search width of llama-quantize's IQ4 quantizers (`ntry` in ggml).
const NTRY: i32 = 7;

pub fn dequantize_row(src: &[u8], out: &mut [f32]) {
    debug_assert_eq!(src.len() / BLOCK_BYTES * BLOCK_ELEMS, out.len());
    for (y, b) in out
        .chunks_exact_mut(BLOCK_ELEMS)
        .zip(src.chunks_exact(BLOCK_BYTES))
    {
        let d = f16_at(b, OFF_D);
        for j in 0..16 {
            let q = b[OFF_QS + j];
            y[j] = d * level(q) as f32;
            y[j + 16] = d * level(q >> 4) as f32;
        }
    }
}

/// ggml's `best_index_int8` over [`KVALUES`]: the index of the level nearest to `x` (the
/// lower one on a tie), by bisection, with the comparisons in ggml's order so that a tie or a
/// NaN lands where ggml's does.
#[inline(always)]
pub(crate) fn best_index(x: f32) -> u8 {
    let v = |i: usize| KVALUES[i] as f32;
    if x <= v(0) {
        return 0;
    }
    if x >= v(15) {
        return 15;
    }
    let (mut ml, mut mu) = (0usize, 15usize);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < v(mav) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - v(mu - 1) < v(mu) - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// The scale of one sub-block of 32 as `quantize_row_iq4_nl_impl` picks it without an
/// importance matrix: weights w = x^2, a first scale putting the largest |x| on the grid's
/// end, then the 15 scales (itry - 127) / max, keeping the one with the best weighted fit
/// sumqx^2 / sumq2. Returns 0 for a sub-block whose largest |x| is below 1e-15.
/// The float operations are ggml's, in its order (the bytes llama-quantize writes depend on it).
pub(crate) fn best_scale(xb: &[f32]) -> f32 {
    debug_assert_eq!(xb.len(), 32);
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in xb {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let v0 = KVALUES[0] as f32;
    let fit = |id: f32| {
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for &x in xb {
            let q = KVALUES[best_index(id * x) as usize] as f32;
            let w = x * x;
            sumqx += w * q * x;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let d = -max / v0;
    let (sumqx, sumq2) = fit(1.0 / d);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry + KVALUES[0] as i32) as f32 / max;
        let (sumqx, sumq2) = fit(id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Packs 32 indices (element j and j + 16 share byte j) into 16 bytes.
#[inline(always)]
pub(crate) fn pack_indices(l: &[u8], qs: &mut [u8]) {
    for j in 0..16 {
        qs[j] = l[j] | (l[j + 16] << 4);
    }
}

/// llama-quantize's IQ4_NL without an importance matrix (ggml's `quantize_iq4_nl`): per block
/// the scale of [`best_scale`], stored as f16, and each element's nearest level for x / d
/// (with the f32 scale, not its f16 rounding, as ggml does).
pub fn quantize_row(x: &[f32], out: &mut [u8]) {
    debug_assert_eq!(x.len() / BLOCK_ELEMS * BLOCK_BYTES, out.len());
    let mut l = [0u8; BLOCK_ELEMS];
    for (b, x) in out
        .chunks_exact_mut(BLOCK_BYTES)
        .zip(x.chunks_exact(BLOCK_ELEMS))
    {
        let d = best_scale(x);
        put_f16(b, OFF_D, d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (l, &v) in l.iter_mut().zip(x) {
            *l = best_index(id * v);
        }
        pack_indices(&l, &mut b[OFF_QS..OFF_QS + 16]);
    }
}

/// IQ4_NL . Q8_0 (ggml's `ggml_vec_dot_iq4_nl_q8_0_generic`): per block
/// sumf += (dy * dx) * (sumi1 + sumi2).
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    use super::q8_0;
    let nb = n / BLOCK_ELEMS;
    debug_assert!(w.len() == nb * BLOCK_BYTES && act.len() == nb * q8_0::BLOCK_BYTES);
    let mut sumf = 0.0f32;
    for (x, y) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(act.chunks_exact(q8_0::BLOCK_BYTES))
    {
        let d = f16_at(y, q8_0::OFF_D) * f16_at(x, OFF_D);
        let yq = &y[q8_0::OFF_QS..];
        let (mut sumi1, mut sumi2) = (0i32, 0i32);
        for j in 0..16 {
            let q = x[OFF_QS + j];
            sumi1 += (yq[j] as i8 as i32) * level(q);
            sumi2 += (yq[j + 16] as i8 as i32) * level(q >> 4);
        }
        sumf += d * (sumi1 + sumi2) as f32;
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
        b[0..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        b[OFF_QS] = 0xF0; // element 0: level 0 (-127), element 16: level 15 (113)
        b[OFF_QS + 1] = 0x87; // element 1: -10, element 17: 1
        let mut y = [0f32; 32];
        dequantize_row(&b, &mut y);
        assert_eq!((y[0], y[16], y[1], y[17]), (-63.5, 56.5, -5.0, 0.5));
    }

    #[test]
    fn best_index_takes_the_nearest_level_and_the_upper_on_ties() {
        assert_eq!(best_index(-1000.0), 0);
        assert_eq!(best_index(1000.0), 15);
        assert_eq!(best_index(0.0), 8); // -10 is 10 away, 1 is 1 away
        assert_eq!(best_index(-4.5), 8); // tie between -10 and 1: the upper
        assert_eq!(best_index(101.0), 15); // tie between 89 and 113
        assert_eq!(best_index(f32::NAN), 15);
        for (i, &v) in KVALUES.iter().enumerate() {
            assert_eq!(best_index(v as f32) as usize, i);
        }
    }

    #[test]
    fn zero_block_quantizes_to_zero_scale_and_the_level_nearest_zero() {
        let mut b = [0xAAu8; BLOCK_BYTES];
        quantize_row(&[0.0; 32], &mut b);
        assert_eq!(&b[..2], &[0, 0]);
        assert!(b[OFF_QS..].iter().all(|&q| q == 0x88));
    }

    #[test]
    fn dot_matches_dequantized_dot() {
        check_random_dot(super::super::GgmlType::IQ4_NL, 4);
    }
}
