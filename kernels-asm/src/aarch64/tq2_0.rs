//! TQ2_0 . Q8_K. TQ2_0 super-block (66 bytes): 64 bytes of 2-bit codes at 0, f16 d at 64; code
//! c means c - 1 (ggml writes 0..2; 3 decodes as +2). Element 128h + 32l + m is bits 2l..2l+2
//! of byte 32h + m: the order of Q2_K's quants. Q8_K as in q2_k.rs.
//! Scalar twin: `smolrun_core::quant::tq2_0::vec_dot`.
//!
//! Float order: the twin adds `sumi * (d_act * d)` per super-block, sumi an exact integer.
//! Both faces compute sumi in one asm block per super-block and the f32 steps in Rust in the
//! twin's order: bit for bit the twin, on every input. The -1 is applied to the codes
//! themselves (a signed multiply of c - 1), not through the activation's stored sums, which
//! the twin never reads.

use super::q2_k::two_bit_codes;
use super::{whole_blocks, Q8_K_BYTES, QK_K};
use core::arch::asm;

const TQ2_0_BYTES: usize = 66;

/// ARMv8.0, 32 elements: codes at bit `$sh` of `$qa` (elements 0..16) and `$qb` (16..32),
/// minus 1 (v6 holds 1 in every byte), times the next 32 activation bytes into the i16 lanes
/// v24..v27. Each lane takes one product of at most 2 * 128 per step, 8 steps per block.
macro_rules! tq2_0_neon_step {
    ($qa:literal, $qb:literal, $sh:tt,
     [$c0:literal, $c1:literal, $y0:literal, $y1:literal]) => {
        concat!(
            "ld1 {{",
            $y0,
            ".16b, ",
            $y1,
            ".16b}}, [{q8}], #32\n",
            two_bit_codes!($c0, $qa, $sh),
            two_bit_codes!($c1, $qb, $sh),
            "sub ",
            $c0,
            ".16b, ",
            $c0,
            ".16b, v6.16b\n",
            "sub ",
            $c1,
            ".16b, ",
            $c1,
            ".16b, v6.16b\n",
            "smlal v24.8h, ",
            $c0,
            ".8b, ",
            $y0,
            ".8b\n",
            "smlal v26.8h, ",
            $c1,
            ".8b, ",
            $y1,
            ".8b\n",
            "smlal2 v25.8h, ",
            $c0,
            ".16b, ",
            $y0,
            ".16b\n",
            "smlal2 v27.8h, ",
            $c1,
            ".16b, ",
            $y1,
            ".16b\n",
        )
    };
}

/// ARMv8.2 dotprod, 32 elements: as above, with one `sdot` per 16 into the i32 lanes v24, v25.
macro_rules! tq2_0_sdot_step {
    ($qa:literal, $qb:literal, $sh:tt,
     [$c0:literal, $c1:literal, $y0:literal, $y1:literal]) => {
        concat!(
            "ld1 {{",
            $y0,
            ".16b, ",
            $y1,
            ".16b}}, [{q8}], #32\n",
            two_bit_codes!($c0, $qa, $sh),
            two_bit_codes!($c1, $qb, $sh),
            "sub ",
            $c0,
            ".16b, ",
            $c0,
            ".16b, v6.16b\n",
            "sub ",
            $c1,
            ".16b, ",
            $c1,
            ".16b, v6.16b\n",
            "sdot v24.4s, ",
            $c0,
            ".16b, ",
            $y0,
            ".16b\n",
            "sdot v25.4s, ",
            $c1,
            ".16b, ",
            $y1,
            ".16b\n",
        )
    };
}

