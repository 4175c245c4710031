//! How much memory the process may still use: the smaller of what the kernel says is available
//! system-wide (MemAvailable) and what the process's memory cgroup still allows (limit minus
//! usage, at every level up the hierarchy). Android's low-memory killer and containers both
//! kill well before MemTotal is reached, so core sizes its arena and weight pools from this.
//!
//! The parsers are pure functions over the text of the /proc and /sys files, so they are
//! tested on files recorded from real machines (tests/fixtures/).

use smolrun_core::platform::MemoryProbe;
use std::path::{Path, PathBuf};

/// Parses a "Key:   value kB" line's value into bytes.
fn kib_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        let mut words = rest.split_whitespace();
        let value: u64 = words.next()?.parse().ok()?;
        match words.next() {
            Some("kB") => value.checked_mul(1024),
            None => Some(value),
            Some(_) => None,
        }
    })
}

/// Bytes available system-wide, from /proc/meminfo. Kernels before 3.14 (old Android TV
/// boxes) have no MemAvailable; then MemFree + Buffers + Cached is the usual estimate.
pub fn parse_meminfo_available(meminfo: &str) -> Option<u64> {
    kib_field(meminfo, "MemAvailable").or_else(|| {
        let free = kib_field(meminfo, "MemFree")?;
        let buffers = kib_field(meminfo, "Buffers").unwrap_or(0);
        let cached = kib_field(meminfo, "Cached").unwrap_or(0);
        Some(free + buffers + cached)
    })
}

/// Resident set size in bytes, from /proc/self/status (VmRSS).
pub fn parse_status_rss(status: &str) -> Option<u64> {
    kib_field(status, "VmRSS")
}

/// Peak resident set size in bytes, from /proc/self/status (VmHWM).
pub fn parse_status_peak_rss(status: &str) -> Option<u64> {
    kib_field(status, "VmHWM")
}

/// Where the process sits in the cgroup hierarchies, from /proc/self/cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgroupMembership {
    /// Path in the unified (v2) hierarchy, from the `0::/path` line.
    pub unified: Option<String>,
    /// Path in the v1 hierarchy that has the memory controller.
    pub memory_v1: Option<String>,
}

/// Parses /proc/self/cgroup: lines `id:controllers:path`; v2 is `0::path`, v1 memory is the
/// line whose comma-separated controller list contains `memory`.
pub fn parse_proc_cgroup(text: &str) -> CgroupMembership {
    let mut found = CgroupMembership::default();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            found.unified = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "memory") {
            found.memory_v1 = Some(path.to_string());
        }
    }
    found
}

/// A cgroup file system mount: `root` is the cgroup path that appears at `mount_point`
/// (not "/" inside containers that mount only their own subtree).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    pub root: String,
    pub mount_point: PathBuf,
}

/// The cgroup mounts that matter for memory, from /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgroupMounts {
    pub unified: Option<CgroupMount>,
    pub memory_v1: Option<CgroupMount>,
}

/// mountinfo escapes space, tab, newline and backslash as \ooo octal.
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses /proc/self/mountinfo lines:
/// `id parent major:minor root mount_point options [optional fields] - fstype source superoptions`.
pub fn parse_mountinfo_cgroups(text: &str) -> CgroupMounts {
    let mut found = CgroupMounts::default();
    for line in text.lines() {
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = before.split(' ').collect();
        let after: Vec<&str> = after.split(' ').collect();
        if fields.len() < 5 || after.is_empty() {
            continue;
        }
        let mount = CgroupMount {
            root: unescape_mountinfo(fields[3]),
            mount_point: PathBuf::from(unescape_mountinfo(fields[4])),
        };
        let super_options = after.get(2).copied().unwrap_or("");
        match after[0] {
            "cgroup2" if found.unified.is_none() => found.unified = Some(mount),
            "cgroup"
                if found.memory_v1.is_none() && super_options.split(',').any(|o| o == "memory") =>
            {
                found.memory_v1 = Some(mount)
            }
            _ => {}
        }
    }
    found
}

/// The directory of cgroup `path` under `mount`, or None when the path is outside the mounted
/// subtree (then the cgroup files cannot be reached from here).
pub fn cgroup_dir(mount: &CgroupMount, path: &str) -> Option<PathBuf> {
    let relative = if mount.root == "/" {
        path
    } else {
        let rest = path.strip_prefix(mount.root.as_str())?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest
    };
    Some(mount.mount_point.join(relative.trim_start_matches('/')))
}

/// A cgroup v1 limit (memory.limit_in_bytes): None when unlimited. "Unlimited" is the
/// kernel's page-counter maximum rounded to a page, just under 2^63; anything at or above
/// 2^62 is treated as no limit.
pub fn parse_v1_limit(text: &str) -> Option<u64> {
    let value: u64 = text.trim().parse().ok()?;
    (value < 1 << 62).then_some(value)
}

/// A cgroup v2 limit (memory.max): None for "max" (unlimited) or unreadable.
pub fn parse_v2_limit(text: &str) -> Option<u64> {
    match text.trim() {
        "max" => None,
        value => value.parse().ok(),
    }
}

