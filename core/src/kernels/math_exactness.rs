//! The installed faces of `math`'s attention and SwiGLU (each architecture installs its own with
//! its weight kernels) against the scalar `math::attention_head` and `math::swiglu`, to the bit.

use super::*;
use crate::math::{AttentionHeadFn, AttentionKernel, AttentionSpan, KvHead};
use crate::quant::testutil::XorShift;
use alloc::vec;
use alloc::vec::Vec;
use half::f16;
use std::println;

/// Special f16 bit patterns: zeros, the smallest and largest subnormals, the smallest
/// normal, one, the largest finite values (65504) and their neighbours.
const SPECIAL_F16: [u16; 12] = [
    0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x3C00, 0x7BFF, 0xFBFF, 0x7BFE, 0x3BFF,
];

/// A cache of `n_pos` positions, `n_head_kv` heads of `dim` f16 each, values of about
/// `magnitude`, with one in `special_every` replaced by a special bit pattern (0: none).
fn random_cache(rng: &mut XorShift, n: usize, magnitude: f32, special_every: u64) -> Vec<u16> {
    (0..n)
        .map(|_| {
            let r = rng.next_u64();
            if special_every != 0 && r.is_multiple_of(special_every) {
                SPECIAL_F16[(r >> 32) as usize % SPECIAL_F16.len()]
            } else {
                f16::from_f32((rng.unit() * 2.0 - 1.0) * magnitude).to_bits()
            }
        })
        .collect()
}

struct Case {
    head_dim: usize,
    head_dim_v: usize,
    n_head_kv: usize,
    head: usize,
    span: AttentionSpan,
    scale: f32,
    softcap: Option<f32>,
    key_magnitude: f32,
    value_magnitude: f32,
    special_every: u64,
    query_magnitude: f32,
}

/// Runs `case` through the scalar code and `face` with both kernels; returns how many
/// outputs were compared. Panics on the first differing bit.
fn check(face: AttentionHeadFn, rng: &mut XorShift, c: &Case) -> usize {
    let n_pos = c.span.pos + 1;
    let keys = random_cache(
        rng,
        n_pos * c.n_head_kv * c.head_dim,
        c.key_magnitude,
        c.special_every,
    );
    let values = random_cache(
        rng,
        n_pos * c.n_head_kv * c.head_dim_v,
        c.value_magnitude,
        c.special_every,
    );
    let q_raw: Vec<f32> = (0..c.head_dim)
        .map(|_| (rng.unit() * 2.0 - 1.0) * c.query_magnitude)
        .collect();
    let kv = KvHead {
        key_cache: &keys,
        value_cache: &values,
        head: c.head,
        n_head_kv: c.n_head_kv,
        head_dim: c.head_dim,
        head_dim_v: c.head_dim_v,
    };
    let mut compared = 0;
    for kernel in [AttentionKernel::F32, AttentionKernel::F16Accumulator] {
        // The model rounds the query to f16 for the f16 kernel; the f32 kernel gets it raw.
        let q: Vec<f32> = match kernel {
            AttentionKernel::F32 => q_raw.clone(),
            AttentionKernel::F16Accumulator => {
                q_raw.iter().map(|&v| f16::from_f32(v).to_f32()).collect()
            }
        };
        let mut want = vec![f32::NAN; c.head_dim_v];
        let mut got = vec![f32::NAN; c.head_dim_v];
        let mut want_scores = vec![0f32; n_pos + 3];
        let mut got_scores = vec![0f32; n_pos + 3];
        math::attention_head(
            &mut want,
            &q,
            &kv,
            &mut want_scores,
            c.span,
            c.scale,
            c.softcap,
            kernel,
        );
        face(
            &mut got,
            &q,
            &kv,
            &mut got_scores,
            c.span,
            c.scale,
            c.softcap,
            kernel,
        );
        for (d, (w, g)) in want.iter().zip(&got).enumerate() {
            assert_eq!(
                w.to_bits(),
                g.to_bits(),
                "{kernel:?} head_dim {} / {} pos {} window {:?} softcap {:?} scale {} \
                 magnitudes k {} v {} q {}: out[{d}] scalar {w} ({:#x}), face {g} ({:#x})",
                c.head_dim,
                c.head_dim_v,
                c.span.pos,
                c.span.window,
                c.softcap,
                c.scale,
                c.key_magnitude,
                c.value_magnitude,
                c.query_magnitude,
                w.to_bits(),
                g.to_bits()
            );
        }
        compared += want.len();
    }
    compared
}

