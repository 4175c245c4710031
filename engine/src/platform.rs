//! The platform adapter this binary runs on, picked by `target_os` in one place: iOS has its
//! own feature source and jetsam limit; Android its low-memory killer and big/little cores;
//! every other Unix (Linux SBCs, routers, the x86 PC) uses smolrun-linux. A Linux build (the
//! static musl binary pushed over adb) that finds itself on Android uses the Android adapter.
//! The kernels are never chosen here: `KernelSet::select` picks them at run time from
//! [`cpu_features`], so one aarch64 binary serves an A53 and an A76.

use crate::EngineError;
use smolrun_core::platform::{CpuFeatures, MemoryProbe};
use smolrun_ios::{Access, AddressSpaceBudget};
use std::path::Path;

/// /system/bin/getprop is there on every Android (adb shell, Termux): it says this Linux
/// userland is Android's.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn on_android() -> bool {
    cfg!(target_os = "android") || std::path::Path::new("/system/bin/getprop").exists()
}

/// The running CPU's features: getauxval on Linux and Android, sysctl on iOS, cpuid on x86.
pub fn cpu_features() -> CpuFeatures {
    #[cfg(target_os = "ios")]
    {
        smolrun_ios::detect_features()
    }
    #[cfg(not(target_os = "ios"))]
    {
        smolrun_linux::detect_features()
    }
}

/// The ceiling a mobile OS puts on this process beyond what /proc and the cgroups say: the
/// low-memory killer's level on Android, the jetsam limit on iOS, as (bytes this process may
/// still take, bytes it holds, where the number comes from). `None` on plain Linux, where the
/// memory guard's own reading (MemAvailable, cgroup limits) is the whole story.
pub fn mobile_memory_ceiling() -> Option<(u64, u64, &'static str)> {
    #[cfg(target_os = "ios")]
    {
        let probe = smolrun_ios::IosMemory::new();
        Some((
            probe.available_bytes(),
            probe.used_bytes(),
            "iOS jetsam limit less the footprint",
        ))
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        if on_android() {
            let probe = smolrun_android::AndroidMemory::new();
            return Some((
                probe.available_bytes(),
                probe.used_bytes(),
                "Android low-memory-killer ceiling",
            ));
        }
        None
    }
    #[cfg(not(any(target_os = "ios", target_os = "linux", target_os = "android")))]
    {
        None
    }
}

/// The region a run's state is carved from, of exactly `plan`'s size: `vm_allocate`d on iOS
/// (counted in the footprint jetsam reads), an anonymous mapping elsewhere (Linux, Android).
pub fn state_region(
    plan: &smolrun_core::arena::ArenaPlan,
) -> std::io::Result<smolrun_core::arena::Region> {
    #[cfg(target_os = "ios")]
    {
        let bytes = plan
            .total_usize()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::OutOfMemory, e.to_string()))?;
        smolrun_ios::vm_region(bytes)
    }
    #[cfg(all(not(target_os = "ios"), target_os = "android"))]
    {
        smolrun_android::anonymous_region_for(plan)
    }
    #[cfg(not(any(target_os = "ios", target_os = "android")))]
    {
        smolrun_linux::anonymous_region_for(plan)
    }
}

/// Default thread count: the fast cores this process may run on.
pub fn default_threads() -> usize {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        if on_android() {
            return smolrun_android::default_threads();
        }
    }
    smolrun_linux::default_threads()
}

/// The address space this process may map for a model file, where that is tighter than the
/// file: iOS 12 lets a process map about 1.7 GB in all; a 32-bit ARM Linux process has 3 GB
/// of user address space, libraries and heap included; `ulimit -v` (RLIMIT_AS) caps any Unix
/// process; `set_by_hand` (the CLI's `SMOLRUN_ADDRESS_SPACE`) sets one for trying what a tablet
/// or a `ulimit -v` box does. `None` on 64-bit Linux and Android without a limit.
pub fn address_space_budget(
    set_by_hand: Option<u64>,
) -> Option<(AddressSpaceBudget, &'static str)> {
    let with_limit = |limit: u64| AddressSpaceBudget {
        limit,
        ..AddressSpaceBudget::ios12()
    };
    if let Some(limit) = set_by_hand {
        return Some((with_limit(limit), "SMOLRUN_ADDRESS_SPACE"));
    }
    let rlimit = address_space_rlimit();
    if cfg!(target_os = "ios") {
        return Some((AddressSpaceBudget::ios12(), "an iOS 12 process"));
    }
    if cfg!(target_pointer_width = "32") {
        let limit = rlimit.map_or(3 << 30, |r| r.min(3 << 30));
        return Some((with_limit(limit), "a 32-bit process"));
    }
    rlimit.map(|limit| (with_limit(limit), "this process's RLIMIT_AS (ulimit -v)"))
}

