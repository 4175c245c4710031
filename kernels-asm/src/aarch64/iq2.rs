//! IQ2_XXS . Q8_K (#33; IQ2_XS, IQ2_S below; IQ3_XXS and IQ3_S are in iq3.rs). IQ2_XXS super-block (66 bytes): f16 d at 0, then 8 sub-blocks of 8 bytes: 4
//! grid indices (one byte each, into the 256 entries of [`IQ2XXS_GRID`]) and a u32 whose bits
//! 7l..7l+7 are group l's sign field (into the 128 entries of [`KSIGNS64`]) and bits 28..32
//! the sub-block scale s.
//!
//! The integer part runs in `asm!` (`block_sums_*`): per sub-block, the 4 indices and 4 sign
//! fields are cut out with `and`/`ubfx` (8 and 7 bits wide: every table read is in bounds,
//! whatever the file holds) and their entries loaded with `ldr d` at index * 8 (each group of
//! 8 in the low half of its own register); the grid magnitudes take their signs as (g ^ m) - m
//! with the 0x00/0xFF byte masks, then meet the 32 activations: `smull`/`smlal` (four products
//! per i16 lane: at most 4 * 43 * 128 < 2^15) and one widening `smlal` by 2s + 1 into i32
//! lanes, or 64-bit `sdot` and `mla` with dotprod. IQ2_XXS runs two sub-blocks a trip. Each
//! super-block's lanes are added (`addv`) into the scalar twin's exact integer and stored to a
//! small stack buffer; the float part then runs in Rust, the twin's steps in its order
//! (`smolrun_core::quant::iq2_xxs::vec_dot`: sumf += (f16(d) * dy) * bsum, then 0.125 * sumf),
//! so both faces return the scalar result bit for bit.

use super::{whole_blocks, Q8_K_BYTES, QK_K};
use crate::iq_grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, KSIGNS64};
use core::arch::asm;

const IQ2_XXS_BYTES: usize = 66;

/// Super-blocks whose integer sums are gathered before the float part runs.
const RUN: usize = 16;

/// `out[b]` = the exact integer of super-block b (weights from `x`, the first block's qs at
/// byte 2; activations from `y`, the first Q8_K block's quants at byte 4), for b in 0..n
/// (n >= 1), with ARMv8.0 widening multiplies. `$dot` is the per-sub-block product (the
/// faces differ only there).
macro_rules! block_sums {
    ($x:expr, $y:expr, $n:expr, $out:expr, [$($pre:literal),*], [$($dot:literal),*]) => {
        asm!(
            $($pre,)*
            "2:",
            "movi v20.4s, #0",
            "mov {c:w}, #4",
            // Two sub-blocks a trip (A in v0-v7, v16-v19; B in v22-v29, v8-v11), their loads
            // issued before either's first use: the A53 and A55 issue in order and would
            // otherwise wait on each load. Each group of 8 stays in the low half of its
            // register (no lane inserts, which the in-order cores wait on too).
            "3:",
            "ldp {a:w}, {b:w}, [{x}], #8",
            "ldp {a2:w}, {b2:w}, [{x}], #8",
            "and {i0:w}, {a:w}, #0xff",
            "ubfx {i1:w}, {a:w}, #8, #8",
            "ubfx {i2:w}, {a:w}, #16, #8",
            "lsr {i3:w}, {a:w}, #24",
            "and {j0:w}, {a2:w}, #0xff",
            "ubfx {j1:w}, {a2:w}, #8, #8",
            "ubfx {j2:w}, {a2:w}, #16, #8",
            "lsr {j3:w}, {a2:w}, #24",
            "ldr d0, [{grid}, {i0}, lsl #3]",
            "ldr d1, [{grid}, {i1}, lsl #3]",
            "ldr d2, [{grid}, {i2}, lsl #3]",
            "ldr d3, [{grid}, {i3}, lsl #3]",
            "and {i0:w}, {b:w}, #0x7f",
            "ubfx {i1:w}, {b:w}, #7, #7",
            "ubfx {i2:w}, {b:w}, #14, #7",
            "ubfx {i3:w}, {b:w}, #21, #7",
            "ldr d22, [{grid}, {j0}, lsl #3]",
            "ldr d23, [{grid}, {j1}, lsl #3]",
            "ldr d24, [{grid}, {j2}, lsl #3]",
            "ldr d25, [{grid}, {j3}, lsl #3]",
            "and {j0:w}, {b2:w}, #0x7f",
            "ubfx {j1:w}, {b2:w}, #7, #7",
            "ubfx {j2:w}, {b2:w}, #14, #7",
            "ubfx {j3:w}, {b2:w}, #21, #7",
            "ldr d4, [{signs}, {i0}, lsl #3]",
            "ldr d5, [{signs}, {i1}, lsl #3]",
            "ldr d6, [{signs}, {i2}, lsl #3]",
            "ldr d7, [{signs}, {i3}, lsl #3]",
            "ldr d26, [{signs}, {j0}, lsl #3]",
            "ldr d27, [{signs}, {j1}, lsl #3]",
            "ldr d28, [{signs}, {j2}, lsl #3]",
            "ldr d29, [{signs}, {j3}, lsl #3]",
            "ld1 {{v16.8b, v17.8b, v18.8b, v19.8b}}, [{y}], #32",
            "ld1 {{v8.8b, v9.8b, v10.8b, v11.8b}}, [{y}], #32",
            "lsr {b:w}, {b:w}, #28",
            "lsr {b2:w}, {b2:w}, #28",
            "orr {b:w}, {one:w}, {b:w}, lsl #1",
            "orr {b2:w}, {one:w}, {b2:w}, lsl #1",
            "eor v0.8b, v0.8b, v4.8b",
            "eor v1.8b, v1.8b, v5.8b",
            "eor v2.8b, v2.8b, v6.8b",
            "eor v3.8b, v3.8b, v7.8b",
            "eor v22.8b, v22.8b, v26.8b",
            "eor v23.8b, v23.8b, v27.8b",
            "eor v24.8b, v24.8b, v28.8b",
            "eor v25.8b, v25.8b, v29.8b",
            "sub v0.8b, v0.8b, v4.8b",
            "sub v1.8b, v1.8b, v5.8b",
            "sub v2.8b, v2.8b, v6.8b",
            "sub v3.8b, v3.8b, v7.8b",
            "sub v22.8b, v22.8b, v26.8b",
            "sub v23.8b, v23.8b, v27.8b",
            "sub v24.8b, v24.8b, v28.8b",
            "sub v25.8b, v25.8b, v29.8b",
            $($dot,)*
            "subs {c:w}, {c:w}, #1",
            "b.ne 3b",
            "addv s20, v20.4s",
            "str s20, [{o}], #4",
            "add {x}, {x}, #2",
            "add {y}, {y}, #36",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            grid = in(reg) IQ2XXS_GRID.as_ptr(),
            signs = in(reg) KSIGNS64.as_ptr(),
            one = in(reg) 1u64,
            x = inout(reg) $x => _,
            y = inout(reg) $y => _,
            n = inout(reg) $n => _,
            o = inout(reg) $out => _,
            a = out(reg) _, b = out(reg) _, a2 = out(reg) _, b2 = out(reg) _, c = out(reg) _,
            i0 = out(reg) _, i1 = out(reg) _, i2 = out(reg) _, i3 = out(reg) _,
            j0 = out(reg) _, j1 = out(reg) _, j2 = out(reg) _, j3 = out(reg) _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _,
            out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v16") _,
            out("v17") _, out("v18") _, out("v19") _, out("v20") _, out("v21") _,
            out("v22") _, out("v23") _, out("v24") _, out("v25") _, out("v26") _,
            out("v27") _, out("v28") _, out("v29") _,
            options(nostack),
        )
    };
}

