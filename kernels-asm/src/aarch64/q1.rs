//! Q4_1 and Q5_1 . Q8_1 (#33). Q4_1 block (20 bytes): f16 d at 0, f16 m at 2, 16 nibble bytes
//! at 4 (element j in the low nibble of byte j, j + 16 in its high nibble). Q5_1 (24 bytes):
//! d, m, the fifth bits as a u32 at 4 (bit j for element j), the nibbles at 8. Q8_1 (36
//! bytes): f16 d at 0, f16 s at 2, 32 signed bytes at 4.
//! Scalar twins: `smolrun_core::quant::{q4_1, q5_1}::vec_dot`.
//!
//! Each block's exact integer dot in asm (ARMv8.0: `smull`/`smlal`, i16 lanes of 4 products of
//! at most 31 * 128, then `saddlv`; dotprod: two `sdot`), then the twin's float step in its
//! order (`sumf += (d * dy) * sumi + m * s`, one instruction each): bit for bit the twins. The fifth
//! bits: qh's byte j / 8 spread to byte j by `tbl`, tested against bit j % 8 by `cmtst`.
//! Q4_1 runs its pairs of blocks in one asm loop, each trip a pair's integer dots beside the
//! previous pair's float steps ([`q41_row!`]); Q5_1 one asm block a pair ([`q1_row!`]).

use super::{whole_blocks, QK};
use core::arch::aarch64::uint8x16_t;
use core::arch::asm;

const Q4_1_BYTES: usize = 20;
const Q5_1_BYTES: usize = 24;
const Q8_1_BYTES: usize = 36;

/// `tbl` indices spreading qh's bytes 0, 1 (elements 0..16) and 2, 3 (16..32); the bit of
/// each byte; the nibble mask; the fifth bit's value.
const SPREAD_LO: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
const SPREAD_HI: [u8; 16] = [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3];
const BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];

