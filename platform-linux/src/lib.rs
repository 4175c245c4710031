//! smolrun-linux: the Linux side of the platform traits core defines: mapped files, reads at an
//! offset (buffered and O_DIRECT), memory probing, CPU features and the thread pool.

mod mapped;

pub use mapped::MappedFile;