/// [`block_sums!`] with ARMv8.0 widening multiplies.
///
/// # Safety
/// Every super-block read must lie inside its slice; `out` holds n values; n >= 1.
#[inline(always)]
unsafe fn block_sums_neon(x: *const u8, y: *const u8, n: usize, out: *mut i32) {
    block_sums!(
        x,
        y,
        n,
        out,
        [],
        [
            "smull v12.8h, v0.8b, v16.8b",
            "smull v13.8h, v22.8b, v8.8b",
            "smlal v12.8h, v1.8b, v17.8b",
            "smlal v13.8h, v23.8b, v9.8b",
            "smlal v12.8h, v2.8b, v18.8b",
            "smlal v13.8h, v24.8b, v10.8b",
            "smlal v12.8h, v3.8b, v19.8b",
            "smlal v13.8h, v25.8b, v11.8b",
            "dup v21.8h, {b:w}",
            "dup v27.8h, {b2:w}",
            "smlal v20.4s, v12.4h, v21.4h",
            "smlal2 v20.4s, v12.8h, v21.8h",
            "smlal v20.4s, v13.4h, v27.4h",
            "smlal2 v20.4s, v13.8h, v27.8h"
        ]
    );
}

/// [`block_sums_neon`] with `sdot` (ARMv8.2 dotprod).
///
/// # Safety
/// As [`block_sums_neon`], and the CPU must implement dotprod.
#[inline(always)]
unsafe fn block_sums_dotprod(x: *const u8, y: *const u8, n: usize, out: *mut i32) {
    block_sums!(
        x,
        y,
        n,
        out,
        [".arch_extension dotprod"],
        [
            "movi v12.4s, #0",
            "movi v13.4s, #0",
            "sdot v12.2s, v0.8b, v16.8b",
            "sdot v13.2s, v22.8b, v8.8b",
            "sdot v12.2s, v1.8b, v17.8b",
            "sdot v13.2s, v23.8b, v9.8b",
            "sdot v12.2s, v2.8b, v18.8b",
            "sdot v13.2s, v24.8b, v10.8b",
            "sdot v12.2s, v3.8b, v19.8b",
            "sdot v13.2s, v25.8b, v11.8b",
            "dup v21.4s, {b:w}",
            "dup v27.4s, {b2:w}",
            "mla v20.4s, v12.4s, v21.4s",
            "mla v20.4s, v13.4s, v27.4s"
        ]
    );
}

#[inline(always)]
fn f16_at(b: &[u8], off: usize) -> f32 {
    super::float::f16_to_f32(u16::from_le_bytes([b[off], b[off + 1]]))
}

/// A grid format's row . Q8_K over `nb` super-blocks of `bytes`, with `sums` filling a run
/// of block integers; `last` is the twin's final factor.
#[inline(always)]
fn grid_row(
    nb: usize,
    w: &[u8],
    act: &[u8],
    bytes: usize,
    last: f32,
    sums: unsafe fn(*const u8, *const u8, usize, *mut i32),
) -> f32 {
    let mut buf = [0i32; RUN];
    let mut sumf = 0.0f32;
    let mut b0 = 0;
    while b0 < nb {
        let c = (nb - b0).min(RUN);
        // SAFETY: super-blocks b0..b0 + c lie inside both slices (nb = whole_blocks), c >= 1.
        unsafe {
            sums(
                w.as_ptr().add(b0 * bytes + 2),
                act.as_ptr().add(b0 * Q8_K_BYTES + 4),
                c,
                buf.as_mut_ptr(),
            )
        };
        for (k, &s) in buf[..c].iter().enumerate() {
            let b = b0 + k;
            let y = &act[b * Q8_K_BYTES..b * Q8_K_BYTES + 4];
            let d = f16_at(w, b * bytes) * f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
            sumf += d * s as f32;
        }
        b0 += c;
    }
    last * sumf
}

/// IQ2_XXS . Q8_K with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_iq2_xxs_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ2_XXS_BYTES, act, Q8_K_BYTES);
    grid_row(nb, w, act, IQ2_XXS_BYTES, 0.125, block_sums_neon)
}

/// IQ2_XXS . Q8_K with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_iq2_xxs_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ2_XXS_BYTES, act, Q8_K_BYTES);
    grid_row(nb, w, act, IQ2_XXS_BYTES, 0.125, block_sums_dotprod)
}

