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
//!
//! The kernel leaves out the scalar's leading `0 +` (its first add is d8 * s0 + d8 * s1,
//! one `faddp`). The two differ only when both products are -0: the scalar's sumi is then
//! +0, the kernel's -0, and so is d * sumi; but sumf starts at +0 and round-to-nearest
//! additions never make it -0, and sumf + (-0) is sumf for every sumf that is not -0, so the
//! result has the same bits.

use super::{whole_blocks, Q8_0_BYTES};
use core::arch::asm;

const Q2_0_ELEMS: usize = 64;
const Q2_0_BYTES: usize = 18;

/// `tbl` indices (bytes 0..3, then 4..7, each over 4 lanes) and each lane's right shift (as
/// the negative left shift `ushl` takes).
#[repr(align(16))]
struct Consts([u8; 48]);

static CONSTS: Consts = {
    let mut c = [0u8; 48];
    let mut i = 0;
    while i < 32 {
        c[i] = (i / 4) as u8;
        i += 1;
    }
    while i < 48 {
        c[i] = (-2 * (i % 4) as i8) as u8;
        i += 1;
    }
    Consts(c)
};

/// As in q1_0.rs: the loop body is block i's integer part (each Q8_0 block's 8 code bytes
/// loaded with `ldr d`) interleaved, by the list scheduler of tools/lowbit-asm.py, with
/// block i - 1's float part (its two sums in v14, its activation scales in v15 as f16, its
/// scale in h20); the first trip's previous block is zeros (+0 added to sumf), the last
/// block's float part runs after the loop. sumf lives in v21, v16-v18 hold the constants.
macro_rules! q2_0_row {
    ($w:expr, $act:expr, $nb:expr, [$($ext:literal),*], [$($body:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let mut sumf = 0.0f32;
        if $nb > 0 {
            asm!(
                $($ext,)*
                "ld1 {{v16.16b, v17.16b, v18.16b}}, [{c}]",
                "movi v19.16b, #3",
                "movi v23.16b, #1",
                "movi v14.4s, #0",
                "movi v15.4s, #0",
                "movi v20.4s, #0",
                "2:",
                $($body,)*
                "scvtf v14.4s, v14.4s",
                "fcvtl v15.4s, v15.4h",
                "fmul v14.4s, v14.4s, v15.4s",
                "faddp s15, v14.2s",
                "fcvt s20, h20",
                "fmul s15, s20, s15",
                "fadd s21, s21, s15",
                x = inout(reg) w.as_ptr() => _,
                y = inout(reg) act.as_ptr() => _,
                nb = inout(reg) $nb => _,
                c = in(reg) CONSTS.0.as_ptr(),
                inout("v21") sumf,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _, out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v14") _, out("v15") _, out("v19") _, out("v20") _, out("v22") _, out("v23") _, out("v24") _, out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _, out("v30") _, out("v31") _,
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
                "scvtf v14.4s, v14.4s",
                "fcvtl v15.4s, v15.4h",
                "fcvt s20, h20",
                "ldr d22, [{x}, #2]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "ldr h0, [{y}, #0]",
                "ldr d24, [{x}, #10]",
                "ldur q4, [{y}, #36]",
                "ldur q5, [{y}, #52]",
                "ldr h1, [{y}, #34]",
                "subs {nb}, {nb}, #1",
                "fmul v14.4s, v14.4s, v15.4s",
                "tbl v10.16b, {{v22.16b}}, v16.16b",
                "tbl v11.16b, {{v24.16b}}, v16.16b",
                "add {y}, {y}, #68",
                "tbl v22.16b, {{v22.16b}}, v17.16b",
                "tbl v24.16b, {{v24.16b}}, v17.16b",
                "faddp s15, v14.2s",
                "ushl v10.16b, v10.16b, v18.16b",
                "ushl v11.16b, v11.16b, v18.16b",
                "ushl v22.16b, v22.16b, v18.16b",
                "ushl v24.16b, v24.16b, v18.16b",
                "fmul s15, s20, s15",
                "ldr h20, [{x}]",
                "and v10.16b, v10.16b, v19.16b",
                "and v11.16b, v11.16b, v19.16b",
                "add {x}, {x}, #18",
                "and v22.16b, v22.16b, v19.16b",
                "and v24.16b, v24.16b, v19.16b",
                "fadd s21, s21, s15",
                "sub v10.16b, v10.16b, v23.16b",
                "sub v11.16b, v11.16b, v23.16b",
                "zip1 v15.4h, v0.4h, v1.4h",
                "sub v22.16b, v22.16b, v23.16b",
                "sub v24.16b, v24.16b, v23.16b",
                "smull v28.8h, v10.8b, v2.8b",
                "smull v29.8h, v11.8b, v4.8b",
                "smlal2 v28.8h, v10.16b, v2.16b",
                "smlal2 v29.8h, v11.16b, v4.16b",
                "smlal v28.8h, v22.8b, v3.8b",
                "smlal v29.8h, v24.8b, v5.8b",
                "smlal2 v28.8h, v22.16b, v3.16b",
                "smlal2 v29.8h, v24.16b, v5.16b",
                "addp v28.8h, v28.8h, v29.8h",
                "addp v28.8h, v28.8h, v28.8h",
                "saddlp v14.4s, v28.8h",
                "b.ne 2b",
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
                "scvtf v14.4s, v14.4s",
                "fcvtl v15.4s, v15.4h",
                "fcvt s20, h20",
                "ldr d22, [{x}, #2]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "ldr h0, [{y}, #0]",
                "ldr d24, [{x}, #10]",
                "ldur q4, [{y}, #36]",
                "ldur q5, [{y}, #52]",
                "ldr h1, [{y}, #34]",
                "movi v28.4s, #0",
                "movi v29.4s, #0",
                "subs {nb}, {nb}, #1",
                "fmul v14.4s, v14.4s, v15.4s",
                "tbl v10.16b, {{v22.16b}}, v16.16b",
                "tbl v11.16b, {{v24.16b}}, v16.16b",
                "add {y}, {y}, #68",
                "tbl v22.16b, {{v22.16b}}, v17.16b",
                "tbl v24.16b, {{v24.16b}}, v17.16b",
                "faddp s15, v14.2s",
                "ushl v10.16b, v10.16b, v18.16b",
                "ushl v11.16b, v11.16b, v18.16b",
                "ushl v22.16b, v22.16b, v18.16b",
                "ushl v24.16b, v24.16b, v18.16b",
                "fmul s15, s20, s15",
                "ldr h20, [{x}]",
                "and v10.16b, v10.16b, v19.16b",
                "and v11.16b, v11.16b, v19.16b",
                "add {x}, {x}, #18",
                "and v22.16b, v22.16b, v19.16b",
                "and v24.16b, v24.16b, v19.16b",
                "fadd s21, s21, s15",
                "sub v10.16b, v10.16b, v23.16b",
                "sub v11.16b, v11.16b, v23.16b",
                "zip1 v15.4h, v0.4h, v1.4h",
                "sub v22.16b, v22.16b, v23.16b",
                "sub v24.16b, v24.16b, v23.16b",
                "sdot v28.4s, v10.16b, v2.16b",
                "sdot v29.4s, v11.16b, v4.16b",
                "sdot v28.4s, v22.16b, v3.16b",
                "sdot v29.4s, v24.16b, v5.16b",
                "addp v28.4s, v28.4s, v29.4s",
                "addp v14.4s, v28.4s, v28.4s",
                "b.ne 2b",
            ]
        )
    }
}
