use memmap2::{Advice, Mmap, MmapOptions};
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A whole file mapped read-only. Pages are faulted in on first touch (never MAP_POPULATE):
/// a model bigger than RAM must not be read in full just because it was opened.
pub struct MappedFile {
    map: Option<Mmap>,
    /// Kept open for advice on the page cache (posix_fadvise; Darwin has none).
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    file: File,
    path: PathBuf,
}

impl MappedFile {
    pub fn open(path: &Path) -> Result<MappedFile, String> {
        let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let len = file_len(&file, path)?;
        MappedFile::map(file, path, len)
    }

    /// Only the first `len` bytes of the file mapped read-only: the non-expert prefix of an
    /// experts-last model (`smolrun.expert_data_offset`), where the whole file does not fit
    /// in the address space (iOS gives a process ~1.7 GB; a 5.5 GB mixture of experts does
    /// not map whole). A `len` past the end of the file is refused: touching a mapped page
    /// beyond the end would be a SIGBUS, not an error.
    pub fn open_prefix(path: &Path, len: u64) -> Result<MappedFile, String> {
        let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let file_len = file_len(&file, path)?;
        if len > file_len {
            return Err(format!(
                "{}: cannot map its first {len} bytes, the file has {file_len} (truncated, or \
                 the offset is not this file's)",
                path.display()
            ));
        }
        MappedFile::map(file, path, len)
    }

