//! Q2_K and TQ2_0 matvec speed on x86-64: the AVX2 faces (`avx2_2bit`) against the scalar
//! twins, one thread, a 1536 x 1536 matrix (Qwen2.5-1.5B's attention projections), in
//! G weights/s and GB/s of weight bytes, with the speedup. Also checks that both give the
//! same bits for every row (they promise to). A program, not a timed test: the figures move
//! with the machine's load, so read the ratio.
//!
//!     cargo run --release -p smolrun-core --example x86_two_bit_speed

#[cfg(target_arch = "x86_64")]
fn main() {
    use smolrun_core::quant::{self, q2_k, tq2_0, GgmlType};
    use smolrun_kernels::x86_64::{avx2_2bit, avx2_fma_f16c_usable};
    use std::hint::black_box;
    use std::time::Instant;

    if !avx2_fma_f16c_usable() {
        println!("this CPU has no AVX2/FMA/F16C");
        return;
    }
    let n = 1536;
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let x: Vec<f32> = (0..n)
        .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let mut act = vec![0u8; quant::row_bytes(GgmlType::Q8_K, n).unwrap()];
    quant::quantize_row(GgmlType::Q8_K, &x, &mut act).unwrap();

    type Dot = fn(usize, &[u8], &[u8]) -> f32;
    // SAFETY (both): AVX2, FMA and F16C checked above.
    let q2_k_avx2: Dot = |n, w, a| unsafe { avx2_2bit::vec_dot_q2_k_q8_k(n, w, a) };
    let tq2_0_avx2: Dot = |n, w, a| unsafe { avx2_2bit::vec_dot_tq2_0_q8_k(n, w, a) };
    let cases: [(GgmlType, &[usize], Dot, Dot); 2] = [
        // f16 d and dmin of moderate size at their offsets.
        (GgmlType::Q2_K, &[80, 82], q2_k::vec_dot, q2_k_avx2),
        (GgmlType::TQ2_0, &[64], tq2_0::vec_dot, tq2_0_avx2),
    ];
    for (ty, f16_fields, scalar, avx2) in cases {
        let row_bytes = quant::row_bytes(ty, n).unwrap();
        let mut w: Vec<u8> = (0..n * row_bytes).map(|_| next() as u8).collect();
        for b in w.chunks_exact_mut(ty.type_size()) {
            for &off in f16_fields {
                b[off..off + 2].copy_from_slice(&0x211Eu16.to_le_bytes()); // about 0.01
            }
        }
        let matvec = |dot: Dot, out: &mut [f32]| {
            for (y, row) in out.iter_mut().zip(w.chunks_exact(row_bytes)) {
                *y = dot(n, row, black_box(&act));
            }
        };
        let (mut want, mut got) = (vec![0f32; n], vec![0f32; n]);
        matvec(scalar, &mut want);
        matvec(avx2, &mut got);
        assert!(
            want.iter()
                .zip(&got)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{ty}: the AVX2 face does not give the scalar bits"
        );
        let time = |dot: Dot, out: &mut [f32]| {
            let reps = if dot as usize == scalar as usize {
                20
            } else {
                400
            };
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                for _ in 0..reps {
                    matvec(dot, out);
                    black_box(&mut *out);
                }
                best = best.min(t.elapsed().as_secs_f64() / reps as f64);
            }
            best
        };
        let t_scalar = time(scalar, &mut want);
        let t_avx2 = time(avx2, &mut got);
        let weights = (n * n) as f64;
        let bytes = w.len() as f64;
        for (face, t) in [("scalar", t_scalar), ("avx2", t_avx2)] {
            println!(
                "{ty:>5} {face:>6}: {:8.1} us per 1536x1536 matvec, {:6.2} G weights/s, {:6.2} GB/s",
                t * 1e6,
                weights / t / 1e9,
                bytes / t / 1e9
            );
        }
        println!(
            "{ty:>5} speedup: {:.1}x (bit for bit the same rows)",
            t_scalar / t_avx2
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("x86-64 only");
}
