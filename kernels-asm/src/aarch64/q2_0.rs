//! Q2_0 . Q8_0: weight blocks of 64 two-bit codes (18 bytes: f16 d at 0, 16 bytes at 2;
//! bits 2(j % 4)..2(j % 4) + 2 of byte j / 4 are element j's code c, worth (c - 1) d), each
//! spanning two Q8_0 activation blocks. Scalar twin: `smolrun_core::quant::q2_0::vec_dot`.
//!
//! `tbl` spreads each byte over the 4 lanes of its elements, `ushl` by 0, -2, -4, -6 brings
//! each lane's field down, `and 3` and `sub 1` give the weight in -1..=2, which `sdot` (or
//! `smull`/`smlal` into i16: 4 products of at most 256 per lane) multiplies exactly.
//!
//! Bit-identical to the scalar twin: each Q8_0 block's integer sum is exact, and the float
//! operations are the scalar's one for one (sumi = 0 + d8 * s0 + d8 * s1, then
//! sumf += d * sumi; no fused multiply-add). The whole row runs in one asm block.

use super::{whole_blocks, Q8_0_BYTES};
use core::arch::asm;

const Q2_0_ELEMS: usize = 64;
const Q2_0_BYTES: usize = 18;

/// `tbl` indices (vector t: bytes 4t .. 4t + 3, each over 4 lanes) and each lane's right
/// shift (as the negative left shift `ushl` takes).
#[repr(align(16))]
struct Consts([u8; 80]);

static CONSTS: Consts = {
    let mut c = [0u8; 80];
    let mut i = 0;
    while i < 64 {
        c[i] = (i / 4) as u8;
        i += 1;
    }
    while i < 80 {
        c[i] = (-2 * (i % 4) as i8) as u8;
        i += 1;
    }
    Consts(c)
};

macro_rules! q2_0_row {
    ($w:expr, $act:expr, $nb:expr, [$($ext:literal),*], [$($sub:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let mut sumf = 0.0f32;
        if $nb > 0 {
            asm!(
                $($ext,)*
                "ld1 {{v16.16b, v17.16b, v18.16b, v19.16b}}, [{c}], #64",
                "ld1 {{v24.16b}}, [{c}]",
                "movi v25.16b, #3",
                "movi v26.16b, #1",
                "movi v29.4s, #0",
                "2:",
                "ldr h30, [{x}], #2",
                "ldr q0, [{x}], #16",
                $($sub,)*
                "fcvt s30, h30",
                "fmul s27, s30, s27",
                "fadd {sumf:s}, {sumf:s}, s27",
                "subs {nb}, {nb}, #1",
                "b.ne 2b",
                x = inout(reg) w.as_ptr() => _,
                y = inout(reg) act.as_ptr() => _,
                nb = inout(reg) $nb => _,
                c = inout(reg) CONSTS.0.as_ptr() => _,
                sumf = inout(vreg) sumf,
                out("v0") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _, out("v6") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v24") _, out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _, out("v30") _,
                options(nostack, readonly, pure),
            );
        }
        sumf
    }};
}

/// Q2_0 . Q8_0, ARMv8.0 NEON (`smull`/`smlal`). Bit-identical to the scalar twin.
pub fn vec_dot_q2_0_q8_0_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, Q2_0_ELEMS, w, Q2_0_BYTES, act, 2 * Q8_0_BYTES);
    // SAFETY: blocks 0..nb lie inside both slices; only base aarch64 NEON instructions.
    unsafe {
        q2_0_row!(
            w,
            act,
            nb,
            [],
            [
                "ldr h28, [{y}], #2",
                "ld1 {{v2.16b, v3.16b}}, [{y}], #32",
                "tbl v4.16b, {{v0.16b}}, v16.16b",
                "ushl v4.16b, v4.16b, v24.16b",
                "and v4.16b, v4.16b, v25.16b",
                "sub v4.16b, v4.16b, v26.16b",
                "tbl v5.16b, {{v0.16b}}, v17.16b",
                "ushl v5.16b, v5.16b, v24.16b",
                "and v5.16b, v5.16b, v25.16b",
                "sub v5.16b, v5.16b, v26.16b",
                "smull v6.8h, v4.8b, v2.8b",
                "smlal2 v6.8h, v4.16b, v2.16b",
                "smlal v6.8h, v5.8b, v3.8b",
                "smlal2 v6.8h, v5.16b, v3.16b",
                "saddlv s6, v6.8h",
                "scvtf s6, s6",
                "fcvt s28, h28",
                "fmul s6, s28, s6",
                "fadd s27, s29, s6",
                "ldr h28, [{y}], #2",
                "ld1 {{v2.16b, v3.16b}}, [{y}], #32",
                "tbl v4.16b, {{v0.16b}}, v18.16b",
                "ushl v4.16b, v4.16b, v24.16b",
                "and v4.16b, v4.16b, v25.16b",
                "sub v4.16b, v4.16b, v26.16b",
                "tbl v5.16b, {{v0.16b}}, v19.16b",
                "ushl v5.16b, v5.16b, v24.16b",
                "and v5.16b, v5.16b, v25.16b",
                "sub v5.16b, v5.16b, v26.16b",
                "smull v6.8h, v4.8b, v2.8b",
                "smlal2 v6.8h, v4.16b, v2.16b",
                "smlal v6.8h, v5.8b, v3.8b",
                "smlal2 v6.8h, v5.16b, v3.16b",
                "saddlv s6, v6.8h",
                "scvtf s6, s6",
                "fcvt s28, h28",
                "fmul s6, s28, s6",
                "fadd s27, s27, s6",
            ]
        )
    }
}

