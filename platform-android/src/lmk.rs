//! Android's low-memory killer, as seen from a process that wants to stay alive.
//!
//! Android kills processes long before the kernel runs out of memory: when free memory (free
//! pages and page cache alike) drops below a "minfree" level, every process whose
//! `oom_score_adj` is at or above that level's adj is a candidate, the highest adj first. A
//! process that pushes free memory below its own level is killed itself, so the memory it can
//! take is MemAvailable minus its own level, not MemAvailable.
//!
//! The levels come from, in order of preference:
//! - `sys.lmk.minfree_levels` (userspace lmkd publishes it when it uses minfree levels):
//!   `pages:adj` pairs, `18432:0,23040:100,...`;
//! - the in-kernel driver's `/sys/module/lowmemorykiller/parameters/{minfree,adj}` (Android 9
//!   and older kernels): two comma-separated lists, adj in oom_score_adj units, or in the old
//!   oom_adj units (-17..15) if ActivityManager has not written them yet;
//! - nothing readable (lmkd driven by memory pressure alone, Android 10+ phones): then a
//!   conservative reserve of an eighth of MemTotal (see [`DEFAULT_RESERVE_DIVISOR`]).
//!
//! Everything here is a pure function over the text of those files and of `getprop`'s output,
//! tested on recorded copies (tests/fixtures/).

/// One low-memory-killer level: below `free_bytes` of free memory, processes with an
/// `oom_score_adj` of `min_adj` or more are killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LmkLevel {
    pub free_bytes: u64,
    pub min_adj: i32,
}

/// When no level is readable, keep this share of MemTotal free (1/8: 240 MiB on a 2 GB TV box,
/// between the foreground level, ~72 MiB, and the cached-app level, ~315 MiB, that AOSP
/// chooses for 2 GB devices), so the process is not the one lmkd picks under pressure.
pub const DEFAULT_RESERVE_DIVISOR: u64 = 8;

/// The smallest reserve kept whatever the levels say: 64 MiB.
pub const MIN_RESERVE_BYTES: u64 = 64 << 20;

/// The `oom_score_adj` of a foreground app and of a shell started by adb (what smolrun is when
/// it runs in Termux on screen or from `adb shell`).
pub const FOREGROUND_ADJ: i32 = 0;

/// Parses `getprop` output (`[key]: [value]` per line) and returns the value of `key`.
/// Values may contain `]` (rarely, e.g. in fingerprints), so the value is what lies between
/// the first `[` after the colon and the last `]` of the line.
pub fn getprop_value<'a>(getprop_output: &'a str, key: &str) -> Option<&'a str> {
    getprop_output.lines().find_map(|line| {
        let rest = line.trim().strip_prefix('[')?;
        let (name, rest) = rest.split_once("]:")?;
        if name != key {
            return None;
        }
        let value = rest.trim().strip_prefix('[')?.strip_suffix(']')?;
        Some(value)
    })
}

/// Parses `sys.lmk.minfree_levels`: comma-separated `pages:adj` pairs. None if any pair is
/// malformed (a level we cannot read is worse than none: the caller then uses the default).
pub fn parse_minfree_levels_property(value: &str, page_size: u64) -> Option<Vec<LmkLevel>> {
    let mut levels = Vec::new();
    for pair in value.trim().split(',').filter(|p| !p.trim().is_empty()) {
        let (pages, adj) = pair.trim().split_once(':')?;
        levels.push(LmkLevel {
            free_bytes: pages.trim().parse::<u64>().ok()?.checked_mul(page_size)?,
            min_adj: adj.trim().parse().ok()?,
        });
    }
    (!levels.is_empty()).then_some(levels)
}

/// oom_adj (-17..15, kernels before oom_score_adj) to oom_score_adj (-1000..1000), as the
/// lowmemorykiller driver converts it: 15 is 1000, otherwise adj * 1000 / 17.
fn oom_adj_to_score_adj(oom_adj: i32) -> i32 {
    if oom_adj == 15 {
        1000
    } else {
        oom_adj * 1000 / 17
    }
}

