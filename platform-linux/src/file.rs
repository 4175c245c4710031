//! Reads at an offset: buffered `pread`, and `O_DIRECT` reads that bypass the page cache.
//!
//! Streaming weights bigger than RAM through the page cache evicts everything else, every
//! token, so streamed and paged weights are read with O_DIRECT into page-aligned buffers.
//! Some file systems refuse O_DIRECT (procfs, FUSE, older tmpfs): then the reader falls back to
//! buffered reads once and remembers it, and the caller can ask [`FileReader::is_direct`].

use smolrun_core::platform::{IoError, ReadAt};
use std::alloc::{self, Layout};
use std::fs::File;
use std::io;
use std::ops::{Deref, DerefMut};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

/// Alignment of buffer address, file offset and length for O_DIRECT. 4096 covers both 512-byte
/// and 4 KiB logical sectors and is the page size of every target we run on.
pub const DIRECT_ALIGNMENT: usize = 4096;

/// Heap memory aligned to [`DIRECT_ALIGNMENT`], zero-initialised, for O_DIRECT reads.
/// The allocation is rounded up to whole 4096-byte blocks (at least one) so a zero-length
/// buffer still has an aligned address; the slice it derefs to has exactly `len` bytes.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` zero bytes at a 4096-aligned address. Aborts like `Vec` does when out of memory.
    pub fn zeroed(len: usize) -> AlignedBuf {
        let size = len
            .max(1)
            .checked_next_multiple_of(DIRECT_ALIGNMENT)
            .expect("AlignedBuf length overflows usize");
        let layout = Layout::from_size_align(size, DIRECT_ALIGNMENT)
            .expect("AlignedBuf length too large for a Layout");
        // SAFETY: layout has a non-zero size (at least DIRECT_ALIGNMENT).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        AlignedBuf { ptr, len, layout }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for layout.size() >= len initialised (zeroed) bytes, owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated by alloc_zeroed with exactly this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes at {:p})", self.len, self.ptr)
    }
}

/// One file opened twice: a buffered descriptor for `read_at`, and an O_DIRECT descriptor for
/// `read_direct` when the file system accepts it. Shared across reader threads (`&self` reads).
pub struct FileReader {
    path: PathBuf,
    /// `path` as text, copied into every error.
    name: String,
    buffered: File,
    /// `None` when the file system refused O_DIRECT at open.
    direct: Option<File>,
    /// Set once a direct read failed with EINVAL: the file system accepted the open but not
    /// the read. Every later direct read goes straight to the buffered descriptor.
    direct_refused: AtomicBool,
    len: u64,
}

