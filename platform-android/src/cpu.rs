//! Which cores are fast on an Android device: the big cluster of a big.LITTLE phone, all four
//! of a TV box's A55s. The choice itself is platform-linux's ([`CpuTopology::fast_cpus`]);
//! this module finds the clocks where Android puts them and falls back to the core types in
//! /proc/cpuinfo when cpufreq is not readable (some vendor SELinux policies hide it from apps).

use smolrun_linux::cpu::parse_cpu_list;
use smolrun_linux::CpuTopology;
use std::path::Path;

/// Reads the topology from a sysfs cpu directory: first the per-CPU cpufreq files (what
/// platform-linux reads), then the cpufreq policies (`cpufreq/policyN/related_cpus` and
/// `cpuinfo_max_freq`, one per cluster), which Android kernels always have.
pub fn read_topology(cpu_dir: &Path) -> CpuTopology {
    let per_cpu = CpuTopology::read_from(cpu_dir);
    if per_cpu.cpus.iter().all(|&(_, khz)| khz.is_some()) && !per_cpu.cpus.is_empty() {
        return per_cpu;
    }
    let mut clocks: Vec<(usize, u64)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(cpu_dir.join("cpufreq")) {
        for entry in entries.flatten() {
            let is_policy = entry.file_name().to_string_lossy().starts_with("policy");
            if !is_policy {
                continue;
            }
            let read = |name: &str| std::fs::read_to_string(entry.path().join(name)).ok();
            let (Some(related), Some(khz)) = (read("related_cpus"), read("cpuinfo_max_freq"))
            else {
                continue;
            };
            let (Some(cpus), Ok(khz)) = (parse_related_cpus(&related), khz.trim().parse::<u64>())
            else {
                continue;
            };
            clocks.extend(cpus.into_iter().map(|cpu| (cpu, khz)));
        }
    }
    let cpus = per_cpu
        .cpus
        .iter()
        .map(|&(cpu, khz)| {
            let from_policy = clocks.iter().find(|&&(c, _)| c == cpu).map(|&(_, k)| k);
            (cpu, khz.or(from_policy))
        })
        .collect();
    CpuTopology { cpus }
}

/// `related_cpus` is a space-separated list ("4 5 6 7"); some kernels write a range list.
pub fn parse_related_cpus(text: &str) -> Option<Vec<usize>> {
    let text = text.trim();
    if text.contains(['-', ',']) {
        return parse_cpu_list(text);
    }
    text.split_whitespace().map(|c| c.parse().ok()).collect()
}

/// (processor number, CPU implementer, CPU part) for each core in /proc/cpuinfo.
pub fn parse_cpuinfo_parts(cpuinfo: &str) -> Vec<(usize, u32, u32)> {
    let hex = |v: &str| u32::from_str_radix(v.trim().trim_start_matches("0x"), 16).ok();
    let mut cores = Vec::new();
    for block in cpuinfo.split("\n\n") {
        let field = |key: &str| {
            block.lines().find_map(|line| {
                let (k, v) = line.split_once(':')?;
                (k.trim() == key).then_some(v.trim())
            })
        };
        let processor = field("processor").and_then(|v| v.parse().ok());
        let implementer = field("CPU implementer").and_then(hex);
        let part = field("CPU part").and_then(hex);
        if let (Some(p), Some(i), Some(part)) = (processor, implementer, part) {
            cores.push((p, i, part));
        }
    }
    cores
}

/// How fast a core type is, by (implementer, part): 1 for the in-order efficiency cores, 2
/// for out-of-order performance cores, None when unknown. Only the order matters.
pub fn core_rank(implementer: u32, part: u32) -> Option<u8> {
    match (implementer, part) {
        // Arm: A53, A35, A55, A510, A520, A7 (32-bit), A5.
        (0x41, 0xd03 | 0xd04 | 0xd05 | 0xd46 | 0xd80 | 0xc07 | 0xc05) => Some(1),
        // Arm: A57, A72, A73, A75, A76, A77, A78, X1, A710, X2, A715, X3, A720, X4, A15, A17.
        (
            0x41,
            0xd07 | 0xd08 | 0xd09 | 0xd0a | 0xd0b | 0xd0d | 0xd41 | 0xd44 | 0xd47 | 0xd48 | 0xd4d
            | 0xd4e | 0xd81 | 0xd82 | 0xc0f | 0xc0e,
        ) => Some(2),
        // Qualcomm Kryo 2xx/3xx/4xx Silver (A53/A55 based).
        (0x51, 0x801 | 0x803 | 0x805) => Some(1),
        // Qualcomm Kryo Gold (A73/A75/A76 based).
        (0x51, 0x800 | 0x802 | 0x804) => Some(2),
        _ => None,
    }
}