/// Q2_0 . Q8_0 with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_q2_0_q8_0_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, Q2_0_ELEMS, w, Q2_0_BYTES, act, 2 * Q8_0_BYTES);
    // SAFETY: blocks 0..nb lie inside both slices; the caller vouches for dotprod.
    unsafe {
        q2_0_row!(
            w,
            act,
            nb,
            [".arch_extension dotprod"],
            [
                "ldr h28, [{y}], #2",
                "ld1 {{v2.16b, v3.16b}}, [{y}], #32",
                "tbl v4.16b, {{v0.16b}}, v16.16b",
                "ushl v4.16b, v4.16b, v24.16b",
                "and v4.16b, v4.16b, v25.16b",
                "sub v4.16b, v4.16b, v26.16b",
                "tbl v5.16b, {{v0.16b}}, v17.16b",
                "ushl v5.16b, v5.16b, v24.16b",
                "and v5.16b, v5.16b, v25.16b",
                "sub v5.16b, v5.16b, v26.16b",
                "movi v6.4s, #0",
                "sdot v6.4s, v4.16b, v2.16b",
                "sdot v6.4s, v5.16b, v3.16b",
                "addv s6, v6.4s",
                "scvtf s6, s6",
                "fcvt s28, h28",
                "fmul s6, s28, s6",
                "fadd s27, s29, s6",
                "ldr h28, [{y}], #2",
                "ld1 {{v2.16b, v3.16b}}, [{y}], #32",
                "tbl v4.16b, {{v0.16b}}, v18.16b",
                "ushl v4.16b, v4.16b, v24.16b",
                "and v4.16b, v4.16b, v25.16b",
                "sub v4.16b, v4.16b, v26.16b",
                "tbl v5.16b, {{v0.16b}}, v19.16b",
                "ushl v5.16b, v5.16b, v24.16b",
                "and v5.16b, v5.16b, v25.16b",
                "sub v5.16b, v5.16b, v26.16b",
                "movi v6.4s, #0",
                "sdot v6.4s, v4.16b, v2.16b",
                "sdot v6.4s, v5.16b, v3.16b",
                "addv s6, v6.4s",
                "scvtf s6, s6",
                "fcvt s28, h28",
                "fmul s6, s28, s6",
                "fadd s27, s27, s6",
            ]
        )
    }
}
