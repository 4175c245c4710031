//! Q5_0 . Q8_0: weight blocks of 32 five-bit quants (22 bytes: f16 d at 0, u32 qh at 2 whose
//! bit j is the fifth bit of element j, 16 nibble bytes at 6 in Q4_0 order), offset by 16.
//! Scalar twin: `smolrun_core::quant::q5_0::vec_dot`, `sumf += (dx * dy) * sumi as f32`.
//!
//! The row loop is `pair_row!` (mod.rs). A block's integer part leaves sumi in s14 and
//! dx * dy in s15. The fifth bits: `tbl` with v28 spreads qh bytes 0, 1 and (loaded again
//! from offset 4) 2, 3 over the 8 lanes of their elements, `cmtst` against v29 turns bit j
//! into a mask, and quant - 16 is the nibble minus 16 where the mask is clear (`bic` of
//! v31 = 0x10 by the mask, then `sub`). v30 = 0x0f.

use super::{whole_blocks, Q8_0_BYTES, QK};

const Q5_0_BYTES: usize = 22;

/// `tbl` indices (v28: byte 0 to lanes 0..8, byte 1 to 8..16), then the bit each lane tests
/// (v29: 1, 2, .. 128, twice).
#[repr(align(16))]
struct Consts([u8; 32]);

static CONSTS: Consts = {
    let mut c = [0u8; 32];
    let mut i = 0;
    while i < 16 {
        c[i] = (i / 8) as u8;
        c[16 + i] = 1 << (i % 8);
        i += 1;
    }
    Consts(c)
};

