//! Files smolrun writes for itself next to a model (the repack cache): created under a
//! temporary name, filled through a writable mapping, then renamed into place, so a reader
//! never sees a half-written file under the final name (and a crash leaves only a `.tmp-PID`
//! file behind, which the next successful write of the same cache does not need).

use memmap2::{MmapMut, MmapOptions};
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// A new file of a fixed length, written through a mapping and published by [`finish`].
///
/// [`finish`]: CacheFileWriter::finish
pub struct CacheFileWriter {
    map: MmapMut,
    tmp: PathBuf,
    dest: PathBuf,
    finished: bool,
}

impl CacheFileWriter {
    /// Creates `dest`'s temporary twin (and `dest`'s folder), `len` bytes long, with the disk
    /// space reserved up front: writing to a mapped sparse file on a full disk would kill the
    /// process with SIGBUS instead of returning an error.
    pub fn create(dest: &Path, len: usize) -> Result<CacheFileWriter, String> {
        if let Some(dir) = dest.parent() {
            fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create folder {}: {e}", dir.display()))?;
        }
        let tmp = temporary_name(dest);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        let fail = |what: String| {
            let _ = fs::remove_file(&tmp);
            what
        };
        // Darwin has no posix_fallocate; there a full disk shows up as a write error instead
        // of SIGBUS only if the file system reserves on ftruncate, so iOS users keep the cache
        // on the data partition (see README).
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if len > 0 {
            // SAFETY: plain syscall on an open descriptor.
            let rc = unsafe {
                libc::posix_fallocate(
                    std::os::unix::io::AsRawFd::as_raw_fd(&file),
                    0,
                    len as libc::off_t,
                )
            };
            if rc != 0 {
                return Err(fail(format!(
                    "cannot reserve {} MB for {}: {}",
                    len >> 20,
                    tmp.display(),
                    std::io::Error::from_raw_os_error(rc)
                )));
            }
        }
        // SAFETY: the file was just created by this process under a name no other smolrun
        // process uses (the PID is in it), so nobody truncates it while it is mapped.
        let map = unsafe { MmapOptions::new().len(len.max(1)).map_mut(&file) }
            .map_err(|e| fail(format!("cannot map {}: {e}", tmp.display())))?;
        Ok(CacheFileWriter {
            map,
            tmp,
            dest: dest.to_path_buf(),
            finished: false,
        })
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.map.len();
        &mut self.map[..len]
    }

    /// Starts writing `len` bytes at `offset` back to the file without waiting, so those
    /// pages become clean and reclaimable (a cache bigger than RAM can then still be written).
    pub fn start_writeback(&self, offset: usize, len: usize) -> Result<(), String> {
        self.map
            .flush_async_range(offset, len)
            .map_err(|e| format!("cannot write {}: {e}", self.tmp.display()))
    }

    /// Renames the file into place. The data is not synced first: whatever the cache holds is
    /// checked against its checksums when it is opened, so a cache cut short by a power loss
    /// is rebuilt rather than trusted.
    pub fn finish(mut self) -> Result<(), String> {
        fs::rename(&self.tmp, &self.dest).map_err(|e| {
            format!(
                "cannot rename {} to {}: {e}",
                self.tmp.display(),
                self.dest.display()
            )
        })?;
        self.finished = true;
        Ok(())
    }
}

