//! Exactness of every installed SIMD kernel against its scalar twin.
//!
//! The integer parts must agree exactly, the float results within a bound that comes from the
//! summation order alone:
//!
//! * Both faces compute the same exact real sum: per block, an exact integer (the SIMD kernels
//!   lay the products out in other lanes, but integer addition is associative) times the same
//!   f32 scale product (both compute `f16(d) * d_act` with one rounding, or an exact f16 x f16
//!   product). Only the f32 operations that follow differ in order.
//! * Recursive f32 summation of terms t_i along a chain of at most k operations (conversions,
//!   products, additions, FMAs count one rounding each) is within about k * u * sum |t_i| of
//!   the exact sum, u = 2^-24 (Higham, "Accuracy and Stability of Numerical Algorithms", 4.2).
//!   sum |t_i| <= M = sum over elements |w_e| * |a_e|, where for Q4_K/Q5_K |w_e| counts the
//!   scale and the min terms separately (|d| sc q + |dmin| m), as both faces keep them apart.
//! * Chains: block formats with nb blocks: scalar nb + 11 (8 lanes summed at the end, int->f32,
//!   product), SIMD nb + 6 (FMA per block, 2 accumulators, 3 levels of lane sums, the min term):
//!   k = 2 (nb + 12) covers both errors. F32/F16 over n elements: SIMD n / 32 + 17 (4 x 8 lanes,
//!   the 8-wide remainder, 5 levels of sums, up to 7 scalar tail terms), scalar 3 (its f32
//!   product and final rounding; its f64 sum adds a negligible 2^-53 n): k = n / 32 + 20.
//! * M is computed in f64 from the dequantized rows, whose own rounding (a few u relative) is
//!   covered by the factor 1.001.
//!
//! Separate "exact" cases choose scales of 1 and ranges where every intermediate is an integer
//! below 2^24: there both faces are exact and must agree to the bit, which proves the integer
//! parts (every quant and activation bit pattern, -128 included, appears in one of them).

use super::*;
use crate::quant::testutil::{random_blocks, XorShift};
use alloc::vec;
use alloc::vec::Vec;
use std::println;

/// The unit roundoff of f32.
const U: f64 = 1.0 / (1u64 << 24) as f64;

pub(super) fn detected_features() -> CpuFeatures {
    #[allow(unused_mut)]
    let mut f = CpuFeatures::default();
    #[cfg(target_arch = "x86_64")]
    {
        f.avx2 = std::arch::is_x86_feature_detected!("avx2");
        f.fma = std::arch::is_x86_feature_detected!("fma");
        f.f16c = std::arch::is_x86_feature_detected!("f16c");
        f.avx512f = std::arch::is_x86_feature_detected!("avx512f");
        f.avx512bw = std::arch::is_x86_feature_detected!("avx512bw");
        f.avx512vnni = std::arch::is_x86_feature_detected!("avx512vnni");
    }
    #[cfg(target_arch = "aarch64")]
    {
        f.neon = std::arch::is_aarch64_feature_detected!("neon");
        f.dotprod = std::arch::is_aarch64_feature_detected!("dotprod");
        f.fp16 = std::arch::is_aarch64_feature_detected!("fp16");
        f.i8mm = std::arch::is_aarch64_feature_detected!("i8mm");
    }
    f
}

/// (weight type, this CPU's SIMD kernel, its scalar twin) for every non-scalar entry.
pub(super) fn simd_kernels() -> Vec<(GgmlType, WeightKernel, WeightKernel)> {
    let scalar = KernelSet::scalar();
    let mut pairs: Vec<(GgmlType, WeightKernel, WeightKernel)> = Vec::new();
    for fast in fast_sets() {
        for (f, s) in fast.weights.iter().zip(scalar.weights.iter()) {
            let seen = pairs
                .iter()
                .any(|(ty, k, _)| *ty == f.weight_type && k.face == f.face);
            if f.face != "scalar" && !seen {
                pairs.push((f.weight_type, *f, *s));
            }
        }
    }
    if pairs.is_empty() {
        println!("notice: no SIMD kernels for this CPU; nothing to compare");
    }
    pairs
}

/// Every kernel set this CPU runs: the selected one and, on x86-64, also the AVX2 set
/// (AVX-512 flags cleared), so that both faces are tested where both can run.
pub(super) fn fast_sets() -> Vec<KernelSet> {
    let features = detected_features();
    #[allow(unused_mut)]
    let mut sets = vec![KernelSet::select(&features)];
    #[cfg(target_arch = "x86_64")]
    {
        let avx2_only = CpuFeatures {
            avx512f: false,
            avx512bw: false,
            avx512vnni: false,
            ..features
        };
        let set = KernelSet::select(&avx2_only);
        if set.name() != sets[0].name() {
            sets.push(set);
        }
    }
    sets
}

/// Byte offsets of the f16 scale fields of a block of the SIMD-covered formats.
pub(super) fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q1_0 | GgmlType::Q2_0 => &[0],
        GgmlType::IQ4_NL | GgmlType::IQ4_XS | GgmlType::IQ2_XXS | GgmlType::IQ3_XXS => &[0],
        GgmlType::IQ2_XS | GgmlType::IQ2_S | GgmlType::IQ3_S | GgmlType::IQ1_S => &[0],
        GgmlType::IQ1_M => &[SPREAD_D],
        GgmlType::TQ1_0 => &[52],
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q4_1 | GgmlType::Q5_1 => &[0, 2],
        GgmlType::Q6_K => &[208],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::TQ2_0 => &[64],
        _ => &[],
    }
}

/// Formats whose SIMD faces promise the scalar twin's bits on every input: they compute the
/// twin's per-block integers exactly and then its f32 operations in its order (the 2-bit
/// kernels, `smolrun_kernels::{x86_64::avx2_2bit, aarch64}`, the grid i-quants,
/// `x86_64::avx2_iq2` and `aarch64::iq2`, Q3_K, `x86_64::avx2_3bit` and `aarch64::q3_k`, and
/// Q4_1 and Q5_1, `x86_64::avx2_q1`).
fn promises_scalar_bits(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q2_K
            | GgmlType::Q3_K
            | GgmlType::Q4_1
            | GgmlType::Q5_1
            | GgmlType::TQ2_0
            | GgmlType::IQ2_XXS
            | GgmlType::IQ3_XXS
            | GgmlType::IQ2_XS
            | GgmlType::IQ2_S
            | GgmlType::IQ3_S
            | GgmlType::IQ1_S
            | GgmlType::IQ1_M
    )
}

/// The "offset" of IQ1_M's d in [`f16_fields`]: it has no field of its own, its bits are the
/// top nibbles of the 4 scale words at 48 ([`put_f16`] writes them there).
pub(super) const SPREAD_D: usize = usize::MAX;

/// Makes row `r` (of `row_bytes`) of `w` an edge row: every byte 0xFF, every block's f16
/// scale field(s) set to `scale`.
pub(super) fn set_edge_row(w: &mut [u8], ty: GgmlType, row_bytes: usize, r: usize, scale: f32) {
    let edge = &mut w[r * row_bytes..(r + 1) * row_bytes];
    edge.fill(0xFF);
    for b in edge.chunks_exact_mut(ty.type_size()) {
        for &off in f16_fields(ty) {
            put_f16(b, off, scale);
        }
    }
}

pub(super) fn put_f16(b: &mut [u8], off: usize, v: f32) {
    let bits = half::f16::from_f32(v).to_bits();
    if off == SPREAD_D {
        for k in 0..4 {
            let o = 48 + 2 * k + 1;
            b[o] = (b[o] & 0x0f) | (((bits >> (4 * k)) & 15) << 4) as u8;
        }
        return;
    }
    b[off..off + 2].copy_from_slice(&bits.to_le_bytes());
}

/// One Q8_K block with scale `d` and quants `qs`, with consistent group sums.
fn q8_k_block(d: f32, qs: &[i8]) -> Vec<u8> {
    let mut b = vec![0u8; quant::q8_k::BLOCK_BYTES];
    b[..4].copy_from_slice(&d.to_le_bytes());
    for (dst, &q) in b[quant::q8_k::OFF_QS..].iter_mut().zip(qs) {
        *dst = q as u8;
    }
    for j in 0..16 {
        let s: i32 = qs[16 * j..16 * j + 16].iter().map(|&q| q as i32).sum();
        let off = quant::q8_k::OFF_BSUMS + 2 * j;
        b[off..off + 2].copy_from_slice(&(s as i16).to_le_bytes());
    }
    b
}

