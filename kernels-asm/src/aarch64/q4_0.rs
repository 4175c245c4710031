//! Q4_0 . Q8_0: weight blocks of 32 nibbles (18 bytes: f16 d at 0, 16 bytes at 2; byte j holds
//! element j in its low nibble and element j + 16 in its high nibble, both offset by 8).
//! Scalar twin: `smolrun_core::quant::q4_0::vec_dot`, `sumf += sumi as f32 * dx * dy`.
//!
//! The row loop is `pair_row!` (mod.rs). A block's integer part leaves sumi in s14, dx in s15
//! and dy in s16; v30 = 0x0f, v31 = 8.

use super::{whole_blocks, Q8_0_BYTES, QK};

const Q4_0_BYTES: usize = 18;

/// Q4_0 . Q8_0 with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_q4_0_q8_0_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK, w, Q4_0_BYTES, act, Q8_0_BYTES);
    // SAFETY: blocks 0..nb lie inside both slices; only base aarch64 NEON instructions.
    // |q - 8| <= 8 and |y| <= 128: each i16 lane sums 4 products of at most 1024.
    unsafe {
        pair_row!(
            w,
            act,
            nb,
            ["movi v30.16b, #0x0f", "movi v31.16b, #8"],
            [
                "ldr h15, [{x}]",
                "ldr h16, [{y}]",
                "ldur q0, [{x}, #2]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "add {x}, {x}, #18",
                "fcvt s15, h15",
                "fcvt s16, h16",
                "add {y}, {y}, #34",
                "and v8.16b, v0.16b, v30.16b",
                "ushr v9.16b, v0.16b, #4",
                "sub v8.16b, v8.16b, v31.16b",
                "sub v9.16b, v9.16b, v31.16b",
                "smull v4.8h, v8.8b, v2.8b",
                "smull2 v5.8h, v8.16b, v2.16b",
                "smlal v4.8h, v9.8b, v3.8b",
                "smlal2 v5.8h, v9.16b, v3.16b",
                "add v4.8h, v4.8h, v5.8h",
                "saddlv s14, v4.8h",
                "scvtf s24, s14",
                "fmul s24, s24, s15",
                "fmul s24, s24, s16",
                "fadd s21, s21, s24",
            ],
            [
                "movi v14.4s, #0",
                "movi v15.4s, #0",
                "movi v16.4s, #0",
                "movi v17.4s, #0",
                "movi v18.4s, #0",
                "movi v19.4s, #0",
            ],
            [
                "scvtf s24, s14",
                "scvtf s20, s17",
                "ldur q0, [{x}, #2]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "ldur q1, [{x}, #20]",
                "ldur q6, [{y}, #36]",
                "ldur q7, [{y}, #52]",
                "subs {nb}, {nb}, #1",
                "fmul s24, s24, s15",
                "fmul s20, s20, s18",
                "and v8.16b, v0.16b, v30.16b",
                "ushr v9.16b, v0.16b, #4",
                "and v12.16b, v1.16b, v30.16b",
                "ushr v13.16b, v1.16b, #4",
                "ldr h15, [{x}]",
                "ldr h18, [{x}, #18]",
                "fmul s24, s24, s16",
                "fmul s20, s20, s19",
                "sub v8.16b, v8.16b, v31.16b",
                "sub v9.16b, v9.16b, v31.16b",
                "add {x}, {x}, #36",
                "ldr h16, [{y}]",
                "sub v12.16b, v12.16b, v31.16b",
                "fcvt s15, h15",
                "ldr h19, [{y}, #34]",
                "sub v13.16b, v13.16b, v31.16b",
                "fcvt s18, h18",
                "fadd s21, s21, s24",
                "smull v4.8h, v8.8b, v2.8b",
                "smull2 v5.8h, v8.16b, v2.16b",
                "fcvt s16, h16",
                "add {y}, {y}, #68",
                "smull v10.8h, v12.8b, v6.8b",
                "smull2 v11.8h, v12.16b, v6.16b",
                "fcvt s19, h19",
                "fadd s21, s21, s20",
                "smlal v4.8h, v9.8b, v3.8b",
                "smlal2 v5.8h, v9.16b, v3.16b",
                "smlal v10.8h, v13.8b, v7.8b",
                "smlal2 v11.8h, v13.16b, v7.16b",
                "add v4.8h, v4.8h, v5.8h",
                "add v10.8h, v10.8h, v11.8h",
                "saddlv s14, v4.8h",
                "saddlv s17, v10.8h",
                "b.ne 2b",
            ],
            [
                "scvtf s24, s14",
                "scvtf s20, s17",
                "fmul s24, s24, s15",
                "fmul s20, s20, s18",
                "fmul s24, s24, s16",
                "fmul s20, s20, s19",
                "fadd s21, s21, s24",
                "fadd s21, s21, s20",
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
        pair_row!(
            w,
            act,
            nb,
            [
                ".arch_extension dotprod",
                "movi v30.16b, #0x0f",
                "movi v31.16b, #8"
            ],
            [
                "ldr h15, [{x}]",
                "ldr h16, [{y}]",
                "ldur q0, [{x}, #2]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "movi v4.4s, #0",
                "movi v5.4s, #0",
                "add {x}, {x}, #18",
                "fcvt s15, h15",
                "fcvt s16, h16",
                "add {y}, {y}, #34",
                "and v8.16b, v0.16b, v30.16b",
                "ushr v9.16b, v0.16b, #4",
                "sub v8.16b, v8.16b, v31.16b",
                "sub v9.16b, v9.16b, v31.16b",
                "sdot v4.4s, v8.16b, v2.16b",
                "sdot v5.4s, v9.16b, v3.16b",
                "add v4.4s, v4.4s, v5.4s",
                "addv s14, v4.4s",
                "scvtf s24, s14",
                "fmul s24, s24, s15",
                "fmul s24, s24, s16",
                "fadd s21, s21, s24",
            ],
            [
                "movi v14.4s, #0",
                "movi v15.4s, #0",
                "movi v16.4s, #0",
                "movi v17.4s, #0",
                "movi v18.4s, #0",
                "movi v19.4s, #0",
            ],
            [
                "scvtf s24, s14",
                "scvtf s20, s17",
                "ldur q0, [{x}, #2]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "movi v4.4s, #0",
                "movi v5.4s, #0",
                "ldur q1, [{x}, #20]",
                "ldur q6, [{y}, #36]",
                "ldur q7, [{y}, #52]",
                "movi v10.4s, #0",
                "movi v11.4s, #0",
                "subs {nb}, {nb}, #1",
                "fmul s24, s24, s15",
                "fmul s20, s20, s18",
                "and v8.16b, v0.16b, v30.16b",
                "ushr v9.16b, v0.16b, #4",
                "and v12.16b, v1.16b, v30.16b",
                "ushr v13.16b, v1.16b, #4",
                "ldr h15, [{x}]",
                "ldr h18, [{x}, #18]",
                "fmul s24, s24, s16",
                "fmul s20, s20, s19",
                "sub v8.16b, v8.16b, v31.16b",
                "sub v9.16b, v9.16b, v31.16b",
                "add {x}, {x}, #36",
                "ldr h16, [{y}]",
                "sub v12.16b, v12.16b, v31.16b",
                "fcvt s15, h15",
                "ldr h19, [{y}, #34]",
                "sub v13.16b, v13.16b, v31.16b",
                "fcvt s18, h18",
                "fadd s21, s21, s24",
                "sdot v4.4s, v8.16b, v2.16b",
                "sdot v5.4s, v9.16b, v3.16b",
                "fcvt s16, h16",
                "add {y}, {y}, #68",
                "sdot v10.4s, v12.16b, v6.16b",
                "fcvt s19, h19",
                "sdot v11.4s, v13.16b, v7.16b",
                "fadd s21, s21, s20",
                "add v4.4s, v4.4s, v5.4s",
                "add v10.4s, v10.4s, v11.4s",
                "addv s14, v4.4s",
                "addv s17, v10.4s",
                "b.ne 2b",
            ],
            [
                "scvtf s24, s14",
                "scvtf s20, s17",
                "fmul s24, s24, s15",
                "fmul s20, s20, s18",
                "fmul s24, s24, s16",
                "fmul s20, s20, s19",
                "fadd s21, s21, s24",
                "fadd s21, s21, s20",
            ]
        )
    }
}