/// The fast cores from /proc/cpuinfo alone: those of the highest rank; empty when a core type
/// is unknown (then nothing is claimed and the caller uses every allowed core).
pub fn fast_cpus_from_cpuinfo(cpuinfo: &str) -> Vec<usize> {
    let cores = parse_cpuinfo_parts(cpuinfo);
    let ranks: Option<Vec<(usize, u8)>> = cores
        .iter()
        .map(|&(cpu, imp, part)| core_rank(imp, part).map(|r| (cpu, r)))
        .collect();
    let Some(ranks) = ranks else {
        return Vec::new();
    };
    let Some(best) = ranks.iter().map(|&(_, r)| r).max() else {
        return Vec::new();
    };
    ranks
        .into_iter()
        .filter(|&(_, r)| r == best)
        .map(|(cpu, _)| cpu)
        .collect()
}

/// The CPUs a pool should use on this device: the fast cluster by cpufreq, else by core type,
/// intersected with what this process may run on (Android keeps background apps on the
/// LITTLE cores with cpusets; then those are used).
pub fn default_cpus() -> Vec<usize> {
    let allowed = smolrun_linux::allowed_cpus();
    let topology = read_topology(Path::new("/sys/devices/system/cpu"));
    let by_clock = topology.fast_cpus();
    let fast = if by_clock.is_empty() {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        fast_cpus_from_cpuinfo(&cpuinfo)
    } else {
        by_clock
    };
    let fast_allowed: Vec<usize> = fast.into_iter().filter(|c| allowed.contains(c)).collect();
    if fast_allowed.is_empty() {
        allowed
    } else {
        fast_allowed
    }
}

/// Default thread count: the number of [`default_cpus`], at least 1, at most what
/// `available_parallelism` allows.
pub fn default_threads() -> usize {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    match default_cpus().len() {
        0 => available,
        n => n.min(available),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{fixture, fixture_path};

    #[test]
    fn tv_box_four_a55_from_the_policy() {
        let topology = read_topology(&fixture_path("sys-cpu-s905x4-box"));
        assert_eq!(
            topology.cpus,
            vec![
                (0, Some(2_000_000)),
                (1, Some(2_000_000)),
                (2, Some(2_000_000)),
                (3, Some(2_000_000))
            ]
        );
        assert_eq!(topology.fast_cpus(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn big_little_phone_from_two_policies() {
        // Snapdragon 665: 4x Kryo 260 Silver (A53) @ 1.8 GHz, 4x Gold (A73) @ 2.0 GHz.
        let topology = read_topology(&fixture_path("sys-cpu-sd665-phone"));
        assert_eq!(topology.cpus[0], (0, Some(1_804_800)));
        assert_eq!(topology.cpus[7], (7, Some(2_016_000)));
        assert_eq!(topology.fast_cpus(), vec![4, 5, 6, 7]);
    }

    #[test]
    fn related_cpus_formats() {
        assert_eq!(parse_related_cpus("4 5 6 7\n"), Some(vec![4, 5, 6, 7]));
        assert_eq!(parse_related_cpus("0-3\n"), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse_related_cpus("0 x"), None);
    }

    #[test]
    fn core_types_from_cpuinfo() {
        let a55 = fixture("cpuinfo-s905x4-4xa55");
        assert_eq!(parse_cpuinfo_parts(&a55)[3], (3, 0x41, 0xd05));
        assert_eq!(fast_cpus_from_cpuinfo(&a55), vec![0, 1, 2, 3]);
        let phone = fixture("cpuinfo-sd665-phone");
        assert_eq!(parse_cpuinfo_parts(&phone).len(), 8);
        assert_eq!(fast_cpus_from_cpuinfo(&phone), vec![4, 5, 6, 7]);
        let armv7 = fixture("cpuinfo-armv7-4xa7");
        assert_eq!(fast_cpus_from_cpuinfo(&armv7), vec![0, 1, 2, 3]);
        // An unknown core type claims nothing rather than guessing.
        let unknown = "processor\t: 0\nCPU implementer\t: 0x61\nCPU part\t: 0x022\n";
        assert!(fast_cpus_from_cpuinfo(unknown).is_empty());
        assert!(fast_cpus_from_cpuinfo("").is_empty());
    }

    #[test]
    fn this_machine_gets_at_least_one_thread() {
        let threads = default_threads();
        assert!(threads >= 1);
        assert!(threads <= std::thread::available_parallelism().unwrap().get());
    }
}
