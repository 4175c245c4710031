//! Prints what the Linux adapter sees on this machine and how long an empty parallel job takes:
//! `cargo run --release -p smolrun-linux --example platform_report [FILE]`.
//! With FILE, also says whether O_DIRECT reads bypass the page cache for it.

use smolrun_core::platform::{Clock, MemoryProbe, Parallel, ReadAt};
use smolrun_linux::{
    default_threads, detect_features, AlignedBuf, CpuTopology, FileReader, LinuxMemory,
    MonotonicClock, PoolOptions, ThreadPool, DEFAULT_SPIN_MICROS,
};
use std::sync::atomic::{AtomicUsize, Ordering};

fn main() {
    println!("cpu features: {:?}", detect_features());
    let topology = CpuTopology::read();
    println!("cpus (number, max kHz): {:?}", topology.cpus);
    println!("fast cpus: {:?}", topology.fast_cpus());
    println!("default cpus: {:?}", smolrun_linux::default_cpus());
    println!("default threads: {}", default_threads());

    let memory = LinuxMemory::new();
    println!("cgroup dirs: {:?}", memory.cgroup_dirs());
    println!(
        "cgroup headroom: {:?} MiB",
        memory.cgroup_headroom().map(|b| b >> 20)
    );
    println!("available: {} MiB", memory.available_bytes() >> 20);
    println!("used (VmRSS): {} MiB", memory.used_bytes() >> 20);

    if let Some(path) = std::env::args().nth(1) {
        match FileReader::open(path.as_ref()) {
            Ok(reader) => read_speed(&path, &reader),
            Err(e) => println!("{}", smolrun_linux::describe_io_error(&e)),
        }
    }

    let clock = MonotonicClock;
    let threads = default_threads().max(2);
    for spin_micros in [0, DEFAULT_SPIN_MICROS] {
        let pool = ThreadPool::with_options(PoolOptions {
            threads,
            pin_cpus: None,
            spin_micros,
        })
        .expect("cannot start worker threads");
        let counter = AtomicUsize::new(0);
        let job = |_: usize| {
            counter.fetch_add(1, Ordering::Relaxed);
        };
        pool.run(&job);
        let jobs = 20_000;
        let start = clock.now_ns();
        for _ in 0..jobs {
            pool.run(&job);
        }
        let per_job = (clock.now_ns() - start) / jobs;
        println!("empty job on {threads} threads, spin {spin_micros}: {per_job} ns");
    }
}

/// Reads up to 256 MiB of the file in 4 MiB `read_direct` calls and prints the rate.
fn read_speed(path: &str, reader: &FileReader) {
    let how = if reader.is_direct() {
        "O_DIRECT"
    } else {
        "O_DIRECT refused, buffered fallback"
    };
    let chunk = 4 << 20;
    let mut buf = AlignedBuf::zeroed(chunk);
    let clock = MonotonicClock;
    let start = clock.now_ns();
    let mut offset = 0u64;
    while offset + chunk as u64 <= reader.len().min(256 << 20) {
        if let Err(e) = reader.read_direct(offset, &mut buf) {
            println!("{}", smolrun_linux::describe_io_error(&e));
            return;
        }
        offset += chunk as u64;
    }
    let seconds = (clock.now_ns() - start) as f64 / 1e9;
    println!(
        "{path}: {how}, read {} MiB in 4 MiB reads at {:.0} MiB/s",
        offset >> 20,
        (offset >> 20) as f64 / seconds.max(1e-9)
    );
}