// IQ2_XS and IQ2_S (#33). The same plan as above, one sub-block a trip: indices cut out
// with `and`/`ubfx` (plus `bfi` of their high bits) to exactly the width of their table (9 bits
// for the 512 entries of IQ2_XS, 10 for the 1024 of IQ2_S), so every table read is in
// bounds whatever the file holds. IQ2_XS takes its sign masks from KSIGNS64 by 7-bit field;
// IQ2_S stores whole sign bytes, spread to 0x00/0xFF byte masks by `dup`/`tbl` and
// `cmtst` against the bits 1, 2, .., 128. IQ2_XS and IQ2_S have a scale per 16 weights: the
// first two groups' products are summed apart from the last two's and each half multiplied by
// its own 2s + 1. The ARMv8.0 i16 lanes hold at most 2 * 43 * 128.

const IQ2_XS_BYTES: usize = 74;
const IQ2_S_BYTES: usize = 82;

/// `tbl` indices that spread sign bytes 0, 1 (first 16) and 2, 3 (next 16) over 8 lanes each,
/// then the bit each lane tests, twice.
static SIGN_SPREAD: [u8; 48] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
    2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, //
    1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128,
];

/// Block integers of IQ2_XS (`x` at the first block's qs, byte 2), two sub-blocks a trip
/// (A in v0-v7 and v16-v19, B in v22-v29 and v8-v11, all loads issued before either's first
/// use, as IQ2_XXS's loop does): 4 group words a sub-block (9-bit index, 7-bit signs), the
/// two sub-blocks' scale bytes from `s` (byte 66). `$dot` multiplies the signed magnitudes by
/// the activations and adds into v20 by the halves' 2s + 1 in `i0`, `i1` (A) and `i2`, `i3` (B).
macro_rules! block_sums_iq2_xs {
    ($x:expr, $y:expr, $n:expr, $out:expr, [$($pre:literal),*], [$($dot:literal),*]) => {
        asm!(
            $($pre,)*
            "2:",
            "movi v20.4s, #0",
            "mov {c:w}, #4",
            "3:",
            "ldp {a}, {a2}, [{x}], #16",
            "ldrh {h:w}, [{s}], #2",
            "and {i0}, {a}, #0x1ff",
            "ubfx {i1}, {a}, #16, #9",
            "ubfx {i2}, {a}, #32, #9",
            "ubfx {i3}, {a}, #48, #9",
            "and {j0}, {a2}, #0x1ff",
            "ubfx {j1}, {a2}, #16, #9",
            "ubfx {j2}, {a2}, #32, #9",
            "ubfx {j3}, {a2}, #48, #9",
            "ldr d0, [{grid}, {i0}, lsl #3]",
            "ldr d1, [{grid}, {i1}, lsl #3]",
            "ldr d2, [{grid}, {i2}, lsl #3]",
            "ldr d3, [{grid}, {i3}, lsl #3]",
            "ubfx {i0}, {a}, #9, #7",
            "ubfx {i1}, {a}, #25, #7",
            "ubfx {i2}, {a}, #41, #7",
            "lsr {i3}, {a}, #57",
            "ldr d22, [{grid}, {j0}, lsl #3]",
            "ldr d23, [{grid}, {j1}, lsl #3]",
            "ldr d24, [{grid}, {j2}, lsl #3]",
            "ldr d25, [{grid}, {j3}, lsl #3]",
            "ubfx {j0}, {a2}, #9, #7",
            "ubfx {j1}, {a2}, #25, #7",
            "ubfx {j2}, {a2}, #41, #7",
            "lsr {j3}, {a2}, #57",
            "ldr d4, [{signs}, {i0}, lsl #3]",
            "ldr d5, [{signs}, {i1}, lsl #3]",
            "ldr d6, [{signs}, {i2}, lsl #3]",
            "ldr d7, [{signs}, {i3}, lsl #3]",
            "ldr d26, [{signs}, {j0}, lsl #3]",
            "ldr d27, [{signs}, {j1}, lsl #3]",
            "ldr d28, [{signs}, {j2}, lsl #3]",
            "ldr d29, [{signs}, {j3}, lsl #3]",
            "ld1 {{v16.8b, v17.8b, v18.8b, v19.8b}}, [{y}], #32",
            "ld1 {{v8.8b, v9.8b, v10.8b, v11.8b}}, [{y}], #32",
            "ubfiz {i0:w}, {h:w}, #1, #4",
            "ubfx {i1:w}, {h:w}, #3, #5",
            "ubfx {i2:w}, {h:w}, #7, #5",
            "lsr {i3:w}, {h:w}, #11",
            "orr {i0:w}, {i0:w}, #1",
            "orr {i1:w}, {i1:w}, #1",
            "orr {i2:w}, {i2:w}, #1",
            "orr {i3:w}, {i3:w}, #1",
            "eor v0.8b, v0.8b, v4.8b",
            "eor v1.8b, v1.8b, v5.8b",
            "eor v2.8b, v2.8b, v6.8b",
            "eor v3.8b, v3.8b, v7.8b",
            "eor v22.8b, v22.8b, v26.8b",
            "eor v23.8b, v23.8b, v27.8b",
            "eor v24.8b, v24.8b, v28.8b",
            "eor v25.8b, v25.8b, v29.8b",
            "sub v0.8b, v0.8b, v4.8b",
            "sub v1.8b, v1.8b, v5.8b",
            "sub v2.8b, v2.8b, v6.8b",
            "sub v3.8b, v3.8b, v7.8b",
            "sub v22.8b, v22.8b, v26.8b",
            "sub v23.8b, v23.8b, v27.8b",
            "sub v24.8b, v24.8b, v28.8b",
            "sub v25.8b, v25.8b, v29.8b",
            $($dot,)*
            "subs {c:w}, {c:w}, #1",
            "b.ne 3b",
            "addv s20, v20.4s",
            "str s20, [{o}], #4",
            "add {x}, {x}, #10",
            "add {s}, {s}, #66",
            "add {y}, {y}, #36",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            grid = in(reg) IQ2XS_GRID.as_ptr(),
            signs = in(reg) KSIGNS64.as_ptr(),
            x = inout(reg) $x => _,
            s = inout(reg) $x.add(64) => _,
            y = inout(reg) $y => _,
            n = inout(reg) $n => _,
            o = inout(reg) $out => _,
            a = out(reg) _, a2 = out(reg) _, h = out(reg) _, c = out(reg) _,
            i0 = out(reg) _, i1 = out(reg) _, i2 = out(reg) _, i3 = out(reg) _,
            j0 = out(reg) _, j1 = out(reg) _, j2 = out(reg) _, j3 = out(reg) _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _,
            out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v14") _,
            out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _, out("v24") _,
            out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _,
            out("v30") _, out("v31") _,
            options(nostack),
        )
    };
}

