//! What the CPU can do (for kernel dispatch) and which cores are fast (for the thread count).
//!
//! Features come from the running CPU, never from compile-time flags: one aarch64 binary runs
//! on an A55 with dotprod and on an A53 without it, and must never reach an sdot on the A53.

use smolrun_core::platform::CpuFeatures;
use std::path::Path;

/// Linux aarch64 AT_HWCAP / AT_HWCAP2 bits (arch/arm64/include/uapi/asm/hwcap.h). Kept here,
/// not taken from libc, so the decoding compiles and is tested on every host.
pub mod hwcap {
    pub const ASIMD: u64 = 1 << 1;
    /// Half-precision scalar floating point.
    pub const FPHP: u64 = 1 << 9;
    /// Half-precision NEON arithmetic.
    pub const ASIMDHP: u64 = 1 << 10;
    /// SDOT/UDOT (ARMv8.2 dotprod).
    pub const ASIMDDP: u64 = 1 << 20;
    /// In AT_HWCAP2: SMMLA/UMMLA/USMMLA (int8 matrix multiply).
    pub const HWCAP2_I8MM: u64 = 1 << 13;
}

/// Decodes aarch64 AT_HWCAP and AT_HWCAP2 into core's feature set. fp16 means both scalar and
/// NEON half precision (kernels use the vector form).
pub fn features_from_hwcap(hwcap: u64, hwcap2: u64) -> CpuFeatures {
    CpuFeatures {
        neon: hwcap & hwcap::ASIMD != 0,
        dotprod: hwcap & hwcap::ASIMDDP != 0,
        fp16: hwcap & hwcap::FPHP != 0 && hwcap & hwcap::ASIMDHP != 0,
        i8mm: hwcap2 & hwcap::HWCAP2_I8MM != 0,
        ..CpuFeatures::default()
    }
}

/// The features of the CPU this process runs on.
pub fn detect_features() -> CpuFeatures {
    #[cfg(all(
        target_arch = "aarch64",
        any(target_os = "linux", target_os = "android")
    ))]
    {
        // SAFETY: getauxval only reads the auxiliary vector; unknown types return 0.
        let (hwcap, hwcap2) = unsafe {
            (
                libc::getauxval(libc::AT_HWCAP),
                libc::getauxval(libc::AT_HWCAP2),
            )
        };
        features_from_hwcap(hwcap, hwcap2)
    }
    #[cfg(target_arch = "x86_64")]
    {
        CpuFeatures {
            avx2: std::arch::is_x86_feature_detected!("avx2"),
            fma: std::arch::is_x86_feature_detected!("fma"),
            f16c: std::arch::is_x86_feature_detected!("f16c"),
            avx512f: std::arch::is_x86_feature_detected!("avx512f"),
            avx512bw: std::arch::is_x86_feature_detected!("avx512bw"),
            avx512vnni: std::arch::is_x86_feature_detected!("avx512vnni"),
            ..CpuFeatures::default()
        }
    }
    // Darwin has no auxiliary vector: smolrun-ios asks sysctl. Here only what every aarch64
    // core has (NEON is part of ARMv8.0), so nothing newer is ever assumed.
    #[cfg(all(
        target_arch = "aarch64",
        not(any(target_os = "linux", target_os = "android"))
    ))]
    {
        CpuFeatures {
            neon: true,
            ..CpuFeatures::default()
        }
    }
    #[cfg(not(any(target_arch = "aarch64", target_arch = "x86_64")))]
    {
        CpuFeatures::default()
    }
}

/// Parses a sysfs CPU list such as "0-3,6,8-9" (`/sys/devices/system/cpu/online`).
/// None on malformed text.
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last): (usize, usize) = (first.parse().ok()?, last.parse().ok()?);
                if last < first {
                    return None;
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// The online CPUs and their maximum clock, read from sysfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuTopology {
    /// (cpu number, cpuinfo_max_freq in kHz when cpufreq exposes it).
    pub cpus: Vec<(usize, Option<u64>)>,
}

impl CpuTopology {
    /// Reads `/sys/devices/system/cpu`.
    pub fn read() -> CpuTopology {
        CpuTopology::read_from(Path::new("/sys/devices/system/cpu"))
    }