fn installed_face() -> (AttentionHeadFn, &'static str) {
    let set = KernelSet::select(&tests_features());
    (set.attention().head, set.name())
}

/// The feature sets whose kernel sets this CPU can run: the AVX2 one and, where the CPU has
/// it, the AVX-512 one on top (their attention faces differ).
fn feature_sets() -> Vec<CpuFeatures> {
    #[allow(unused_mut)]
    let mut sets = vec![tests_features()];
    #[cfg(target_arch = "x86_64")]
    {
        let mut f = tests_features();
        f.avx512f = std::arch::is_x86_feature_detected!("avx512f");
        f.avx512bw = std::arch::is_x86_feature_detected!("avx512bw");
        f.avx512vnni = std::arch::is_x86_feature_detected!("avx512vnni");
        if f.avx512f && f.avx512bw && f.avx512vnni {
            sets.push(f);
        }
    }
    sets
}

fn tests_features() -> CpuFeatures {
    #[allow(unused_mut)]
    let mut f = CpuFeatures::default();
    #[cfg(target_arch = "x86_64")]
    {
        f.avx2 = std::arch::is_x86_feature_detected!("avx2");
        f.fma = std::arch::is_x86_feature_detected!("fma");
        f.f16c = std::arch::is_x86_feature_detected!("f16c");
    }
    #[cfg(target_arch = "aarch64")]
    {
        f.neon = std::arch::is_aarch64_feature_detected!("neon");
    }
    f
}

#[test]
fn attention_face_matches_scalar_on_random_heads() {
    let (face, name) = installed_face();
    let mut rng = XorShift(0x5eed_a77e);
    let mut compared = 0;
    let dims = [64, 128, 256, 1, 7, 8, 40, 72, 100, 200, 17];
    for (t, &head_dim) in dims.iter().enumerate() {
        for round in 0..6usize {
            let pos = match round {
                0 => 0,
                1 => 1,
                2 => 7,
                3 => 8,
                _ => rng.next_u64() as usize % 300,
            };
            let window = match (round + t) % 3 {
                0 => None,
                1 => Some(1 + rng.next_u64() as usize % 40),
                _ => Some(pos + 5),
            };
            let n_head_kv = 1 + round % 3;
            let case = Case {
                head_dim,
                head_dim_v: if round == 5 { head_dim + 9 } else { head_dim },
                n_head_kv,
                head: rng.next_u64() as usize % n_head_kv,
                span: AttentionSpan {
                    pos,
                    window,
                    skip_below: None,
                },
                scale: [1.0 / libm::sqrtf(head_dim as f32), 1.0, 0.0625][round % 3],
                softcap: if t % 2 == 0 { None } else { Some(50.0) },
                key_magnitude: 2.0,
                value_magnitude: 3.0,
                special_every: 0,
                query_magnitude: 4.0,
            };
            compared += check(face, &mut rng, &case);
        }
    }
    println!("attention ({name}): {compared} outputs equal to the scalar code's bits");
}