/// One row, two blocks a trip (`$pair`: block A at `{x}`/`{y}` and block B at `{x2}`/`{y2}`
/// on disjoint registers, ordered by the list scheduler of tools/lowbit-asm.py
/// (`emit q41|q51 neon|dot single|pair`) so that the in-order A53 and A55 overlap them; A's
/// float step adds to sumf before B's, the twin's order), a lone last block by `$single`.
/// Each leaves the block's integer dot in s7 (B: s27), then takes the twin's float step; the
/// constants sit in registers for the whole row.
macro_rules! q1_row {
    ($n:expr, $w:expr, $act:expr, $bytes:expr, [$($ext:literal),*],
     [$($single:literal),* $(,)?], [$($pair:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let nb = whole_blocks($n, QK, w, $bytes, act, Q8_1_BYTES);
        // SAFETY (of the transmutes): 16 bytes into a 16-byte vector.
        let (lo, hi, bits, m0f, m10): (uint8x16_t, uint8x16_t, uint8x16_t, uint8x16_t, uint8x16_t) = unsafe {
            (
                core::mem::transmute::<[u8; 16], uint8x16_t>(SPREAD_LO),
                core::mem::transmute::<[u8; 16], uint8x16_t>(SPREAD_HI),
                core::mem::transmute::<[u8; 16], uint8x16_t>(BITS),
                core::mem::transmute::<[u8; 16], uint8x16_t>([0x0f; 16]),
                core::mem::transmute::<[u8; 16], uint8x16_t>([0x10; 16]),
            )
        };
        let mut sumf = 0.0f32;
        let mut i = 0;
        while i + 2 <= nb {
            let xb = &w[i * $bytes..(i + 2) * $bytes];
            let yb = &act[i * Q8_1_BYTES..(i + 2) * Q8_1_BYTES];
            // SAFETY: both pairs of blocks lie inside the slices (i + 2 <= nb); the caller
            // vouches for the instructions of the face (dotprod for `sdot`).
            unsafe {
                asm!(
                    $($ext,)*
                    $($pair,)*
                    "// {lo:v} {hi:v} {bits:v} {m10:v} {m0f:v}",
                    x = in(reg) xb.as_ptr(),
                    y = in(reg) yb.as_ptr(),
                    x2 = in(reg) xb.as_ptr().add($bytes),
                    y2 = in(reg) yb.as_ptr().add(Q8_1_BYTES),
                    lo = in(vreg) lo,
                    hi = in(vreg) hi,
                    bits = in(vreg) bits,
                    m0f = in(vreg) m0f,
                    m10 = in(vreg) m10,
                    sumf = inout(vreg) sumf,
                    out("v0") _, out("v1") _, out("v2") _, out("v4") _, out("v5") _,
                    out("v6") _, out("v7") _, out("v8") _, out("v9") _, out("v10") _,
                    out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
                    out("v21") _, out("v22") _, out("v24") _, out("v25") _, out("v26") _,
                    out("v27") _, out("v28") _, out("v29") _, out("v30") _,
                    options(nostack, readonly, pure),
                );
            }
            i += 2;
        }
        if i < nb {
            let xb = &w[i * $bytes..(i + 1) * $bytes];
            let yb = &act[i * Q8_1_BYTES..(i + 1) * Q8_1_BYTES];
            // SAFETY: as above, one block.
            unsafe {
                asm!(
                    $($ext,)*
                    $($single,)*
                    "// {lo:v} {hi:v} {bits:v} {m10:v} {m0f:v}",
                    x = in(reg) xb.as_ptr(),
                    y = in(reg) yb.as_ptr(),
                    lo = in(vreg) lo,
                    hi = in(vreg) hi,
                    bits = in(vreg) bits,
                    m0f = in(vreg) m0f,
                    m10 = in(vreg) m10,
                    sumf = inout(vreg) sumf,
                    out("v0") _, out("v1") _, out("v2") _, out("v4") _, out("v5") _,
                    out("v6") _, out("v7") _, out("v8") _, out("v9") _, out("v10") _,
                    out("v16") _, out("v17") _, out("v18") _, out("v19") _,
                    options(nostack, readonly, pure),
                );
            }
        }
        sumf
    }};
}

/// Q4_1's row: the pairs of blocks in one asm loop (tools/lowbit-asm.py `emit q41 neon|dot
/// first|loop|last`): `$first` takes pair 0's integer dots (A into s7, B into s27), each trip of
/// `$loop` pair i - 1's float steps (A's then B's, the twin's order; their d, m, dy and s at
/// negative offsets from the pointers) beside pair i's dots, `$last` the last pair's float
/// steps. A lone last block runs as in [`q1_row!`].
macro_rules! q41_row {
    ($n:expr, $w:expr, $act:expr, [$($ext:literal),*], [$($single:literal),* $(,)?],
     [$($first:literal),* $(,)?], [$($loop:literal),* $(,)?], [$($last:literal),* $(,)?]) => {{
        let (w, act): (&[u8], &[u8]) = ($w, $act);
        let nb = whole_blocks($n, QK, w, Q4_1_BYTES, act, Q8_1_BYTES);
        // SAFETY (of the transmute): 16 bytes into a 16-byte vector.
        let m0f: uint8x16_t = unsafe { core::mem::transmute::<[u8; 16], uint8x16_t>([0x0f; 16]) };
        let mut sumf = 0.0f32;
        let pairs = nb / 2;
        if pairs > 0 {
            // SAFETY: the 2 * pairs blocks lie inside both slices (whole_blocks); the caller
            // vouches for the instructions of the face (dotprod for `sdot`).
            unsafe {
                asm!(
                    $($ext,)*
                    $($first,)*
                    "subs {n}, {n}, #1",
                    "b.eq 3f",
                    "2:",
                    $($loop,)*
                    "3:",
                    $($last,)*
                    x = inout(reg) w.as_ptr() => _,
                    y = inout(reg) act.as_ptr() => _,
                    n = inout(reg) pairs => _,
                    m0f = in(vreg) m0f,
                    sumf = inout(vreg) sumf,
                    out("v0") _, out("v1") _, out("v2") _, out("v4") _, out("v5") _,
                    out("v6") _, out("v7") _, out("v16") _, out("v17") _, out("v18") _,
                    out("v19") _, out("v20") _, out("v21") _, out("v22") _, out("v24") _,
                    out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _,
                    out("v30") _, out("v31") _,
                    options(nostack, readonly, pure),
                );
            }
        }
        if nb % 2 == 1 {
            let i = nb - 1;
            let xb = &w[i * Q4_1_BYTES..(i + 1) * Q4_1_BYTES];
            let yb = &act[i * Q8_1_BYTES..(i + 1) * Q8_1_BYTES];
            // SAFETY: as above, one block.
            unsafe {
                asm!(
                    $($ext,)*
                    $($single,)*
                    x = in(reg) xb.as_ptr(),
                    y = in(reg) yb.as_ptr(),
                    m0f = in(vreg) m0f,
                    sumf = inout(vreg) sumf,
                    out("v0") _, out("v1") _, out("v2") _, out("v4") _, out("v5") _,
                    out("v6") _, out("v7") _, out("v16") _, out("v17") _, out("v18") _,
                    options(nostack, readonly, pure),
                );
            }
        }
        sumf
    }};
}

/// Q4_1 . Q8_1 with widening multiplies (ARMv8.0), bit for bit the scalar twin.
pub fn vec_dot_q4_1_q8_1_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    q41_row!(
        n,
        w,
        act,
        [],
        [
            "ldr q0, [{x}, #4]",
            "ldr q1, [{y}, #4]",
            "ldr q2, [{y}, #20]",
            "and v4.16b, v0.16b, {m0f:v}.16b",
            "ushr v5.16b, v0.16b, #4",
            "smull v6.8h, v4.8b, v1.8b",
            "smull v7.8h, v5.8b, v2.8b",
            "smlal2 v6.8h, v4.16b, v1.16b",
            "smlal2 v7.8h, v5.16b, v2.16b",
            "add v6.8h, v6.8h, v7.8h",
            "saddlv s7, v6.8h",
            "ldr s16, [{x}]",
            "ldr s17, [{y}]",
            "fcvtl v16.4s, v16.4h",
            "fcvtl v17.4s, v17.4h",
            "fmul v16.2s, v16.2s, v17.2s",
            "scvtf s7, s7",
            "dup s18, v16.s[1]",
            "fmul s7, s16, s7",
            "fadd s7, s7, s18",
            "fadd {sumf:s}, {sumf:s}, s7",
        ],
        [
            "ldr q0, [{x}, #4]",
            "ldr q1, [{y}, #4]",
            "ldr q2, [{y}, #20]",
            "ldr q20, [{x}, #24]",
            "ldr q21, [{y}, #40]",
            "ldr q22, [{y}, #56]",
            "and v4.16b, v0.16b, {m0f:v}.16b",
            "ushr v5.16b, v0.16b, #4",
            "add {x}, {x}, #40",
            "add {y}, {y}, #72",
            "and v24.16b, v20.16b, {m0f:v}.16b",
            "ushr v25.16b, v20.16b, #4",
            "smull v6.8h, v4.8b, v1.8b",
            "smull v7.8h, v5.8b, v2.8b",
            "smull v26.8h, v24.8b, v21.8b",
            "smull v27.8h, v25.8b, v22.8b",
            "smlal2 v6.8h, v4.16b, v1.16b",
            "smlal2 v7.8h, v5.16b, v2.16b",
            "smlal2 v26.8h, v24.16b, v21.16b",
            "smlal2 v27.8h, v25.16b, v22.16b",
            "add v6.8h, v6.8h, v7.8h",
            "add v26.8h, v26.8h, v27.8h",
            "saddlv s7, v6.8h",
            "saddlv s27, v26.8h",
        ],
        [
            "ldur s16, [{x}, #-40]",
            "ldur s17, [{y}, #-72]",
            "scvtf s19, s7",
            "ldur s28, [{x}, #-20]",
            "ldur s29, [{y}, #-36]",
            "scvtf s31, s27",
            "ldr q0, [{x}, #4]",
            "ldr q1, [{y}, #4]",
            "ldr q2, [{y}, #20]",
            "ldr q20, [{x}, #24]",
            "ldr q21, [{y}, #40]",
            "ldr q22, [{y}, #56]",
            "subs {n}, {n}, #1",
            "fcvtl v16.4s, v16.4h",
            "fcvtl v17.4s, v17.4h",
            "fcvtl v28.4s, v28.4h",
            "fcvtl v29.4s, v29.4h",
            "and v4.16b, v0.16b, {m0f:v}.16b",
            "ushr v5.16b, v0.16b, #4",
            "add {x}, {x}, #40",
            "add {y}, {y}, #72",
            "and v24.16b, v20.16b, {m0f:v}.16b",
            "ushr v25.16b, v20.16b, #4",
            "fmul v16.2s, v16.2s, v17.2s",
            "fmul v28.2s, v28.2s, v29.2s",
            "smull v6.8h, v4.8b, v1.8b",
            "smull v7.8h, v5.8b, v2.8b",
            "smull v26.8h, v24.8b, v21.8b",
            "smull v27.8h, v25.8b, v22.8b",
            "dup s18, v16.s[1]",
            "fmul s19, s16, s19",
            "dup s30, v28.s[1]",
            "fmul s31, s28, s31",
            "smlal2 v6.8h, v4.16b, v1.16b",
            "smlal2 v7.8h, v5.16b, v2.16b",
            "smlal2 v26.8h, v24.16b, v21.16b",
            "smlal2 v27.8h, v25.16b, v22.16b",
            "fadd s19, s19, s18",
            "fadd s31, s31, s30",
            "add v6.8h, v6.8h, v7.8h",
            "add v26.8h, v26.8h, v27.8h",
            "fadd {sumf:s}, {sumf:s}, s19",
            "saddlv s7, v6.8h",
            "saddlv s27, v26.8h",
            "fadd {sumf:s}, {sumf:s}, s31",
            "b.ne 2b",
        ],
        [
            "ldur s16, [{x}, #-40]",
            "ldur s17, [{y}, #-72]",
            "scvtf s19, s7",
            "ldur s28, [{x}, #-20]",
            "ldur s29, [{y}, #-36]",
            "scvtf s31, s27",
            "fcvtl v16.4s, v16.4h",
            "fcvtl v17.4s, v17.4h",
            "fcvtl v28.4s, v28.4h",
            "fcvtl v29.4s, v29.4h",
            "fmul v16.2s, v16.2s, v17.2s",
            "fmul v28.2s, v28.2s, v29.2s",
            "dup s18, v16.s[1]",
            "fmul s19, s16, s19",
            "dup s30, v28.s[1]",
            "fmul s31, s28, s31",
            "fadd s19, s19, s18",
            "fadd s31, s31, s30",
            "fadd {sumf:s}, {sumf:s}, s19",
            "fadd {sumf:s}, {sumf:s}, s31",
        ]
    )
}

