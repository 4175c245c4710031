//! aarch64 NEON dot products of one weight row with one quantized activation row, in `asm!`.
//!
//! Every kernel comes in two faces with the signature of `smolrun_core::quant::VecDotFn`
//! (`fn(n, w_row, act_row) -> f32`, raw block bytes in ggml's layout):
//!
//! - `*_neon`: ARMv8.0 Advanced SIMD only (Cortex-A53, Apple A7): widening multiplies
//!   (`smull`/`smlal`/`sadalp`). NEON is part of the aarch64 base ISA, so these are safe to
//!   call on every aarch64 CPU.
//! - `*_dotprod`: ARMv8.2 `sdot` (Cortex-A55/A76, Apple A11+). They are `unsafe`: the caller
//!   must have seen the dotprod feature (HWCAP_ASIMDDP, `hw.optional.arm.FEAT_DotProd`); on a
//!   CPU without it the first `sdot` raises SIGILL. The asm enables the extension with
//!   `.arch_extension dotprod`, so the crate still builds for plain `aarch64` targets.
//!
//! Float order (what "exact" means in the tests, core/tests/neon_exact.rs):
//! - IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M (both faces, `iq2.rs`): the integer
//!   sums in asm, the twin's float steps in Rust in its order: bit for bit the twin on every
//!   input. IQ3_XXS and IQ3_S (both faces, `iq3.rs`), IQ4_NL and IQ4_XS (both faces,
//!   `iq4.rs`): each (sub-)block's exact integer, then the twin's float steps one rounding
//!   each, added in its order, in asm: bit for bit.
//! - Q2_K and TQ2_0 (both faces) compute the scalar twin's per-block integers and then its
//!   few f32 steps one instruction each, in its order: bit for bit the twin on every input.
//! - Q3_K and Q5_K (one ARMv8.0 face, which dotprod cores run too: `q3_k.rs`, `q5_k.rs`): an
//!   8-lane `smull` puts element e of a sub-block in lane e % 8, the twins' lanes, and the
//!   float steps follow in their order: bit for bit. Q4_1 and Q5_1 (both faces, `q1.rs`): each
//!   block's exact integer, then the twin's float step one instruction each: bit for bit.
//! - Q8_0, Q4_0, Q5_0, Q1_0, Q2_0, TQ1_0 (both faces) and Q4_K, Q6_K (`_neon` face) reproduce
//!   the scalar twin's float operations one for one (same products, same additions in the same order, no fused
//!   multiply-add), so they return the scalar result bit for bit. For the K-quants this works
//!   because an 8-lane `smull` puts element e of a sub-block in lane e % 8, the lane layout of
//!   ggml's scalar code.
//! - Q4_K, Q6_K `_dotprod`: `sdot` adds 4 neighbouring elements into one lane, so the integer
//!   lane sums are regrouped (each super-block's total is still exact) and the f32 lane sums
//!   differ from the scalar ones by rounding: per row at most
//!   `(n_superblocks + 8) * 2^-24 * sum over super-blocks of |d| * sum |integer lane sum|`
//!   (twice that bound between two such orders), which the tests check.
//!
//! Also here: F32/F16 dots (`float.rs`, one face: nothing in them needs dotprod), and the
//! row-interleaved matvecs for dotprod CPUs (`*_x4`, Q4_K, Q8_0, Q5_0): rows repacked at load
//! time in groups of 4 so that one `sdot` by element feeds 4 output rows; the tail rows of a
//! matrix stay in the file layout and run through the one-row dotprod kernel. Q8_0 and Q5_0
//! x4 are bit-identical to the scalar twins, Q4_K x4 is within the bound above.
//!
//! Also here: the lookup-table matvecs for Q1_0 and Q2_0 in base NEON (`q1_0_lut.rs`,
//! `q2_0_lut.rs`, T-MAC style): rows repacked in groups of 16, the activation row turned into
//! tables of 4-activation (Q1_0) or 2-activation (Q2_0) sums once per token, then one `tbl`
//! per 4-bit index of 16 rows; bit-identical to the scalar twins.
//!
//! Also here: the attention loops over the f16 KV cache (`attention.rs`: key dots, weighted
//! value sums, the f16 accumulator), ARMv8.0 only and bit for bit the scalar code in
//! `smolrun_core::math::attention_head`.
//!
//! Also here: the fused one-token step of Qwen3.5's gated delta rule (`delta_rule.rs`, f32 and
//! f16 state), ARMv8.0 only and bit for bit `smolrun_core::math::delta_rule_step`.
//!
//! Blocks are read in place from the mapped file at any alignment: the loads used (`ld1` of
//! bytes, `ldur`, `ldr h/s`) are unaligned-safe on every OS smolrun targets (Linux, Android,
//! iOS run with alignment checking off for normal memory).
//!
//! No input can make a kernel read out of bounds: the number of blocks is the smallest of
//! what `n`, the weight row and the activation row hold (like the scalar twins' `zip`).

