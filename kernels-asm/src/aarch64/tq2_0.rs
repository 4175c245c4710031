//! TQ2_0 . Q8_K. TQ2_0 super-block (66 bytes): 64 bytes of 2-bit codes at 0, f16 d at 64; code
//! c means c - 1 (ggml writes 0..2; 3 decodes as +2). Element 128h + 32l + m is bits 2l..2l+2
//! of byte 32h + m: the order of Q2_K's quants. Q8_K as in q2_k.rs.
//! Scalar twin: `smolrun_core::quant::tq2_0::vec_dot`.
//!
//! Float order: the twin adds `sumi * (d_act * d)` per super-block, sumi an exact integer.
//! Both faces compute sumi in one asm block per super-block and then the twin's f32 steps,
//! one instruction each, in its order: bit for bit the twin, on every input. The -1 is
//! applied to the codes themselves (a signed multiply of c - 1, looked up by nibble), not
//! through the activation's stored sums, which the twin never reads.
//!
//! Scheduling as in q2_k.rs: stages over a half, and each block's f32 steps inside the next
//! block's asm.

use super::q2_k::f16_to_f32;
use super::{whole_blocks, Q8_K_BYTES, QK_K};
use core::arch::asm;

const TQ2_0_BYTES: usize = 66;

/// c - 1 for the 16 values of a nibble: of its low code (`tbl` table in v4) and its high code
/// (v5). Two lookups per nibble replace a shift, a mask and a subtraction per code.
static CODE_TABLES: [[i8; 16]; 2] = [
    [-1, 0, 1, 2, -1, 0, 1, 2, -1, 0, 1, 2, -1, 0, 1, 2],
    [-1, -1, -1, -1, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2],
];

/// One half (128 elements): loads its 128 activation bytes (at the byte offsets `$o0..$o7`
/// from `{q8}`, one `ldr q` each as in q2_k.rs) into v16..v23 and c - 1 for the codes of the 32 quant bytes in `$qa` (elements
/// 0..16 of each 32) and `$qb` (16..32) into v8..v15, as signed bytes: v(8 + 2l) and
/// v(9 + 2l) hold the codes at bit 2l, the order of the activations. v7 holds 0x0f in every
/// byte; the nibbles are looked up in the tables v4, v5 (`CODE_TABLES`).
macro_rules! half_codes {
    ($qa:literal, $qb:literal, [$o0:literal, $o1:literal, $o2:literal, $o3:literal,
      $o4:literal, $o5:literal, $o6:literal, $o7:literal]
     $(, $first:literal)*) => {
        concat!(
            "ldr q16, [{q8}, #", $o0, "]\n",
            "ldr q17, [{q8}, #", $o1, "]\n",
            "ldr q18, [{q8}, #", $o2, "]\n",
            "ldr q19, [{q8}, #", $o3, "]\n",
            "ldr q20, [{q8}, #", $o4, "]\n",
            "ldr q21, [{q8}, #", $o5, "]\n",
            "ldr q22, [{q8}, #", $o6, "]\n",
            "ldr q23, [{q8}, #", $o7, "]\n",
            $($first, "\n",)*
            "and v8.16b, ", $qa, ".16b, v7.16b\n",
            "and v9.16b, ", $qb, ".16b, v7.16b\n",
            "ushr v12.16b, ", $qa, ".16b, #4\n",
            "ushr v13.16b, ", $qb, ".16b, #4\n",
            "tbl v10.16b, {{v5.16b}}, v8.16b\n",
            "tbl v11.16b, {{v5.16b}}, v9.16b\n",
            "tbl v14.16b, {{v5.16b}}, v12.16b\n",
            "tbl v15.16b, {{v5.16b}}, v13.16b\n",
            "tbl v8.16b, {{v4.16b}}, v8.16b\n",
            "tbl v9.16b, {{v4.16b}}, v9.16b\n",
            "tbl v12.16b, {{v4.16b}}, v12.16b\n",
            "tbl v13.16b, {{v4.16b}}, v13.16b\n",
        )
    };
}

/// ARMv8.0, one half: (c - 1) times the activations, widened into the i16 lanes v24..v27.
/// Each lane takes 2 products of at most 2 * 128 per half: 8 over the block, and the four
/// accumulators' sum stays below 2^13.
macro_rules! tq2_0_neon_half {
    () => {
        concat!(
            "smlal v24.8h, v8.8b, v16.8b\n",
            "smlal v25.8h, v9.8b, v17.8b\n",
            "smlal v26.8h, v10.8b, v18.8b\n",
            "smlal v27.8h, v11.8b, v19.8b\n",
            "smlal v24.8h, v12.8b, v20.8b\n",
            "smlal v25.8h, v13.8b, v21.8b\n",
            "smlal v26.8h, v14.8b, v22.8b\n",
            "smlal v27.8h, v15.8b, v23.8b\n",
            "smlal2 v24.8h, v8.16b, v16.16b\n",
            "smlal2 v25.8h, v9.16b, v17.16b\n",
            "smlal2 v26.8h, v10.16b, v18.16b\n",
            "smlal2 v27.8h, v11.16b, v19.16b\n",
            "smlal2 v24.8h, v12.16b, v20.16b\n",
            "smlal2 v25.8h, v13.16b, v21.16b\n",
            "smlal2 v26.8h, v14.16b, v22.16b\n",
            "smlal2 v27.8h, v15.16b, v23.16b\n",
        )
    };
}

