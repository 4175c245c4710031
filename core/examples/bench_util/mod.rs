//! Timing shared by the x86 kernel benchmarks (`x86_k_matmul_bench`, `x86_avx2_k_prompt_bench`,
//! `x86_lowbit_bench`): CPU time of this thread, so a shared machine's other work does not count.

/// This thread's CPU time so far, in ns (Linux's schedstat).
pub fn cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    s.split_whitespace().next().unwrap().parse().unwrap()
}

/// Best of 5 CPU times of one run of `f`, each measured over at least `min_ns` (and 3 runs),
/// in seconds.
pub fn best_cpu_secs(min_ns: u64, f: &mut dyn FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let t = cpu_ns();
            let mut runs = 0;
            while runs < 3 || cpu_ns() - t < min_ns {
                f();
                runs += 1;
            }
            (cpu_ns() - t) as f64 * 1e-9 / runs as f64
        })
        .fold(f64::MAX, f64::min)
}

/// `n_acts` activation rows of `n_cols` (a fixed ramp in -1..1) quantized to Q8_K, back to back:
/// the prompt benchmarks' input. (Each example compiles its own copy of this module; the
/// ones without a prompt do not call it.)
#[allow(dead_code)]
pub fn q8_k_acts(n_acts: usize, n_cols: usize) -> Vec<u8> {
    use smolrun_core::quant::{self, GgmlType};
    let x: Vec<f32> = (0..n_acts * n_cols)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let act_row = quant::row_bytes(GgmlType::Q8_K, n_cols).unwrap();
    let mut acts = vec![0u8; n_acts * act_row];
    for (x, a) in x.chunks_exact(n_cols).zip(acts.chunks_exact_mut(act_row)) {
        quant::quantize_row(GgmlType::Q8_K, x, a).unwrap();
    }
    acts
}
