//! Q1_0 . Q8_0: weight blocks of 128 sign bits (18 bytes: f16 d at 0, 16 bytes at 2; bit
//! j % 8 of byte j / 8 is element j, +d if set, -d if clear), each spanning four Q8_0
//! activation blocks. Scalar twin: `smolrun_core::quant::q1_0::vec_dot`.
//!
//! No multiplication by a weight value: `tbl` spreads each bit byte over the 8 lanes of its
//! elements, `cmtst` against 1, 2, 4 .. 128 turns the bits into 0 / -1 masks, and `orn` with
//! 1 makes them +1 / -1 (set: 1 | !0xFF = 1; clear: 1 | 0xFF = -1), which `sdot` (or
//! `smull`/`smlal` into i16, 4 products of at most 128 per lane) takes as they are. An
//! activation of -128 is exact (nothing is negated in a byte).
//!
//! Bit-identical to the scalar twin: each Q8_0 block's integer sum is exact, and the float
//! operations are the scalar's one for one (sumi = 0 + d8 * s0 + .. + d8 * s3, then
//! sumf += d * sumi; no fused multiply-add). The whole row runs in one asm block, so the
//! constants are loaded once and the loop is the one `llvm-mca` sees.

use super::{whole_blocks, Q8_0_BYTES};
use core::arch::asm;

const Q1_0_ELEMS: usize = 128;
const Q1_0_BYTES: usize = 18;

/// `tbl` indices (vector t: bytes 2t and 2t + 1, each over 8 lanes) and the bit of each lane.
#[repr(align(16))]
struct Consts([u8; 144]);

static CONSTS: Consts = {
    let mut c = [0u8; 144];
    let mut i = 0;
    while i < 128 {
        c[i] = (i / 8) as u8;
        i += 1;
    }
    while i < 144 {
        c[i] = 1 << (i % 8);
        i += 1;
    }
    Consts(c)
};

