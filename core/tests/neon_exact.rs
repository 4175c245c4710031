//! The aarch64 NEON kernels (smolrun_kernels::aarch64) against their scalar twins in
//! smolrun_core::quant, on random and edge-case blocks. Built for aarch64 only; on this x86
//! machine tools/test-aarch64.sh runs it under `qemu-aarch64 -cpu cortex-a76` (dotprod) and
//! `-cpu cortex-a53` (no dotprod).
//!
//! What "exact" means per kernel (see the module docs of smolrun_kernels::aarch64):
//! - bit-identical to the scalar twin: every `_neon` face, and the `_dotprod` faces of Q8_0,
//!   Q4_0, Q5_0, Q1_0, Q2_0, TQ1_0, Q4_1, Q5_1 (Q3_K and Q5_K have one ARMv8.0 face, listed
//!   as both);
//! - Q4_K/Q6_K `_dotprod`: the integer sums are exact (checked bit for bit on inputs whose
//!   float arithmetic is exact: power-of-two scales, small integers), and on every other input
//!   the result is within the summation-order bound 2 * gamma(k) * M of the scalar result,
//!   with M the sum of the absolute values of all terms and k the longest chain of roundings.
//!
//! The `_dotprod` faces run only when the CPU reports dotprod; the `_neon` faces run always,
//! so on the A76 both faces are tested. With SMOLRUN_EXPECT_DOTPROD=0/1 (set by the script)
//! the test also checks that feature detection sees the emulated CPU as it is.
#![cfg(target_arch = "aarch64")]

use smolrun_core::quant::{
    iq1_m, iq1_s, iq2_s, iq2_xs, iq2_xxs, iq3_s, iq3_xxs, iq4_nl, iq4_xs, q1_0, q1_0_lut, q2_0,
    q2_0_lut, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0, q8_1, q8_k, tq1_0, tq2_0,
    GgmlType,
};
use smolrun_kernels::aarch64 as neon;

type Dot = unsafe fn(usize, &[u8], &[u8]) -> f32;

struct Kernel {
    name: &'static str,
    weight: GgmlType,
    scalar: fn(usize, &[u8], &[u8]) -> f32,
    neon: Dot,
    dotprod: Dot,
    /// Whether the dotprod face keeps the scalar float order (else: summation-order bound).
    dotprod_bit_exact: bool,
}

