//! smolrun-kernels: the hot loops. Each kernel has a scalar twin here or in
//! `smolrun_core::quant`, an aarch64 NEON face in `asm!` (with and without dotprod) and an
//! x86-64 face; the dispatch table picks one per (weight type, CPU features) at load time.
#![no_std]

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
pub mod iq_grids;

/// Plain f32 dot product: the scalar twin of the SIMD f32 kernels.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(target_arch = "x86_64")]
pub mod x86_64;