/// Q4_1 . Q8_1 with `sdot`, bit for bit the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_q4_1_q8_1_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    q41_row!(
        n,
        w,
        act,
        [".arch_extension dotprod"],
        [
            "ldr q0, [{x}, #4]",
            "ldr q1, [{y}, #4]",
            "ldr q2, [{y}, #20]",
            "movi v6.4s, #0",
            "and v4.16b, v0.16b, {m0f:v}.16b",
            "ushr v5.16b, v0.16b, #4",
            "sdot v6.4s, v4.16b, v1.16b",
            "sdot v6.4s, v5.16b, v2.16b",
            "addv s7, v6.4s",
            "ldr s16, [{x}]",
            "ldr s17, [{y}]",
            "fcvtl v16.4s, v16.4h",
            "fcvtl v17.4s, v17.4h",
            "fmul v16.2s, v16.2s, v17.2s",
            "scvtf s7, s7",
            "dup s18, v16.s[1]",
            "fmul s7, s16, s7",
            "fadd s7, s7, s18",
            "fadd {sumf:s}, {sumf:s}, s7",
        ],
        [
            "ldr q0, [{x}, #4]",
            "ldr q1, [{y}, #4]",
            "ldr q2, [{y}, #20]",
            "movi v6.4s, #0",
            "ldr q20, [{x}, #24]",
            "ldr q21, [{y}, #40]",
            "ldr q22, [{y}, #56]",
            "movi v26.4s, #0",
            "and v4.16b, v0.16b, {m0f:v}.16b",
            "ushr v5.16b, v0.16b, #4",
            "add {x}, {x}, #40",
            "add {y}, {y}, #72",
            "and v24.16b, v20.16b, {m0f:v}.16b",
            "ushr v25.16b, v20.16b, #4",
            "sdot v6.4s, v4.16b, v1.16b",
            "sdot v26.4s, v24.16b, v21.16b",
            "sdot v6.4s, v5.16b, v2.16b",
            "sdot v26.4s, v25.16b, v22.16b",
            "addv s7, v6.4s",
            "addv s27, v26.4s",
        ],
        [
            "ldur s16, [{x}, #-40]",
            "ldur s17, [{y}, #-72]",
            "scvtf s19, s7",
            "ldur s28, [{x}, #-20]",
            "ldur s29, [{y}, #-36]",
            "scvtf s31, s27",
            "ldr q0, [{x}, #4]",
            "ldr q1, [{y}, #4]",
            "ldr q2, [{y}, #20]",
            "movi v6.4s, #0",
            "ldr q20, [{x}, #24]",
            "ldr q21, [{y}, #40]",
            "ldr q22, [{y}, #56]",
            "movi v26.4s, #0",
            "subs {n}, {n}, #1",
            "fcvtl v16.4s, v16.4h",
            "fcvtl v17.4s, v17.4h",
            "fcvtl v28.4s, v28.4h",
            "fcvtl v29.4s, v29.4h",
            "and v4.16b, v0.16b, {m0f:v}.16b",
            "ushr v5.16b, v0.16b, #4",
            "add {x}, {x}, #40",
            "add {y}, {y}, #72",
            "and v24.16b, v20.16b, {m0f:v}.16b",
            "ushr v25.16b, v20.16b, #4",
            "fmul v16.2s, v16.2s, v17.2s",
            "fmul v28.2s, v28.2s, v29.2s",
            "sdot v6.4s, v4.16b, v1.16b",
            "sdot v26.4s, v24.16b, v21.16b",
            "dup s18, v16.s[1]",
            "fmul s19, s16, s19",
            "dup s30, v28.s[1]",
            "fmul s31, s28, s31",
            "sdot v6.4s, v5.16b, v2.16b",
            "sdot v26.4s, v25.16b, v22.16b",
            "fadd s19, s19, s18",
            "fadd s31, s31, s30",
            "addv s7, v6.4s",
            "addv s27, v26.4s",
            "fadd {sumf:s}, {sumf:s}, s19",
            "fadd {sumf:s}, {sumf:s}, s31",
            "b.ne 2b",
        ],
        [
            "ldur s16, [{x}, #-40]",
            "ldur s17, [{y}, #-72]",
            "scvtf s19, s7",
            "ldur s28, [{x}, #-20]",
            "ldur s29, [{y}, #-36]",
            "scvtf s31, s27",
            "fcvtl v16.4s, v16.4h",
            "fcvtl v17.4s, v17.4h",
            "fcvtl v28.4s, v28.4h",
            "fcvtl v29.4s, v29.4h",
            "fmul v16.2s, v16.2s, v17.2s",
            "fmul v28.2s, v28.2s, v29.2s",
            "dup s18, v16.s[1]",
            "fmul s19, s16, s19",
            "dup s30, v28.s[1]",
            "fmul s31, s28, s31",
            "fadd s19, s19, s18",
            "fadd s31, s31, s30",
            "fadd {sumf:s}, {sumf:s}, s19",
            "fadd {sumf:s}, {sumf:s}, s31",
        ]
    )
}

