//! Q4_K . Q8_K. Q4_K super-block (144 bytes): f16 d at 0, f16 dmin at 2, 12 bytes of packed
//! 6-bit scales and mins at 4, 128 nibble bytes at 16 (bytes 32c..32c+32 hold sub-block 2c in
//! their low nibbles and 2c + 1 in their high nibbles). Q8_K (292 bytes): f32 d at 0, 256
//! signed bytes at 4, 16 i16 sums of 16 quants at 260.
//! Scalar twin: `smolrun_core::quant::q4_k::vec_dot`.

use super::{whole_blocks, Q8_K_BYTES, QK_K};
use core::arch::aarch64::float32x4_t;
use core::arch::asm;

const Q4_K_BYTES: usize = 144;

/// The 6-bit scales (bytes 0..8) and mins (8..16) of the 8 sub-blocks (ggml's
/// `get_scale_min_k4`), unpacked four at a time in 32-bit words: scale j < 4 is the low 6 bits
/// of byte j, min j < 4 those of byte j + 4; scale and min j + 4 take their low 4 bits from
/// byte j + 8 (low and high nibble) and their top 2 bits from the top of bytes j and j + 4.
#[inline(always)]
pub(super) fn scales_and_mins(block: &[u8]) -> [u32; 4] {
    let word = |i: usize| u32::from_le_bytes([block[i], block[i + 1], block[i + 2], block[i + 3]]);
    let (u0, u1, u2) = (word(4), word(8), word(12));
    [
        u0 & 0x3f3f_3f3f,
        (u2 & 0x0f0f_0f0f) | ((u0 >> 2) & 0x3030_3030),
        u1 & 0x3f3f_3f3f,
        ((u2 >> 4) & 0x0f0f_0f0f) | ((u1 >> 2) & 0x3030_3030),
    ]
}