/// Block integers of IQ2_S (`x` at the first block's qs, byte 2), two sub-blocks a trip (A
/// in v0-v7 and v16-v19, B in v22-v29 and v8-v11, every load issued before its first use): 4
/// low index bytes a sub-block, its qh byte (bits 2l..2l+2 the top of index l), 4 sign bytes
/// (spread by `dup` and `cmtst` against the bits in v30) and its scale byte. `$dot` adds into
/// v20 by the halves' 2s + 1 in `i0`, `i1` (A) and `i2`, `i3` (B).
macro_rules! block_sums_iq2_s {
    ($x:expr, $y:expr, $n:expr, $out:expr, [$($pre:literal),*], [$($dot:literal),*]) => {
        asm!(
            $($pre,)*
            "ldr d30, [{k}, #32]",
            "2:",
            "movi v20.4s, #0",
            "mov {c:w}, #4",
            "3:",
            "ldr {a}, [{x}], #8",
            "ldrh {h:w}, [{qh}], #2",
            "ldr d29, [{sg}], #8",
            "ldrh {sc:w}, [{s}], #2",
            "and {i0}, {a}, #0xff",
            "ubfx {i1}, {a}, #8, #8",
            "ubfx {i2}, {a}, #16, #8",
            "ubfx {i3}, {a}, #24, #8",
            "ubfx {j0}, {a}, #32, #8",
            "ubfx {j1}, {a}, #40, #8",
            "ubfx {j2}, {a}, #48, #8",
            "lsr {j3}, {a}, #56",
            "bfi {i0}, {h}, #8, #2",
            "lsr {t:w}, {h:w}, #2",
            "bfi {i1}, {t}, #8, #2",
            "lsr {t:w}, {h:w}, #4",
            "bfi {i2}, {t}, #8, #2",
            "lsr {t:w}, {h:w}, #6",
            "bfi {i3}, {t}, #8, #2",
            "lsr {t:w}, {h:w}, #8",
            "bfi {j0}, {t}, #8, #2",
            "lsr {t:w}, {h:w}, #10",
            "bfi {j1}, {t}, #8, #2",
            "lsr {t:w}, {h:w}, #12",
            "bfi {j2}, {t}, #8, #2",
            "lsr {t:w}, {h:w}, #14",
            "bfi {j3}, {t}, #8, #2",
            "ldr d0, [{grid}, {i0}, lsl #3]",
            "ldr d1, [{grid}, {i1}, lsl #3]",
            "ldr d2, [{grid}, {i2}, lsl #3]",
            "ldr d3, [{grid}, {i3}, lsl #3]",
            "ldr d22, [{grid}, {j0}, lsl #3]",
            "ldr d23, [{grid}, {j1}, lsl #3]",
            "ldr d24, [{grid}, {j2}, lsl #3]",
            "ldr d25, [{grid}, {j3}, lsl #3]",
            "ld1 {{v16.8b, v17.8b, v18.8b, v19.8b}}, [{y}], #32",
            "ld1 {{v8.8b, v9.8b, v10.8b, v11.8b}}, [{y}], #32",
            "dup v4.8b, v29.b[0]",
            "dup v5.8b, v29.b[1]",
            "dup v6.8b, v29.b[2]",
            "dup v7.8b, v29.b[3]",
            "dup v26.8b, v29.b[4]",
            "dup v27.8b, v29.b[5]",
            "dup v28.8b, v29.b[6]",
            "dup v29.8b, v29.b[7]",
            "ubfiz {i0:w}, {sc:w}, #1, #4",
            "ubfx {i1:w}, {sc:w}, #3, #5",
            "ubfx {i2:w}, {sc:w}, #7, #5",
            "lsr {i3:w}, {sc:w}, #11",
            "cmtst v4.8b, v4.8b, v30.8b",
            "cmtst v5.8b, v5.8b, v30.8b",
            "cmtst v6.8b, v6.8b, v30.8b",
            "cmtst v7.8b, v7.8b, v30.8b",
            "cmtst v26.8b, v26.8b, v30.8b",
            "cmtst v27.8b, v27.8b, v30.8b",
            "cmtst v28.8b, v28.8b, v30.8b",
            "cmtst v29.8b, v29.8b, v30.8b",
            "orr {i0:w}, {i0:w}, #1",
            "orr {i1:w}, {i1:w}, #1",
            "orr {i2:w}, {i2:w}, #1",
            "orr {i3:w}, {i3:w}, #1",
            "eor v0.8b, v0.8b, v4.8b",
            "eor v1.8b, v1.8b, v5.8b",
            "eor v2.8b, v2.8b, v6.8b",
            "eor v3.8b, v3.8b, v7.8b",
            "eor v22.8b, v22.8b, v26.8b",
            "eor v23.8b, v23.8b, v27.8b",
            "eor v24.8b, v24.8b, v28.8b",
            "eor v25.8b, v25.8b, v29.8b",
            "sub v0.8b, v0.8b, v4.8b",
            "sub v1.8b, v1.8b, v5.8b",
            "sub v2.8b, v2.8b, v6.8b",
            "sub v3.8b, v3.8b, v7.8b",
            "sub v22.8b, v22.8b, v26.8b",
            "sub v23.8b, v23.8b, v27.8b",
            "sub v24.8b, v24.8b, v28.8b",
            "sub v25.8b, v25.8b, v29.8b",
            $($dot,)*
            "subs {c:w}, {c:w}, #1",
            "b.ne 3b",
            "addv s20, v20.4s",
            "str s20, [{o}], #4",
            "add {x}, {x}, #50",
            "add {sg}, {sg}, #50",
            "add {qh}, {qh}, #74",
            "add {s}, {s}, #74",
            "add {y}, {y}, #36",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            grid = in(reg) IQ2S_GRID.as_ptr(),
            k = in(reg) SIGN_SPREAD.as_ptr(),
            x = inout(reg) $x => _,
            sg = inout(reg) $x.add(32) => _,
            qh = inout(reg) $x.add(64) => _,
            s = inout(reg) $x.add(72) => _,
            y = inout(reg) $y => _,
            n = inout(reg) $n => _,
            o = inout(reg) $out => _,
            a = out(reg) _, h = out(reg) _, sc = out(reg) _, c = out(reg) _, t = out(reg) _,
            i0 = out(reg) _, i1 = out(reg) _, i2 = out(reg) _, i3 = out(reg) _,
            j0 = out(reg) _, j1 = out(reg) _, j2 = out(reg) _, j3 = out(reg) _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _,
            out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v14") _,
            out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _, out("v24") _,
            out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _,
            out("v30") _, out("v31") _,
            options(nostack),
        )
    };
}

