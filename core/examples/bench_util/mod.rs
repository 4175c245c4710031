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
