//! Q2_K . Q8_K. Q2_K super-block (84 bytes): 16 scale bytes at 0 (sub-block j: scale in the
//! low nibble, min in the high nibble), 64 bytes of 2-bit quants at 16, f16 d at 80, f16 dmin
//! at 82. Element 128h + 32s + l is bits 2s..2s+2 of quant byte 32h + l, so bytes 32h..32h+16
//! at shift 2s are sub-block 8h + 2s and bytes 32h+16..32h+32 sub-block 8h + 2s + 1.
//! Q8_K (292 bytes): f32 d at 0, 256 signed bytes at 4, 16 i16 sums of 16 quants at 260.
//! Scalar twin: `smolrun_core::quant::q2_k::vec_dot`.
//!
//! Float order: the twin adds, per super-block, `dall * isum - dmin * summs` to its sum, with
//! isum and summs exact integers. Both faces here compute those two integers in one asm block
//! per super-block (any lane layout gives the same integers) and then the twin's f32 steps,
//! one instruction each, in its order, so both return the twin's result bit for bit, on
//! every input.
//!
//! Scheduling: the Cortex-A53 and A55 issue in order, so an instruction that needs a result
//! of the last 3-4 cycles stalls the core. The asm therefore works in stages over a whole
//! half (128 elements, 8 registers of codes and 8 of activations): all shifts, then all
//! masks, then all multiplies, each result read 4 or more instructions after it is written.
//! The f32 steps of block b (a short dependent chain) run inside block b + 1's asm, between
//! its loads, where their inputs are long ready; the blocks are still added in order, and the
//! last block's steps run in Rust after the loop.

use super::{whole_blocks, Q8_K_BYTES, QK_K};
use core::arch::asm;

const Q2_K_BYTES: usize = 84;

/// One half (128 elements): loads its 128 activation bytes (at the byte offsets `$o0..$o7`
/// from `{q8}`; single `ldr q`, which the in-order cores issue one per cycle, where llvm-mca's
/// Cortex-A55 model holds a `ldp` of two q registers or a 4-register `ld1` for 6 cycles)
/// into v16..v23 and the 2-bit codes
/// of the 32 quant bytes in `$qa` (elements 0..16 of each 32) and `$qb` (16..32) into
/// v8..v15: v(8 + 2s) and v(9 + 2s) hold the codes at bit 2s, the order of the activations.
/// v7 holds 3 in every byte.
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
            "ushr v10.16b, ", $qa, ".16b, #2\n",
            "ushr v11.16b, ", $qb, ".16b, #2\n",
            "ushr v12.16b, ", $qa, ".16b, #4\n",
            "ushr v13.16b, ", $qb, ".16b, #4\n",
            "ushr v14.16b, ", $qa, ".16b, #6\n",
            "ushr v15.16b, ", $qb, ".16b, #6\n",
            "and v8.16b, ", $qa, ".16b, v7.16b\n",
            "and v9.16b, ", $qb, ".16b, v7.16b\n",
            "and v10.16b, v10.16b, v7.16b\n",
            "and v11.16b, v11.16b, v7.16b\n",
            "and v12.16b, v12.16b, v7.16b\n",
            "and v13.16b, v13.16b, v7.16b\n",
        )
    };
}

/// ARMv8.0, 64 elements (sub-blocks in codes `$c0..$c3` against activations `$y0..$y3`):
/// widening multiplies into the i16 lanes v28..v31 (each the sum of 2 products of at most
/// 3 * 128), then times their i16 scales (`$sc` lanes `$j0..$j3`) into the i32 sums v24..v27.
macro_rules! q2_k_neon_quarter {
    ($c0:literal, $c1:literal, $c2:literal, $c3:literal,
     $y0:literal, $y1:literal, $y2:literal, $y3:literal,
     $sc:literal, $j0:literal, $j1:literal, $j2:literal, $j3:literal) => {
        concat!(
            "smull v28.8h, ",
            $c0,
            ".8b, ",
            $y0,
            ".8b\n",
            "smull v29.8h, ",
            $c1,
            ".8b, ",
            $y1,
            ".8b\n",
            "smull v30.8h, ",
            $c2,
            ".8b, ",
            $y2,
            ".8b\n",
            "smull v31.8h, ",
            $c3,
            ".8b, ",
            $y3,
            ".8b\n",
            "smlal2 v28.8h, ",
            $c0,
            ".16b, ",
            $y0,
            ".16b\n",
            "smlal2 v29.8h, ",
            $c1,
            ".16b, ",
            $y1,
            ".16b\n",
            "smlal2 v30.8h, ",
            $c2,
            ".16b, ",
            $y2,
            ".16b\n",
            "smlal2 v31.8h, ",
            $c3,
            ".16b, ",
            $y3,
            ".16b\n",
            "smlal v24.4s, v28.4h, ",
            $sc,
            ".h[",
            $j0,
            "]\n",
            "smlal2 v25.4s, v28.8h, ",
            $sc,
            ".h[",
            $j0,
            "]\n",
            "smlal v26.4s, v29.4h, ",
            $sc,
            ".h[",
            $j1,
            "]\n",
            "smlal2 v27.4s, v29.8h, ",
            $sc,
            ".h[",
            $j1,
            "]\n",
            "smlal v24.4s, v30.4h, ",
            $sc,
            ".h[",
            $j2,
            "]\n",
            "smlal2 v25.4s, v30.8h, ",
            $sc,
            ".h[",
            $j2,
            "]\n",
            "smlal v26.4s, v31.4h, ",
            $sc,
            ".h[",
            $j3,
            "]\n",
            "smlal2 v27.4s, v31.8h, ",
            $sc,
            ".h[",
            $j3,
            "]\n",
        )
    };
}

