//! Q4_K and Q6_K on x86-64, one thread, timed in CPU time (the machine may be shared): the
//! batched prompt kernels (32 tokens, the model's batch) of the AVX2 set (`avx2_k`, 4 tokens
//! per unpack) against the AVX-512 set (`avx512_k`, tokens in the lanes), in G multiply-adds
//! per second, on the shapes of Qwen2.5-1.5B (1536 -> 8960 and 8960 -> 1536) cut into chunks
//! of 128 rows as the thread pool hands them out; and the one-row dots in GB/s of weights
//! from L2 and from DRAM through the matvec (decode). Also checks that each AVX-512 matmul gives its vec_dot's
//! bits.
//!
//!     cargo run --release -p smolrun-core --example x86_k_matmul_bench

#[cfg(target_arch = "x86_64")]
mod bench_util;

#[cfg(target_arch = "x86_64")]
fn main() {
    use smolrun_core::quant::{self, GgmlType};
    use smolrun_kernels::x86_64::{avx2_k, avx512_k, avx512_vnni_usable};
    use std::hint::black_box;

    if !avx512_vnni_usable() {
        println!("this CPU has no AVX-512 VNNI");
        return;
    }
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
    let best = |f: &mut dyn FnMut()| bench_util::best_cpu_secs(50_000_000, f);
    type Dot = unsafe fn(usize, &[u8], &[u8]) -> f32;
    type Cols = unsafe fn(usize, &[u8], &[u8], usize, &mut [f32]);
    type Rows = unsafe fn(usize, &[u8], &[u8], &mut [f32]);
    // The AVX2 set has no several-rows kernel for these: its matvec is a vec_dot per row.
    unsafe fn rows_q4_k_avx2(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
        let row_bytes = w.len() / out.len();
        for (y, row) in out.iter_mut().zip(w.chunks_exact(row_bytes)) {
            *y = avx2_k::vec_dot_q4_k_q8_k(n, row, a);
        }
    }
    unsafe fn rows_q6_k_avx2(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
        let row_bytes = w.len() / out.len();
        for (y, row) in out.iter_mut().zip(w.chunks_exact(row_bytes)) {
            *y = avx2_k::vec_dot_q6_k_q8_k(n, row, a);
        }
    }
    let sets: [(GgmlType, &str, Dot, Cols, Rows); 4] = [
        (
            GgmlType::Q4_K,
            "avx2",
            avx2_k::vec_dot_q4_k_q8_k,
            avx2_k::matmul_q4_k_q8_k,
            rows_q4_k_avx2,
        ),
        (
            GgmlType::Q4_K,
            "avx512",
            avx512_k::vec_dot_q4_k_q8_k,
            avx512_k::matmul_q4_k_q8_k,
            avx512_k::matvec_q4_k_q8_k,
        ),
        (
            GgmlType::Q6_K,
            "avx2",
            avx2_k::vec_dot_q6_k_q8_k,
            avx2_k::matmul_q6_k_q8_k,
            rows_q6_k_avx2,
        ),
        (
            GgmlType::Q6_K,
            "avx512",
            avx512_k::vec_dot_q6_k_q8_k,
            avx512_k::matmul_q6_k_q8_k,
            avx512_k::matvec_q6_k_q8_k,
        ),
    ];
    let n_acts = 32;
    let chunk = 128;
    for (ty, name, dot, cols, rows) in sets {
        let mut line = format!("{ty} {name:6}:");
        for (n_cols, n_rows) in [(1536, 8960), (8960, 1536)] {
            let acts = bench_util::q8_k_acts(n_acts, n_cols);
            let act_row = acts.len() / n_acts;
            let row_bytes = quant::row_bytes(ty, n_cols).unwrap();
            let w = random_blocks(ty, n_rows * n_cols / 256, 7);
            let mut out = vec![0f32; n_acts * chunk];
            let secs = best(&mut || {
                for rows in w.chunks_exact(chunk * row_bytes) {
                    // SAFETY: AVX-512 VNNI (and so AVX2, FMA, F16C) checked above.
                    unsafe { cols(n_cols, rows, &acts, n_acts, &mut out) };
                    black_box(&out);
                }
            });
            let macs = (n_acts * n_rows * n_cols) as f64;
            line += &format!(" {n_cols}x{n_rows} {:6.1} GMAC/s |", macs / secs / 1e9);
            if name == "avx512" {
                for (t, o) in out.chunks_exact(chunk).enumerate() {
                    for (r, &o) in o.iter().enumerate() {
                        let row = &w[(n_rows - chunk + r) * row_bytes..][..row_bytes];
                        // SAFETY: as above.
                        let v = unsafe { dot(n_cols, row, &acts[t * act_row..][..act_row]) };
                        assert_eq!(o.to_bits(), v.to_bits(), "{ty} row {r} token {t}");
                    }
                }
            }
        }
        // Decode: one activation row against a matrix in L2 and one in DRAM.
        let act = {
            let x: Vec<f32> = (0..1536).map(|i| (i % 7) as f32 - 3.0).collect();
            let mut a = vec![0u8; quant::row_bytes(GgmlType::Q8_K, 1536).unwrap()];
            quant::quantize_row(GgmlType::Q8_K, &x, &mut a).unwrap();
            a
        };
        let row_bytes = quant::row_bytes(ty, 1536).unwrap();
        for (what, bytes, reps) in [("L2", 256usize << 10, 100), ("DRAM", 256 << 20, 1)] {
            let n_rows = bytes / row_bytes;
            let w = random_blocks(ty, n_rows * 6, 9);
            let mut out = vec![0f32; n_rows];
            // The matvec in chunks of 128 rows, as the thread pool hands them out.
            let secs = best(&mut || {
                for _ in 0..reps {
                    for (o, rows_w) in out
                        .chunks_exact_mut(128)
                        .zip(w.chunks_exact(128 * row_bytes))
                    {
                        // SAFETY: as above.
                        unsafe { rows(1536, rows_w, &act, o) };
                    }
                    black_box(&out);
                }
            });
            line += &format!(
                " matvec {what} {:5.1} GB/s",
                (bytes * reps) as f64 / secs / 1e9
            );
        }
        println!("{line}");
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("x86-64 only");
}