/// One asm block per super-block, straight-line (no trip over the 4 chunks of 64 elements):
/// chunk c's 32 nibble bytes are unpacked to sub-block 2c (low nibbles) and 2c + 1 (high),
/// multiplied with the activation bytes, scaled by the sub-block scales and added to the
/// integer lanes (v12 and, ARMv8.0, v13); chunks alternate between two register sets and two
/// pairs of accumulators so that the in-order A53 and A55 overlap one chunk's loads and
/// multiplies with the next one's. Then the mins through the activation's 16-element sums,
/// and the floats in the scalar twin's order: `lo`/`hi` += (d * dy) * (integer lanes), and
/// dmin * dy * (integer min sum) out in s4, which Rust subtracts from sumf (the twin's one
/// `fsub`). The order of the lines is the list scheduler's of tools/lowbit-asm.py
/// (`tools/lowbit-asm.py emit q4k neon|dot`).
macro_rules! q4_k_row {
    ($w:expr, $act:expr, $nb:expr, [$($ext:literal),*], [$($body:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let mut sumf = 0.0f32;
        // SAFETY (of the transmutes): float32x4_t is four f32s, any bits valid.
        let mut lo: float32x4_t = core::mem::transmute([0.0f32; 4]);
        let mut hi: float32x4_t = core::mem::transmute([0.0f32; 4]);
        for b in 0..$nb {
            let x = w.as_ptr().add(b * Q4_K_BYTES);
            let y = act.as_ptr().add(b * Q8_K_BYTES);
            let scales = scales_and_mins(&w[b * Q4_K_BYTES..(b + 1) * Q4_K_BYTES]);
            let mins: f32;
            asm!(
                $($ext,)*
                $($body,)*
                x = in(reg) x,
                y = in(reg) y,
                qs = in(reg) x.add(16),
                q8 = in(reg) y.add(4),
                sc = in(reg) scales.as_ptr(),
                lo = inout(vreg) lo,
                hi = inout(vreg) hi,
                out("v4") mins,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v5") _,
                out("v6") _, out("v7") _, out("v8") _, out("v9") _, out("v10") _,
                out("v11") _, out("v12") _, out("v13") _, out("v14") _, out("v15") _,
                out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
                out("v21") _, out("v24") _, out("v25") _, out("v26") _, out("v27") _,
                out("v28") _, out("v29") _, out("v30") _, out("v31") _,
                options(nostack, readonly),
            );
            sumf -= mins;
        }
        let lo: [f32; 4] = core::mem::transmute(lo);
        let hi: [f32; 4] = core::mem::transmute(hi);
        (sumf, lo, hi)
    }};
}

/// Q4_K . Q8_K with widening multiplies (ARMv8.0). Bit-identical to the scalar twin: `smull`
/// of 8 bytes puts element e of a sub-block in lane e % 8, ggml's scalar lane layout, and each
/// i16 lane sums 4 products of at most 15 * 128.
pub fn vec_dot_q4_k_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, Q4_K_BYTES, act, Q8_K_BYTES);
    // SAFETY: super-blocks 0..nb lie inside both slices; only base aarch64 NEON instructions.
    let (mut sumf, lo, hi) = unsafe {
        q4_k_row!(
            w,
            act,
            nb,
            [],
            [
                "movi v14.16b, #0x0f",
                "ldr d15, [{sc}]",
                "ldr q0, [{qs}, #0]",
                "ldr q1, [{qs}, #16]",
                "ldr q4, [{q8}, #0]",
                "ldr q5, [{q8}, #16]",
                "ldr q6, [{q8}, #32]",
                "ldr q7, [{q8}, #48]",
                "ldr q16, [{qs}, #32]",
                "ldr q17, [{qs}, #48]",
                "ldr q24, [{q8}, #64]",
                "ldr q25, [{q8}, #80]",
                "ldr q26, [{q8}, #96]",
                "ldr q27, [{q8}, #112]",
                "uxtl v15.8h, v15.8b",
                "and v2.16b, v0.16b, v14.16b",
                "and v3.16b, v1.16b, v14.16b",
                "and v18.16b, v16.16b, v14.16b",
                "and v19.16b, v17.16b, v14.16b",
                "ushr v0.16b, v0.16b, #4",
                "ushr v1.16b, v1.16b, #4",
                "ushr v16.16b, v16.16b, #4",
                "ushr v17.16b, v17.16b, #4",
                "smull v8.8h, v2.8b, v4.8b",
                "smull2 v9.8h, v2.16b, v4.16b",
                "smull v28.8h, v18.8b, v24.8b",
                "smull2 v29.8h, v18.16b, v24.16b",
                "smull v10.8h, v0.8b, v6.8b",
                "smull2 v11.8h, v0.16b, v6.16b",
                "ldr q4, [{q8}, #128]",
                "smull v30.8h, v16.8b, v26.8b",
                "smull2 v31.8h, v16.16b, v26.16b",
                "ldr q24, [{q8}, #192]",
                "smlal v8.8h, v3.8b, v5.8b",
                "smlal2 v9.8h, v3.16b, v5.16b",
                "ldr q0, [{qs}, #64]",
                "ldr q6, [{q8}, #160]",
                "smlal v28.8h, v19.8b, v25.8b",
                "smlal2 v29.8h, v19.16b, v25.16b",
                "smlal v10.8h, v1.8b, v7.8b",
                "ldr q16, [{qs}, #96]",
                "ldr q26, [{q8}, #224]",
                "smlal2 v11.8h, v1.16b, v7.16b",
                "smlal v30.8h, v17.8b, v27.8b",
                "ldr q5, [{q8}, #144]",
                "smlal2 v31.8h, v17.16b, v27.16b",
                "add v8.8h, v8.8h, v9.8h",
                "and v2.16b, v0.16b, v14.16b",
                "ldr q25, [{q8}, #208]",
                "add v28.8h, v28.8h, v29.8h",
                "ldr q1, [{qs}, #80]",
                "ldr q7, [{q8}, #176]",
                "and v18.16b, v16.16b, v14.16b",
                "ldr q17, [{qs}, #112]",
                "ldr q27, [{q8}, #240]",
                "add v10.8h, v10.8h, v11.8h",
                "ushr v0.16b, v0.16b, #4",
                "add v30.8h, v30.8h, v31.8h",
                "smull v12.4s, v8.4h, v15.h[0]",
                "smull2 v13.4s, v8.8h, v15.h[0]",
                "smull2 v9.8h, v2.16b, v4.16b",
                "ushr v16.16b, v16.16b, #4",
                "smull v20.4s, v28.4h, v15.h[2]",
                "smull2 v21.4s, v28.8h, v15.h[2]",
                "and v3.16b, v1.16b, v14.16b",
                "and v19.16b, v17.16b, v14.16b",
                "smull2 v29.8h, v18.16b, v24.16b",
                "smull v8.8h, v2.8b, v4.8b",
                "smull2 v11.8h, v0.16b, v6.16b",
                "smlal v12.4s, v10.4h, v15.h[1]",
                "smlal2 v13.4s, v10.8h, v15.h[1]",
                "smull v28.8h, v18.8b, v24.8b",
                "ushr v1.16b, v1.16b, #4",
                "ushr v17.16b, v17.16b, #4",
                "smull2 v31.8h, v16.16b, v26.16b",
                "smlal v20.4s, v30.4h, v15.h[3]",
                "smlal2 v21.4s, v30.8h, v15.h[3]",
                "ldr q4, [{q8}, #256]",
                "ldr h2, [{x}]",
                "smlal2 v9.8h, v3.16b, v5.16b",
                "smull v10.8h, v0.8b, v6.8b",
                "smlal2 v29.8h, v19.16b, v25.16b",
                "smlal v8.8h, v3.8b, v5.8b",
                "smlal v28.8h, v19.8b, v25.8b",
                "smlal2 v11.8h, v1.16b, v7.16b",
                "smull v30.8h, v16.8b, v26.8b",
                "smlal2 v31.8h, v17.16b, v27.16b",
                "ldr d6, [{sc}, #8]",
                "saddlp v4.4s, v4.8h",
                "ldr s0, [{y}]",
                "fcvt s2, h2",
                "ldr q5, [{q8}, #272]",
                "smlal v10.8h, v1.8b, v7.8b",
                "add v8.8h, v8.8h, v9.8h",
                "add v28.8h, v28.8h, v29.8h",
                "smlal v30.8h, v17.8b, v27.8b",
                "uxtl v6.8h, v6.8b",
                "ldr h1, [{x}, #2]",
                "saddlp v5.4s, v5.8h",
                "fmul s2, s2, s0",
                "add v10.8h, v10.8h, v11.8h",
                "smlal v12.4s, v8.4h, v15.h[4]",
                "smlal2 v13.4s, v8.8h, v15.h[4]",
                "smlal v20.4s, v28.4h, v15.h[6]",
                "smlal2 v21.4s, v28.8h, v15.h[6]",
                "add v30.8h, v30.8h, v31.8h",
                "uxtl v7.4s, v6.4h",
                "fcvt s1, h1",
                "smlal v12.4s, v10.4h, v15.h[5]",
                "smlal2 v13.4s, v10.8h, v15.h[5]",
                "uxtl2 v6.4s, v6.8h",
                "smlal v20.4s, v30.4h, v15.h[7]",
                "smlal2 v21.4s, v30.8h, v15.h[7]",
                "mul v4.4s, v4.4s, v7.4s",
                "fmul s1, s1, s0",
                "add v12.4s, v12.4s, v20.4s",
                "add v13.4s, v13.4s, v21.4s",
                "mla v4.4s, v5.4s, v6.4s",
                "scvtf v12.4s, v12.4s",
                "scvtf v13.4s, v13.4s",
                "addv s5, v4.4s",
                "fmul v12.4s, v12.4s, v2.s[0]",
                "fmul v13.4s, v13.4s, v2.s[0]",
                "scvtf s5, s5",
                "fadd {lo:v}.4s, {lo:v}.4s, v12.4s",
                "fadd {hi:v}.4s, {hi:v}.4s, v13.4s",
                "fmul s4, s1, s5",
            ]
        )
    };
    for s in lo.into_iter().chain(hi) {
        sumf += s;
    }
    sumf
}