macro_rules! q1_0_row {
    ($w:expr, $act:expr, $nb:expr, [$($ext:literal),*], [$($sub:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let mut sumf = 0.0f32;
        if $nb > 0 {
            asm!(
                $($ext,)*
                "ld1 {{v16.16b, v17.16b, v18.16b, v19.16b}}, [{c}], #64",
                "ld1 {{v20.16b, v21.16b, v22.16b, v23.16b}}, [{c}], #64",
                "ld1 {{v24.16b}}, [{c}]",
                "movi v25.16b, #1",
                "movi v29.4s, #0",
                "2:",
                "ldr h26, [{x}], #2",
                "ldr q0, [{x}], #16",
                $($sub,)*
                "fcvt s26, h26",
                "fmul s27, s26, s27",
                "fadd {sumf:s}, {sumf:s}, s27",
                "subs {nb}, {nb}, #1",
                "b.ne 2b",
                x = inout(reg) w.as_ptr() => _,
                y = inout(reg) act.as_ptr() => _,
                nb = inout(reg) $nb => _,
                c = inout(reg) CONSTS.0.as_ptr() => _,
                sumf = inout(vreg) sumf,
                out("v0") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _, out("v6") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _, out("v21") _, out("v22") _, out("v23") _, out("v24") _, out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _,
                options(nostack, readonly, pure),
            );
        }
        sumf
    }};
}

/// Q1_0 . Q8_0, ARMv8.0 NEON (`smull`/`smlal`). Bit-identical to the scalar twin.
pub fn vec_dot_q1_0_q8_0_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, Q1_0_ELEMS, w, Q1_0_BYTES, act, 4 * Q8_0_BYTES);
    // SAFETY: blocks 0..nb lie inside both slices; only base aarch64 NEON instructions.
    unsafe {
        q1_0_row!(
            w,
            act,
            nb,
            [],
            [
                "ldr h28, [{y}], #2",
                "ld1 {{v2.16b, v3.16b}}, [{y}], #32",
                "tbl v4.16b, {{v0.16b}}, v16.16b",
                "tbl v5.16b, {{v0.16b}}, v17.16b",
                "cmtst v4.16b, v4.16b, v24.16b",
                "cmtst v5.16b, v5.16b, v24.16b",
                "orn v4.16b, v25.16b, v4.16b",
                "orn v5.16b, v25.16b, v5.16b",
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
                "tbl v5.16b, {{v0.16b}}, v19.16b",
                "cmtst v4.16b, v4.16b, v24.16b",
                "cmtst v5.16b, v5.16b, v24.16b",
                "orn v4.16b, v25.16b, v4.16b",
                "orn v5.16b, v25.16b, v5.16b",
                "smull v6.8h, v4.8b, v2.8b",
                "smlal2 v6.8h, v4.16b, v2.16b",
                "smlal v6.8h, v5.8b, v3.8b",
                "smlal2 v6.8h, v5.16b, v3.16b",
                "saddlv s6, v6.8h",
                "scvtf s6, s6",
                "fcvt s28, h28",
                "fmul s6, s28, s6",
                "fadd s27, s27, s6",
                "ldr h28, [{y}], #2",
                "ld1 {{v2.16b, v3.16b}}, [{y}], #32",
                "tbl v4.16b, {{v0.16b}}, v20.16b",
                "tbl v5.16b, {{v0.16b}}, v21.16b",
                "cmtst v4.16b, v4.16b, v24.16b",
                "cmtst v5.16b, v5.16b, v24.16b",
                "orn v4.16b, v25.16b, v4.16b",
                "orn v5.16b, v25.16b, v5.16b",
                "smull v6.8h, v4.8b, v2.8b",
                "smlal2 v6.8h, v4.16b, v2.16b",
                "smlal v6.8h, v5.8b, v3.8b",
                "smlal2 v6.8h, v5.16b, v3.16b",
                "saddlv s6, v6.8h",
                "scvtf s6, s6",
                "fcvt s28, h28",
                "fmul s6, s28, s6",
                "fadd s27, s27, s6",
                "ldr h28, [{y}], #2",
                "ld1 {{v2.16b, v3.16b}}, [{y}], #32",
                "tbl v4.16b, {{v0.16b}}, v22.16b",
                "tbl v5.16b, {{v0.16b}}, v23.16b",
                "cmtst v4.16b, v4.16b, v24.16b",
                "cmtst v5.16b, v5.16b, v24.16b",
                "orn v4.16b, v25.16b, v4.16b",
                "orn v5.16b, v25.16b, v5.16b",
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

/// Q1_0 . Q8_0 with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_q1_0_q8_0_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, Q1_0_ELEMS, w, Q1_0_BYTES, act, 4 * Q8_0_BYTES);
    // SAFETY: blocks 0..nb lie inside both slices; the caller vouches for dotprod.
    unsafe {
        q1_0_row!(
            w,
            act,
            nb,
            [".arch_extension dotprod"],
            [
                "ldr h28, [{y}], #2",
                "ld1 {{v2.16b, v3.16b}}, [{y}], #32",
                "tbl v4.16b, {{v0.16b}}, v16.16b",
                "tbl v5.16b, {{v0.16b}}, v17.16b",
                "cmtst v4.16b, v4.16b, v24.16b",
                "cmtst v5.16b, v5.16b, v24.16b",
                "orn v4.16b, v25.16b, v4.16b",
                "orn v5.16b, v25.16b, v5.16b",
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
                "tbl v5.16b, {{v0.16b}}, v19.16b",
                "cmtst v4.16b, v4.16b, v24.16b",
                "cmtst v5.16b, v5.16b, v24.16b",
                "orn v4.16b, v25.16b, v4.16b",
                "orn v5.16b, v25.16b, v5.16b",
                "movi v6.4s, #0",
                "sdot v6.4s, v4.16b, v2.16b",
                "sdot v6.4s, v5.16b, v3.16b",
                "addv s6, v6.4s",
                "scvtf s6, s6",
                "fcvt s28, h28",
                "fmul s6, s28, s6",
                "fadd s27, s27, s6",
                "ldr h28, [{y}], #2",
                "ld1 {{v2.16b, v3.16b}}, [{y}], #32",
                "tbl v4.16b, {{v0.16b}}, v20.16b",
                "tbl v5.16b, {{v0.16b}}, v21.16b",
                "cmtst v4.16b, v4.16b, v24.16b",
                "cmtst v5.16b, v5.16b, v24.16b",
                "orn v4.16b, v25.16b, v4.16b",
                "orn v5.16b, v25.16b, v5.16b",
                "movi v6.4s, #0",
                "sdot v6.4s, v4.16b, v2.16b",
                "sdot v6.4s, v5.16b, v3.16b",
                "addv s6, v6.4s",
                "scvtf s6, s6",
                "fcvt s28, h28",
                "fmul s6, s28, s6",
                "fadd s27, s27, s6",
                "ldr h28, [{y}], #2",
                "ld1 {{v2.16b, v3.16b}}, [{y}], #32",
                "tbl v4.16b, {{v0.16b}}, v22.16b",
                "tbl v5.16b, {{v0.16b}}, v23.16b",
                "cmtst v4.16b, v4.16b, v24.16b",
                "cmtst v5.16b, v5.16b, v24.16b",
                "orn v4.16b, v25.16b, v4.16b",
                "orn v5.16b, v25.16b, v5.16b",
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
