//! x86-64 faces of the kernels. Everything here runs only where the CPU has the features it
//! was compiled for: [`avx2_fma_f16c_usable`] asks the CPU itself (cpuid and xgetbv, no std
//! needed), and the dispatch table in `smolrun_core::kernels` installs the [`avx2`] kernels
//! only when it says yes, whatever the caller's feature flags claim.
//!
//! [`avx2_k`] holds the Q4_K and Q6_K kernels that decode spends most of its time in (scales
//! decoded in registers, weights prefetched ahead); [`avx2_cols`] the batched prompt kernels
//! of the other types.
//!
//! AVX-512 is not used: decoding is bound by weight bandwidth, which AVX2 already reaches on
//! one core (see the kernel_bench example), and the AVX-512 intrinsics need Rust 1.89 while the
//! workspace promises 1.87.

pub mod avx2;
pub mod avx2_cols;
pub mod avx2_k;

use core::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};

/// True when the running CPU and OS support AVX2, FMA and F16C, i.e. the [`avx2`] kernels may
/// be called. Checks the CPU's feature bits and that the OS saves the YMM registers.
pub fn avx2_fma_f16c_usable() -> bool {
    // SAFETY: cpuid exists on every x86-64 CPU; leaf 7 is only read when leaf 0 lists it.
    #[allow(unused_unsafe)]
    let (leaf1, leaf7, max_leaf) = unsafe {
        let max_leaf = __cpuid(0).eax;
        let leaf7 = if max_leaf >= 7 {
            __cpuid_count(7, 0).ebx
        } else {
            0
        };
        (__cpuid(1).ecx, leaf7, max_leaf)
    };
    let fma = leaf1 & (1 << 12) != 0;
    let osxsave = leaf1 & (1 << 27) != 0;
    let avx = leaf1 & (1 << 28) != 0;
    let f16c = leaf1 & (1 << 29) != 0;
    let avx2 = max_leaf >= 7 && leaf7 & (1 << 5) != 0;
    if !(fma && osxsave && avx && f16c && avx2) {
        return false;
    }
    // SAFETY: OSXSAVE is set, so the OS enabled XGETBV.
    let xcr0 = unsafe { read_xcr0() };
    // Bits 1 and 2: the OS saves SSE and AVX state across context switches.
    xcr0 & 0b110 == 0b110
}

#[target_feature(enable = "xsave")]
unsafe fn read_xcr0() -> u64 {
    _xgetbv(0)
}