/// ARMv8.2 dotprod, 64 elements: `sdot` sums each sub-block's 16 products into 4 lanes of
/// v28..v31, which `mla` multiplies by the sub-block's i32 scale (lanes 0..3 of `$sc`) into
/// v24..v27.
macro_rules! q2_k_sdot_quarter {
    ($c0:literal, $c1:literal, $c2:literal, $c3:literal,
     $y0:literal, $y1:literal, $y2:literal, $y3:literal, $sc:literal) => {
        concat!(
            "movi v28.4s, #0\n",
            "movi v29.4s, #0\n",
            "movi v30.4s, #0\n",
            "movi v31.4s, #0\n",
            "sdot v28.4s, ",
            $c0,
            ".16b, ",
            $y0,
            ".16b\n",
            "sdot v29.4s, ",
            $c1,
            ".16b, ",
            $y1,
            ".16b\n",
            "sdot v30.4s, ",
            $c2,
            ".16b, ",
            $y2,
            ".16b\n",
            "sdot v31.4s, ",
            $c3,
            ".16b, ",
            $y3,
            ".16b\n",
            "mla v24.4s, v28.4s, ",
            $sc,
            ".s[0]\n",
            "mla v25.4s, v29.4s, ",
            $sc,
            ".s[1]\n",
            "mla v26.4s, v30.4s, ",
            $sc,
            ".s[2]\n",
            "mla v27.4s, v31.4s, ",
            $sc,
            ".s[3]\n",
        )
    };
}

/// The f16 with bits `bits` as f32 (`fcvt`: exact, as the twin's conversion).
#[inline(always)]
pub(super) fn f16_to_f32(bits: u16) -> f32 {
    let out: f32;
    // SAFETY: register-only base aarch64 FP instructions.
    unsafe {
        asm!(
            "fmov {out:s}, {bits:w}",
            "fcvt {out:s}, {out:h}",
            bits = in(reg) bits as u32,
            out = out(vreg) out,
            options(pure, nomem, nostack),
        )
    };
    out
}

/// One asm block per super-block. It first finishes the previous block (at `{px}`, `{py}`,
/// its integers in `{isum}` and `{summs}`): the twin's f32 steps `sumf += (dy * d) * isum -
/// (dy * dmin) * summs`, one instruction each in the twin's order, interleaved with this
/// block's loads and its summs (the mins against the activation's 16-element sums). Then
/// `$setup` turns the 16 scale nibbles in v6 into what `$half0` and `$half1` (the two
/// halves' multiplies, after their codes) read, and the isum of v24..v27 goes to `{isum}`.
/// The first block finishes a zero block (0 * 0 - 0 * 0 added to 0 changes nothing); the
/// last block's f32 steps run in Rust after the loop.
macro_rules! q2_k_row {
    ($w:expr, $act:expr, $nb:expr, [$($pre:literal),*], [$($setup:literal),* $(,)?],
     [$($half0:expr),* $(,)?], [$($half1:expr),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let zero_w = [0u8; Q2_K_BYTES];
        let zero_y = [0u8; 4];
        let (mut px, mut py) = (zero_w.as_ptr(), zero_y.as_ptr());
        let (mut isum, mut summs, mut sumf_bits) = (0u32, 0u32, 0f32.to_bits());
        for b in 0..$nb {
            let x = w.as_ptr().add(b * Q2_K_BYTES);
            let y = act.as_ptr().add(b * Q8_K_BYTES);
            asm!(
                $($pre,)*
                "ldr h28, [{px}, #80]",
                "ldr h29, [{px}, #82]",
                "ldr s30, [{py}]",
                "ldr q6, [{x}]",
                "ldr q0, [{x}, #16]",
                "ldr q1, [{x}, #32]",
                "ldr q2, [{x}, #48]",
                "ldr q3, [{x}, #64]",
                "ldr q8, [{bsums}]",
                "ldr q9, [{bsums}, #16]",
                "scvtf s31, {isum:w}",
                "scvtf s26, {summs:w}",
                "fmov s27, {sumf:w}",
                "fcvt s28, h28",
                "fcvt s29, h29",
                "movi v7.16b, #3",
                "movi v5.16b, #0x0f",
                "fmul s28, s30, s28", // dall = dy * d
                "fmul s29, s30, s29", // dmin = dy * dmin
                "ushr v10.16b, v6.16b, #4",
                "and v6.16b, v6.16b, v5.16b",
                "fmul s28, s28, s31", // dall * isum
                "fmul s29, s29, s26", // dmin * summs
                "uxtl v11.8h, v10.8b",
                "uxtl2 v12.8h, v10.16b",
                "movi v24.4s, #0",
                "movi v25.4s, #0",
                "fsub s28, s28, s29",
                "smull v13.4s, v8.4h, v11.4h",
                "smull2 v14.4s, v8.8h, v11.8h",
                "smlal v13.4s, v9.4h, v12.4h",
                "fadd s27, s27, s28",
                "smlal2 v14.4s, v9.8h, v12.8h",
                $($setup,)*
                "fmov {sumf:w}, s27",
                "add v15.4s, v13.4s, v14.4s",
                "movi v26.4s, #0",
                "movi v27.4s, #0",
                "addv s15, v15.4s",
                half_codes!("v0", "v1", [0, 16, 32, 48, 64, 80, 96, 112], "fmov {summs:w}, s15"),
                $($half0,)*
                half_codes!("v2", "v3", [128, 144, 160, 176, 192, 208, 224, 240]),
                $($half1,)*
                "add v24.4s, v24.4s, v25.4s",
                "add v26.4s, v26.4s, v27.4s",
                "add v24.4s, v24.4s, v26.4s",
                "addv s24, v24.4s",
                "fmov {isum:w}, s24",
                x = in(reg) x,
                px = in(reg) px,
                py = in(reg) py,
                bsums = in(reg) y.add(260),
                q8 = in(reg) y.add(4),
                isum = inout(reg) isum,
                summs = inout(reg) summs,
                sumf = inout(reg) sumf_bits,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _,
                out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v14") _,
                out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _,
                out("v20") _, out("v21") _, out("v22") _, out("v23") _, out("v24") _,
                out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _,
                out("v30") _, out("v31") _,
                options(nostack, readonly),
            );
            (px, py) = (x, y);
        }
        // The last block's f32 steps, the twin's own.
        let mut sumf = f32::from_bits(sumf_bits);
        let dy = f32::from_le_bytes([*py, *py.add(1), *py.add(2), *py.add(3)]);
        let dall = dy * f16_to_f32(u16::from_le_bytes([*px.add(80), *px.add(81)]));
        let dmin = dy * f16_to_f32(u16::from_le_bytes([*px.add(82), *px.add(83)]));
        sumf += dall * isum as i32 as f32 - dmin * summs as i32 as f32;
        sumf
    }};
}

