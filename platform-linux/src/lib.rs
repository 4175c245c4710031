//! smolrun-linux: the Linux side of the platform traits core defines: mapped files, reads at an
//! offset (buffered and O_DIRECT), memory probing, CPU features, the thread pool and the
//! anonymous region a run's state is carved from.
//!
//! It also builds for Darwin, where smolrun-ios uses its portable parts (mapped files, the
//! thread pool, the clock): there the futex, CPU affinity, getauxval and O_DIRECT calls are
//! replaced by a condition variable, "no affinity", NEON-only features and buffered reads.

mod cache_file;
mod clock;
pub mod cpu;
mod file;
mod mapped;
pub mod memory;
mod memory_watch;
mod pool;
mod region;
mod stream;

pub use cache_file::{
    file_len_and_mtime, remove_stale_temporaries, temporaries, temporary_name, CacheFileWriter,
    Temporary,
};
pub use clock::MonotonicClock;
pub use cpu::{allowed_cpus, default_cpus, default_threads, detect_features, CpuTopology};
pub use file::{describe_io_error, AlignedBuf, FileReader, DIRECT_ALIGNMENT};
pub use mapped::{
    advise_random_mapped, drop_cached_range, prefetch_ranges, unmap_pages_mapped, MappedFile,
};
pub use memory::LinuxMemory;
pub use memory_watch::{MemoryReading, MemorySource, MemoryWatch};
pub use pool::{pin_current_thread, PoolOptions, ThreadPool, DEFAULT_SPIN_MICROS};
pub use region::{anonymous_region, anonymous_region_for};
pub use stream::{
    probe_read_mbps, start_expert_readers, CondSignal, ReaderThreads, StreamingStore, PROBE_BYTES,
};

#[cfg(test)]
mod tests {
    /// Reader threads share one FileReader, model code shares the pool and the probe.
    #[test]
    fn shared_types_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<crate::FileReader>();
        send_sync::<crate::AlignedBuf>();
        send_sync::<crate::ThreadPool>();
        send_sync::<crate::LinuxMemory>();
        send_sync::<crate::MappedFile>();
        send_sync::<crate::MemoryWatch>();
        send_sync::<smolrun_core::platform::RowDispenser>();
    }
}