/// Parses the in-kernel driver's `minfree` (pages) and `adj` lists. If every adj is within
/// oom_adj's range (at most 15), they are taken as oom_adj units and converted.
pub fn parse_lowmemorykiller(minfree: &str, adj: &str, page_size: u64) -> Option<Vec<LmkLevel>> {
    let list = |text: &str| -> Option<Vec<i64>> {
        text.trim()
            .split(',')
            .filter(|v| !v.trim().is_empty())
            .map(|v| v.trim().parse().ok())
            .collect()
    };
    let pages = list(minfree)?;
    let adjs = list(adj)?;
    if pages.is_empty() || pages.len() != adjs.len() {
        return None;
    }
    let oom_adj_units = adjs.iter().all(|&a| a <= 15);
    pages
        .iter()
        .zip(&adjs)
        .map(|(&p, &a)| {
            let a = i32::try_from(a).ok()?;
            Some(LmkLevel {
                free_bytes: u64::try_from(p).ok()?.checked_mul(page_size)?,
                min_adj: if oom_adj_units {
                    oom_adj_to_score_adj(a)
                } else {
                    a
                },
            })
        })
        .collect()
}

/// Free memory below which a process with `oom_score_adj` is killed: the level with the
/// largest `min_adj` that still applies to it (levels for higher adj are reached first and
/// kill others; once free memory falls below this one, this process is a candidate).
/// None when no level applies (an adj below every level's, e.g. a system daemon).
pub fn kill_threshold(levels: &[LmkLevel], oom_score_adj: i32) -> Option<u64> {
    levels
        .iter()
        .filter(|l| l.min_adj <= oom_score_adj)
        .max_by_key(|l| (l.min_adj, l.free_bytes))
        .map(|l| l.free_bytes)
}

/// What lmkd lets this process take from `available` (MemAvailable) bytes: `available`
/// minus the free memory it must leave. `levels` None (nothing readable) or `low_ram`
/// (Android Go, ro.config.low_ram) reserve at least `mem_total / 8`; every case reserves at
/// least [`MIN_RESERVE_BYTES`]. `oom_score_adj` None (unreadable) counts as the highest
/// level, the most cautious reading.
pub fn lmk_headroom(
    available: u64,
    mem_total: u64,
    levels: Option<&[LmkLevel]>,
    oom_score_adj: Option<i32>,
    low_ram: bool,
) -> u64 {
    let default_reserve = mem_total / DEFAULT_RESERVE_DIVISOR;
    let level_reserve = levels.and_then(|levels| {
        let adj = oom_score_adj.unwrap_or(1000);
        kill_threshold(levels, adj)
    });
    let reserve = match (level_reserve, low_ram) {
        (Some(level), false) => level,
        (Some(level), true) => level.max(default_reserve),
        (None, _) => default_reserve,
    };
    available.saturating_sub(reserve.max(MIN_RESERVE_BYTES))
}

