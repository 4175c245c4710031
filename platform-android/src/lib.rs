//! smolrun-android: Android on top of the Linux adapter.
//!
//! Android is Linux underneath, so files, mappings, the thread pool, CPU features (getauxval)
//! and cgroups come from smolrun-linux unchanged. What differs:
//! - memory: the low-memory killer kills well before the kernel runs out, so the ceiling is
//!   MemAvailable less this process's lmkd level ([`lmk`], [`AndroidMemory`]);
//! - cores: big/little clusters from the cpufreq policies, or the core types in /proc/cpuinfo
//!   when cpufreq is hidden ([`cpu`]);
//! - O_DIRECT: refused by some SD-card and FUSE file systems (/sdcard is FUSE or sdcardfs);
//!   smolrun-linux's `FileReader` falls back to buffered reads once and remembers it, so models
//!   can live anywhere (tested in platform-linux/tests/file_reader.rs on /proc, which
//!   refuses O_DIRECT at open, and in file.rs on a read the kernel refuses with EINVAL);
//! - mlock: RLIMIT_MEMLOCK is 64 KiB for apps; smolrun never locks memory.
//!
//! The region a run's state is carved from is Linux's anonymous mapping ([`anonymous_region`]):
//! lmkd counts it in the process's RSS as its pages are written, as it counts everything else.

pub mod cpu;
pub mod lmk;
pub mod memory;

pub use cpu::{default_cpus, default_threads};
pub use memory::{AndroidMemory, LevelSource};
pub use smolrun_linux::{anonymous_region, anonymous_region_for};

#[cfg(test)]
pub(crate) fn fixture_path(name: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    assert!(path.exists(), "missing fixture {}", path.display());
    path
}

#[cfg(test)]
pub(crate) fn fixture(name: &str) -> String {
    let path = fixture_path(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