/// One asm block per super-block computes sumi (`$steps`: 8 steps of 32 elements in order,
/// then `$reduce` leaves the total in s24) and loads d as f32; the f32 steps are the twin's
/// own, in Rust.
macro_rules! tq2_0_row {
    ($w:expr, $act:expr, $nb:expr, [$($pre:literal),*], [$($steps:expr),* $(,)?],
     [$($reduce:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let mut sumf = 0.0f32;
        for b in 0..$nb {
            let x = w.as_ptr().add(b * TQ2_0_BYTES);
            let y = act.as_ptr().add(b * Q8_K_BYTES);
            let sumi: i32;
            let d: f32;
            asm!(
                $($pre,)*
                "ldp q0, q1, [{x}]",
                "ldp q2, q3, [{x}, #32]",
                "movi v7.16b, #3",
                "movi v6.16b, #1",
                "movi v24.4s, #0",
                "movi v25.4s, #0",
                "movi v26.4s, #0",
                "movi v27.4s, #0",
                $($steps,)*
                $($reduce,)*
                "fmov {sumi:w}, s24",
                "ldr {d:h}, [{x}, #64]",
                "fcvt {d:s}, {d:h}",
                x = in(reg) x,
                q8 = inout(reg) y.add(4) => _,
                sumi = out(reg) sumi,
                d = out(vreg) d,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v6") _,
                out("v7") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _,
                out("v20") _, out("v21") _, out("v22") _, out("v23") _, out("v24") _,
                out("v25") _, out("v26") _, out("v27") _,
                options(nostack, readonly),
            );
            // The twin's f32 steps, in its order.
            let dy = f32::from_le_bytes([*y, *y.add(1), *y.add(2), *y.add(3)]);
            sumf += sumi as f32 * (dy * d);
        }
        sumf
    }};
}

/// TQ2_0 . Q8_K with widening multiplies (ARMv8.0 NEON only). Bit-identical to the scalar twin.
pub fn vec_dot_tq2_0_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, TQ2_0_BYTES, act, Q8_K_BYTES);
    // SAFETY: super-blocks 0..nb lie inside both slices; only base aarch64 NEON instructions.
    unsafe {
        tq2_0_row!(
            w,
            act,
            nb,
            [],
            [
                tq2_0_neon_step!("v0", "v1", 0, ["v16", "v17", "v18", "v19"]),
                tq2_0_neon_step!("v0", "v1", 2, ["v20", "v21", "v22", "v23"]),
                tq2_0_neon_step!("v0", "v1", 4, ["v16", "v17", "v18", "v19"]),
                tq2_0_neon_step!("v0", "v1", 6, ["v20", "v21", "v22", "v23"]),
                tq2_0_neon_step!("v2", "v3", 0, ["v16", "v17", "v18", "v19"]),
                tq2_0_neon_step!("v2", "v3", 2, ["v20", "v21", "v22", "v23"]),
                tq2_0_neon_step!("v2", "v3", 4, ["v16", "v17", "v18", "v19"]),
                tq2_0_neon_step!("v2", "v3", 6, ["v20", "v21", "v22", "v23"]),
            ],
            [
                // Four i16 lanes of at most 8 * 256 each: their sum fits i16 too.
                "add v24.8h, v24.8h, v25.8h",
                "add v26.8h, v26.8h, v27.8h",
                "add v24.8h, v24.8h, v26.8h",
                "saddlv s24, v24.8h",
            ]
        )
    }
}

/// TQ2_0 . Q8_K with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_tq2_0_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, TQ2_0_BYTES, act, Q8_K_BYTES);
    // SAFETY: super-blocks 0..nb lie inside both slices; the caller vouches for dotprod.
    unsafe {
        tq2_0_row!(
            w,
            act,
            nb,
            [".arch_extension dotprod"],
            [
                tq2_0_sdot_step!("v0", "v1", 0, ["v16", "v17", "v18", "v19"]),
                tq2_0_sdot_step!("v0", "v1", 2, ["v20", "v21", "v22", "v23"]),
                tq2_0_sdot_step!("v0", "v1", 4, ["v16", "v17", "v18", "v19"]),
                tq2_0_sdot_step!("v0", "v1", 6, ["v20", "v21", "v22", "v23"]),
                tq2_0_sdot_step!("v2", "v3", 0, ["v16", "v17", "v18", "v19"]),
                tq2_0_sdot_step!("v2", "v3", 2, ["v20", "v21", "v22", "v23"]),
                tq2_0_sdot_step!("v2", "v3", 4, ["v16", "v17", "v18", "v19"]),
                tq2_0_sdot_step!("v2", "v3", 6, ["v20", "v21", "v22", "v23"]),
            ],
            ["add v24.4s, v24.4s, v25.4s", "addv s24, v24.4s"]
        )
    }
}
