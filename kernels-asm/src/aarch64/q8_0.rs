//! Q8_0 . Q8_0: blocks of 32 signed bytes with an f16 scale at offset 0, quants at 2.
//! Scalar twin: `smolrun_core::quant::q8_0::vec_dot`, `sumf += sumi as f32 * (dx * dy)`.
//!
//! The row loop is `pair_row!` (mod.rs). A block's integer part leaves sumi in s14 and
//! dx * dy in s15, formed as the twin forms it.

use super::{whole_blocks, Q8_0_BYTES, QK};

/// Q8_0 . Q8_0 with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_q8_0_q8_0_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK, w, Q8_0_BYTES, act, Q8_0_BYTES);
    // SAFETY: blocks 0..nb lie inside both slices; only base aarch64 NEON instructions.
    // i8 x i8 products reach 2^14, so two of them may overflow i16: each product vector is
    // widened to i32 on its own (saddlp/sadalp).
    unsafe {
        pair_row!(
            w,
            act,
            nb,
            [],
            [
                "ldr h15, [{x}]",
                "ldr h16, [{y}]",
                "ldur q0, [{x}, #2]",
                "ldur q1, [{x}, #18]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "fcvt s15, h15",
                "add {x}, {x}, #34",
                "fcvt s16, h16",
                "add {y}, {y}, #34",
                "smull v4.8h, v0.8b, v2.8b",
                "smull2 v5.8h, v0.16b, v2.16b",
                "smull v6.8h, v1.8b, v3.8b",
                "smull2 v7.8h, v1.16b, v3.16b",
                "fmul s15, s15, s16",
                "saddlp v4.4s, v4.8h",
                "saddlp v5.4s, v5.8h",
                "sadalp v4.4s, v6.8h",
                "sadalp v5.4s, v7.8h",
                "add v4.4s, v4.4s, v5.4s",
                "addv s14, v4.4s",
                "scvtf s24, s14",
                "fmul s24, s24, s15",
                "fadd s21, s21, s24",
            ],
            [
                "movi v14.4s, #0",
                "movi v15.4s, #0",
                "movi v19.4s, #0",
                "movi v20.4s, #0",
            ],
            [
                "scvtf s24, s14",
                "scvtf s23, s19",
                "ldr h16, [{y}]",
                "ldur q0, [{x}, #2]",
                "ldur q1, [{x}, #18]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "ldr h22, [{y}, #34]",
                "ldur q8, [{x}, #36]",
                "ldur q9, [{x}, #52]",
                "ldur q10, [{y}, #36]",
                "ldur q11, [{y}, #52]",
                "subs {nb}, {nb}, #1",
                "fmul s24, s24, s15",
                "fmul s23, s23, s20",
                "fcvt s16, h16",
                "smull v4.8h, v0.8b, v2.8b",
                "smull2 v5.8h, v0.16b, v2.16b",
                "smull v6.8h, v1.8b, v3.8b",
                "smull2 v7.8h, v1.16b, v3.16b",
                "fcvt s22, h22",
                "add {y}, {y}, #68",
                "ldr h15, [{x}]",
                "smull v12.8h, v8.8b, v10.8b",
                "smull2 v13.8h, v8.16b, v10.16b",
                "ldr h20, [{x}, #34]",
                "smull v17.8h, v9.8b, v11.8b",
                "smull2 v18.8h, v9.16b, v11.16b",
                "fadd s21, s21, s24",
                "saddlp v4.4s, v4.8h",
                "saddlp v5.4s, v5.8h",
                "fcvt s15, h15",
                "add {x}, {x}, #68",
                "saddlp v12.4s, v12.8h",
                "fcvt s20, h20",
                "saddlp v13.4s, v13.8h",
                "fadd s21, s21, s23",
                "sadalp v4.4s, v6.8h",
                "sadalp v5.4s, v7.8h",
                "fmul s15, s15, s16",
                "sadalp v12.4s, v17.8h",
                "fmul s20, s20, s22",
                "sadalp v13.4s, v18.8h",
                "add v4.4s, v4.4s, v5.4s",
                "add v12.4s, v12.4s, v13.4s",
                "addv s14, v4.4s",
                "addv s19, v12.4s",
                "b.ne 2b",
            ],
            [
                "scvtf s24, s14",
                "scvtf s23, s19",
                "fmul s24, s24, s15",
                "fmul s23, s23, s20",
                "fadd s21, s21, s24",
                "fadd s21, s21, s23",
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
        pair_row!(
            w,
            act,
            nb,
            [".arch_extension dotprod"],
            [
                "ldr h15, [{x}]",
                "ldr h16, [{y}]",
                "ldur q0, [{x}, #2]",
                "ldur q1, [{x}, #18]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "movi v4.4s, #0",
                "movi v5.4s, #0",
                "fcvt s15, h15",
                "add {x}, {x}, #34",
                "fcvt s16, h16",
                "add {y}, {y}, #34",
                "sdot v4.4s, v0.16b, v2.16b",
                "sdot v5.4s, v1.16b, v3.16b",
                "fmul s15, s15, s16",
                "add v4.4s, v4.4s, v5.4s",
                "addv s14, v4.4s",
                "scvtf s24, s14",
                "fmul s24, s24, s15",
                "fadd s21, s21, s24",
            ],
            [
                "movi v14.4s, #0",
                "movi v15.4s, #0",
                "movi v12.4s, #0",
                "movi v13.4s, #0",
            ],
            [
                "scvtf s24, s14",
                "scvtf s18, s12",
                "ldr h16, [{y}]",
                "ldur q0, [{x}, #2]",
                "ldur q1, [{x}, #18]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "movi v4.4s, #0",
                "movi v5.4s, #0",
                "ldr h17, [{y}, #34]",
                "ldur q6, [{x}, #36]",
                "ldur q7, [{x}, #52]",
                "ldur q8, [{y}, #36]",
                "ldur q9, [{y}, #52]",
                "movi v10.4s, #0",
                "movi v11.4s, #0",
                "subs {nb}, {nb}, #1",
                "fmul s24, s24, s15",
                "fmul s18, s18, s13",
                "fcvt s16, h16",
                "sdot v4.4s, v0.16b, v2.16b",
                "sdot v5.4s, v1.16b, v3.16b",
                "fcvt s17, h17",
                "add {y}, {y}, #68",
                "sdot v10.4s, v6.16b, v8.16b",
                "sdot v11.4s, v7.16b, v9.16b",
                "ldr h15, [{x}]",
                "ldr h13, [{x}, #34]",
                "fadd s21, s21, s24",
                "add v4.4s, v4.4s, v5.4s",
                "add {x}, {x}, #68",
                "fcvt s15, h15",
                "add v10.4s, v10.4s, v11.4s",
                "fcvt s13, h13",
                "fadd s21, s21, s18",
                "addv s14, v4.4s",
                "fmul s15, s15, s16",
                "addv s12, v10.4s",
                "fmul s13, s13, s17",
                "b.ne 2b",
            ],
            [
                "scvtf s24, s14",
                "scvtf s18, s12",
                "fmul s24, s24, s15",
                "fmul s18, s18, s13",
                "fadd s21, s21, s24",
                "fadd s21, s21, s18",
            ]
        )
    }
}
