//! Times one token of the gated delta rule over Qwen3.5-0.8B's recurrent layers (18 layers of
//! 16 value heads, dk = dv = 128: 1 MB of f32 state each, 18 MB in all, more than the caches
//! hold, as in decoding) for each face: the unfused step it replaced, the scalar truth, and
//! this CPU's faces for f32 and f16 state. Figures are per layer. `cargo run --release -p
//! smolrun-core --example delta_rule_bench [HEADS] [DK] [LAYERS]`.
use smolrun_core::kernels::KernelSet;
use smolrun_core::math;
use smolrun_core::platform::CpuFeatures;
use std::time::Instant;

fn unfused(s: &mut [f32], q: &[f32], k: &[f32], v: &[f32], decay: f32, beta: f32, out: &mut [f32]) {
    let dk = k.len();
    let scale = 1.0 / (dk as f32).sqrt();
    s.iter_mut().for_each(|x| *x *= decay);
    let dot = |a: &[f32], b: &[f32]| -> f32 { a.iter().zip(b).map(|(a, b)| a * b).sum() };
    for (j, row) in s.chunks_exact_mut(dk).enumerate() {
        let d = (v[j] - dot(row, k)) * beta;
        row.iter_mut().zip(k).for_each(|(s, &k)| *s += k * d);
        out[j] = dot(row, q) * scale;
    }
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let heads = args.first().copied().unwrap_or(16);
    let dk = args.get(1).copied().unwrap_or(128);
    let layers = args.get(2).copied().unwrap_or(18);
    let mut f = CpuFeatures::default();
    #[cfg(target_arch = "x86_64")]
    {
        f.avx2 = std::arch::is_x86_feature_detected!("avx2");
        f.fma = std::arch::is_x86_feature_detected!("fma");
        f.f16c = std::arch::is_x86_feature_detected!("f16c");
    }
    #[cfg(target_arch = "aarch64")]
    {
        f.neon = true;
    }
    let set = KernelSet::select(&f);
    let dr = set.delta_rule();
    let n = layers * heads * dk * dk;
    let mut seed = 0x1234_5678u32;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        (seed as f32 / u32::MAX as f32) * 2.0 - 1.0
    };
    let state: Vec<f32> = (0..n).map(|_| rnd() * 0.1).collect();
    let unit = |x: Vec<f32>| {
        let norm = x.iter().map(|v| v * v).sum::<f32>().sqrt();
        x.into_iter().map(|v| v / norm).collect::<Vec<f32>>()
    };
    let q = unit((0..dk).map(|_| rnd()).collect());
    let k = unit((0..dk).map(|_| rnd()).collect());
    let v: Vec<f32> = (0..dk).map(|_| rnd()).collect();
    let mut out = vec![0f32; dk];
    let tokens = 20;
    let heads = layers * heads; // every layer's heads, one after another
    let mut run = |name: &str, step: &mut dyn FnMut(usize, &mut [f32])| {
        let t = Instant::now();
        for _ in 0..tokens {
            for h in 0..heads {
                step(h, &mut out);
            }
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / (tokens * layers) as f64;
        println!(
            "{name:<28} {us:9.1} us per token and layer ({:.2} ns per state value)",
            us * 1e3 / (n / layers) as f64
        );
    };
    let hd = dk * dk;
    let mut s = state.clone();
    run("unfused (before)", &mut |h, o| {
        unfused(&mut s[h * hd..][..hd], &q, &k, &v, 0.97, 0.5, o)
    });
    let mut s = state.clone();
    run("fused scalar", &mut |h, o| {
        math::delta_rule_step(&mut s[h * hd..][..hd], &q, &k, &v, 0.97, 0.5, o)
    });
    let mut s = state.clone();
    run(&format!("fused {} f32", set.name()), &mut |h, o| {
        (dr.f32)(&mut s[h * hd..][..hd], &q, &k, &v, 0.97, 0.5, o)
    });
    let mut s16: Vec<u16> = state
        .iter()
        .map(|&x| half::f16::from_f32(x).to_bits())
        .collect();
    run(&format!("fused {} f16", set.name()), &mut |h, o| {
        (dr.f16)(&mut s16[h * hd..][..hd], &q, &k, &v, 0.97, 0.5, o)
    });
}
