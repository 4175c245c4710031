//! The few things core asks of the operating system, as traits the platform crates implement.
//!
//! Core never opens a file or starts a thread itself: it is handed a `ReadAt` for bytes that are
//! not mapped, a `MemoryProbe` to size itself against, and a `Parallel` to split work over cores.

use alloc::string::String;
use core::fmt;
use core::ops::Range;
use core::sync::atomic::{AtomicUsize, Ordering};

/// An I/O failure as seen by core: the platform keeps the OS error code, the file and what was
/// being done, so the message can say which read of which file failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoError {
    /// `errno` (or the platform's equivalent); [`IoError::UNEXPECTED_EOF`] when the file ended
    /// before the requested range did; 0 when there is no OS code.
    pub code: i32,
    /// What was being done, e.g. "pread" or "open O_DIRECT".
    pub op: &'static str,
    /// The file, as the platform names it (a path); empty when unknown.
    pub file: String,
    pub offset: u64,
    pub len: u64,
}

impl IoError {
    /// `code` of a read that reached the end of the file before filling its buffer.
    pub const UNEXPECTED_EOF: i32 = -1;
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = if self.file.is_empty() {
            "(unnamed file)"
        } else {
            self.file.as_str()
        };
        write!(
            f,
            "{file}: {} of {} bytes at offset {} failed: ",
            self.op, self.len, self.offset
        )?;
        match self.code {
            IoError::UNEXPECTED_EOF => write!(
                f,
                "the file ends before the range does (is it truncated? fetch it again)"
            ),
            0 => write!(f, "no OS error code"),
            code => write!(f, "os error {code}"),
        }
    }
}

/// Reads bytes of one file at an offset (pread). Implementations must fill the whole buffer or
/// fail: a short read at end of file is an error, not a partial success.
pub trait ReadAt {
    /// Total size of the file in bytes.
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Buffered read of exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError>;
    /// Read that bypasses the page cache where the platform can (O_DIRECT, F_NOCACHE).
    /// `buf` must be aligned to [`ReadAt::direct_alignment`] and `offset`/`len` multiples of it.
    /// Because lengths are whole alignment blocks, the last block of a file may reach past its
    /// end: those bytes (fewer than one alignment block) are zero-filled; a range that reaches
    /// further is an error. The default falls back to a buffered read.
    fn read_direct(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.read_at(offset, buf)
    }
    /// Alignment that `read_direct` needs for buffer address, offset and length.
    fn direct_alignment(&self) -> usize {
        1
    }
}

/// A shared reader reads as the reader does (a store borrows the file the engine opened).
impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        (**self).read_at(offset, buf)
    }
    fn read_direct(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        (**self).read_direct(offset, buf)
    }
    fn direct_alignment(&self) -> usize {
        (**self).direct_alignment()
    }
}

/// How much memory this process may still use, as the platform best knows it.
pub trait MemoryProbe {
    /// Bytes the process can still allocate before the OS is likely to kill it or refuse.
    fn available_bytes(&self) -> u64;
    /// Bytes the process uses now (resident set or footprint).
    fn used_bytes(&self) -> u64;
}

/// Runs a closure on `n` workers, each getting its index; returns when all are done.
///
/// A job splits its work by index, or shares a [`RowDispenser`] that every worker grabs rows
/// from. Implementations must not allocate per `run`: it is called for every matvec.
pub trait Parallel {
    fn n_threads(&self) -> usize;
    fn run(&self, job: &(dyn Fn(usize) + Sync));
}

/// Hands out the rows `0..n_rows` of one job to the workers that run it, each row exactly once,
/// in shrinking chunks (guided scheduling): early grabs are big so the counter is touched
/// rarely, late grabs are small so a worker that started late or runs on a slow core does not
/// leave the others waiting at the end.
///
/// Each grab takes `max(min_chunk, remaining / (2 * threads))` rows, rounded down to a
/// multiple of `min_chunk`, so every chunk but the last starts and ends on a multiple of
/// `min_chunk` (kernels that process rows four at a time ask for `min_chunk = 4`).
///
/// It lives on the stack of whoever starts the job; no allocation.
///
/// ```
/// # use smolrun_core::platform::{Parallel, RowDispenser, SingleThread};
/// let pool = SingleThread;
/// let rows = RowDispenser::new(1000, pool.n_threads(), 16);
/// pool.run(&|_worker| {
///     while let Some(chunk) = rows.grab() {
///         for _row in chunk { /* one row of the matvec */ }
///     }
/// });
/// ```
pub struct RowDispenser {
    next_row: AtomicUsize,
    n_rows: usize,
    min_chunk: usize,
    /// `2 * threads`: the divisor of the remaining rows.
    chunk_divisor: usize,
}

impl RowDispenser {
    /// `threads` and `min_chunk` of 0 are treated as 1.
    pub const fn new(n_rows: usize, threads: usize, min_chunk: usize) -> RowDispenser {
        let threads = if threads == 0 { 1 } else { threads };
        RowDispenser {
            next_row: AtomicUsize::new(0),
            n_rows,
            min_chunk: if min_chunk == 0 { 1 } else { min_chunk },
            chunk_divisor: 2 * threads,
        }
    }

