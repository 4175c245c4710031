//! Q4_0 . Q8_0: weight blocks of 32 nibbles (18 bytes: f16 d at 0, 16 bytes at 2; byte j holds
//! element j in its low nibble and element j + 16 in its high nibble, both offset by 8).
//! Scalar twin: `smolrun_core::quant::q4_0::vec_dot`, `sumf += sumi as f32 * dx * dy`.

use super::{whole_blocks, Q8_0_BYTES, QK};
use core::arch::asm;

const Q4_0_BYTES: usize = 18;

/// The whole row in one asm block. The loop body is block i's loads, unpacking and integer
/// sum (into s14) and its scales as f32 (dx in s15, dy in s16), interleaved with block i - 1's float part,
/// `sumf += sumi as f32 * dx * dy`, the twin's operations one for one: the A53 and A55 issue in order and the
/// float part alone is a chain of dependent operations that would stall them. The order of
/// the lines is the list scheduler's of tools/lowbit-asm.py (`tools/lowbit-asm.py emit q4
/// neon|dot`). The first trip's "previous block" is zeros (sumf + 0 leaves sumf, which
/// starts at +0, as it is); the last block's float part runs after the loop. sumf lives in
/// v21, the constants in v30 (0x0f) and v31 (8).
macro_rules! q4_0_row {
    ($w:expr, $act:expr, $nb:expr, [$($ext:literal),*], [$($body:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let mut sumf = 0.0f32;
        if $nb > 0 {
            asm!(
                $($ext,)*
                "movi v30.16b, #0x0f",
                "movi v31.16b, #8",
                "movi v14.4s, #0",
                "movi v15.4s, #0",
                "movi v16.4s, #0",
                "2:",
                $($body,)*
                "scvtf s24, s14",
                "fmul s24, s24, s15",
                "fmul s24, s24, s16",
                "fadd s21, s21, s24",
                x = inout(reg) w.as_ptr() => _,
                y = inout(reg) act.as_ptr() => _,
                nb = inout(reg) $nb => _,
                inout("v21") sumf,
                out("v0") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _,
                out("v8") _, out("v9") _, out("v14") _, out("v15") _, out("v16") _,
                out("v24") _, out("v30") _, out("v31") _,
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
            [],
            [
                "scvtf s24, s14",
                "ldur q0, [{x}, #2]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "subs {nb}, {nb}, #1",
                "fmul s24, s24, s15",
                "and v8.16b, v0.16b, v30.16b",
                "ushr v9.16b, v0.16b, #4",
                "ldr h15, [{x}]",
                "add {x}, {x}, #18",
                "fmul s24, s24, s16",
                "ldr h16, [{y}]",
                "sub v8.16b, v8.16b, v31.16b",
                "fcvt s15, h15",
                "sub v9.16b, v9.16b, v31.16b",
                "add {y}, {y}, #34",
                "fadd s21, s21, s24",
                "fcvt s16, h16",
                "smull v4.8h, v8.8b, v2.8b",
                "smull2 v5.8h, v8.16b, v2.16b",
                "smlal v4.8h, v9.8b, v3.8b",
                "smlal2 v5.8h, v9.16b, v3.16b",
                "add v4.8h, v4.8h, v5.8h",
                "saddlv s14, v4.8h",
                "b.ne 2b",
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
            [".arch_extension dotprod"],
            [
                "scvtf s24, s14",
                "ldur q0, [{x}, #2]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "movi v4.4s, #0",
                "movi v5.4s, #0",
                "subs {nb}, {nb}, #1",
                "fmul s24, s24, s15",
                "and v8.16b, v0.16b, v30.16b",
                "ushr v9.16b, v0.16b, #4",
                "ldr h15, [{x}]",
                "add {x}, {x}, #18",
                "fmul s24, s24, s16",
                "ldr h16, [{y}]",
                "sub v8.16b, v8.16b, v31.16b",
                "fcvt s15, h15",
                "sub v9.16b, v9.16b, v31.16b",
                "add {y}, {y}, #34",
                "fadd s21, s21, s24",
                "fcvt s16, h16",
                "sdot v4.4s, v8.16b, v2.16b",
                "sdot v5.4s, v9.16b, v3.16b",
                "add v4.4s, v4.4s, v5.4s",
                "addv s14, v4.4s",
                "b.ne 2b",
            ]
        )
    }
}
