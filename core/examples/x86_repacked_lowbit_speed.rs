//! Q2_K and Q1_0 matvec speed on x86-64, one thread: the kernels over the file layout (Q2_K's
//! one-row AVX2 kernel, Q1_0's eight-row VNNI kernel: what ran before the repacked layouts)
//! against the repacked kernels over the `q2_k_x8` (AVX2 and VNNI) and `q1_0_x16` (VNNI)
//! layouts, on Qwen2.5-1.5B's shapes (1536 x 1536 attention, 8960 x 1536 FFN up/gate,
//! 1536 x 8960 FFN down). Checks that all give the same bits for every row, then prints the
//! best of 7 timings of each (figures move with the machine's load; read the ratios).
//!
//!     cargo run --release -p smolrun-core --example x86_repacked_lowbit_speed

#[cfg(target_arch = "x86_64")]
type Rows = fn(usize, &[u8], &[u8], &mut [f32]);

#[cfg(target_arch = "x86_64")]
fn main() {
    use smolrun_core::quant::{self, GgmlType};
    use smolrun_kernels::x86_64::{
        avx2_2bit, avx2_fma_f16c_usable, avx2_lowbit, avx512_vnni_usable,
    };

    if !avx2_fma_f16c_usable() {
        println!("this CPU has no AVX2/FMA/F16C");
        return;
    }
    let vnni = avx512_vnni_usable();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // SAFETY (all): AVX2, FMA and F16C checked above; the VNNI ones run only where usable.
    let q2_one_row: Rows = |n, w, a, out| {
        let rb = w.len() / out.len();
        for (y, row) in out.iter_mut().zip(w.chunks_exact(rb)) {
            *y = unsafe { avx2_2bit::vec_dot_q2_k_q8_k(n, row, a) };
        }
    };
    let q2_x8: Rows = |n, w, a, out| unsafe { avx2_2bit::matvec_q2_k_x8_q8_k(n, w, a, out) };
    let q2_x8_vnni: Rows =
        |n, w, a, out| unsafe { avx2_2bit::matvec_q2_k_x8_q8_k_vnni(n, w, a, out) };
    let q1_rows8: Rows = |n, w, a, out| unsafe { avx2_lowbit::matvec_q1_0_q8_0_vnni(n, w, a, out) };
    let q1_x16: Rows =
        |n, w, a, out| unsafe { avx2_lowbit::matvec_q1_0_x16_q8_0_vnni(n, w, a, out) };
    for (n_rows, n) in [(1536, 1536), (8960, 1536), (1536, 8960)] {
        let x: Vec<f32> = (0..n)
            .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        for ty in [GgmlType::Q2_K, GgmlType::Q1_0] {
            let act_ty = quant::vec_dot_type(ty).unwrap();
            let mut act = vec![0u8; quant::row_bytes(act_ty, n).unwrap()];
            quant::quantize_row(act_ty, &x, &mut act).unwrap();
            let row_bytes = quant::row_bytes(ty, n).unwrap();
            let mut w: Vec<u8> = (0..n_rows * row_bytes).map(|_| next() as u8).collect();
            // f16 scales of moderate size (about 0.01 and 0.005)
            let fields: &[usize] = if ty == GgmlType::Q2_K {
                &[80, 82]
            } else {
                &[0]
            };
            for b in w.chunks_exact_mut(ty.type_size()) {
                for &off in fields {
                    b[off..off + 2].copy_from_slice(&0x211Eu16.to_le_bytes());
                }
            }
            let mut packed = vec![0u8; w.len()];
            let kernels: Vec<(&str, Rows, &[u8])> = if ty == GgmlType::Q2_K {
                avx2_2bit::repack_q2_k_x8(&w, n_rows, n, &mut packed).unwrap();
                let mut k: Vec<(&str, Rows, &[u8])> = vec![
                    ("Q2_K one-row", q2_one_row, &w),
                    ("Q2_K x8 avx2", q2_x8, &packed),
                ];
                if vnni {
                    k.push(("Q2_K x8 vnni", q2_x8_vnni, &packed));
                }
                k
            } else if vnni {
                avx2_lowbit::repack_q1_0_x16(&w, n_rows, n, &mut packed).unwrap();
                vec![("Q1_0 rows8", q1_rows8, &w), ("Q1_0 x16", q1_x16, &packed)]
            } else {
                continue;
            };
            time_all(n_rows, n, w.len(), &act, &kernels);
        }
    }
}

/// Runs each kernel once against the first one's bits, then times it (best of 7).
#[cfg(target_arch = "x86_64")]
fn time_all(n_rows: usize, n: usize, bytes: usize, act: &[u8], kernels: &[(&str, Rows, &[u8])]) {
    use std::hint::black_box;
    use std::time::Instant;
    let mut want = vec![0f32; n_rows];
    (kernels[0].1)(n, kernels[0].2, act, &mut want);
    let mut base = 0.0;
    for &(name, k, wk) in kernels {
        let mut got = vec![f32::NAN; n_rows];
        k(n, wk, act, &mut got);
        assert!(
            want.iter()
                .zip(&got)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name}: not the bits of {}",
            kernels[0].0
        );
        let reps = 20;
        let mut best = f64::MAX;
        for _ in 0..7 {
            let t = Instant::now();
            for _ in 0..reps {
                k(n, black_box(wk), black_box(act), &mut got);
                black_box(&mut got);
            }
            best = best.min(t.elapsed().as_secs_f64() / reps as f64);
        }
        if base == 0.0 {
            base = best;
        }
        println!(
            "{n_rows:>5} x {n:>5} {name:>12}: {:8.1} us, {:6.2} G weights/s, {:6.2} GB/s, {:.2}x",
            best * 1e6,
            (n_rows * n) as f64 / best / 1e9,
            bytes as f64 / best / 1e9,
            base / best
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("x86-64 only");
}
