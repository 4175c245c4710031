//! Q3_K . Q8_K. Q3_K super-block (110 bytes): hmask [u8; 32] at 0 (bit 4h + s of byte l set:
//! element 128h + 32s + l is not lowered by 4), qs [u8; 64] at 32 (its low two bits at bits
//! 2s.. of byte 32h + l), 12 bytes of packed 6-bit scales (stored +32) at 96, f16 d at 108.
//! Scalar twin: `smolrun_core::quant::q3_k::vec_dot`.
//!
//! One face, ARMv8.0 (it runs on dotprod cores too): an 8-lane `smull` of a sub-block's bytes
//! puts element e in lane e % 8, the twin's lane layout, so the integer lanes are the twin's
//! and the float steps follow in its order: bit for bit the twin on every input. (An `sdot`
//! face keeping those lanes would need the bytes permuted first, the scales folded into the
//! weights and as many instructions as this one; one that regroups the lanes, like Q4_K's,
//! would give up the bits.)

use super::{whole_blocks, Q8_K_BYTES, QK_K};
use core::arch::aarch64::float32x4_t;
use core::arch::asm;

const Q3_K_BYTES: usize = 110;

/// The 16 sub-block scales (stored +32, 0..63) as bytes, in 4 words (the asm widens them to
/// i16 and takes the 32 off): scale i = 4g + j takes its low nibble from byte j + 4 (g & 1)
/// (high nibble for g >= 2) and its top two bits from bits 2g.. of byte 8 + j.
#[inline(always)]
fn scales(block: &[u8]) -> [u32; 4] {
    let word = |i: usize| u32::from_le_bytes([block[i], block[i + 1], block[i + 2], block[i + 3]]);
    let (a0, a1, a2) = (word(96), word(100), word(104));
    let (lo, hi) = (0x0f0f_0f0f, 0x0303_0303);
    [
        (a0 & lo) | ((a2 & hi) << 4),
        (a1 & lo) | (((a2 >> 2) & hi) << 4),
        ((a0 >> 4) & lo) | (((a2 >> 4) & hi) << 4),
        ((a1 >> 4) & lo) | (((a2 >> 6) & hi) << 4),
    ]
}