/// The soft RLIMIT_AS, when one is set.
fn address_space_rlimit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) };
    // rlim_t is 32 bits wide on some 32-bit targets.
    #[allow(clippy::unnecessary_cast)]
    let current = limit.rlim_cur as u64;
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(current)
}

/// Checks, before mapping, that a dense model file fits the address space `budget` leaves
/// for it. A dense model reads every weight on every token, so the budget's plan maps the whole
/// file or it cannot run: mmap would fail (or a later allocation would), after the user waited.
/// The error gives both sizes and what to do instead.
pub fn check_address_space(
    path: &Path,
    file_len: u64,
    budget: Option<(AddressSpaceBudget, &'static str)>,
) -> Result<(), EngineError> {
    let Some((budget, who)) = budget else {
        return Ok(());
    };
    let plan = budget.plan(file_len, &[(0..file_len, Access::EveryToken)]);
    if plan.mapped.end >= file_len {
        return Ok(());
    }
    const MB: u64 = 1_000_000;
    let message = format!(
        "{} is {} MB, but {who} can map only about {} MB of a model file ({} MB of address space \
         less {} MB kept for the program, heap and KV cache), and smolrun reads every weight of \
         a dense model on every token: use a smaller model or quantization (see the README's \
         \"Which model for how much RAM\"), or cut its LM head with `smolrun gguf prune-head`",
        path.display(),
        file_len / MB,
        budget.for_file() / MB,
        budget.limit / MB,
        budget.reserved / MB,
    );
    Err(EngineError::DoesNotFit {
        path: path.to_path_buf(),
        needed: file_len,
        allowed: budget.for_file(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_beyond_the_address_space_is_refused_before_mapping() {
        let path = Path::new("qwen2.5-7b-q4_k_m.gguf");
        let ios = Some((AddressSpaceBudget::ios12(), "an iOS 12 process"));
        // Qwen2.5-Coder-1.5B Q4_K_M (1.1 GB) fits an iPad's 1.7 GB; a 7B Q4_K_M (4.7 GB) does not.
        assert_eq!(check_address_space(path, 1_117_320_736, ios), Ok(()));
        let err = check_address_space(path, 4_683_074_240, ios)
            .unwrap_err()
            .to_string();
        for needle in [
            "qwen2.5-7b-q4_k_m.gguf",
            "4683 MB",
            "about 1297 MB",
            "1700 MB",
            "prune-head",
        ] {
            assert!(err.contains(needle), "{needle:?} missing from: {err}");
        }
        // Just over the room left for the file (pages of 16 KiB) is refused, at it is not.
        let room = AddressSpaceBudget::ios12().for_file() / (16 << 10) * (16 << 10);
        assert!(check_address_space(path, room, ios).is_ok());
        assert!(check_address_space(path, room + 1, ios).is_err());
        // 64-bit Linux has no such budget (unless set by hand or by ulimit -v).
        assert_eq!(check_address_space(path, u64::MAX / 2, None), Ok(()));
        #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
        if address_space_rlimit().is_none() {
            assert!(address_space_budget(None).is_none());
        }
        assert_eq!(
            address_space_budget(Some(1 << 30)).map(|(b, _)| b.limit),
            Some(1 << 30)
        );
    }

    #[test]
    fn this_build_picks_a_working_adapter() {
        #[cfg(target_os = "linux")]
        assert!(!on_android(), "this test machine is not Android");
        #[cfg(target_os = "linux")]
        assert!(mobile_memory_ceiling().is_none());
        assert!(default_threads() >= 1);
        #[cfg(target_arch = "x86_64")]
        assert!(!cpu_features().neon);
    }
}