/// The products of two sub-blocks a trip with a scale per 16 weights (IQ2_XS, IQ2_S): A's
/// halves by `i0`, `i1`, B's by `i2`, `i3`, with ARMv8.0 widening multiplies.
macro_rules! two_subs_neon {
    ($m:ident, $x:ident, $y:ident, $n:ident, $out:ident) => {
        $m!(
            $x,
            $y,
            $n,
            $out,
            [],
            [
                "smull v12.8h, v0.8b, v16.8b",
                "smull v13.8h, v2.8b, v18.8b",
                "smull v14.8h, v22.8b, v8.8b",
                "smull v15.8h, v24.8b, v10.8b",
                "smlal v12.8h, v1.8b, v17.8b",
                "smlal v13.8h, v3.8b, v19.8b",
                "smlal v14.8h, v23.8b, v9.8b",
                "smlal v15.8h, v25.8b, v11.8b",
                "dup v21.8h, {i0:w}",
                "dup v31.8h, {i1:w}",
                "dup v26.8h, {i2:w}",
                "dup v27.8h, {i3:w}",
                "smlal v20.4s, v12.4h, v21.4h",
                "smlal2 v20.4s, v12.8h, v21.8h",
                "smlal v20.4s, v13.4h, v31.4h",
                "smlal2 v20.4s, v13.8h, v31.8h",
                "smlal v20.4s, v14.4h, v26.4h",
                "smlal2 v20.4s, v14.8h, v26.8h",
                "smlal v20.4s, v15.4h, v27.4h",
                "smlal2 v20.4s, v15.8h, v27.8h"
            ]
        )
    };
}

/// [`two_subs_neon!`] with `sdot` (ARMv8.2 dotprod).
macro_rules! two_subs_dotprod {
    ($m:ident, $x:ident, $y:ident, $n:ident, $out:ident) => {
        $m!(
            $x,
            $y,
            $n,
            $out,
            [".arch_extension dotprod"],
            [
                "movi v12.4s, #0",
                "movi v13.4s, #0",
                "movi v14.4s, #0",
                "movi v15.4s, #0",
                "sdot v12.2s, v0.8b, v16.8b",
                "sdot v13.2s, v2.8b, v18.8b",
                "sdot v14.2s, v22.8b, v8.8b",
                "sdot v15.2s, v24.8b, v10.8b",
                "sdot v12.2s, v1.8b, v17.8b",
                "sdot v13.2s, v3.8b, v19.8b",
                "sdot v14.2s, v23.8b, v9.8b",
                "sdot v15.2s, v25.8b, v11.8b",
                "dup v21.4s, {i0:w}",
                "dup v31.4s, {i1:w}",
                "dup v26.4s, {i2:w}",
                "dup v27.4s, {i3:w}",
                "mla v20.4s, v12.4s, v21.4s",
                "mla v20.4s, v13.4s, v31.4s",
                "mla v20.4s, v14.4s, v26.4s",
                "mla v20.4s, v15.4s, v27.4s"
            ]
        )
    };
}

/// The ARMv8.0 products of a sub-block with a scale per 16 weights (IQ2_XS, IQ2_S).
macro_rules! half_scaled_neon {
    ($m:ident, $x:ident, $y:ident, $n:ident, $out:ident) => {
        $m!(
            $x,
            $y,
            $n,
            $out,
            [],
            [
                "smull v12.8h, v0.8b, v16.8b",
                "smull v13.8h, v2.8b, v18.8b",
                "smlal v12.8h, v1.8b, v17.8b",
                "smlal v13.8h, v3.8b, v19.8b",
                "dup v21.8h, {t:w}",
                "dup v22.8h, {b:w}",
                "smlal v20.4s, v12.4h, v21.4h",
                "smlal2 v20.4s, v12.8h, v21.8h",
                "smlal v20.4s, v13.4h, v22.4h",
                "smlal2 v20.4s, v13.8h, v22.8h"
            ]
        )
    };
}

/// [`half_scaled_neon!`] with `sdot` (ARMv8.2 dotprod).
macro_rules! half_scaled_dotprod {
    ($m:ident, $x:ident, $y:ident, $n:ident, $out:ident) => {
        $m!(
            $x,
            $y,
            $n,
            $out,
            [".arch_extension dotprod"],
            [
                "movi v12.4s, #0",
                "movi v13.4s, #0",
                "sdot v12.2s, v0.8b, v16.8b",
                "sdot v13.2s, v2.8b, v18.8b",
                "sdot v12.2s, v1.8b, v17.8b",
                "sdot v13.2s, v3.8b, v19.8b",
                "dup v21.4s, {t:w}",
                "dup v22.4s, {b:w}",
                "mla v20.4s, v12.4s, v21.4s",
                "mla v20.4s, v13.4s, v22.4s"
            ]
        )
    };
}