/// Q5_0 . Q8_0 with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_q5_0_q8_0_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK, w, Q5_0_BYTES, act, Q8_0_BYTES);
    // SAFETY: blocks 0..nb lie inside both slices; only base aarch64 NEON instructions.
    // |q - 16| <= 16 and |y| <= 128: each i16 lane sums 4 products of at most 2048.
    unsafe {
        pair_row!(
            w,
            act,
            nb,
            ["ld1 {{v28.16b, v29.16b}}, [{c}]", "movi v30.16b, #0x0f", "movi v31.16b, #0x10"],
            [
                "ldr h15, [{x}]",
                "ldr h16, [{y}]",
                "ldur s10, [{x}, #2]",
                "ldur h11, [{x}, #4]",
                "ldur q0, [{x}, #6]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "fcvt s15, h15",
                "fcvt s16, h16",
                "add {x}, {x}, #22",
                "tbl v10.16b, {{v10.16b}}, v28.16b",
                "tbl v11.16b, {{v11.16b}}, v28.16b",
                "add {y}, {y}, #34",
                "and v8.16b, v0.16b, v30.16b",
                "ushr v9.16b, v0.16b, #4",
                "fmul s15, s15, s16",
                "cmtst v10.16b, v10.16b, v29.16b",
                "cmtst v11.16b, v11.16b, v29.16b",
                "bic v10.16b, v31.16b, v10.16b",
                "bic v11.16b, v31.16b, v11.16b",
                "sub v8.16b, v8.16b, v10.16b",
                "sub v9.16b, v9.16b, v11.16b",
                "smull v4.8h, v8.8b, v2.8b",
                "smull2 v5.8h, v8.16b, v2.16b",
                "smlal v4.8h, v9.8b, v3.8b",
                "smlal2 v5.8h, v9.16b, v3.16b",
                "add v4.8h, v4.8h, v5.8h",
                "saddlv s14, v4.8h",
                "scvtf s24, s14",
                "fmul s24, s15, s24",
                "fadd s21, s21, s24",
            ],
            [
                "movi v14.4s, #0",
                "movi v15.4s, #0",
                "movi v22.4s, #0",
                "movi v23.4s, #0",
            ],
            [
                "scvtf s24, s14",
                "scvtf s26, s22",
                "ldr h16, [{y}]",
                "ldur s10, [{x}, #2]",
                "ldur h11, [{x}, #4]",
                "ldur q0, [{x}, #6]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "ldr h25, [{y}, #34]",
                "ldur s19, [{x}, #24]",
                "ldur h20, [{x}, #26]",
                "ldur q1, [{x}, #28]",
                "ldur q6, [{y}, #36]",
                "ldur q7, [{y}, #52]",
                "subs {nb}, {nb}, #1",
                "fmul s24, s15, s24",
                "fmul s26, s23, s26",
                "fcvt s16, h16",
                "tbl v10.16b, {{v10.16b}}, v28.16b",
                "tbl v11.16b, {{v11.16b}}, v28.16b",
                "and v8.16b, v0.16b, v30.16b",
                "ushr v9.16b, v0.16b, #4",
                "fcvt s25, h25",
                "tbl v19.16b, {{v19.16b}}, v28.16b",
                "tbl v20.16b, {{v20.16b}}, v28.16b",
                "add {y}, {y}, #68",
                "and v17.16b, v1.16b, v30.16b",
                "ushr v18.16b, v1.16b, #4",
                "ldr h15, [{x}]",
                "ldr h23, [{x}, #22]",
                "fadd s21, s21, s24",
                "cmtst v10.16b, v10.16b, v29.16b",
                "cmtst v11.16b, v11.16b, v29.16b",
                "cmtst v19.16b, v19.16b, v29.16b",
                "cmtst v20.16b, v20.16b, v29.16b",
                "add {x}, {x}, #44",
                "fcvt s15, h15",
                "fcvt s23, h23",
                "fadd s21, s21, s26",
                "bic v10.16b, v31.16b, v10.16b",
                "bic v11.16b, v31.16b, v11.16b",
                "bic v19.16b, v31.16b, v19.16b",
                "bic v20.16b, v31.16b, v20.16b",
                "fmul s15, s15, s16",
                "fmul s23, s23, s25",
                "sub v8.16b, v8.16b, v10.16b",
                "sub v9.16b, v9.16b, v11.16b",
                "sub v17.16b, v17.16b, v19.16b",
                "sub v18.16b, v18.16b, v20.16b",
                "smull v4.8h, v8.8b, v2.8b",
                "smull2 v5.8h, v8.16b, v2.16b",
                "smull v12.8h, v17.8b, v6.8b",
                "smull2 v13.8h, v17.16b, v6.16b",
                "smlal v4.8h, v9.8b, v3.8b",
                "smlal2 v5.8h, v9.16b, v3.16b",
                "smlal v12.8h, v18.8b, v7.8b",
                "smlal2 v13.8h, v18.16b, v7.16b",
                "add v4.8h, v4.8h, v5.8h",
                "add v12.8h, v12.8h, v13.8h",
                "saddlv s14, v4.8h",
                "saddlv s22, v12.8h",
                "b.ne 2b",
            ],
            [
                "scvtf s24, s14",
                "scvtf s26, s22",
                "fmul s24, s15, s24",
                "fmul s26, s23, s26",
                "fadd s21, s21, s24",
                "fadd s21, s21, s26",
            ],
            c = in(reg) CONSTS.0.as_ptr(),
        )
    }
}

