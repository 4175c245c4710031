//! Test helpers shared by the format modules: deterministic inputs and a check of every dot
//! product against the plain dot of the dequantized rows.

use super::{dequantize_row, quantize_row, vec_dot_fn, vec_dot_type, GgmlType};
use alloc::vec;
use alloc::vec::Vec;

/// A deterministic, irregular row of values in about [-1, 1].
pub fn ramp(n: usize, step: f32) -> Vec<f32> {
    (0..n)
        .map(|i| libm::sinf(i as f32 * step + 0.3) * (1.0 + (i % 7) as f32 * 0.1))
        .collect()
}

pub struct XorShift(pub u64);

impl XorShift {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Byte offsets of the f16 scale fields in one block, so random blocks get finite, moderate
/// scales instead of random bit patterns (which may be NaN or 65504).
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::Q1_0 | GgmlType::Q2_0 => &[0],
        GgmlType::IQ4_NL | GgmlType::IQ4_XS | GgmlType::IQ2_XXS | GgmlType::IQ3_XXS => &[0],
        GgmlType::IQ2_XS | GgmlType::IQ2_S | GgmlType::IQ3_S | GgmlType::IQ1_S => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        GgmlType::TQ1_0 => &[52],
        GgmlType::TQ2_0 => &[64],
        _ => &[],
    }
}

/// Random weight blocks of `ty` with finite scales.
pub fn random_blocks(ty: GgmlType, n_blocks: usize, seed: u64) -> Vec<u8> {
    let mut rng = XorShift(seed);
    let mut w: Vec<u8> = (0..n_blocks * ty.type_size())
        .map(|_| rng.next_u64() as u8)
        .collect();
    for blk in w.chunks_exact_mut(ty.type_size()) {
        for &off in f16_fields(ty) {
            let v = 0.001 + rng.unit() * 0.05;
            blk[off..off + 2].copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
        }
        if ty == GgmlType::IQ1_M {
            // d is spread over the top nibbles of the 4 scale words at 48
            let d = half::f16::from_f32(0.001 + rng.unit() * 0.05).to_bits();
            for k in 0..4 {
                let o = 48 + 2 * k + 1;
                blk[o] = (blk[o] & 0x0f) | (((d >> (4 * k)) & 15) << 4) as u8;
            }
        }
    }
    w
}

/// Dots random weight blocks with a quantized random activation through the dispatch API and
/// compares with the f64 dot of both rows dequantized. The only differences allowed are f32
/// rounding of the partial sums, plus, for Q8_1 activations, the f16 rounding of their stored
/// block sums `s` (relative 2^-11 of the min term).
pub fn check_random_dot(ty: GgmlType, n_blocks: usize) {
    let n = n_blocks * ty.block_size();
    let w = random_blocks(ty, n_blocks, 0x9E37_79B9_7F4A_7C15 ^ ty.id() as u64);
    let act_ty = vec_dot_type(ty).unwrap();
    let mut rng = XorShift(12345);
    let x: Vec<f32> = (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect();
    let mut act = vec![0u8; n / act_ty.block_size() * act_ty.type_size()];
    quantize_row(act_ty, &x, &mut act).unwrap();

    let (mut wf, mut af) = (vec![0f32; n], vec![0f32; n]);
    dequantize_row(ty, &w, &mut wf).unwrap();
    dequantize_row(act_ty, &act, &mut af).unwrap();
    let exact: f64 = wf.iter().zip(&af).map(|(&a, &b)| a as f64 * b as f64).sum();
    let magnitude: f64 = wf
        .iter()
        .zip(&af)
        .map(|(&a, &b)| (a as f64 * b as f64).abs())
        .sum();

    let got = vec_dot_fn(ty).unwrap()(n, &w, &act) as f64;
    let rel = if act_ty == GgmlType::Q8_1 { 2e-3 } else { 1e-5 };
    assert!(
        (got - exact).abs() <= rel * magnitude + 1e-6,
        "{ty}: dot {got} vs dequantized {exact} (magnitude {magnitude})"
    );
}