/// The row loop of the 32-element formats (Q8_0, Q4_0, Q5_0), the whole row in one asm block:
/// two blocks a trip, the trip's integer parts (block A's and block B's on other registers)
/// interleaved with the float part of the previous pair, which adds A's then B's product to
/// sumf (v21), the scalar twin's operations in its order: the A53 and A55 issue in order, and
/// the float part alone is a chain of dependent operations that would stall them. A row with
/// an odd number of blocks runs its first block alone (`$single`) before the pairs. The first
/// trip's "previous pair" is the zeros of `$zero` (sumf + 0 leaves sumf, which starts at +0,
/// as it is); the last pair's float part (`$tail`) runs after the loop. The lines come from
/// the list scheduler of tools/lowbit-asm.py (`emit q8|q4|q5 neon|dot single|pair|tail`);
/// `$pre` sets the constants the kernel needs, `$operands` passes what they are read from.
macro_rules! pair_row {
    ($w:expr, $act:expr, $nb:expr, [$($pre:literal),*], [$($single:literal),* $(,)?],
     [$($zero:literal),* $(,)?], [$($pair:literal),* $(,)?], [$($tail:literal),* $(,)?]
     $(, $($operands:tt)*)?) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let mut sumf = 0.0f32;
        if $nb > 0 {
            core::arch::asm!(
                $($pre,)*
                "tbz {nb}, #0, 3f",
                $($single,)*
                "3:",
                $($zero,)*
                "lsr {nb}, {nb}, #1",
                "cbz {nb}, 4f",
                "2:",
                $($pair,)*
                $($tail,)*
                "4:",
                x = inout(reg) w.as_ptr() => _,
                y = inout(reg) act.as_ptr() => _,
                nb = inout(reg) $nb => _,
                $($($operands)*)?
                inout("v21") sumf,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _,
                out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v14") _,
                out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _,
                out("v20") _, out("v22") _, out("v23") _, out("v24") _, out("v25") _,
                out("v26") _, out("v27") _, out("v28") _, out("v29") _, out("v30") _,
                out("v31") _,
                options(nostack, readonly, pure),
            );
        }
        sumf
    }};
}

pub mod attention;
pub mod delta_rule;
pub mod exp;
mod float;
mod iq2;
mod iq3;
mod iq4;
mod q1;
mod q1_0;
mod q1_0_lut;
mod q2_0;
mod q2_0_lut;
mod q2_k;
mod q3_k;
mod q4_0;
mod q4_k;
mod q4_k_x4;
mod q5_0;
mod q5_0_x4;
mod q5_k;
mod q6_k;
mod q8_0;
mod q8_0_x4;
mod tq1_0;
mod tq2_0;
mod x4;