/// Q3_K . Q8_K with widening multiplies (ARMv8.0), bit for bit the scalar twin. Per run of 32
/// elements (128h + 32s..): the low bits (`ushr`, `and`), minus 4 where the inverted hmask bit
/// 4h + s is set (moved to bit 2 by one shift); each sub-block's 16 products summed by
/// `smull` + `smlal2` into 8 i16 lanes (at most 2 * 4 * 128) and scaled into the 8 i32 lanes
/// by `smlal` by element; then the twin's (d * dy) * lanes added to its 8 f32 lane sums.
/// The order of the lines is the list scheduler's of tools/lowbit-asm.py
/// (`tools/lowbit-asm.py emit q3k neon`).
pub fn vec_dot_q3_k_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, Q3_K_BYTES, act, Q8_K_BYTES);
    // SAFETY (of the transmutes): float32x4_t is four f32s, any bits valid.
    let mut lo: float32x4_t = unsafe { core::mem::transmute([0.0f32; 4]) };
    let mut hi: float32x4_t = unsafe { core::mem::transmute([0.0f32; 4]) };
    for b in 0..nb {
        let block = &w[b * Q3_K_BYTES..(b + 1) * Q3_K_BYTES];
        let sc = scales(block);
        let x = block.as_ptr();
        let y = act[b * Q8_K_BYTES..].as_ptr();
        // SAFETY: the block and its activation block lie inside both slices (b < nb); only
        // base aarch64 NEON instructions; `sc` is 16 bytes.
        unsafe {
            asm!(
                "movi v6.16b, #3",
                "movi v8.16b, #4",
                "ldr q0, [{sc}]",
                "movi v4.8h, #32",
                "ldr q2, [{x}]",
                "ldr q3, [{x}, #16]",
                "ldr q5, [{qs}, #0]",
                "ldr q12, [{qs}, #16]",
                "ldr q13, [{q8}, #0]",
                "ldr q14, [{q8}, #16]",
                "ldr q25, [{q8}, #32]",
                "ldr q26, [{q8}, #48]",
                "uxtl2 v1.8h, v0.16b",
                "mvn v2.16b, v2.16b",
                "mvn v3.16b, v3.16b",
                "and v7.16b, v5.16b, v6.16b",
                "ushr v9.16b, v5.16b, #2",
                "ushr v10.16b, v5.16b, #4",
                "ushr v11.16b, v5.16b, #6",
                "and v17.16b, v12.16b, v6.16b",
                "ushr v24.16b, v12.16b, #2",
                "uxtl v0.8h, v0.8b",
                "sub v1.8h, v1.8h, v4.8h",
                "shl v15.16b, v2.16b, #2",
                "shl v27.16b, v2.16b, #1",
                "shl v18.16b, v3.16b, #2",
                "shl v29.16b, v3.16b, #1",
                "ushr v5.16b, v12.16b, #4",
                "and v9.16b, v9.16b, v6.16b",
                "and v10.16b, v10.16b, v6.16b",
                "and v24.16b, v24.16b, v6.16b",
                "sub v0.8h, v0.8h, v4.8h",
                "and v15.16b, v15.16b, v8.16b",
                "and v27.16b, v27.16b, v8.16b",
                "and v18.16b, v18.16b, v8.16b",
                "and v29.16b, v29.16b, v8.16b",
                "and v5.16b, v5.16b, v6.16b",
                "sub v7.16b, v7.16b, v15.16b",
                "sub v9.16b, v9.16b, v27.16b",
                "ushr v15.16b, v12.16b, #6",
                "sub v17.16b, v17.16b, v18.16b",
                "ldr q27, [{q8}, #112]",
                "sub v24.16b, v24.16b, v29.16b",
                "smull v16.8h, v7.8b, v13.8b",
                "smull v28.8h, v9.8b, v25.8b",
                "smull v19.8h, v17.8b, v14.8b",
                "smull v4.8h, v24.8b, v26.8b",
                "smlal2 v16.8h, v7.16b, v13.16b",
                "ldr q7, [{q8}, #64]",
                "ldr q13, [{q8}, #80]",
                "smlal2 v28.8h, v9.16b, v25.16b",
                "smlal2 v19.8h, v17.16b, v14.16b",
                "smlal2 v4.8h, v24.16b, v26.16b",
                "ushr v9.16b, v2.16b, #1",
                "smull v20.4s, v16.4h, v0.h[0]",
                "smull2 v21.4s, v16.8h, v0.h[0]",
                "and v17.16b, v3.16b, v8.16b",
                "ldr q24, [{qs}, #32]",
                "smull v22.4s, v19.4h, v0.h[1]",
                "smull2 v23.4s, v19.8h, v0.h[1]",
                "and v16.16b, v2.16b, v8.16b",
                "and v9.16b, v9.16b, v8.16b",
                "smlal v20.4s, v28.4h, v0.h[2]",
                "smlal2 v21.4s, v28.8h, v0.h[2]",
                "ldr q19, [{q8}, #96]",
                "sub v5.16b, v5.16b, v17.16b",
                "and v26.16b, v24.16b, v6.16b",
                "ushr v12.16b, v24.16b, #2",
                "smlal v22.4s, v4.4h, v0.h[3]",
                "smlal2 v23.4s, v4.8h, v0.h[3]",
                "ushr v28.16b, v3.16b, #1",
                "sub v10.16b, v10.16b, v16.16b",
                "sub v11.16b, v11.16b, v9.16b",
                "ushr v17.16b, v2.16b, #2",
                "smull v14.8h, v5.8b, v13.8b",
                "ushr v4.16b, v24.16b, #4",
                "ushr v16.16b, v24.16b, #6",
                "and v12.16b, v12.16b, v6.16b",
                "and v28.16b, v28.16b, v8.16b",
                "smull v18.8h, v10.8b, v7.8b",
                "smull v25.8h, v11.8b, v19.8b",
                "and v17.16b, v17.16b, v8.16b",
                "smlal2 v14.8h, v5.16b, v13.16b",
                "and v4.16b, v4.16b, v6.16b",
                "sub v15.16b, v15.16b, v28.16b",
                "smlal2 v18.8h, v10.16b, v7.16b",
                "smlal2 v25.8h, v11.16b, v19.16b",
                "ushr v28.16b, v2.16b, #3",
                "ldr q10, [{qs}, #48]",
                "ldr q7, [{q8}, #128]",
                "sub v26.16b, v26.16b, v17.16b",
                "smlal v22.4s, v14.4h, v0.h[5]",
                "smlal2 v23.4s, v14.8h, v0.h[5]",
                "ldr q19, [{q8}, #160]",
                "smull v29.8h, v15.8b, v27.8b",
                "smlal v20.4s, v18.4h, v0.h[4]",
                "smlal2 v21.4s, v18.8h, v0.h[4]",
                "and v13.16b, v10.16b, v6.16b",
                "ushr v11.16b, v10.16b, #2",
                "and v28.16b, v28.16b, v8.16b",
                "ushr v24.16b, v10.16b, #4",
                "ushr v17.16b, v10.16b, #6",
                "ushr v14.16b, v3.16b, #2",
                "smull v5.8h, v26.8b, v7.8b",
                "ldr q18, [{q8}, #144]",
                "smlal2 v29.8h, v15.16b, v27.16b",
                "smlal v20.4s, v25.4h, v0.h[6]",
                "smlal2 v21.4s, v25.8h, v0.h[6]",
                "and v11.16b, v11.16b, v6.16b",
                "sub v12.16b, v12.16b, v28.16b",
                "and v24.16b, v24.16b, v6.16b",
                "ushr v27.16b, v3.16b, #3",
                "and v14.16b, v14.16b, v8.16b",
                "smlal2 v5.8h, v26.16b, v7.16b",
                "ldr q25, [{q8}, #176]",
                "smlal v22.4s, v29.4h, v0.h[7]",
                "smlal2 v23.4s, v29.8h, v0.h[7]",
                "ldr q28, [{q8}, #240]",
                "smull v15.8h, v12.8b, v19.8b",
                "ldr q26, [{q8}, #192]",
                "ldr q7, [{q8}, #208]",
                "and v27.16b, v27.16b, v8.16b",
                "sub v13.16b, v13.16b, v14.16b",
                "smlal v20.4s, v5.4h, v1.h[0]",
                "smlal2 v21.4s, v5.8h, v1.h[0]",
                "smlal2 v15.8h, v12.16b, v19.16b",
                "ushr v5.16b, v2.16b, #4",
                "sub v11.16b, v11.16b, v27.16b",
                "ushr v12.16b, v2.16b, #5",
                "smull v9.8h, v13.8b, v18.8b",
                "smlal v20.4s, v15.4h, v1.h[2]",
                "smlal2 v21.4s, v15.8h, v1.h[2]",
                "and v5.16b, v5.16b, v8.16b",
                "smull v29.8h, v11.8b, v25.8b",
                "ushr v15.16b, v3.16b, #5",
                "and v12.16b, v12.16b, v8.16b",
                "smlal2 v9.8h, v13.16b, v18.16b",
                "sub v4.16b, v4.16b, v5.16b",
                "ushr v13.16b, v3.16b, #4",
                "smlal2 v29.8h, v11.16b, v25.16b",
                "and v15.16b, v15.16b, v8.16b",
                "sub v16.16b, v16.16b, v12.16b",
                "ldr h11, [{x}, #108]",
                "ldr s25, [{y}]",
                "smlal v22.4s, v9.4h, v1.h[1]",
                "smlal2 v23.4s, v9.8h, v1.h[1]",
                "smull v14.8h, v4.8b, v26.8b",
                "and v13.16b, v13.16b, v8.16b",
                "sub v17.16b, v17.16b, v15.16b",
                "ldr q9, [{q8}, #224]",
                "fcvt s11, h11",
                "smlal v22.4s, v29.4h, v1.h[3]",
                "smlal2 v23.4s, v29.8h, v1.h[3]",
                "smlal2 v14.8h, v4.16b, v26.16b",
                "sub v24.16b, v24.16b, v13.16b",
                "smull v19.8h, v16.8b, v9.8b",
                "smull v27.8h, v17.8b, v28.8b",
                "fmul s11, s11, s25",
                "smlal v20.4s, v14.4h, v1.h[4]",
                "smlal2 v21.4s, v14.8h, v1.h[4]",
                "smull v18.8h, v24.8b, v7.8b",
                "smlal2 v19.8h, v16.16b, v9.16b",
                "smlal2 v27.8h, v17.16b, v28.16b",
                "smlal2 v18.8h, v24.16b, v7.16b",
                "smlal v20.4s, v19.4h, v1.h[6]",
                "smlal2 v21.4s, v19.8h, v1.h[6]",
                "smlal v22.4s, v18.4h, v1.h[5]",
                "smlal2 v23.4s, v18.8h, v1.h[5]",
                "smlal v22.4s, v27.4h, v1.h[7]",
                "smlal2 v23.4s, v27.8h, v1.h[7]",
                "add v20.4s, v20.4s, v22.4s",
                "add v21.4s, v21.4s, v23.4s",
                "scvtf v20.4s, v20.4s",
                "scvtf v21.4s, v21.4s",
                "fmul v20.4s, v20.4s, v11.s[0]",
                "fmul v21.4s, v21.4s, v11.s[0]",
                "fadd {lo:v}.4s, {lo:v}.4s, v20.4s",
                "fadd {hi:v}.4s, {hi:v}.4s, v21.4s",
                x = in(reg) x,
                y = in(reg) y,
                qs = in(reg) x.add(32),
                q8 = in(reg) y.add(4),
                sc = in(reg) sc.as_ptr(),
                lo = inout(vreg) lo,
                hi = inout(vreg) hi,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _,
                out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v14") _,
                out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _,
                out("v20") _, out("v21") _, out("v22") _, out("v23") _, out("v24") _,
                out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _,
                options(nostack, readonly),
            );
        }
    }
    // SAFETY: as above.
    let (lo, hi) = unsafe {
        (
            core::mem::transmute::<float32x4_t, [f32; 4]>(lo),
            core::mem::transmute::<float32x4_t, [f32; 4]>(hi),
        )
    };
    let mut sumf = 0.0f32;
    for s in lo.into_iter().chain(hi) {
        sumf += s;
    }
    sumf
}
