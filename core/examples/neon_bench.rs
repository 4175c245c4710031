//! Micro-benchmark of the aarch64 NEON dot kernels against their scalar twins: one quantized
//! activation row dotted with a matrix of weight rows, like one matvec of a layer.
//!
//!     cargo run --release --example neon_bench -- [--rows N] [--cols N] [--force-dotprod]
//!
//! On real hardware it prints ns per row and the weight bandwidth per face. Under qemu the
//! times measure the emulator, not the kernel: there the run only shows that every face runs.
//! `--force-dotprod` runs the sdot faces even when the CPU does not report dotprod; on an
//! ARMv8.0 core that must die with SIGILL (tools/test-aarch64.sh checks it on a cortex-a53).

#[cfg(target_arch = "aarch64")]
mod bench {
    use smolrun_core::quant::{q4_0, q4_k, q5_0, q6_k, q8_0, q8_k, GgmlType};
    use smolrun_kernels::aarch64 as neon;
    use std::hint::black_box;
    use std::time::Instant;

    type Dot = unsafe fn(usize, &[u8], &[u8]) -> f32;

    /// (name, weight type, scalar twin, ARMv8.0 face, dotprod face)
    type Entry = (&'static str, GgmlType, Dot, Dot, Dot);

    const KERNELS: &[Entry] = &[
        (
            "Q4_K x Q8_K",
            GgmlType::Q4_K,
            q4_k::vec_dot,
            neon::vec_dot_q4_k_q8_k_neon,
            neon::vec_dot_q4_k_q8_k_dotprod,
        ),
        (
            "Q6_K x Q8_K",
            GgmlType::Q6_K,
            q6_k::vec_dot,
            neon::vec_dot_q6_k_q8_k_neon,
            neon::vec_dot_q6_k_q8_k_dotprod,
        ),
        (
            "Q8_0 x Q8_0",
            GgmlType::Q8_0,
            q8_0::vec_dot,
            neon::vec_dot_q8_0_q8_0_neon,
            neon::vec_dot_q8_0_q8_0_dotprod,
        ),
        (
            "Q4_0 x Q8_0",
            GgmlType::Q4_0,
            q4_0::vec_dot,
            neon::vec_dot_q4_0_q8_0_neon,
            neon::vec_dot_q4_0_q8_0_dotprod,
        ),
        (
            "Q5_0 x Q8_0",
            GgmlType::Q5_0,
            q5_0::vec_dot,
            neon::vec_dot_q5_0_q8_0_neon,
            neon::vec_dot_q5_0_q8_0_dotprod,
        ),
    ];

    fn arg(args: &[String], name: &str, default: usize) -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().collect();
        let rows = arg(&args, "--rows", 256);
        let cols = arg(&args, "--cols", 2048) / 256 * 256;
        let force = args.iter().any(|a| a == "--force-dotprod");
        let dotprod = std::arch::is_aarch64_feature_detected!("dotprod");
        println!("cpu reports dotprod: {dotprod}; {rows} rows x {cols} columns");
        if force && !dotprod {
            println!("--force-dotprod: running sdot on a CPU without dotprod (expect SIGILL)");
        }
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        for &(name, ty, scalar, plain, sdot) in KERNELS {
            let act_ty = if ty.block_size() == 256 {
                GgmlType::Q8_K
            } else {
                GgmlType::Q8_0
            };
            let mut act = vec![0u8; act_ty.bytes_for(cols as u64).unwrap() as usize];
            match act_ty {
                GgmlType::Q8_K => q8_k::quantize_row(&x, &mut act),
                _ => q8_0::quantize_row(&x, &mut act),
            }
            let row_bytes = ty.bytes_for(cols as u64).unwrap() as usize;
            let mut seed = 0x2545_F491_4F6C_DD1Du64;
            let mut w: Vec<u8> = (0..rows * row_bytes)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed >> 32) as u8
                })
                .collect();
            // Finite, moderate f16 scales (0x2000 ~ 0.008) in every scale field.
            let fields: &[usize] = match ty {
                GgmlType::Q4_K => &[0, 2],
                GgmlType::Q6_K => &[208],
                _ => &[0],
            };
            for blk in w.chunks_exact_mut(ty.type_size()) {
                for &f in fields {
                    blk[f..f + 2].copy_from_slice(&0x2000u16.to_le_bytes());
                }
            }
            let mut faces: Vec<(&str, Dot)> = vec![("scalar", scalar), ("neon", plain)];
            if dotprod || force {
                faces.push(("dotprod", sdot));
            }
            for (face, dot) in faces {
                let reps = 3;
                let start = Instant::now();
                let mut checksum = 0.0f32;
                for _ in 0..reps {
                    for r in w.chunks_exact(row_bytes) {
                        // SAFETY: the dotprod face is in the list only when the CPU reports
                        // dotprod, or when --force-dotprod asks for the SIGILL on purpose.
                        checksum += unsafe { dot(cols, black_box(r), black_box(&act)) };
                    }
                }
                let secs = start.elapsed().as_secs_f64() / reps as f64;
                println!(
                    "{name} {face:<8} {:>9.1} ns/row {:>8.2} GB/s weights  (checksum {checksum:.4})",
                    secs * 1e9 / rows as f64,
                    (rows * row_bytes) as f64 / secs / 1e9
                );
            }
        }
        if dotprod || force {
            interleaved(rows, cols, &x);
        }
    }

    type X4 = (
        GgmlType,
        fn(usize, usize) -> Option<usize>,
        fn(&[u8], usize, usize, &mut [u8]) -> Option<()>,
        unsafe fn(usize, &[u8], &[u8], &mut [f32]),
        Dot,
    );

    /// The matvecs on rows interleaved by 4 (repacked once, as at load time), next to the
    /// one-row dotprod kernel on the same rows.
    fn interleaved(rows: usize, cols: usize, x: &[f32]) {
        let kernels: [X4; 3] = [
            (
                GgmlType::Q4_K,
                neon::q4_k_x4_bytes,
                neon::repack_q4_k_x4,
                neon::matvec_q4_k_x4_dotprod,
                neon::vec_dot_q4_k_q8_k_dotprod,
            ),
            (
                GgmlType::Q8_0,
                neon::q8_0_x4_bytes,
                neon::repack_q8_0_x4,
                neon::matvec_q8_0_x4_dotprod,
                neon::vec_dot_q8_0_q8_0_dotprod,
            ),
            (
                GgmlType::Q5_0,
                neon::q5_0_x4_bytes,
                neon::repack_q5_0_x4,
                neon::matvec_q5_0_x4_dotprod,
                neon::vec_dot_q5_0_q8_0_dotprod,
            ),
        ];
        for (ty, bytes, repack, matvec, one_row) in kernels {
            let act_ty = if ty.block_size() == 256 {
                GgmlType::Q8_K
            } else {
                GgmlType::Q8_0
            };
            let mut act = vec![0u8; act_ty.bytes_for(cols as u64).unwrap() as usize];
            match act_ty {
                GgmlType::Q8_K => q8_k::quantize_row(x, &mut act),
                _ => q8_0::quantize_row(x, &mut act),
            }
            let row_bytes = ty.bytes_for(cols as u64).unwrap() as usize;
            let mut w: Vec<u8> = (0..rows * row_bytes)
                .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                .collect();
            let fields: &[usize] = if ty == GgmlType::Q4_K { &[0, 2] } else { &[0] };
            for blk in w.chunks_exact_mut(ty.type_size()) {
                for &f in fields {
                    blk[f..f + 2].copy_from_slice(&0x2000u16.to_le_bytes());
                }
            }
            let mut packed = vec![0u8; bytes(rows, cols).unwrap()];
            repack(&w, rows, cols, &mut packed).unwrap();
            let mut out = vec![0.0f32; rows];
            let reps = 3;
            let start = Instant::now();
            for _ in 0..reps {
                // SAFETY: called only when the CPU reports dotprod or --force-dotprod asks.
                unsafe { matvec(cols, black_box(&packed), &act, &mut out) };
            }
            let secs = start.elapsed().as_secs_f64() / reps as f64;
            // SAFETY: as above.
            let one_row_sum: f32 = w
                .chunks_exact(row_bytes)
                .map(|r| unsafe { one_row(cols, r, &act) })
                .sum();
            println!(
                "{ty} dotprod x4 {:>9.1} ns/row {:>8.2} GB/s weights  (sum {:.4}, one-row kernel {one_row_sum:.4})",
                secs * 1e9 / rows as f64,
                (rows * row_bytes) as f64 / secs / 1e9,
                out.iter().sum::<f32>()
            );
        }
    }
}

#[cfg(target_arch = "aarch64")]
fn main() {
    bench::main();
}

#[cfg(not(target_arch = "aarch64"))]
fn main() {
    println!("neon_bench measures the aarch64 kernels: build it for an aarch64 target");
}