    /// Reads a sysfs cpu directory (the real one, or a recorded copy in tests): the `online`
    /// list, then `cpuN/cpufreq/cpuinfo_max_freq` for each CPU. Without an `online` file it
    /// finds no CPUs, and callers fall back to `available_parallelism`.
    pub fn read_from(cpu_dir: &Path) -> CpuTopology {
        let online = std::fs::read_to_string(cpu_dir.join("online"))
            .ok()
            .and_then(|t| parse_cpu_list(&t))
            .unwrap_or_default();
        let cpus = online
            .into_iter()
            .map(|cpu| {
                let freq_file = cpu_dir.join(format!("cpu{cpu}/cpufreq/cpuinfo_max_freq"));
                let khz = std::fs::read_to_string(freq_file)
                    .ok()
                    .and_then(|t| t.trim().parse().ok());
                (cpu, khz)
            })
            .collect();
        CpuTopology { cpus }
    }

    /// The CPUs worth running matvecs on: on big.LITTLE the big cluster only, because a
    /// job is as slow as its slowest worker and a LITTLE core is 2-3x slower. These are the
    /// CPUs at the highest max frequency; when that is a single "prime" core (1+3+4 phone
    /// SoCs) the next cluster down joins it. Empty when cpufreq says nothing (VMs, some boxes).
    pub fn fast_cpus(&self) -> Vec<usize> {
        let mut freqs: Vec<u64> = self.cpus.iter().filter_map(|&(_, f)| f).collect();
        if freqs.len() != self.cpus.len() || freqs.is_empty() {
            return Vec::new();
        }
        freqs.sort_unstable_by(|a, b| b.cmp(a));
        freqs.dedup();
        let at_least = |khz: u64| -> Vec<usize> {
            self.cpus
                .iter()
                .filter(|&&(_, f)| f.is_some_and(|f| f >= khz))
                .map(|&(cpu, _)| cpu)
                .collect()
        };
        let fastest = at_least(freqs[0]);
        match freqs.get(1) {
            Some(&second) if fastest.len() == 1 && freqs.len() > 2 => at_least(second),
            _ => fastest,
        }
    }
}

/// The CPUs this thread may run on (sched_getaffinity), e.g. Android puts background apps on
/// the LITTLE cores this way. Empty when the call fails, and on systems without CPU affinity
/// (Darwin), where callers fall back to `available_parallelism`.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn allowed_cpus() -> Vec<usize> {
    Vec::new()
}

/// How many CPUs a `cpu_set_t` can hold: `CPU_SETSIZE` is a C int in glibc and musl, a usize
/// in bionic (Android).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
pub(crate) fn cpu_setsize() -> usize {
    libc::CPU_SETSIZE as usize
}

/// The CPUs this thread may run on (sched_getaffinity), e.g. Android puts background apps on
/// the LITTLE cores this way. Empty when the call fails.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; the kernel fills at most size_of::<cpu_set_t>() bytes,
    // and CPU_ISSET reads within the set for every cpu < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..cpu_setsize())
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// The CPUs a pool should use by default: the fast ones this process may run on; all the
/// allowed ones when none of those is fast or the topology says nothing. Suitable for
/// [`crate::PoolOptions::pin_cpus`].
pub fn default_cpus() -> Vec<usize> {
    default_cpus_for(&CpuTopology::read(), &allowed_cpus())
}

/// [`default_cpus`] on a given topology and affinity, for tests.
pub fn default_cpus_for(topology: &CpuTopology, allowed: &[usize]) -> Vec<usize> {
    let fast_and_allowed: Vec<usize> = topology
        .fast_cpus()
        .into_iter()
        .filter(|cpu| allowed.contains(cpu))
        .collect();
    if fast_and_allowed.is_empty() {
        allowed.to_vec()
    } else {
        fast_and_allowed
    }
}

/// How many threads a matvec job should use by default: the number of [`default_cpus`],
/// capped by `available_parallelism` (which also counts a cgroup CPU quota), and that alone
/// when the topology and affinity say nothing.
pub fn default_threads() -> usize {
    default_threads_for(
        &CpuTopology::read(),
        &allowed_cpus(),
        available_parallelism(),
    )
}