const KERNELS: &[Kernel] = &[
    Kernel {
        name: "Q8_0 x Q8_0",
        weight: GgmlType::Q8_0,
        scalar: q8_0::vec_dot,
        neon: neon::vec_dot_q8_0_q8_0_neon,
        dotprod: neon::vec_dot_q8_0_q8_0_dotprod,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "Q4_0 x Q8_0",
        weight: GgmlType::Q4_0,
        scalar: q4_0::vec_dot,
        neon: neon::vec_dot_q4_0_q8_0_neon,
        dotprod: neon::vec_dot_q4_0_q8_0_dotprod,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "Q5_0 x Q8_0",
        weight: GgmlType::Q5_0,
        scalar: q5_0::vec_dot,
        neon: neon::vec_dot_q5_0_q8_0_neon,
        dotprod: neon::vec_dot_q5_0_q8_0_dotprod,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "Q4_K x Q8_K",
        weight: GgmlType::Q4_K,
        scalar: q4_k::vec_dot,
        neon: neon::vec_dot_q4_k_q8_k_neon,
        dotprod: neon::vec_dot_q4_k_q8_k_dotprod,
        dotprod_bit_exact: false,
    },
    Kernel {
        name: "Q6_K x Q8_K",
        weight: GgmlType::Q6_K,
        scalar: q6_k::vec_dot,
        neon: neon::vec_dot_q6_k_q8_k_neon,
        dotprod: neon::vec_dot_q6_k_q8_k_dotprod,
        dotprod_bit_exact: false,
    },
    // Q3_K and Q5_K (#33): one ARMv8.0 face for every core, in the twins' lanes; the dotprod
    // set runs it too (listed as both faces here).
    Kernel {
        name: "Q3_K x Q8_K",
        weight: GgmlType::Q3_K,
        scalar: q3_k::vec_dot,
        neon: neon::vec_dot_q3_k_q8_k_neon,
        dotprod: neon::vec_dot_q3_k_q8_k_neon,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "Q5_K x Q8_K",
        weight: GgmlType::Q5_K,
        scalar: q5_k::vec_dot,
        neon: neon::vec_dot_q5_k_q8_k_neon,
        dotprod: neon::vec_dot_q5_k_q8_k_neon,
        dotprod_bit_exact: true,
    },
    // Q4_1 and Q5_1 (#33): block integers in asm, the twins' float steps in Rust.
    Kernel {
        name: "Q4_1 x Q8_1",
        weight: GgmlType::Q4_1,
        scalar: q4_1::vec_dot,
        neon: neon::vec_dot_q4_1_q8_1_neon,
        dotprod: neon::vec_dot_q4_1_q8_1_dotprod,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "Q5_1 x Q8_1",
        weight: GgmlType::Q5_1,
        scalar: q5_1::vec_dot,
        neon: neon::vec_dot_q5_1_q8_1_neon,
        dotprod: neon::vec_dot_q5_1_q8_1_dotprod,
        dotprod_bit_exact: true,
    },
    // The 2-bit kernels compute the twin's per-block integers and its f32 steps in its order.
    Kernel {
        name: "Q2_K x Q8_K",
        weight: GgmlType::Q2_K,
        scalar: q2_k::vec_dot,
        neon: neon::vec_dot_q2_k_q8_k_neon,
        dotprod: neon::vec_dot_q2_k_q8_k_dotprod,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "TQ2_0 x Q8_K",
        weight: GgmlType::TQ2_0,
        scalar: tq2_0::vec_dot,
        neon: neon::vec_dot_tq2_0_q8_k_neon,
        dotprod: neon::vec_dot_tq2_0_q8_k_dotprod,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "Q1_0 x Q8_0",
        weight: GgmlType::Q1_0,
        scalar: q1_0::vec_dot,
        neon: neon::vec_dot_q1_0_q8_0_neon,
        dotprod: neon::vec_dot_q1_0_q8_0_dotprod,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "Q2_0 x Q8_0",
        weight: GgmlType::Q2_0,
        scalar: q2_0::vec_dot,
        neon: neon::vec_dot_q2_0_q8_0_neon,
        dotprod: neon::vec_dot_q2_0_q8_0_dotprod,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "TQ1_0 x Q8_K",
        weight: GgmlType::TQ1_0,
        scalar: tq1_0::vec_dot,
        neon: neon::vec_dot_tq1_0_q8_k_neon,
        dotprod: neon::vec_dot_tq1_0_q8_k_dotprod,
        dotprod_bit_exact: true,
    },
    // IQ4 (#33): integer sums in asm, the twin's float steps in its order.
    Kernel {
        name: "IQ4_NL x Q8_0",
        weight: GgmlType::IQ4_NL,
        scalar: iq4_nl::vec_dot,
        neon: neon::vec_dot_iq4_nl_q8_0_neon,
        dotprod: neon::vec_dot_iq4_nl_q8_0_dotprod,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "IQ4_XS x Q8_K",
        weight: GgmlType::IQ4_XS,
        scalar: iq4_xs::vec_dot,
        neon: neon::vec_dot_iq4_xs_q8_k_neon,
        dotprod: neon::vec_dot_iq4_xs_q8_k_dotprod,
        dotprod_bit_exact: true,
    },
    // IQ2_XXS (#33): block integers in asm, the twin's float steps in its order.
    Kernel {
        name: "IQ2_XXS x Q8_K",
        weight: GgmlType::IQ2_XXS,
        scalar: iq2_xxs::vec_dot,
        neon: neon::vec_dot_iq2_xxs_q8_k_neon,
        dotprod: neon::vec_dot_iq2_xxs_q8_k_dotprod,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "IQ3_XXS x Q8_K",
        weight: GgmlType::IQ3_XXS,
        scalar: iq3_xxs::vec_dot,
        neon: neon::vec_dot_iq3_xxs_q8_k_neon,
        dotprod: neon::vec_dot_iq3_xxs_q8_k_dotprod,
        dotprod_bit_exact: true,
    },
    // IQ2_XS, IQ2_S, IQ3_S (#33): block integers in asm, the twins' float steps in their order.
    Kernel {
        name: "IQ2_XS x Q8_K",
        weight: GgmlType::IQ2_XS,
        scalar: iq2_xs::vec_dot,
        neon: neon::vec_dot_iq2_xs_q8_k_neon,
        dotprod: neon::vec_dot_iq2_xs_q8_k_dotprod,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "IQ2_S x Q8_K",
        weight: GgmlType::IQ2_S,
        scalar: iq2_s::vec_dot,
        neon: neon::vec_dot_iq2_s_q8_k_neon,
        dotprod: neon::vec_dot_iq2_s_q8_k_dotprod,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "IQ3_S x Q8_K",
        weight: GgmlType::IQ3_S,
        scalar: iq3_s::vec_dot,
        neon: neon::vec_dot_iq3_s_q8_k_neon,
        dotprod: neon::vec_dot_iq3_s_q8_k_dotprod,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "IQ1_S x Q8_K",
        weight: GgmlType::IQ1_S,
        scalar: iq1_s::vec_dot,
        neon: neon::vec_dot_iq1_s_q8_k_neon,
        dotprod: neon::vec_dot_iq1_s_q8_k_dotprod,
        dotprod_bit_exact: true,
    },
    Kernel {
        name: "IQ1_M x Q8_K",
        weight: GgmlType::IQ1_M,
        scalar: iq1_m::vec_dot,
        neon: neon::vec_dot_iq1_m_q8_k_neon,
        dotprod: neon::vec_dot_iq1_m_q8_k_dotprod,
        dotprod_bit_exact: true,
    },
];

/// Block counts per row: one block, odd counts, and a real row length (4096 elements for K).
const BLOCK_COUNTS: &[usize] = &[1, 2, 3, 7, 16];

struct XorShift(u64);

impl XorShift {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn byte(&mut self) -> u8 {
        (self.next_u64() >> 32) as u8
    }
    /// Uniform in [-1, 1).
    fn signed_unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

fn activation_type(weight: GgmlType) -> GgmlType {
    match weight {
        GgmlType::Q4_K
        | GgmlType::Q3_K
        | GgmlType::Q5_K
        | GgmlType::Q6_K
        | GgmlType::Q2_K
        | GgmlType::TQ2_0
        | GgmlType::TQ1_0
        | GgmlType::IQ4_XS
        | GgmlType::IQ2_XXS
        | GgmlType::IQ3_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ3_S
        | GgmlType::IQ1_S
        | GgmlType::IQ1_M => GgmlType::Q8_K,
        GgmlType::Q4_1 | GgmlType::Q5_1 => GgmlType::Q8_1,
        _ => GgmlType::Q8_0,
    }
}

/// Offsets of the f16 scale fields of a weight block.
fn f16_scale_fields(weight: GgmlType) -> &'static [usize] {
    match weight {
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q4_1 | GgmlType::Q5_1 => &[0, 2],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::TQ2_0 => &[64],
        GgmlType::TQ1_0 => &[52],
        GgmlType::IQ1_M => &[SPREAD_D],
        _ => &[0],
    }
}

/// IQ1_M's d in [`f16_scale_fields`]: no field of its own, the top nibbles of its 4 scale
/// words at 48 ([`put_f16`] writes them there).
const SPREAD_D: usize = usize::MAX;

fn put_f16(bytes: &mut [u8], off: usize, v: f32) {
    let bits = half::f16::from_f32(v).to_bits();
    if off == SPREAD_D {
        for k in 0..4 {
            let o = 48 + 2 * k + 1;
            bytes[o] = (bytes[o] & 0x0f) | (((bits >> (4 * k)) & 15) << 4) as u8;
        }
        return;
    }
    bytes[off..off + 2].copy_from_slice(&bits.to_le_bytes());
}