    /// The next chunk of rows, or `None` when all rows have been handed out.
    pub fn grab(&self) -> Option<Range<usize>> {
        let mut start = self.next_row.load(Ordering::Relaxed);
        loop {
            if start >= self.n_rows {
                return None;
            }
            let remaining = self.n_rows - start;
            let guided = remaining / self.chunk_divisor;
            let chunk = (guided / self.min_chunk).max(1) * self.min_chunk;
            let end = start + chunk.min(remaining);
            // Relaxed is enough: the counter only partitions the rows; the data written for a
            // row is published to the caller by the pool's end-of-job barrier.
            match self.next_row.compare_exchange_weak(
                start,
                end,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(start..end),
                Err(seen) => start = seen,
            }
        }
    }

    /// Starts handing out the same rows again (for a dispenser reused across jobs; only call
    /// it between jobs, when no worker is grabbing).
    pub fn reset(&self) {
        self.next_row.store(0, Ordering::Relaxed);
    }

    pub fn n_rows(&self) -> usize {
        self.n_rows
    }
}

/// Runs everything on the calling thread: the reference and the fallback.
pub struct SingleThread;

impl Parallel for SingleThread {
    fn n_threads(&self) -> usize {
        1
    }
    fn run(&self, job: &(dyn Fn(usize) + Sync)) {
        job(0)
    }
}

/// A wake-up call between threads, for core code that must wait for another thread (a compute
/// thread for a weight being read, a reader thread for room to read into) and cannot block on
/// its own. The platform builds it on a mutex and a condition variable.
///
/// Use: read [`Signal::epoch`], check the condition, and if it does not hold, [`Signal::wait`]
/// for that epoch; whoever changes the condition calls [`Signal::notify`] afterwards. A notify
/// between the check and the wait bumps the epoch, so the wait returns at once: no wake-up is
/// lost.
pub trait Signal: Send + Sync {
    /// The number of notifies so far.
    fn epoch(&self) -> u64;
    /// Blocks until the epoch differs from `seen` (it may also return early).
    fn wait(&self, seen: u64);
    /// Bumps the epoch and wakes every waiter.
    fn notify(&self);
}

/// A [`Signal`] that spins: for tests and for platforms without a condition variable.
#[derive(Debug, Default)]
pub struct SpinSignal {
    epoch: core::sync::atomic::AtomicU64,
}

impl Signal for SpinSignal {
    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
    fn wait(&self, seen: u64) {
        while self.epoch.load(Ordering::Acquire) == seen {
            core::hint::spin_loop();
        }
    }
    fn notify(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }
}

/// Monotonic clock in nanoseconds, for speeds reported by core.
pub trait Clock {
    fn now_ns(&self) -> u64;
}

/// CPU features core's kernel dispatch chooses from. Filled by the platform at start-up from
/// getauxval(AT_HWCAP), sysctl or cpuid; never decided at compile time alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    pub neon: bool,
    pub dotprod: bool,
    pub fp16: bool,
    pub i8mm: bool,
    pub avx2: bool,
    pub fma: bool,
    pub f16c: bool,
    pub avx512f: bool,
    pub avx512bw: bool,
    pub avx512vnni: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn dispenser_chunks_shrink_and_cover_every_row_once() {
        let rows = RowDispenser::new(1000, 4, 8);
        let mut seen = vec![0u8; 1000];
        let mut sizes = Vec::new();
        while let Some(chunk) = rows.grab() {
            assert_eq!(
                chunk.start % 8,
                0,
                "chunk {chunk:?} is not on a multiple of 8"
            );
            sizes.push(chunk.len());
            for row in chunk {
                seen[row] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
        // 1000 / 8 = 125 -> 120 rows, then 880 / 8 = 110 -> 104, ... down to min_chunk.
        assert_eq!(&sizes[..3], &[120, 104, 96]);
        assert_eq!(*sizes.last().unwrap(), 8);
        assert!(sizes.windows(2).all(|w| w[0] >= w[1]));
        assert_eq!(rows.grab(), None);
        rows.reset();
        assert_eq!(rows.grab(), Some(0..120));
    }

    #[test]
    fn dispenser_last_chunk_is_cut_to_the_rows_left() {
        let rows = RowDispenser::new(10, 1, 4);
        assert_eq!(rows.grab(), Some(0..4));
        assert_eq!(rows.grab(), Some(4..8));
        assert_eq!(rows.grab(), Some(8..10));
        assert_eq!(rows.grab(), None);
        let empty = RowDispenser::new(0, 0, 0);
        assert_eq!(empty.grab(), None);
    }

    #[test]
    fn io_error_names_file_offset_and_cause() {
        let e = IoError {
            code: IoError::UNEXPECTED_EOF,
            op: "pread",
            file: String::from("/m/model.gguf"),
            offset: 4096,
            len: 100,
        };
        let text = alloc::format!("{e}");
        assert!(text.starts_with("/m/model.gguf: pread of 100 bytes at offset 4096 failed"));
        assert!(text.contains("ends before"));
    }
}