/// Whether a getprop boolean says true (Android writes "true"/"false", some vendors "1"/"0").
pub fn prop_is_true(value: Option<&str>) -> bool {
    matches!(value.map(str::trim), Some("true") | Some("1"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture;

    const PAGE: u64 = 4096;

    #[test]
    fn getprop_values() {
        let props = fixture("getprop-android14-tvbox");
        assert_eq!(
            getprop_value(&props, "sys.lmk.minfree_levels"),
            Some("18432:0,23040:100,27648:200,32256:250,55296:900,80640:950")
        );
        assert_eq!(getprop_value(&props, "ro.config.low_ram"), Some("false"));
        assert_eq!(getprop_value(&props, "ro.lmk"), None);
        assert_eq!(getprop_value(&props, "ro.lmk.kill_timeout_ms"), Some("100"));
        assert_eq!(getprop_value("[a]: [x]y]\n", "a"), Some("x]y"));
        assert_eq!(getprop_value("garbage\n[a] [b]\n", "a"), None);
        assert!(prop_is_true(getprop_value(
            &fixture("getprop-android-go-lowram"),
            "ro.config.low_ram"
        )));
        assert!(!prop_is_true(getprop_value(&props, "ro.config.low_ram")));
        assert!(!prop_is_true(None));
    }

    #[test]
    fn minfree_levels_from_lmkd_property() {
        let props = fixture("getprop-android14-tvbox");
        let value = getprop_value(&props, "sys.lmk.minfree_levels").unwrap();
        let levels = parse_minfree_levels_property(value, PAGE).unwrap();
        assert_eq!(levels.len(), 6);
        assert_eq!(
            levels[0],
            LmkLevel {
                free_bytes: 72 << 20,
                min_adj: 0
            }
        );
        assert_eq!(
            levels[5],
            LmkLevel {
                free_bytes: 315 << 20,
                min_adj: 950
            }
        );
        // 16 KiB pages (Android 15 on some devices) scale the same counts.
        let big_pages = parse_minfree_levels_property(value, 16384).unwrap();
        assert_eq!(big_pages[0].free_bytes, 288 << 20);
        assert_eq!(parse_minfree_levels_property("18432:0,x:100", PAGE), None);
        assert_eq!(parse_minfree_levels_property("", PAGE), None);
        // A PSI-only phone publishes no levels.
        let psi = fixture("getprop-android13-phone-psi");
        assert_eq!(getprop_value(&psi, "sys.lmk.minfree_levels"), None);
    }

    #[test]
    fn in_kernel_driver_levels_in_both_adj_units() {
        let minfree = fixture("lowmemorykiller-minfree");
        let score_adj = parse_lowmemorykiller(&minfree, &fixture("lowmemorykiller-adj"), PAGE)
            .expect("recorded lowmemorykiller levels");
        let adjs: Vec<i32> = score_adj.iter().map(|l| l.min_adj).collect();
        assert_eq!(adjs, [0, 58, 117, 176, 529, 1000]);
        assert_eq!(score_adj[1].free_bytes, 90 << 20);
        let old_units = parse_lowmemorykiller(
            &minfree,
            &fixture("lowmemorykiller-adj-oom_adj-units"),
            PAGE,
        )
        .unwrap();
        let adjs: Vec<i32> = old_units.iter().map(|l| l.min_adj).collect();
        assert_eq!(adjs, [0, 58, 117, 176, 529, 1000]);
        assert_eq!(parse_lowmemorykiller("1,2", "0", PAGE), None);
        assert_eq!(parse_lowmemorykiller("", "", PAGE), None);
        assert_eq!(parse_lowmemorykiller("1,-2", "0,100", PAGE), None);
    }

    #[test]
    fn threshold_follows_the_process_adj() {
        let levels = parse_minfree_levels_property(
            "18432:0,23040:100,27648:200,32256:250,55296:900,80640:950",
            PAGE,
        )
        .unwrap();
        assert_eq!(kill_threshold(&levels, 0), Some(72 << 20));
        assert_eq!(kill_threshold(&levels, 150), Some(90 << 20));
        assert_eq!(kill_threshold(&levels, 925), Some(216 << 20));
        assert_eq!(kill_threshold(&levels, 1000), Some(315 << 20));
        assert_eq!(kill_threshold(&levels, -1000), None);
    }

    #[test]
    fn headroom_on_the_recorded_tv_box() {
        let meminfo = fixture("meminfo-android14-tvbox");
        let available = smolrun_linux::memory::parse_meminfo_available(&meminfo).unwrap();
        let total = parse_mem_total(&meminfo).unwrap();
        assert_eq!(available, 1_012_316 * 1024);
        let props = fixture("getprop-android14-tvbox");
        let levels = parse_minfree_levels_property(
            getprop_value(&props, "sys.lmk.minfree_levels").unwrap(),
            PAGE,
        )
        .unwrap();
        // In Termux on screen or from adb shell (adj 0): MemAvailable less the 72 MiB level.
        let foreground = lmk_headroom(available, total, Some(&levels), Some(0), false);
        assert_eq!(foreground, available - (72 << 20));
        // A background app (adj 900) must leave 216 MiB free.
        let background = lmk_headroom(available, total, Some(&levels), Some(900), false);
        assert_eq!(background, available - (216 << 20));
        // adj unreadable: the highest level.
        let unknown = lmk_headroom(available, total, Some(&levels), None, false);
        assert_eq!(unknown, available - (315 << 20));
        // No levels at all (PSI lmkd): an eighth of MemTotal, 242 MiB here.
        let psi = lmk_headroom(available, total, None, Some(0), false);
        assert_eq!(psi, available - total / 8);
        // Android Go: at least an eighth of MemTotal even for a foreground process.
        let go = lmk_headroom(available, total, Some(&levels), Some(0), true);
        assert_eq!(go, available - total / 8);
        // Never more than is available, and a floor of 64 MiB kept free.
        assert_eq!(lmk_headroom(50 << 20, 1 << 30, None, Some(0), false), 0);
        assert_eq!(
            lmk_headroom(1 << 30, 256 << 20, None, Some(0), false),
            (1 << 30) - MIN_RESERVE_BYTES
        );
    }

    use crate::memory::parse_mem_total;
}
