//! smolrun-linux: the Linux side of the platform traits core defines: mapped files, reads at an
//! offset (buffered and O_DIRECT), memory probing, CPU features and the thread pool.

mod cache_file;
mod clock;
pub mod cpu;
mod file;
mod mapped;
pub mod memory;
mod pool;

pub use cache_file::{file_len_and_mtime, CacheFileWriter};
pub use clock::MonotonicClock;
pub use cpu::{allowed_cpus, default_cpus, default_threads, detect_features, CpuTopology};
pub use file::{describe_io_error, AlignedBuf, FileReader, DIRECT_ALIGNMENT};
pub use mapped::MappedFile;
pub use memory::LinuxMemory;
pub use pool::{pin_current_thread, PoolOptions, ThreadPool, DEFAULT_SPIN_ITERATIONS};

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
        send_sync::<smolrun_core::platform::RowDispenser>();
    }
}
