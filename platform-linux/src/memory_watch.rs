//! The memory guard's probe: how much the process can still take, read cheaply enough to run
//! every few tokens of a decode loop that must not allocate.
//!
//! [`LinuxMemory`](crate::LinuxMemory) answers the same question for sizing at start-up with
//! `read_to_string`; [`MemoryWatch`] opens the files once and re-reads them with `pread` into a
//! stack buffer (the kernel regenerates /proc and cgroup files on every read at offset 0), so a
//! reading allocates nothing.
//!
//! "Available" is the smaller of MemAvailable and, for every cgroup level that has a limit,
//! `limit - usage + inactive file cache`. The cgroup's usage counts page cache; its inactive part
//! is what the kernel reclaims first (as MemAvailable counts it). Weights the decoder reads every
//! token sit on the active list, so they are not mistaken for free room.

use crate::memory::{
    cgroup_dir, parse_meminfo_available, parse_mountinfo_cgroups, parse_proc_cgroup,
    parse_status_rss, parse_v1_limit, parse_v2_limit, CgroupMembership, CgroupMounts,
};
use smolrun_core::platform::MemoryProbe;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// Big enough for /proc/meminfo (~1.5 KB), /proc/self/status (~1.4 KB) and a v2 memory.stat
/// (~3 KB on 6.x kernels); a longer file is cut, and the fields the guard reads come first.
const READ_BUF: usize = 8192;

/// One cgroup level with a memory limit.
#[derive(Debug)]
struct CgroupLevel {
    dir: PathBuf,
    limit: File,
    usage: File,
    stat: Option<File>,
    parse_limit: fn(&str) -> Option<u64>,
    /// The memory.stat key of the (hierarchical) inactive file cache.
    inactive_file_key: &'static str,
}

/// Where the tightest number came from, for the guard's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemorySource {
    /// /proc/meminfo MemAvailable (or MemFree + Buffers + Cached on old kernels).
    System,
    /// The cgroup level at index `.0` of [`MemoryWatch::cgroup_dir`].
    Cgroup(usize),
    /// Nothing could be read.
    Unknown,
}

/// One reading: what the process can still take, and the numbers behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryReading {
    pub available: u64,
    pub source: MemorySource,
    /// MemAvailable, when readable.
    pub system_available: Option<u64>,
    /// For the tightest cgroup level: limit, usage, inactive file cache.
    pub cgroup: Option<(u64, u64, u64)>,
    /// This process's resident set (VmRSS).
    pub process_rss: u64,
}

/// Reads the memory this process may still use without allocating (after [`MemoryWatch::new`]).
#[derive(Debug)]
pub struct MemoryWatch {
    meminfo: Option<File>,
    status: Option<File>,
    cgroups: Vec<CgroupLevel>,
}

/// Reads a whole small file at offset 0 into `buf`; the text read, empty on error.
fn read_into<'b>(file: &File, buf: &'b mut [u8; READ_BUF]) -> &'b str {
    let n = file.read_at(buf, 0).unwrap_or(0);
    // The files are ASCII; a cut in the middle of a line only loses that line.
    match std::str::from_utf8(&buf[..n]) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&buf[..e.valid_up_to()]).unwrap_or(""),
    }
}

/// `key value` from a memory.stat text.
fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(key)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

impl MemoryWatch {
    /// Finds the cgroup levels that limit this process and opens every file it will read.
    pub fn new() -> MemoryWatch {
        let membership = std::fs::read_to_string("/proc/self/cgroup")
            .map(|t| parse_proc_cgroup(&t))
            .unwrap_or_default();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .map(|t| parse_mountinfo_cgroups(&t))
            .unwrap_or_default();
        MemoryWatch {
            meminfo: File::open("/proc/meminfo").ok(),
            status: File::open("/proc/self/status").ok(),
            cgroups: limited_levels(&membership, &mounts),
        }
    }

    /// The directory of cgroup level `i` (see [`MemorySource::Cgroup`]).
    pub fn cgroup_dir(&self, i: usize) -> Option<&std::path::Path> {
        self.cgroups.get(i).map(|c| c.dir.as_path())
    }