/// An activation row of `n` elements in `act_ty` whose quants come from `q` (Q8_0/Q8_K,
/// scale `d` per block) or whose values are `q` as floats (F16/F32).
pub(super) fn act_from_quants(act_ty: GgmlType, d: f32, q: &[i8]) -> Vec<u8> {
    match act_ty {
        GgmlType::Q8_K => q.chunks_exact(256).flat_map(|c| q8_k_block(d, c)).collect(),
        GgmlType::Q8_0 => q
            .chunks_exact(32)
            .flat_map(|c| {
                let mut b = vec![0u8; 34];
                put_f16(&mut b, 0, d);
                for (dst, &v) in b[2..].iter_mut().zip(c) {
                    *dst = v as u8;
                }
                b
            })
            .collect(),
        _ => quantize(act_ty, &q.iter().map(|&v| v as f32 * d).collect::<Vec<_>>()),
    }
}

pub(super) fn quantize(act_ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut act = vec![0u8; quant::row_bytes(act_ty, x.len()).unwrap()];
    quant::quantize_row(act_ty, x, &mut act).unwrap();
    act
}

/// M = sum |w_e| |a_e| in f64, with Q4_K/Q5_K's scale and min terms counted apart.
fn magnitude(ty: GgmlType, act_ty: GgmlType, w: &[u8], act: &[u8], n: usize) -> f64 {
    let mut w = w.to_vec();
    if matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K) {
        // |d| and -|dmin|: each element dequantizes to |d| sc q + |dmin| m.
        for b in w.chunks_exact_mut(ty.type_size()) {
            b[1] &= 0x7f;
            b[3] |= 0x80;
        }
    }
    if ty == GgmlType::Q2_K {
        // The same for Q2_K's d (at 80) and dmin (at 82).
        for b in w.chunks_exact_mut(ty.type_size()) {
            b[81] &= 0x7f;
            b[83] |= 0x80;
        }
    }
    let (mut wf, mut af) = (vec![0f32; n], vec![0f32; n]);
    quant::dequantize_row(ty, &w, &mut wf).unwrap();
    quant::dequantize_row(act_ty, act, &mut af).unwrap();
    wf.iter()
        .zip(&af)
        .map(|(&a, &b)| (a as f64 * b as f64).abs())
        .sum()
}

fn check_close(
    fast: &WeightKernel,
    scalar: &WeightKernel,
    n: usize,
    w: &[u8],
    act: &[u8],
    case: &str,
) {
    let ty = fast.weight_type;
    let want = (scalar.vec_dot)(n, w, act);
    let got = (fast.vec_dot)(n, w, act);
    let bs = ty.block_size();
    let k = if bs == 1 {
        n / 32 + 20
    } else {
        2 * (n / bs + 12)
    };
    check_rows_give_vec_dot_bits(fast, n, w, act, case);
    if promises_scalar_bits(ty) {
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "{ty} {case} (n {n}): {} gives {got}, scalar {want}; this face keeps the scalar \
             float order, so the bits must agree",
            fast.face
        );
    }
    let m = magnitude(ty, fast.act_type, w, act, n);
    let tol = k as f64 * U * m * 1.001;
    assert!(
        want.is_finite(),
        "{ty} {case}: the reference is {want}; pick finite cases"
    );
    assert!(
        (got as f64 - want as f64).abs() <= tol,
        "{ty} {case} (n {n}): {} gives {got}, scalar {want}, difference {} > bound {tol} \
         (M {m}, k {k})",
        fast.face,
        (got - want).abs()
    );
}

/// Where `fast` has a several-rows matvec that promises the vec_dot's bits (the x86-64
/// 32-element formats and Q3_K), runs it on 5 copies of the row `w` (a group of 4 rows and a tail
/// row) and checks every output against `vec_dot` to the bit.
fn check_rows_give_vec_dot_bits(fast: &WeightKernel, n: usize, w: &[u8], act: &[u8], case: &str) {
    let promises_bits = matches!(
        fast.weight_type,
        GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q3_K
    ) || fast.face == "avx512";
    let Some(rows) = fast.rows.filter(|_| promises_bits) else {
        return;
    };
    let want = (fast.vec_dot)(n, w, act);
    let matrix = w.repeat(5);
    let mut out = [f32::NAN; 5];
    rows(n, &matrix, act, &mut out);
    for (r, got) in out.iter().enumerate() {
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "{} {case} (n {n}): row {r} of the {} rows kernel gives {got}, vec_dot {want}",
            fast.weight_type,
            fast.face
        );
    }
}

fn check_exact(
    fast: &WeightKernel,
    scalar: &WeightKernel,
    n: usize,
    w: &[u8],
    act: &[u8],
    case: &str,
) {
    check_rows_give_vec_dot_bits(fast, n, w, act, case);
    let want = (scalar.vec_dot)(n, w, act);
    let got = (fast.vec_dot)(n, w, act);
    assert_eq!(
        got, want,
        "{} {case} (n {n}): every intermediate is an integer below 2^24, so the {} result \
         must equal the scalar one exactly",
        fast.weight_type, fast.face
    );
}

fn random_i8(rng: &mut XorShift, n: usize, lo: i32, hi: i32) -> Vec<i8> {
    (0..n)
        .map(|_| (lo + (rng.next_u64() % (hi - lo + 1) as u64) as i32) as i8)
        .collect()
}

