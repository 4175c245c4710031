//! The thread pool behind core's [`Parallel`]: persistent workers that wait between jobs on a
//! spin-then-futex barrier.
//!
//! Decoding one token runs a few hundred small jobs (one per matvec), tens of microseconds
//! each. Waking a sleeping thread costs a syscall and a few microseconds of scheduler latency,
//! so workers first spin for a bounded time on the job counter (a job usually
//! follows soon), and only then sleep in `futex(FUTEX_WAIT)`, so an idle engine does not burn
//! the CPU. Starting a job writes one pointer and bumps a counter; nothing is allocated.
//!
//! The spin budget adapts ([`SpinBudget`]): on a dedicated device spins succeed and the budget
//! stays at its maximum; on a machine with more runnable threads than cores a spinning thread
//! only delays the thread it waits for (and the scheduler then favours everyone else over it),
//! so failed spins halve the budget down to a short probe. Measured on a 2-core VM under a
//! load of 13: fixed spinning made an empty job ~30x slower than sleeping at once.
//!
//! The calling thread takes part in every job as worker 0, so a pool of `n` threads starts
//! `n - 1` OS threads.

#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::cpu::cpu_setsize;
use smolrun_core::platform::Parallel;
use std::cell::UnsafeCell;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A job as the workers see it: the caller's closure with its lifetime erased. It is only
/// dereferenced between the start of a job and the end-of-job barrier, while `run` keeps the
/// real borrow alive.
type JobPtr = *const (dyn Fn(usize) + Sync + 'static);

/// futex(2) on one 32-bit word, process-private.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: the address is a live, aligned u32; a null timeout waits until woken. The kernel
    // returns at once (EAGAIN) when the word no longer holds `expected`; EINTR and spurious
    // wake-ups are handled by the callers' loops, so the result is not needed.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn futex_wake(word: &AtomicU32, waiters: i32) {
    // SAFETY: as futex_wait; FUTEX_WAKE only reads the address to find the waiters.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            waiters,
        );
    }
}

/// Darwin (iOS) has no futex in its public API: one process-wide mutex and condition variable
/// stand in. A waiter checks the word under the mutex and a waker takes the mutex before it
/// notifies, so a wake-up between the check and the sleep cannot be lost; every waiter is
/// woken and re-checks its own word (the callers loop on spurious wake-ups anyway). Sleeping
/// is the slow path after the spin, so one shared lock costs nothing per matvec.
#[cfg(any(test, not(any(target_os = "linux", target_os = "android"))))]
mod portable_futex {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Condvar, Mutex};

    static LOCK: Mutex<()> = Mutex::new(());
    static WOKEN: Condvar = Condvar::new();

    pub(super) fn futex_wait(word: &AtomicU32, expected: u32) {
        let guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if word.load(Ordering::Acquire) == expected {
            drop(WOKEN.wait(guard));
        }
    }

    pub(super) fn futex_wake(_word: &AtomicU32, _waiters: i32) {
        drop(LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        WOKEN.notify_all();
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::sync::Arc;

        /// The stand-in keeps futex's contract: no sleep when the word has moved on, and a
        /// wake after the word changed always reaches a sleeper (tried many times to hit
        /// the window between the sleeper's check and its sleep).
        #[test]
        fn no_lost_wake_ups() {
            futex_wait(&AtomicU32::new(7), 6);
            for _ in 0..200 {
                let word = Arc::new(AtomicU32::new(0));
                let sleeper = {
                    let word = Arc::clone(&word);
                    std::thread::spawn(move || {
                        while word.load(Ordering::Acquire) == 0 {
                            futex_wait(&word, 0);
                        }
                    })
                };
                word.store(1, Ordering::Release);
                futex_wake(&word, 1);
                sleeper.join().unwrap();
            }
        }
    }
}
#[cfg(not(any(target_os = "linux", target_os = "android")))]
use portable_futex::{futex_wait, futex_wake};

/// Pins the calling thread to one CPU: Darwin has no CPU affinity, so this says so.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn pin_current_thread(_cpu: usize) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "this system has no CPU affinity (sched_setaffinity): run without pinning",
    ))
}