fn available_parallelism() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// [`default_threads`] on a given topology, affinity and parallelism, for tests.
pub fn default_threads_for(topology: &CpuTopology, allowed: &[usize], available: usize) -> usize {
    let cpus = default_cpus_for(topology, allowed).len();
    let available = available.max(1);
    if cpus == 0 {
        available
    } else {
        cpus.min(available)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn layout(name: &str) -> CpuTopology {
        let dir: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests/fixtures", name]
            .iter()
            .collect();
        assert!(dir.is_dir(), "missing fixture {}", dir.display());
        CpuTopology::read_from(&dir)
    }

    #[test]
    fn hwcap_of_a55_a53_and_a76() {
        // Recorded AT_HWCAP of an Amlogic S905X4 (A55): fp asimd evtstrm aes pmull sha1 sha2
        // crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp.
        let a55 = features_from_hwcap(0x0011_9fff, 0);
        assert!(a55.neon && a55.dotprod && a55.fp16 && !a55.i8mm);
        // A53 (ARMv8.0): fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid.
        let a53 = features_from_hwcap(0x0000_08ff, 0);
        assert!(a53.neon && !a53.dotprod && !a53.fp16 && !a53.i8mm);
        // fphp without asimdhp is not enough for the NEON fp16 kernels.
        assert!(!features_from_hwcap(hwcap::ASIMD | hwcap::FPHP, 0).fp16);
        let with_i8mm = features_from_hwcap(hwcap::ASIMD, hwcap::HWCAP2_I8MM);
        assert!(with_i8mm.i8mm && !with_i8mm.avx2);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3\n"), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse_cpu_list("0,2-3,7"), Some(vec![0, 2, 3, 7]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
    }

    #[test]
    fn four_a55_at_equal_clocks_use_all_four() {
        let topology = layout("sys-cpu-4xa55");
        assert_eq!(topology.cpus.len(), 4);
        assert_eq!(topology.fast_cpus(), vec![0, 1, 2, 3]);
        let all = [0, 1, 2, 3];
        assert_eq!(default_threads_for(&topology, &all, 4), 4);
        // A process confined to 2 CPUs (affinity, or a CPU quota) does not get 4 threads.
        assert_eq!(default_cpus_for(&topology, &[1, 2]), vec![1, 2]);
        assert_eq!(default_threads_for(&topology, &[1, 2], 2), 2);
        assert_eq!(default_threads_for(&topology, &all, 2), 2);
    }

    #[test]
    fn big_little_uses_the_big_cluster_only() {
        // RK3399-like numbering with the big cores last: 4x A53 @ 1.416 GHz, 4x A72 @ 1.8 GHz.
        let topology = layout("sys-cpu-4+4");
        assert_eq!(topology.fast_cpus(), vec![4, 5, 6, 7]);
        let all: Vec<usize> = (0..8).collect();
        assert_eq!(default_cpus_for(&topology, &all), vec![4, 5, 6, 7]);
        assert_eq!(default_threads_for(&topology, &all, 8), 4);
        // A background process kept on the LITTLE cores uses those.
        assert_eq!(default_cpus_for(&topology, &[0, 1, 2, 3]), vec![0, 1, 2, 3]);
        // Only some big cores allowed: those, not the LITTLE ones next to them.
        assert_eq!(default_cpus_for(&topology, &[2, 3, 6, 7]), vec![6, 7]);
    }

    #[test]
    fn prime_core_joins_the_big_cluster() {
        // 4x A55 @ 1.8, 3x A78 @ 2.4, 1x X1 @ 2.84 GHz.
        let topology = layout("sys-cpu-1+3+4");
        assert_eq!(topology.fast_cpus(), vec![4, 5, 6, 7]);
        let all: Vec<usize> = (0..8).collect();
        assert_eq!(default_threads_for(&topology, &all, 8), 4);
    }

    #[test]
    fn without_cpufreq_falls_back_to_available_parallelism() {
        let topology = layout("sys-cpu-no-cpufreq");
        assert_eq!(topology.cpus, vec![(0, None), (1, None)]);
        assert!(topology.fast_cpus().is_empty());
        assert_eq!(default_cpus_for(&topology, &[0, 1]), vec![0, 1]);
        assert_eq!(default_threads_for(&topology, &[0, 1], 2), 2);
        let nothing = CpuTopology::read_from(Path::new("/nonexistent"));
        assert_eq!(default_threads_for(&nothing, &[], 3), 3);
    }

    #[test]
    fn this_machine() {
        let threads = default_threads();
        assert!(threads >= 1 && threads <= available_parallelism());
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty());
        assert!(default_cpus().iter().all(|cpu| allowed.contains(cpu)));
        #[cfg(target_arch = "x86_64")]
        assert!(!detect_features().neon);
        #[cfg(target_arch = "aarch64")]
        assert!(detect_features().neon);
    }
}