impl Drop for CacheFileWriter {
    fn drop(&mut self) {
        if !self.finished {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// The temporary twin of `dest` that this process writes: `DEST.tmp-PID`.
pub fn temporary_name(dest: &Path) -> PathBuf {
    let mut tmp = dest.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    PathBuf::from(tmp)
}

/// A temporary file (`NAME.tmp-PID`) left in a folder, and whether its writer still runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Temporary {
    pub path: PathBuf,
    pub bytes: u64,
    pub pid: u32,
    /// Its process no longer runs: nobody will finish or remove it.
    pub stale: bool,
}

/// Whether a process with this id runs (on this machine: kill(pid, 0) does not say ESRCH).
fn process_runs(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The temporary files in `dir` whose names start with `prefix` (a final file's name; `""`:
/// all of them) and end in `.tmp-PID`: what a killed writer (a repack cache, a requantized or
/// fitted model) leaves behind.
pub fn temporaries(dir: &Path, prefix: &str) -> Vec<Temporary> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((stem, pid)) = name.rsplit_once(".tmp-") else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if !stem.starts_with(prefix) {
            continue;
        }
        found.push(Temporary {
            path: entry.path(),
            bytes: entry.metadata().map_or(0, |m| m.len()),
            pid,
            stale: pid != std::process::id() && !process_runs(pid),
        });
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// Removes the temporaries of `dest` (`DEST.tmp-PID`) whose writers no longer run; returns
/// what was removed. Another process still writing one keeps it.
pub fn remove_stale_temporaries(dest: &Path) -> Vec<Temporary> {
    let (Some(dir), Some(name)) = (dest.parent(), dest.file_name()) else {
        return Vec::new();
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let name = format!("{}.tmp-", name.to_string_lossy());
    temporaries(dir, "")
        .into_iter()
        .filter(|t| t.stale)
        .filter(|t| {
            t.path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&name))
        })
        .filter(|t| fs::remove_file(&t.path).is_ok())
        .collect()
}

/// A file's length and last-modification time in nanoseconds since the epoch.
pub fn file_len_and_mtime(path: &Path) -> Result<(u64, u64), String> {
    let meta = File::open(path)
        .and_then(|f| f.metadata())
        .map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    Ok((meta.len(), mtime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_file_appears_only_when_finished() {
        let dir = std::env::temp_dir().join(format!("smolrun-cache-file-{}", std::process::id()));
        let dest = dir.join("sub").join("x.repack");
        let mut w = CacheFileWriter::create(&dest, 10_000).unwrap();
        w.bytes_mut()[9_999] = 7;
        w.start_writeback(4096, 5904).unwrap();
        assert!(!dest.exists());
        w.finish().unwrap();
        let bytes = fs::read(&dest).unwrap();
        assert_eq!((bytes.len(), bytes[9_999]), (10_000, 7));
        let (len, mtime) = file_len_and_mtime(&dest).unwrap();
        assert_eq!(len, 10_000);
        assert!(mtime > 0);
        // Dropped unfinished: no file left, not even the temporary one.
        let other = dir.join("y.repack");
        drop(CacheFileWriter::create(&other, 100).unwrap());
        assert!(!other.exists());
        assert_eq!(fs::read_dir(dir.join("sub")).unwrap().count(), 1);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A temporary of a process that no longer runs is found as stale and removed; one of a
    /// running process (this one) is kept.
    #[test]
    fn stale_temporaries_are_found_and_removed() {
        let dir = std::env::temp_dir().join(format!("smolrun-stale-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let dest = dir.join("m.gguf.x86.repack");
        // A pid past any pid_max (2^22) runs nowhere.
        let dead = dir.join("m.gguf.x86.repack.tmp-99999999");
        fs::write(&dead, [0u8; 100]).unwrap();
        let live = temporary_name(&dest);
        fs::write(&live, [0u8; 10]).unwrap();
        fs::write(dir.join("other.gguf.tmp-99999998"), [0u8; 5]).unwrap();
        let all = temporaries(&dir, "");
        assert_eq!(all.len(), 3);
        assert_eq!(all.iter().filter(|t| t.stale).count(), 2);
        let removed = remove_stale_temporaries(&dest);
        assert_eq!(removed.len(), 1);
        assert_eq!((removed[0].bytes, removed[0].pid), (100, 99_999_999));
        assert!(!dead.exists() && live.exists());
        assert!(
            dir.join("other.gguf.tmp-99999998").exists(),
            "another file's is kept"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