impl FileReader {
    pub fn open(path: &Path) -> Result<FileReader, IoError> {
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
        let direct = open_direct(path).map_err(|e| failed("open O_DIRECT", e))?;
        Ok(FileReader {
            path: path.to_path_buf(),
            name,
            buffered,
            direct,
            direct_refused: AtomicBool::new(false),
            len,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `read_direct` really bypasses the page cache (false after the fallback).
    pub fn is_direct(&self) -> bool {
        self.direct.is_some() && !self.direct_refused.load(Ordering::Relaxed)
    }

    fn error(&self, op: &'static str, code: i32, offset: u64, len: usize) -> IoError {
        IoError {
            code,
            op,
            file: self.name.clone(),
            offset,
            len: len as u64,
        }
    }

    /// Fills `buf` from `file` at `offset`, stopping early only at end of file.
    /// Returns how many bytes were read. For O_DIRECT (`direct`), a read that ends off an
    /// alignment boundary is the end of the file (the kernel returns short direct reads only
    /// there), and asking again from a misaligned offset would fail, so it stops.
    fn read_until_eof(file: &File, direct: bool, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut filled = 0;
        while filled < buf.len() {
            match file.read_at(&mut buf[filled..], offset + filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if direct && !filled.is_multiple_of(DIRECT_ALIGNMENT) {
                break;
            }
        }
        Ok(filled)
    }

    /// The direct read without the alignment check, so tests can make the kernel refuse a
    /// read (a misaligned buffer on O_DIRECT gives the same EINVAL as a refusing file system).
    fn read_direct_unchecked(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let len = buf.len();
        let mut filled = None;
        if let Some(direct) = self.direct.as_ref() {
            if !self.direct_refused.load(Ordering::Relaxed) {
                match Self::read_until_eof(direct, true, offset, buf) {
                    Ok(n) => filled = Some(n),
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        self.direct_refused.store(true, Ordering::Relaxed);
                    }
                    Err(e) => {
                        return Err(self.error(
                            "pread O_DIRECT",
                            e.raw_os_error().unwrap_or(0),
                            offset,
                            len,
                        ))
                    }
                }
            }
        }
        let filled = match filled {
            Some(n) => n,
            None => Self::read_until_eof(&self.buffered, false, offset, buf).map_err(|e| {
                self.error(
                    "pread (O_DIRECT refused, buffered)",
                    e.raw_os_error().unwrap_or(0),
                    offset,
                    len,
                )
            })?,
        };
        // The final block of a file may reach past its end; more than that is a caller error.
        if len - filled >= DIRECT_ALIGNMENT {
            return Err(self.error("read_direct", IoError::UNEXPECTED_EOF, offset, len));
        }
        buf[filled..].fill(0);
        Ok(())
    }
}

/// The O_DIRECT descriptor, or None when the file system refuses O_DIRECT (EINVAL: tmpfs,
/// FUSE, some SD-card file systems on Android boxes).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn open_direct(path: &Path) -> io::Result<Option<File>> {
    use std::fs::OpenOptions;
    use std::os::unix::fs::OpenOptionsExt;
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Darwin has no O_DIRECT (smolrun-ios reads uncached with F_NOCACHE instead): buffered only.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn open_direct(_path: &Path) -> io::Result<Option<File>> {
    Ok(None)
}

impl ReadAt for FileReader {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.buffered.read_exact_at(buf, offset).map_err(|e| {
            let code = if e.kind() == io::ErrorKind::UnexpectedEof {
                IoError::UNEXPECTED_EOF
            } else {
                e.raw_os_error().unwrap_or(0)
            };
            self.error("pread", code, offset, buf.len())
        })
    }

    fn read_direct(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let misaligned = !(buf.as_ptr() as usize).is_multiple_of(DIRECT_ALIGNMENT)
            || !offset.is_multiple_of(DIRECT_ALIGNMENT as u64)
            || !buf.len().is_multiple_of(DIRECT_ALIGNMENT);
        if misaligned {
            return Err(self.error(
                "read_direct (buffer address, offset and length must be multiples of 4096)",
                libc::EINVAL,
                offset,
                buf.len(),
            ));
        }
        self.read_direct_unchecked(offset, buf)
    }

    fn direct_alignment(&self) -> usize {
        DIRECT_ALIGNMENT
    }
}

/// The OS's text for an error's code ("Invalid argument"), for messages shown to people.
pub fn describe_io_error(e: &IoError) -> String {
    if e.code > 0 {
        format!("{e} ({})", io::Error::from_raw_os_error(e.code))
    } else {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file with a recognisable pattern: byte i is (i * 7 + i / 4096) as u8.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
    }

    fn write_temp(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(format!("smolrun-linux-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn misaligned_direct_read_falls_back_once_and_remembers() {
        let bytes = pattern(3 * 4096 + 100);
        let path = write_temp(&std::env::temp_dir(), "einval", &bytes);
        let reader = FileReader::open(&path).unwrap();
        if reader.direct.is_none() {
            // The temp dir's file system refuses O_DIRECT outright; the /proc test covers it.
            std::fs::remove_file(&path).unwrap();
            return;
        }
        assert!(reader.is_direct());
        // One byte off alignment: the kernel answers EINVAL, as a refusing file system would.
        let mut backing = AlignedBuf::zeroed(4096 + 1);
        reader
            .read_direct_unchecked(4096, &mut backing[1..])
            .unwrap();
        assert_eq!(&backing[1..], &bytes[4096..8192]);
        assert!(
            !reader.is_direct(),
            "the EINVAL fallback was not remembered"
        );
        // Later aligned reads use the buffered descriptor and still return the right bytes.
        let mut buf = AlignedBuf::zeroed(4096);
        reader.read_direct(0, &mut buf).unwrap();
        assert_eq!(&buf[..], &bytes[..4096]);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn aligned_buf_is_aligned_zeroed_and_exact_length() {
        for len in [0, 1, 4095, 4096, 4097, 1 << 20] {
            let mut buf = AlignedBuf::zeroed(len);
            assert_eq!(buf.as_ptr() as usize % DIRECT_ALIGNMENT, 0);
            assert_eq!(buf.len(), len);
            assert!(buf.iter().all(|&b| b == 0));
            buf.fill(0xAB);
            assert!(buf.iter().all(|&b| b == 0xAB));
        }
    }
}
