//! Q5_0 . Q8_0: weight blocks of 32 five-bit quants (22 bytes: f16 d at 0, u32 qh at 2 whose
//! bit j is the fifth bit of element j, 16 nibble bytes at 6 in Q4_0 order), offset by 16.
//! Scalar twin: `smolrun_core::quant::q5_0::vec_dot`, `sumf += (dx * dy) * sumi as f32`.

use super::{whole_blocks, Q8_0_BYTES, QK};
use core::arch::aarch64::uint8x16_t;
use core::arch::asm;

const Q5_0_BYTES: usize = 22;

/// Byte j of a 16-byte vector tests bit j % 8 of the qh byte broadcast into it.
const BIT_OF_LANE: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];

/// One asm block per 32-element block. The fifth bits: qh's 4 bytes are spread so that lane j
/// of v20 holds byte j / 8 (elements 0..15) and lane j of v21 byte 2 + j / 8 (16..31), then
/// `cmtst` against `BIT_OF_LANE` turns bit j into 0xFF. `$int` leaves `sumi` in s6.
macro_rules! q5_0_row {
    ($w:expr, $act:expr, $nb:expr, [$($int:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        // SAFETY (of the transmute): [u8; 16] and uint8x16_t have the same size, any bits valid.
        let bit_of_lane: uint8x16_t = core::mem::transmute(BIT_OF_LANE);
        let mut sumf = 0.0f32;
        for b in 0..$nb {
            asm!(
                "ldr h16, [{x}]",
                "ldr h17, [{y}]",
                "ldur s20, [{x}, #2]",
                "ldur q0, [{x}, #6]",
                "ldur q2, [{y}, #2]",
                "ldur q3, [{y}, #18]",
                "zip1 v20.16b, v20.16b, v20.16b",
                "zip1 v20.16b, v20.16b, v20.16b",
                "zip2 v21.16b, v20.16b, v20.16b",
                "zip1 v20.16b, v20.16b, v20.16b",
                "cmtst v20.16b, v20.16b, {bits:v}.16b",
                "cmtst v21.16b, v21.16b, {bits:v}.16b",
                "movi v31.16b, #0x10",
                "movi v30.16b, #0x0f",
                "and v20.16b, v20.16b, v31.16b",
                "and v21.16b, v21.16b, v31.16b",
                "and v4.16b, v0.16b, v30.16b",
                "ushr v5.16b, v0.16b, #4",
                "orr v4.16b, v4.16b, v20.16b",
                "orr v5.16b, v5.16b, v21.16b",
                "sub v4.16b, v4.16b, v31.16b",
                "sub v5.16b, v5.16b, v31.16b",
                $($int,)*
                "scvtf s6, s6",
                "fcvt s16, h16",
                "fcvt s17, h17",
                "fmul s16, s16, s17",
                "fmul s6, s16, s6",
                "fadd {sumf:s}, {sumf:s}, s6",
                x = in(reg) w.as_ptr().add(b * Q5_0_BYTES),
                y = in(reg) act.as_ptr().add(b * Q8_0_BYTES),
                bits = in(vreg) bit_of_lane,
                sumf = inout(vreg) sumf,
                out("v0") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _,
                out("v6") _, out("v16") _, out("v17") _, out("v20") _, out("v21") _,
                out("v30") _, out("v31") _,
                options(nostack, readonly, pure),
            );
        }
        sumf
    }};
}

/// Q5_0 . Q8_0 with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_q5_0_q8_0_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK, w, Q5_0_BYTES, act, Q8_0_BYTES);
    // SAFETY: blocks 0..nb lie inside both slices; only base aarch64 NEON instructions.
    // |q - 16| <= 16 and |y| <= 128: each i16 lane sums 4 products of at most 2048.
    unsafe {
        q5_0_row!(
            w,
            act,
            nb,
            [
                "smull v6.8h, v4.8b, v2.8b",
                "smlal2 v6.8h, v4.16b, v2.16b",
                "smlal v6.8h, v5.8b, v3.8b",
                "smlal2 v6.8h, v5.16b, v3.16b",
                "saddlv s6, v6.8h",
            ]
        )
    }
}

/// Q5_0 . Q8_0 with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_q5_0_q8_0_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK, w, Q5_0_BYTES, act, Q8_0_BYTES);
    // SAFETY: blocks 0..nb lie inside both slices; the caller vouches for dotprod.
    unsafe {
        q5_0_row!(
            w,
            act,
            nb,
            [
                ".arch_extension dotprod",
                "movi v6.4s, #0",
                "sdot v6.4s, v4.16b, v2.16b",
                "sdot v6.4s, v5.16b, v3.16b",
                "addv s6, v6.4s",
            ]
        )
    }
}