/// IQ2_XS block sums with ARMv8.0 widening multiplies.
///
/// # Safety
/// As [`block_sums_neon`], for IQ2_XS super-blocks (`x` at the first one's byte 2).
#[inline(always)]
unsafe fn iq2_xs_block_sums_neon(x: *const u8, y: *const u8, n: usize, out: *mut i32) {
    two_subs_neon!(block_sums_iq2_xs, x, y, n, out);
}

/// [`iq2_xs_block_sums_neon`] with `sdot`.
///
/// # Safety
/// As [`iq2_xs_block_sums_neon`], and the CPU must implement dotprod.
#[inline(always)]
unsafe fn iq2_xs_block_sums_dotprod(x: *const u8, y: *const u8, n: usize, out: *mut i32) {
    two_subs_dotprod!(block_sums_iq2_xs, x, y, n, out);
}

/// IQ2_S block sums with ARMv8.0 widening multiplies.
///
/// # Safety
/// As [`block_sums_neon`], for IQ2_S super-blocks (`x` at the first one's byte 2).
#[inline(always)]
unsafe fn iq2_s_block_sums_neon(x: *const u8, y: *const u8, n: usize, out: *mut i32) {
    two_subs_neon!(block_sums_iq2_s, x, y, n, out);
}

/// [`iq2_s_block_sums_neon`] with `sdot`.
///
/// # Safety
/// As [`iq2_s_block_sums_neon`], and the CPU must implement dotprod.
#[inline(always)]
unsafe fn iq2_s_block_sums_dotprod(x: *const u8, y: *const u8, n: usize, out: *mut i32) {
    two_subs_dotprod!(block_sums_iq2_s, x, y, n, out);
}

/// IQ2_XS . Q8_K with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_iq2_xs_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ2_XS_BYTES, act, Q8_K_BYTES);
    grid_row(nb, w, act, IQ2_XS_BYTES, 0.125, iq2_xs_block_sums_neon)
}

/// IQ2_XS . Q8_K with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_iq2_xs_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ2_XS_BYTES, act, Q8_K_BYTES);
    grid_row(nb, w, act, IQ2_XS_BYTES, 0.125, iq2_xs_block_sums_dotprod)
}

/// IQ2_S . Q8_K with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_iq2_s_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ2_S_BYTES, act, Q8_K_BYTES);
    grid_row(nb, w, act, IQ2_S_BYTES, 0.125, iq2_s_block_sums_neon)
}

/// IQ2_S . Q8_K with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_iq2_s_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ2_S_BYTES, act, Q8_K_BYTES);
    grid_row(nb, w, act, IQ2_S_BYTES, 0.125, iq2_s_block_sums_dotprod)
}

// IQ1_S (#33): 50-byte super-blocks: f16 d, 32 low index bytes, 8 u16 words (bits 3l..3l+3
// the top of group l's index, 12..15 the scale s, bit 15 the sign of the 1/8 shift). The grid
// entries are signed bytes (-1, 0, 1) loaded by 11-bit masked index (2048 entries) and meet
// the activations as they are (4 products per i16 lane, at most 4 * 128); the asm gives the
// scaled integer sum(ls * grid . q8) per super-block, and Rust adds the shift integer from the
// Q8_K block sums and ggml's float step (`smolrun_core::quant::iq1_s::vec_dot`).

const IQ1_S_BYTES: usize = 50;

/// Block integers of IQ1_S (`x` at the first block's qs, byte 2); `$dot` multiplies v0-v3 by
/// the activations v16-v19 and adds into v20 by the scale in `b`.
macro_rules! block_sums_iq1_s {
    ($x:expr, $y:expr, $n:expr, $out:expr, [$($pre:literal),*], [$($dot:literal),*]) => {
        asm!(
            $($pre,)*
            "2:",
            "movi v20.4s, #0",
            "mov {c:w}, #8",
            "3:",
            "ldr {a:w}, [{x}], #4",
            "ldrh {h:w}, [{qh}], #2",
            "and {i0}, {a}, #0xff",
            "ubfx {i1}, {a}, #8, #8",
            "ubfx {i2}, {a}, #16, #8",
            "lsr {i3:w}, {a:w}, #24",
            "bfi {i0}, {h}, #8, #3",
            "lsr {t:w}, {h:w}, #3",
            "bfi {i1}, {t}, #8, #3",
            "lsr {t:w}, {h:w}, #6",
            "bfi {i2}, {t}, #8, #3",
            "lsr {t:w}, {h:w}, #9",
            "bfi {i3}, {t}, #8, #3",
            "ldr d0, [{grid}, {i0}, lsl #3]",
            "ldr d1, [{grid}, {i1}, lsl #3]",
            "ldr d2, [{grid}, {i2}, lsl #3]",
            "ldr d3, [{grid}, {i3}, lsl #3]",
            "ld1 {{v16.8b, v17.8b, v18.8b, v19.8b}}, [{y}], #32",
            "ubfx {b:w}, {h:w}, #12, #3",
            "orr {b:w}, {one:w}, {b:w}, lsl #1",
            $($dot,)*
            "subs {c:w}, {c:w}, #1",
            "b.ne 3b",
            "addv s20, v20.4s",
            "str s20, [{o}], #4",
            "add {x}, {x}, #18",
            "add {qh}, {qh}, #34",
            "add {y}, {y}, #36",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            grid = in(reg) IQ1S_GRID.as_ptr(),
            one = in(reg) 1u64,
            x = inout(reg) $x => _,
            qh = inout(reg) $x.add(32) => _,
            y = inout(reg) $y => _,
            n = inout(reg) $n => _,
            o = inout(reg) $out => _,
            a = out(reg) _, b = out(reg) _, c = out(reg) _, t = out(reg) _, h = out(reg) _,
            i0 = out(reg) _, i1 = out(reg) _, i2 = out(reg) _, i3 = out(reg) _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v12") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
            out("v21") _,
            options(nostack),
        )
    };
}

