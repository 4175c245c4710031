//! Q2_K . Q8_K. Q2_K super-block (84 bytes): 16 scale bytes at 0 (sub-block j: scale in the
//! low nibble, min in the high nibble), 64 bytes of 2-bit quants at 16, f16 d at 80, f16 dmin
//! at 82. Element 128h + 32s + l is bits 2s..2s+2 of quant byte 32h + l, so bytes 32h..32h+16
//! at shift 2s are sub-block 8h + 2s and bytes 32h+16..32h+32 sub-block 8h + 2s + 1.
//! Q8_K (292 bytes): f32 d at 0, 256 signed bytes at 4, 16 i16 sums of 16 quants at 260.
//! Scalar twin: `smolrun_core::quant::q2_k::vec_dot`.
//!
//! Float order: the twin adds, per super-block, `dall * isum - dmin * summs` to its sum, with
//! isum and summs exact integers. Both faces here compute those two integers in one asm block
//! per super-block (any lane layout gives the same integers) and the f32 steps in Rust in the
//! twin's order, so both return the twin's result bit for bit, on every input.

use super::{whole_blocks, Q8_K_BYTES, QK_K};
use core::arch::asm;

const Q2_K_BYTES: usize = 84;

/// The 2-bit codes at bit `$sh` of the 16 bytes in `$src`, into `$dst` (v7 holds 3 in every
/// byte). Shared with TQ2_0, whose codes sit in the same order.
macro_rules! two_bit_codes {
    ($dst:literal, $src:literal, 0) => {
        concat!("and ", $dst, ".16b, ", $src, ".16b, v7.16b\n")
    };
    ($dst:literal, $src:literal, 6) => {
        concat!("ushr ", $dst, ".16b, ", $src, ".16b, #6\n")
    };
    ($dst:literal, $src:literal, $sh:literal) => {
        concat!(
            "ushr ",
            $dst,
            ".16b, ",
            $src,
            ".16b, #",
            $sh,
            "\n",
            "and ",
            $dst,
            ".16b, ",
            $dst,
            ".16b, v7.16b\n",
        )
    };
}
pub(super) use two_bit_codes;

/// ARMv8.0, 32 elements: codes of sub-blocks `$jlo` (bytes in `$qa`) and `$jhi` (`$qb`) at
/// bit `$sh`, times the next 32 activation bytes (8 lanes, each i16 lane the sum of 2 products
/// of at most 3 * 128), then times their i16 scales (`$sc` lanes) into the i32 sums v24..v27.
/// `$t` names six scratch registers, alternated between steps so that an in-order core can
/// start one step while the last one's multiplies finish.
macro_rules! q2_k_neon_step {
    ($qa:literal, $qb:literal, $sh:tt, $sc:literal, $jlo:literal, $jhi:literal,
     [$c0:literal, $c1:literal, $p0:literal, $p1:literal, $y0:literal, $y1:literal]) => {
        concat!(
            "ld1 {{",
            $y0,
            ".16b, ",
            $y1,
            ".16b}}, [{q8}], #32\n",
            two_bit_codes!($c0, $qa, $sh),
            two_bit_codes!($c1, $qb, $sh),
            "smull ",
            $p0,
            ".8h, ",
            $c0,
            ".8b, ",
            $y0,
            ".8b\n",
            "smull ",
            $p1,
            ".8h, ",
            $c1,
            ".8b, ",
            $y1,
            ".8b\n",
            "smlal2 ",
            $p0,
            ".8h, ",
            $c0,
            ".16b, ",
            $y0,
            ".16b\n",
            "smlal2 ",
            $p1,
            ".8h, ",
            $c1,
            ".16b, ",
            $y1,
            ".16b\n",
            "smlal v24.4s, ",
            $p0,
            ".4h, ",
            $sc,
            ".h[",
            $jlo,
            "]\n",
            "smlal v26.4s, ",
            $p1,
            ".4h, ",
            $sc,
            ".h[",
            $jhi,
            "]\n",
            "smlal2 v25.4s, ",
            $p0,
            ".8h, ",
            $sc,
            ".h[",
            $jlo,
            "]\n",
            "smlal2 v27.4s, ",
            $p1,
            ".8h, ",
            $sc,
            ".h[",
            $jhi,
            "]\n",
        )
    };
}