/// Q2_K . Q8_K with widening multiplies (ARMv8.0 NEON only). Bit-identical to the scalar twin.
pub fn vec_dot_q2_k_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, Q2_K_BYTES, act, Q8_K_BYTES);
    // SAFETY: super-blocks 0..nb lie inside both slices; only base aarch64 NEON instructions.
    unsafe {
        q2_k_row!(
            w,
            act,
            nb,
            [],
            // The 16 scales as i16: 0..7 in v4, 8..15 in v5 (by-element operands of smlal).
            ["uxtl v4.8h, v6.8b", "uxtl2 v5.8h, v6.16b"],
            [
                q2_k_neon_quarter!(
                    "v8", "v9", "v10", "v11", "v16", "v17", "v18", "v19", "v4", 0, 1, 2, 3
                ),
                q2_k_neon_quarter!(
                    "v12", "v13", "v14", "v15", "v20", "v21", "v22", "v23", "v4", 4, 5, 6, 7
                ),
            ],
            [
                q2_k_neon_quarter!(
                    "v8", "v9", "v10", "v11", "v16", "v17", "v18", "v19", "v5", 0, 1, 2, 3
                ),
                q2_k_neon_quarter!(
                    "v12", "v13", "v14", "v15", "v20", "v21", "v22", "v23", "v5", 4, 5, 6, 7
                ),
            ]
        )
    }
}

/// Q2_K . Q8_K with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_q2_k_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, Q2_K_BYTES, act, Q8_K_BYTES);
    // SAFETY: super-blocks 0..nb lie inside both slices; the caller vouches for dotprod.
    unsafe {
        q2_k_row!(
            w,
            act,
            nb,
            [".arch_extension dotprod"],
            // Scales as i32, four to a register, for the half about to run: 0..3 in v4 and
            // 4..7 in v5 (the half's i16 scales wait in v28, v6).
            [
                "uxtl v28.8h, v6.8b",
                "uxtl2 v6.8h, v6.16b",
                "uxtl v4.4s, v28.4h",
                "uxtl2 v5.4s, v28.8h",
            ],
            [
                q2_k_sdot_quarter!("v8", "v9", "v10", "v11", "v16", "v17", "v18", "v19", "v4"),
                q2_k_sdot_quarter!("v12", "v13", "v14", "v15", "v20", "v21", "v22", "v23", "v5"),
                "uxtl v4.4s, v6.4h",
                "uxtl2 v5.4s, v6.8h",
            ],
            [
                q2_k_sdot_quarter!("v8", "v9", "v10", "v11", "v16", "v17", "v18", "v19", "v4"),
                q2_k_sdot_quarter!("v12", "v13", "v14", "v15", "v20", "v21", "v22", "v23", "v5"),
            ]
        )
    }
}