/// A usage counter (memory.usage_in_bytes, memory.current).
pub fn parse_counter(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The files of one cgroup hierarchy that bound this process.
#[derive(Debug, Clone)]
struct CgroupFiles {
    /// The process's cgroup directory.
    leaf: PathBuf,
    /// The hierarchy's mount point: the walk up stops there.
    top: PathBuf,
    limit_file: &'static str,
    usage_file: &'static str,
    parse_limit: fn(&str) -> Option<u64>,
}

impl CgroupFiles {
    /// Smallest (limit - usage) over the cgroup and its ancestors up to the mount point: a
    /// parent's limit binds its children too. None when no level has a limit.
    fn headroom(&self) -> Option<u64> {
        let mut best: Option<u64> = None;
        let mut dir = Some(self.leaf.as_path());
        while let Some(here) = dir {
            let limit = std::fs::read_to_string(here.join(self.limit_file))
                .ok()
                .and_then(|t| (self.parse_limit)(&t));
            if let Some(limit) = limit {
                let usage = std::fs::read_to_string(here.join(self.usage_file))
                    .ok()
                    .and_then(|t| parse_counter(&t))
                    .unwrap_or(0);
                let left = limit.saturating_sub(usage);
                best = Some(best.map_or(left, |b| b.min(left)));
            }
            if here == self.top {
                break;
            }
            dir = here.parent().filter(|p| p.starts_with(&self.top));
        }
        best
    }
}

/// [`MemoryProbe`] for Linux: MemAvailable, cgroup v1 and v2 limits, VmRSS.
/// The cgroup directories are found once at construction; the numbers are read on every call.
#[derive(Debug, Clone)]
pub struct LinuxMemory {
    cgroups: Vec<CgroupFiles>,
}

impl LinuxMemory {
    pub fn new() -> LinuxMemory {
        let membership = std::fs::read_to_string("/proc/self/cgroup")
            .map(|t| parse_proc_cgroup(&t))
            .unwrap_or_default();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .map(|t| parse_mountinfo_cgroups(&t))
            .unwrap_or_default();
        LinuxMemory {
            cgroups: cgroup_files(&membership, &mounts),
        }
    }

    /// The cgroup directories whose limits bound this process (for diagnostics).
    pub fn cgroup_dirs(&self) -> Vec<&Path> {
        self.cgroups.iter().map(|c| c.leaf.as_path()).collect()
    }

    /// Headroom left under the cgroup limits, None when no cgroup limits the process.
    pub fn cgroup_headroom(&self) -> Option<u64> {
        self.cgroups.iter().filter_map(CgroupFiles::headroom).min()
    }

    /// Peak resident set size in bytes (VmHWM), 0 when unreadable.
    pub fn peak_used_bytes(&self) -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|t| parse_status_peak_rss(&t))
            .unwrap_or(0)
    }
}

impl Default for LinuxMemory {
    fn default() -> Self {
        LinuxMemory::new()
    }
}

fn cgroup_files(membership: &CgroupMembership, mounts: &CgroupMounts) -> Vec<CgroupFiles> {
    let mut files = Vec::new();
    if let (Some(path), Some(mount)) = (&membership.unified, &mounts.unified) {
        if let Some(leaf) = cgroup_dir(mount, path) {
            files.push(CgroupFiles {
                leaf,
                top: mount.mount_point.clone(),
                limit_file: "memory.max",
                usage_file: "memory.current",
                parse_limit: parse_v2_limit,
            });
        }
    }
    if let (Some(path), Some(mount)) = (&membership.memory_v1, &mounts.memory_v1) {
        if let Some(leaf) = cgroup_dir(mount, path) {
            files.push(CgroupFiles {
                leaf,
                top: mount.mount_point.clone(),
                limit_file: "memory.limit_in_bytes",
                usage_file: "memory.usage_in_bytes",
                parse_limit: parse_v1_limit,
            });
        }
    }
    files
}