#[test]
fn simd_dots_match_scalar_on_random_rows() {
    for (ty, fast, scalar) in simd_kernels() {
        let lengths: &[usize] = if ty.block_size() == 1 {
            // Not multiples of the SIMD width: every remainder path runs.
            &[1, 3, 7, 8, 9, 31, 32, 33, 100, 257, 4099]
        } else {
            &[1, 2, 3, 16]
        };
        for (i, &len) in lengths.iter().enumerate() {
            let n = len * ty.block_size();
            let w = if ty.block_size() == 1 {
                let mut rng = XorShift(77 + i as u64);
                let x: Vec<f32> = (0..n).map(|_| rng.unit() * 4.0 - 2.0).collect();
                quantize(ty, &x)
            } else {
                random_blocks(ty, len, 1000 + i as u64)
            };
            let mut rng = XorShift(99 + i as u64);
            let x: Vec<f32> = (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect();
            let act = quantize(fast.act_type, &x);
            check_close(&fast, &scalar, n, &w, &act, "random");
        }
    }
}

#[test]
fn simd_dots_match_scalar_on_edge_blocks() {
    for (ty, fast, scalar) in simd_kernels() {
        let n = if ty.block_size() == 1 {
            75
        } else {
            4 * ty.block_size()
        };
        let mut rng = XorShift(4242);
        // Activations: random, constant (every quant at the extreme), alternating large,
        // one outlier (the rest quantize to 0), and raw quants of -128 / 127.
        let mut acts: Vec<(&str, Vec<u8>)> = vec![
            ("random act", {
                let x: Vec<f32> = (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect();
                quantize(fast.act_type, &x)
            }),
            ("constant act", quantize(fast.act_type, &vec![1.0; n])),
            (
                "alternating act",
                quantize(
                    fast.act_type,
                    &(0..n)
                        .map(|i| if i % 2 == 0 { 1000.0 } else { -999.0 })
                        .collect::<Vec<_>>(),
                ),
            ),
            ("outlier act", {
                let mut x = vec![0.001f32; n];
                x[n / 3] = -3.0e4;
                quantize(fast.act_type, &x)
            }),
            (
                "all -128 act",
                act_from_quants(fast.act_type, 0.01, &vec![-128; n]),
            ),
            (
                "-128/127 act",
                act_from_quants(
                    fast.act_type,
                    0.01,
                    &(0..n)
                        .map(|i| if i % 3 == 0 { 127 } else { -128 })
                        .collect::<Vec<_>>(),
                ),
            ),
        ];
        if ty.block_size() == 1 {
            // Float rows: the largest f16, subnormal f16, zeros.
            acts.push(("f16 extremes act", {
                let x: Vec<f32> = (0..n)
                    .map(|i| match i % 4 {
                        0 => 65504.0,
                        1 => -6.0e-8,
                        2 => 0.0,
                        _ => -1.5,
                    })
                    .collect();
                quantize(fast.act_type, &x)
            }));
        }
        // Weights: random, all-zero and all-one bytes (min and max quants, all scales and
        // mins at their maximum), each with zero, tiny (subnormal), unit, negative and the
        // largest f16 scales.
        let mut weights: Vec<(&str, Vec<u8>)> = Vec::new();
        if ty.block_size() == 1 {
            weights.push(("random w", {
                let x: Vec<f32> = (0..n).map(|_| rng.unit() * 4.0 - 2.0).collect();
                quantize(ty, &x)
            }));
            weights.push(("extreme w", {
                let x: Vec<f32> = (0..n)
                    .map(|i| [65504.0, -65504.0, 6.0e-8, 0.0, 1.0][i % 5])
                    .collect();
                quantize(ty, &x)
            }));
            weights.push(("zero w", vec![0u8; n * ty.type_size()]));
        } else {
            let nb = n / ty.block_size();
            let mut fills = vec![("random", None), ("0x00", Some(0u8)), ("0xFF", Some(0xFF))];
            // The packed formats' own patterns: alternating bits and fields (0x55, 0xAA); for
            // TQ1_0 every base-3 digit 0 (0x00), every digit 2 (0xFF, the packed 242), every
            // digit 1 (0x80, packed 121) and digits 2, 0, 2, 0, 2 (0xC0, packed 182).
            match ty {
                GgmlType::Q1_0 | GgmlType::Q2_0 => {
                    fills.extend([("0x55", Some(0x55)), ("0xAA", Some(0xAA))]);
                }
                GgmlType::TQ1_0 => fills.extend([("0x80", Some(0x80)), ("0xC0", Some(0xC0))]),
                _ => {}
            }
            for (fill_name, fill) in fills {
                for scale in [0.0f32, 6.0e-8, 1.0, -2.5, 65504.0] {
                    let mut w = match fill {
                        None => random_blocks(ty, nb, 7 + scale.to_bits() as u64),
                        Some(b) => vec![b; nb * ty.type_size()],
                    };
                    for b in w.chunks_exact_mut(ty.type_size()) {
                        for (i, &off) in f16_fields(ty).iter().enumerate() {
                            put_f16(b, off, if i == 0 { scale } else { 0.5 * scale });
                        }
                    }
                    let _ = fill_name;
                    weights.push((fill_name, w));
                }
            }
        }
        for (w_case, w) in &weights {
            for (a_case, act) in &acts {
                check_close(
                    &fast,
                    &scalar,
                    n,
                    w,
                    act,
                    &std::format!("{w_case} w, {a_case}"),
                );
            }
        }
    }
}

#[test]
fn simd_integer_parts_are_exact() {
    for (ty, fast, scalar) in simd_kernels() {
        let mut rng = XorShift(0xC0FFEE ^ ty.id() as u64);
        let bs = ty.block_size();
        if bs == 1 {
            // Small integers: every product and partial sum is exact in f32.
            let n = 1003;
            let w = act_from_quants(ty, 1.0, &random_i8(&mut rng, n, -60, 60));
            let act = act_from_quants(ty, 1.0, &random_i8(&mut rng, n, -60, 60));
            check_exact(&fast, &scalar, n, &w, &act, "small integers");
            continue;
        }
        // (case, blocks, weight scale-byte mask, activation quant range)
        let cases: &[(&str, usize, bool, i32, i32)] = match ty {
            // Full quants and activations (-128 included), scales and mins at most 3.
            // |sum| <= 2 * 256 * 3 * 31 * 128 + mins < 2^24.
            GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => &[
                ("full quants, small scales", 2, true, -128, 127),
                // Full scales (and mins), activations in -2..2.
                ("full scales, small activations", 2, false, -2, 2),
            ],
            // Q2_K: |isum| <= 4 * 256 * 3 * 15 * 128, |summs| <= 4 * 16 * 15 * 2048 (< 2^24).
            GgmlType::Q2_K => &[("full range", 4, false, -128, 127)],
            // TQ2_0: 8 * 256 * 2 * 128; the others: 8 * 32 * 128 * 128 (< 2^24).
            _ => &[("full range", 8, false, -128, 127)],
        };
        for &(case, nb, small_scales, lo, hi) in cases {
            let n = nb * bs;
            let mut w = random_blocks(ty, nb, rng.next_u64());
            for b in w.chunks_exact_mut(ty.type_size()) {
                for &off in f16_fields(ty) {
                    put_f16(b, off, 1.0);
                }
                match ty {
                    GgmlType::Q4_K | GgmlType::Q5_K if small_scales => {
                        // Bytes 0..8 of the packed scales: low 6 bits and the high bits
                        // of sub-blocks 4..7; bytes 8..12: low nibbles of those.
                        for s in &mut b[4..12] {
                            *s &= 0x03;
                        }
                        for s in &mut b[12..16] {
                            *s &= 0x33;
                        }
                    }
                    GgmlType::Q6_K if small_scales => {
                        for s in &mut b[192..208] {
                            *s = ((rng.next_u64() % 5) as i8 - 2) as u8;
                        }
                    }
                    GgmlType::Q6_K => b[192] = (-128i8) as u8,
                    _ => {}
                }
            }
            let mut q = random_i8(&mut rng, n, lo, hi);
            q[1] = lo as i8;
            q[n - 1] = hi as i8;
            let act = act_from_quants(fast.act_type, 1.0, &q);
            check_exact(&fast, &scalar, n, &w, &act, case);
        }
    }
}

/// The 2-bit formats' own edge cases, bit for bit against the scalar twin: every code at its
/// lowest and highest (TQ2_0's code 3, which ggml never writes, decodes as +2), Q2_K scale and
/// min nibbles at 0 and 15 in every combination, d and dmin of either sign, tiny and huge, and
/// activations at -128 and 127.
/// Q8_K activation rows of `n` quants at the integer edges: all -128, all 127, the two mixed,
/// and random (the edge-block tests' activations).
fn q8_k_edge_acts(rng: &mut XorShift, n: usize) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "all -128",
            act_from_quants(GgmlType::Q8_K, 0.01, &vec![-128; n]),
        ),
        (
            "all 127",
            act_from_quants(GgmlType::Q8_K, 0.02, &vec![127; n]),
        ),
        (
            "-128/127",
            act_from_quants(
                GgmlType::Q8_K,
                0.03,
                &(0..n)
                    .map(|i| if i % 5 < 2 { 127 } else { -128 })
                    .collect::<Vec<_>>(),
            ),
        ),
        (
            "random",
            act_from_quants(GgmlType::Q8_K, 0.01, &random_i8(rng, n, -128, 127)),
        ),
    ]
}

#[test]
fn two_bit_edge_blocks_give_the_scalar_bits() {
    for (ty, fast, scalar) in simd_kernels() {
        if !matches!(ty, GgmlType::Q2_K | GgmlType::TQ2_0) {
            continue;
        }
        let nb = 3;
        let n = nb * 256;
        let mut rng = XorShift(0x2B17 ^ ty.id() as u64);
        let acts = q8_k_edge_acts(&mut rng, n);
        // Quant bytes: all codes 0, all codes 3, TQ2_0's ternary codes 0/1/2 only, random.
        type Fill = fn(&mut XorShift) -> u8;
        let code_fills: [(&str, Fill); 5] = [
            ("codes 0", |_| 0x00),
            ("codes 3", |_| 0xFF),
            ("codes 2", |_| 0xAA),
            ("ternary", |r| {
                (0..4).fold(0u8, |b, k| b | (((r.next_u64() % 3) as u8) << (2 * k)))
            }),
            ("random", |r| r.next_u64() as u8),
        ];
        let scale_pairs = [
            (1.0f32, 1.0f32),
            (-2.5, 0.75),
            (0.5, -3.0),
            (-1.0, -1.0),
            (65504.0, 6.0e-8),
            (6.0e-8, 65504.0),
        ];
        // Q2_K scale bytes (low nibble scale, high nibble min): each corner, and mixed.
        let scale_bytes: [(&str, [u8; 4]); 5] = [
            ("0/0", [0x00; 4]),
            ("15/15", [0xFF; 4]),
            ("scale 15 min 0", [0x0F; 4]),
            ("scale 0 min 15", [0xF0; 4]),
            ("mixed", [0x00, 0x0F, 0xF0, 0xFF]),
        ];
        for (code_case, fill) in code_fills {
            for (sc_case, sc_bytes) in scale_bytes {
                if ty == GgmlType::TQ2_0 && sc_case != "0/0" {
                    continue; // TQ2_0 has no sub-block scales.
                }
                for &(d, dmin) in &scale_pairs {
                    let mut w = vec![0u8; nb * ty.type_size()];
                    for b in w.chunks_exact_mut(ty.type_size()) {
                        let (qs, fields): (core::ops::Range<usize>, &[usize]) = match ty {
                            GgmlType::Q2_K => (16..80, &[80, 82]),
                            _ => (0..64, &[64]),
                        };
                        for q in &mut b[qs] {
                            *q = fill(&mut rng);
                        }
                        if ty == GgmlType::Q2_K {
                            for (j, s) in b[..16].iter_mut().enumerate() {
                                *s = sc_bytes[j % 4];
                            }
                        }
                        for (&off, v) in fields.iter().zip([d, dmin]) {
                            put_f16(b, off, v);
                        }
                    }
                    for (a_case, act) in &acts {
                        let want = (scalar.vec_dot)(n, &w, act);
                        let got = (fast.vec_dot)(n, &w, act);
                        assert!(want.is_finite(), "{ty}: pick finite cases");
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{ty} {}: {code_case}, scales {sc_case}, d {d} dmin {dmin}, \
                             act {a_case}: {got} vs scalar {want}",
                            fast.face
                        );
                    }
                }
            }
        }
    }
}