/// Pins the calling thread to one CPU (sched_setaffinity).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= cpu_setsize() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set, CPU_SET stays within it (checked
    // above), and pid 0 means the calling thread.
    let status = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if status == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// How a [`ThreadPool`] is built.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Workers including the calling thread; 0 is treated as 1.
    pub threads: usize,
    /// When set, worker `i` (1..threads) is pinned to `pin_cpus[i % len]`. The calling thread,
    /// worker 0, is left alone: pin it with [`pin_current_thread`] if wanted.
    pub pin_cpus: Option<Vec<usize>>,
    /// At most how long (microseconds) a waiting thread spins before it sleeps in the kernel
    /// (the budget adapts below this; 0 never spins).
    pub spin_micros: u32,
}

/// How long a waiting thread spins at most. Measured by the clock, not counted in iterations:
/// one `pause` takes 25 ns on the EPYC that CI runs on and ~40 ns on recent Intel cores, one
/// `yield` about a nanosecond on Cortex-A55, so an iteration count means a different wait on
/// every core. The gaps to cover are the serial steps between two matvecs of a token (norms,
/// quantizing, a single KV head's attention) and the sampling between two tokens (an argmax
/// over 262K logits is ~100 us on x86, several times that on an A55). At 50 us (2000 pauses
/// on EPYC), Gemma 3 270M's workers slept 13 times per token and decoded 150-158 tok/s with a
/// 64K head; spinning up to 1 ms, 0-1 sleeps per token and 166-180 tok/s (2 threads).
pub const DEFAULT_SPIN_MICROS: u32 = 1000;

impl PoolOptions {
    pub fn new(threads: usize) -> PoolOptions {
        PoolOptions {
            threads,
            pin_cpus: None,
            spin_micros: DEFAULT_SPIN_MICROS,
        }
    }
}

/// The shortest spin once the budget has shrunk: enough to notice that waits have become short
/// again (the budget then doubles back), too short to cost anything when they have not.
const PROBE_SPIN_MICROS: u32 = 2;

/// Readiness checks between two clock reads (a clock read costs about as much as 1-20 checks).
const CHECKS_PER_CLOCK_READ: u32 = 16;

/// A waiter's spin budget: doubles after a wait that spinning satisfied, halves after one that
/// ended in the kernel, between [`PROBE_SPIN_MICROS`] and the configured maximum (0 turns
/// spinning off).
#[derive(Debug, Clone, Copy)]
struct SpinBudget {
    micros: u32,
    max: u32,
}

impl SpinBudget {
    fn new(max: u32) -> SpinBudget {
        SpinBudget { micros: max, max }
    }

    /// Spins until `ready()` or the budget runs out; says which, and adapts the budget.
    fn spin(&mut self, mut ready: impl FnMut() -> bool) -> bool {
        if self.micros > 0 {
            let limit = Duration::from_micros(u64::from(self.micros));
            let start = Instant::now();
            loop {
                for _ in 0..CHECKS_PER_CLOCK_READ {
                    if ready() {
                        self.micros = (self.micros * 2).clamp(PROBE_SPIN_MICROS, self.max);
                        return true;
                    }
                    std::hint::spin_loop();
                }
                if start.elapsed() >= limit {
                    break;
                }
            }
        }
        self.micros = (self.micros / 2).max(PROBE_SPIN_MICROS.min(self.max));
        ready()
    }
}

/// State shared by the caller and the workers. The atomics are the protocol; `job` is plain
/// memory whose ownership the protocol passes back and forth.
struct Shared {
    /// Bumped by the caller to start a job (or to shut down). Workers wait on it (futex word).
    generation: AtomicU32,
    /// Workers (excluding the caller) that have not finished the current job. The caller waits
    /// on it (futex word) at the end of a job.
    pending: AtomicU32,
    /// Workers that are about to sleep or sleep on `generation`: the caller skips the wake
    /// syscall when there are none.
    sleeping_workers: AtomicU32,
    /// 1 while the caller is about to sleep or sleeps on `pending`.
    caller_sleeping: AtomicU32,
    /// Written by the caller before bumping `generation`, read by workers after seeing it.
    job: UnsafeCell<Option<JobPtr>>,
    shutdown: AtomicBool,
    worker_panicked: AtomicBool,
    /// The caller's [`SpinBudget`] (microseconds) between runs (only touched by the thread inside `run`).
    caller_spin_micros: AtomicU32,
    max_spin_micros: u32,
}