/// IQ1_S block sums with ARMv8.0 widening multiplies.
///
/// # Safety
/// As [`block_sums_neon`], for IQ1_S super-blocks (`x` at the first one's byte 2).
#[inline(always)]
unsafe fn iq1_s_block_sums_neon(x: *const u8, y: *const u8, n: usize, out: *mut i32) {
    block_sums_iq1_s!(
        x,
        y,
        n,
        out,
        [],
        [
            "smull v12.8h, v0.8b, v16.8b",
            "smlal v12.8h, v1.8b, v17.8b",
            "smlal v12.8h, v2.8b, v18.8b",
            "smlal v12.8h, v3.8b, v19.8b",
            "dup v21.8h, {b:w}",
            "smlal v20.4s, v12.4h, v21.4h",
            "smlal2 v20.4s, v12.8h, v21.8h"
        ]
    );
}

/// [`iq1_s_block_sums_neon`] with `sdot`.
///
/// # Safety
/// As [`iq1_s_block_sums_neon`], and the CPU must implement dotprod.
#[inline(always)]
unsafe fn iq1_s_block_sums_dotprod(x: *const u8, y: *const u8, n: usize, out: *mut i32) {
    block_sums_iq1_s!(
        x,
        y,
        n,
        out,
        [".arch_extension dotprod"],
        [
            "movi v12.4s, #0",
            "sdot v12.2s, v0.8b, v16.8b",
            "sdot v12.2s, v1.8b, v17.8b",
            "sdot v12.2s, v2.8b, v18.8b",
            "sdot v12.2s, v3.8b, v19.8b",
            "dup v21.4s, {b:w}",
            "mla v20.4s, v12.4s, v21.4s"
        ]
    );
}

/// An IQ1_S row . Q8_K over `nb` super-blocks: the asm's block integers, then per block the
/// shift integer from the block sums and the twin's float step, in block order.
#[inline(always)]
fn iq1_s_row(
    nb: usize,
    w: &[u8],
    act: &[u8],
    sums: unsafe fn(*const u8, *const u8, usize, *mut i32),
) -> f32 {
    let mut buf = [0i32; RUN];
    let mut sumf = 0.0f32;
    let mut b0 = 0;
    while b0 < nb {
        let c = (nb - b0).min(RUN);
        // SAFETY: super-blocks b0..b0 + c lie inside both slices (nb = whole_blocks), c >= 1.
        unsafe {
            sums(
                w.as_ptr().add(b0 * IQ1_S_BYTES + 2),
                act.as_ptr().add(b0 * Q8_K_BYTES + 4),
                c,
                buf.as_mut_ptr(),
            )
        };
        for (k, &sumi) in buf[..c].iter().enumerate() {
            let b = b0 + k;
            let x = &w[b * IQ1_S_BYTES..(b + 1) * IQ1_S_BYTES];
            let y = &act[b * Q8_K_BYTES..(b + 1) * Q8_K_BYTES];
            let mut sumi1 = 0i32;
            for ib in 0..8 {
                let h = u16::from_le_bytes([x[34 + 2 * ib], x[35 + 2 * ib]]) as i32;
                let ls = 2 * ((h >> 12) & 7) + 1;
                let o = 260 + 4 * ib;
                let sum = i16::from_le_bytes([y[o], y[o + 1]]) as i32
                    + i16::from_le_bytes([y[o + 2], y[o + 3]]) as i32;
                sumi1 += if h & 0x8000 != 0 { -ls * sum } else { ls * sum };
            }
            let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
            sumf += f16_at(x, 0) * dy * (sumi as f32 + 0.125 * sumi1 as f32);
        }
        b0 += c;
    }
    sumf
}

/// IQ1_S . Q8_K with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_iq1_s_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ1_S_BYTES, act, Q8_K_BYTES);
    iq1_s_row(nb, w, act, iq1_s_block_sums_neon)
}

/// IQ1_S . Q8_K with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_iq1_s_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ1_S_BYTES, act, Q8_K_BYTES);
    iq1_s_row(nb, w, act, iq1_s_block_sums_dotprod)
}

// IQ1_M (#33): 56-byte super-blocks: 32 low index bytes, 16 qh bytes (per group of 8: 3 index
// top bits and the shift sign), 4 scale words (3-bit scales per 16 weights; their top nibbles
// make the f16 d). Each group's grid values g (-1, 0, 1) and shift sign e (+-1) become one
// signed weight 8g + e (`shl` by 3, add e's bytes from a 2-entry table): the asm gives
// S = 8 * sumi1 + sumi2 of the twin's two integers exactly (2 products per i16 lane: at most
// 2 * 9 * 128), and f32(S) * 0.125 is the twin's f32(sumi1) + 0.125 * f32(sumi2) to the bit
// (one rounding of the same value, scaled by a power of two; |sumi1| < 2^19).

const IQ1_M_BYTES: usize = 56;

/// The bytes of e = +1 and e = -1.
static IQ1M_SHIFT: [u64; 2] = [0x0101_0101_0101_0101, 0xffff_ffff_ffff_ffff];

