//! The AVX2 K-quant prompt kernels, one thread, timed in CPU time (the machine may be
//! shared), in G multiply-adds per second. Q4_K and Q6_K: `avx2_k`'s batched matmuls (file
//! layout, 4 tokens per unpacked block; the first line of each type) and `avx2_kt`'s (tokens
//! in the lanes; the second), 32 tokens (the model's batch) on LFM2-1.2B's FFN shapes (2048 ->
//! 8192 and 8192 -> 2048) and a short one (512 -> 32768, all in L1). Q3_K and Q5_K:
//! `avx2_kt35`'s (tokens in the lanes; the file-layout kernels they replaced measured 30-40
//! GMAC/s and are gone) on Qwen2.5-1.5B's shapes (1536 -> 1536, 256, 8960 and 8960 -> 1536), 32, 64 and 128 tokens.
//! Rows go in chunks of 256 as the thread pool hands them out. Also checks that each matmul
//! gives its vec_dot's bits. (The x86_k_matmul_bench example needs AVX-512 VNNI.)
//!
//!     cargo run --release -p smolrun-core --example x86_avx2_k_prompt_bench [q3|q4|q5|q6]

#[cfg(target_arch = "x86_64")]
mod bench_util;

#[cfg(target_arch = "x86_64")]
fn main() {
    use smolrun_core::quant::{self, GgmlType};
    use smolrun_kernels::x86_64::{avx2_fma_f16c_usable, avx2_k, avx2_kt, avx2_kt35};
    use std::hint::black_box;

    if !avx2_fma_f16c_usable() {
        println!("this CPU has no AVX2/FMA/F16C");
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The types named on the command line, or all of them.
    let want = |s: &str| {
        let named = |a: &&String| ["q3", "q4", "q5", "q6"].contains(&a.as_str());
        args.iter().all(|a| !named(&a)) || args.iter().any(|a| a == s)
    };
    let random_blocks = |ty: GgmlType, n_blocks: usize, seed: u64| -> Vec<u8> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let size = ty.type_size();
        let mut bytes: Vec<u8> = (0..n_blocks * size)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect();
        for b in bytes.chunks_exact_mut(size) {
            match ty {
                GgmlType::Q4_K | GgmlType::Q5_K => {
                    b[0..2].copy_from_slice(&0x211Eu16.to_le_bytes());
                    b[2..4].copy_from_slice(&0x1818u16.to_le_bytes());
                }
                GgmlType::Q3_K => b[108..110].copy_from_slice(&0x211Eu16.to_le_bytes()),
                _ => b[208..210].copy_from_slice(&0x211Eu16.to_le_bytes()),
            }
        }
        bytes
    };
    let best = |f: &mut dyn FnMut()| bench_util::best_cpu_secs(100_000_000, f);
    type Cols = unsafe fn(usize, &[u8], &[u8], usize, &mut [f32]);
    type Dot = unsafe fn(usize, &[u8], &[u8]) -> f32;
    let sets: [(GgmlType, Cols, Dot); 6] = [
        (
            GgmlType::Q4_K,
            avx2_k::matmul_q4_k_q8_k,
            avx2_k::vec_dot_q4_k_q8_k,
        ),
        (
            GgmlType::Q4_K,
            avx2_kt::matmul_q4_k_q8_k,
            avx2_kt::vec_dot_q4_k_q8_k,
        ),
        (
            GgmlType::Q6_K,
            avx2_k::matmul_q6_k_q8_k,
            avx2_k::vec_dot_q6_k_q8_k,
        ),
        (
            GgmlType::Q6_K,
            avx2_kt::matmul_q6_k_q8_k,
            avx2_kt::vec_dot_q6_k_q8_k,
        ),
        (
            GgmlType::Q3_K,
            avx2_kt35::matmul_q3_k_q8_k,
            avx2_kt35::vec_dot_q3_k_q8_k,
        ),
        (
            GgmlType::Q5_K,
            avx2_kt35::matmul_q5_k_q8_k,
            avx2_kt35::vec_dot_q5_k_q8_k,
        ),
    ];
    let chunk = 256;
    for (ty, cols, dot) in sets {
        let short = match ty {
            GgmlType::Q3_K => "q3",
            GgmlType::Q4_K => "q4",
            GgmlType::Q5_K => "q5",
            _ => "q6",
        };
        if !want(short) {
            continue;
        }
        let (shapes, tokens): (&[(usize, usize)], &[usize]) = match ty {
            GgmlType::Q4_K | GgmlType::Q6_K => (&[(2048, 8192), (8192, 2048), (512, 32768)], &[32]),
            _ => (
                &[(1536, 1536), (1536, 256), (1536, 8960), (8960, 1536)],
                &[32, 64, 128],
            ),
        };
        for &n_acts in tokens {
            let mut line = format!("{ty} {n_acts:3} tokens:");
            for &(n_cols, n_rows) in shapes {
                let acts = bench_util::q8_k_acts(n_acts, n_cols);
                let act_row = acts.len() / n_acts;
                let row_bytes = quant::row_bytes(ty, n_cols).unwrap();
                let w = random_blocks(ty, n_rows * n_cols / 256, 7);
                let mut out = vec![0f32; n_acts * chunk];
                let secs = best(&mut || {
                    for rows in w.chunks_exact(chunk * row_bytes) {
                        // SAFETY: AVX2, FMA and F16C checked above.
                        unsafe { cols(n_cols, rows, &acts, n_acts, &mut out) };
                        black_box(&out);
                    }
                });
                let macs = (n_acts * n_rows * n_cols) as f64;
                line += &format!(" {n_cols}x{n_rows} {:6.1} GMAC/s |", macs / secs / 1e9);
                for (t, o) in out.chunks_exact(chunk).enumerate() {
                    for (r, &o) in o.iter().enumerate() {
                        let row = &w[(n_rows - chunk + r) * row_bytes..][..row_bytes];
                        // SAFETY: as above.
                        let v = unsafe { dot(n_cols, row, &acts[t * act_row..][..act_row]) };
                        assert_eq!(o.to_bits(), v.to_bits(), "{ty} row {r} token {t}");
                    }
                }
            }
            println!("{line}");
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("x86-64 only");
}