#[test]
fn attention_face_matches_scalar_on_edge_values() {
    let (face, name) = installed_face();
    let mut rng = XorShift(0xed9e_5eed);
    let mut compared = 0;
    // (key, value, query magnitudes, scale, softcap): huge scores (exp underflows to 0
    // for all but the maximum), tiny ones, values near f16's 65504 (the accumulator
    // overflows to inf), subnormal values and keys, a softcap that saturates.
    let regimes: [(f32, f32, f32, f32, Option<f32>); 8] = [
        (60000.0, 1.0, 60000.0, 1.0, None),
        (100.0, 1.0, 100.0, 8.0, None),
        (1e-3, 1.0, 1e-3, 1e-3, None),
        (1.0, 65504.0, 1.0, 0.1, None),
        (1.0, 6e-5, 1.0, 0.5, None),
        (6e-5, 6e-5, 1e-3, 1.0, None),
        (50.0, 2.0, 50.0, 1.0, Some(30.0)),
        (2.0, 60000.0, 8.0, 0.125, Some(1.0)),
    ];
    for (r, &(km, vm, qm, scale, softcap)) in regimes.iter().enumerate() {
        for &head_dim in &[64, 256, 100, 3] {
            for special_every in [0, 5] {
                let pos = 1 + rng.next_u64() as usize % 150;
                let case = Case {
                    head_dim,
                    head_dim_v: head_dim,
                    n_head_kv: 2,
                    head: r % 2,
                    span: AttentionSpan {
                        pos,
                        window: if r % 3 == 0 { Some(33) } else { None },
                        skip_below: None,
                    },
                    scale,
                    softcap,
                    key_magnitude: km,
                    value_magnitude: vm,
                    special_every,
                    query_magnitude: qm,
                };
                compared += check(face, &mut rng, &case);
            }
        }
    }
    println!("attention edge cases ({name}): {compared} outputs equal to the scalar bits");
}

/// Grouped-query attention (decoding): the installed group face gives every query head of a KV
/// head what the scalar `math::attention_head` gives it alone, to the bit, with spans across
/// several of its key blocks, windows, softcaps, both kernels, and more heads than it keeps
/// at once.
#[test]
fn attention_group_face_matches_scalar_per_head() {
    for features in feature_sets() {
        let set = KernelSet::select(&features);
        attention_group_face_matches_scalar(set.attention().group, set.name());
    }
}

