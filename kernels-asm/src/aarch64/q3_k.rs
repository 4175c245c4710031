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

/// The 16 sub-block scales minus 32, as i16 (the 12 packed bytes decoded four at a time):
/// scale i = 4g + j takes its low nibble from byte j + 4 (g & 1) (high nibble for g >= 2) and
/// its top two bits from bits 2g.. of byte 8 + j.
#[inline(always)]
fn scales(block: &[u8]) -> [i16; 16] {
    let word = |i: usize| u32::from_le_bytes([block[i], block[i + 1], block[i + 2], block[i + 3]]);
    let (a0, a1, a2) = (word(96), word(100), word(104));
    let (lo, hi) = (0x0f0f_0f0f, 0x0303_0303);
    let words = [
        (a0 & lo) | ((a2 & hi) << 4),
        (a1 & lo) | (((a2 >> 2) & hi) << 4),
        ((a0 >> 4) & lo) | (((a2 >> 4) & hi) << 4),
        ((a1 >> 4) & lo) | (((a2 >> 6) & hi) << 4),
    ];
    let mut out = [0i16; 16];
    for (g, word) in words.iter().enumerate() {
        for (j, b) in word.to_le_bytes().iter().enumerate() {
            out[4 * g + j] = *b as i16 - 32;
        }
    }
    out
}

