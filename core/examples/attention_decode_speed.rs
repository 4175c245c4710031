//! Decoding attention at a long context, alone: one token's query heads of one KV head (the
//! Qwen3.5-0.8B shape: 4 query heads of 256 per KV head, 2 KV heads) over `n` cached positions,
//! for 6 layers whose caches together are far bigger than L2 (as when decoding), through each
//! face this CPU runs. Prints the time per layer and the bytes of the cache read per second.
//!
//!     cargo run --release -p smolrun-core --example attention_decode_speed [n_positions]

use smolrun_core::kernels::KernelSet;
use smolrun_core::math::{AttentionKernel, AttentionSpan, KvHead};
use smolrun_core::platform::CpuFeatures;
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4096);
    let (hd, n_kv, group, layers) = (256, 2, 4, 6);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut f16 = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        half::f16::from_f32((x % 2001) as f32 / 1000.0 - 1.0).to_bits()
    };
    let caches: Vec<(Vec<u16>, Vec<u16>)> = (0..layers)
        .map(|_| {
            let k = (0..n * n_kv * hd).map(|_| f16()).collect();
            let v = (0..n * n_kv * hd).map(|_| f16()).collect();
            (k, v)
        })
        .collect();
    let qs: Vec<f32> = (0..group * hd)
        .map(|_| half::f16::from_bits(f16()).to_f32() * 4.0)
        .collect();
    #[allow(unused_mut)] // no features elsewhere: the scalar set
    let mut features = CpuFeatures::default();
    #[cfg(target_arch = "aarch64")]
    {
        features.neon = std::arch::is_aarch64_feature_detected!("neon");
    }
    #[cfg(target_arch = "x86_64")]
    {
        features.avx2 = std::arch::is_x86_feature_detected!("avx2");
        features.fma = std::arch::is_x86_feature_detected!("fma");
        features.f16c = std::arch::is_x86_feature_detected!("f16c");
    }
    #[allow(unused_mut)]
    let mut sets = vec![KernelSet::select(&features)];
    #[cfg(target_arch = "x86_64")]
    {
        features.avx512f = std::arch::is_x86_feature_detected!("avx512f");
        features.avx512bw = std::arch::is_x86_feature_detected!("avx512bw");
        features.avx512vnni = std::arch::is_x86_feature_detected!("avx512vnni");
        sets.push(KernelSet::select(&features));
    }
    let mut outs = vec![0f32; group * hd];
    let mut scores = vec![0f32; group * n];
    for set in &sets {
        let face = set.attention().group;
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t = Instant::now();
            for (k, v) in &caches {
                for head in 0..n_kv {
                    let kv = KvHead {
                        key_cache: k,
                        value_cache: v,
                        head,
                        n_head_kv: n_kv,
                        head_dim: hd,
                        head_dim_v: hd,
                    };
                    let span = AttentionSpan {
                        pos: n - 1,
                        window: None,
                        skip_below: None,
                    };
                    let k = AttentionKernel::F16Accumulator;
                    face(&mut outs, &qs, &kv, &mut scores, span, 0.0625, None, k);
                }
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        let bytes = (layers * 2 * n * n_kv * hd * 2) as f64;
        println!(
            "{:>14}: {:.2} ms per token (6 layers, 2 KV heads, one thread), {:.1} GB/s of cache",
            set.name(),
            best * 1e3,
            bytes / best / 1e9
        );
    }
}