fn attention_group_face_matches_scalar(group_face: math::AttentionGroupFn, name: &str) {
    let mut rng = XorShift(0x6a0_5eed);
    let mut compared = 0;
    let block = math::ATTENTION_BLOCK;
    // (head_dim, head_dim_v, query heads per KV head, position, window, softcap)
    type GroupCase = (usize, usize, usize, usize, Option<usize>, Option<f32>);
    let cases: [GroupCase; 9] = [
        (64, 64, 1, 0, None, None),
        (256, 256, 4, 3 * block + 17, None, None),
        (64, 64, 7, 2 * block, None, None),
        (128, 128, 2, block - 1, Some(40), None),
        (100, 109, 3, block + 1, None, Some(30.0)),
        (256, 256, 4, 5 * block + 60, Some(2 * block + 3), None),
        (64, 64, 17, block + 5, None, None),
        (8, 8, 16, 700, Some(500), Some(50.0)),
        (40, 40, 5, 9, None, None),
    ];
    // (key, value, query magnitudes, scale factor): ordinary values; huge scores (every
    // exponential but the maximum's underflows to 0); values near f16's 65504 (the
    // accumulator overflows to inf); subnormal keys and values.
    let regimes: [(f32, f32, f32, f32); 4] = [
        (2.0, 3.0, 4.0, 1.0),
        (60000.0, 1.0, 60000.0, 16.0),
        (1.0, 65504.0, 1.0, 0.1),
        (6e-5, 6e-5, 1e-3, 1.0),
    ];
    let all = cases
        .iter()
        .flat_map(|c| (0..regimes.len()).map(move |r| (r, c)));
    for (r, &(head_dim, head_dim_v, g, pos, window, softcap)) in all {
        let (key_mag, value_mag, q_mag, scale_factor) = regimes[r];
        let n_head_kv = 2;
        let n_pos = pos + 1;
        let keys = random_cache(&mut rng, n_pos * n_head_kv * head_dim, key_mag, 97);
        let values = random_cache(&mut rng, n_pos * n_head_kv * head_dim_v, value_mag, 89);
        let kv = KvHead {
            key_cache: &keys,
            value_cache: &values,
            head: 1,
            n_head_kv,
            head_dim,
            head_dim_v,
        };
        let span = AttentionSpan {
            pos,
            window,
            skip_below: None,
        };
        let scale = scale_factor / libm::sqrtf(head_dim as f32);
        for kernel in [AttentionKernel::F32, AttentionKernel::F16Accumulator] {
            let qs: Vec<f32> = (0..g * head_dim)
                .map(|_| (rng.unit() * 2.0 - 1.0) * q_mag)
                .map(|v| match kernel {
                    AttentionKernel::F32 => v,
                    AttentionKernel::F16Accumulator => f16::from_f32(v).to_f32(),
                })
                .collect();
            let stride = n_pos + 2;
            let mut want = vec![f32::NAN; g * head_dim_v];
            let mut scores = vec![0f32; stride];
            for h in 0..g {
                math::attention_head(
                    &mut want[h * head_dim_v..][..head_dim_v],
                    &qs[h * head_dim..][..head_dim],
                    &kv,
                    &mut scores,
                    span,
                    scale,
                    softcap,
                    kernel,
                );
            }
            for (face, face_name) in [(group_face, name), (math::attention_group as _, "scalar")] {
                let face: math::AttentionGroupFn = face;
                let mut got = vec![f32::NAN; g * head_dim_v];
                let mut scores = vec![0f32; g * stride];
                face(
                    &mut got,
                    &qs,
                    &kv,
                    &mut scores,
                    span,
                    scale,
                    softcap,
                    kernel,
                );
                for (i, (w, o)) in want.iter().zip(&got).enumerate() {
                    assert_eq!(
                        w.to_bits(),
                        o.to_bits(),
                        "{face_name} {kernel:?} head_dim {head_dim}/{head_dim_v} group {g} pos \
                         {pos} window {window:?} softcap {softcap:?}: head {} out[{}] alone \
                         {w}, grouped {o}",
                        i / head_dim_v,
                        i % head_dim_v
                    );
                }
                compared += got.len();
            }
            // The skip threshold (decoding's f16 kernel): the face against the scalar
            // grouped pass with the same threshold.
            if kernel == AttentionKernel::F16Accumulator {
                let span = AttentionSpan {
                    skip_below: Some(libm::logf(1e-4)),
                    ..span
                };
                let mut outs = [
                    vec![f32::NAN; g * head_dim_v],
                    vec![f32::NAN; g * head_dim_v],
                ];
                let faces: [math::AttentionGroupFn; 2] = [group_face, math::attention_group];
                for (face, out) in faces.iter().zip(outs.iter_mut()) {
                    let mut scores = vec![0f32; g * stride];
                    face(out, &qs, &kv, &mut scores, span, scale, softcap, kernel);
                }
                for (i, (w, o)) in outs[1].iter().zip(&outs[0]).enumerate() {
                    assert!(
                        w.to_bits() == o.to_bits() || (w.is_nan() && o.is_nan()),
                        "{name} skip head_dim {head_dim} group {g} pos {pos}: out[{i}] scalar \
                         {w}, face {o}"
                    );
                }
                compared += outs[0].len();
            }
        }
    }
    println!("grouped attention ({name}): {compared} outputs equal to the scalar bits per head");
    assert!(compared > 0);
}

/// The face's loops, when this CPU runs one.
fn installed_loops() -> Option<math::AttentionLoops> {
    let (_, name) = installed_face();
    #[cfg(target_arch = "x86_64")]
    if name != "scalar" {
        return Some(super::x86_64::ATTENTION_LOOPS);
    }
    #[cfg(target_arch = "aarch64")]
    if name != "scalar" {
        return Some(super::aarch64::ATTENTION_LOOPS);
    }
    let _ = name;
    None
}

