//! x86-64 faces of the kernels. Everything here runs only where the CPU has the features it
//! was compiled for: [`avx2_fma_f16c_usable`] asks the CPU itself (cpuid and xgetbv, no std
//! needed), and the dispatch table in `smolrun_core::kernels` installs the [`avx2`] kernels
//! only when it says yes, whatever the caller's feature flags claim. [`attention`] holds the
//! attention loops over the f16 KV cache, bit for bit `smolrun_core::math::attention_head`.
//!
//! [`avx2_k`] holds the Q4_K and Q6_K kernels that decode spends most of its time in (scales
//! decoded in registers, weights prefetched ahead); [`avx2_q0`] the 32-element formats'
//! several-row matvecs and batches; [`avx2_cols`] the batched prompt kernels of the rest;
//! [`avx2_2bit`] the 2-bit formats Q2_K and TQ2_0 (bit for bit their scalar twins), [`avx2_3bit`]
//! Q3_K (one row and batches, bit for bit its scalar twin), [`avx2_q1`] Q4_1 and Q5_1 (one row, bit
//! for bit).
//! [`avx2_lowbit`] the 1-bit, 2-bit and ternary formats (Q1_0, Q2_0, TQ1_0). IQ4_NL is one of
//! [`avx2_q0`]'s 32-element formats; [`avx2_iq4`] holds IQ4_XS's decode, [`avx2_kt_iq4`] its
//! prompts (tokens in the lanes, on [`avx2_kt`]'s packing), [`avx2_iq2`] the grid i-quants
//! (IQ2_XXS, IQ3_XXS).
//!
//! [`delta_rule`] holds the fused one-token step of Qwen3.5's gated delta rule (f32 and f16
//! state), bit for bit `smolrun_core::math::delta_rule_step`.
//!
//! [`avx512_k`] holds the AVX-512 VNNI Q4_K and Q6_K kernels (tokens in the lanes for prompts).
//!
//! AVX-512 (at 256-bit width: AVX512VL, with VNNI's `vpdpbusd` and AVX512BW's byte masks) is
//! used by [`avx512_q0`] for the 32-element formats, where the AVX2 kernels are bound by
//! instructions rather than memory; [`avx512_vnni_usable`] asks the CPU. (The AVX-512
//! intrinsics need Rust 1.89.)

pub mod attention;
pub mod avx2;
pub mod avx2_2bit;
pub mod avx2_3bit;
pub mod avx2_cols;
pub mod avx2_iq2;
pub mod avx2_iq4;
pub mod avx2_k;
pub mod avx2_kt;
pub mod avx2_kt35;
pub mod avx2_kt_iq4;
pub mod avx2_lowbit;
pub mod avx2_q0;
pub mod avx2_q1;
pub mod avx512_k;
pub mod avx512_q0;
pub mod delta_rule;
pub mod exp;

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

/// True when the running CPU and OS support everything [`avx512_q0`] uses: the AVX2 set of
/// [`avx2_fma_f16c_usable`], plus AVX512F, AVX512BW, AVX512VL and AVX512-VNNI, with the OS
/// saving the opmask and upper ZMM state.
pub fn avx512_vnni_usable() -> bool {
    if !avx2_fma_f16c_usable() {
        return false;
    }
    // SAFETY: leaf 7 exists (avx2_fma_f16c_usable read AVX2 from it).
    #[allow(unused_unsafe)]
    let leaf7 = unsafe { __cpuid_count(7, 0) };
    let avx512f = leaf7.ebx & (1 << 16) != 0;
    let avx512bw = leaf7.ebx & (1 << 30) != 0;
    let avx512vl = leaf7.ebx & (1 << 31) != 0;
    let avx512vnni = leaf7.ecx & (1 << 11) != 0;
    if !(avx512f && avx512bw && avx512vl && avx512vnni) {
        return false;
    }
    // SAFETY: OSXSAVE was confirmed by avx2_fma_f16c_usable.
    let xcr0 = unsafe { read_xcr0() };
    // Bits 5, 6, 7: opmask registers, upper halves of ZMM0-15, ZMM16-31.
    xcr0 & 0b1110_0110 == 0b1110_0110
}