/// Q3_K's own edge cases, bit for bit against the scalar twin (#33): the third bits (hmask)
/// all set, none set and random, the 2-bit codes all 0 and all 3, every 6-bit scale at its
/// lowest (-32) and highest (+31) and mixed, d of either sign, tiny and the largest f16, and
/// activations at -128 and 127 (-4 * -128 * -32 is the largest product); through the one-row
/// kernel and the batched one. A batched kernel with a twin of its own (`cols_twin`, x86-64's
/// `avx2_kt35`) gives the twin's bits, and the twin comes within the scalar bound.
#[test]
fn q3_k_edge_blocks_give_the_scalar_bits() {
    let ty = GgmlType::Q3_K;
    let scalar_k = *KernelSet::scalar().weight(ty).unwrap();
    let scalar = scalar_k.vec_dot;
    for fast in fast_sets() {
        let k = *fast.weight(ty).unwrap();
        if k.face == "scalar" {
            continue;
        }
        let twin = k.cols_twin.map(|(twin, _)| twin);
        let nb = 3;
        let n = nb * 256;
        let mut rng = XorShift(0x3B17);
        let acts = q8_k_edge_acts(&mut rng, n);
        type Fill = fn(&mut XorShift) -> u8;
        let fills: [(&str, Fill); 3] = [
            ("0x00", |_| 0x00),
            ("0xFF", |_| 0xFF),
            ("random", |r| r.next_u64() as u8),
        ];
        // 12 scale bytes: all scales 0 (-32), all 63 (+31), alternating, random.
        let scale_sets: [(&str, Fill); 4] = [
            ("-32", |_| 0x00),
            ("+31", |_| 0xFF),
            ("mixed", |r| {
                [0x0F, 0xF0, 0x33, 0xCC][r.next_u64() as usize % 4]
            }),
            ("random", |r| r.next_u64() as u8),
        ];
        for (hm_case, hm) in fills {
            for (qs_case, qs) in fills {
                for (sc_case, sc) in scale_sets {
                    for d in [1.0f32, -2.5, 6.0e-8, 65504.0] {
                        let mut w = vec![0u8; nb * ty.type_size()];
                        for b in w.chunks_exact_mut(ty.type_size()) {
                            b[..32].iter_mut().for_each(|v| *v = hm(&mut rng));
                            b[32..96].iter_mut().for_each(|v| *v = qs(&mut rng));
                            b[96..108].iter_mut().for_each(|v| *v = sc(&mut rng));
                            put_f16(b, 108, d);
                        }
                        let all: Vec<u8> = acts.iter().flat_map(|a| a.1.clone()).collect();
                        let mut batched = vec![f32::NAN; acts.len()];
                        k.matmul(&w, 1, n, &all, acts.len(), &mut batched).unwrap();
                        for (t, (a_case, act)) in acts.iter().enumerate() {
                            let want = scalar(n, &w, act);
                            let got = (k.vec_dot)(n, &w, act);
                            let case = std::format!(
                                "Q3_K {}: hmask {hm_case}, codes {qs_case}, scales {sc_case}, \
                                 d {d}, act {a_case}",
                                k.face
                            );
                            assert!(want.is_finite(), "{case}: pick finite cases");
                            assert_eq!(got.to_bits(), want.to_bits(), "{case}: {got} vs {want}");
                            let Some(twin) = twin else {
                                assert_eq!(
                                    batched[t].to_bits(),
                                    want.to_bits(),
                                    "{case}, batched: {} vs {want}",
                                    batched[t]
                                );
                                continue;
                            };
                            let one = twin(n, &w, act);
                            assert_eq!(
                                batched[t].to_bits(),
                                one.to_bits(),
                                "{case}, batched: {} vs its twin {one}",
                                batched[t]
                            );
                            let m = magnitude(ty, scalar_k.act_type, &w, act, n);
                            let tol = 2.0 * (nb + 12) as f64 * U * m * 1.001;
                            assert!(
                                ((one - want) as f64).abs() <= tol,
                                "{case}, batch twin: {one} vs {want} (bound {tol})"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn matvec_keeps_odd_row_counts_on_the_fast_path() {
    for (ty, fast, scalar) in simd_kernels() {
        // 13 rows: not a multiple of any row-batching factor.
        let (n_rows, n_cols) = (
            13,
            if ty.block_size() == 1 {
                300
            } else {
                2 * ty.block_size()
            },
        );
        let row_bytes = quant::row_bytes(ty, n_cols).unwrap();
        let w = if ty.block_size() == 1 {
            let mut rng = XorShift(5);
            let x: Vec<f32> = (0..n_rows * n_cols).map(|_| rng.unit() - 0.5).collect();
            quantize(ty, &x)
        } else {
            random_blocks(ty, n_rows * n_cols / ty.block_size(), 11)
        };
        let mut rng = XorShift(6);
        let x: Vec<f32> = (0..n_cols).map(|_| rng.unit() - 0.5).collect();
        let act = quantize(fast.act_type, &x);
        let mut out = vec![f32::NAN; n_rows];
        fast.matvec(&w, n_rows, n_cols, &act, &mut out).unwrap();
        for (r, &y) in out.iter().enumerate() {
            let row = &w[r * row_bytes..(r + 1) * row_bytes];
            let rows_keep_bits = matches!(
                ty,
                GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q3_K
            ) || fast.face == "avx512";
            if fast.rows.is_none() || rows_keep_bits {
                // Row by row through the SIMD dot: the same bits (the x86-64 rows kernels
                // of the 32-element formats and Q3_K keep the vec_dot's float order).
                assert_eq!(
                    y.to_bits(),
                    (fast.vec_dot)(n_cols, row, &act).to_bits(),
                    "{ty} row {r}"
                );
            }
            let m = magnitude(ty, fast.act_type, row, &act, n_cols);
            let want = (scalar.vec_dot)(n_cols, row, &act);
            assert!(
                ((y - want) as f64).abs() <= 2.0 * (n_cols + 12) as f64 * U * m,
                "{ty} row {r}: {y} vs scalar {want}"
            );
        }
        // Shape errors come back through the set as they do through quant::matvec.
        assert!(matches!(
            fast.matvec(&w[1..], n_rows, n_cols, &act, &mut out),
            Err(QuantError::BadLength { .. })
        ));
    }
    assert!(matches!(
        KernelSet::select(&detected_features()).weight(GgmlType::MXFP4),
        Err(QuantError::Unsupported { .. })
    ));
}

/// Fills the fields after `d` of one grid i-quant super-block: grid indices all 0
/// (`Some(false)`), all at their field's largest value (`Some(true)`: 255, 511 or 1023 with
/// the high bits) or random (`None`); the same for the sign fields (all clear / all set) and
/// the 4-bit scales (0 / 15).
fn fill_grid_block(
    ty: GgmlType,
    b: &mut [u8],
    index: Option<bool>,
    signs: Option<bool>,
    scale: Option<bool>,
    rng: &mut XorShift,
) {
    let mut pick = |v: Option<bool>, max: u64| match v {
        Some(false) => 0,
        Some(true) => max,
        None => rng.next_u64() & max,
    };
    let word = |b: &mut [u8], o: usize, w: u64| {
        b[o..o + 4].copy_from_slice(&(w as u32).to_le_bytes());
    };
    match ty {
        // 8 sub-blocks of 4 index bytes and a signs-and-scale word.
        GgmlType::IQ2_XXS => {
            for ib in 0..8 {
                for q in &mut b[2 + 8 * ib..6 + 8 * ib] {
                    *q = pick(index, 255) as u8;
                }
                word(
                    b,
                    6 + 8 * ib,
                    pick(signs, 0x0FFF_FFFF) | pick(scale, 15) << 28,
                );
            }
        }
        // 64 index bytes, then 8 signs-and-scale words.
        GgmlType::IQ3_XXS => {
            for q in &mut b[2..66] {
                *q = pick(index, 255) as u8;
            }
            for ib in 0..8 {
                word(
                    b,
                    66 + 4 * ib,
                    pick(signs, 0x0FFF_FFFF) | pick(scale, 15) << 28,
                );
            }
        }
        // 32 u16 of 9-bit index and 7-bit signs, 8 scale bytes.
        GgmlType::IQ2_XS => {
            for g in 0..32 {
                let q = pick(index, 511) | pick(signs, 127) << 9;
                b[2 + 2 * g..4 + 2 * g].copy_from_slice(&(q as u16).to_le_bytes());
            }
            for q in &mut b[66..74] {
                *q = pick(scale, 255) as u8;
            }
        }
        // qs (low index bytes), sign bytes, qh (high index bits), scales.
        GgmlType::IQ2_S | GgmlType::IQ3_S => {
            let (qs, sg, qh, sc) = if ty == GgmlType::IQ2_S {
                (2..34, 34..66, 66..74, 74..82)
            } else {
                (2..66, 74..106, 66..74, 106..110)
            };
            for o in qs.chain(qh) {
                b[o] = pick(index, 255) as u8;
            }
            for o in sg {
                b[o] = pick(signs, 255) as u8;
            }
            for o in sc {
                b[o] = pick(scale, 255) as u8;
            }
        }
        // 32 low index bytes, 8 words of 3-bit index tops, scale (bits 12..15) and shift sign
        // (bit 15): "signs" here is the shift sign.
        GgmlType::IQ1_S => {
            for q in &mut b[2..34] {
                *q = pick(index, 255) as u8;
            }
            for ib in 0..8 {
                let h = pick(index, 0xfff) | pick(scale, 7) << 12 | pick(signs, 1) << 15;
                b[34 + 2 * ib..36 + 2 * ib].copy_from_slice(&(h as u16).to_le_bytes());
            }
        }
        // 32 low index bytes; 16 qh bytes (two groups' 3-bit index tops and shift signs
        // each); scale words whose low 12 bits are 4 scales (the top nibbles: d, set after)
        GgmlType::IQ1_M => {
            for q in &mut b[0..32] {
                *q = pick(index, 255) as u8;
            }
            for q in &mut b[32..48] {
                *q = (pick(index, 0x77) | pick(signs, 0x88)) as u8;
            }
            for k in 0..4 {
                let w = pick(scale, 0xfff) as u16;
                b[48 + 2 * k..50 + 2 * k].copy_from_slice(&w.to_le_bytes());
            }
        }
        _ => unreachable!("{ty} is no grid i-quant"),
    }
}

/// The grid i-quants' own edge cases, bit for bit against the scalar twin (#33): every grid
/// index at 0, at its field's largest value and random, every sign field all clear and all set
/// (for the 7-bit fields the parity sign joins in), scales 0 and 15, d of either sign, tiny
/// and the largest f16, and activations at -128 and 127 (which a kernel that negated
/// activations would get wrong).
#[test]
fn grid_iquant_edge_blocks_give_the_scalar_bits() {
    for (ty, fast, scalar) in simd_kernels() {
        if !matches!(
            ty,
            GgmlType::IQ2_XXS
                | GgmlType::IQ3_XXS
                | GgmlType::IQ2_XS
                | GgmlType::IQ2_S
                | GgmlType::IQ3_S
                | GgmlType::IQ1_S
                | GgmlType::IQ1_M
        ) {
            continue;
        }
        let nb = 3;
        let n = nb * 256;
        let mut rng = XorShift(0x1C2 ^ ty.id() as u64);
        let acts = q8_k_edge_acts(&mut rng, n);
        // (case, indices, signs, scales): Some(false) = 0 / none, Some(true) = largest / all,
        // None = random.
        type Sub = (&'static str, Option<bool>, Option<bool>, Option<bool>);
        let subs: [Sub; 7] = [
            (
                "index 0, no signs, scale 0",
                Some(false),
                Some(false),
                Some(false),
            ),
            (
                "index max, all signs, scale 15",
                Some(true),
                Some(true),
                Some(true),
            ),
            (
                "index max, no signs, scale 15",
                Some(true),
                Some(false),
                Some(true),
            ),
            (
                "index 0, all signs, scale 0",
                Some(false),
                Some(true),
                Some(false),
            ),
            (
                "random index, all signs, scale 15",
                None,
                Some(true),
                Some(true),
            ),
            ("random index and signs, scale 15", None, None, Some(true)),
            ("random", None, None, None),
        ];
        for (case, index, signs, scale) in subs {
            for d in [1.0f32, -2.5, 6.0e-8, 65504.0, -65504.0, 0.0] {
                let mut w = vec![0u8; nb * ty.type_size()];
                for b in w.chunks_exact_mut(ty.type_size()) {
                    fill_grid_block(ty, b, index, signs, scale, &mut rng);
                    put_f16(b, f16_fields(ty)[0], d);
                }
                for (a_case, act) in &acts {
                    let want = (scalar.vec_dot)(n, &w, act);
                    let got = (fast.vec_dot)(n, &w, act);
                    assert!(want.is_finite(), "{ty}: pick finite cases");
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{ty} {}: {case}, d {d}, act {a_case}: {got} vs scalar {want}",
                        fast.face
                    );
                }
            }
        }
    }
}

/// Every repacked (row-interleaved or lookup-table) kernel this CPU has, and the scalar face
/// of the Q1_0 and Q2_0 lookup-table kernels on every CPU, run the way the model runs it: rows repacked
/// once, the activation's tables built once where the kernel reads tables, then rows cut into
/// chunks that start on group boundaries (the last one holding the rows that fill no group)
/// and handed to `RepackedKernel::matvec`. Each row must match its scalar twin: bit for bit
/// where the kernel keeps the scalar float order (Q8_0, Q5_0, Q1_0, Q2_0), else within the
/// summation-order bound.
#[test]
fn repacked_kernels_match_scalar_on_every_row() {
    let sets = fast_sets();
    let mut tested_kernels = 0;
    for set in &sets {
        for fast in set.weights.iter() {
            let Some(rk) = fast.repacked else { continue };
            tested_kernels += 1;
            check_repacked_kernel(fast.weight_type, rk);
        }
    }
    check_repacked_kernel(GgmlType::Q1_0, super::Q1_0_LUT16_SCALAR);
    check_repacked_kernel(GgmlType::Q2_0, super::Q2_0_LUT16_SCALAR);
    if tested_kernels == 0 {
        println!(
            "notice: {} has no repacked kernels on this CPU; nothing to compare",
            sets[0].name()
        );
    }
    // Row-interleaved (sdot) kernels only where the set says dotprod, and on x86-64 Q2_K's
    // 8-row and Q1_0's 16-row groups; the table kernel (base NEON) on every aarch64 set.
    for set in &sets {
        for k in set.weights.iter() {
            match k.repacked {
                Some(rk) if rk.act_table.is_some() => {
                    assert!(set.name().starts_with("aarch64"))
                }
                Some(_) if set.name().starts_with("x86_64") => assert!(
                    matches!(k.weight_type, GgmlType::Q2_K | GgmlType::Q1_0),
                    "{} {}",
                    k.weight_type,
                    set.name()
                ),
                Some(_) => assert_eq!(set.name(), "aarch64-dotprod", "{}", k.weight_type),
                None => {}
            }
        }
    }
}

/// One repacked kernel against the scalar twin of `ty` (see above).
fn check_repacked_kernel(ty: GgmlType, rk: RepackedKernel) {
    let scalar = KernelSet::scalar();
    let scalar_k = scalar.weight(ty).unwrap();
    let act_type = scalar_k.act_type;
    let bit_exact = matches!(
        ty,
        GgmlType::Q8_0 | GgmlType::Q5_0 | GgmlType::Q1_0 | GgmlType::Q2_0 | GgmlType::Q2_K
    );
    let g = rk.group_rows.max(1);
    let chunk_rows = g.max(8);
    // The kernel's input for one quantized activation row: the row, or its tables.
    let input = |act: &[u8], n_cols: usize| -> Vec<u8> {
        match rk.act_table {
            None => act.to_vec(),
            Some(_) => {
                let mut table = vec![0xAAu8; rk.input_bytes(ty, n_cols).unwrap()];
                rk.build_table(ty, n_cols, act, &mut table).unwrap();
                table
            }
        }
    };
    let mut tested = 0;
    for (case, &(n_rows, n_blocks)) in [
        (1, 1),
        (3, 2),
        (4, 1),
        (5, 3),
        (13, 2),
        (37, 1),
        (64, 2),
        (67, 1),
    ]
    .iter()
    .enumerate()
    {
        let n_cols = n_blocks * ty.block_size();
        let row_bytes = quant::row_bytes(ty, n_cols).unwrap();
        let w = random_blocks(ty, n_rows * n_blocks, 300 + case as u64);
        let mut rng = XorShift(400 + case as u64);
        let x: Vec<f32> = (0..n_cols).map(|_| rng.unit() * 2.0 - 1.0).collect();
        let act = quantize(act_type, &x);
        let kernel_input = input(&act, n_cols);
        let mut packed = vec![0u8; (rk.bytes)(n_rows, n_cols).unwrap()];
        (rk.repack)(&w, n_rows, n_cols, &mut packed).unwrap();
        // Chunks of 8 rows (or one group), then whatever is left: starts on multiples of the
        // group.
        let mut out = vec![f32::NAN; n_rows];
        let mut r0 = 0;
        while r0 < n_rows {
            let r1 = (r0 + chunk_rows).min(n_rows);
            let range = rk.row_range(n_rows, n_cols, r0, r1).unwrap();
            rk.matvec(
                ty,
                &packed[range],
                r1 - r0,
                n_cols,
                &kernel_input,
                &mut out[r0..r1],
            )
            .unwrap();
            r0 = r1;
        }
        for (r, &y) in out.iter().enumerate() {
            let row = &w[r * row_bytes..(r + 1) * row_bytes];
            let want = (scalar_k.vec_dot)(n_cols, row, &act);
            if bit_exact {
                assert_eq!(
                    y.to_bits(),
                    want.to_bits(),
                    "{} ({}) {n_rows} rows, row {r}",
                    rk.layout,
                    rk.face
                );
            } else {
                let m = magnitude(ty, act_type, row, &act, n_cols);
                let tol = 2.0 * (n_blocks + 12) as f64 * U * m * 1.001;
                assert!(
                    ((y - want) as f64).abs() <= tol,
                    "{} {n_rows} rows, row {r}: {y} vs scalar {want} (bound {tol})",
                    rk.layout
                );
            }
        }
        tested += n_rows;
    }
    // A chunk may not split a group, and the shapes are checked.
    let bs = ty.block_size();
    assert!(rk.row_range(13, bs, 2, 8).is_none());
    assert!(rk.row_range(13, bs, 4, 6).is_none());
    assert!(rk.row_range(13, bs, 13 / g * g, 13).is_some());
    assert!(rk.row_range(13, bs, 0, 14).is_none());
    let n = bs;
    let act = vec![0u8; quant::row_bytes(act_type, n).unwrap()];
    let kernel_input = input(&act, n);
    let packed = vec![0u8; (rk.bytes)(5, n).unwrap()];
    let mut out = [0f32; 5];
    assert!(rk
        .matvec(ty, &packed[1..], 5, n, &kernel_input, &mut out)
        .is_err());
    assert!(rk
        .matvec(ty, &packed, 5, n, &kernel_input[1..], &mut out)
        .is_err());
    assert!(rk
        .matvec(ty, &packed, 5, n, &kernel_input, &mut out[1..])
        .is_err());
    assert!(rk
        .matvec(ty, &packed, 5, n + 1, &kernel_input, &mut out)
        .is_err());
    if rk.act_table.is_some() {
        let mut table = kernel_input.clone();
        assert!(rk.build_table(ty, n, &act[1..], &mut table).is_err());
        assert!(rk.build_table(ty, n, &act, &mut table[1..]).is_err());
        assert!(rk.build_table(ty, n + 1, &act, &mut table).is_err());
    }
    println!(
        "notice: {} ({}) matches scalar on {tested} rows",
        rk.layout, rk.face
    );
}

/// `matmul` against the matvec of each activation row, to the bit: the generic twin for
/// every type in both sets, the batched SIMD kernels (`cols`) for the types that have them.
/// Row counts (1, 13, 37) and activation counts (1..=9, 13) are not multiples of the column
/// group; activations and weights include the edge cases of the vec_dot tests above.
fn check_matmul_is_matvec_per_row(set: &KernelSet, seed: u64) {
    for k in &set.weights {
        let ty = k.weight_type;
        let bs = ty.block_size();
        let n_cols = if bs == 1 { 75 } else { 3 * bs };
        let act_row = quant::row_bytes(k.act_type, n_cols).unwrap();
        let row_bytes = quant::row_bytes(ty, n_cols).unwrap();
        let mut rng = XorShift(seed ^ ty.id() as u64);
        // Activation rows: random, constant, one outlier, and raw -128/127 quants.
        let mut acts: Vec<Vec<u8>> = Vec::new();
        for i in 0..13 {
            acts.push(match i % 4 {
                0 | 1 => {
                    let x: Vec<f32> = (0..n_cols).map(|_| rng.unit() * 2.0 - 1.0).collect();
                    quantize(k.act_type, &x)
                }
                2 => {
                    let mut x = vec![0.001f32; n_cols];
                    x[(i * 7) % n_cols] = -3.0e4;
                    quantize(k.act_type, &x)
                }
                _ if matches!(k.act_type, GgmlType::Q8_0 | GgmlType::Q8_K) => act_from_quants(
                    k.act_type,
                    0.01,
                    &(0..n_cols)
                        .map(|e| if (e + i) % 3 == 0 { 127 } else { -128 })
                        .collect::<Vec<_>>(),
                ),
                _ => quantize(k.act_type, &vec![1.0; n_cols]),
            });
        }
        // Weights: 37 rows (two 16-row tiles and a tail), random, with edge rows (all 0x00, all 0xFF with large scales).
        let n_rows = 37;
        let mut w = if bs == 1 {
            let x: Vec<f32> = (0..n_rows * n_cols)
                .map(|_| rng.unit() * 4.0 - 2.0)
                .collect();
            quantize(ty, &x)
        } else {
            random_blocks(ty, n_rows * n_cols / bs, rng.next_u64())
        };
        if bs > 1 {
            w[row_bytes..2 * row_bytes].fill(0);
            set_edge_row(&mut w, ty, row_bytes, 5, -2.5);
        }
        for n_acts in [1, 2, 3, 4, 5, 6, 7, 8, 9, 13] {
            let a: Vec<u8> = acts[..n_acts].concat();
            for rows in [1, 13, n_rows] {
                let w = &w[..rows * row_bytes];
                let mut out = vec![f32::NAN; rows * n_acts];
                k.matmul(w, rows, n_cols, &a, n_acts, &mut out).unwrap();
                for t in 0..n_acts {
                    let mut want = vec![0f32; rows];
                    k.matvec(w, rows, n_cols, &a[t * act_row..][..act_row], &mut want)
                        .unwrap();
                    for r in 0..rows {
                        assert_eq!(
                            out[t * rows + r].to_bits(),
                            want[r].to_bits(),
                            "{ty} ({} face, cols {}): row {r} of {rows}, activation {t} of \
                             {n_acts}: matmul {} vs matvec {}",
                            k.face,
                            k.cols.is_some(),
                            out[t * rows + r],
                            want[r]
                        );
                    }
                }
            }
        }
        // Shapes: every slice is checked, as in matvec.
        let a: Vec<u8> = acts[..3].concat();
        let mut out = vec![0f32; n_rows * 3];
        for (w_len, a_len, o_len) in [
            (w.len() - 1, a.len(), out.len()),
            (w.len(), a.len() - 1, out.len()),
            (w.len(), a.len(), out.len() - 1),
        ] {
            assert!(
                matches!(
                    k.matmul(
                        &w[..w_len],
                        n_rows,
                        n_cols,
                        &a[..a_len],
                        3,
                        &mut out[..o_len]
                    ),
                    Err(QuantError::BadLength { .. })
                ),
                "{ty}: a wrong length must be refused"
            );
        }
        let mut none: [f32; 0] = [];
        k.matmul(&w, n_rows, n_cols, &[], 0, &mut none).unwrap();
    }
}

#[test]
fn matmul_gives_the_matvec_bits_for_every_type() {
    check_matmul_is_matvec_per_row(&KernelSet::scalar(), 31);
    for fast in fast_sets() {
        check_matmul_is_matvec_per_row(&fast.with_batch_twins(), 32);
    }
}

/// The 32-element formats' batched kernels on the shapes their tiles split: block counts
/// odd and even (a last block without a pair), row counts around the 2-row tile and the
/// 16-row sweep, activation counts around the 8-column group, rows long enough that the
/// activations are packed in several panels (of whole groups, of fewer columns than a
/// group, and not at all), and blocks with zero, subnormal and the largest f16 scales.
/// Each output must have the bits of the matvec (which is the vec_dot, by the tests above).
#[test]
fn q0_matmul_tiles_give_the_matvec_bits() {
    let small_rows = [1, 2, 3, 5, 16, 17, 35];
    let many_acts = [1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 32];
    // (blocks per row, weight rows, activation rows)
    let mut shapes: Vec<(usize, &[usize], &[usize])> = Vec::new();
    for nb in [1, 2, 3, 4, 5, 8, 9, 20, 33] {
        shapes.push((nb, &small_rows, &many_acts));
    }
    shapes.push((158, &[3, 18], &[13, 17])); // panels of 8 columns
    shapes.push((259, &[3], &[9])); // panels of 7 columns
    shapes.push((2051, &[3], &[2])); // no panel: a matvec per activation row
    let mut worst = Vec::new();
    for fast in fast_sets() {
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0] {
            let k = fast.weight(ty).unwrap();
            if k.cols.is_none() {
                continue;
            }
            let mut rng = XorShift(0x7113 ^ ty.id() as u64);
            for &(nb, row_counts, act_counts) in &shapes {
                let n_cols = nb * 32;
                let (row_bytes, act_row) = (nb * ty.type_size(), nb * 34);
                let max_rows = *row_counts.iter().max().unwrap();
                let max_acts = *act_counts.iter().max().unwrap();
                let mut w = random_blocks(ty, max_rows * nb, rng.next_u64());
                // Edge scales on some blocks: 0, -0, a subnormal, the largest f16.
                for (i, b) in w.chunks_exact_mut(ty.type_size()).enumerate() {
                    match i % 11 {
                        3 => put_f16(b, 0, 0.0),
                        5 => put_f16(b, 0, -65504.0),
                        7 => put_f16(b, 0, 6.0e-8),
                        _ => {}
                    }
                }
                let mut acts = Vec::new();
                for t in 0..max_acts {
                    let q = random_i8(&mut rng, n_cols, -128, 127);
                    let mut a = act_from_quants(GgmlType::Q8_0, 0.02, &q);
                    for (i, b) in a.chunks_exact_mut(34).enumerate() {
                        match (i + t) % 13 {
                            2 => put_f16(b, 0, 65504.0),
                            6 => put_f16(b, 0, -0.0),
                            9 => put_f16(b, 0, -3.0e-7),
                            _ => {}
                        }
                    }
                    acts.extend_from_slice(&a);
                }
                for &rows in row_counts {
                    let w = &w[..rows * row_bytes];
                    let mut want = vec![0f32; rows * max_acts];
                    for t in 0..max_acts {
                        let act = &acts[t * act_row..][..act_row];
                        k.matvec(w, rows, n_cols, act, &mut want[t * rows..][..rows])
                            .unwrap();
                    }
                    for &n_acts in act_counts {
                        let mut out = vec![f32::NAN; rows * n_acts];
                        let a = &acts[..n_acts * act_row];
                        k.matmul(w, rows, n_cols, a, n_acts, &mut out).unwrap();
                        for (i, (o, e)) in out.iter().zip(&want).enumerate() {
                            assert_eq!(
                                o.to_bits(),
                                e.to_bits(),
                                "{ty} ({}): {nb} blocks, {rows} rows, {n_acts} activations: \
                                 row {} of activation {}: matmul {o} vs matvec {e}",
                                fast.name(),
                                i % rows,
                                i / rows
                            );
                        }
                        worst.push(out.iter().filter(|v| !v.is_finite()).count());
                    }
                }
            }
        }
    }
    // The edge scales must not have turned everything into infinities.
    assert!(worst.iter().all(|&bad| bad == 0), "non-finite outputs");
}

/// The batched SIMD kernels on many blocks and the full-range integer cases of
/// `simd_integer_parts_are_exact`, against the scalar vec_dot: there every intermediate
/// is an exact integer, so the batched kernel must equal the scalar twin itself.
#[test]
fn simd_matmul_integer_parts_equal_the_scalar_twin() {
    for (ty, fast, scalar) in simd_kernels() {
        if fast.cols.is_none() || ty.block_size() == 1 {
            continue;
        }
        let mut rng = XorShift(0xBA7C4 ^ ty.id() as u64);
        let nb = 2;
        let n = nb * ty.block_size();
        let n_rows = 7;
        let mut w = random_blocks(ty, n_rows * nb, rng.next_u64());
        for b in w.chunks_exact_mut(ty.type_size()) {
            for &off in f16_fields(ty) {
                put_f16(b, off, 1.0);
            }
            match ty {
                GgmlType::Q4_K | GgmlType::Q5_K => {
                    for s in &mut b[4..12] {
                        *s &= 0x03;
                    }
                    for s in &mut b[12..16] {
                        *s &= 0x33;
                    }
                }
                GgmlType::Q6_K => {
                    for s in &mut b[192..208] {
                        *s = ((rng.next_u64() % 5) as i8 - 2) as u8;
                    }
                }
                _ => {}
            }
        }
        let n_acts = 6;
        let acts: Vec<u8> = (0..n_acts)
            .flat_map(|_| {
                let mut q = random_i8(&mut rng, n, -128, 127);
                q[0] = -128;
                act_from_quants(fast.act_type, 1.0, &q)
            })
            .collect();
        let act_row = acts.len() / n_acts;
        let row_bytes = w.len() / n_rows;
        let mut out = vec![f32::NAN; n_rows * n_acts];
        fast.matmul(&w, n_rows, n, &acts, n_acts, &mut out).unwrap();
        for t in 0..n_acts {
            for r in 0..n_rows {
                let want = (scalar.vec_dot)(
                    n,
                    &w[r * row_bytes..][..row_bytes],
                    &acts[t * act_row..][..act_row],
                );
                assert_eq!(out[t * n_rows + r], want, "{ty} row {r} activation {t}");
            }
        }
    }
}

/// The batched K-quant kernels (Q4_K, Q6_K, Q3_K, Q5_K; and IQ2_XXS, IQ3_XXS, IQ4_XS, tiled
/// the same way) of every set this CPU runs, on the
/// shapes their tiling cuts: rows of 1..=17 blocks (the AVX-512 kernel packs 8 blocks at a time), 1..=70
/// weight rows (tiles of 64 rows, register tiles of 4), 1..=40 activation rows (vectors of
/// 16 and 32 tokens, tails of every size, the one-row path below 4). Every output must be
/// the set's vec_dot to the bit, and the vec_dot within the scalar twin's bound. Weights
/// include all-zero blocks and all-0xFF blocks with zero, subnormal, negative and the
/// largest f16 scales; activations include -128/127 quants and an outlier.
#[test]
fn k_quant_matmuls_give_the_vec_dot_bits_on_every_tiling() {
    let scalar = KernelSet::scalar();
    for fast in fast_sets() {
        // A prompt kernel against the one-row kernel whose bits it keeps.
        let fast = fast.with_batch_twins();
        // IQ2_XXS and IQ3_XXS: their AVX2 prompt kernels tile the same way (tokens in the
        // lanes, avx2_iq2::lanes), as do avx2_kt35's Q3_K and Q5_K and avx2_kt_iq4's IQ4_XS.
        for ty in [
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::Q3_K,
            GgmlType::Q5_K,
            GgmlType::IQ2_XXS,
            GgmlType::IQ3_XXS,
            GgmlType::IQ4_XS,
        ] {
            let k = fast.weight(ty).unwrap();
            let scalar_k = scalar.weight(ty).unwrap();
            if k.cols.is_none() {
                continue;
            }
            let mut rng = XorShift(0x5EED ^ ty.id() as u64);
            let shapes: &[(usize, usize, &[usize])] = &[
                (1, 70, &[1, 2, 3, 4, 5, 15, 16, 17, 31, 32, 33, 40]),
                (3, 9, &[4, 7, 20, 32]),
                (8, 5, &[6, 18]),
                (9, 67, &[3, 5, 32, 37]),
                (17, 6, &[16, 19]),
            ];
            for &(nb, n_rows, act_counts) in shapes {
                let n = nb * 256;
                let row_bytes = nb * ty.type_size();
                let mut w = random_blocks(ty, n_rows * nb, rng.next_u64());
                // Edge blocks: block b of row r (for the rows that exist).
                let edges: [(usize, Option<u8>, f32); 6] = [
                    (0, Some(0x00), 1.0),
                    (1, Some(0xFF), 65504.0),
                    (2, Some(0xFF), -2.5),
                    (3, Some(0xFF), 6.0e-8),
                    (4, None, 0.0),
                    (n_rows - 1, Some(0xFF), -65504.0),
                ];
                for (r, fill, scale) in edges {
                    if r >= n_rows {
                        continue;
                    }
                    let b0 = (r * nb + (r % nb)) * ty.type_size();
                    let b = &mut w[b0..b0 + ty.type_size()];
                    if let Some(f) = fill {
                        b.fill(f);
                    }
                    for (i, &off) in f16_fields(ty).iter().enumerate() {
                        put_f16(b, off, if i == 0 { scale } else { 0.5 * scale });
                    }
                }
                let max_acts = *act_counts.iter().max().unwrap();
                let acts: Vec<u8> = (0..max_acts)
                    .flat_map(|t| match t % 5 {
                        3 => act_from_quants(
                            GgmlType::Q8_K,
                            0.01,
                            &(0..n)
                                .map(|e| if (e + t) % 3 == 0 { 127 } else { -128 })
                                .collect::<Vec<_>>(),
                        ),
                        4 => {
                            let mut x = vec![0.001f32; n];
                            x[(t * 37) % n] = -3.0e4;
                            quantize(GgmlType::Q8_K, &x)
                        }
                        _ => {
                            let x: Vec<f32> = (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect();
                            quantize(GgmlType::Q8_K, &x)
                        }
                    })
                    .collect();
                let act_row = acts.len() / max_acts;
                let act = |t: usize| &acts[t * act_row..(t + 1) * act_row];
                let row = |r: usize| &w[r * row_bytes..(r + 1) * row_bytes];
                // The vec_dot of every pair, and its distance from the scalar twin.
                let mut want = vec![0f32; max_acts * n_rows];
                for t in 0..max_acts {
                    for r in 0..n_rows {
                        let v = (k.vec_dot)(n, row(r), act(t));
                        want[t * n_rows + r] = v;
                        // avx2_kt35's dots (Q3_K, Q5_K) and avx2_kt_iq4's (IQ4_XS) round
                        // only each block's exact integers, as the AVX-512 ones do.
                        let exact_blocks = k.face == "avx512"
                            || matches!(ty, GgmlType::Q3_K | GgmlType::Q5_K | GgmlType::IQ4_XS);
                        if !exact_blocks {
                            // The AVX2 Q6_K dot keeps the -32 offset (through the bsums)
                            // in other lanes than the quants until the float sum, so its
                            // rounding scales with |q| |y| + 32 |y|, not |q - 32| |y|: an
                            // outlier activation can take it past this bound (seen: 0.196
                            // against 0.171). The AVX-512 dots round only the exact
                            // integer of each block.
                            continue;
                        }
                        let s = (scalar_k.vec_dot)(n, row(r), act(t));
                        let m = magnitude(ty, k.act_type, row(r), act(t), n);
                        let tol = 2.0 * (nb + 12) as f64 * U * m * 1.001;
                        assert!(
                            ((v - s) as f64).abs() <= tol,
                            "{ty} {}: {nb} blocks, row {r}, act {t}: {v} vs scalar {s} \
                             (bound {tol}, f64 {})",
                            k.face,
                            {
                                let (mut wf, mut af) = (vec![0f32; n], vec![0f32; n]);
                                quant::dequantize_row(ty, row(r), &mut wf).unwrap();
                                quant::dequantize_row(k.act_type, act(t), &mut af).unwrap();
                                wf.iter()
                                    .zip(&af)
                                    .map(|(&a, &b)| a as f64 * b as f64)
                                    .sum::<f64>()
                            }
                        );
                    }
                }
                // The matvec (several rows at once where the set has it) of a few rows.
                for t in 0..max_acts.min(3) {
                    let mut out = vec![f32::NAN; n_rows];
                    k.matvec(&w, n_rows, n, act(t), &mut out).unwrap();
                    for r in 0..n_rows {
                        assert_eq!(
                            out[r].to_bits(),
                            want[t * n_rows + r].to_bits(),
                            "{ty} {} matvec: {nb} blocks, {n_rows} rows: row {r} act {t}",
                            k.face
                        );
                    }
                }
                for &n_acts in act_counts {
                    let mut out = vec![f32::NAN; n_acts * n_rows];
                    k.matmul(&w, n_rows, n, &acts[..n_acts * act_row], n_acts, &mut out)
                        .unwrap();
                    for t in 0..n_acts {
                        for r in 0..n_rows {
                            assert_eq!(
                                out[t * n_rows + r].to_bits(),
                                want[t * n_rows + r].to_bits(),
                                "{ty} {} batched: {nb} blocks, {n_rows} rows, {n_acts} \
                                 activations: row {r} act {t}: {} vs vec_dot {}",
                                k.face,
                                out[t * n_rows + r],
                                want[t * n_rows + r]
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The 1-bit, 2-bit and ternary kernels (Q1_0, Q2_0, TQ1_0) keep the scalar twin's float
/// order (exact integer sums, then the scalar's products and additions one for one), so they
/// must give its bits, not just come within the summation-order bound: on random rows and on
/// every fill pattern (all bits clear and set, alternating; TQ1_0 digits all 0, all 1, all 2
/// (the packed 242) and mixed), with zero, subnormal, negative, mixed and the largest f16
/// scales, against random, constant, outlier and raw -128 / 127 activations.
#[test]
fn lowbit_kernels_give_the_scalar_bits() {
    let low_bit = [GgmlType::Q1_0, GgmlType::Q2_0, GgmlType::TQ1_0];
    let mut tested = 0;
    for (ty, fast, scalar) in simd_kernels() {
        if !low_bit.contains(&ty) {
            continue;
        }
        let mut rng = XorShift(0x10B1 ^ ty.id() as u64);
        for nb in [1usize, 2, 3, 5, 16] {
            let n = nb * ty.block_size();
            let mut acts: Vec<Vec<u8>> = vec![
                quantize(
                    fast.act_type,
                    &(0..n).map(|_| rng.unit() - 0.5).collect::<Vec<_>>(),
                ),
                quantize(fast.act_type, &vec![1.0; n]),
                act_from_quants(fast.act_type, 0.01, &vec![-128; n]),
                act_from_quants(fast.act_type, 3.0, &vec![127; n]),
                act_from_quants(
                    fast.act_type,
                    0.02,
                    &(0..n)
                        .map(|i| if i % 3 == 0 { 127 } else { -128 })
                        .collect::<Vec<_>>(),
                ),
            ];
            acts.push({
                let mut x = vec![0.001f32; n];
                x[n / 3] = -3.0e4;
                quantize(fast.act_type, &x)
            });
            for fill in [
                None,
                Some(0x00u8),
                Some(0xFF),
                Some(0x55),
                Some(0xAA),
                Some(0x80),
            ] {
                for scale in [0.0f32, -0.0, 6.0e-8, 1.0, -2.5, 65504.0, -65504.0, f32::NAN] {
                    let mut w = match fill {
                        None => random_blocks(ty, nb, rng.next_u64()),
                        Some(b) => vec![b; nb * ty.type_size()],
                    };
                    for b in w.chunks_exact_mut(ty.type_size()) {
                        // NaN here: a different scale for every block, some negative.
                        let s = if scale.is_nan() {
                            (rng.unit() - 0.5) * [0.01, 3.0, 900.0][(rng.next_u64() % 3) as usize]
                        } else {
                            scale
                        };
                        put_f16(b, f16_fields(ty)[0], s);
                    }
                    for (a, act) in acts.iter().enumerate() {
                        let want = (scalar.vec_dot)(n, &w, act);
                        let got = (fast.vec_dot)(n, &w, act);
                        assert!(
                            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                            "{ty} {}: {nb} blocks, fill {fill:?}, scale {scale}, activation \
                             {a}: {got} vs scalar {want}",
                            fast.face
                        );
                        tested += 1;
                    }
                }
            }
        }
    }
    println!("notice: {tested} low-bit rows compared to the bit");
}

/// The Q1_0 several-rows kernel (x86-64: eight rows in the lanes of one float chain) gives
/// every row its own vec_dot's bits: distinct random rows (a swapped lane would show), row
/// counts below, at and past the group of eight, raw -128/127 activations and random ones.
#[test]
fn q1_0_rows_kernel_gives_each_rows_vec_dot_bits() {
    for (ty, fast, scalar) in simd_kernels() {
        if ty != GgmlType::Q1_0 {
            continue;
        }
        let Some(rows) = fast.rows else { continue };
        for (case, n_blocks, n_rows) in [("one block", 1, 8), ("tail", 3, 19), ("short", 2, 5)] {
            let n = n_blocks * ty.block_size();
            let w = random_blocks(ty, n_blocks * n_rows, 7000 + n_rows as u64);
            let mut rng = XorShift(31 + n_rows as u64);
            let x: Vec<f32> = (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect();
            let q: Vec<i8> = (0..n)
                .map(|i| if i % 3 == 0 { -128 } else { 127 })
                .collect();
            for act in [
                quantize(fast.act_type, &x),
                act_from_quants(fast.act_type, 0.02, &q),
            ] {
                let mut out = vec![f32::NAN; n_rows];
                rows(n, &w, &act, &mut out);
                let row_bytes = w.len() / n_rows;
                for (r, got) in out.iter().enumerate() {
                    let want = (scalar.vec_dot)(n, &w[r * row_bytes..(r + 1) * row_bytes], &act);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "Q1_0 {case}: row {r} of {n_rows} from the {} rows kernel is {got}, \
                         the scalar vec_dot {want}",
                        fast.face
                    );
                }
            }
        }
    }
}