    /// `file`'s first `len` bytes (at most its length) mapped read-only.
    fn map(file: File, path: &Path, len: u64) -> Result<MappedFile, String> {
        let len = usize::try_from(len).map_err(|_| {
            format!(
                "cannot map {}: {len} bytes do not fit in this process's address space",
                path.display()
            )
        })?;
        // mmap of an empty range fails on Linux; an empty slice says the same thing.
        let map = if len == 0 {
            None
        } else {
            // SAFETY: the mapping is read-only and private to this process, and `len` is at
            // most the file's length. A file truncated by another process while mapped would
            // fault (SIGBUS); model files are not rewritten in place, which is the same
            // contract llama.cpp relies on.
            Some(
                unsafe { MmapOptions::new().len(len).map(&file) }
                    .map_err(|e| format!("cannot map {}: {e}", path.display()))?,
            )
        };
        Ok(MappedFile {
            map,
            file,
            path: path.to_path_buf(),
        })
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tells the kernel that `range` (bytes of the file) is read at random, a few bytes here
    /// and there: no readahead around a fault. For the embedding table, which is read one row
    /// per token: without this, each row's fault reads up to 128 KB around it, and a few hundred
    /// tokens pull most of the table into RAM.
    pub fn advise_random(&self, range: Range<usize>) -> Result<(), String> {
        let Some(map) = &self.map else {
            return Ok(());
        };
        if range.start > range.end || range.end > map.len() {
            return Err(format!(
                "{}: cannot advise bytes {range:?} of a {}-byte mapping",
                self.path.display(),
                map.len()
            ));
        }
        // memmap2 rounds the start down to a page boundary.
        map.advise_range(Advice::Random, range.start, range.len())
            .map_err(|e| format!("{}: madvise(MADV_RANDOM): {e}", self.path.display()))
    }

    /// Drops the clean page-cache pages of `range` (bytes of the file) that no process has
    /// mapped (POSIX_FADV_DONTNEED). Reading the header sequentially makes the kernel read
    /// ahead past its end, into the first tensor (up to `read_ahead_kb`, 8 MB on some disks);
    /// for a table that should stay on flash, those pages are dropped again.
    pub fn drop_cached(&self, range: Range<usize>) -> Result<(), String> {
        if range.start >= range.end {
            return Ok(());
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            // SAFETY: plain syscall on a descriptor this struct owns.
            let rc = unsafe {
                libc::posix_fadvise(
                    std::os::unix::io::AsRawFd::as_raw_fd(&self.file),
                    range.start as libc::off_t,
                    range.len() as libc::off_t,
                    libc::POSIX_FADV_DONTNEED,
                )
            };
            if rc != 0 {
                return Err(format!(
                    "{}: posix_fadvise(DONTNEED): {}",
                    self.path.display(),
                    std::io::Error::from_raw_os_error(rc)
                ));
            }
        }
        // Darwin has no posix_fadvise: the read-ahead pages stay cached until the OS wants
        // them (iOS reads weights with F_NOCACHE instead, see smolrun-ios).
        Ok(())
    }

    /// How many bytes of `range` are in RAM now (mincore), counted in whole pages: what a
    /// test measures to show a table was left on flash.
    pub fn resident_bytes(&self, range: Range<usize>) -> Result<u64, String> {
        let Some(map) = &self.map else {
            return Ok(0);
        };
        if range.start > range.end || range.end > map.len() {
            return Err(format!(
                "{}: bytes {range:?} are outside the {}-byte mapping",
                self.path.display(),
                map.len()
            ));
        }
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as usize;
        let start = range.start / page * page;
        let len = range.end - start;
        let mut pages = vec![0u8; len.div_ceil(page)];
        // SAFETY: [start, start + len) lies inside the live mapping (checked above; mapping
        // addresses are page aligned), and `pages` has one byte per page of it.
        let rc = unsafe {
            libc::mincore(
                map.as_ptr().add(start) as *mut libc::c_void,
                len,
                pages.as_mut_ptr() as *mut _,
            )
        };
        if rc != 0 {
            return Err(format!(
                "{}: mincore: {}",
                self.path.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(pages.iter().filter(|&&p| p & 1 == 1).count() as u64 * page as u64)
    }
}

fn file_len(file: &File, path: &Path) -> Result<u64, String> {
    Ok(file
        .metadata()
        .map_err(|e| format!("cannot stat {}: {e}", path.display()))?
        .len())
}

/// The mapped bytes, so a mapping can back a buffer that core holds (the repack cache).
impl AsRef<[u8]> for MappedFile {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

/// madvise(MADV_RANDOM) on the pages that hold `bytes`, a part of a file mapping (such as a
/// tensor of a parsed model, whose [`MappedFile`] the caller no longer has at hand): a fault
/// there then reads that page, not up to `read_ahead_kb` around it. Advice only; the contents
/// do not change. The first and last pages may be shared with neighbouring bytes.
pub fn advise_random_mapped(bytes: &[u8]) -> Result<(), String> {
    madvise_pages(bytes, libc::MADV_RANDOM, "MADV_RANDOM")
}

/// madvise(MADV_DONTNEED) on the pages that hold `bytes`, a part of a read-only file mapping:
/// this process stops mapping them (a later read faults them in again from the file), so that
/// [`drop_cached_range`] can then drop them from the page cache. Only the whole pages inside
/// `bytes` are given up: a page shared with a neighbour in use stays.
pub fn unmap_pages_mapped(bytes: &[u8]) -> Result<(), String> {
    let page = page_size();
    let start = (bytes.as_ptr() as usize).div_ceil(page) * page;
    let end = (bytes.as_ptr() as usize + bytes.len()) / page * page;
    if end <= start {
        return Ok(());
    }
    // SAFETY: [start, end) is whole pages inside `bytes`, part of a live read-only file
    // mapping: MADV_DONTNEED drops this process's page-table entries only; the next read of
    // those bytes faults the same file contents in again.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    if rc != 0 {
        return Err(format!(
            "madvise(MADV_DONTNEED): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}

fn madvise_pages(bytes: &[u8], advice: libc::c_int, name: &str) -> Result<(), String> {
    if bytes.is_empty() {
        return Ok(());
    }
    let page = page_size();
    let start = bytes.as_ptr() as usize / page * page;
    let end = bytes.as_ptr() as usize + bytes.len();
    // SAFETY: [start, end) lies within the pages of a live mapping (the slice borrows it);
    // the callers pass advice that changes readahead only.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) };
    if rc != 0 {
        return Err(format!(
            "madvise({name}): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Drops the clean cached pages of bytes `range` of the file at `path` (POSIX_FADV_DONTNEED;
/// the page cache is per file, so any descriptor will do). Nothing on Darwin, which has no
/// posix_fadvise.
pub fn drop_cached_range(path: &Path, range: Range<u64>) -> Result<(), String> {
    if range.start >= range.end {
        return Ok(());
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = path;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        fadvise(&file, path, range, libc::POSIX_FADV_DONTNEED, "DONTNEED")?;
    }
    Ok(())
}

/// posix_fadvise(`advice`) over `range` of `file` (opened from `path`, for the error).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn fadvise(
    file: &File,
    path: &Path,
    range: Range<u64>,
    advice: libc::c_int,
    advice_name: &str,
) -> Result<(), String> {
    // SAFETY: plain syscall on a descriptor the caller owns.
    let rc = unsafe {
        libc::posix_fadvise(
            std::os::unix::io::AsRawFd::as_raw_fd(file),
            range.start as libc::off_t,
            (range.end - range.start) as libc::off_t,
            advice,
        )
    };
    if rc != 0 {
        return Err(format!(
            "{}: posix_fadvise({advice_name}): {}",
            path.display(),
            std::io::Error::from_raw_os_error(rc)
        ));
    }
    Ok(())
}

/// Asks the kernel to read exactly the bytes `ranges` of the file at `path` into the page
/// cache now (POSIX_FADV_WILLNEED, rounded out to whole pages), all of them at once and
/// without waiting. For the scattered small reads of a start (norm vectors between the
/// weights, checksum samples): touched through a mapping one by one, each would fault in a
/// whole readahead window around it (`read_ahead_kb`: 128 KB by default, 8 MB on some disks)
/// and wait for it; asked for here, only their own pages are read, in parallel, and the
/// faults that follow find them cached and read nothing more. Advice only: a failure changes no
/// result (the faults read the pages then), so it is reported for a verbose message. Nothing on
/// Darwin, which has no posix_fadvise.
pub fn prefetch_ranges(
    path: &Path,
    ranges: impl IntoIterator<Item = Range<u64>>,
) -> Result<(), String> {
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = (path, ranges);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        for range in ranges.into_iter().filter(|r| r.start < r.end) {
            fadvise(&file, path, range, libc::POSIX_FADV_WILLNEED, "WILLNEED")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_reads_the_pages_asked_for_and_no_others() {
        let path = std::env::temp_dir().join(format!("smolrun-prefetch-{}", std::process::id()));
        let page = page_size();
        {
            let f = File::create(&path).unwrap();
            std::io::Write::write_all(&mut &f, &vec![1u8; 64 * page]).unwrap();
            f.sync_all().unwrap();
        }
        let file = MappedFile::open(&path).unwrap();
        let len = file.bytes().len();
        drop_cached_range(&path, 0..len as u64).unwrap();
        // A file system that keeps every page (tmpfs) cannot show what was read.
        let dropped = file.resident_bytes(0..len).unwrap() == 0;
        let (a, b) = (5 * page + 10, 7 * page - 1);
        prefetch_ranges(
            &path,
            [a as u64..b as u64, 40 * page as u64..40 * page as u64],
        )
        .unwrap();
        // The reads are asynchronous: wait for them (a second at most).
        for _ in 0..100 {
            if file.resident_bytes(a..b).unwrap() == 2 * page as u64 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(file.resident_bytes(a..b).unwrap(), 2 * page as u64);
        if dropped {
            assert_eq!(file.resident_bytes(0..len).unwrap(), 2 * page as u64);
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn residency_and_advice_check_their_ranges() {
        let path = std::env::temp_dir().join(format!("smolrun-mapped-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 3 * 4096 + 100]).unwrap();
        let file = MappedFile::open(&path).unwrap();
        let sum: u64 = file.bytes().iter().map(|&b| b as u64).sum();
        assert_eq!(sum, 7 * (3 * 4096 + 100));
        // Just written and just read: every page is in the page cache.
        assert_eq!(
            file.resident_bytes(0..file.bytes().len()).unwrap(),
            4 * 4096
        );
        assert_eq!(file.resident_bytes(5000..5001).unwrap(), 4096);
        file.advise_random(100..9000).unwrap();
        let too_far = file.bytes().len() + 1;
        assert!(file
            .advise_random(0..too_far)
            .unwrap_err()
            .contains("cannot advise"));
        assert!(file
            .resident_bytes(0..too_far)
            .unwrap_err()
            .contains("outside"));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_prefix_maps_only_the_first_bytes_and_not_past_the_end() {
        let path = std::env::temp_dir().join(format!("smolrun-prefix-{}", std::process::id()));
        let bytes: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        for len in [0, 1, 4096, 5000, bytes.len()] {
            let file = MappedFile::open_prefix(&path, len as u64).unwrap();
            assert_eq!(file.bytes(), &bytes[..len], "{len}");
        }
        let err = MappedFile::open_prefix(&path, bytes.len() as u64 + 1)
            .err()
            .unwrap();
        assert!(err.contains("the file has 12388"), "{err}");
        assert!(MappedFile::open_prefix(&path, u64::MAX).is_err());
        let missing = path.with_extension("missing");
        assert!(MappedFile::open_prefix(&missing, 1)
            .err()
            .unwrap()
            .contains("cannot open"));
        std::fs::remove_file(&path).unwrap();
    }
}