/// f32 inputs around every f16: each f16's value, its f32 neighbours, the midpoints to the
/// next f16 (ties) and just off them, plus infinities, NaNs and out-of-range values.
fn f32_near_every_f16() -> Vec<f32> {
    let mut xs = Vec::new();
    for bits in 0..=u16::MAX {
        let x = f16::from_bits(bits).to_f32();
        let next = f16::from_bits(bits.wrapping_add(1)).to_f32();
        xs.push(x);
        if x.is_finite() {
            for k in [-2i32, -1, 1, 2] {
                xs.push(f32::from_bits(x.to_bits().wrapping_add_signed(k)));
            }
        }
        if x.is_finite() && next.is_finite() && (bits & 0x7FFF) != 0x7BFF {
            let mid = (x as f64 + next as f64) / 2.0;
            let mid = mid as f32;
            for k in [-1i32, 0, 1] {
                xs.push(f32::from_bits(mid.to_bits().wrapping_add_signed(k)));
            }
        }
    }
    // Around 65504 + half an ulp (the overflow threshold), far beyond it, and below the
    // smallest subnormal's half.
    for base in [65520.0f32, -65520.0, 1e10, 2.98e-8, -2.98e-8, 1e-30] {
        for k in -3i32..=3 {
            xs.push(f32::from_bits(base.to_bits().wrapping_add_signed(k)));
        }
    }
    xs.extend([
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7F80_0001),
        f32::from_bits(0xFFBF_FFFF),
        f32::from_bits(0x7FC0_2000),
        f32::MIN_POSITIVE,
        f32::from_bits(1),
    ]);
    xs
}

#[test]
fn attention_loops_round_to_f16_as_half_does() {
    let Some(loops) = installed_loops() else {
        println!("notice: no SIMD attention on this CPU, nothing to compare");
        return;
    };
    let xs = f32_near_every_f16();
    // rescale by 1.0 is exactly the f16 rounding of each input.
    let mut out = xs.clone();
    (loops.rescale_f16)(&mut out, 1.0);
    for (&x, &o) in xs.iter().zip(&out) {
        let want = f16::from_f32(x).to_f32();
        assert_eq!(
            want.to_bits(),
            o.to_bits(),
            "f16 rounding of {x:e} ({:#x})",
            x.to_bits()
        );
    }
    for ms in [0.5f32, 0.3, 1e-7, 0.0] {
        let mut out = xs.clone();
        (loops.rescale_f16)(&mut out, ms);
        for (&x, &o) in xs.iter().zip(&out) {
            let want = f16::from_f32(x * ms).to_f32();
            assert_eq!(want.to_bits(), o.to_bits(), "f16({x:e} * {ms})");
        }
    }
    println!(
        "f16 rounding: {} inputs x 5 scales equal to half's",
        xs.len()
    );
}

#[test]
fn attention_loops_accumulate_every_f16_value_as_fmaf_does() {
    let Some(loops) = installed_loops() else {
        println!("notice: no SIMD attention on this CPU, nothing to compare");
        return;
    };
    let values: Vec<u16> = (0..=u16::MAX).collect();
    let mut rng = XorShift(0xacc0_f16a);
    let mut compared = 0;
    for vs in [1.0f32, 0.3, -2.5, 1e-5, 7.0e4, 0.0] {
        for magnitude in [0.0f32, 1.0, 60000.0, 1e-6] {
            let start: Vec<f32> = (0..values.len())
                .map(|_| f16::from_f32((rng.unit() * 2.0 - 1.0) * magnitude).to_f32())
                .collect();
            let mut out = start.clone();
            (loops.accumulate_f16)(&mut out, &values, vs);
            for ((&o0, &v), &o) in start.iter().zip(&values).zip(&out) {
                let fused = libm::fmaf(f16::from_bits(v).to_f32(), vs, o0);
                let want = f16::from_f32(fused).to_f32();
                // NaN inputs give NaN on both sides; which NaN (sign, payload) libm's
                // software fmaf returns is its own choice, so NaNs compare as a class.
                if want.is_nan() {
                    assert!(o.is_nan(), "fma({v:#x}, {vs}, {o0}) = {o}, want NaN");
                } else {
                    assert_eq!(
                        want.to_bits(),
                        o.to_bits(),
                        "f16(fma(f16 {v:#x}, {vs}, {o0:e}))"
                    );
                }
            }
            compared += out.len();
        }
    }
    println!("f16 accumulation: {compared} sums equal to f16(libm::fmaf)");
}