/// ARMv8.2 dotprod, one half: (c - 1) . activations with `sdot` into the i32 lanes v24..v27.
macro_rules! tq2_0_sdot_half {
    () => {
        concat!(
            "sdot v24.4s, v8.16b, v16.16b\n",
            "sdot v25.4s, v9.16b, v17.16b\n",
            "sdot v26.4s, v10.16b, v18.16b\n",
            "sdot v27.4s, v11.16b, v19.16b\n",
            "sdot v24.4s, v12.16b, v20.16b\n",
            "sdot v25.4s, v13.16b, v21.16b\n",
            "sdot v26.4s, v14.16b, v22.16b\n",
            "sdot v27.4s, v15.16b, v23.16b\n",
        )
    };
}

/// One asm block per super-block. It first finishes the previous block (at `{px}`, `{py}`,
/// its integer in `{sumi}`): the twin's f32 steps `sumf += sumi * (dy * d)`, interleaved with
/// this block's loads; then the two halves (`$half`), and `$reduce` leaves this block's sumi
/// in s24. The first block finishes a zero block; the last block's steps run in Rust.
macro_rules! tq2_0_row {
    ($w:expr, $act:expr, $nb:expr, [$($pre:literal),*], $half:expr,
     [$($reduce:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let zero_w = [0u8; TQ2_0_BYTES];
        let zero_y = [0u8; 4];
        let (mut px, mut py) = (zero_w.as_ptr(), zero_y.as_ptr());
        let (mut sumi, mut sumf_bits) = (0u32, 0f32.to_bits());
        for b in 0..$nb {
            let x = w.as_ptr().add(b * TQ2_0_BYTES);
            let y = act.as_ptr().add(b * Q8_K_BYTES);
            asm!(
                $($pre,)*
                "ldr h28, [{px}, #64]",
                "ldr s30, [{py}]",
                "ldr q0, [{x}]",
                "ldr q1, [{x}, #16]",
                "ldr q2, [{x}, #32]",
                "ldr q3, [{x}, #48]",
                "scvtf s31, {sumi:w}",
                "fmov s29, {sumf:w}",
                "ldr q4, [{tables}]",
                "ldr q5, [{tables}, #16]",
                "movi v7.16b, #0x0f",
                "fcvt s28, h28",
                "movi v24.4s, #0",
                "movi v25.4s, #0",
                "fmul s28, s30, s28", // d = dy * d_w
                "movi v26.4s, #0",
                "movi v27.4s, #0",
                half_codes!("v0", "v1", [0, 16, 32, 48, 64, 80, 96, 112], "fmul s28, s31, s28"), // sumi * d
                $half,
                half_codes!("v2", "v3", [128, 144, 160, 176, 192, 208, 224, 240], "fadd s29, s29, s28"),
                $half,
                "fmov {sumf:w}, s29",
                $($reduce,)*
                "fmov {sumi:w}, s24",
                x = in(reg) x,
                px = in(reg) px,
                py = in(reg) py,
                q8 = in(reg) y.add(4),
                tables = in(reg) CODE_TABLES.as_ptr(),
                sumi = inout(reg) sumi,
                sumf = inout(reg) sumf_bits,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _,
                out("v7") _, out("v8") _, out("v9") _, out("v10") _, out("v11") _,
                out("v12") _, out("v13") _, out("v14") _, out("v15") _, out("v16") _,
                out("v17") _, out("v18") _, out("v19") _, out("v20") _, out("v21") _,
                out("v22") _, out("v23") _, out("v24") _, out("v25") _, out("v26") _,
                out("v27") _, out("v28") _, out("v29") _, out("v30") _, out("v31") _,
                options(nostack, readonly),
            );
            (px, py) = (x, y);
        }
        // The last block's f32 steps, the twin's own.
        let mut sumf = f32::from_bits(sumf_bits);
        let dy = f32::from_le_bytes([*py, *py.add(1), *py.add(2), *py.add(3)]);
        let d = dy * f16_to_f32(u16::from_le_bytes([*px.add(64), *px.add(65)]));
        sumf += sumi as i32 as f32 * d;
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
            tq2_0_neon_half!(),
            [
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
            tq2_0_sdot_half!(),
            [
                "add v24.4s, v24.4s, v25.4s",
                "add v26.4s, v26.4s, v27.4s",
                "add v24.4s, v24.4s, v26.4s",
                "addv s24, v24.4s",
            ]
        )
    }
}