/// ARMv8.2 dotprod, 32 elements: `sdot` sums each sub-block's 16 products into 4 lanes, which
/// `mla` multiplies by the sub-block's i32 scale (`$sclo`/`$schi` lanes) into v24, v25.
macro_rules! q2_k_sdot_step {
    ($qa:literal, $qb:literal, $sh:tt, $sclo:literal, $schi:literal,
     [$c0:literal, $c1:literal, $p0:literal, $p1:literal, $y0:literal, $y1:literal]) => {
        concat!(
            "ld1 {{",
            $y0,
            ".16b, ",
            $y1,
            ".16b}}, [{q8}], #32\n",
            two_bit_codes!($c0, $qa, $sh),
            two_bit_codes!($c1, $qb, $sh),
            "movi ",
            $p0,
            ".4s, #0\n",
            "movi ",
            $p1,
            ".4s, #0\n",
            "sdot ",
            $p0,
            ".4s, ",
            $c0,
            ".16b, ",
            $y0,
            ".16b\n",
            "sdot ",
            $p1,
            ".4s, ",
            $c1,
            ".16b, ",
            $y1,
            ".16b\n",
            "mla v24.4s, ",
            $p0,
            ".4s, ",
            $sclo,
            "\n",
            "mla v25.4s, ",
            $p1,
            ".4s, ",
            $schi,
            "\n",
        )
    };
}

