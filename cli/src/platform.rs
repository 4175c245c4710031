//! The platform adapter this binary runs on, picked by `target_os` in one place: iOS has its
//! own feature source and jetsam limit; Android its low-memory killer and big/little cores;
//! every other Unix (Linux SBCs, routers, the x86 PC) uses smolrun-linux. A Linux build (the
//! static musl binary pushed over adb) that finds itself on Android uses the Android adapter.
//! The kernels are never chosen here: `KernelSet::select` picks them at run time from
//! [`cpu_features`], so one aarch64 binary serves an A53 and an A76.

use smolrun_core::platform::{CpuFeatures, MemoryProbe};

/// Android's init sets ANDROID_ROOT for every shell (adb shell, Termux); /system/bin/getprop
/// is there on every Android. Either says this Linux userland is Android's.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn on_android() -> bool {
    cfg!(target_os = "android")
        || std::env::var_os("ANDROID_ROOT").is_some()
        || std::path::Path::new("/system/bin/getprop").exists()
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

#[cfg(test)]
mod tests {
    use super::*;

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