/// How the quant bytes of a weight block are filled (scale fields are set separately).
#[derive(Clone, Copy, Debug)]
enum Quants {
    Random,
    /// Every byte 0x00: the lowest quant (and for K-quants the smallest scales and mins).
    AllZero,
    /// Every byte 0xFF: the highest quant (Q4_K scales and mins 63, Q6_K scales -1; TQ1_0:
    /// every base-3 digit 2, the packed 242).
    AllOnes,
    /// Every byte 0x0F or 0xF0 at random: nibbles at 0 and 15 side by side (Q2_K: scale 15
    /// with min 0 and the reverse; 2-bit codes 0 and 3 in pairs).
    Nibbles,
    /// Every byte 0x55, then 0xAA block by block: alternating bits and 2-bit fields; for TQ1_0
    /// mixed digits.
    Alternating,
    /// Every byte 0x80: TQ1_0's packed 121, every digit 1 (trit 0).
    Middle,
}

/// How the f16 scale fields of a weight block are set.
#[derive(Clone, Copy, Debug)]
enum Scales {
    Moderate,
    Zero,
    /// 65504, the largest finite f16.
    Largest,
    /// 2^-24, the smallest f16 subnormal.
    Subnormal,
    /// Negative and of mixed size, block by block.
    Mixed,
}

fn weight_row(ty: GgmlType, nb: usize, quants: Quants, scales: Scales, seed: u64) -> Vec<u8> {
    let mut rng = XorShift(seed);
    let mut w: Vec<u8> = (0..nb * ty.type_size())
        .map(|i| match quants {
            Quants::Random => rng.byte(),
            Quants::AllZero => 0x00,
            Quants::AllOnes => 0xFF,
            Quants::Nibbles => [0x0F, 0xF0][rng.byte() as usize % 2],
            Quants::Alternating => [0x55, 0xAA][i / ty.type_size() % 2],
            Quants::Middle => 0x80,
        })
        .collect();
    for blk in w.chunks_exact_mut(ty.type_size()) {
        for &off in f16_scale_fields(ty) {
            let v = match scales {
                Scales::Moderate => 0.001 + 0.05 * rng.signed_unit().abs(),
                Scales::Zero => 0.0,
                Scales::Largest => 65504.0,
                Scales::Subnormal => f32::powi(2.0, -24),
                Scales::Mixed => rng.signed_unit() * [0.01, 3.0, 900.0][rng.byte() as usize % 3],
            };
            put_f16(blk, off, v);
        }
    }
    w
}

/// How an activation row is made.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Random f32 values quantized by the reference quantizer (what the engine feeds).
    Quantized,
    /// Random bytes everywhere except a finite scale (quants may be -128; Q8_K bsums random).
    RawBytes,
    /// Every quant -128 (0x80), the extreme no quantizer emits, with matching bsums.
    AllMinus128,
    /// Every quant 127, with matching bsums.
    All127,
}

/// The activation row for `n` weights' elements: `n / ty.block_size()` blocks of `ty` (a Q1_0
/// block of 128 meets four Q8_0 blocks).
fn activation_row(ty: GgmlType, n: usize, act: Act, seed: u64) -> Vec<u8> {
    let mut rng = XorShift(seed ^ 0x9E37_79B9_7F4A_7C15);
    let nb = n / ty.block_size();
    let mut out = vec![0u8; nb * ty.type_size()];
    match act {
        Act::Quantized => {
            let x: Vec<f32> = (0..n).map(|_| rng.signed_unit() * 3.0).collect();
            match ty {
                GgmlType::Q8_K => q8_k::quantize_row(&x, &mut out),
                GgmlType::Q8_1 => q8_1::quantize_row(&x, &mut out),
                _ => q8_0::quantize_row(&x, &mut out),
            }
        }
        Act::RawBytes | Act::AllMinus128 | Act::All127 => {
            let fill = |rng: &mut XorShift| match act {
                Act::AllMinus128 => 0x80,
                Act::All127 => 0x7F,
                _ => rng.byte(),
            };
            for blk in out.chunks_exact_mut(ty.type_size()) {
                if ty == GgmlType::Q8_K {
                    let d = 0.004 + 0.01 * rng.signed_unit().abs();
                    blk[0..4].copy_from_slice(&d.to_le_bytes());
                    for q in &mut blk[q8_k::OFF_QS..q8_k::OFF_BSUMS] {
                        *q = fill(&mut rng);
                    }
                    for j in 0..16 {
                        let sum: i32 = blk[q8_k::OFF_QS + 16 * j..q8_k::OFF_QS + 16 * j + 16]
                            .iter()
                            .map(|&q| q as i8 as i32)
                            .sum();
                        let stored = match act {
                            Act::RawBytes => rng.next_u64() as i16,
                            _ => sum as i16,
                        };
                        let off = q8_k::OFF_BSUMS + 2 * j;
                        blk[off..off + 2].copy_from_slice(&stored.to_le_bytes());
                    }
                } else {
                    put_f16(blk, 0, 0.004 + 0.01 * rng.signed_unit().abs());
                    for q in &mut blk[2..] {
                        *q = fill(&mut rng);
                    }
                }
            }
        }
    }
    out
}

fn dotprod_detected() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