/// One asm block per super-block computes the twin's two integers: `summs` (the mins against
/// the activation's 16-element sums) and `isum` (scaled code . activation sums), and loads d
/// and dmin as f32; `$setup` turns the scale nibbles in v5 into the form `$steps` reads (the
/// 16 steps of 32 elements, in order: the activation pointer walks forward). The f32 steps
/// are the twin's own, in Rust.
macro_rules! q2_k_row {
    ($w:expr, $act:expr, $nb:expr, [$($pre:literal),*], [$($setup:literal),* $(,)?],
     [$($steps:expr),* $(,)?], [$($acc:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let mut sumf = 0.0f32;
        for b in 0..$nb {
            let x = w.as_ptr().add(b * Q2_K_BYTES);
            let y = act.as_ptr().add(b * Q8_K_BYTES);
            let (isum, summs): (i32, i32);
            let (d, dmin): (f32, f32);
            asm!(
                $($pre,)*
                "ld1 {{v4.16b}}, [{x}]",
                "ldr q0, [{x}, #16]",
                "ldr q1, [{x}, #32]",
                "ldr q2, [{x}, #48]",
                "ldr q3, [{x}, #64]",
                "movi v7.16b, #3",
                "movi v6.16b, #0x0f",
                "and v5.16b, v4.16b, v6.16b",
                "ushr v6.16b, v4.16b, #4",
                // summs: min j (i16) times bsum j, widened to i32 and summed.
                "ld1 {{v16.8h, v17.8h}}, [{bsums}]",
                "uxtl v18.8h, v6.8b",
                "uxtl2 v19.8h, v6.16b",
                "smull v28.4s, v16.4h, v18.4h",
                "smlal2 v28.4s, v16.8h, v18.8h",
                "smlal v28.4s, v17.4h, v19.4h",
                "smlal2 v28.4s, v17.8h, v19.8h",
                "addv s28, v28.4s",
                "fmov {summs:w}, s28",
                "movi v24.4s, #0",
                "movi v25.4s, #0",
                "movi v26.4s, #0",
                "movi v27.4s, #0",
                $($setup,)*
                $($steps,)*
                $($acc,)*
                "addv s24, v24.4s",
                "fmov {isum:w}, s24",
                "ldr {d:h}, [{x}, #80]",
                "fcvt {d:s}, {d:h}",
                "ldr {dmin:h}, [{x}, #82]",
                "fcvt {dmin:s}, {dmin:h}",
                x = in(reg) x,
                bsums = in(reg) y.add(260),
                q8 = inout(reg) y.add(4) => _,
                isum = out(reg) isum,
                summs = out(reg) summs,
                d = out(vreg) d,
                dmin = out(vreg) dmin,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                out("v5") _, out("v6") _, out("v7") _, out("v16") _, out("v17") _,
                out("v18") _, out("v19") _, out("v20") _, out("v21") _, out("v22") _,
                out("v23") _, out("v24") _, out("v25") _, out("v26") _, out("v27") _,
                out("v28") _, out("v29") _, out("v30") _, out("v31") _,
                options(nostack, readonly),
            );
            // The twin's f32 steps, in its order (Rust never fuses or reorders them).
            let dy = f32::from_le_bytes([*y, *y.add(1), *y.add(2), *y.add(3)]);
            let dall = dy * d;
            let dmin = dy * dmin;
            sumf += dall * isum as f32 - dmin * summs as f32;
        }
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
            ["uxtl v4.8h, v5.8b", "uxtl2 v5.8h, v5.16b"],
            [
                q2_k_neon_step!(
                    "v0",
                    "v1",
                    0,
                    "v4",
                    0,
                    1,
                    ["v16", "v17", "v18", "v19", "v20", "v21"]
                ),
                q2_k_neon_step!(
                    "v0",
                    "v1",
                    2,
                    "v4",
                    2,
                    3,
                    ["v22", "v23", "v28", "v29", "v30", "v31"]
                ),
                q2_k_neon_step!(
                    "v0",
                    "v1",
                    4,
                    "v4",
                    4,
                    5,
                    ["v16", "v17", "v18", "v19", "v20", "v21"]
                ),
                q2_k_neon_step!(
                    "v0",
                    "v1",
                    6,
                    "v4",
                    6,
                    7,
                    ["v22", "v23", "v28", "v29", "v30", "v31"]
                ),
                q2_k_neon_step!(
                    "v2",
                    "v3",
                    0,
                    "v5",
                    0,
                    1,
                    ["v16", "v17", "v18", "v19", "v20", "v21"]
                ),
                q2_k_neon_step!(
                    "v2",
                    "v3",
                    2,
                    "v5",
                    2,
                    3,
                    ["v22", "v23", "v28", "v29", "v30", "v31"]
                ),
                q2_k_neon_step!(
                    "v2",
                    "v3",
                    4,
                    "v5",
                    4,
                    5,
                    ["v16", "v17", "v18", "v19", "v20", "v21"]
                ),
                q2_k_neon_step!(
                    "v2",
                    "v3",
                    6,
                    "v5",
                    6,
                    7,
                    ["v22", "v23", "v28", "v29", "v30", "v31"]
                ),
            ],
            [
                "add v24.4s, v24.4s, v25.4s",
                "add v26.4s, v26.4s, v27.4s",
                "add v24.4s, v24.4s, v26.4s",
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
            // The 16 scales as i32: 0..3 in v4, 4..7 in v5, 8..11 in v6, 12..15 in v27 (v26
            // and v27 are not accumulators here).
            [
                "uxtl v16.8h, v5.8b",
                "uxtl2 v17.8h, v5.16b",
                "uxtl v4.4s, v16.4h",
                "uxtl2 v5.4s, v16.8h",
                "uxtl v6.4s, v17.4h",
                "uxtl2 v27.4s, v17.8h",
            ],
            [
                q2_k_sdot_step!(
                    "v0",
                    "v1",
                    0,
                    "v4.s[0]",
                    "v4.s[1]",
                    ["v16", "v17", "v18", "v19", "v20", "v21"]
                ),
                q2_k_sdot_step!(
                    "v0",
                    "v1",
                    2,
                    "v4.s[2]",
                    "v4.s[3]",
                    ["v22", "v23", "v28", "v29", "v30", "v31"]
                ),
                q2_k_sdot_step!(
                    "v0",
                    "v1",
                    4,
                    "v5.s[0]",
                    "v5.s[1]",
                    ["v16", "v17", "v18", "v19", "v20", "v21"]
                ),
                q2_k_sdot_step!(
                    "v0",
                    "v1",
                    6,
                    "v5.s[2]",
                    "v5.s[3]",
                    ["v22", "v23", "v28", "v29", "v30", "v31"]
                ),
                q2_k_sdot_step!(
                    "v2",
                    "v3",
                    0,
                    "v6.s[0]",
                    "v6.s[1]",
                    ["v16", "v17", "v18", "v19", "v20", "v21"]
                ),
                q2_k_sdot_step!(
                    "v2",
                    "v3",
                    2,
                    "v6.s[2]",
                    "v6.s[3]",
                    ["v22", "v23", "v28", "v29", "v30", "v31"]
                ),
                q2_k_sdot_step!(
                    "v2",
                    "v3",
                    4,
                    "v27.s[0]",
                    "v27.s[1]",
                    ["v16", "v17", "v18", "v19", "v20", "v21"]
                ),
                q2_k_sdot_step!(
                    "v2",
                    "v3",
                    6,
                    "v27.s[2]",
                    "v27.s[3]",
                    ["v22", "v23", "v28", "v29", "v30", "v31"]
                ),
            ],
            ["add v24.4s, v24.4s, v25.4s"]
        )
    }
}
