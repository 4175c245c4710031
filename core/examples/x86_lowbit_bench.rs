//! The low-bit weight kernels of the AVX2 set (#33: Q3_K, Q5_K, IQ4_XS, IQ3_XXS, IQ2_XXS, ...),
//! one thread, on Qwen2.5-Coder-1.5B's shapes (1536 -> 8960 and 8960 -> 1536) in chunks of
//! 128 rows as the thread pool hands them out: the prompt kernel (`matmul`, 32 tokens) and the
//! decode matvec, in G multiply-adds per second of CPU time (the machine may be shared; run it
//! under `perf stat -e cycles` to count cycles). Random blocks with sane f16 scales.
//!
//!     cargo run --release -p smolrun-core --example x86_lowbit_bench -- [--tokens N] [TYPE ...]
//!
//! `--tokens`: the prompt kernel's batch (default 32).

#[cfg(target_arch = "x86_64")]
mod bench_util;

#[cfg(target_arch = "x86_64")]
fn main() {
    use smolrun_core::kernels::KernelSet;
    use smolrun_core::platform::CpuFeatures;
    use smolrun_core::quant::{self, GgmlType};
    use std::hint::black_box;

    let features = CpuFeatures {
        neon: false,
        dotprod: false,
        fp16: false,
        i8mm: false,
        avx2: std::is_x86_feature_detected!("avx2"),
        fma: std::is_x86_feature_detected!("fma"),
        f16c: std::is_x86_feature_detected!("f16c"),
        avx512f: false,
        avx512bw: false,
        avx512vnni: false,
    };
    let set = KernelSet::select(&features);
    // Options come from the command line only: `--tokens N`, then the type names.
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut tokens = 32usize;
    if let Some(i) = args.iter().position(|a| a == "--tokens") {
        let n = args.get(i + 1).and_then(|n| n.parse().ok());
        tokens = n.unwrap_or_else(|| panic!("--tokens takes a number of tokens"));
        args.drain(i..i + 2);
    }
    let types = args;
    let types: Vec<&str> = if types.is_empty() {
        vec!["Q3_K", "Q5_K", "IQ4_XS", "IQ3_XXS", "IQ2_XXS"]
    } else {
        types.iter().map(|s| s.as_str()).collect()
    };
    // Where each type keeps its f16 scale(s): random bytes there could be huge or subnormal.
    let f16_fields = |ty: GgmlType| -> &'static [usize] {
        match ty {
            GgmlType::Q3_K => &[108],
            GgmlType::Q6_K => &[208],
            GgmlType::Q2_K => &[80, 82],
            GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
            _ => &[0],
        }
    };
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let best = |f: &mut dyn FnMut()| bench_util::best_cpu_secs(50_000_000, f);
    let rows = 128;
    for name in types {
        let ty = (0..64)
            .filter_map(GgmlType::from_id)
            .find(|t| t.name() == name)
            .unwrap_or_else(|| panic!("no type {name}"));
        let k = set.weight(ty).unwrap();
        for n in [1536, 8960] {
            let row_bytes = quant::row_bytes(ty, n).unwrap();
            let mut w: Vec<u8> = (0..rows * row_bytes).map(|_| next() as u8).collect();
            for blk in w.chunks_exact_mut(ty.type_size()) {
                for &o in f16_fields(ty) {
                    blk[o..o + 2].copy_from_slice(&0x211Eu16.to_le_bytes());
                }
            }
            let act_bytes = quant::row_bytes(k.act_type, n).unwrap();
            let mut acts = vec![0u8; tokens * act_bytes];
            for a in acts.chunks_exact_mut(act_bytes) {
                let x: Vec<f32> = (0..n)
                    .map(|_| (next() % 2000) as f32 / 1000.0 - 1.0)
                    .collect();
                k.quantize_activation(&x, a).unwrap();
            }
            let mut out = vec![0f32; rows * tokens];
            let s = best(&mut || {
                k.matmul(&w, rows, n, &acts, tokens, &mut out).unwrap();
                black_box(&out);
            });
            let pp = (rows * tokens * n) as f64 / s * 1e-9;
            // A matvec of 128 rows takes ~20 us, the CPU-time read (a /proc file) several:
            // the clock is read once per DECODE_REPS of them.
            const DECODE_REPS: usize = 64;
            let s = best(&mut || {
                for _ in 0..DECODE_REPS {
                    k.matvec(&w, rows, n, &acts[..act_bytes], &mut out[..rows])
                        .unwrap();
                    black_box(&out);
                }
            });
            let tg = (DECODE_REPS * rows * n) as f64 / s * 1e-9;
            println!(
                "{name:8} n {n:5} ({}): prompt {pp:6.2} GMAC/s, decode {tg:6.2} GMAC/s ({:.1} GB/s of weights)",
                k.face,
                tg * row_bytes as f64 / n as f64
            );
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("x86-64 only");
}