// SAFETY: `job` is written only by the thread inside `run` while no worker reads it (all have
// decremented `pending` for the previous job) and read by workers only after the Release bump of
// `generation` that follows the write. The closure it points to is Sync.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer is only a borrow handed between threads under that protocol.
unsafe impl Send for Shared {}

impl Shared {
    /// Waits until `generation` differs from `seen`; returns the new value.
    fn wait_for_job(&self, seen: u32, budget: &mut SpinBudget) -> u32 {
        if budget.spin(|| self.generation.load(Ordering::Acquire) != seen) {
            return self.generation.load(Ordering::Acquire);
        }
        loop {
            let now = self.generation.load(Ordering::Acquire);
            if now != seen {
                return now;
            }
            // SeqCst on both sides (here and in `start_job`) makes sure that either the caller
            // sees this thread as sleeping and wakes it, or the kernel sees the new generation
            // and does not put it to sleep.
            self.sleeping_workers.fetch_add(1, Ordering::SeqCst);
            futex_wait(&self.generation, seen);
            self.sleeping_workers.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn start_job(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        if self.sleeping_workers.load(Ordering::SeqCst) > 0 {
            futex_wake(&self.generation, i32::MAX);
        }
    }

    /// A worker's end of the job: the last one wakes the caller if it sleeps.
    fn finish_job(&self) {
        if self.pending.fetch_sub(1, Ordering::SeqCst) == 1
            && self.caller_sleeping.load(Ordering::SeqCst) != 0
        {
            futex_wake(&self.pending, 1);
        }
    }

    /// The caller's end of the job: waits until every worker has finished.
    fn wait_for_workers(&self) {
        let mut budget = SpinBudget {
            micros: self.caller_spin_micros.load(Ordering::Relaxed),
            max: self.max_spin_micros,
        };
        let done_spinning = budget.spin(|| self.pending.load(Ordering::Acquire) == 0);
        self.caller_spin_micros
            .store(budget.micros, Ordering::Relaxed);
        if done_spinning {
            return;
        }
        loop {
            let left = self.pending.load(Ordering::Acquire);
            if left == 0 {
                return;
            }
            self.caller_sleeping.store(1, Ordering::SeqCst);
            let left = self.pending.load(Ordering::SeqCst);
            if left != 0 {
                futex_wait(&self.pending, left);
            }
            self.caller_sleeping.store(0, Ordering::SeqCst);
        }
    }
}

fn worker_loop(shared: &Shared, index: usize) {
    // Not a fresh load: the first job may have been started before this thread got to run,
    // and reading its generation here would make the worker skip it. Workers are spawned
    // before any job, at generation 0.
    let mut seen = 0;
    let mut budget = SpinBudget::new(shared.max_spin_micros);
    loop {
        seen = shared.wait_for_job(seen, &mut budget);
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: the caller wrote the job before bumping `generation` (Acquire above pairs
        // with it) and keeps the closure borrowed until `pending` reaches 0.
        let job = unsafe { (*shared.job.get()).map(|ptr| &*ptr) };
        if let Some(job) = job {
            if panic::catch_unwind(AssertUnwindSafe(|| job(index))).is_err() {
                shared.worker_panicked.store(true, Ordering::Relaxed);
            }
        }
        shared.finish_job();
    }
}

/// Persistent worker threads implementing [`Parallel`].
///
/// `run` from inside a job (or from a second thread while a job runs) does not deadlock: it
/// runs that job's indices one after another on the calling thread.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
    /// Held for the duration of a `run`.
    busy: AtomicBool,
}

impl ThreadPool {
    /// A pool of `threads` workers (including the caller), unpinned, default spinning.
    pub fn new(threads: usize) -> io::Result<ThreadPool> {
        ThreadPool::with_options(PoolOptions::new(threads))
    }

    pub fn with_options(options: PoolOptions) -> io::Result<ThreadPool> {
        let threads = options.threads.max(1);
        let shared = Arc::new(Shared {
            generation: AtomicU32::new(0),
            pending: AtomicU32::new(0),
            sleeping_workers: AtomicU32::new(0),
            caller_sleeping: AtomicU32::new(0),
            job: UnsafeCell::new(None),
            shutdown: AtomicBool::new(false),
            worker_panicked: AtomicBool::new(false),
            caller_spin_micros: AtomicU32::new(options.spin_micros),
            max_spin_micros: options.spin_micros,
        });
        let mut pool = ThreadPool {
            shared,
            workers: Vec::with_capacity(threads - 1),
            threads,
            busy: AtomicBool::new(false),
        };
        for index in 1..threads {
            let shared = Arc::clone(&pool.shared);
            let cpu = options
                .pin_cpus
                .as_ref()
                .filter(|cpus| !cpus.is_empty())
                .map(|cpus| cpus[index % cpus.len()]);
            let handle = std::thread::Builder::new()
                .name(format!("smolrun-worker-{index}"))
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        // A CPU that is offline or outside our cgroup's cpuset: run unpinned
                        // rather than not at all.
                        let _ = pin_current_thread(cpu);
                    }
                    worker_loop(&shared, index)
                });
            match handle {
                Ok(handle) => pool.workers.push(handle),
                // Dropping `pool` shuts down the workers started so far.
                Err(e) => return Err(e),
            }
        }
        Ok(pool)
    }

    fn run_sequentially(&self, job: &(dyn Fn(usize) + Sync)) {
        for index in 0..self.threads {
            job(index);
        }
    }
}

