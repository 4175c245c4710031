use memmap2::{Mmap, MmapOptions};
use std::fs::File;
use std::path::{Path, PathBuf};

/// A whole file mapped read-only. Pages are faulted in on first touch (never MAP_POPULATE):
/// a model bigger than RAM must not be read in full just because it was opened.
pub struct MappedFile {
    map: Option<Mmap>,
    path: PathBuf,
}

impl MappedFile {
    pub fn open(path: &Path) -> Result<MappedFile, String> {
        let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let len = file
            .metadata()
            .map_err(|e| format!("cannot stat {}: {e}", path.display()))?
            .len();
        // mmap of an empty file fails on Linux; an empty slice says the same thing.
        let map = if len == 0 {
            None
        } else {
            // SAFETY: the mapping is read-only and private to this process. A file truncated by
            // another process while mapped would fault (SIGBUS); model files are not rewritten
            // in place, which is the same contract llama.cpp relies on.
            Some(
                unsafe { MmapOptions::new().map(&file) }
                    .map_err(|e| format!("cannot map {}: {e}", path.display()))?,
            )
        };
        Ok(MappedFile {
            map,
            path: path.to_path_buf(),
        })
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The mapped bytes, so a mapping can back a buffer that core holds (the repack cache).
impl AsRef<[u8]> for MappedFile {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}
