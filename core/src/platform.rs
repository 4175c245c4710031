//! The few things core asks of the operating system, as traits the platform crates implement.
//!
//! Core never opens a file or starts a thread itself: it is handed a `ReadAt` for bytes that are
//! not mapped, a `MemoryProbe` to size itself against, and a `Parallel` to split work over cores.

use core::fmt;

/// An I/O failure as seen by core: the platform keeps the OS error code and a short context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoError {
    /// `errno` (or the platform's equivalent), 0 when there is none.
    pub code: i32,
    /// What was being done, e.g. "pread" or "open O_DIRECT".
    pub op: &'static str,
    pub offset: u64,
    pub len: u64,
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} bytes at offset {} failed (os error {})",
            self.op, self.len, self.offset, self.code
        )
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
    /// The default falls back to a buffered read.
    fn read_direct(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.read_at(offset, buf)
    }
    /// Alignment that `read_direct` needs for buffer address, offset and length.
    fn direct_alignment(&self) -> usize {
        1
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
pub trait Parallel {
    fn n_threads(&self) -> usize;
    fn run(&self, job: &(dyn Fn(usize) + Sync));
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
