//! The decode hot path must not allocate: after the pool is built, starting and finishing a
//! job (with the caller and workers sleeping in between, and with a row dispenser) allocates
//! nothing. A counting global allocator checks it; this file holds a single test so nothing
//! else in the process allocates meanwhile.

use smolrun_core::platform::{Parallel, RowDispenser};
use smolrun_linux::{PoolOptions, ThreadPool};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct CountingAllocator;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, only counting.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

#[test]
fn jobs_allocate_nothing_after_creation() {
    for spin_micros in [0, 100] {
        let pool = ThreadPool::with_options(PoolOptions {
            threads: 4,
            pin_cpus: None,
            spin_micros,
        })
        .unwrap();
        let sums: [AtomicUsize; 4] = Default::default();
        let job = |index: usize| {
            sums[index].fetch_add(index + 1, Ordering::Relaxed);
        };
        // Warm-up: thread start-up (thread names, TLS) happens on the workers' first run.
        pool.run(&job);
        std::thread::sleep(std::time::Duration::from_millis(50));

        let before = ALLOCATIONS.load(Ordering::SeqCst);
        for _ in 0..2_000 {
            pool.run(&job);
            let rows = RowDispenser::new(4096, pool.n_threads(), 8);
            pool.run(&|_| while rows.grab().is_some() {});
        }
        let after = ALLOCATIONS.load(Ordering::SeqCst);
        assert_eq!(after - before, 0, "jobs allocated {} times", after - before);
        assert_eq!(sums[3].load(Ordering::Relaxed), 4 * 2_001);
    }
}