/// Q3_K . Q8_K with widening multiplies (ARMv8.0), bit for bit the scalar twin. Per run of 32
/// elements (128h + 32s..): the low bits (`ushr`, `and`), minus 4 where the inverted hmask bit
/// 4h + s is set (moved to bit 2 by one shift); each sub-block's 16 products summed by
/// `smull` + `smlal2` into 8 i16 lanes (at most 2 * 4 * 128) and scaled into the 8 i32 lanes
/// by `smlal` by element; then the twin's (d * dy) * lanes added to its 8 f32 lane sums.
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
        // base aarch64 NEON instructions; `sc` is 32 bytes.
        unsafe {
            asm!(
                "movi v6.16b, #3",
                "movi v8.16b, #4",
                "ldp q0, q1, [{sc}]",
                "ldp q2, q3, [{x}]",
                "movi v20.4s, #0",
                "movi v21.4s, #0",
                "movi v22.4s, #0",
                "movi v23.4s, #0",
                "mvn v2.16b, v2.16b",
                "mvn v3.16b, v3.16b",
                "ldp q4, q5, [{qs}, #0]",
                "ldp q14, q15, [{q8}, #0]",
                "and v10.16b, v4.16b, v6.16b",
                "and v11.16b, v5.16b, v6.16b",
                "shl v12.16b, v2.16b, #2",
                "and v12.16b, v12.16b, v8.16b",
                "shl v13.16b, v3.16b, #2",
                "and v13.16b, v13.16b, v8.16b",
                "sub v10.16b, v10.16b, v12.16b",
                "sub v11.16b, v11.16b, v13.16b",
                "smull v16.8h, v10.8b, v14.8b",
                "smull v17.8h, v11.8b, v15.8b",
                "smlal2 v16.8h, v10.16b, v14.16b",
                "smlal2 v17.8h, v11.16b, v15.16b",
                "smlal v20.4s, v16.4h, v0.h[0]",
                "smlal2 v21.4s, v16.8h, v0.h[0]",
                "smlal v22.4s, v17.4h, v0.h[1]",
                "smlal2 v23.4s, v17.8h, v0.h[1]",
                "ldp q28, q29, [{q8}, #32]",
                "ushr v24.16b, v4.16b, #2",
                "and v24.16b, v24.16b, v6.16b",
                "ushr v25.16b, v5.16b, #2",
                "and v25.16b, v25.16b, v6.16b",
                "shl v26.16b, v2.16b, #1",
                "and v26.16b, v26.16b, v8.16b",
                "shl v27.16b, v3.16b, #1",
                "and v27.16b, v27.16b, v8.16b",
                "sub v24.16b, v24.16b, v26.16b",
                "sub v25.16b, v25.16b, v27.16b",
                "smull v30.8h, v24.8b, v28.8b",
                "smull v31.8h, v25.8b, v29.8b",
                "smlal2 v30.8h, v24.16b, v28.16b",
                "smlal2 v31.8h, v25.16b, v29.16b",
                "smlal v20.4s, v30.4h, v0.h[2]",
                "smlal2 v21.4s, v30.8h, v0.h[2]",
                "smlal v22.4s, v31.4h, v0.h[3]",
                "smlal2 v23.4s, v31.8h, v0.h[3]",
                "ldp q14, q15, [{q8}, #64]",
                "ushr v10.16b, v4.16b, #4",
                "and v10.16b, v10.16b, v6.16b",
                "ushr v11.16b, v5.16b, #4",
                "and v11.16b, v11.16b, v6.16b",
                "and v12.16b, v2.16b, v8.16b",
                "and v13.16b, v3.16b, v8.16b",
                "sub v10.16b, v10.16b, v12.16b",
                "sub v11.16b, v11.16b, v13.16b",
                "smull v16.8h, v10.8b, v14.8b",
                "smull v17.8h, v11.8b, v15.8b",
                "smlal2 v16.8h, v10.16b, v14.16b",
                "smlal2 v17.8h, v11.16b, v15.16b",
                "smlal v20.4s, v16.4h, v0.h[4]",
                "smlal2 v21.4s, v16.8h, v0.h[4]",
                "smlal v22.4s, v17.4h, v0.h[5]",
                "smlal2 v23.4s, v17.8h, v0.h[5]",
                "ldp q28, q29, [{q8}, #96]",
                "ushr v24.16b, v4.16b, #6",
                "and v24.16b, v24.16b, v6.16b",
                "ushr v25.16b, v5.16b, #6",
                "and v25.16b, v25.16b, v6.16b",
                "ushr v26.16b, v2.16b, #1",
                "and v26.16b, v26.16b, v8.16b",
                "ushr v27.16b, v3.16b, #1",
                "and v27.16b, v27.16b, v8.16b",
                "sub v24.16b, v24.16b, v26.16b",
                "sub v25.16b, v25.16b, v27.16b",
                "smull v30.8h, v24.8b, v28.8b",
                "smull v31.8h, v25.8b, v29.8b",
                "smlal2 v30.8h, v24.16b, v28.16b",
                "smlal2 v31.8h, v25.16b, v29.16b",
                "smlal v20.4s, v30.4h, v0.h[6]",
                "smlal2 v21.4s, v30.8h, v0.h[6]",
                "smlal v22.4s, v31.4h, v0.h[7]",
                "smlal2 v23.4s, v31.8h, v0.h[7]",
                "ldp q4, q5, [{qs}, #32]",
                "ldp q14, q15, [{q8}, #128]",
                "and v10.16b, v4.16b, v6.16b",
                "and v11.16b, v5.16b, v6.16b",
                "ushr v12.16b, v2.16b, #2",
                "and v12.16b, v12.16b, v8.16b",
                "ushr v13.16b, v3.16b, #2",
                "and v13.16b, v13.16b, v8.16b",
                "sub v10.16b, v10.16b, v12.16b",
                "sub v11.16b, v11.16b, v13.16b",
                "smull v16.8h, v10.8b, v14.8b",
                "smull v17.8h, v11.8b, v15.8b",
                "smlal2 v16.8h, v10.16b, v14.16b",
                "smlal2 v17.8h, v11.16b, v15.16b",
                "smlal v20.4s, v16.4h, v1.h[0]",
                "smlal2 v21.4s, v16.8h, v1.h[0]",
                "smlal v22.4s, v17.4h, v1.h[1]",
                "smlal2 v23.4s, v17.8h, v1.h[1]",
                "ldp q28, q29, [{q8}, #160]",
                "ushr v24.16b, v4.16b, #2",
                "and v24.16b, v24.16b, v6.16b",
                "ushr v25.16b, v5.16b, #2",
                "and v25.16b, v25.16b, v6.16b",
                "ushr v26.16b, v2.16b, #3",
                "and v26.16b, v26.16b, v8.16b",
                "ushr v27.16b, v3.16b, #3",
                "and v27.16b, v27.16b, v8.16b",
                "sub v24.16b, v24.16b, v26.16b",
                "sub v25.16b, v25.16b, v27.16b",
                "smull v30.8h, v24.8b, v28.8b",
                "smull v31.8h, v25.8b, v29.8b",
                "smlal2 v30.8h, v24.16b, v28.16b",
                "smlal2 v31.8h, v25.16b, v29.16b",
                "smlal v20.4s, v30.4h, v1.h[2]",
                "smlal2 v21.4s, v30.8h, v1.h[2]",
                "smlal v22.4s, v31.4h, v1.h[3]",
                "smlal2 v23.4s, v31.8h, v1.h[3]",
                "ldp q14, q15, [{q8}, #192]",
                "ushr v10.16b, v4.16b, #4",
                "and v10.16b, v10.16b, v6.16b",
                "ushr v11.16b, v5.16b, #4",
                "and v11.16b, v11.16b, v6.16b",
                "ushr v12.16b, v2.16b, #4",
                "and v12.16b, v12.16b, v8.16b",
                "ushr v13.16b, v3.16b, #4",
                "and v13.16b, v13.16b, v8.16b",
                "sub v10.16b, v10.16b, v12.16b",
                "sub v11.16b, v11.16b, v13.16b",
                "smull v16.8h, v10.8b, v14.8b",
                "smull v17.8h, v11.8b, v15.8b",
                "smlal2 v16.8h, v10.16b, v14.16b",
                "smlal2 v17.8h, v11.16b, v15.16b",
                "smlal v20.4s, v16.4h, v1.h[4]",
                "smlal2 v21.4s, v16.8h, v1.h[4]",
                "smlal v22.4s, v17.4h, v1.h[5]",
                "smlal2 v23.4s, v17.8h, v1.h[5]",
                "ldp q28, q29, [{q8}, #224]",
                "ushr v24.16b, v4.16b, #6",
                "and v24.16b, v24.16b, v6.16b",
                "ushr v25.16b, v5.16b, #6",
                "and v25.16b, v25.16b, v6.16b",
                "ushr v26.16b, v2.16b, #5",
                "and v26.16b, v26.16b, v8.16b",
                "ushr v27.16b, v3.16b, #5",
                "and v27.16b, v27.16b, v8.16b",
                "sub v24.16b, v24.16b, v26.16b",
                "sub v25.16b, v25.16b, v27.16b",
                "smull v30.8h, v24.8b, v28.8b",
                "smull v31.8h, v25.8b, v29.8b",
                "smlal2 v30.8h, v24.16b, v28.16b",
                "smlal2 v31.8h, v25.16b, v29.16b",
                "smlal v20.4s, v30.4h, v1.h[6]",
                "smlal2 v21.4s, v30.8h, v1.h[6]",
                "smlal v22.4s, v31.4h, v1.h[7]",
                "smlal2 v23.4s, v31.8h, v1.h[7]",
                "ldr h24, [{x}, #108]",
                "ldr s25, [{y}]",
                "add v20.4s, v20.4s, v22.4s",
                "add v21.4s, v21.4s, v23.4s",
                "fcvt s24, h24",
                "scvtf v20.4s, v20.4s",
                "scvtf v21.4s, v21.4s",
                "fmul s24, s24, s25",
                "fmul v20.4s, v20.4s, v24.s[0]",
                "fmul v21.4s, v21.4s, v24.s[0]",
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
                out("v5") _, out("v6") _, out("v8") _, out("v10") _, out("v11") _,
                out("v12") _, out("v13") _, out("v14") _, out("v15") _, out("v16") _,
                out("v17") _, out("v20") _, out("v21") _, out("v22") _, out("v23") _,
                out("v24") _, out("v25") _, out("v26") _, out("v27") _, out("v28") _,
                out("v29") _, out("v30") _, out("v31") _,
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
