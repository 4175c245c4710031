//! The installed faces of the gated delta rule's fused step (`KernelSet::delta_rule`, f32 and
//! f16 state) against the scalar `math::delta_rule_step{,_f16}`, to the bit: the new state
//! and the output, over several tokens (the state each step leaves is the next one's input).
//! Head dims that the SIMD faces take (multiples of 16: 16 .. 128, Qwen3.5's 128) and that they
//! hand back to the scalar step (8, 7, 100), row counts with odd tails, and edge values:
//! decays of 1, 0 and below f32's normal range, states near f16's largest and smallest values.
//! On aarch64 this runs under qemu on the Cortex-A76 and the A53 (tools/test-aarch64.sh).

use super::exactness::detected_features;
use super::*;
use crate::math::{DeltaRuleKernels, DELTA_LANES};
use crate::quant::testutil::XorShift;
use alloc::vec;
use alloc::vec::Vec;
use half::f16;
use std::println;

fn installed() -> (DeltaRuleKernels, &'static str) {
    let set = KernelSet::select(&detected_features());
    (set.delta_rule(), set.name())
}

/// A unit-norm vector as the model feeds q and k (after its L2 norm).
fn unit(rng: &mut XorShift, n: usize) -> Vec<f32> {
    let x: Vec<f32> = (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect();
    let norm = libm::sqrtf(x.iter().map(|v| v * v).sum::<f32>()).max(1e-30);
    x.iter().map(|v| v / norm).collect()
}

fn same(a: f32, b: f32) -> bool {
    // NaN inputs give NaN on both sides; which NaN is the hardware's (or libm's) choice.
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

struct Case {
    dk: usize,
    rows: usize,
    decay: f32,
    beta: f32,
    state_magnitude: f32,
    v_magnitude: f32,
    tokens: usize,
}

/// Runs `case` on an f32 and an f16 state through the scalar step and the installed faces;
/// returns the number of values compared. Panics at the first differing bit.
fn check(dr: DeltaRuleKernels, name: &str, rng: &mut XorShift, c: &Case) -> usize {
    let n = c.rows * c.dk;
    let start: Vec<f32> = (0..n)
        .map(|_| (rng.unit() * 2.0 - 1.0) * c.state_magnitude)
        .collect();
    let mut want32 = start.clone();
    let mut got32 = start.clone();
    let mut want16: Vec<u16> = start.iter().map(|&x| f16::from_f32(x).to_bits()).collect();
    let mut got16 = want16.clone();
    let mut compared = 0;
    for t in 0..c.tokens {
        let q = unit(rng, c.dk);
        let k = unit(rng, c.dk);
        let v: Vec<f32> = (0..c.rows)
            .map(|_| (rng.unit() * 2.0 - 1.0) * c.v_magnitude)
            .collect();
        let (mut wo, mut go) = (vec![f32::NAN; c.rows], vec![f32::NAN; c.rows]);
        math::delta_rule_step(&mut want32, &q, &k, &v, c.decay, c.beta, &mut wo);
        (dr.f32)(&mut got32, &q, &k, &v, c.decay, c.beta, &mut go);
        let what = |kind: &str| {
            alloc::format!(
                "{name} {kind} dk {} rows {} decay {:e} beta {} |s| {} |v| {} token {t}",
                c.dk,
                c.rows,
                c.decay,
                c.beta,
                c.state_magnitude,
                c.v_magnitude
            )
        };
        for (i, (w, g)) in want32.iter().zip(&got32).enumerate() {
            assert!(
                same(*w, *g),
                "{}: state[{i}] scalar {w:e}, face {g:e}",
                what("f32")
            );
        }
        for (j, (w, g)) in wo.iter().zip(&go).enumerate() {
            assert!(
                same(*w, *g),
                "{}: out[{j}] scalar {w:e}, face {g:e}",
                what("f32")
            );
        }
        let (mut wo, mut go) = (vec![f32::NAN; c.rows], vec![f32::NAN; c.rows]);
        math::delta_rule_step_f16(&mut want16, &q, &k, &v, c.decay, c.beta, &mut wo);
        (dr.f16)(&mut got16, &q, &k, &v, c.decay, c.beta, &mut go);
        for (i, (w, g)) in want16.iter().zip(&got16).enumerate() {
            let (wf, gf) = (f16::from_bits(*w).to_f32(), f16::from_bits(*g).to_f32());
            assert!(
                w == g || (wf.is_nan() && gf.is_nan()),
                "{}: state[{i}] scalar {w:#06x}, face {g:#06x}",
                what("f16")
            );
        }
        for (j, (w, g)) in wo.iter().zip(&go).enumerate() {
            assert!(
                same(*w, *g),
                "{}: out[{j}] scalar {w:e}, face {g:e}",
                what("f16")
            );
        }
        compared += 2 * (n + c.rows);
    }
    compared
}

#[test]
fn delta_rule_faces_match_scalar_on_random_heads() {
    let (dr, name) = installed();
    let mut rng = XorShift(0xde17_a5ee);
    let mut compared = 0;
    // (dk, rows): Qwen3.5's 128 x 128, the synthetic model's 32 x 32, other multiples of 16,
    // odd row counts (the NEON face runs rows in pairs), and dims the faces hand to the
    // scalar step.
    let shapes = [
        (128, 128),
        (32, 32),
        (64, 64),
        (16, 16),
        (48, 48),
        (128, 7),
        (32, 5),
        (64, 1),
        (8, 8),
        (7, 3),
        (100, 9),
    ];
    for (s, &(dk, rows)) in shapes.iter().enumerate() {
        for round in 0..3usize {
            let case = Case {
                dk,
                rows,
                decay: [0.97, 0.5, 1.0][round],
                beta: [0.6, 0.05, 1.0][(round + s) % 3],
                state_magnitude: [0.5, 4.0, 0.01][(round + s) % 3],
                v_magnitude: 2.0,
                tokens: 4,
            };
            compared += check(dr, name, &mut rng, &case);
        }
    }
    println!("delta rule ({name}): {compared} state and output values equal to the scalar bits");
}

#[test]
fn delta_rule_faces_match_scalar_on_edge_values() {
    let (dr, name) = installed();
    let mut rng = XorShift(0xed9e_de17);
    let mut compared = 0;
    // (decay, beta, |state|, |v|): no decay, a state wiped to 0, a decay that takes the state
    // through f32's subnormals, values near f16's 65504 (the f16 state overflows to inf and
    // NaN follows), f16 subnormals, and deltas far bigger than the state.
    let regimes: [(f32, f32, f32, f32); 7] = [
        (1.0, 1.0, 1.0, 1.0),
        (0.0, 0.5, 1.0, 1.0),
        (1e-20, 0.5, 1e-20, 1e-20),
        (1.0, 1.0, 60000.0, 65000.0),
        (0.99, 0.01, 6e-5, 1e-6),
        (0.9, 1.0, 1e-3, 3000.0),
        (f32::MIN_POSITIVE, 1.0, 1e30, 1.0),
    ];
    for &(decay, beta, sm, vm) in &regimes {
        for &(dk, rows) in &[(128, 128), (32, 32), (16, 3), (64, 9)] {
            let case = Case {
                dk,
                rows,
                decay,
                beta,
                state_magnitude: sm,
                v_magnitude: vm,
                tokens: 3,
            };
            compared += check(dr, name, &mut rng, &case);
        }
    }
    println!("delta rule edge cases ({name}): {compared} values equal to the scalar bits");
}

/// The scalar step is the delta rule (`S = decay S; d = beta (v - S k); S += d k^T;
/// o = S q / sqrt(dk)`) in its own summation order: within a few ulps of the textbook
/// sequential form in f64.
#[test]
fn delta_rule_step_is_the_delta_rule() {
    let mut rng = XorShift(0x7e57_de17);
    for &dk in &[DELTA_LANES, 32, 128, 7] {
        let (decay, beta) = (0.93f32, 0.7f32);
        let s0: Vec<f32> = (0..dk * dk).map(|_| rng.unit() * 2.0 - 1.0).collect();
        let (q, k) = (unit(&mut rng, dk), unit(&mut rng, dk));
        let v: Vec<f32> = (0..dk).map(|_| rng.unit() * 2.0 - 1.0).collect();
        let mut s = s0.clone();
        let mut out = vec![0f32; dk];
        math::delta_rule_step(&mut s, &q, &k, &v, decay, beta, &mut out);
        let scale = 1.0 / (dk as f64).sqrt();
        for j in 0..dk {
            let row: Vec<f64> = s0[j * dk..][..dk]
                .iter()
                .map(|&x| x as f64 * decay as f64)
                .collect();
            let sk: f64 = row.iter().zip(&k).map(|(a, &b)| a * b as f64).sum();
            let d = (v[j] as f64 - sk) * beta as f64;
            let new: Vec<f64> = row.iter().zip(&k).map(|(a, &b)| a + b as f64 * d).collect();
            let o: f64 = new.iter().zip(&q).map(|(a, &b)| a * b as f64).sum::<f64>() * scale;
            for i in 0..dk {
                let e = (s[j * dk + i] as f64 - new[i]).abs();
                assert!(e <= 1e-5 * (1.0 + new[i].abs()), "dk {dk} s[{j}][{i}]");
            }
            assert!(
                (out[j] as f64 - o).abs() <= 1e-5,
                "dk {dk} out[{j}]: {} vs {o}",
                out[j]
            );
        }
    }
}
