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

/// How much memory this process may still take, as this platform knows it: the low-memory
/// killer's ceiling on Android, the jetsam limit less the footprint on iOS, MemAvailable and
/// cgroup limits elsewhere. For the memory guard, which sizes a load against it.
#[allow(dead_code)] // the memory guard (engine.rs, another branch) is its caller
pub fn memory_probe() -> Box<dyn MemoryProbe + Send + Sync> {
    #[cfg(target_os = "ios")]
    {
        Box::new(smolrun_ios::IosMemory::new())
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        if on_android() {
            Box::new(smolrun_android::AndroidMemory::new())
        } else {
            Box::new(smolrun_linux::LinuxMemory::new())
        }
    }
    #[cfg(not(any(target_os = "ios", target_os = "linux", target_os = "android")))]
    {
        Box::new(smolrun_linux::LinuxMemory::new())
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
        let probe = memory_probe();
        assert!(probe.available_bytes() > 0);
        assert!(probe.used_bytes() > 0);
        assert!(default_threads() >= 1);
        #[cfg(target_arch = "x86_64")]
        assert!(!cpu_features().neon);
    }
}