/// Same bits, or both NaN.
fn same_bits(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// The sum of |term| over every term a K-quant dot adds up (f64, exact enough for a bound),
/// and the longest chain of f32 roundings a term goes through in either summation order.
fn k_quant_magnitude(ty: GgmlType, nb: usize, w: &[u8], act: &[u8]) -> (f64, usize) {
    let mut m = 0.0f64;
    for (x, y) in w
        .chunks_exact(ty.type_size())
        .zip(act.chunks_exact(q8_k::BLOCK_BYTES))
    {
        let dy = f32::from_le_bytes(y[0..4].try_into().unwrap()) as f64;
        let q8 = |e: usize| (y[q8_k::OFF_QS + e] as i8 as f64).abs();
        let f16 = |off: usize| half::f16::from_le_bytes([x[off], x[off + 1]]).to_f64();
        match ty {
            GgmlType::Q4_K => {
                let s = &x[4..16];
                let mut sub_sum = 0.0;
                let mut min_sum = 0.0;
                for j in 0..8 {
                    let (sc, mn) = if j < 4 {
                        (s[j] & 63, s[j + 4] & 63)
                    } else {
                        (
                            (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4),
                            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
                        )
                    };
                    for l in 0..32 {
                        let e = 32 * j + l;
                        let byte = x[16 + 32 * (j / 2) + l];
                        let q = if j % 2 == 0 { byte & 0xF } else { byte >> 4 };
                        sub_sum += sc as f64 * q as f64 * q8(e);
                    }
                    let bsum = |i: usize| {
                        i16::from_le_bytes([
                            y[q8_k::OFF_BSUMS + 2 * i],
                            y[q8_k::OFF_BSUMS + 2 * i + 1],
                        ]) as f64
                    };
                    min_sum += mn as f64 * (bsum(2 * j) + bsum(2 * j + 1)).abs();
                }
                m += (f16(0) * dy).abs() * sub_sum + (f16(2) * dy).abs() * min_sum;
            }
            GgmlType::Q6_K => {
                let mut sub_sum = 0.0;
                for e in 0..256 {
                    let (h, quarter, l) = (e / 128, (e % 128) / 32, e % 32);
                    let ql = x[64 * h + l + 32 * (quarter & 1)];
                    let low = (ql >> (4 * (quarter >> 1))) & 0xF;
                    let high = (x[128 + 32 * h + l] >> (2 * quarter)) & 3;
                    let q = (low | (high << 4)) as f64 - 32.0;
                    let sc = x[192 + e / 16] as i8 as f64;
                    sub_sum += (sc * q).abs() * q8(e);
                }
                m += (f16(208) * dy).abs() * sub_sum;
            }
            _ => unreachable!("only K-quants have a summation-order bound"),
        }
    }
    // A term is rounded once as an int->f32 conversion, once as a product, then added along a
    // lane chain of nb steps, into the final sum of 8 lanes, and the Q4_K mins chain of nb.
    (m, 2 * nb + 12)
}

fn gamma(k: usize) -> f64 {
    let u = f64::powi(2.0, -24);
    k as f64 * u / (1.0 - k as f64 * u)
}

/// Every combination of inputs for one kernel; returns how many rows were compared.
fn check_kernel(k: &Kernel, face: &str, dot: Dot, bit_exact: bool) -> usize {
    let act_ty = activation_type(k.weight);
    let mut rows = 0;
    let mut seed = 1u64;
    for &nb in BLOCK_COUNTS {
        let n = nb * k.weight.block_size();
        for quants in [
            Quants::Random,
            Quants::AllZero,
            Quants::AllOnes,
            Quants::Nibbles,
            Quants::Alternating,
            Quants::Middle,
        ] {
            for scales in [
                Scales::Moderate,
                Scales::Zero,
                Scales::Largest,
                Scales::Subnormal,
                Scales::Mixed,
            ] {
                for act in [Act::Quantized, Act::RawBytes, Act::AllMinus128, Act::All127] {
                    seed += 1;
                    let w = weight_row(k.weight, nb, quants, scales, seed);
                    let a = activation_row(act_ty, n, act, seed);
                    let want = (k.scalar)(n, &w, &a);
                    // SAFETY: the dotprod face is only passed in when the CPU has dotprod.
                    let got = unsafe { dot(n, &w, &a) };
                    let case = format!(
                        "{} {face}: {nb} blocks, quants {quants:?}, scales {scales:?}, \
                         activation {act:?}",
                        k.name
                    );
                    if bit_exact {
                        assert!(
                            same_bits(got, want),
                            "{case}: got {got:e} ({:#x}), scalar {want:e} ({:#x})",
                            got.to_bits(),
                            want.to_bits()
                        );
                    } else {
                        let (m, chain) = k_quant_magnitude(k.weight, nb, &w, &a);
                        let bound = 2.0 * gamma(chain) * m;
                        assert!(
                            want.is_finite() && got.is_finite(),
                            "{case}: non-finite result, got {got:e}, scalar {want:e}"
                        );
                        let diff = (got as f64 - want as f64).abs();
                        assert!(
                            diff <= bound,
                            "{case}: got {got:e}, scalar {want:e}, |diff| {diff:e} > bound {bound:e}"
                        );
                    }
                    rows += 1;
                }
            }
        }
    }
    rows
}

/// Inputs on which every f32 operation of a K-quant dot is exact (scales 1 or 2, quants small
/// enough that every partial sum is an integer below 2^24): there a dotprod
/// face must equal the scalar twin bit for bit, which checks its integer sums exactly.
fn check_integer_sums_exact(k: &Kernel, dot: Dot) -> usize {
    let mut rows = 0;
    for (i, &nb) in [1usize, 2, 3, 7].iter().enumerate() {
        for seed in 0..4u64 {
            let seed = 1000 + 10 * i as u64 + seed;
            let w = exact_arithmetic_weights(k.weight, nb, seed);
            let a = exact_arithmetic_activation(k.weight, nb, seed);
            let n = nb * k.weight.block_size();
            let want = (k.scalar)(n, &w, &a);
            // SAFETY: only called when the CPU has dotprod.
            let got = unsafe { dot(n, &w, &a) };
            assert!(
                same_bits(got, want),
                "{} dotprod, exact-arithmetic case ({nb} blocks, seed {seed}): got {got}, scalar {want}",
                k.name
            );
            rows += 1;
        }
    }
    rows
}

/// K-quant weight blocks with random quants and f16 scales of 1 or 2.
fn exact_arithmetic_weights(ty: GgmlType, n_blocks: usize, seed: u64) -> Vec<u8> {
    let mut rng = XorShift(seed ^ 0x5555);
    let mut w = weight_row(ty, n_blocks, Quants::Random, Scales::Zero, seed);
    for blk in w.chunks_exact_mut(ty.type_size()) {
        for &off in f16_scale_fields(ty) {
            put_f16(blk, off, [1.0, 2.0][rng.byte() as usize % 2]);
        }
    }
    w
}

/// A Q8_K row with scale 1 and quants small enough that every partial sum of a dot with up to
/// 7 super-blocks of `weight` (scales 1 or 2) is an integer below 2^24: for Q4_K at most
/// 7 * 2 * 256 * 63 * 15 * 4 (+ the mins), for Q6_K 7 * 2 * 256 * 128 * 32 * 1.
fn exact_arithmetic_activation(weight: GgmlType, nb: usize, seed: u64) -> Vec<u8> {
    let limit: i32 = match weight {
        GgmlType::Q4_K => 4,
        _ => 1,
    };
    let mut rng = XorShift(seed ^ 0xAAAA);
    let mut a = vec![0u8; nb * q8_k::BLOCK_BYTES];
    for blk in a.chunks_exact_mut(q8_k::BLOCK_BYTES) {
        blk[0..4].copy_from_slice(&1.0f32.to_le_bytes());
        for j in 0..16 {
            let mut sum = 0i32;
            for l in 0..16 {
                let q = (rng.next_u64() % (2 * limit as u64 + 1)) as i32 - limit;
                blk[q8_k::OFF_QS + 16 * j + l] = q as i8 as u8;
                sum += q;
            }
            let off = q8_k::OFF_BSUMS + 2 * j;
            blk[off..off + 2].copy_from_slice(&(sum as i16).to_le_bytes());
        }
    }
    a
}

type X4Bytes = fn(usize, usize) -> Option<usize>;
type X4Repack = fn(&[u8], usize, usize, &mut [u8]) -> Option<()>;
type X4Matvec = unsafe fn(usize, &[u8], &[u8], &mut [f32]);

/// A row-interleaved (x4) matvec: size, repack, kernel, and whether it keeps the scalar
/// twin's float order (else the summation-order bound of the K-quants applies).
struct Interleaved {
    weight: GgmlType,
    bytes: X4Bytes,
    repack: X4Repack,
    matvec: X4Matvec,
    scalar: fn(usize, &[u8], &[u8]) -> f32,
    bit_exact: bool,
}

const INTERLEAVED: &[Interleaved] = &[
    Interleaved {
        weight: GgmlType::Q4_K,
        bytes: neon::q4_k_x4_bytes,
        repack: neon::repack_q4_k_x4,
        matvec: neon::matvec_q4_k_x4_dotprod,
        scalar: q4_k::vec_dot,
        bit_exact: false,
    },
    Interleaved {
        weight: GgmlType::Q8_0,
        bytes: neon::q8_0_x4_bytes,
        repack: neon::repack_q8_0_x4,
        matvec: neon::matvec_q8_0_x4_dotprod,
        scalar: q8_0::vec_dot,
        bit_exact: true,
    },
    Interleaved {
        weight: GgmlType::Q5_0,
        bytes: neon::q5_0_x4_bytes,
        repack: neon::repack_q5_0_x4,
        matvec: neon::matvec_q5_0_x4_dotprod,
        scalar: q5_0::vec_dot,
        bit_exact: true,
    },
];

/// The 4-row interleaved matvecs (dotprod): every row, in full groups and in the tail, against
/// its scalar dot: bit for bit where the float order is kept, else within the summation-order
/// bound and bit for bit on exact-arithmetic rows.
#[test]
fn interleaved_rows_match_scalar() {
    assert_eq!(
        neon::q4_k_x4_bytes(5, 512),
        Some(4 * 2 * 144 + 2 * 144 + 2 * 16)
    );
    assert_eq!(neon::q4_k_x4_bytes(4, 100), None);
    assert_eq!(neon::q8_0_x4_bytes(6, 64), Some(6 * 2 * 34));
    assert_eq!(neon::q5_0_x4_bytes(3, 32), Some(3 * 22));
    let mut short = vec![0u8; 10];
    assert!(neon::repack_q4_k_x4(&[0u8; 144], 1, 256, &mut short).is_none());
    assert!(neon::repack_q8_0_x4(&[0u8; 34 * 4], 4, 32, &mut short).is_none());
    if !dotprod_detected() {
        println!("neon_exact: interleaved x4 matvecs not run: this CPU has no dotprod");
        return;
    }
    for x4 in INTERLEAVED {
        let ty = x4.weight;
        let act_ty = activation_type(ty);
        let blocks: &[usize] = if ty.block_size() == 256 {
            &[1, 2, 7]
        } else {
            &[1, 2, 7, 64]
        };
        let mut rows = 0;
        let mut exact_rows = 0;
        let mut seed = 5000u64;
        for &n_rows in &[1usize, 3, 4, 5, 8, 11] {
            for &nb in blocks {
                for case in 0..5 {
                    seed += 1;
                    let n = nb * ty.block_size();
                    let exact_case = case == 4 && !x4.bit_exact;
                    let (w, a) = match case {
                        0 => (
                            weight_row(ty, n_rows * nb, Quants::Random, Scales::Moderate, seed),
                            activation_row(act_ty, n, Act::Quantized, seed),
                        ),
                        1 => (
                            weight_row(ty, n_rows * nb, Quants::AllOnes, Scales::Mixed, seed),
                            activation_row(act_ty, n, Act::AllMinus128, seed),
                        ),
                        2 => (
                            weight_row(ty, n_rows * nb, Quants::Random, Scales::Largest, seed),
                            activation_row(act_ty, n, Act::RawBytes, seed),
                        ),
                        3 => (
                            weight_row(ty, n_rows * nb, Quants::AllZero, Scales::Subnormal, seed),
                            activation_row(act_ty, n, Act::All127, seed),
                        ),
                        _ if exact_case => (
                            exact_arithmetic_weights(ty, n_rows * nb, seed),
                            exact_arithmetic_activation(ty, nb, seed),
                        ),
                        _ => (
                            weight_row(ty, n_rows * nb, Quants::Random, Scales::Mixed, seed),
                            activation_row(act_ty, n, Act::RawBytes, seed),
                        ),
                    };
                    let mut packed = vec![0u8; (x4.bytes)(n_rows, n).unwrap()];
                    (x4.repack)(&w, n_rows, n, &mut packed).unwrap();
                    let mut out = vec![f32::NAN; n_rows];
                    // SAFETY: the CPU has dotprod (checked above).
                    unsafe { (x4.matvec)(n, &packed, &a, &mut out) };
                    let row_bytes = nb * ty.type_size();
                    for (r, (got, row)) in out.iter().zip(w.chunks_exact(row_bytes)).enumerate() {
                        let want = (x4.scalar)(n, row, &a);
                        let what =
                            format!("{ty} x4: {n_rows} rows, {nb} blocks, case {case}, row {r}");
                        if x4.bit_exact || exact_case {
                            assert!(same_bits(*got, want), "{what}: got {got}, scalar {want}");
                            exact_rows += 1;
                        } else {
                            let (m, chain) = k_quant_magnitude(ty, nb, row, &a);
                            let bound = 2.0 * gamma(chain) * m;
                            let diff = (*got as f64 - want as f64).abs();
                            assert!(
                                diff <= bound,
                                "{what}: got {got}, scalar {want}, |diff| {diff:e} > {bound:e}"
                            );
                        }
                        rows += 1;
                    }
                }
            }
        }
        println!(
            "neon_exact: {ty} x4 interleaved dotprod: {exact_rows} of {rows} rows (groups of 4 \
             and tails) bit-exact, the others within the summation-order bound"
        );
    }
}

/// A lookup-table matvec (ARMv8.0) with its scalar layout, table builder and dot.
struct TableKernel {
    weight: GgmlType,
    bytes: fn(usize, usize) -> Option<usize>,
    repack: fn(&[u8], usize, usize, &mut [u8]) -> Option<()>,
    table_bytes: fn(usize) -> Option<usize>,
    build_scalar: fn(&[u8], &mut [u8]),
    build_neon: fn(&[u8], &mut [u8]),
    matvec_neon: fn(usize, &[u8], &[u8], &mut [f32]),
    scalar: fn(usize, &[u8], &[u8]) -> f32,
}

const TABLE_KERNELS: &[TableKernel] = &[
    TableKernel {
        weight: GgmlType::Q1_0,
        bytes: q1_0_lut::bytes,
        repack: q1_0_lut::repack,
        table_bytes: q1_0_lut::table_bytes,
        build_scalar: q1_0_lut::build_table,
        build_neon: neon::build_table_q1_0_lut_neon,
        matvec_neon: neon::matvec_q1_0_lut16_neon,
        scalar: q1_0::vec_dot,
    },
    TableKernel {
        weight: GgmlType::Q2_0,
        bytes: q2_0_lut::bytes,
        repack: q2_0_lut::repack,
        table_bytes: q2_0_lut::table_bytes,
        build_scalar: q2_0_lut::build_table,
        build_neon: neon::build_table_q2_0_lut_neon,
        matvec_neon: neon::matvec_q2_0_lut16_neon,
        scalar: q2_0::vec_dot,
    },
];

/// The Q1_0 and Q2_0 lookup-table matvecs (ARMv8.0, run on every aarch64 CPU): their tables
/// are the scalar builders' bytes, and every row, in full 16-row groups and in the padded last
/// group, over one and several column tiles, is bit for bit the scalar `vec_dot`: random codes
/// and all-set / all-clear / alternating / nibble patterns under moderate, largest, subnormal,
/// zero and mixed scales, against quantized activations, raw bytes, all -128 and all 127 (the
/// extremes of the table sums).
#[test]
fn lut_rows_match_scalar() {
    assert_eq!(neon::LUT_GROUP_ROWS, q1_0_lut::GROUP_ROWS);
    assert_eq!(neon::LUT_GROUP_BLOCK_BYTES, q1_0_lut::GROUP_BLOCK_BYTES);
    assert_eq!(neon::LUT_TABLE_BLOCK_BYTES, q1_0_lut::TABLE_BLOCK_BYTES);
    assert_eq!(neon::LUT2_TABLE_BLOCK_BYTES, q2_0_lut::TABLE_BLOCK_BYTES);
    for k in TABLE_KERNELS {
        let ty = k.weight;
        let bs = ty.block_size();
        let mut seed = 7000u64;
        let mut rows = 0;
        // 35 blocks: three column tiles, the last one short.
        const { assert!(35 > 2 * neon::LUT_TILE_BLOCKS) };
        for &n_rows in &[1usize, 5, 15, 16, 17, 33, 48, 67] {
            for &nb in &[1usize, 2, 5, 35] {
                for case in 0..6 {
                    seed += 1;
                    let n = nb * bs;
                    let (quants, scales, act) = match case {
                        0 => (Quants::Random, Scales::Moderate, Act::Quantized),
                        1 => (Quants::AllOnes, Scales::Mixed, Act::AllMinus128),
                        2 => (Quants::AllZero, Scales::Largest, Act::AllMinus128),
                        3 => (Quants::Random, Scales::Subnormal, Act::All127),
                        4 => (Quants::Alternating, Scales::Zero, Act::RawBytes),
                        _ => (Quants::Nibbles, Scales::Mixed, Act::RawBytes),
                    };
                    let w = weight_row(ty, n_rows * nb, quants, scales, seed);
                    let a = activation_row(GgmlType::Q8_0, n, act, seed);
                    let mut packed = vec![0u8; (k.bytes)(n_rows, n).unwrap()];
                    (k.repack)(&w, n_rows, n, &mut packed).unwrap();
                    let mut table = vec![0xAAu8; (k.table_bytes)(n).unwrap()];
                    (k.build_neon)(&a, &mut table);
                    let mut want_table = vec![0x55u8; table.len()];
                    (k.build_scalar)(&a, &mut want_table);
                    let what = format!("{ty} lut: {n_rows} rows, {nb} blocks, case {case}");
                    assert!(table == want_table, "{what}: the tables differ");
                    let mut out = vec![f32::NAN; n_rows];
                    (k.matvec_neon)(n, &packed, &table, &mut out);
                    let row_bytes = nb * ty.type_size();
                    for (r, (got, row)) in out.iter().zip(w.chunks_exact(row_bytes)).enumerate() {
                        let want = (k.scalar)(n, row, &a);
                        assert!(
                            same_bits(*got, want),
                            "{what}, row {r}: got {got}, scalar {want}"
                        );
                        rows += 1;
                    }
                    // A chunk of whole groups (as the workers get them) gives the same rows.
                    if n_rows > 16 {
                        let mut tail = vec![f32::NAN; n_rows - 16];
                        let group = (k.bytes)(16, n).unwrap();
                        (k.matvec_neon)(n, &packed[group..], &table, &mut tail);
                        let same = tail.iter().zip(&out[16..]).all(|(a, b)| same_bits(*a, *b));
                        assert!(same, "{what}: a chunk from row 16 differs");
                    }
                }
            }
        }
        // Short inputs: rows the packed bytes lack get 0, and a table shorter than the row
        // holds the blocks both hold, never a read or write past the slices.
        let n = 4 * bs;
        let w = weight_row(ty, 4 * 20, Quants::Random, Scales::Moderate, 1);
        let a = activation_row(GgmlType::Q8_0, n, Act::Quantized, 2);
        let mut packed = vec![0u8; (k.bytes)(20, n).unwrap()];
        (k.repack)(&w, 20, n, &mut packed).unwrap();
        let mut table = vec![0u8; (k.table_bytes)(n).unwrap()];
        (k.build_neon)(&a, &mut table);
        let mut out = vec![f32::NAN; 20];
        (k.matvec_neon)(n, &packed[..(k.bytes)(16, n).unwrap()], &table, &mut out);
        assert!(out[16..].iter().all(|&y| y == 0.0));
        let mut short_table = vec![0u8; (k.table_bytes)(bs).unwrap()];
        (k.build_neon)(&a, &mut short_table);
        let mut want = vec![0u8; short_table.len()];
        (k.build_scalar)(&a[..bs / 32 * 34], &mut want);
        assert_eq!(short_table, want);
        println!("neon_exact: {ty} lut16 (ARMv8.0) bit-exact on {rows} rows, tables byte-exact");
    }
}

#[test]
fn feature_detection_sees_the_emulated_cpu() {
    let detected = dotprod_detected();
    match std::env::var("SMOLRUN_EXPECT_DOTPROD").as_deref() {
        Ok("1") => assert!(detected, "the CPU should report dotprod but does not"),
        Ok("0") => assert!(!detected, "the CPU should not report dotprod but does"),
        _ => println!("neon_exact: dotprod detected: {detected} (SMOLRUN_EXPECT_DOTPROD unset)"),
    }
}

#[test]
fn neon_faces_match_scalar() {
    for k in KERNELS {
        let rows = check_kernel(k, "neon", k.neon, true);
        println!(
            "neon_exact: {:<12} neon    bit-exact on {rows} rows",
            k.name
        );
    }
}

#[test]
fn dotprod_faces_match_scalar() {
    if !dotprod_detected() {
        println!("neon_exact: dotprod faces not run: this CPU has no dotprod (sdot would SIGILL)");
        return;
    }
    for k in KERNELS {
        let rows = check_kernel(k, "dotprod", k.dotprod, k.dotprod_bit_exact);
        if k.dotprod_bit_exact {
            println!(
                "neon_exact: {:<12} dotprod bit-exact on {rows} rows",
                k.name
            );
        } else {
            let exact = check_integer_sums_exact(k, k.dotprod);
            println!(
                "neon_exact: {:<12} dotprod within the summation-order bound on {rows} rows, \
                 bit-exact on {exact} exact-arithmetic rows",
                k.name
            );
        }
    }
}

/// Rows straight from a mapped file sit at any alignment: every kernel gives the same bits for
/// rows that start 1, 2 or 3 bytes past an aligned address.
#[test]
fn unaligned_rows_give_the_same_result() {
    for k in KERNELS {
        let act_ty = activation_type(k.weight);
        let w = weight_row(k.weight, 3, Quants::Random, Scales::Moderate, 11);
        let a = activation_row(act_ty, 3 * k.weight.block_size(), Act::Quantized, 11);
        let n = 3 * k.weight.block_size();
        let mut faces: Vec<(&str, Dot)> = vec![("neon", k.neon)];
        if dotprod_detected() {
            faces.push(("dotprod", k.dotprod));
        }
        for (face, dot) in faces {
            // SAFETY: the dotprod face is only in the list when the CPU has dotprod.
            let aligned = unsafe { dot(n, &w, &a) };
            for shift in 1..4 {
                let mut wbuf = vec![0u8; w.len() + shift];
                let mut abuf = vec![0u8; a.len() + 4 - shift];
                wbuf[shift..].copy_from_slice(&w);
                abuf[4 - shift..].copy_from_slice(&a);
                // SAFETY: as above.
                let got = unsafe { dot(n, &wbuf[shift..], &abuf[4 - shift..]) };
                assert!(
                    same_bits(got, aligned),
                    "{} {face}: shift {shift}: {got} vs {aligned}",
                    k.name
                );
            }
        }
    }
}

/// The kernels read whole blocks only, never past the shorter of the two rows or `n`.
#[test]
fn short_rows_are_cut_to_whole_blocks() {
    for k in KERNELS {
        let act_ty = activation_type(k.weight);
        let w = weight_row(k.weight, 3, Quants::Random, Scales::Moderate, 7);
        let bs = k.weight.block_size();
        let a = activation_row(act_ty, 3 * bs, Act::Quantized, 7);
        // Bytes of activation that meet one weight block.
        let act_bytes = act_ty.type_size() * bs / act_ty.block_size();
        let want = (k.scalar)(2 * bs, &w[..2 * k.weight.type_size()], &a[..2 * act_bytes]);
        let mut faces: Vec<(&str, Dot)> = vec![("neon", k.neon)];
        if dotprod_detected() {
            faces.push(("dotprod", k.dotprod));
        }
        for (face, dot) in faces {
            // SAFETY: the dotprod face is only in the list when the CPU has dotprod.
            let (short_w, short_a, short_n) = unsafe {
                (
                    dot(3 * bs, &w[..2 * k.weight.type_size() + 5], &a),
                    dot(3 * bs, &w, &a[..2 * act_bytes + 1]),
                    dot(2 * bs + 7, &w, &a),
                )
            };
            for (what, got) in [
                ("weights", short_w),
                ("activations", short_a),
                ("n", short_n),
            ] {
                let close = (got - want).abs() <= 1e-5 * want.abs().max(1.0);
                assert!(
                    close,
                    "{} {face}: short {what}: got {got}, 2-block scalar {want}",
                    k.name
                );
            }
            // SAFETY: as above.
            assert_eq!(unsafe { dot(0, &w, &a) }, 0.0, "{} {face}: n = 0", k.name);
        }
    }
}

/// Row lengths for the float kernels: empty, shorter than one trip of 8, trips plus tails.
const FLOAT_LENGTHS: &[usize] = &[0, 1, 7, 8, 9, 63, 64, 1000, 4099];

/// F32/F16 rows whose products are multiples of 2^-12 below 2^20: every f64 sum of them is
/// exact, so the kernels (8 f64 lanes) must equal the scalar twins (one f64 chain) bit for bit.
#[test]
fn float_dots_match_scalar_bit_for_bit_when_sums_are_exact() {
    let mut rng = XorShift(77);
    for &n in FLOAT_LENGTHS {
        let mut grid = |_| (rng.next_u64() % 4097) as f32 / 64.0 - 32.0;
        let (wf, af): (Vec<f32>, Vec<f32>) = (
            (0..n).map(&mut grid).collect(),
            (0..n).map(&mut grid).collect(),
        );
        let (mut w32, mut a32) = (vec![0u8; 4 * n], vec![0u8; 4 * n]);
        smolrun_core::quant::f32::quantize_row(&wf, &mut w32);
        smolrun_core::quant::f32::quantize_row(&af, &mut a32);
        let (mut w16, mut a16) = (vec![0u8; 2 * n], vec![0u8; 2 * n]);
        smolrun_core::quant::f16::quantize_row(&wf, &mut w16);
        smolrun_core::quant::f16::quantize_row(&af, &mut a16);
        let (want, got) = (
            smolrun_core::quant::f32::vec_dot(n, &w32, &a32),
            neon::vec_dot_f32_neon(n, &w32, &a32),
        );
        assert!(
            same_bits(got, want),
            "F32 x F32, n {n}: got {got}, scalar {want}"
        );
        let (want, got) = (
            smolrun_core::quant::f16::vec_dot(n, &w16, &a16),
            neon::vec_dot_f16_neon(n, &w16, &a16),
        );
        assert!(
            same_bits(got, want),
            "F16 x F16, n {n}: got {got}, scalar {want}"
        );
    }
    println!(
        "neon_exact: F32 x F32, F16 x F16 neon bit-exact on {} exact-sum rows each",
        FLOAT_LENGTHS.len()
    );
}

type Quantize = fn(&[f32], &mut [u8]);
type FloatDot = fn(usize, &[u8], &[u8]) -> f32;

/// Random rows spanning 2^-14..2^9 (and rows with an infinity): within one f32 ulp plus the
/// f64 reassociation bound of the scalar result, non-finite results alike.
#[test]
fn float_dots_match_scalar_within_one_ulp() {
    let mut rng = XorShift(99);
    let mut rows = 0;
    for &n in FLOAT_LENGTHS {
        for case in 0..4 {
            let mut value = |i: usize| {
                let v = rng.signed_unit() * f32::powi(2.0, (rng.next_u64() % 24) as i32 - 14);
                if case == 3 && i == n / 2 {
                    f32::INFINITY
                } else {
                    v
                }
            };
            let wf: Vec<f32> = (0..n).map(&mut value).collect();
            let af: Vec<f32> = (0..n).map(&mut value).collect();
            for half in [false, true] {
                let (size, quantize, scalar, kernel): (usize, Quantize, FloatDot, FloatDot) =
                    if half {
                        (
                            2,
                            smolrun_core::quant::f16::quantize_row,
                            smolrun_core::quant::f16::vec_dot,
                            neon::vec_dot_f16_neon,
                        )
                    } else {
                        (
                            4,
                            smolrun_core::quant::f32::quantize_row,
                            smolrun_core::quant::f32::vec_dot,
                            neon::vec_dot_f32_neon,
                        )
                    };
                let (mut w, mut a) = (vec![0u8; size * n], vec![0u8; size * n]);
                quantize(&wf, &mut w);
                quantize(&af, &mut a);
                let (want, got) = (scalar(n, &w, &a), kernel(n, &w, &a));
                let name = if half { "F16 x F16" } else { "F32 x F32" };
                if !want.is_finite() || !got.is_finite() {
                    assert!(
                        same_bits(got, want),
                        "{name}, n {n}, case {case}: got {got}, scalar {want}"
                    );
                    continue;
                }
                let magnitude: f64 = wf.iter().zip(&af).map(|(x, y)| (x * y).abs() as f64).sum();
                let u53 = f64::powi(2.0, -53);
                let ulp = f32::from_bits(want.abs().to_bits() + 1) as f64 - want.abs() as f64;
                let bound = ulp + 2.0 * (n as f64 * u53) * magnitude * 2.0;
                let diff = (got as f64 - want as f64).abs();
                assert!(diff <= bound, "{name}, n {n}, case {case}: got {got}, scalar {want}, |diff| {diff:e} > {bound:e}");
                rows += 1;
            }
        }
    }
    println!("neon_exact: F32 x F32, F16 x F16 neon within one ulp on {rows} random rows");
}
