//! Reads that bypass the unified buffer cache on iOS: Darwin has no O_DIRECT, so the file is
//! opened a second time and that descriptor gets `fcntl(F_NOCACHE, 1)`; before each uncached
//! read, `fcntl(F_RDADVISE)` tells the kernel the range is wanted now, so it issues one large
//! read instead of page-sized ones. Streamed weights then stay out of the cache, where they
//! would only push out the pages that matter (the iPad has ~700 MB for everything).
//!
//! On other systems the same type compiles with buffered reads only, so the read logic is
//! tested on the host; only the two fcntl calls are iOS code.

use smolrun_core::platform::{IoError, ReadAt};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// F_NOCACHE reads have no alignment rule, but page-aligned reads skip a copy; we ask callers
/// for 16 KiB (the arm64 iOS page) like O_DIRECT's 4 KiB on Linux.
pub const UNCACHED_ALIGNMENT: usize = 16 << 10;

/// F_RDADVISE takes an `int` byte count: longer ranges are advised in pieces of at most this.
pub const MAX_ADVISE_BYTES: u64 = 1 << 30;

/// A file with a buffered descriptor for `read_at` and an uncached one for `read_direct`.
pub struct UncachedFile {
    name: String,
    buffered: File,
    uncached: File,
    len: u64,
}

/// The (offset, count) pieces that F_RDADVISE is called with for a read of `len` bytes at
/// `offset`: each at most [`MAX_ADVISE_BYTES`], covering the range exactly.
pub fn advise_pieces(offset: u64, len: u64) -> Vec<(u64, u64)> {
    let mut pieces = Vec::new();
    let mut at = offset;
    let end = offset.saturating_add(len);
    while at < end {
        let count = (end - at).min(MAX_ADVISE_BYTES);
        pieces.push((at, count));
        at += count;
    }
    pieces
}

impl UncachedFile {
    pub fn open(path: &Path) -> Result<UncachedFile, IoError> {
        let name = path.display().to_string();
        let failed = |op: &'static str, e: io::Error| IoError {
            code: e.raw_os_error().unwrap_or(0),
            op,
            file: name.clone(),
            offset: 0,
            len: 0,
        };
        let buffered = File::open(path).map_err(|e| failed("open", e))?;
        let len = buffered.metadata().map_err(|e| failed("fstat", e))?.len();
        let uncached = File::open(path).map_err(|e| failed("open", e))?;
        set_no_cache(&uncached).map_err(|e| failed("fcntl F_NOCACHE", e))?;
        Ok(UncachedFile {
            name,
            buffered,
            uncached,
            len,
        })
    }

    fn error(&self, op: &'static str, e: io::Error, offset: u64, len: usize) -> IoError {
        let code = if e.kind() == io::ErrorKind::UnexpectedEof {
            IoError::UNEXPECTED_EOF
        } else {
            e.raw_os_error().unwrap_or(0)
        };
        IoError {
            code,
            op,
            file: self.name.clone(),
            offset,
            len: len as u64,
        }
    }
}

#[cfg(target_os = "ios")]
fn set_no_cache(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor owned by `file`; F_NOCACHE takes an int flag.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_NOCACHE, 1) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "ios"))]
fn set_no_cache(_file: &File) -> io::Result<()> {
    Ok(())
}

/// Tells the kernel a range is about to be read. Only a hint: its failure changes nothing.
#[cfg(target_os = "ios")]
fn advise(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    for (at, count) in advise_pieces(offset, len) {
        let advice = libc::radvisory {
            ra_offset: at as libc::off_t,
            ra_count: count as libc::c_int,
        };
        // SAFETY: a valid descriptor; F_RDADVISE reads one radvisory struct from the pointer.
        unsafe { libc::fcntl(file.as_raw_fd(), libc::F_RDADVISE, &advice) };
    }
}

#[cfg(not(target_os = "ios"))]
fn advise(_file: &File, _offset: u64, _len: u64) {}

impl ReadAt for UncachedFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.buffered
            .read_exact_at(buf, offset)
            .map_err(|e| self.error("pread", e, offset, buf.len()))
    }

    /// An uncached read; like O_DIRECT's contract, the last block may reach past the end of
    /// the file by less than one alignment block and is zero-filled there.
    fn read_direct(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let len = buf.len();
        let in_file = self.len.saturating_sub(offset).min(len as u64) as usize;
        if len - in_file >= UNCACHED_ALIGNMENT {
            return Err(IoError {
                code: IoError::UNEXPECTED_EOF,
                op: "pread F_NOCACHE",
                file: self.name.clone(),
                offset,
                len: len as u64,
            });
        }
        advise(&self.uncached, offset, in_file as u64);
        self.uncached
            .read_exact_at(&mut buf[..in_file], offset)
            .map_err(|e| self.error("pread F_NOCACHE", e, offset, len))?;
        buf[in_file..].fill(0);
        Ok(())
    }

    fn direct_alignment(&self) -> usize {
        UNCACHED_ALIGNMENT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempFile(std::path::PathBuf);
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn temp_file(name: &str, bytes: &[u8]) -> TempFile {
        let path = std::env::temp_dir().join(format!("smolrun-ios-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        TempFile(path)
    }

    #[test]
    fn advice_is_split_into_int_sized_pieces() {
        assert_eq!(advise_pieces(100, 0), vec![]);
        assert_eq!(advise_pieces(4096, 1 << 20), vec![(4096, 1 << 20)]);
        let big = advise_pieces(0, 2 * MAX_ADVISE_BYTES + 5);
        assert_eq!(
            big,
            vec![
                (0, MAX_ADVISE_BYTES),
                (MAX_ADVISE_BYTES, MAX_ADVISE_BYTES),
                (2 * MAX_ADVISE_BYTES, 5)
            ]
        );
        assert!(big.iter().all(|&(_, n)| n <= i32::MAX as u64));
    }

    #[test]
    fn reads_match_the_file_and_the_tail_is_zero_filled() {
        let bytes: Vec<u8> = (0..40_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let file = temp_file("reads", &bytes);
        let reader = UncachedFile::open(&file.0).unwrap();
        assert_eq!(reader.len(), 40_000);
        let mut buf = vec![0u8; 1000];
        reader.read_at(123, &mut buf).unwrap();
        assert_eq!(&buf[..], &bytes[123..1123]);
        // The last 16 KiB block reaches past the end: zero-filled there.
        let mut block = vec![0xAAu8; UNCACHED_ALIGNMENT];
        reader.read_direct(32_768, &mut block).unwrap();
        assert_eq!(&block[..40_000 - 32_768], &bytes[32_768..]);
        assert!(block[40_000 - 32_768..].iter().all(|&b| b == 0));
        // A whole block past the end is an error that names the file.
        let err = reader.read_direct(49_152, &mut block).unwrap_err();
        assert_eq!(err.code, IoError::UNEXPECTED_EOF);
        assert!(err.file.contains("smolrun-ios"));
        let err = reader.read_at(39_999, &mut buf).unwrap_err();
        assert_eq!(err.code, IoError::UNEXPECTED_EOF);
        assert_eq!(err.offset, 39_999);
    }

    #[test]
    fn open_failure_names_the_file() {
        let err = UncachedFile::open(Path::new("/nonexistent/model.gguf"))
            .err()
            .unwrap();
        assert_eq!(err.code, libc::ENOENT);
        assert_eq!(err.file, "/nonexistent/model.gguf");
    }
}
