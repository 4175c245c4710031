//! Q8_0 . Q8_0: blocks of 32 signed bytes with an f16 scale at offset 0, quants at 2.
//! Scalar twin: `smolrun_core::quant::q8_0::vec_dot`, `sumf += sumi as f32 * (dx * dy)`.

use super::{whole_blocks, Q8_0_BYTES, QK};
use core::arch::asm;

/// The whole row in one asm block. The loop body is block i's loads and integer sum (into
/// s14) and its dx * dy (s15), interleaved with block i - 1's float part,
/// `sumf += sumi as f32 * (dx * dy)`, the twin's operations one for one: the A53 and A55
/// issue in order and the float part alone is a chain of dependent operations that would
/// stall them. The order of the lines is the list scheduler's of tools/lowbit-asm.py
/// (`tools/lowbit-asm.py emit q8 neon|dot`). The first trip's "previous block" is zeros
/// (sumf + 0 leaves sumf, which starts at +0, as it is); the last block's float part runs
/// after the loop. sumf lives in v21.
macro_rules! q8_0_row {
    ($w:expr, $act:expr, $nb:expr, [$($ext:literal),*], [$($body:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let mut sumf = 0.0f32;
        if $nb > 0 {
            asm!(
                $($ext,)*
                "movi v14.4s, #0",
                "movi v15.4s, #0",
                "2:",
                $($body,)*
                "scvtf s24, s14",
                "fmul s24, s24, s15",
                "fadd s21, s21, s24",
                x = inout(reg) w.as_ptr() => _,
                y = inout(reg) act.as_ptr() => _,
                nb = inout(reg) $nb => _,
                inout("v21") sumf,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                out("v5") _, out("v6") _, out("v7") _, out("v14") _, out("v15") _,
                out("v16") _, out("v24") _,
                options(nostack, readonly, pure),
            );
        }
        sumf
    }};
}

/// Q8_0 . Q8_0 with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_q8_0_q8_0_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK, w, Q8_0_BYTES, act, Q8_0_BYTES);
    // SAFETY: blocks 0..nb lie inside both slices; only base aarch64 NEON instructions.
    // i8 x i8 products reach 2^14, so two of them may overflow i16: each product vector is
    // widened to i32 on its own (saddlp/sadalp).
    unsafe {
        q8_0_row!(
            w,
            act,
            nb,
            [],
            [
                "scvtf s24, s14",
                "ldr h16, [{y}]",
                "ldur q0, [{x}, #2]",
                "ldur q1, [{x}, #18]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "subs {nb}, {nb}, #1",
                "fmul s24, s24, s15",
                "fcvt s16, h16",
                "add {y}, {y}, #34",
                "ldr h15, [{x}]",
                "smull v4.8h, v0.8b, v2.8b",
                "smull2 v5.8h, v0.16b, v2.16b",
                "smull v6.8h, v1.8b, v3.8b",
                "smull2 v7.8h, v1.16b, v3.16b",
                "add {x}, {x}, #34",
                "fadd s21, s21, s24",
                "fcvt s15, h15",
                "saddlp v4.4s, v4.8h",
                "saddlp v5.4s, v5.8h",
                "fmul s15, s15, s16",
                "sadalp v4.4s, v6.8h",
                "sadalp v5.4s, v7.8h",
                "add v4.4s, v4.4s, v5.4s",
                "addv s14, v4.4s",
                "b.ne 2b",
            ]
        )
    }
}

/// Q8_0 . Q8_0 with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_q8_0_q8_0_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK, w, Q8_0_BYTES, act, Q8_0_BYTES);
    // SAFETY: blocks 0..nb lie inside both slices; the caller vouches for dotprod.
    unsafe {
        q8_0_row!(
            w,
            act,
            nb,
            [".arch_extension dotprod"],
            [
                "scvtf s24, s14",
                "ldr h16, [{y}]",
                "ldur q0, [{x}, #2]",
                "ldur q1, [{x}, #18]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "movi v4.4s, #0",
                "movi v5.4s, #0",
                "subs {nb}, {nb}, #1",
                "fmul s24, s24, s15",
                "fcvt s16, h16",
                "add {y}, {y}, #34",
                "sdot v4.4s, v0.16b, v2.16b",
                "sdot v5.4s, v1.16b, v3.16b",
                "ldr h15, [{x}]",
                "fadd s21, s21, s24",
                "add {x}, {x}, #34",
                "fcvt s15, h15",
                "add v4.4s, v4.4s, v5.4s",
                "fmul s15, s15, s16",
                "addv s14, v4.4s",
                "b.ne 2b",
            ]
        )
    }
}
