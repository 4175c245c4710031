//! Q5_K . Q8_K. Q5_K super-block (176 bytes): f16 d at 0, f16 dmin at 2, 12 bytes of packed
//! 6-bit scales and mins at 4 (Q4_K's), qh [u8; 32] at 16, 128 nibble bytes at 48 (bytes
//! 32c..32c+32 hold sub-block 2c in their low nibbles and 2c + 1 in their high nibbles; bit 2c,
//! resp. 2c + 1, of qh[l] adds 16). Scalar twin: `smolrun_core::quant::q5_k::vec_dot`.
//!
//! One face, ARMv8.0 (it runs on dotprod cores too), bit for bit the twin: Q4_K's `_neon`
//! kernel with the fifth bits merged in (an 8-lane `smull` puts element e in lane e % 8, the
//! twin's lanes; each i16 lane sums 4 products of at most 31 * 128).

use super::q4_k::scales_and_mins;
use super::{whole_blocks, Q8_K_BYTES, QK_K};
use core::arch::aarch64::float32x4_t;
use core::arch::asm;

const Q5_K_BYTES: usize = 176;

/// Q5_K . Q8_K with widening multiplies (ARMv8.0), bit for bit the scalar twin: per chunk of
/// 64 elements the nibbles (`and`, `ushr`) with their fifth bits (`shl`/`ushr`, `and`, `orr`),
/// 4 products per i16 lane, scaled into 8 i32 lanes by `smlal` by element; the mins through
/// the activation's 16-element sums; then the twin's floats in its order: `lo`/`hi` +=
/// (d * dy) * lanes, and dmin * dy * (min sum) out in s4, which Rust subtracts from sumf.
/// The order of the lines is the list scheduler's of tools/lowbit-asm.py
/// (`tools/lowbit-asm.py emit q5k neon`).
pub fn vec_dot_q5_k_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, Q5_K_BYTES, act, Q8_K_BYTES);
    // SAFETY (of the transmutes): float32x4_t is four f32s, any bits valid.
    let mut lo: float32x4_t = unsafe { core::mem::transmute([0.0f32; 4]) };
    let mut hi: float32x4_t = unsafe { core::mem::transmute([0.0f32; 4]) };
    let mut sumf = 0.0f32;
    for b in 0..nb {
        let block = &w[b * Q5_K_BYTES..(b + 1) * Q5_K_BYTES];
        let sc = scales_and_mins(block);
        let x = block.as_ptr();
        let y = act[b * Q8_K_BYTES..].as_ptr();
        let mins: f32;
        // SAFETY: the block and its activation block lie inside both slices (b < nb); only
        // base aarch64 NEON instructions; `sc` is 16 bytes.
        unsafe {
            asm!(
                "movi v14.16b, #0x0f",
                "movi v13.16b, #0x10",
                "ldr d15, [{sc}]",
                "ldr q0, [{x}, #16]",
                "ldr q1, [{x}, #32]",
                "ldr q2, [{qs}, #0]",
                "ldr q3, [{qs}, #16]",
                "ldr q5, [{q8}, #0]",
                "ldr q6, [{q8}, #16]",
                "ldr q7, [{q8}, #32]",
                "ldr q12, [{q8}, #48]",
                "uxtl v15.8h, v15.8b",
                "shl v8.16b, v0.16b, #4",
                "shl v9.16b, v0.16b, #3",
                "shl v10.16b, v0.16b, #2",
                "shl v11.16b, v0.16b, #1",
                "shl v26.16b, v1.16b, #4",
                "shl v29.16b, v1.16b, #3",
                "and v24.16b, v2.16b, v14.16b",
                "ushr v27.16b, v2.16b, #4",
                "and v25.16b, v3.16b, v14.16b",
                "ushr v28.16b, v3.16b, #4",
                "ushr v2.16b, v0.16b, #1",
                "ushr v3.16b, v0.16b, #3",
                "bit v24.16b, v8.16b, v13.16b",
                "bit v27.16b, v9.16b, v13.16b",
                "bit v25.16b, v26.16b, v13.16b",
                "bit v28.16b, v29.16b, v13.16b",
                "ushr v9.16b, v0.16b, #2",
                "smull v8.8h, v24.8b, v5.8b",
                "smull2 v26.8h, v24.16b, v5.16b",
                "smull v29.8h, v27.8b, v7.8b",
                "smull2 v24.8h, v27.16b, v7.16b",
                "shl v5.16b, v1.16b, #2",
                "ldr q27, [{qs}, #48]",
                "ldr q7, [{q8}, #64]",
                "smlal v8.8h, v25.8b, v6.8b",
                "smlal2 v26.8h, v25.16b, v6.16b",
                "smlal v29.8h, v28.8b, v12.8b",
                "smlal2 v24.8h, v28.16b, v12.16b",
                "shl v25.16b, v1.16b, #1",
                "ushr v6.16b, v1.16b, #1",
                "ldr q28, [{q8}, #80]",
                "ldr q12, [{q8}, #96]",
                "add v8.8h, v8.8h, v26.8h",
                "add v29.8h, v29.8h, v24.8h",
                "ushr v26.16b, v1.16b, #2",
                "ldr q24, [{q8}, #112]",
                "smull v20.4s, v8.4h, v15.h[0]",
                "smull2 v21.4s, v8.8h, v15.h[0]",
                "smull v22.4s, v29.4h, v15.h[1]",
                "smull2 v23.4s, v29.8h, v15.h[1]",
                "ldr q8, [{qs}, #32]",
                "and v29.16b, v8.16b, v14.16b",
                "bit v29.16b, v10.16b, v13.16b",
                "and v10.16b, v27.16b, v14.16b",
                "bit v10.16b, v5.16b, v13.16b",
                "ushr v5.16b, v8.16b, #4",
                "ushr v8.16b, v27.16b, #4",
                "smull2 v27.8h, v29.16b, v7.16b",
                "bit v5.16b, v11.16b, v13.16b",
                "smull v11.8h, v29.8b, v7.8b",
                "bit v8.16b, v25.16b, v13.16b",
                "ushr v7.16b, v1.16b, #3",
                "smlal2 v27.8h, v10.16b, v28.16b",
                "smull v25.8h, v5.8b, v12.8b",
                "smull2 v29.8h, v5.16b, v12.16b",
                "smlal v11.8h, v10.8b, v28.8b",
                "ldr q10, [{qs}, #64]",
                "smlal v25.8h, v8.8b, v24.8b",
                "smlal2 v29.8h, v8.16b, v24.16b",
                "ldr q8, [{q8}, #128]",
                "add v11.8h, v11.8h, v27.8h",
                "and v28.16b, v10.16b, v14.16b",
                "ushr v27.16b, v10.16b, #4",
                "add v25.8h, v25.8h, v29.8h",
                "ldr q10, [{q8}, #160]",
                "smull v16.4s, v11.4h, v15.h[2]",
                "smull2 v17.4s, v11.8h, v15.h[2]",
                "bit v28.16b, v0.16b, v13.16b",
                "bit v27.16b, v2.16b, v13.16b",
                "ldr q11, [{qs}, #80]",
                "smull v18.4s, v25.4h, v15.h[3]",
                "smull2 v19.4s, v25.8h, v15.h[3]",
                "smull v24.8h, v28.8b, v8.8b",
                "smull2 v29.8h, v28.16b, v8.16b",
                "ldr q25, [{q8}, #144]",
                "and v5.16b, v11.16b, v14.16b",
                "ushr v12.16b, v11.16b, #4",
                "smull v0.8h, v27.8b, v10.8b",
                "smull2 v2.8h, v27.16b, v10.16b",
                "ldr q11, [{q8}, #176]",
                "ldr q27, [{q8}, #224]",
                "bit v5.16b, v1.16b, v13.16b",
                "bit v12.16b, v6.16b, v13.16b",
                "ldr q1, [{qs}, #96]",
                "ldr q6, [{qs}, #112]",
                "smlal v24.8h, v5.8b, v25.8b",
                "smlal2 v29.8h, v5.16b, v25.16b",
                "smlal v0.8h, v12.8b, v11.8b",
                "smlal2 v2.8h, v12.16b, v11.16b",
                "and v28.16b, v1.16b, v14.16b",
                "ushr v8.16b, v1.16b, #4",
                "and v5.16b, v6.16b, v14.16b",
                "ushr v25.16b, v6.16b, #4",
                "add v24.8h, v24.8h, v29.8h",
                "ldr q1, [{q8}, #240]",
                "add v0.8h, v0.8h, v2.8h",
                "ldr q6, [{q8}, #272]",
                "bit v28.16b, v9.16b, v13.16b",
                "ldr q29, [{q8}, #192]",
                "bit v8.16b, v3.16b, v13.16b",
                "bit v5.16b, v26.16b, v13.16b",
                "bit v25.16b, v7.16b, v13.16b",
                "smlal v20.4s, v24.4h, v15.h[4]",
                "smlal2 v21.4s, v24.8h, v15.h[4]",
                "ldr d9, [{sc}, #8]",
                "smlal v22.4s, v0.4h, v15.h[5]",
                "smlal2 v23.4s, v0.8h, v15.h[5]",
                "ldr s3, [{y}]",
                "saddlp v6.4s, v6.8h",
                "ldr h26, [{x}, #2]",
                "smull v10.8h, v28.8b, v29.8b",
                "smull2 v12.8h, v28.16b, v29.16b",
                "ldr h7, [{x}]",
                "ldr q24, [{q8}, #208]",
                "smull v11.8h, v8.8b, v27.8b",
                "smull2 v2.8h, v8.16b, v27.16b",
                "ldr q0, [{q8}, #256]",
                "uxtl v9.8h, v9.8b",
                "fcvt s26, h26",
                "fcvt s7, h7",
                "smlal v10.8h, v5.8b, v24.8b",
                "smlal2 v12.8h, v5.16b, v24.16b",
                "smlal v11.8h, v25.8b, v1.8b",
                "smlal2 v2.8h, v25.16b, v1.16b",
                "saddlp v0.4s, v0.8h",
                "uxtl v28.4s, v9.4h",
                "uxtl2 v29.4s, v9.8h",
                "fmul s26, s26, s3",
                "fmul s7, s7, s3",
                "add v10.8h, v10.8h, v12.8h",
                "add v11.8h, v11.8h, v2.8h",
                "mul v0.4s, v0.4s, v28.4s",
                "smlal v16.4s, v10.4h, v15.h[6]",
                "smlal2 v17.4s, v10.8h, v15.h[6]",
                "smlal v18.4s, v11.4h, v15.h[7]",
                "smlal2 v19.4s, v11.8h, v15.h[7]",
                "mla v0.4s, v6.4s, v29.4s",
                "add v20.4s, v20.4s, v16.4s",
                "add v21.4s, v21.4s, v17.4s",
                "add v22.4s, v22.4s, v18.4s",
                "add v23.4s, v23.4s, v19.4s",
                "addv s8, v0.4s",
                "add v20.4s, v20.4s, v22.4s",
                "add v21.4s, v21.4s, v23.4s",
                "scvtf s8, s8",
                "scvtf v20.4s, v20.4s",
                "scvtf v21.4s, v21.4s",
                "fmul s4, s26, s8",
                "fmul v20.4s, v20.4s, v7.s[0]",
                "fmul v21.4s, v21.4s, v7.s[0]",
                "fadd {lo:v}.4s, {lo:v}.4s, v20.4s",
                "fadd {hi:v}.4s, {hi:v}.4s, v21.4s",
                x = in(reg) x,
                y = in(reg) y,
                qs = in(reg) x.add(48),
                q8 = in(reg) y.add(4),
                sc = in(reg) sc.as_ptr(),
                lo = inout(vreg) lo,
                hi = inout(vreg) hi,
                out("v4") mins,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v5") _,
                out("v6") _, out("v7") _, out("v8") _, out("v9") _, out("v10") _,
                out("v11") _, out("v12") _, out("v13") _, out("v14") _, out("v15") _,
                out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
                out("v21") _, out("v22") _, out("v23") _, out("v24") _, out("v25") _,
                out("v26") _, out("v27") _, out("v28") _, out("v29") _,
                options(nostack, readonly),
            );
        }
        sumf -= mins;
    }
    // SAFETY: as above.
    let (lo, hi) = unsafe {
        (
            core::mem::transmute::<float32x4_t, [f32; 4]>(lo),
            core::mem::transmute::<float32x4_t, [f32; 4]>(hi),
        )
    };
    for s in lo.into_iter().chain(hi) {
        sumf += s;
    }
    sumf
}