/// Block integers S of IQ1_M (`x` at the first block's byte 0); `$dot` as for
/// [`block_sums_iq2_xs!`] (the halves' 2s + 1 in `t` and `b`).
macro_rules! block_sums_iq1_m {
    ($x:expr, $y:expr, $n:expr, $out:expr, [$($pre:literal),*], [$($dot:literal),*]) => {
        asm!(
            $($pre,)*
            "2:",
            "movi v20.4s, #0",
            "mov {c:w}, #8",
            "ldr {sw}, [{s}]",
            "mov {sh:w}, #6",
            "3:",
            "ldr {a:w}, [{x}], #4",
            "ldrh {h:w}, [{qh}], #2",
            "and {i0}, {a}, #0xff",
            "ubfx {i1}, {a}, #8, #8",
            "ubfx {i2}, {a}, #16, #8",
            "lsr {i3:w}, {a:w}, #24",
            "bfi {i0}, {h}, #8, #3",
            "lsr {t:w}, {h:w}, #4",
            "bfi {i1}, {t}, #8, #3",
            "lsr {t:w}, {h:w}, #8",
            "bfi {i2}, {t}, #8, #3",
            "lsr {t:w}, {h:w}, #12",
            "bfi {i3}, {t}, #8, #3",
            "ldr d0, [{grid}, {i0}, lsl #3]",
            "ldr d1, [{grid}, {i1}, lsl #3]",
            "ldr d2, [{grid}, {i2}, lsl #3]",
            "ldr d3, [{grid}, {i3}, lsl #3]",
            "ubfx {i0:w}, {h:w}, #3, #1",
            "ubfx {i1:w}, {h:w}, #7, #1",
            "ubfx {i2:w}, {h:w}, #11, #1",
            "lsr {i3:w}, {h:w}, #15",
            "ldr d4, [{e}, {i0}, lsl #3]",
            "ldr d5, [{e}, {i1}, lsl #3]",
            "ldr d6, [{e}, {i2}, lsl #3]",
            "ldr d7, [{e}, {i3}, lsl #3]",
            "ld1 {{v16.8b, v17.8b, v18.8b, v19.8b}}, [{y}], #32",
            "and {t:w}, {sw:w}, #7",
            "ubfx {b:w}, {sw:w}, #3, #3",
            "lsr {sw}, {sw}, {sh}",
            "eor {sh:w}, {sh:w}, #12",
            "orr {t:w}, {one:w}, {t:w}, lsl #1",
            "orr {b:w}, {one:w}, {b:w}, lsl #1",
            "shl v0.8b, v0.8b, #3",
            "shl v1.8b, v1.8b, #3",
            "shl v2.8b, v2.8b, #3",
            "shl v3.8b, v3.8b, #3",
            "add v0.8b, v0.8b, v4.8b",
            "add v1.8b, v1.8b, v5.8b",
            "add v2.8b, v2.8b, v6.8b",
            "add v3.8b, v3.8b, v7.8b",
            $($dot,)*
            "subs {c:w}, {c:w}, #1",
            "b.ne 3b",
            "addv s20, v20.4s",
            "str s20, [{o}], #4",
            "add {x}, {x}, #24",
            "add {qh}, {qh}, #40",
            "add {s}, {s}, #56",
            "add {y}, {y}, #36",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            grid = in(reg) IQ1S_GRID.as_ptr(),
            e = in(reg) IQ1M_SHIFT.as_ptr(),
            one = in(reg) 1u64,
            x = inout(reg) $x => _,
            qh = inout(reg) $x.add(32) => _,
            s = inout(reg) $x.add(48) => _,
            y = inout(reg) $y => _,
            n = inout(reg) $n => _,
            o = inout(reg) $out => _,
            a = out(reg) _, b = out(reg) _, c = out(reg) _, t = out(reg) _, h = out(reg) _,
            sw = out(reg) _, sh = out(reg) _,
            i0 = out(reg) _, i1 = out(reg) _, i2 = out(reg) _, i3 = out(reg) _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v7") _, out("v12") _, out("v13") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
            out("v21") _, out("v22") _,
            options(nostack),
        )
    };
}

/// IQ1_M block integers with ARMv8.0 widening multiplies.
///
/// # Safety
/// As [`block_sums_neon`], for IQ1_M super-blocks (`x` at the first one's byte 0).
#[inline(always)]
unsafe fn iq1_m_block_sums_neon(x: *const u8, y: *const u8, n: usize, out: *mut i32) {
    half_scaled_neon!(block_sums_iq1_m, x, y, n, out);
}

/// [`iq1_m_block_sums_neon`] with `sdot`.
///
/// # Safety
/// As [`iq1_m_block_sums_neon`], and the CPU must implement dotprod.
#[inline(always)]
unsafe fn iq1_m_block_sums_dotprod(x: *const u8, y: *const u8, n: usize, out: *mut i32) {
    half_scaled_dotprod!(block_sums_iq1_m, x, y, n, out);
}

/// An IQ1_M row . Q8_K over `nb` super-blocks: the asm's block integers S, then per block
/// (d * dy) * (f32(S) * 0.125) in block order (d gathered from the scale words' top nibbles).
#[inline(always)]
fn iq1_m_row(
    nb: usize,
    w: &[u8],
    act: &[u8],
    sums: unsafe fn(*const u8, *const u8, usize, *mut i32),
) -> f32 {
    let mut buf = [0i32; RUN];
    let mut sumf = 0.0f32;
    let mut b0 = 0;
    while b0 < nb {
        let c = (nb - b0).min(RUN);
        // SAFETY: super-blocks b0..b0 + c lie inside both slices (nb = whole_blocks), c >= 1.
        unsafe {
            sums(
                w.as_ptr().add(b0 * IQ1_M_BYTES),
                act.as_ptr().add(b0 * Q8_K_BYTES + 4),
                c,
                buf.as_mut_ptr(),
            )
        };
        for (k, &s) in buf[..c].iter().enumerate() {
            let b = b0 + k;
            let x = &w[b * IQ1_M_BYTES..(b + 1) * IQ1_M_BYTES];
            let sc = |k: usize| u16::from_le_bytes([x[48 + 2 * k], x[49 + 2 * k]]);
            let bits = (sc(0) >> 12)
                | ((sc(1) >> 8) & 0x00f0)
                | ((sc(2) >> 4) & 0x0f00)
                | (sc(3) & 0xf000);
            let y = &act[b * Q8_K_BYTES..b * Q8_K_BYTES + 4];
            let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
            sumf += super::float::f16_to_f32(bits) * dy * (s as f32 * 0.125);
        }
        b0 += c;
    }
    sumf
}

/// IQ1_M . Q8_K with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_iq1_m_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ1_M_BYTES, act, Q8_K_BYTES);
    iq1_m_row(nb, w, act, iq1_m_block_sums_neon)
}

/// IQ1_M . Q8_K with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_iq1_m_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ1_M_BYTES, act, Q8_K_BYTES);
    iq1_m_row(nb, w, act, iq1_m_block_sums_dotprod)
}
