//! Q4_0 . Q8_0: weight blocks of 32 nibbles (18 bytes: f16 d at 0, 16 bytes at 2; byte j holds
//! element j in its low nibble and element j + 16 in its high nibble, both offset by 8).
//! Scalar twin: `smolrun_core::quant::q4_0::vec_dot`, `sumf += sumi as f32 * dx * dy`.

use super::{whole_blocks, Q8_0_BYTES, QK};
use core::arch::asm;

const Q4_0_BYTES: usize = 18;

/// One asm block per 32-element block: unpack the nibbles to signed bytes (v4: elements
/// 0..15, v5: 16..31), run `$int` (leaves `sumi` in s6), then the float part in the scalar
/// twin's order, left to right.
macro_rules! q4_0_row {
    ($w:expr, $act:expr, $nb:expr, [$($int:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let mut sumf = 0.0f32;
        for b in 0..$nb {
            asm!(
                "ldr h16, [{x}]",
                "ldr h17, [{y}]",
                "ldur q0, [{x}, #2]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "movi v30.16b, #0x0f",
                "movi v31.16b, #8",
                "and v4.16b, v0.16b, v30.16b",
                "ushr v5.16b, v0.16b, #4",
                "sub v4.16b, v4.16b, v31.16b",
                "sub v5.16b, v5.16b, v31.16b",
                $($int,)*
                "scvtf s6, s6",
                "fcvt s16, h16",
                "fcvt s17, h17",
                "fmul s6, s6, s16",
                "fmul s6, s6, s17",
                "fadd {sumf:s}, {sumf:s}, s6",
                x = in(reg) w.as_ptr().add(b * Q4_0_BYTES),
                y = in(reg) act.as_ptr().add(b * Q8_0_BYTES),
                sumf = inout(vreg) sumf,
                out("v0") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _,
                out("v6") _, out("v16") _, out("v17") _, out("v30") _, out("v31") _,
                options(nostack, readonly, pure),
            );
        }
        sumf
    }};
}

/// Q4_0 . Q8_0 with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_q4_0_q8_0_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK, w, Q4_0_BYTES, act, Q8_0_BYTES);
    // SAFETY: blocks 0..nb lie inside both slices; only base aarch64 NEON instructions.
    // |q - 8| <= 8 and |y| <= 128: each i16 lane sums 4 products of at most 1024.
    unsafe {
        q4_0_row!(
            w,
            act,
            nb,
            [
                "smull v6.8h, v4.8b, v2.8b",
                "smlal2 v6.8h, v4.16b, v2.16b",
                "smlal v6.8h, v5.8b, v3.8b",
                "smlal2 v6.8h, v5.16b, v3.16b",
                "saddlv s6, v6.8h",
            ]
        )
    }
}

/// Q4_0 . Q8_0 with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_q4_0_q8_0_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK, w, Q4_0_BYTES, act, Q8_0_BYTES);
    // SAFETY: blocks 0..nb lie inside both slices; the caller vouches for dotprod.
    unsafe {
        q4_0_row!(
            w,
            act,
            nb,
            [
                ".arch_extension dotprod",
                "movi v6.4s, #0",
                "sdot v6.4s, v4.16b, v2.16b",
                "sdot v6.4s, v5.16b, v3.16b",
                "addv s6, v6.4s",
            ]
        )
    }
}
