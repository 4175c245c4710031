//! [`MemoryProbe`] for Android: the Linux probe (MemAvailable, memory cgroups such as
//! /dev/memcg/apps/uid_N/pid_M, VmRSS) capped by what the low-memory killer lets this
//! process take ([`crate::lmk`]).
//!
//! Never relies on `mlock`: an app's RLIMIT_MEMLOCK is 64 KiB on most Android builds, and
//! locked pages would count against the same ceiling anyway. Resident weights stay plain
//! mapped or heap pages; nothing in smolrun calls mlock.

use crate::lmk::{self, LmkLevel};
use smolrun_core::platform::MemoryProbe;
use smolrun_linux::LinuxMemory;
use std::path::Path;

/// MemTotal in bytes, from /proc/meminfo.
pub fn parse_mem_total(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let rest = line.strip_prefix("MemTotal:")?;
        let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
        kib.checked_mul(1024)
    })
}

/// /proc/self/oom_score_adj: one integer, -1000..1000.
pub fn parse_oom_score_adj(text: &str) -> Option<i32> {
    text.trim()
        .parse()
        .ok()
        .filter(|adj| (-1000..=1000).contains(adj))
}

/// Where the low-memory-killer levels were found, for `smolrun` diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LevelSource {
    /// `sys.lmk.minfree_levels`, published by lmkd.
    LmkdProperty,
    /// /sys/module/lowmemorykiller/parameters.
    KernelDriver,
    /// Nothing readable: the conservative default reserve.
    Default,
}

/// The Android memory probe. Levels and `ro.config.low_ram` are read once (they change only
/// when the system reconfigures lmkd); MemAvailable, the cgroups and oom_score_adj are read
/// on every call, because an app moved to the background gets a higher adj and a higher level.
#[derive(Debug, Clone)]
pub struct AndroidMemory {
    linux: LinuxMemory,
    levels: Option<Vec<LmkLevel>>,
    source: LevelSource,
    low_ram: bool,
}

/// `getprop`'s place on every Android since 1.0; absent on other Linux systems.
const GETPROP: &str = "/system/bin/getprop";
const LMK_PARAMETERS: &str = "/sys/module/lowmemorykiller/parameters";

impl AndroidMemory {
    /// Reads the levels from this device. Runs `getprop` once (a short-lived child before the
    /// model is loaded, so the fork copies almost nothing).
    pub fn new() -> AndroidMemory {
        let props = std::process::Command::new(GETPROP)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default();
        let driver = Path::new(LMK_PARAMETERS);
        let minfree = std::fs::read_to_string(driver.join("minfree")).ok();
        let adj = std::fs::read_to_string(driver.join("adj")).ok();
        AndroidMemory::from_sources(
            LinuxMemory::new(),
            &props,
            minfree.as_deref().zip(adj.as_deref()),
            page_size(),
        )
    }

    /// The probe from already-read sources: `getprop` output and the driver's (minfree, adj).
    pub fn from_sources(
        linux: LinuxMemory,
        getprop_output: &str,
        driver: Option<(&str, &str)>,
        page_size: u64,
    ) -> AndroidMemory {
        let from_property = lmk::getprop_value(getprop_output, "sys.lmk.minfree_levels")
            .and_then(|v| lmk::parse_minfree_levels_property(v, page_size));
        let from_driver = || {
            driver.and_then(|(minfree, adj)| lmk::parse_lowmemorykiller(minfree, adj, page_size))
        };
        let (levels, source) = match from_property {
            Some(levels) => (Some(levels), LevelSource::LmkdProperty),
            None => match from_driver() {
                Some(levels) => (Some(levels), LevelSource::KernelDriver),
                None => (None, LevelSource::Default),
            },
        };
        AndroidMemory {
            linux,
            levels,
            source,
            low_ram: lmk::prop_is_true(lmk::getprop_value(getprop_output, "ro.config.low_ram")),
        }
    }

    pub fn level_source(&self) -> LevelSource {
        self.source
    }

    pub fn levels(&self) -> Option<&[LmkLevel]> {
        self.levels.as_deref()
    }

    /// Peak resident set size (VmHWM).
    pub fn peak_used_bytes(&self) -> u64 {
        self.linux.peak_used_bytes()
    }
}

impl Default for AndroidMemory {
    fn default() -> Self {
        AndroidMemory::new()
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions; it returns -1 on error.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

impl MemoryProbe for AndroidMemory {
    fn available_bytes(&self) -> u64 {
        let linux = self.linux.available_bytes();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let Some(available) = smolrun_linux::memory::parse_meminfo_available(&meminfo) else {
            return linux;
        };
        let total = parse_mem_total(&meminfo).unwrap_or(available);
        let adj = std::fs::read_to_string("/proc/self/oom_score_adj")
            .ok()
            .and_then(|t| parse_oom_score_adj(&t));
        let ceiling = lmk::lmk_headroom(available, total, self.levels(), adj, self.low_ram);
        linux.min(ceiling)
    }

    fn used_bytes(&self) -> u64 {
        self.linux.used_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    #[test]
    fn meminfo_total_and_adj() {
        let meminfo = fixture("meminfo-android14-tvbox");
        assert_eq!(parse_mem_total(&meminfo), Some(1_983_276 * 1024));
        assert_eq!(parse_mem_total("MemFree: 5 kB\n"), None);
        assert_eq!(parse_oom_score_adj("0\n"), Some(0));
        assert_eq!(parse_oom_score_adj("-1000\n"), Some(-1000));
        assert_eq!(parse_oom_score_adj("905\n"), Some(905));
        assert_eq!(parse_oom_score_adj("2000\n"), None);
        assert_eq!(parse_oom_score_adj(""), None);
    }

    #[test]
    fn level_sources_in_order_of_preference() {
        let driver = (
            fixture("lowmemorykiller-minfree"),
            fixture("lowmemorykiller-adj"),
        );
        let driver = Some((driver.0.as_str(), driver.1.as_str()));
        let tv = AndroidMemory::from_sources(
            LinuxMemory::new(),
            &fixture("getprop-android14-tvbox"),
            driver,
            4096,
        );
        assert_eq!(tv.level_source(), LevelSource::LmkdProperty);
        assert_eq!(tv.levels().unwrap()[5].min_adj, 950);
        assert!(!tv.low_ram);

        let old_box = AndroidMemory::from_sources(LinuxMemory::new(), "", driver, 4096);
        assert_eq!(old_box.level_source(), LevelSource::KernelDriver);
        assert_eq!(old_box.levels().unwrap()[5].min_adj, 1000);

        let phone = AndroidMemory::from_sources(
            LinuxMemory::new(),
            &fixture("getprop-android13-phone-psi"),
            None,
            4096,
        );
        assert_eq!(phone.level_source(), LevelSource::Default);
        assert!(phone.levels().is_none());

        let go = AndroidMemory::from_sources(
            LinuxMemory::new(),
            &fixture("getprop-android-go-lowram"),
            None,
            4096,
        );
        assert!(go.low_ram);
        assert_eq!(go.level_source(), LevelSource::LmkdProperty);
    }

    /// On this (non-Android) machine there is no getprop and no driver: the default reserve
    /// applies, and the Android probe never claims more than the Linux one.
    #[test]
    fn never_more_than_the_linux_probe() {
        let android = AndroidMemory::new();
        let linux = LinuxMemory::new();
        let a = android.available_bytes();
        let l = linux.available_bytes();
        // Both read live counters; allow for memory moving between the two reads.
        assert!(a <= l + (64 << 20), "android {a} > linux {l}");
        assert!(android.used_bytes() > 0);
    }
}