impl Parallel for ThreadPool {
    fn n_threads(&self) -> usize {
        self.threads
    }

    fn run(&self, job: &(dyn Fn(usize) + Sync)) {
        if self.threads == 1 {
            return job(0);
        }
        if self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return self.run_sequentially(job);
        }
        let shared = &*self.shared;
        // SAFETY: the lifetime is erased only for the workers' copy of the pointer; this
        // function does not return (nor unwind) before `wait_for_workers` has seen every worker
        // finish with it, so the borrow outlives every use.
        let erased: JobPtr =
            unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), JobPtr>(job) };
        // SAFETY: no worker reads `job` now: all finished the previous job (pending was 0).
        unsafe { *shared.job.get() = Some(erased) };
        shared
            .pending
            .store(self.workers.len() as u32, Ordering::Relaxed);
        shared.start_job();
        let caller_result = panic::catch_unwind(AssertUnwindSafe(|| job(0)));
        shared.wait_for_workers();
        // SAFETY: every worker is done with the pointer.
        unsafe { *shared.job.get() = None };
        let worker_panicked = shared.worker_panicked.swap(false, Ordering::Relaxed);
        self.busy.store(false, Ordering::Release);
        if let Err(payload) = caller_result {
            panic::resume_unwind(payload);
        }
        if worker_panicked {
            panic!(
                "a smolrun worker thread panicked inside a parallel job (see its message above)"
            );
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.start_job();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smolrun_core::platform::RowDispenser;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Runs `body` on its own thread and fails if it does not finish in time (a deadlock
    /// would otherwise hang the test run).
    fn within(seconds: u64, body: impl FnOnce() + Send + 'static) {
        let (done, finished) = mpsc::channel();
        let worker = std::thread::spawn(move || {
            body();
            let _ = done.send(());
        });
        match finished.recv_timeout(Duration::from_secs(seconds)) {
            Ok(()) => worker.join().unwrap(),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                if let Err(panic) = worker.join() {
                    panic::resume_unwind(panic);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("pool test did not finish in {seconds} s: deadlock")
            }
        }
    }

    #[test]
    fn spin_budget_shrinks_on_failed_spins_and_grows_back() {
        let mut budget = SpinBudget::new(40);
        assert!(!budget.spin(|| false));
        assert_eq!(budget.micros, 20);
        for _ in 0..20 {
            budget.spin(|| false);
        }
        assert_eq!(budget.micros, PROBE_SPIN_MICROS);
        let mut checks = 0;
        assert!(budget.spin(|| {
            checks += 1;
            checks == 3
        }));
        assert_eq!(budget.micros, 2 * PROBE_SPIN_MICROS);
        for _ in 0..20 {
            budget.spin(|| true);
        }
        assert_eq!(budget.micros, 40);
        let mut never = SpinBudget::new(0);
        assert!(!never.spin(|| false));
        assert_eq!(never.micros, 0);
        assert!(
            never.spin(|| true),
            "a ready condition must be seen even without spinning"
        );
    }

    #[test]
    fn every_index_runs_once_per_job_for_1_to_8_threads() {
        within(120, || {
            for threads in 1..=8 {
                // Short spins so 8 threads on a 2-core machine also exercise the futex path.
                for spin_micros in [0, 20] {
                    let pool = ThreadPool::with_options(PoolOptions {
                        threads,
                        pin_cpus: None,
                        spin_micros,
                    })
                    .unwrap();
                    assert_eq!(pool.n_threads(), threads);
                    let counts: Vec<AtomicUsize> =
                        (0..threads).map(|_| AtomicUsize::new(0)).collect();
                    let jobs = 300;
                    for _ in 0..jobs {
                        pool.run(&|index| {
                            counts[index].fetch_add(1, Ordering::Relaxed);
                        });
                    }
                    for (index, count) in counts.iter().enumerate() {
                        assert_eq!(
                            count.load(Ordering::Relaxed),
                            jobs,
                            "worker {index} of {threads}"
                        );
                    }
                }
            }
        });
    }

    #[test]
    fn results_written_in_a_job_are_visible_after_it() {
        within(60, || {
            let pool = ThreadPool::new(4).unwrap();
            let mut out = vec![0u64; 1000];
            for round in 0..200u64 {
                let rows = RowDispenser::new(out.len(), pool.n_threads(), 4);
                let cells: Vec<AtomicUsize> = out.iter().map(|_| AtomicUsize::new(0)).collect();
                pool.run(&|_| {
                    while let Some(chunk) = rows.grab() {
                        for row in chunk {
                            cells[row].store(row * 3 + round as usize, Ordering::Relaxed);
                        }
                    }
                });
                for (slot, cell) in out.iter_mut().zip(&cells) {
                    *slot = cell.load(Ordering::Relaxed) as u64;
                }
                assert!(out
                    .iter()
                    .enumerate()
                    .all(|(i, &v)| v == i as u64 * 3 + round));
            }
        });
    }

    #[test]
    fn dispenser_hands_out_every_row_exactly_once_across_threads() {
        within(60, || {
            for threads in 1..=8 {
                let pool = ThreadPool::new(threads).unwrap();
                for (n_rows, min_chunk) in [(0, 1), (1, 1), (7, 4), (1000, 1), (4099, 16)] {
                    let hits: Vec<AtomicU32> = (0..n_rows).map(|_| AtomicU32::new(0)).collect();
                    let rows = RowDispenser::new(n_rows, threads, min_chunk);
                    pool.run(&|_| {
                        while let Some(chunk) = rows.grab() {
                            for row in chunk {
                                hits[row].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                    for (row, hit) in hits.iter().enumerate() {
                        assert_eq!(hit.load(Ordering::Relaxed), 1, "row {row} of {n_rows}");
                    }
                }
            }
        });
    }

    #[test]
    fn nested_run_executes_sequentially_instead_of_deadlocking() {
        within(30, || {
            let pool = ThreadPool::new(3).unwrap();
            let inner_calls = AtomicUsize::new(0);
            pool.run(&|_| {
                pool.run(&|_| {
                    inner_calls.fetch_add(1, Ordering::Relaxed);
                });
            });
            assert_eq!(inner_calls.load(Ordering::Relaxed), 9);
        });
    }

    #[test]
    fn a_panicking_worker_is_reported_and_the_pool_keeps_working() {
        within(30, || {
            let pool = ThreadPool::new(3).unwrap();
            let result = panic::catch_unwind(AssertUnwindSafe(|| {
                pool.run(&|index| assert_ne!(index, 2, "worker 2 fails on purpose"));
            }));
            assert!(result.is_err());
            let ran = AtomicUsize::new(0);
            pool.run(&|_| {
                ran.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(ran.load(Ordering::Relaxed), 3);
        });
    }

    #[test]
    fn pinned_workers_run() {
        within(30, || {
            let cpus: Vec<usize> =
                (0..std::thread::available_parallelism().unwrap().get()).collect();
            let pool = ThreadPool::with_options(PoolOptions {
                threads: 3,
                pin_cpus: Some(cpus),
                spin_micros: 5,
            })
            .unwrap();
            let ran = AtomicUsize::new(0);
            pool.run(&|_| {
                ran.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(ran.load(Ordering::Relaxed), 3);
        });
    }
}
