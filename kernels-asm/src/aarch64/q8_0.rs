//! Q8_0 . Q8_0: blocks of 32 signed bytes with an f16 scale at offset 0, quants at 2.
//! Scalar twin: `smolrun_core::quant::q8_0::vec_dot`, `sumf += sumi as f32 * (dx * dy)`.

use super::{whole_blocks, Q8_0_BYTES, QK};
use core::arch::asm;

/// One asm block per 32-element block: load both blocks, run the integer part given as
/// `$int` (which leaves `sumi` in s4), then the float part in the scalar twin's order.
macro_rules! q8_0_row {
    ($w:expr, $act:expr, $nb:expr, [$($int:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let mut sumf = 0.0f32;
        for b in 0..$nb {
            asm!(
                "ldr h16, [{x}]",
                "ldr h17, [{y}]",
                "ldur q0, [{x}, #2]",
                "ldur q1, [{x}, #18]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                $($int,)*
                "scvtf s4, s4",
                "fcvt s16, h16",
                "fcvt s17, h17",
                "fmul s16, s16, s17",
                "fmul s4, s4, s16",
                "fadd {sumf:s}, {sumf:s}, s4",
                x = in(reg) w.as_ptr().add(b * Q8_0_BYTES),
                y = in(reg) act.as_ptr().add(b * Q8_0_BYTES),
                sumf = inout(vreg) sumf,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                out("v5") _, out("v6") _, out("v7") _, out("v16") _, out("v17") _,
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
            [
                "smull v4.8h, v0.8b, v2.8b",
                "smull2 v5.8h, v0.16b, v2.16b",
                "smull v6.8h, v1.8b, v3.8b",
                "smull2 v7.8h, v1.16b, v3.16b",
                "saddlp v4.4s, v4.8h",
                "sadalp v4.4s, v5.8h",
                "sadalp v4.4s, v6.8h",
                "sadalp v4.4s, v7.8h",
                "addv s4, v4.4s",
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
            [
                ".arch_extension dotprod",
                "movi v4.4s, #0",
                "sdot v4.4s, v0.16b, v2.16b",
                "sdot v4.4s, v1.16b, v3.16b",
                "addv s4, v4.4s",
            ]
        )
    }
}