/// Q5_1 . Q8_1 with widening multiplies (ARMv8.0), bit for bit the scalar twin.
pub fn vec_dot_q5_1_q8_1_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    q1_row!(
        n,
        w,
        act,
        Q5_1_BYTES,
        [],
        [
            "ldr q0, [{x}, #8]",
            "ldr s8, [{x}, #4]",
            "ldr q1, [{y}, #4]",
            "ldr q2, [{y}, #20]",
            "tbl v9.16b, {{v8.16b}}, {lo:v}.16b",
            "tbl v10.16b, {{v8.16b}}, {hi:v}.16b",
            "and v4.16b, v0.16b, {m0f:v}.16b",
            "ushr v5.16b, v0.16b, #4",
            "cmtst v9.16b, v9.16b, {bits:v}.16b",
            "cmtst v10.16b, v10.16b, {bits:v}.16b",
            "bit v4.16b, v9.16b, {m10:v}.16b",
            "bit v5.16b, v10.16b, {m10:v}.16b",
            "smull v6.8h, v4.8b, v1.8b",
            "smull v7.8h, v5.8b, v2.8b",
            "smlal2 v6.8h, v4.16b, v1.16b",
            "smlal2 v7.8h, v5.16b, v2.16b",
            "add v6.8h, v6.8h, v7.8h",
            "saddlv s7, v6.8h",
            "ldr s16, [{x}]",
            "ldr s17, [{y}]",
            "fcvtl v16.4s, v16.4h",
            "fcvtl v17.4s, v17.4h",
            "fmul v16.2s, v16.2s, v17.2s",
            "scvtf s7, s7",
            "dup s18, v16.s[1]",
            "fmul s7, s16, s7",
            "fadd s7, s7, s18",
            "fadd {sumf:s}, {sumf:s}, s7",
        ],
        [
            "ldr q0, [{x}, #8]",
            "ldr q20, [{x2}, #8]",
            "ldr s8, [{x}, #4]",
            "ldr s28, [{x2}, #4]",
            "ldr q1, [{y}, #4]",
            "ldr q21, [{y2}, #4]",
            "ldr q2, [{y}, #20]",
            "ldr q22, [{y2}, #20]",
            "ldr s16, [{x}]",
            "ldr s17, [{y}]",
            "and v4.16b, v0.16b, {m0f:v}.16b",
            "ushr v5.16b, v0.16b, #4",
            "and v24.16b, v20.16b, {m0f:v}.16b",
            "ushr v25.16b, v20.16b, #4",
            "tbl v9.16b, {{v8.16b}}, {lo:v}.16b",
            "tbl v10.16b, {{v8.16b}}, {hi:v}.16b",
            "tbl v29.16b, {{v28.16b}}, {lo:v}.16b",
            "tbl v30.16b, {{v28.16b}}, {hi:v}.16b",
            "fcvtl v16.4s, v16.4h",
            "fcvtl v17.4s, v17.4h",
            "ldr s20, [{x2}]",
            "cmtst v9.16b, v9.16b, {bits:v}.16b",
            "cmtst v10.16b, v10.16b, {bits:v}.16b",
            "cmtst v29.16b, v29.16b, {bits:v}.16b",
            "cmtst v30.16b, v30.16b, {bits:v}.16b",
            "fcvtl v20.4s, v20.4h",
            "fmul v16.2s, v16.2s, v17.2s",
            "bit v4.16b, v9.16b, {m10:v}.16b",
            "bit v5.16b, v10.16b, {m10:v}.16b",
            "bit v24.16b, v29.16b, {m10:v}.16b",
            "bit v25.16b, v30.16b, {m10:v}.16b",
            "dup s18, v16.s[1]",
            "smull v6.8h, v4.8b, v1.8b",
            "smull v7.8h, v5.8b, v2.8b",
            "smull v26.8h, v24.8b, v21.8b",
            "smull v27.8h, v25.8b, v22.8b",
            "smlal2 v6.8h, v4.16b, v1.16b",
            "smlal2 v7.8h, v5.16b, v2.16b",
            "smlal2 v26.8h, v24.16b, v21.16b",
            "ldr s21, [{y2}]",
            "smlal2 v27.8h, v25.16b, v22.16b",
            "add v6.8h, v6.8h, v7.8h",
            "fcvtl v21.4s, v21.4h",
            "add v26.8h, v26.8h, v27.8h",
            "saddlv s7, v6.8h",
            "fmul v20.2s, v20.2s, v21.2s",
            "saddlv s27, v26.8h",
            "scvtf s7, s7",
            "dup s22, v20.s[1]",
            "scvtf s27, s27",
            "fmul s7, s16, s7",
            "fmul s27, s20, s27",
            "fadd s7, s7, s18",
            "fadd s27, s27, s22",
            "fadd {sumf:s}, {sumf:s}, s7",
            "fadd {sumf:s}, {sumf:s}, s27",
        ]
    )
}