/// SwiGLU inputs: every 4099th f32 bit pattern (all signs, NaNs, infinities, subnormals),
/// a fine sweep over the range where e^-x goes from overflow through the normal range to
/// underflow, and the edges of each of the scalar `expf`'s branches.
fn swiglu_inputs() -> Vec<f32> {
    let mut xs: Vec<f32> = (0..=u32::MAX).step_by(4099).map(f32::from_bits).collect();
    let mut x = -110.0f32;
    while x < 110.0 {
        xs.push(x);
        x += 0.000_977;
    }
    let edges = [
        103.972_08f32,
        87.336_55,
        88.722_83,
        0.346_573_6,
        1.039_720_7,
        6.103_515_6e-5,
        0.0,
    ];
    for edge in edges {
        for e in [edge, -edge] {
            for k in -3i32..=3 {
                xs.push(f32::from_bits(e.to_bits().wrapping_add_signed(k)));
            }
        }
    }
    xs
}

#[test]
fn swiglu_face_gives_the_scalar_bits() {
    let set = KernelSet::select(&tests_features());
    let xs = swiglu_inputs();
    let mut rng = XorShift(0x5191_u64);
    let up: Vec<f32> = (0..xs.len())
        .map(|i| match i % 5 {
            0 => 1.0,
            1 => (rng.unit() * 2.0 - 1.0) * 8.0,
            2 => -0.0,
            3 => 1e-30,
            _ => 3.0e30,
        })
        .collect();
    // Every length 0..=17 for the tails, then everything at once.
    for len in (0..=17).chain([xs.len()]) {
        let mut want = xs[..len].to_vec();
        let mut got = want.clone();
        math::swiglu(&mut want, &up[..len]);
        (set.swiglu())(&mut got, &up[..len]);
        for (i, (&w, &g)) in want.iter().zip(&got).enumerate() {
            // NaN inputs give NaN on both sides; which NaN is the hardware's choice.
            assert!(
                w.to_bits() == g.to_bits() || (w.is_nan() && g.is_nan()),
                "swiglu({}, up {}) = {g:e} ({:#x}), scalar {w:e} ({:#x}) [{}]",
                xs[i],
                up[i],
                g.to_bits(),
                w.to_bits(),
                set.name()
            );
        }
    }
    println!(
        "swiglu ({}): {} inputs equal to the scalar bits",
        set.name(),
        xs.len()
    );
}

/// Random Q8_0 blocks: random quants (-128 included) and scales of about `magnitude`, with one
/// scale in `special_every` a special f16 pattern (zero, subnormal, 65504...).
fn random_q8_blocks(
    rng: &mut XorShift,
    n_blocks: usize,
    magnitude: f32,
    special_every: u64,
) -> Vec<u8> {
    let mut out = vec![0u8; n_blocks * 34];
    for b in out.chunks_exact_mut(34) {
        let r = rng.next_u64();
        let d = if special_every != 0 && r.is_multiple_of(special_every) {
            SPECIAL_F16[(r >> 32) as usize % SPECIAL_F16.len()]
        } else {
            f16::from_f32(rng.unit() * magnitude).to_bits()
        };
        b[..2].copy_from_slice(&d.to_le_bytes());
        for q in &mut b[2..] {
            *q = rng.next_u64() as u8;
        }
    }
    out
}

