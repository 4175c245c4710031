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
                "ldp q2, q3, [{x}, #16]",
                "movi v20.4s, #0",
                "movi v21.4s, #0",
                "movi v22.4s, #0",
                "movi v23.4s, #0",
                "uxtl v15.8h, v15.8b",
                "ldp q0, q1, [{qs}, #0]",
                "ldp q10, q11, [{q8}, #0]",
                "ldp q12, q16, [{q8}, #32]",
                "and v4.16b, v0.16b, v14.16b",
                "and v5.16b, v1.16b, v14.16b",
                "ushr v6.16b, v0.16b, #4",
                "ushr v7.16b, v1.16b, #4",
                "shl v8.16b, v2.16b, #4",
                "and v8.16b, v8.16b, v13.16b",
                "orr v4.16b, v4.16b, v8.16b",
                "shl v9.16b, v3.16b, #4",
                "and v9.16b, v9.16b, v13.16b",
                "orr v5.16b, v5.16b, v9.16b",
                "shl v8.16b, v2.16b, #3",
                "and v8.16b, v8.16b, v13.16b",
                "orr v6.16b, v6.16b, v8.16b",
                "shl v9.16b, v3.16b, #3",
                "and v9.16b, v9.16b, v13.16b",
                "orr v7.16b, v7.16b, v9.16b",
                "smull v17.8h, v4.8b, v10.8b",
                "smull2 v18.8h, v4.16b, v10.16b",
                "smull v19.8h, v6.8b, v12.8b",
                "smull2 v24.8h, v6.16b, v12.16b",
                "smlal v17.8h, v5.8b, v11.8b",
                "smlal2 v18.8h, v5.16b, v11.16b",
                "smlal v19.8h, v7.8b, v16.8b",
                "smlal2 v24.8h, v7.16b, v16.16b",
                "add v17.8h, v17.8h, v18.8h",
                "add v19.8h, v19.8h, v24.8h",
                "smlal v20.4s, v17.4h, v15.h[0]",
                "smlal2 v21.4s, v17.8h, v15.h[0]",
                "smlal v22.4s, v19.4h, v15.h[1]",
                "smlal2 v23.4s, v19.8h, v15.h[1]",
                "ldp q0, q1, [{qs}, #32]",
                "ldp q10, q11, [{q8}, #64]",
                "ldp q12, q16, [{q8}, #96]",
                "and v4.16b, v0.16b, v14.16b",
                "and v5.16b, v1.16b, v14.16b",
                "ushr v6.16b, v0.16b, #4",
                "ushr v7.16b, v1.16b, #4",
                "shl v8.16b, v2.16b, #2",
                "and v8.16b, v8.16b, v13.16b",
                "orr v4.16b, v4.16b, v8.16b",
                "shl v9.16b, v3.16b, #2",
                "and v9.16b, v9.16b, v13.16b",
                "orr v5.16b, v5.16b, v9.16b",
                "shl v8.16b, v2.16b, #1",
                "and v8.16b, v8.16b, v13.16b",
                "orr v6.16b, v6.16b, v8.16b",
                "shl v9.16b, v3.16b, #1",
                "and v9.16b, v9.16b, v13.16b",
                "orr v7.16b, v7.16b, v9.16b",
                "smull v17.8h, v4.8b, v10.8b",
                "smull2 v18.8h, v4.16b, v10.16b",
                "smull v19.8h, v6.8b, v12.8b",
                "smull2 v24.8h, v6.16b, v12.16b",
                "smlal v17.8h, v5.8b, v11.8b",
                "smlal2 v18.8h, v5.16b, v11.16b",
                "smlal v19.8h, v7.8b, v16.8b",
                "smlal2 v24.8h, v7.16b, v16.16b",
                "add v17.8h, v17.8h, v18.8h",
                "add v19.8h, v19.8h, v24.8h",
                "smlal v20.4s, v17.4h, v15.h[2]",
                "smlal2 v21.4s, v17.8h, v15.h[2]",
                "smlal v22.4s, v19.4h, v15.h[3]",
                "smlal2 v23.4s, v19.8h, v15.h[3]",
                "ldp q0, q1, [{qs}, #64]",
                "ldp q10, q11, [{q8}, #128]",
                "ldp q12, q16, [{q8}, #160]",
                "and v4.16b, v0.16b, v14.16b",
                "and v5.16b, v1.16b, v14.16b",
                "ushr v6.16b, v0.16b, #4",
                "ushr v7.16b, v1.16b, #4",
                "and v8.16b, v2.16b, v13.16b",
                "orr v4.16b, v4.16b, v8.16b",
                "and v9.16b, v3.16b, v13.16b",
                "orr v5.16b, v5.16b, v9.16b",
                "ushr v8.16b, v2.16b, #1",
                "and v8.16b, v8.16b, v13.16b",
                "orr v6.16b, v6.16b, v8.16b",
                "ushr v9.16b, v3.16b, #1",
                "and v9.16b, v9.16b, v13.16b",
                "orr v7.16b, v7.16b, v9.16b",
                "smull v17.8h, v4.8b, v10.8b",
                "smull2 v18.8h, v4.16b, v10.16b",
                "smull v19.8h, v6.8b, v12.8b",
                "smull2 v24.8h, v6.16b, v12.16b",
                "smlal v17.8h, v5.8b, v11.8b",
                "smlal2 v18.8h, v5.16b, v11.16b",
                "smlal v19.8h, v7.8b, v16.8b",
                "smlal2 v24.8h, v7.16b, v16.16b",
                "add v17.8h, v17.8h, v18.8h",
                "add v19.8h, v19.8h, v24.8h",
                "smlal v20.4s, v17.4h, v15.h[4]",
                "smlal2 v21.4s, v17.8h, v15.h[4]",
                "smlal v22.4s, v19.4h, v15.h[5]",
                "smlal2 v23.4s, v19.8h, v15.h[5]",
                "ldp q0, q1, [{qs}, #96]",
                "ldp q10, q11, [{q8}, #192]",
                "ldp q12, q16, [{q8}, #224]",
                "and v4.16b, v0.16b, v14.16b",
                "and v5.16b, v1.16b, v14.16b",
                "ushr v6.16b, v0.16b, #4",
                "ushr v7.16b, v1.16b, #4",
                "ushr v8.16b, v2.16b, #2",
                "and v8.16b, v8.16b, v13.16b",
                "orr v4.16b, v4.16b, v8.16b",
                "ushr v9.16b, v3.16b, #2",
                "and v9.16b, v9.16b, v13.16b",
                "orr v5.16b, v5.16b, v9.16b",
                "ushr v8.16b, v2.16b, #3",
                "and v8.16b, v8.16b, v13.16b",
                "orr v6.16b, v6.16b, v8.16b",
                "ushr v9.16b, v3.16b, #3",
                "and v9.16b, v9.16b, v13.16b",
                "orr v7.16b, v7.16b, v9.16b",
                "smull v17.8h, v4.8b, v10.8b",
                "smull2 v18.8h, v4.16b, v10.16b",
                "smull v19.8h, v6.8b, v12.8b",
                "smull2 v24.8h, v6.16b, v12.16b",
                "smlal v17.8h, v5.8b, v11.8b",
                "smlal2 v18.8h, v5.16b, v11.16b",
                "smlal v19.8h, v7.8b, v16.8b",
                "smlal2 v24.8h, v7.16b, v16.16b",
                "add v17.8h, v17.8h, v18.8h",
                "add v19.8h, v19.8h, v24.8h",
                "smlal v20.4s, v17.4h, v15.h[6]",
                "smlal2 v21.4s, v17.8h, v15.h[6]",
                "smlal v22.4s, v19.4h, v15.h[7]",
                "smlal2 v23.4s, v19.8h, v15.h[7]",
                "ldr q4, [{q8}, #256]",
                "ldr q5, [{q8}, #272]",
                "ldr d6, [{sc}, #8]",
                "ldr h2, [{x}]",
                "ldr s0, [{y}]",
                "ldr h1, [{x}, #2]",
                "saddlp v4.4s, v4.8h",
                "saddlp v5.4s, v5.8h",
                "uxtl v6.8h, v6.8b",
                "fcvt s2, h2",
                "fcvt s1, h1",
                "uxtl v7.4s, v6.4h",
                "uxtl2 v6.4s, v6.8h",
                "add v20.4s, v20.4s, v22.4s",
                "add v21.4s, v21.4s, v23.4s",
                "mul v4.4s, v4.4s, v7.4s",
                "fmul s2, s2, s0",
                "fmul s1, s1, s0",
                "mla v4.4s, v5.4s, v6.4s",
                "scvtf v20.4s, v20.4s",
                "scvtf v21.4s, v21.4s",
                "addv s5, v4.4s",
                "fmul v20.4s, v20.4s, v2.s[0]",
                "fmul v21.4s, v21.4s, v2.s[0]",
                "scvtf s5, s5",
                "fadd {lo:v}.4s, {lo:v}.4s, v20.4s",
                "fadd {hi:v}.4s, {hi:v}.4s, v21.4s",
                "fmul s4, s1, s5",
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
                out("v21") _, out("v22") _, out("v23") _, out("v24") _,
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