/// Q5_1 . Q8_1 with `sdot`, bit for bit the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_q5_1_q8_1_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    q1_row!(
        n,
        w,
        act,
        Q5_1_BYTES,
        [".arch_extension dotprod"],
        [
            "ldr q0, [{x}, #8]",
            "ldr s8, [{x}, #4]",
            "ldr q1, [{y}, #4]",
            "ldr q2, [{y}, #20]",
            "movi v6.4s, #0",
            "tbl v9.16b, {{v8.16b}}, {lo:v}.16b",
            "tbl v10.16b, {{v8.16b}}, {hi:v}.16b",
            "and v4.16b, v0.16b, {m0f:v}.16b",
            "ushr v5.16b, v0.16b, #4",
            "cmtst v9.16b, v9.16b, {bits:v}.16b",
            "cmtst v10.16b, v10.16b, {bits:v}.16b",
            "bit v4.16b, v9.16b, {m10:v}.16b",
            "bit v5.16b, v10.16b, {m10:v}.16b",
            "sdot v6.4s, v4.16b, v1.16b",
            "sdot v6.4s, v5.16b, v2.16b",
            "addv s7, v6.4s",
            "ldr s16, [{x}]",
            "ldr s17, [{y}]",
            "fcvtl v16.4s, v16.4h",
            "fcvtl v17.4s, v17.4h",
            "fmul v16.2s, v16.2s, v17.2s",
            "scvtf s7, s7",
            "dup s18, v16.s[1]",
            "fmul s7, s16, s7",
            "fadd s7, s7, s18",
            "fadd {sumf:s}, {sumf:s}, s7",
        ],
        [
            "ldr q0, [{x}, #8]",
            "ldr q20, [{x2}, #8]",
            "ldr s8, [{x}, #4]",
            "ldr s28, [{x2}, #4]",
            "ldr q1, [{y}, #4]",
            "ldr q21, [{y2}, #4]",
            "ldr q2, [{y}, #20]",
            "ldr q22, [{y2}, #20]",
            "movi v6.4s, #0",
            "movi v26.4s, #0",
            "ldr s16, [{x}]",
            "ldr s17, [{y}]",
            "and v4.16b, v0.16b, {m0f:v}.16b",
            "ushr v5.16b, v0.16b, #4",
            "and v24.16b, v20.16b, {m0f:v}.16b",
            "ushr v25.16b, v20.16b, #4",
            "tbl v9.16b, {{v8.16b}}, {lo:v}.16b",
            "tbl v10.16b, {{v8.16b}}, {hi:v}.16b",
            "tbl v29.16b, {{v28.16b}}, {lo:v}.16b",
            "tbl v30.16b, {{v28.16b}}, {hi:v}.16b",
            "fcvtl v16.4s, v16.4h",
            "fcvtl v17.4s, v17.4h",
            "ldr s20, [{x2}]",
            "cmtst v9.16b, v9.16b, {bits:v}.16b",
            "cmtst v10.16b, v10.16b, {bits:v}.16b",
            "cmtst v29.16b, v29.16b, {bits:v}.16b",
            "cmtst v30.16b, v30.16b, {bits:v}.16b",
            "fcvtl v20.4s, v20.4h",
            "fmul v16.2s, v16.2s, v17.2s",
            "bit v4.16b, v9.16b, {m10:v}.16b",
            "bit v5.16b, v10.16b, {m10:v}.16b",
            "bit v24.16b, v29.16b, {m10:v}.16b",
            "bit v25.16b, v30.16b, {m10:v}.16b",
            "dup s18, v16.s[1]",
            "sdot v6.4s, v4.16b, v1.16b",
            "sdot v26.4s, v24.16b, v21.16b",
            "ldr s21, [{y2}]",
            "sdot v6.4s, v5.16b, v2.16b",
            "sdot v26.4s, v25.16b, v22.16b",
            "fcvtl v21.4s, v21.4h",
            "addv s7, v6.4s",
            "addv s27, v26.4s",
            "fmul v20.2s, v20.2s, v21.2s",
            "scvtf s7, s7",
            "scvtf s27, s27",
            "dup s22, v20.s[1]",
            "fmul s7, s16, s7",
            "fmul s27, s20, s27",
            "fadd s7, s7, s18",
            "fadd s27, s27, s22",
            "fadd {sumf:s}, {sumf:s}, s7",
            "fadd {sumf:s}, {sumf:s}, s27",
        ]
    )
}