/// The installed faces of the q8_0 cache's loops (`kv_q8::AttentionLoopsQ8`) against the
/// scalar ones, to the bit: the keys' dots over head dims of 1..16 blocks, the value rows into
/// the f32 accumulator (rescales, a zero rescale, skipped rows), and the whole attention
/// (exact and with the skip threshold) over 300 positions.
#[test]
fn q8_cache_loops_give_the_scalar_bits() {
    use crate::kv_q8::{self, AttentionLoopsQ8, KvHeadQ8};
    let scalar = AttentionLoopsQ8::SCALAR;
    let mut rng = XorShift(0x000C_7A80);
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    #[allow(unused_mut)]
    let mut sets: Vec<KernelSet> = feature_sets().iter().map(KernelSet::select).collect();
    #[cfg(target_arch = "aarch64")]
    if std::arch::is_aarch64_feature_detected!("dotprod") {
        let mut f = tests_features();
        f.dotprod = true;
        sets.push(KernelSet::select(&f));
    }
    for set in sets {
        let face = set.attention().q8;
        for nb in [1usize, 2, 3, 4, 5, 8, 16] {
            for (magnitude, special) in [(0.01f32, 0u64), (1.0, 7), (300.0, 0)] {
                let n = 37;
                let stride = nb * 34 * 2 + 34;
                let cache = random_q8_blocks(&mut rng, n * stride / 34 + nb, magnitude, special);
                let qq = random_q8_blocks(&mut rng, nb, magnitude, 0);
                let (mut got, mut want) = (vec![0f32; n], vec![0f32; n]);
                (face.key_dots)(&qq, &cache, stride, &mut got);
                (scalar.key_dots)(&qq, &cache, stride, &mut want);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        same(*g, *w),
                        "{} key dot nb {nb} row {i}: {g} vs {w}",
                        set.name()
                    );
                }
                let ms: Vec<f32> = (0..n)
                    .map(|i| match i % 9 {
                        4 => 0.0,
                        2 | 7 => rng.unit(),
                        _ => 1.0,
                    })
                    .collect();
                let vs: Vec<f32> = (0..n)
                    .map(|i| match i % 5 {
                        3 => 0.0,
                        _ => rng.unit() * [1.0, 3.0, 1e-4][i % 3],
                    })
                    .collect();
                let start: Vec<f32> = (0..nb * 32).map(|_| rng.unit() - 0.5).collect();
                let (mut got, mut want) = (start.clone(), start);
                (face.accumulate_rows)(&mut got, &cache, stride, &ms, &vs);
                (scalar.accumulate_rows)(&mut want, &cache, stride, &ms, &vs);
                for (d, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        same(*g, *w),
                        "{} accumulate nb {nb} dim {d}: {g} vs {w}",
                        set.name()
                    );
                }
            }
        }
        // The whole attention of a group of 7 query heads over 300 positions.
        let (n_head_kv, hd, group, n_pos) = (2usize, 64usize, 7usize, 300usize);
        let row = kv_q8::row_bytes(n_head_kv * hd);
        let keys = random_q8_blocks(&mut rng, n_pos * row / 34, 0.05, 0);
        let values = random_q8_blocks(&mut rng, n_pos * row / 34, 0.01, 0);
        let qs: Vec<f32> = (0..group * hd).map(|_| rng.unit() * 4.0 - 2.0).collect();
        for skip_below in [None, Some(libm::logf(1e-4))] {
            let kv = KvHeadQ8 {
                key_cache: &keys,
                value_cache: &values,
                head: 1,
                n_head_kv,
                head_dim: hd,
                head_dim_v: hd,
            };
            let span = AttentionSpan {
                pos: n_pos - 1,
                window: Some(260),
                skip_below,
            };
            let mut sc = vec![0f32; group * n_pos];
            let (mut got, mut want) = (vec![0f32; group * hd], vec![0f32; group * hd]);
            kv_q8::attention_q8_with(&face, &mut got, &qs, &kv, &mut sc, span, 0.125, None);
            kv_q8::attention_q8_with(&scalar, &mut want, &qs, &kv, &mut sc, span, 0.125, None);
            for (d, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    same(*g, *w),
                    "{} attention {skip_below:?} out {d}: {g} vs {w}",
                    set.name()
                );
            }
        }
        println!("{}: q8_0 cache loops give the scalar bits", set.name());
    }
}