/// Q5_0 . Q8_0 with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_q5_0_q8_0_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK, w, Q5_0_BYTES, act, Q8_0_BYTES);
    // SAFETY: blocks 0..nb lie inside both slices; the caller vouches for dotprod.
    unsafe {
        pair_row!(
            w,
            act,
            nb,
            [".arch_extension dotprod", "ld1 {{v28.16b, v29.16b}}, [{c}]", "movi v30.16b, #0x0f", "movi v31.16b, #0x10"],
            [
                "ldr h15, [{x}]",
                "ldr h16, [{y}]",
                "ldur s10, [{x}, #2]",
                "ldur h11, [{x}, #4]",
                "ldur q0, [{x}, #6]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "movi v4.4s, #0",
                "movi v5.4s, #0",
                "fcvt s15, h15",
                "fcvt s16, h16",
                "add {x}, {x}, #22",
                "tbl v10.16b, {{v10.16b}}, v28.16b",
                "tbl v11.16b, {{v11.16b}}, v28.16b",
                "add {y}, {y}, #34",
                "and v8.16b, v0.16b, v30.16b",
                "ushr v9.16b, v0.16b, #4",
                "fmul s15, s15, s16",
                "cmtst v10.16b, v10.16b, v29.16b",
                "cmtst v11.16b, v11.16b, v29.16b",
                "bic v10.16b, v31.16b, v10.16b",
                "bic v11.16b, v31.16b, v11.16b",
                "sub v8.16b, v8.16b, v10.16b",
                "sub v9.16b, v9.16b, v11.16b",
                "sdot v4.4s, v8.16b, v2.16b",
                "sdot v5.4s, v9.16b, v3.16b",
                "add v4.4s, v4.4s, v5.4s",
                "addv s14, v4.4s",
                "scvtf s24, s14",
                "fmul s24, s15, s24",
                "fadd s21, s21, s24",
            ],
            [
                "movi v14.4s, #0",
                "movi v15.4s, #0",
                "movi v22.4s, #0",
                "movi v23.4s, #0",
            ],
            [
                "scvtf s24, s14",
                "scvtf s26, s22",
                "ldr h16, [{y}]",
                "ldur s10, [{x}, #2]",
                "ldur h11, [{x}, #4]",
                "ldur q0, [{x}, #6]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "movi v4.4s, #0",
                "movi v5.4s, #0",
                "ldr h25, [{y}, #34]",
                "ldur s19, [{x}, #24]",
                "ldur h20, [{x}, #26]",
                "ldur q1, [{x}, #28]",
                "ldur q6, [{y}, #36]",
                "ldur q7, [{y}, #52]",
                "movi v12.4s, #0",
                "movi v13.4s, #0",
                "subs {nb}, {nb}, #1",
                "fmul s24, s15, s24",
                "fmul s26, s23, s26",
                "fcvt s16, h16",
                "tbl v10.16b, {{v10.16b}}, v28.16b",
                "tbl v11.16b, {{v11.16b}}, v28.16b",
                "and v8.16b, v0.16b, v30.16b",
                "ushr v9.16b, v0.16b, #4",
                "fcvt s25, h25",
                "tbl v19.16b, {{v19.16b}}, v28.16b",
                "tbl v20.16b, {{v20.16b}}, v28.16b",
                "add {y}, {y}, #68",
                "and v17.16b, v1.16b, v30.16b",
                "ushr v18.16b, v1.16b, #4",
                "ldr h15, [{x}]",
                "ldr h23, [{x}, #22]",
                "fadd s21, s21, s24",
                "cmtst v10.16b, v10.16b, v29.16b",
                "cmtst v11.16b, v11.16b, v29.16b",
                "cmtst v19.16b, v19.16b, v29.16b",
                "cmtst v20.16b, v20.16b, v29.16b",
                "add {x}, {x}, #44",
                "fcvt s15, h15",
                "fcvt s23, h23",
                "fadd s21, s21, s26",
                "bic v10.16b, v31.16b, v10.16b",
                "bic v11.16b, v31.16b, v11.16b",
                "bic v19.16b, v31.16b, v19.16b",
                "bic v20.16b, v31.16b, v20.16b",
                "fmul s15, s15, s16",
                "fmul s23, s23, s25",
                "sub v8.16b, v8.16b, v10.16b",
                "sub v9.16b, v9.16b, v11.16b",
                "sub v17.16b, v17.16b, v19.16b",
                "sub v18.16b, v18.16b, v20.16b",
                "sdot v4.4s, v8.16b, v2.16b",
                "sdot v5.4s, v9.16b, v3.16b",
                "sdot v12.4s, v17.16b, v6.16b",
                "sdot v13.4s, v18.16b, v7.16b",
                "add v4.4s, v4.4s, v5.4s",
                "add v12.4s, v12.4s, v13.4s",
                "addv s14, v4.4s",
                "addv s22, v12.4s",
                "b.ne 2b",
            ],
            [
                "scvtf s24, s14",
                "scvtf s26, s22",
                "fmul s24, s15, s24",
                "fmul s26, s23, s26",
                "fadd s21, s21, s24",
                "fadd s21, s21, s26",
            ],
            c = in(reg) CONSTS.0.as_ptr(),
        )
    }
}
