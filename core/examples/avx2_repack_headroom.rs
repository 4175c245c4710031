//! Does an interleaved (repacked) Q4_K layout pay on x86-64 AVX2? A repacked layout saves
//! compute (the 6-bit scales decoded once at load, one activation load feeding several rows);
//! it cannot reduce the bytes a decode step reads. So it pays only where the one-row AVX2
//! kernel is compute-bound. This measures, for 1 and 2 threads:
//!
//! - `read`: plain streaming read bandwidth over a matrix far bigger than the caches (the
//!   ceiling of any decode kernel);
//! - `q4_k dram`: the AVX2 Q4_K matvec over that matrix, in GB/s of weight bytes;
//! - `q4_k cache`: the same kernel over a matrix that stays in L2 (its compute ceiling).
//!
//! If `q4_k dram` is close to `read` and well below `q4_k cache`, decode is bandwidth-bound and
//! a repacked layout cannot make it faster.
//!
//!     cargo run --release -p smolrun-core --example avx2_repack_headroom

#[cfg(target_arch = "x86_64")]
fn main() {
    use smolrun_core::quant::{self, GgmlType};
    use smolrun_kernels::x86_64::{avx2, avx2_fma_f16c_usable};
    use std::hint::black_box;
    use std::time::Instant;

    if !avx2_fma_f16c_usable() {
        println!("this CPU has no AVX2/FMA/F16C");
        return;
    }
    // Random Q4_K super-blocks with moderate f16 scales (d = 0.01, dmin = 0.002).
    let random_blocks = |_ty: GgmlType, n_blocks: usize, seed: u64| -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut bytes: Vec<u8> = (0..n_blocks * 144)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for b in bytes.chunks_exact_mut(144) {
            b[0..2].copy_from_slice(&0x211Eu16.to_le_bytes());
            b[2..4].copy_from_slice(&0x1818u16.to_le_bytes());
        }
        bytes
    };
    let n_cols = 4096;
    let row_bytes = n_cols / 256 * 144;
    let big_rows = (512 << 20) / row_bytes; // 512 MB of weights
    let small_rows = (192 << 10) / row_bytes; // 192 KB: stays in L2
    let big = random_blocks(GgmlType::Q4_K, big_rows * n_cols / 256, 1);
    let small = random_blocks(GgmlType::Q4_K, small_rows * n_cols / 256, 2);
    let x: Vec<f32> = (0..n_cols)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let mut act = vec![0u8; quant::row_bytes(GgmlType::Q8_K, n_cols).unwrap()];
    quant::quantize_row(GgmlType::Q8_K, &x, &mut act).unwrap();

    let matvec = |w: &[u8], out: &mut [f32]| {
        for (y, row) in out.iter_mut().zip(w.chunks_exact(row_bytes)) {
            // SAFETY: AVX2, FMA and F16C checked above.
            *y = unsafe { avx2::vec_dot_q4_k_q8_k(n_cols, row, &act) };
        }
    };
    let read = |w: &[u8]| -> u64 {
        w.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .fold(0u64, |a, b| a.wrapping_add(b))
    };

    for threads in [1usize, 2] {
        // GB/s of `bytes` processed by `threads` threads, each doing `job(part)`, best of 5.
        let run = |data: &[u8], reps: usize, job: &(dyn Fn(&[u8]) + Sync)| -> f64 {
            let part = data.len() / threads / row_bytes * row_bytes;
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                std::thread::scope(|s| {
                    for i in 0..threads {
                        let chunk = &data[i * part..(i + 1) * part];
                        s.spawn(move || {
                            for _ in 0..reps {
                                job(chunk);
                            }
                        });
                    }
                });
                best = best.min(t.elapsed().as_secs_f64());
            }
            (part * threads * reps) as f64 / best / 1e9
        };
        let read_gbs = run(&big, 1, &|w| {
            black_box(read(w));
        });
        let dram = run(&big, 1, &|w| {
            let mut out = vec![0f32; w.len() / row_bytes];
            matvec(w, &mut out);
            black_box(&out);
        });
        let cache = run(&small, 2000, &|w| {
            let mut out = vec![0f32; w.len() / row_bytes];
            matvec(w, &mut out);
            black_box(&out);
        });
        println!(
            "{threads} thread(s): read {read_gbs:.1} GB/s | q4_k dram {dram:.1} GB/s ({:.0} % of \
             read) | q4_k cache {cache:.1} GB/s (compute ceiling, {:.1}x dram)",
            100.0 * dram / read_gbs,
            cache / dram
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("x86-64 only");
}
