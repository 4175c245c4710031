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
//!
//! The kernel leaves out the scalar's leading `0 +` (its first add is d8 * s0 + d8 * s1,
//! one `faddp`). The two differ only when both products are -0: the scalar's sumi is then
//! +0, the kernel's -0, and so is d * sumi; but sumf starts at +0 and round-to-nearest
//! additions never make it -0, and sumf + (-0) is sumf for every sumf that is not -0, so the
//! result has the same bits.

use super::{whole_blocks, Q8_0_BYTES};
use core::arch::asm;

const Q1_0_ELEMS: usize = 128;
const Q1_0_BYTES: usize = 18;

/// `tbl` indices (bytes 0 and 1, then 2 and 3, each over 8 lanes) and the bit of each lane.
#[repr(align(16))]
struct Consts([u8; 48]);

static CONSTS: Consts = {
    let mut c = [0u8; 48];
    let mut i = 0;
    while i < 32 {
        c[i] = (i / 8) as u8;
        i += 1;
    }
    while i < 48 {
        c[i] = 1 << (i % 8);
        i += 1;
    }
    Consts(c)
};

/// The loop body is the integer part of block i (each block's 4 bit words loaded with
/// `ldr s`, so one pair of `tbl` indices serves all four Q8_0 blocks) interleaved with the
/// float part of block i - 1 (its sums in v14, its 4 activation scales in v15 as f16, its
/// scale in h20): the A53 and A55 issue in order, and the float part is one chain of
/// dependent operations that would otherwise stall them. The order of the lines was chosen
/// by the list scheduler of tools/lowbit-asm.py (every register dependence kept;
/// `tools/lowbit-asm.py emit q1 dot` prints these lines); the first trip's "previous block"
/// is zeros (it adds +0 to sumf, which leaves sumf as it is), and the last block's float
/// part runs after the loop. sumf lives in v21, v16-v18 hold the constants.
macro_rules! q1_0_row {
    ($w:expr, $act:expr, $nb:expr, [$($ext:literal),*], [$($body:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let mut sumf = 0.0f32;
        if $nb > 0 {
            asm!(
                $($ext,)*
                "ld1 {{v16.16b, v17.16b, v18.16b}}, [{c}]",
                "movi v19.16b, #1",
                "movi v14.4s, #0",
                "movi v15.4s, #0",
                "movi v20.4s, #0",
                "2:",
                $($body,)*
                "scvtf v14.4s, v14.4s",
                "fcvtl v15.4s, v15.4h",
                "fmul v14.4s, v14.4s, v15.4s",
                "faddp s15, v14.2s",
                "ext v14.16b, v14.16b, v14.16b, #8",
                "fadd s15, s15, s14",
                "ext v14.16b, v14.16b, v14.16b, #4",
                "fadd s15, s15, s14",
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
                "scvtf v14.4s, v14.4s",
                "fcvtl v15.4s, v15.4h",
                "fcvt s20, h20",
                "ldr s22, [{x}, #2]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "ldr h0, [{y}, #0]",
                "ldr s23, [{x}, #6]",
                "ldur q4, [{y}, #36]",
                "ldur q5, [{y}, #52]",
                "ldr h1, [{y}, #34]",
                "ldr s24, [{x}, #10]",
                "ldur q6, [{y}, #70]",
                "ldur q7, [{y}, #86]",
                "ldr h26, [{y}, #68]",
                "ldr s25, [{x}, #14]",
                "ldur q8, [{y}, #104]",
                "ldur q9, [{y}, #120]",
                "ldr h27, [{y}, #102]",
                "subs {nb}, {nb}, #1",
                "fmul v14.4s, v14.4s, v15.4s",
                "tbl v10.16b, {{v22.16b}}, v16.16b",
                "tbl v11.16b, {{v23.16b}}, v16.16b",
                "zip1 v0.4h, v0.4h, v1.4h",
                "tbl v12.16b, {{v24.16b}}, v16.16b",
                "tbl v13.16b, {{v25.16b}}, v16.16b",
                "add {y}, {y}, #136",
                "tbl v22.16b, {{v22.16b}}, v17.16b",
                "zip1 v26.4h, v26.4h, v27.4h",
                "tbl v23.16b, {{v23.16b}}, v17.16b",
                "faddp s15, v14.2s",
                "tbl v24.16b, {{v24.16b}}, v17.16b",
                "cmtst v10.16b, v10.16b, v18.16b",
                "tbl v25.16b, {{v25.16b}}, v17.16b",
                "cmtst v11.16b, v11.16b, v18.16b",
                "cmtst v12.16b, v12.16b, v18.16b",
                "cmtst v13.16b, v13.16b, v18.16b",
                "ext v14.16b, v14.16b, v14.16b, #8",
                "cmtst v22.16b, v22.16b, v18.16b",
                "cmtst v23.16b, v23.16b, v18.16b",
                "cmtst v24.16b, v24.16b, v18.16b",
                "orn v10.16b, v19.16b, v10.16b",
                "cmtst v25.16b, v25.16b, v18.16b",
                "orn v11.16b, v19.16b, v11.16b",
                "fadd s15, s15, s14",
                "orn v12.16b, v19.16b, v12.16b",
                "orn v13.16b, v19.16b, v13.16b",
                "orn v22.16b, v19.16b, v22.16b",
                "orn v23.16b, v19.16b, v23.16b",
                "ext v14.16b, v14.16b, v14.16b, #4",
                "orn v24.16b, v19.16b, v24.16b",
                "smull v28.8h, v10.8b, v2.8b",
                "orn v25.16b, v19.16b, v25.16b",
                "smull v29.8h, v11.8b, v4.8b",
                "smull v30.8h, v12.8b, v6.8b",
                "smull v31.8h, v13.8b, v8.8b",
                "fadd s15, s15, s14",
                "smlal2 v28.8h, v10.16b, v2.16b",
                "smlal2 v29.8h, v11.16b, v4.16b",
                "smlal2 v30.8h, v12.16b, v6.16b",
                "smlal2 v31.8h, v13.16b, v8.16b",
                "fmul s15, s20, s15",
                "ldr h20, [{x}]",
                "smlal v28.8h, v22.8b, v3.8b",
                "smlal v29.8h, v23.8b, v5.8b",
                "add {x}, {x}, #18",
                "smlal v30.8h, v24.8b, v7.8b",
                "smlal v31.8h, v25.8b, v9.8b",
                "fadd s21, s21, s15",
                "smlal2 v28.8h, v22.16b, v3.16b",
                "smlal2 v29.8h, v23.16b, v5.16b",
                "zip1 v15.2s, v0.2s, v26.2s",
                "smlal2 v30.8h, v24.16b, v7.16b",
                "smlal2 v31.8h, v25.16b, v9.16b",
                "addp v28.8h, v28.8h, v29.8h",
                "addp v30.8h, v30.8h, v31.8h",
                "addp v28.8h, v28.8h, v30.8h",
                "saddlp v14.4s, v28.8h",
                "b.ne 2b",
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
                "scvtf v14.4s, v14.4s",
                "fcvtl v15.4s, v15.4h",
                "fcvt s20, h20",
                "ldr s22, [{x}, #2]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "ldr h0, [{y}, #0]",
                "ldr s23, [{x}, #6]",
                "ldur q4, [{y}, #36]",
                "ldur q5, [{y}, #52]",
                "ldr h1, [{y}, #34]",
                "ldr s24, [{x}, #10]",
                "ldur q6, [{y}, #70]",
                "ldur q7, [{y}, #86]",
                "ldr h26, [{y}, #68]",
                "ldr s25, [{x}, #14]",
                "ldur q8, [{y}, #104]",
                "ldur q9, [{y}, #120]",
                "ldr h27, [{y}, #102]",
                "movi v28.4s, #0",
                "movi v29.4s, #0",
                "movi v30.4s, #0",
                "movi v31.4s, #0",
                "subs {nb}, {nb}, #1",
                "fmul v14.4s, v14.4s, v15.4s",
                "tbl v10.16b, {{v22.16b}}, v16.16b",
                "tbl v11.16b, {{v23.16b}}, v16.16b",
                "zip1 v0.4h, v0.4h, v1.4h",
                "tbl v12.16b, {{v24.16b}}, v16.16b",
                "tbl v13.16b, {{v25.16b}}, v16.16b",
                "add {y}, {y}, #136",
                "zip1 v26.4h, v26.4h, v27.4h",
                "tbl v22.16b, {{v22.16b}}, v17.16b",
                "tbl v23.16b, {{v23.16b}}, v17.16b",
                "faddp s15, v14.2s",
                "tbl v24.16b, {{v24.16b}}, v17.16b",
                "cmtst v10.16b, v10.16b, v18.16b",
                "tbl v25.16b, {{v25.16b}}, v17.16b",
                "cmtst v11.16b, v11.16b, v18.16b",
                "cmtst v12.16b, v12.16b, v18.16b",
                "cmtst v13.16b, v13.16b, v18.16b",
                "ext v14.16b, v14.16b, v14.16b, #8",
                "cmtst v22.16b, v22.16b, v18.16b",
                "cmtst v23.16b, v23.16b, v18.16b",
                "cmtst v24.16b, v24.16b, v18.16b",
                "orn v10.16b, v19.16b, v10.16b",
                "cmtst v25.16b, v25.16b, v18.16b",
                "orn v11.16b, v19.16b, v11.16b",
                "fadd s15, s15, s14",
                "orn v12.16b, v19.16b, v12.16b",
                "orn v13.16b, v19.16b, v13.16b",
                "orn v22.16b, v19.16b, v22.16b",
                "orn v23.16b, v19.16b, v23.16b",
                "ext v14.16b, v14.16b, v14.16b, #4",
                "orn v24.16b, v19.16b, v24.16b",
                "sdot v28.4s, v10.16b, v2.16b",
                "orn v25.16b, v19.16b, v25.16b",
                "sdot v29.4s, v11.16b, v4.16b",
                "sdot v30.4s, v12.16b, v6.16b",
                "sdot v31.4s, v13.16b, v8.16b",
                "fadd s15, s15, s14",
                "sdot v28.4s, v22.16b, v3.16b",
                "sdot v29.4s, v23.16b, v5.16b",
                "sdot v30.4s, v24.16b, v7.16b",
                "sdot v31.4s, v25.16b, v9.16b",
                "fmul s15, s20, s15",
                "ldr h20, [{x}]",
                "addp v28.4s, v28.4s, v29.4s",
                "add {x}, {x}, #18",
                "addp v30.4s, v30.4s, v31.4s",
                "fadd s21, s21, s15",
                "zip1 v15.2s, v0.2s, v26.2s",
                "addp v14.4s, v28.4s, v30.4s",
                "b.ne 2b",
            ]
        )
    }
}