    /// Reads the numbers now. Allocates nothing.
    pub fn read(&self) -> MemoryReading {
        let mut buf = [0u8; READ_BUF];
        let system_available = self
            .meminfo
            .as_ref()
            .and_then(|f| parse_meminfo_available(read_into(f, &mut buf)));
        let process_rss = self
            .status
            .as_ref()
            .and_then(|f| parse_status_rss(read_into(f, &mut buf)))
            .unwrap_or(0);
        let mut reading = MemoryReading {
            available: 0,
            source: MemorySource::Unknown,
            system_available,
            cgroup: None,
            process_rss,
        };
        if let Some(s) = system_available {
            reading.available = s;
            reading.source = MemorySource::System;
        }
        for (i, level) in self.cgroups.iter().enumerate() {
            let Some(limit) = (level.parse_limit)(read_into(&level.limit, &mut buf)) else {
                continue;
            };
            let usage =
                crate::memory::parse_counter(read_into(&level.usage, &mut buf)).unwrap_or(0);
            let inactive = level
                .stat
                .as_ref()
                .and_then(|f| stat_field(read_into(f, &mut buf), level.inactive_file_key))
                .unwrap_or(0);
            let room = limit.saturating_sub(usage.saturating_sub(inactive));
            if reading.source == MemorySource::Unknown || room < reading.available {
                reading.available = room;
                reading.source = MemorySource::Cgroup(i);
                reading.cgroup = Some((limit, usage, inactive));
            }
        }
        reading
    }
}

impl Default for MemoryWatch {
    fn default() -> Self {
        MemoryWatch::new()
    }
}

impl MemoryProbe for MemoryWatch {
    fn available_bytes(&self) -> u64 {
        self.read().available
    }
    fn used_bytes(&self) -> u64 {
        self.read().process_rss
    }
}

/// Every level from the process's cgroup up to the hierarchy's mount point, in both v1 and v2,
/// whose limit file exists (a level without a limit still has the file, reading "max").
fn limited_levels(membership: &CgroupMembership, mounts: &CgroupMounts) -> Vec<CgroupLevel> {
    let mut levels = Vec::new();
    let hierarchies = [
        (
            membership.unified.as_deref(),
            mounts.unified.as_ref(),
            "memory.max",
            "memory.current",
            parse_v2_limit as fn(&str) -> Option<u64>,
            "inactive_file",
        ),
        (
            membership.memory_v1.as_deref(),
            mounts.memory_v1.as_ref(),
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            parse_v1_limit as fn(&str) -> Option<u64>,
            "total_inactive_file",
        ),
    ];
    for (path, mount, limit_name, usage_name, parse_limit, inactive_file_key) in hierarchies {
        let (Some(path), Some(mount)) = (path, mount) else {
            continue;
        };
        let Some(leaf) = cgroup_dir(mount, path) else {
            continue;
        };
        let mut dir = Some(leaf.as_path());
        while let Some(here) = dir {
            let limit_text = std::fs::read_to_string(here.join(limit_name)).unwrap_or_default();
            if parse_limit(&limit_text).is_some() {
                if let (Ok(limit), Ok(usage)) = (
                    File::open(here.join(limit_name)),
                    File::open(here.join(usage_name)),
                ) {
                    levels.push(CgroupLevel {
                        dir: here.to_path_buf(),
                        limit,
                        usage,
                        stat: File::open(here.join("memory.stat")).ok(),
                        parse_limit,
                        inactive_file_key,
                    });
                }
            }
            if here == mount.mount_point {
                break;
            }
            dir = here.parent().filter(|p| p.starts_with(&mount.mount_point));
        }
    }
    levels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_by_exact_key() {
        let stat = "cache 10072064\nrss 11067392\ninactive_file 28672\n\
                    total_inactive_file 6160150528\n";
        assert_eq!(stat_field(stat, "inactive_file"), Some(28672));
        assert_eq!(stat_field(stat, "total_inactive_file"), Some(6_160_150_528));
        assert_eq!(stat_field(stat, "file"), None);
    }

    #[test]
    fn a_reading_on_this_machine_is_plausible_and_agrees_with_linux_memory() {
        let watch = MemoryWatch::new();
        let r = watch.read();
        assert!(r.available > 16 << 20, "{r:?}");
        assert!(r.process_rss > 1 << 20, "{r:?}");
        if let MemorySource::Cgroup(i) = r.source {
            assert!(watch.cgroup_dir(i).is_some());
            let (limit, usage, inactive) = r.cgroup.unwrap();
            assert_eq!(
                r.available,
                limit.saturating_sub(usage.saturating_sub(inactive))
            );
        }
        // Counting reclaimable cache can only find more room than limit - usage.
        let plain = crate::LinuxMemory::new().available_bytes();
        assert!(
            r.available + (64 << 20) >= plain,
            "{} vs {plain}",
            r.available
        );
    }
}
