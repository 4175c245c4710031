//! smolrun-ios: the iOS side of core's platform traits, on libc calls that iOS 12 has.
//!
//! - [`UncachedFile`]: reads at an offset; the uncached face uses `F_NOCACHE` and
//!   `F_RDADVISE` (Darwin has no O_DIRECT).
//! - [`IosMemory`]: footprint (`task_info` TASK_VM_INFO `phys_footprint`) against the jetsam
//!   limit (read with memorystatus_control; ~700 MB assumed on a 1 GB device otherwise).
//! - [`features`]: CPU features from `hw.optional.*` sysctls (no FEAT_DotProd on the A7).
//! - [`AddressSpaceBudget`]: iOS 12 maps ~1.7 GB per process: what to map, what to pread.
//! - [`region`]: the region a run's state is carved from, `vm_allocate`d (counted in the
//!   footprint as it is written).
//!
//! Mapped files, the thread pool and the clock are smolrun-linux's portable parts, which build
//! for Darwin too. Only the system calls are `cfg(target_os = "ios")`; every decision is a
//! pure function tested on the host.

pub mod address_space;
pub mod features;
pub mod file;
pub mod memory;
pub mod region;

pub use address_space::{Access, AddressSpaceBudget, MapPlan};
#[cfg(target_os = "ios")]
pub use features::detect_features;
pub use file::UncachedFile;
pub use memory::IosMemory;
#[cfg(target_os = "ios")]
pub use region::vm_region;

#[cfg(test)]
pub(crate) fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