/// Q4_K . Q8_K with `sdot` (ARMv8.2 dotprod). Integer sums exact; the f32 lane sums follow
/// `sdot`'s lanes (4 neighbouring elements each), so the result differs from the scalar twin
/// by summation-order rounding only (bound in the module docs of `aarch64`).
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_q4_k_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, Q4_K_BYTES, act, Q8_K_BYTES);
    // SAFETY: super-blocks 0..nb lie inside both slices; the caller vouches for dotprod.
    let (mut sumf, lo, _) = unsafe {
        q4_k_row!(
            w,
            act,
            nb,
            [".arch_extension dotprod"],
            [
                "movi v13.16b, #0x0f",
                "ldr d14, [{sc}]",
                "ldr q0, [{qs}, #0]",
                "ldr q1, [{qs}, #16]",
                "ldr q4, [{q8}, #0]",
                "ldr q5, [{q8}, #16]",
                "ldr q6, [{q8}, #32]",
                "ldr q7, [{q8}, #48]",
                "movi v8.4s, #0",
                "movi v10.4s, #0",
                "ldr q16, [{qs}, #32]",
                "ldr q17, [{qs}, #48]",
                "ldr q24, [{q8}, #64]",
                "ldr q25, [{q8}, #80]",
                "ldr q26, [{q8}, #96]",
                "ldr q27, [{q8}, #112]",
                "movi v28.4s, #0",
                "movi v30.4s, #0",
                "uxtl v14.8h, v14.8b",
                "and v2.16b, v0.16b, v13.16b",
                "and v3.16b, v1.16b, v13.16b",
                "and v18.16b, v16.16b, v13.16b",
                "and v19.16b, v17.16b, v13.16b",
                "ushr v0.16b, v0.16b, #4",
                "ushr v1.16b, v1.16b, #4",
                "ushr v16.16b, v16.16b, #4",
                "uxtl2 v15.4s, v14.8h",
                "ushr v17.16b, v17.16b, #4",
                "sdot v8.4s, v2.16b, v4.16b",
                "sdot v28.4s, v18.16b, v24.16b",
                "uxtl v14.4s, v14.4h",
                "sdot v10.4s, v0.16b, v6.16b",
                "ldr q4, [{q8}, #128]",
                "sdot v30.4s, v16.16b, v26.16b",
                "ldr q24, [{q8}, #192]",
                "ldr q0, [{qs}, #64]",
                "ldr q6, [{q8}, #160]",
                "sdot v8.4s, v3.16b, v5.16b",
                "sdot v28.4s, v19.16b, v25.16b",
                "ldr q16, [{qs}, #96]",
                "ldr q26, [{q8}, #224]",
                "sdot v10.4s, v1.16b, v7.16b",
                "sdot v30.4s, v17.16b, v27.16b",
                "ldr q5, [{q8}, #144]",
                "and v2.16b, v0.16b, v13.16b",
                "ldr q25, [{q8}, #208]",
                "mul v12.4s, v8.4s, v14.s[0]",
                "ldr q1, [{qs}, #80]",
                "ldr q7, [{q8}, #176]",
                "mul v20.4s, v28.4s, v14.s[2]",
                "ldr q17, [{qs}, #112]",
                "ldr q27, [{q8}, #240]",
                "and v18.16b, v16.16b, v13.16b",
                "ushr v0.16b, v0.16b, #4",
                "movi v8.4s, #0",
                "movi v28.4s, #0",
                "mla v12.4s, v10.4s, v14.s[1]",
                "and v3.16b, v1.16b, v13.16b",
                "ushr v16.16b, v16.16b, #4",
                "mla v20.4s, v30.4s, v14.s[3]",
                "and v19.16b, v17.16b, v13.16b",
                "sdot v8.4s, v2.16b, v4.16b",
                "movi v10.4s, #0",
                "sdot v28.4s, v18.16b, v24.16b",
                "ushr v1.16b, v1.16b, #4",
                "movi v30.4s, #0",
                "ushr v17.16b, v17.16b, #4",
                "ldr q4, [{q8}, #256]",
                "ldr h2, [{x}]",
                "sdot v10.4s, v0.16b, v6.16b",
                "sdot v8.4s, v3.16b, v5.16b",
                "sdot v30.4s, v16.16b, v26.16b",
                "sdot v28.4s, v19.16b, v25.16b",
                "ldr d6, [{sc}, #8]",
                "ldr s0, [{y}]",
                "ldr q5, [{q8}, #272]",
                "saddlp v4.4s, v4.8h",
                "fcvt s2, h2",
                "sdot v10.4s, v1.16b, v7.16b",
                "mla v12.4s, v8.4s, v15.s[0]",
                "sdot v30.4s, v17.16b, v27.16b",
                "mla v20.4s, v28.4s, v15.s[2]",
                "uxtl v6.8h, v6.8b",
                "saddlp v5.4s, v5.8h",
                "ldr h1, [{x}, #2]",
                "fmul s2, s2, s0",
                "mla v12.4s, v10.4s, v15.s[1]",
                "mla v20.4s, v30.4s, v15.s[3]",
                "uxtl v7.4s, v6.4h",
                "fcvt s1, h1",
                "uxtl2 v6.4s, v6.8h",
                "add v12.4s, v12.4s, v20.4s",
                "mul v4.4s, v4.4s, v7.4s",
                "fmul s1, s1, s0",
                "scvtf v12.4s, v12.4s",
                "mla v4.4s, v5.4s, v6.4s",
                "fmul v12.4s, v12.4s, v2.s[0]",
                "addv s5, v4.4s",
                "fadd {lo:v}.4s, {lo:v}.4s, v12.4s",
                "scvtf s5, s5",
                "fmul s4, s1, s5",
                "// {hi:v} stays zero: sdot leaves 4 integer lanes, not 8",
            ]
        )
    };
    for s in lo {
        sumf += s;
    }
    sumf
}