pub use float::{vec_dot_f16_neon, vec_dot_f32_neon};
pub use iq2::{
    vec_dot_iq1_m_q8_k_dotprod, vec_dot_iq1_m_q8_k_neon, vec_dot_iq1_s_q8_k_dotprod,
    vec_dot_iq1_s_q8_k_neon, vec_dot_iq2_s_q8_k_dotprod, vec_dot_iq2_s_q8_k_neon,
    vec_dot_iq2_xs_q8_k_dotprod, vec_dot_iq2_xs_q8_k_neon, vec_dot_iq2_xxs_q8_k_dotprod,
    vec_dot_iq2_xxs_q8_k_neon,
};
pub use iq3::{
    vec_dot_iq3_s_q8_k_dotprod, vec_dot_iq3_s_q8_k_neon, vec_dot_iq3_xxs_q8_k_dotprod,
    vec_dot_iq3_xxs_q8_k_neon,
};
pub use iq4::{
    vec_dot_iq4_nl_q8_0_dotprod, vec_dot_iq4_nl_q8_0_neon, vec_dot_iq4_xs_q8_k_dotprod,
    vec_dot_iq4_xs_q8_k_neon,
};
pub use q1::{
    vec_dot_q4_1_q8_1_dotprod, vec_dot_q4_1_q8_1_neon, vec_dot_q5_1_q8_1_dotprod,
    vec_dot_q5_1_q8_1_neon,
};
pub use q1_0::{vec_dot_q1_0_q8_0_dotprod, vec_dot_q1_0_q8_0_neon};
pub use q1_0_lut::{
    build_table_q1_0_lut_neon, matvec_q1_0_lut16_neon, LUT_GROUP_BLOCK_BYTES, LUT_GROUP_ROWS,
    LUT_TABLE_BLOCK_BYTES, LUT_TILE_BLOCKS,
};
pub use q2_0::{vec_dot_q2_0_q8_0_dotprod, vec_dot_q2_0_q8_0_neon};
pub use q2_0_lut::{build_table_q2_0_lut_neon, matvec_q2_0_lut16_neon, LUT2_TABLE_BLOCK_BYTES};
pub use q2_k::{vec_dot_q2_k_q8_k_dotprod, vec_dot_q2_k_q8_k_neon};
pub use q3_k::vec_dot_q3_k_q8_k_neon;
pub use q4_0::{vec_dot_q4_0_q8_0_dotprod, vec_dot_q4_0_q8_0_neon};
pub use q4_k::{vec_dot_q4_k_q8_k_dotprod, vec_dot_q4_k_q8_k_neon};
pub use q4_k_x4::{matvec_q4_k_x4_dotprod, q4_k_x4_bytes, repack_q4_k_x4, X4_SUPERBLOCK_BYTES};
pub use q5_0::{vec_dot_q5_0_q8_0_dotprod, vec_dot_q5_0_q8_0_neon};
pub use q5_0_x4::{matvec_q5_0_x4_dotprod, q5_0_x4_bytes, repack_q5_0_x4};
pub use q5_k::vec_dot_q5_k_q8_k_neon;
pub use q6_k::{vec_dot_q6_k_q8_k_dotprod, vec_dot_q6_k_q8_k_neon};
pub use q8_0::{vec_dot_q8_0_q8_0_dotprod, vec_dot_q8_0_q8_0_neon};
pub use q8_0_x4::{matvec_q8_0_x4_dotprod, q8_0_x4_bytes, repack_q8_0_x4};
pub use tq1_0::{vec_dot_tq1_0_q8_k_dotprod, vec_dot_tq1_0_q8_k_neon};
pub use tq2_0::{vec_dot_tq2_0_q8_k_dotprod, vec_dot_tq2_0_q8_k_neon};

/// Block sizes shared with `smolrun_core::quant` (kernels cannot depend on core; the tests
/// check that the two agree).
pub(crate) const QK: usize = 32;
pub(crate) const Q8_0_BYTES: usize = 34;
pub(crate) const QK_K: usize = 256;
pub(crate) const Q8_K_BYTES: usize = 292;

/// Whole blocks present in `n` elements, the weight row and the activation row alike.
#[inline(always)]
pub(crate) fn whole_blocks(
    n: usize,
    block_elems: usize,
    w: &[u8],
    w_block: usize,
    act: &[u8],
    act_block: usize,
) -> usize {
    (n / block_elems)
        .min(w.len() / w_block)
        .min(act.len() / act_block)
}