impl MemoryProbe for LinuxMemory {
    fn available_bytes(&self) -> u64 {
        let system = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| parse_meminfo_available(&t));
        match (system, self.cgroup_headroom()) {
            (Some(s), Some(c)) => s.min(c),
            (Some(s), None) => s,
            (None, Some(c)) => c,
            // Nothing readable (a locked-down sandbox): claim nothing rather than everything.
            (None, None) => 0,
        }
    }

    fn used_bytes(&self) -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|t| parse_status_rss(&t))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn meminfo_available_and_old_kernel_estimate() {
        assert_eq!(
            parse_meminfo_available(&fixture("meminfo-x86")),
            Some(23_091_704 * 1024)
        );
        // A 3.10 kernel (Android TV box) without MemAvailable: MemFree + Buffers + Cached.
        assert_eq!(
            parse_meminfo_available(&fixture("meminfo-3.10-no-available")),
            Some((93_436 + 10_752 + 297_744) * 1024)
        );
        assert_eq!(parse_meminfo_available("garbage\n"), None);
    }

    #[test]
    fn status_rss_and_peak() {
        let status = fixture("status");
        assert_eq!(parse_status_rss(&status), Some(187_412 * 1024));
        assert_eq!(parse_status_peak_rss(&status), Some(201_044 * 1024));
        // MemAvailable must not match a prefix of another key.
        assert_eq!(kib_field("VmRSSx: 5 kB\n", "VmRSS"), None);
    }

    #[test]
    fn proc_self_cgroup_variants() {
        // cgroup v1 with a hybrid unified hierarchy (this CI machine).
        let hybrid = parse_proc_cgroup(&fixture("proc-cgroup-v1-hybrid"));
        assert_eq!(hybrid.unified.as_deref(), Some("/"));
        assert_eq!(
            hybrid.memory_v1.as_deref(),
            Some("/process_api/7311490426f0d50a798cd763f5117729")
        );
        // Pure v2 (systemd, Docker with cgroupns).
        let v2 = parse_proc_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n");
        assert_eq!(
            v2.unified.as_deref(),
            Some("/user.slice/user-1000.slice/session-3.scope")
        );
        assert_eq!(v2.memory_v1, None);
        // Android: memory controller mounted with others, app in a uid/pid group.
        let android = parse_proc_cgroup(&fixture("proc-cgroup-android"));
        assert_eq!(
            android.memory_v1.as_deref(),
            Some("/apps/uid_10123/pid_4242")
        );
        assert_eq!(android.unified.as_deref(), Some("/uid_10123/pid_4242"));
    }

    #[test]
    fn mountinfo_finds_cgroup_mounts_and_resolves_dirs() {
        let mounts = parse_mountinfo_cgroups(&fixture("mountinfo-v1-hybrid"));
        let v1 = mounts.memory_v1.clone().unwrap();
        assert_eq!(v1.mount_point, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(v1.root, "/");
        let unified = mounts.unified.clone().unwrap();
        assert_eq!(unified.mount_point, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(
            cgroup_dir(&v1, "/process_api/abc").unwrap(),
            Path::new("/sys/fs/cgroup/memory/process_api/abc")
        );

        // A container that mounts only its own subtree, at a path with a space in it.
        let docker = parse_mountinfo_cgroups(&fixture("mountinfo-v2-container"));
        let mount = docker.unified.unwrap();
        assert_eq!(mount.root, "/docker/4f1e");
        assert_eq!(mount.mount_point, Path::new("/sys/fs/my cgroup"));
        assert_eq!(docker.memory_v1, None);
        assert_eq!(
            cgroup_dir(&mount, "/docker/4f1e/worker").unwrap(),
            Path::new("/sys/fs/my cgroup/worker")
        );
        assert_eq!(
            cgroup_dir(&mount, "/docker/4f1e").unwrap(),
            Path::new("/sys/fs/my cgroup")
        );
        assert_eq!(cgroup_dir(&mount, "/docker/4f1e0"), None);
        assert_eq!(cgroup_dir(&mount, "/other"), None);
    }

    #[test]
    fn cgroup_limits_v1_and_v2() {
        assert_eq!(parse_v1_limit("9223372036854771712\n"), None);
        assert_eq!(parse_v1_limit("1073741824\n"), Some(1 << 30));
        assert_eq!(parse_v2_limit("max\n"), None);
        assert_eq!(parse_v2_limit("536870912\n"), Some(512 << 20));
        assert_eq!(parse_counter("222584832\n"), Some(222_584_832));
        assert_eq!(parse_counter(""), None);
    }

    /// A recorded cgroup tree (v2 layout) with the limit on the parent, not the leaf.
    #[test]
    fn headroom_walks_up_to_the_tightest_ancestor() {
        let top = std::env::temp_dir().join(format!("smolrun-cg-{}", std::process::id()));
        let leaf = top.join("app.slice/run.scope");
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::write(leaf.join("memory.max"), "max\n").unwrap();
        std::fs::write(leaf.join("memory.current"), "100000000\n").unwrap();
        std::fs::write(top.join("app.slice/memory.max"), "1073741824\n").unwrap();
        std::fs::write(top.join("app.slice/memory.current"), "900000000\n").unwrap();
        let files = CgroupFiles {
            leaf: leaf.clone(),
            top: top.clone(),
            limit_file: "memory.max",
            usage_file: "memory.current",
            parse_limit: parse_v2_limit,
        };
        assert_eq!(files.headroom(), Some(1_073_741_824 - 900_000_000));
        std::fs::write(leaf.join("memory.max"), "150000000\n").unwrap();
        assert_eq!(files.headroom(), Some(50_000_000));
        std::fs::remove_dir_all(&top).unwrap();
    }

    #[test]
    fn this_machine_reports_plausible_numbers() {
        let probe = LinuxMemory::new();
        let available = probe.available_bytes();
        let used = probe.used_bytes();
        assert!(available > 16 << 20, "available {available} bytes");
        assert!(used > 1 << 20, "used {used} bytes");
        assert!(probe.peak_used_bytes() >= used);
    }
}
