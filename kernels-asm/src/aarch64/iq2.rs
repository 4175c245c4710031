//! IQ2_XXS, IQ3_XXS . Q8_K (#33; IQ2_XS, IQ2_S, IQ3_S below). IQ2_XXS super-block (66 bytes): f16 d at 0, then 8 sub-blocks of 8 bytes: 4
//! grid indices (one byte each, into the 256 entries of [`IQ2XXS_GRID`]) and a u32 whose bits
//! 7l..7l+7 are group l's sign field (into the 128 entries of [`KSIGNS64`]) and bits 28..32
//! the sub-block scale s. IQ3_XXS super-block (98 bytes): f16 d at 0, 64 index bytes at 2 (8
//! per sub-block, into the 256 entries of 4 magnitudes of [`IQ3XXS_GRID`]), then at 66 one
//! such signs-and-scale u32 per sub-block.
//!
//! The integer part runs in `asm!` (`block_sums_*`): per sub-block, the 4 indices and 4 sign
//! fields are cut out with `and`/`ubfx` (8 and 7 bits wide: every table read is in bounds,
//! whatever the file holds) and their entries loaded with `ldr d` at index * 8 (each group of
//! 8 in the low half of its own register); the grid magnitudes take their signs as (g ^ m) - m
//! with the 0x00/0xFF byte masks, then meet the 32 activations: `smull`/`smlal` (four products
//! per i16 lane: at most 4 * 43 * 128 < 2^15) and one widening `smlal` by 2s + 1 into i32
//! lanes, or 64-bit `sdot` and `mla` with dotprod. Each super-block's lanes are added (`addv`)
//! into the scalar twin's exact integer, then the twin's float steps in its order
//! (`smolrun_core::quant::iq2_xxs::vec_dot`: sumf += (f16(d) * dy) * bsum, then 0.125 * sumf;
//! IQ3_XXS's the same with 0.25), so both faces return the scalar result bit for bit.
//! IQ2_XXS (and IQ2_XS, IQ2_S below) run a whole super-block a trip of one asm loop, with the
//! previous block's float step: its lines are written by tools/iq-asm.py, which orders them for
//! the in-order A53/A55 (every load long before its use, the sub-blocks' chains interleaved).
//! IQ3_XXS stores each block's integer to a small stack buffer and runs the float part in
//! Rust; its i16 lanes of the ARMv8.0 face hold at most 4 * 62 * 128 < 2^15.

use super::{whole_blocks, Q8_K_BYTES, QK_K};
use crate::iq_grids::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS64,
};
use core::arch::asm;

const IQ2_XXS_BYTES: usize = 66;
const IQ3_XXS_BYTES: usize = 98;

/// Super-blocks whose integer sums are gathered before the float part runs.
const RUN: usize = 16;

/// sumf over `n` IQ2_XXS super-blocks (n >= 1; `x` at the first one's qs, byte 2; `y` at the
/// first Q8_K block's quants, byte 4), the scalar twin's float steps in its order: `$body` is
/// one trip (tools/iq-asm.py `emit iq2xxs neon|dot`): block i's integer into s30 and
/// f16(d) * dy into s29, after block i - 1's sumf += s29 * f32(s30) (zero before the first).
macro_rules! iq2_xxs_row {
    ($x:expr, $y:expr, $n:expr, [$($pre:literal),*], [$($body:literal),* $(,)?]) => {
        grid_row_asm!(IQ2XXS_GRID.as_ptr(), KSIGNS64.as_ptr(), $x, $y, $n, [$($pre),*], [$($body),*])
    };
}

/// [`iq2_xxs_row!`] for any grid format: `$body` reads `{grid}` and `{signs}` (a sign table,
/// or constants), `{x}` (at the first block's byte 2), `{y}`, `{n}` and `{g0}`..`{g15}`.
macro_rules! grid_row_asm {
    ($grid:expr, $signs:expr, $x:expr, $y:expr, $n:expr, [$($pre:literal),*], [$($body:literal),* $(,)?]) => {{
        let mut sumf = 0.0f32;
        asm!(
            $($pre,)*
            "movi d29, #0",
            "movi d30, #0",
            "2:",
            $($body,)*
            "scvtf s28, s30",
            "fmul s28, s29, s28",
            "fadd s31, s31, s28",
            grid = in(reg) $grid,
            signs = in(reg) $signs,
            x = inout(reg) $x => _,
            y = inout(reg) $y => _,
            n = inout(reg) $n => _,
            g0 = out(reg) _, g1 = out(reg) _, g2 = out(reg) _, g3 = out(reg) _,
            g4 = out(reg) _, g5 = out(reg) _, g6 = out(reg) _, g7 = out(reg) _,
            g8 = out(reg) _, g9 = out(reg) _, g10 = out(reg) _, g11 = out(reg) _,
            g12 = out(reg) _, g13 = out(reg) _, g14 = out(reg) _, g15 = out(reg) _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _,
            out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v14") _,
            out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _, out("v24") _,
            out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _,
            out("v30") _, inout("v31") sumf,
            options(nostack, readonly),
        );
        sumf
    }};
}

/// [`block_sums!`] for IQ3_XXS: the 8 indices of a sub-block from `x` (the first block's qs
/// at byte 2), its signs-and-scale word from `s` (the first block's at byte 66).
macro_rules! block_sums_iq3 {
    ($x:expr, $y:expr, $n:expr, $out:expr, [$($pre:literal),*], [$($dot:literal),*]) => {
        asm!(
            $($pre,)*
            "2:",
            "movi v20.4s, #0",
            "mov {c:w}, #8",
            "3:",
            "ldr {a}, [{x}], #8",
            "ldr {b:w}, [{s}], #4",
            "and {i0}, {a}, #0xff",
            "ubfx {i1}, {a}, #8, #8",
            "ubfx {i2}, {a}, #16, #8",
            "ubfx {i3}, {a}, #24, #8",
            "ldr s0, [{grid}, {i0}, lsl #2]",
            "ldr s1, [{grid}, {i1}, lsl #2]",
            "ldr s3, [{grid}, {i2}, lsl #2]",
            "ldr s5, [{grid}, {i3}, lsl #2]",
            "ubfx {i0}, {a}, #32, #8",
            "ubfx {i1}, {a}, #40, #8",
            "ubfx {i2}, {a}, #48, #8",
            "lsr {i3}, {a}, #56",
            "ldr s2, [{grid}, {i0}, lsl #2]",
            "ldr s7, [{grid}, {i1}, lsl #2]",
            "ldr s16, [{grid}, {i2}, lsl #2]",
            "ldr s17, [{grid}, {i3}, lsl #2]",
            "mov v0.s[1], v1.s[0]",
            "mov v0.s[2], v3.s[0]",
            "mov v0.s[3], v5.s[0]",
            "mov v2.s[1], v7.s[0]",
            "mov v2.s[2], v16.s[0]",
            "mov v2.s[3], v17.s[0]",
            "and {i0:w}, {b:w}, #0x7f",
            "ubfx {i1:w}, {b:w}, #7, #7",
            "ubfx {i2:w}, {b:w}, #14, #7",
            "ubfx {i3:w}, {b:w}, #21, #7",
            "ldr d4, [{signs}, {i0}, lsl #3]",
            "ldr d5, [{signs}, {i1}, lsl #3]",
            "ldr d6, [{signs}, {i2}, lsl #3]",
            "ldr d7, [{signs}, {i3}, lsl #3]",
            "lsr {b:w}, {b:w}, #28",
            "orr {b:w}, {one:w}, {b:w}, lsl #1",
            "mov v4.d[1], v5.d[0]",
            "mov v6.d[1], v7.d[0]",
            "ld1 {{v16.16b, v17.16b}}, [{y}], #32",
            "eor v0.16b, v0.16b, v4.16b",
            "eor v2.16b, v2.16b, v6.16b",
            "sub v0.16b, v0.16b, v4.16b",
            "sub v2.16b, v2.16b, v6.16b",
            $($dot,)*
            "subs {c:w}, {c:w}, #1",
            "b.ne 3b",
            "addv s20, v20.4s",
            "str s20, [{o}], #4",
            "add {x}, {x}, #34",
            "add {s}, {s}, #66",
            "add {y}, {y}, #36",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            grid = in(reg) IQ3XXS_GRID.as_ptr(),
            signs = in(reg) KSIGNS64.as_ptr(),
            one = in(reg) 1u64,
            x = inout(reg) $x => _,
            s = inout(reg) $x.add(64) => _,
            y = inout(reg) $y => _,
            n = inout(reg) $n => _,
            o = inout(reg) $out => _,
            a = out(reg) _, b = out(reg) _, c = out(reg) _,
            i0 = out(reg) _, i1 = out(reg) _, i2 = out(reg) _, i3 = out(reg) _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v7") _, out("v16") _, out("v17") _,
            out("v18") _, out("v19") _, out("v20") _, out("v21") _,
            options(nostack),
        )
    };
}

/// sumf of an IQ2_XXS row with ARMv8.0 widening multiplies.
///
/// # Safety
/// n >= 1 super-blocks of weights (`x` at the first one's byte 2) and Q8_K blocks (`y` at the
/// first one's byte 4) must lie inside their slices.
#[inline(always)]
unsafe fn iq2_xxs_row_neon(x: *const u8, y: *const u8, n: usize) -> f32 {
    iq2_xxs_row!(
        x,
        y,
        n,
        [],
        [
            "scvtf s0, s30",
            "ldur h1, [{x}, #-2]",
            "ldur s2, [{y}, #-4]",
            "ldr {g0}, [{x}, #0]",
            "ldp d3, d4, [{y}, #0]",
            "ldp d5, d6, [{y}, #16]",
            "ldr {g1}, [{x}, #8]",
            "ldp d7, d8, [{y}, #32]",
            "ldp d9, d10, [{y}, #48]",
            "ldr {g2}, [{x}, #16]",
            "ldp d11, d12, [{y}, #64]",
            "ldp d13, d14, [{y}, #80]",
            "ldr {g3}, [{x}, #24]",
            "ldp d15, d16, [{y}, #96]",
            "ldr {g4}, [{x}, #32]",
            "ldr {g5}, [{x}, #40]",
            "ldr {g6}, [{x}, #48]",
            "ldr {g7}, [{x}, #56]",
            "subs {n}, {n}, #1",
            "ldp d20, d21, [{y}, #112]",
            "fmul s0, s29, s0",
            "fcvt s17, h1",
            "and {g8}, {g0}, #0xff",
            "ubfx {g9}, {g0}, #8, #8",
            "ubfx {g10}, {g0}, #16, #8",
            "ubfx {g11}, {g0}, #24, #8",
            "ubfx {g12}, {g0}, #32, #7",
            "ubfx {g13}, {g0}, #39, #7",
            "ubfx {g14}, {g0}, #46, #7",
            "ubfx {g15}, {g0}, #53, #7",
            "add {x}, {x}, #66",
            "ldr d18, [{grid}, {g8}, lsl #3]",
            "fadd s31, s31, s0",
            "ldr d19, [{grid}, {g9}, lsl #3]",
            "fmul s29, s17, s2",
            "ldr d22, [{grid}, {g10}, lsl #3]",
            "ldr d23, [{grid}, {g11}, lsl #3]",
            "ldr d24, [{signs}, {g12}, lsl #3]",
            "ldr d25, [{signs}, {g13}, lsl #3]",
            "ldr d26, [{signs}, {g14}, lsl #3]",
            "ldr d27, [{signs}, {g15}, lsl #3]",
            "ubfx {g8}, {g0}, #59, #5",
            "and {g9}, {g1}, #0xff",
            "ubfx {g10}, {g1}, #16, #8",
            "ubfx {g11}, {g1}, #24, #8",
            "ubfx {g12}, {g1}, #32, #7",
            "ubfx {g13}, {g1}, #39, #7",
            "ubfx {g14}, {g1}, #46, #7",
            "eor v28.8b, v18.8b, v24.8b",
            "ubfx {g15}, {g1}, #53, #7",
            "eor v1.8b, v19.8b, v25.8b",
            "ubfx {g0}, {g1}, #8, #8",
            "orr {g8:w}, {g8:w}, #1",
            "eor v0.8b, v22.8b, v26.8b",
            "eor v17.8b, v23.8b, v27.8b",
            "sub v28.8b, v28.8b, v24.8b",
            "sub v1.8b, v1.8b, v25.8b",
            "dup v23.8h, {g8:w}",
            "sub v0.8b, v0.8b, v26.8b",
            "ldp d24, d19, [{y}, #128]",
            "sub v17.8b, v17.8b, v27.8b",
            "ldp d25, d22, [{y}, #144]",
            "smull v2.8h, v28.8b, v3.8b",
            "ubfx {g8}, {g1}, #59, #5",
            "smull v18.8h, v1.8b, v4.8b",
            "ldr d3, [{grid}, {g9}, lsl #3]",
            "and {g1}, {g2}, #0xff",
            "orr {g8:w}, {g8:w}, #1",
            "ldr d1, [{grid}, {g0}, lsl #3]",
            "ldr d4, [{grid}, {g10}, lsl #3]",
            "ubfx {g9}, {g2}, #8, #8",
            "smlal v2.8h, v0.8b, v5.8b",
            "smlal v18.8h, v17.8b, v6.8b",
            "ubfx {g0}, {g2}, #16, #8",
            "ubfx {g10}, {g2}, #24, #8",
            "ldr d0, [{grid}, {g11}, lsl #3]",
            "ldr d5, [{signs}, {g12}, lsl #3]",
            "ldr d17, [{signs}, {g13}, lsl #3]",
            "ldr d6, [{signs}, {g14}, lsl #3]",
            "ubfx {g11}, {g2}, #32, #7",
            "add v26.8h, v2.8h, v18.8h",
            "ubfx {g12}, {g2}, #39, #7",
            "ubfx {g13}, {g2}, #46, #7",
            "ubfx {g14}, {g2}, #53, #7",
            "ldr d2, [{signs}, {g15}, lsl #3]",
            "eor v18.8b, v3.8b, v5.8b",
            "smull v27.4s, v26.4h, v23.4h",
            "smull2 v28.4s, v26.8h, v23.8h",
            "ubfx {g15}, {g2}, #59, #5",
            "sub v18.8b, v18.8b, v5.8b",
            "eor v26.8b, v1.8b, v17.8b",
            "eor v23.8b, v4.8b, v6.8b",
            "eor v3.8b, v0.8b, v2.8b",
            "ubfx {g2}, {g3}, #8, #8",
            "orr {g15:w}, {g15:w}, #1",
            "smull v5.8h, v18.8b, v7.8b",
            "sub v26.8b, v26.8b, v17.8b",
            "dup v0.8h, {g8:w}",
            "sub v23.8b, v23.8b, v6.8b",
            "sub v3.8b, v3.8b, v2.8b",
            "ldr d7, [{grid}, {g1}, lsl #3]",
            "ldp d17, d4, [{y}, #160]",
            "and {g8}, {g3}, #0xff",
            "smull v1.8h, v26.8b, v8.8b",
            "smlal v5.8h, v23.8b, v9.8b",
            "ubfx {g1}, {g3}, #16, #8",
            "ldr d26, [{grid}, {g9}, lsl #3]",
            "ldr d8, [{grid}, {g0}, lsl #3]",
            "ldr d23, [{grid}, {g10}, lsl #3]",
            "ldr d9, [{signs}, {g11}, lsl #3]",
            "ubfx {g9}, {g3}, #24, #8",
            "smlal v1.8h, v3.8b, v10.8b",
            "ubfx {g0}, {g3}, #32, #7",
            "ubfx {g10}, {g3}, #39, #7",
            "ubfx {g11}, {g3}, #46, #7",
            "ldr d3, [{signs}, {g12}, lsl #3]",
            "ldr d10, [{signs}, {g13}, lsl #3]",
            "add v6.8h, v5.8h, v1.8h",
            "ubfx {g12}, {g3}, #53, #7",
            "ubfx {g13}, {g3}, #59, #5",
            "ldr d5, [{signs}, {g14}, lsl #3]",
            "eor v1.8b, v7.8b, v9.8b",
            "smull v2.4s, v6.4h, v0.4h",
            "smull2 v18.4s, v6.8h, v0.8h",
            "ubfx {g3}, {g4}, #16, #8",
            "orr {g13:w}, {g13:w}, #1",
            "and {g14}, {g4}, #0xff",
            "sub v1.8b, v1.8b, v9.8b",
            "eor v6.8b, v26.8b, v3.8b",
            "eor v0.8b, v8.8b, v10.8b",
            "eor v7.8b, v23.8b, v5.8b",
            "smull v9.8h, v1.8b, v11.8b",
            "sub v6.8b, v6.8b, v3.8b",
            "dup v23.8h, {g15:w}",
            "sub v0.8b, v0.8b, v10.8b",
            "ldr d11, [{grid}, {g8}, lsl #3]",
            "sub v7.8b, v7.8b, v5.8b",
            "ldp d3, d8, [{y}, #176]",
            "ubfx {g15}, {g4}, #8, #8",
            "smull v26.8h, v6.8b, v12.8b",
            "ubfx {g8}, {g4}, #24, #8",
            "smlal v9.8h, v0.8b, v13.8b",
            "ldp d5, d1, [{y}, #192]",
            "ldr d6, [{grid}, {g2}, lsl #3]",
            "ldr d12, [{grid}, {g1}, lsl #3]",
            "ldr d0, [{grid}, {g9}, lsl #3]",
            "ldr d13, [{signs}, {g0}, lsl #3]",
            "smlal v26.8h, v7.8b, v14.8b",
            "ubfx {g2}, {g4}, #32, #7",
            "ubfx {g1}, {g4}, #39, #7",
            "ubfx {g9}, {g4}, #46, #7",
            "ubfx {g0}, {g4}, #53, #7",
            "ldr d7, [{signs}, {g10}, lsl #3]",
            "ldr d14, [{signs}, {g11}, lsl #3]",
            "add v10.8h, v9.8h, v26.8h",
            "ubfx {g10}, {g4}, #59, #5",
            "and {g11}, {g5}, #0xff",
            "ldr d9, [{signs}, {g12}, lsl #3]",
            "eor v26.8b, v11.8b, v13.8b",
            "ubfx {g4}, {g5}, #24, #8",
            "smlal v27.4s, v10.4h, v23.4h",
            "smlal2 v28.4s, v10.8h, v23.8h",
            "orr {g10:w}, {g10:w}, #1",
            "ubfx {g12}, {g5}, #8, #8",
            "sub v26.8b, v26.8b, v13.8b",
            "eor v11.8b, v0.8b, v9.8b",
            "eor v10.8b, v6.8b, v7.8b",
            "eor v23.8b, v12.8b, v14.8b",
            "dup v0.8h, {g13:w}",
            "smull v13.8h, v26.8b, v15.8b",
            "sub v11.8b, v11.8b, v9.8b",
            "sub v10.8b, v10.8b, v7.8b",
            "ubfx {g13}, {g5}, #16, #8",
            "sub v23.8b, v23.8b, v14.8b",
            "ldr d15, [{grid}, {g14}, lsl #3]",
            "ldp d9, d26, [{y}, #224]",
            "ldp d7, d12, [{y}, #208]",
            "smull v6.8h, v10.8b, v16.8b",
            "ubfx {g14}, {g5}, #32, #7",
            "smlal v13.8h, v23.8b, v20.8b",
            "ldr d10, [{grid}, {g15}, lsl #3]",
            "ldr d16, [{grid}, {g3}, lsl #3]",
            "ldr d23, [{grid}, {g8}, lsl #3]",
            "ldr d20, [{signs}, {g2}, lsl #3]",
            "ubfx {g15}, {g5}, #39, #7",
            "smlal v6.8h, v11.8b, v21.8b",
            "ubfx {g3}, {g5}, #46, #7",
            "ubfx {g8}, {g5}, #53, #7",
            "ubfx {g2}, {g5}, #59, #5",
            "ldr d11, [{signs}, {g1}, lsl #3]",
            "ldr d21, [{signs}, {g9}, lsl #3]",
            "ubfx {g5}, {g6}, #39, #7",
            "add v14.8h, v13.8h, v6.8h",
            "and {g1}, {g6}, #0xff",
            "orr {g2:w}, {g2:w}, #1",
            "ubfx {g9}, {g6}, #8, #8",
            "ldr d13, [{signs}, {g0}, lsl #3]",
            "eor v6.8b, v15.8b, v20.8b",
            "smlal v2.4s, v14.4h, v0.4h",
            "smlal2 v18.4s, v14.8h, v0.8h",
            "ubfx {g0}, {g6}, #16, #8",
            "sub v6.8b, v6.8b, v20.8b",
            "eor v14.8b, v10.8b, v11.8b",
            "eor v0.8b, v16.8b, v21.8b",
            "eor v15.8b, v23.8b, v13.8b",
            "smull v20.8h, v6.8b, v24.8b",
            "sub v14.8b, v14.8b, v11.8b",
            "dup v23.8h, {g10:w}",
            "sub v0.8b, v0.8b, v21.8b",
            "ldr d6, [{grid}, {g12}, lsl #3]",
            "ldr d24, [{grid}, {g13}, lsl #3]",
            "sub v15.8b, v15.8b, v13.8b",
            "ldp d11, d16, [{y}, #240]",
            "ubfx {g10}, {g6}, #24, #8",
            "smull v10.8h, v14.8b, v19.8b",
            "ubfx {g12}, {g6}, #46, #7",
            "smlal v20.8h, v0.8b, v25.8b",
            "ubfx {g13}, {g6}, #53, #7",
            "ldr d13, [{grid}, {g11}, lsl #3]",
            "add {y}, {y}, #292",
            "ldr d14, [{grid}, {g4}, lsl #3]",
            "ldr d19, [{signs}, {g14}, lsl #3]",
            "ldr d0, [{signs}, {g15}, lsl #3]",
            "ldr d25, [{signs}, {g3}, lsl #3]",
            "smlal v10.8h, v15.8b, v22.8b",
            "ubfx {g11}, {g6}, #32, #7",
            "ubfx {g4}, {g6}, #59, #5",
            "and {g14}, {g7}, #0xff",
            "ubfx {g15}, {g7}, #8, #8",
            "ubfx {g3}, {g7}, #16, #8",
            "ldr d15, [{signs}, {g8}, lsl #3]",
            "eor v22.8b, v13.8b, v19.8b",
            "ubfx {g6}, {g7}, #39, #7",
            "orr {g4:w}, {g4:w}, #1",
            "add v21.8h, v20.8h, v10.8h",
            "ubfx {g8}, {g7}, #24, #8",
            "sub v22.8b, v22.8b, v19.8b",
            "eor v20.8b, v6.8b, v0.8b",
            "eor v10.8b, v24.8b, v25.8b",
            "smlal v27.4s, v21.4h, v23.4h",
            "smlal2 v28.4s, v21.8h, v23.8h",
            "ldr d19, [{grid}, {g1}, lsl #3]",
            "dup v6.8h, {g2:w}",
            "ldr d24, [{grid}, {g0}, lsl #3]",
            "sub v20.8b, v20.8b, v0.8b",
            "sub v10.8b, v10.8b, v25.8b",
            "eor v21.8b, v14.8b, v15.8b",
            "smull v23.8h, v22.8b, v17.8b",
            "ubfx {g1}, {g7}, #32, #7",
            "ubfx {g2}, {g7}, #46, #7",
            "ubfx {g0}, {g7}, #59, #5",
            "ldr d0, [{grid}, {g9}, lsl #3]",
            "smull v13.8h, v20.8b, v4.8b",
            "ldr d14, [{grid}, {g10}, lsl #3]",
            "ldr d22, [{signs}, {g5}, lsl #3]",
            "sub v21.8b, v21.8b, v15.8b",
            "smlal v23.8h, v10.8b, v3.8b",
            "ubfx {g9}, {g7}, #53, #7",
            "orr {g0:w}, {g0:w}, #1",
            "ldr d4, [{signs}, {g12}, lsl #3]",
            "ldr d15, [{signs}, {g11}, lsl #3]",
            "ldr d10, [{signs}, {g13}, lsl #3]",
            "smlal v13.8h, v21.8b, v8.8b",
            "eor v20.8b, v0.8b, v22.8b",
            "ldr d21, [{grid}, {g14}, lsl #3]",
            "eor v8.8b, v24.8b, v4.8b",
            "eor v17.8b, v19.8b, v15.8b",
            "ldr d0, [{grid}, {g8}, lsl #3]",
            "sub v20.8b, v20.8b, v22.8b",
            "add v25.8h, v23.8h, v13.8h",
            "dup v19.8h, {g4:w}",
            "sub v8.8b, v8.8b, v4.8b",
            "sub v17.8b, v17.8b, v15.8b",
            "ldr d22, [{signs}, {g6}, lsl #3]",
            "ldr d13, [{grid}, {g15}, lsl #3]",
            "smull v23.8h, v20.8b, v1.8b",
            "smlal v2.4s, v25.4h, v6.4h",
            "smlal2 v18.4s, v25.8h, v6.8h",
            "ldr d15, [{signs}, {g1}, lsl #3]",
            "smull v3.8h, v17.8b, v5.8b",
            "ldr d20, [{signs}, {g9}, lsl #3]",
            "eor v25.8b, v14.8b, v10.8b",
            "ldr d6, [{grid}, {g3}, lsl #3]",
            "eor v1.8b, v13.8b, v22.8b",
            "ldr d17, [{signs}, {g2}, lsl #3]",
            "eor v5.8b, v21.8b, v15.8b",
            "dup v14.8h, {g0:w}",
            "sub v25.8b, v25.8b, v10.8b",
            "smlal v3.8h, v8.8b, v7.8b",
            "sub v1.8b, v1.8b, v22.8b",
            "sub v5.8b, v5.8b, v15.8b",
            "eor v4.8b, v6.8b, v17.8b",
            "eor v10.8b, v0.8b, v20.8b",
            "smlal v23.8h, v25.8b, v12.8b",
            "smull v7.8h, v1.8b, v26.8b",
            "smull v8.8h, v5.8b, v9.8b",
            "sub v4.8b, v4.8b, v17.8b",
            "sub v10.8b, v10.8b, v20.8b",
            "add v24.8h, v3.8h, v23.8h",
            "smlal v8.8h, v4.8b, v11.8b",
            "smlal v7.8h, v10.8b, v16.8b",
            "smlal v27.4s, v24.4h, v19.4h",
            "smlal2 v28.4s, v24.8h, v19.8h",
            "add v25.8h, v8.8h, v7.8h",
            "add v27.4s, v27.4s, v28.4s",
            "smlal v2.4s, v25.4h, v14.4h",
            "smlal2 v18.4s, v25.8h, v14.8h",
            "add v2.4s, v2.4s, v18.4s",
            "add v27.4s, v27.4s, v2.4s",
            "addv s30, v27.4s",
            "b.ne 2b",
        ]
    )
}

/// [`iq2_xxs_row_neon`] with `sdot` (ARMv8.2 dotprod).
///
/// # Safety
/// As [`iq2_xxs_row_neon`], and the CPU must implement dotprod.
#[inline(always)]
unsafe fn iq2_xxs_row_dotprod(x: *const u8, y: *const u8, n: usize) -> f32 {
    iq2_xxs_row!(
        x,
        y,
        n,
        [".arch_extension dotprod"],
        [
            "scvtf s0, s30",
            "ldur h1, [{x}, #-2]",
            "ldur s2, [{y}, #-4]",
            "ldr {g0}, [{x}, #0]",
            "ldp d3, d4, [{y}, #0]",
            "ldp d5, d6, [{y}, #16]",
            "movi v7.2s, #0",
            "movi v8.2s, #0",
            "ldr {g1}, [{x}, #8]",
            "ldp d9, d10, [{y}, #32]",
            "ldp d11, d12, [{y}, #48]",
            "movi v13.2s, #0",
            "movi v14.2s, #0",
            "ldr {g2}, [{x}, #16]",
            "movi v15.2s, #0",
            "ldr {g3}, [{x}, #24]",
            "ldr {g4}, [{x}, #32]",
            "ldr {g5}, [{x}, #40]",
            "subs {n}, {n}, #1",
            "movi v17.2s, #0",
            "ldp d18, d19, [{y}, #64]",
            "ldr {g15}, [{x}, #48]",
            "fmul s0, s29, s0",
            "fcvt s16, h1",
            "and {g6}, {g0}, #0xff",
            "ubfx {g7}, {g0}, #8, #8",
            "ubfx {g8}, {g0}, #16, #8",
            "ubfx {g9}, {g0}, #24, #8",
            "ubfx {g10}, {g0}, #32, #7",
            "ubfx {g11}, {g0}, #39, #7",
            "ubfx {g12}, {g0}, #46, #7",
            "ubfx {g13}, {g0}, #53, #7",
            "ubfx {g14}, {g0}, #59, #5",
            "ldr d20, [{grid}, {g6}, lsl #3]",
            "fadd s31, s31, s0",
            "ldr d21, [{grid}, {g7}, lsl #3]",
            "fmul s29, s16, s2",
            "ldr d22, [{grid}, {g8}, lsl #3]",
            "ldr d23, [{grid}, {g9}, lsl #3]",
            "ldr d24, [{signs}, {g10}, lsl #3]",
            "ldr d25, [{signs}, {g11}, lsl #3]",
            "ldr d26, [{signs}, {g12}, lsl #3]",
            "ldr d27, [{signs}, {g13}, lsl #3]",
            "and {g0}, {g1}, #0xff",
            "orr {g14:w}, {g14:w}, #1",
            "ubfx {g6}, {g1}, #8, #8",
            "ubfx {g7}, {g1}, #16, #8",
            "ubfx {g8}, {g1}, #24, #8",
            "ubfx {g9}, {g1}, #32, #7",
            "ubfx {g10}, {g1}, #39, #7",
            "ubfx {g11}, {g1}, #46, #7",
            "ubfx {g12}, {g1}, #53, #7",
            "eor v28.8b, v20.8b, v24.8b",
            "ubfx {g13}, {g1}, #59, #5",
            "eor v1.8b, v21.8b, v25.8b",
            "eor v0.8b, v22.8b, v26.8b",
            "eor v16.8b, v23.8b, v27.8b",
            "ldp d2, d20, [{y}, #80]",
            "and {g1}, {g2}, #0xff",
            "sub v28.8b, v28.8b, v24.8b",
            "orr {g13:w}, {g13:w}, #1",
            "movi v22.2s, #0",
            "sub v1.8b, v1.8b, v25.8b",
            "sub v0.8b, v0.8b, v26.8b",
            "sub v16.8b, v16.8b, v27.8b",
            "ldp d24, d21, [{y}, #96]",
            "sdot v7.2s, v28.8b, v3.8b",
            "dup v26.2s, {g14:w}",
            "sdot v8.2s, v1.8b, v4.8b",
            "ldr d27, [{grid}, {g0}, lsl #3]",
            "ldr d28, [{grid}, {g6}, lsl #3]",
            "ldr d3, [{grid}, {g7}, lsl #3]",
            "ldr {g14}, [{x}, #56]",
            "ldr d1, [{grid}, {g8}, lsl #3]",
            "ldr d4, [{signs}, {g9}, lsl #3]",
            "ubfx {g0}, {g2}, #8, #8",
            "sdot v7.2s, v0.8b, v5.8b",
            "ubfx {g6}, {g2}, #16, #8",
            "ubfx {g7}, {g2}, #24, #8",
            "sdot v8.2s, v16.8b, v6.8b",
            "add {x}, {x}, #66",
            "ubfx {g8}, {g2}, #32, #7",
            "ubfx {g9}, {g2}, #39, #7",
            "ldr d0, [{signs}, {g10}, lsl #3]",
            "ldr d5, [{signs}, {g11}, lsl #3]",
            "ldr d16, [{signs}, {g12}, lsl #3]",
            "eor v6.8b, v27.8b, v4.8b",
            "add v25.2s, v7.2s, v8.2s",
            "ubfx {g10}, {g2}, #46, #7",
            "ubfx {g11}, {g2}, #53, #7",
            "ubfx {g12}, {g2}, #59, #5",
            "eor v7.8b, v28.8b, v0.8b",
            "eor v8.8b, v3.8b, v5.8b",
            "sub v6.8b, v6.8b, v4.8b",
            "mul v23.2s, v25.2s, v26.2s",
            "ubfx {g2}, {g3}, #8, #8",
            "movi v28.2s, #0",
            "orr {g12:w}, {g12:w}, #1",
            "movi v3.2s, #0",
            "sub v7.8b, v7.8b, v0.8b",
            "movi v4.2s, #0",
            "sub v8.8b, v8.8b, v5.8b",
            "eor v25.8b, v1.8b, v16.8b",
            "ldp d26, d27, [{y}, #112]",
            "sdot v13.2s, v6.8b, v9.8b",
            "sdot v14.2s, v7.8b, v10.8b",
            "dup v5.2s, {g13:w}",
            "sub v25.8b, v25.8b, v16.8b",
            "ldr d6, [{grid}, {g0}, lsl #3]",
            "ldr d9, [{grid}, {g6}, lsl #3]",
            "ldr d7, [{grid}, {g7}, lsl #3]",
            "ldr d10, [{signs}, {g8}, lsl #3]",
            "and {g13}, {g3}, #0xff",
            "ldr d16, [{grid}, {g1}, lsl #3]",
            "sdot v13.2s, v8.8b, v11.8b",
            "ubfx {g0}, {g3}, #24, #8",
            "sdot v14.2s, v25.8b, v12.8b",
            "ubfx {g6}, {g3}, #32, #7",
            "ubfx {g7}, {g3}, #39, #7",
            "ubfx {g8}, {g3}, #46, #7",
            "ubfx {g1}, {g3}, #16, #8",
            "ldr d8, [{signs}, {g9}, lsl #3]",
            "ldr d11, [{signs}, {g10}, lsl #3]",
            "ldr d25, [{signs}, {g11}, lsl #3]",
            "eor v12.8b, v16.8b, v10.8b",
            "add v0.2s, v13.2s, v14.2s",
            "ubfx {g9}, {g3}, #53, #7",
            "ubfx {g10}, {g3}, #59, #5",
            "and {g11}, {g4}, #0xff",
            "eor v13.8b, v6.8b, v8.8b",
            "eor v14.8b, v9.8b, v11.8b",
            "sub v12.8b, v12.8b, v10.8b",
            "mul v1.2s, v0.2s, v5.2s",
            "ubfx {g3}, {g4}, #16, #8",
            "orr {g10:w}, {g10:w}, #1",
            "movi v9.2s, #0",
            "sub v13.8b, v13.8b, v8.8b",
            "ldp d10, d6, [{y}, #144]",
            "sub v14.8b, v14.8b, v11.8b",
            "eor v0.8b, v7.8b, v25.8b",
            "ldp d5, d16, [{y}, #128]",
            "sdot v15.2s, v12.8b, v18.8b",
            "sdot v17.2s, v13.8b, v19.8b",
            "dup v11.2s, {g12:w}",
            "movi v7.2s, #0",
            "sub v0.8b, v0.8b, v25.8b",
            "ldr d12, [{grid}, {g2}, lsl #3]",
            "ldr d18, [{grid}, {g1}, lsl #3]",
            "ldr d13, [{grid}, {g0}, lsl #3]",
            "ldr d19, [{signs}, {g6}, lsl #3]",
            "ubfx {g12}, {g4}, #8, #8",
            "sdot v15.2s, v14.8b, v2.8b",
            "ldr d25, [{grid}, {g13}, lsl #3]",
            "ubfx {g2}, {g4}, #32, #7",
            "sdot v17.2s, v0.8b, v20.8b",
            "ubfx {g1}, {g4}, #39, #7",
            "ubfx {g0}, {g4}, #46, #7",
            "ubfx {g6}, {g4}, #53, #7",
            "ldr d14, [{signs}, {g7}, lsl #3]",
            "ldr d2, [{signs}, {g8}, lsl #3]",
            "ubfx {g13}, {g4}, #24, #8",
            "ldr d0, [{signs}, {g9}, lsl #3]",
            "eor v20.8b, v25.8b, v19.8b",
            "add v8.2s, v15.2s, v17.2s",
            "ubfx {g7}, {g4}, #59, #5",
            "and {g8}, {g5}, #0xff",
            "ubfx {g9}, {g5}, #8, #8",
            "eor v15.8b, v12.8b, v14.8b",
            "eor v17.8b, v18.8b, v2.8b",
            "sub v20.8b, v20.8b, v19.8b",
            "ubfx {g4}, {g5}, #24, #8",
            "mla v23.2s, v8.2s, v11.2s",
            "orr {g7:w}, {g7:w}, #1",
            "movi v18.2s, #0",
            "sub v15.8b, v15.8b, v14.8b",
            "ldp d19, d12, [{y}, #176]",
            "sub v17.8b, v17.8b, v2.8b",
            "eor v8.8b, v13.8b, v0.8b",
            "sdot v22.2s, v20.8b, v24.8b",
            "ldp d11, d25, [{y}, #160]",
            "sdot v4.2s, v15.8b, v21.8b",
            "dup v2.2s, {g10:w}",
            "movi v13.2s, #0",
            "ldr d20, [{grid}, {g12}, lsl #3]",
            "ldr d24, [{grid}, {g3}, lsl #3]",
            "sub v8.8b, v8.8b, v0.8b",
            "ldr d15, [{grid}, {g13}, lsl #3]",
            "ldr d21, [{signs}, {g2}, lsl #3]",
            "ubfx {g10}, {g5}, #16, #8",
            "sdot v22.2s, v17.8b, v26.8b",
            "ubfx {g12}, {g5}, #39, #7",
            "ubfx {g3}, {g5}, #46, #7",
            "ldr d0, [{grid}, {g11}, lsl #3]",
            "ubfx {g13}, {g5}, #53, #7",
            "sdot v4.2s, v8.8b, v27.8b",
            "ubfx {g2}, {g5}, #59, #5",
            "ldr d17, [{signs}, {g1}, lsl #3]",
            "ldr d26, [{signs}, {g0}, lsl #3]",
            "ubfx {g11}, {g5}, #32, #7",
            "ldr d8, [{signs}, {g6}, lsl #3]",
            "eor v27.8b, v0.8b, v21.8b",
            "orr {g2:w}, {g2:w}, #1",
            "and {g1}, {g15}, #0xff",
            "ubfx {g0}, {g15}, #8, #8",
            "add v14.2s, v22.2s, v4.2s",
            "ubfx {g5}, {g15}, #32, #7",
            "ubfx {g6}, {g15}, #16, #8",
            "sub v27.8b, v27.8b, v21.8b",
            "eor v22.8b, v20.8b, v17.8b",
            "eor v4.8b, v24.8b, v26.8b",
            "mla v1.2s, v14.2s, v2.2s",
            "ldp d21, d20, [{y}, #208]",
            "sdot v28.2s, v27.8b, v5.8b",
            "movi v24.2s, #0",
            "sub v22.8b, v22.8b, v17.8b",
            "eor v14.8b, v15.8b, v8.8b",
            "ldp d2, d0, [{y}, #192]",
            "sub v4.8b, v4.8b, v26.8b",
            "ldr d27, [{grid}, {g9}, lsl #3]",
            "ldr d5, [{grid}, {g10}, lsl #3]",
            "movi v15.2s, #0",
            "sdot v3.2s, v22.8b, v16.8b",
            "sub v14.8b, v14.8b, v8.8b",
            "dup v26.2s, {g7:w}",
            "ubfx {g9}, {g15}, #46, #7",
            "sdot v28.2s, v4.8b, v10.8b",
            "ubfx {g10}, {g15}, #53, #7",
            "ldr d22, [{grid}, {g4}, lsl #3]",
            "ldr d16, [{signs}, {g11}, lsl #3]",
            "ldr d8, [{grid}, {g8}, lsl #3]",
            "ubfx {g7}, {g15}, #24, #8",
            "sdot v3.2s, v14.8b, v6.8b",
            "ldr d4, [{signs}, {g12}, lsl #3]",
            "ldr d10, [{signs}, {g3}, lsl #3]",
            "ubfx {g4}, {g15}, #59, #5",
            "and {g11}, {g14}, #0xff",
            "ubfx {g8}, {g15}, #39, #7",
            "ldr d14, [{signs}, {g13}, lsl #3]",
            "eor v6.8b, v8.8b, v16.8b",
            "ubfx {g12}, {g14}, #8, #8",
            "ubfx {g3}, {g14}, #16, #8",
            "add v17.2s, v28.2s, v3.2s",
            "orr {g4:w}, {g4:w}, #1",
            "ubfx {g15}, {g14}, #53, #7",
            "ubfx {g13}, {g14}, #24, #8",
            "sub v6.8b, v6.8b, v16.8b",
            "eor v28.8b, v27.8b, v4.8b",
            "eor v3.8b, v5.8b, v10.8b",
            "mla v23.2s, v17.2s, v26.2s",
            "ldp d16, d27, [{y}, #240]",
            "sdot v9.2s, v6.8b, v11.8b",
            "dup v5.2s, {g2:w}",
            "sub v28.8b, v28.8b, v4.8b",
            "eor v17.8b, v22.8b, v14.8b",
            "ldp d26, d8, [{y}, #224]",
            "sub v3.8b, v3.8b, v10.8b",
            "ldr d6, [{grid}, {g7}, lsl #3]",
            "ldr d11, [{signs}, {g5}, lsl #3]",
            "ubfx {g2}, {g14}, #32, #7",
            "ldr d22, [{grid}, {g0}, lsl #3]",
            "sdot v7.2s, v28.8b, v25.8b",
            "add {y}, {y}, #292",
            "sub v17.8b, v17.8b, v14.8b",
            "ldr d10, [{grid}, {g1}, lsl #3]",
            "sdot v9.2s, v3.8b, v19.8b",
            "ubfx {g0}, {g14}, #46, #7",
            "ldr d28, [{signs}, {g8}, lsl #3]",
            "ldr d25, [{signs}, {g9}, lsl #3]",
            "ldr d14, [{grid}, {g6}, lsl #3]",
            "ubfx {g1}, {g14}, #39, #7",
            "sdot v7.2s, v17.8b, v12.8b",
            "ldr d3, [{signs}, {g10}, lsl #3]",
            "eor v19.8b, v10.8b, v11.8b",
            "ubfx {g6}, {g14}, #59, #5",
            "eor v17.8b, v22.8b, v28.8b",
            "eor v12.8b, v14.8b, v25.8b",
            "ldr d10, [{grid}, {g3}, lsl #3]",
            "add v4.2s, v9.2s, v7.2s",
            "sub v19.8b, v19.8b, v11.8b",
            "ldr d22, [{signs}, {g2}, lsl #3]",
            "orr {g6:w}, {g6:w}, #1",
            "ldr d14, [{signs}, {g1}, lsl #3]",
            "sub v17.8b, v17.8b, v28.8b",
            "sub v12.8b, v12.8b, v25.8b",
            "eor v9.8b, v6.8b, v3.8b",
            "dup v7.2s, {g4:w}",
            "ldr d11, [{grid}, {g13}, lsl #3]",
            "mla v1.2s, v4.2s, v5.2s",
            "sdot v18.2s, v19.8b, v2.8b",
            "sdot v13.2s, v17.8b, v0.8b",
            "ldr d6, [{signs}, {g0}, lsl #3]",
            "sub v9.8b, v9.8b, v3.8b",
            "ldr d4, [{grid}, {g11}, lsl #3]",
            "ldr d5, [{grid}, {g12}, lsl #3]",
            "dup v19.2s, {g6:w}",
            "ldr d3, [{signs}, {g15}, lsl #3]",
            "sdot v18.2s, v12.8b, v21.8b",
            "sdot v13.2s, v9.8b, v20.8b",
            "eor v17.8b, v10.8b, v6.8b",
            "eor v25.8b, v4.8b, v22.8b",
            "eor v2.8b, v5.8b, v14.8b",
            "eor v0.8b, v11.8b, v3.8b",
            "sub v17.8b, v17.8b, v6.8b",
            "add v28.2s, v18.2s, v13.2s",
            "sub v25.8b, v25.8b, v22.8b",
            "sub v2.8b, v2.8b, v14.8b",
            "sub v0.8b, v0.8b, v3.8b",
            "mla v23.2s, v28.2s, v7.2s",
            "sdot v24.2s, v25.8b, v26.8b",
            "sdot v15.2s, v2.8b, v8.8b",
            "sdot v24.2s, v17.8b, v16.8b",
            "sdot v15.2s, v0.8b, v27.8b",
            "add v12.2s, v24.2s, v15.2s",
            "mla v1.2s, v12.2s, v19.2s",
            "add v23.2s, v23.2s, v1.2s",
            "addp v30.2s, v23.2s, v23.2s",
            "b.ne 2b",
        ]
    )
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
    if nb == 0 {
        return 0.0;
    }
    // SAFETY: nb >= 1 whole super-blocks lie inside both slices (whole_blocks).
    0.125 * unsafe { iq2_xxs_row_neon(w.as_ptr().add(2), act.as_ptr().add(4), nb) }
}

/// IQ2_XXS . Q8_K with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_iq2_xxs_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ2_XXS_BYTES, act, Q8_K_BYTES);
    if nb == 0 {
        return 0.0;
    }
    // SAFETY: as in vec_dot_iq2_xxs_q8_k_neon; the caller vouches for dotprod.
    0.125 * iq2_xxs_row_dotprod(w.as_ptr().add(2), act.as_ptr().add(4), nb)
}

/// IQ3_XXS block sums with ARMv8.0 widening multiplies.
///
/// # Safety
/// As [`block_sums_neon`], for IQ3_XXS super-blocks (`x` at the first one's byte 2).
#[inline(always)]
unsafe fn iq3_block_sums_neon(x: *const u8, y: *const u8, n: usize, out: *mut i32) {
    block_sums_iq3!(
        x,
        y,
        n,
        out,
        [],
        [
            "smull v18.8h, v0.8b, v16.8b",
            "smull2 v19.8h, v0.16b, v16.16b",
            "smlal v18.8h, v2.8b, v17.8b",
            "smlal2 v19.8h, v2.16b, v17.16b",
            "add v18.8h, v18.8h, v19.8h",
            "dup v21.8h, {b:w}",
            "smlal v20.4s, v18.4h, v21.4h",
            "smlal2 v20.4s, v18.8h, v21.8h"
        ]
    );
}

/// [`iq3_block_sums_neon`] with `sdot` (ARMv8.2 dotprod).
///
/// # Safety
/// As [`iq3_block_sums_neon`], and the CPU must implement dotprod.
#[inline(always)]
unsafe fn iq3_block_sums_dotprod(x: *const u8, y: *const u8, n: usize, out: *mut i32) {
    block_sums_iq3!(
        x,
        y,
        n,
        out,
        [".arch_extension dotprod"],
        [
            "movi v18.4s, #0",
            "sdot v18.4s, v0.16b, v16.16b",
            "sdot v18.4s, v2.16b, v17.16b",
            "dup v21.4s, {b:w}",
            "mla v20.4s, v18.4s, v21.4s"
        ]
    );
}

/// IQ3_XXS . Q8_K with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_iq3_xxs_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ3_XXS_BYTES, act, Q8_K_BYTES);
    grid_row(nb, w, act, IQ3_XXS_BYTES, 0.25, iq3_block_sums_neon)
}

/// IQ3_XXS . Q8_K with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_iq3_xxs_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ3_XXS_BYTES, act, Q8_K_BYTES);
    grid_row(nb, w, act, IQ3_XXS_BYTES, 0.25, iq3_block_sums_dotprod)
}

// IQ2_XS, IQ2_S and IQ3_S (#33). The same plan as above, one sub-block a trip: indices cut out
// with `and`/`ubfx` (plus `bfi` of their high bits) to exactly the width of their table (9 bits
// for the 512 entries of IQ2_XS and IQ3_S, 10 for the 1024 of IQ2_S), so every table read is in
// bounds whatever the file holds. IQ2_XS takes its sign masks from KSIGNS64 by 7-bit field;
// IQ2_S and IQ3_S store whole sign bytes, spread to 0x00/0xFF byte masks by `dup`/`tbl` and
// `cmtst` against the bits 1, 2, .., 128. IQ2_XS and IQ2_S have a scale per 16 weights: the
// first two groups' products are summed apart from the last two's and each half multiplied by
// its own 2s + 1. The ARMv8.0 i16 lanes hold at most 2 * 43 * 128 (IQ2) or 4 * 15 * 128 (IQ3_S).

const IQ2_XS_BYTES: usize = 74;
const IQ2_S_BYTES: usize = 82;
const IQ3_S_BYTES: usize = 110;

/// `tbl` indices that spread sign bytes 0, 1 (first 16) and 2, 3 (next 16) over 8 lanes each,
/// then the bit each lane tests, twice.
static SIGN_SPREAD: [u8; 48] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
    2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, //
    1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128,
];

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

/// Block integers of IQ3_S (`x` at the first block's qs, byte 2): 8 low index bytes a
/// sub-block, its qh byte (bit k the 9th of index k), 4 sign bytes, and its scale nibble
/// (low, then high, of each scale byte). Entries 0-3 (groups 0, 1) go to v0, 4-7 to v2 (the first
/// by `ldr s`, the others by `ld1` lane loads at grid + 4 * index: no `mov` lane inserts), their
/// sign masks to v24 and v25; `$dot` adds into v20 by the scale in `b`.
macro_rules! block_sums_iq3_s {
    ($x:expr, $y:expr, $n:expr, $out:expr, [$($pre:literal),*], [$($dot:literal),*]) => {
        asm!(
            $($pre,)*
            "ld1 {{v28.16b, v29.16b, v30.16b}}, [{k}]",
            "2:",
            "movi v20.4s, #0",
            "mov {c:w}, #8",
            "mov {sh:w}, #0",
            "3:",
            "ldr {a}, [{x}], #8",
            "ldrb {h:w}, [{qh}], #1",
            "ldr s4, [{sg}], #4",
            "ldrb {b:w}, [{s}]",
            "and {i0}, {a}, #0xff",
            "ubfx {i1}, {a}, #8, #8",
            "ubfx {i2}, {a}, #16, #8",
            "ubfx {i3}, {a}, #24, #8",
            "bfi {i0}, {h}, #8, #1",
            "lsr {t:w}, {h:w}, #1",
            "bfi {i1}, {t}, #8, #1",
            "lsr {t:w}, {h:w}, #2",
            "bfi {i2}, {t}, #8, #1",
            "lsr {t:w}, {h:w}, #3",
            "bfi {i3}, {t}, #8, #1",
            "ldr s0, [{grid}, {i0}, lsl #2]",
            "add {i1}, {grid}, {i1}, lsl #2",
            "add {i2}, {grid}, {i2}, lsl #2",
            "add {i3}, {grid}, {i3}, lsl #2",
            "ld1 {{v0.s}}[1], [{i1}]",
            "ld1 {{v0.s}}[2], [{i2}]",
            "ld1 {{v0.s}}[3], [{i3}]",
            "ubfx {i0}, {a}, #32, #8",
            "ubfx {i1}, {a}, #40, #8",
            "ubfx {i2}, {a}, #48, #8",
            "lsr {i3}, {a}, #56",
            "lsr {t:w}, {h:w}, #4",
            "bfi {i0}, {t}, #8, #1",
            "lsr {t:w}, {h:w}, #5",
            "bfi {i1}, {t}, #8, #1",
            "lsr {t:w}, {h:w}, #6",
            "bfi {i2}, {t}, #8, #1",
            "lsr {t:w}, {h:w}, #7",
            "bfi {i3}, {t}, #8, #1",
            "ldr s2, [{grid}, {i0}, lsl #2]",
            "add {i1}, {grid}, {i1}, lsl #2",
            "add {i2}, {grid}, {i2}, lsl #2",
            "add {i3}, {grid}, {i3}, lsl #2",
            "ld1 {{v2.s}}[1], [{i1}]",
            "ld1 {{v2.s}}[2], [{i2}]",
            "ld1 {{v2.s}}[3], [{i3}]",
            "tbl v24.16b, {{v4.16b}}, v28.16b",
            "tbl v25.16b, {{v4.16b}}, v29.16b",
            "lsr {b:w}, {b:w}, {sh:w}",
            "add {s}, {s}, {sh}, lsr #2",
            "eor {sh:w}, {sh:w}, #4",
            "and {b:w}, {b:w}, #15",
            "orr {b:w}, {one:w}, {b:w}, lsl #1",
            "cmtst v24.16b, v24.16b, v30.16b",
            "cmtst v25.16b, v25.16b, v30.16b",
            "ld1 {{v16.16b, v17.16b}}, [{y}], #32",
            "eor v0.16b, v0.16b, v24.16b",
            "eor v2.16b, v2.16b, v25.16b",
            "sub v0.16b, v0.16b, v24.16b",
            "sub v2.16b, v2.16b, v25.16b",
            $($dot,)*
            "subs {c:w}, {c:w}, #1",
            "b.ne 3b",
            "addv s20, v20.4s",
            "str s20, [{o}], #4",
            "add {x}, {x}, #46",
            "add {qh}, {qh}, #102",
            "add {sg}, {sg}, #78",
            "add {s}, {s}, #106",
            "add {y}, {y}, #36",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            grid = in(reg) IQ3S_GRID.as_ptr(),
            k = in(reg) SIGN_SPREAD.as_ptr(),
            one = in(reg) 1u64,
            x = inout(reg) $x => _,
            qh = inout(reg) $x.add(64) => _,
            sg = inout(reg) $x.add(72) => _,
            s = inout(reg) $x.add(104) => _,
            y = inout(reg) $y => _,
            n = inout(reg) $n => _,
            o = inout(reg) $out => _,
            a = out(reg) _, b = out(reg) _, c = out(reg) _, t = out(reg) _, h = out(reg) _,
            sh = out(reg) _,
            i0 = out(reg) _, i1 = out(reg) _, i2 = out(reg) _, i3 = out(reg) _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v7") _, out("v16") _, out("v17") _,
            out("v18") _, out("v19") _, out("v20") _, out("v21") _, out("v24") _,
            out("v25") _, out("v28") _, out("v29") _, out("v30") _,
            options(nostack),
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

/// sumf of an IQ2_XS row with ARMv8.0 widening multiplies (tools/iq-asm.py `emit iq2xs
/// neon`): per sub-block 4 u16 words (9-bit grid index, 7-bit sign field) and a scale byte
/// (low nibble: groups 0, 1; high: 2, 3), each half's products times its 2s + 1.
///
/// # Safety
/// As [`iq2_xxs_row_neon`], for IQ2_XS super-blocks.
#[inline(always)]
unsafe fn iq2_xs_row_neon(x: *const u8, y: *const u8, n: usize) -> f32 {
    grid_row_asm!(
        IQ2XS_GRID.as_ptr(),
        KSIGNS64.as_ptr(),
        x,
        y,
        n,
        [],
        [
            "scvtf s0, s30",
            "ldur h1, [{x}, #-2]",
            "ldur s2, [{y}, #-4]",
            "ldr {g0}, [{x}, #64]",
            "ldr {g1}, [{x}, #0]",
            "ldp d3, d4, [{y}, #0]",
            "ldp d5, d6, [{y}, #16]",
            "ldr {g2}, [{x}, #8]",
            "ldp d7, d8, [{y}, #32]",
            "ldp d9, d10, [{y}, #48]",
            "ldr {g3}, [{x}, #16]",
            "subs {n}, {n}, #1",
            "ldp d12, d13, [{y}, #64]",
            "ldp d14, d15, [{y}, #80]",
            "ldr {g14}, [{x}, #24]",
            "fmul s0, s29, s0",
            "fcvt s11, h1",
            "ubfiz {g12}, {g0}, #1, #4",
            "ubfx {g13}, {g0}, #3, #5",
            "and {g4}, {g1}, #0x1ff",
            "ubfx {g5}, {g1}, #16, #9",
            "ubfx {g6}, {g1}, #32, #9",
            "ubfx {g7}, {g1}, #48, #9",
            "ubfx {g8}, {g1}, #9, #7",
            "ubfx {g9}, {g1}, #25, #7",
            "ubfx {g10}, {g1}, #41, #7",
            "lsr {g11}, {g1}, #57",
            "and {g15}, {g2}, #0x1ff",
            "orr {g12:w}, {g12:w}, #1",
            "fadd s31, s31, s0",
            "orr {g13:w}, {g13:w}, #1",
            "fmul s29, s11, s2",
            "ldr d16, [{grid}, {g4}, lsl #3]",
            "ldr d17, [{grid}, {g5}, lsl #3]",
            "ldr d18, [{grid}, {g6}, lsl #3]",
            "ldr d19, [{grid}, {g7}, lsl #3]",
            "ldr d20, [{signs}, {g8}, lsl #3]",
            "ldr d21, [{signs}, {g9}, lsl #3]",
            "ldr d22, [{signs}, {g10}, lsl #3]",
            "ubfx {g1}, {g2}, #16, #9",
            "ldr d23, [{signs}, {g11}, lsl #3]",
            "dup v1.8h, {g12:w}",
            "ubfx {g4}, {g2}, #32, #9",
            "ubfx {g5}, {g2}, #48, #9",
            "ubfx {g6}, {g2}, #9, #7",
            "ubfx {g7}, {g2}, #25, #7",
            "ubfx {g8}, {g2}, #41, #7",
            "lsr {g9}, {g2}, #57",
            "ubfx {g10}, {g0}, #7, #5",
            "eor v24.8b, v16.8b, v20.8b",
            "eor v25.8b, v17.8b, v21.8b",
            "ubfx {g11}, {g0}, #11, #5",
            "eor v26.8b, v18.8b, v22.8b",
            "ldr {g12}, [{x}, #32]",
            "eor v27.8b, v19.8b, v23.8b",
            "ubfx {g2}, {g3}, #16, #9",
            "dup v16.8h, {g13:w}",
            "orr {g10:w}, {g10:w}, #1",
            "sub v24.8b, v24.8b, v20.8b",
            "sub v25.8b, v25.8b, v21.8b",
            "orr {g11:w}, {g11:w}, #1",
            "ldr d18, [{grid}, {g1}, lsl #3]",
            "sub v26.8b, v26.8b, v22.8b",
            "ldr d19, [{grid}, {g5}, lsl #3]",
            "sub v27.8b, v27.8b, v23.8b",
            "and {g13}, {g3}, #0x1ff",
            "ldr d21, [{grid}, {g15}, lsl #3]",
            "smull v28.8h, v24.8b, v3.8b",
            "ubfx {g1}, {g3}, #48, #9",
            "ldr d22, [{grid}, {g4}, lsl #3]",
            "ubfx {g5}, {g3}, #25, #7",
            "smull v2.8h, v26.8b, v5.8b",
            "ldr d23, [{signs}, {g6}, lsl #3]",
            "ubfx {g15}, {g3}, #32, #9",
            "ldr d24, [{signs}, {g7}, lsl #3]",
            "ldr d3, [{signs}, {g8}, lsl #3]",
            "ubfx {g4}, {g3}, #9, #7",
            "smlal v28.8h, v25.8b, v4.8b",
            "ubfx {g6}, {g3}, #41, #7",
            "lsr {g7}, {g3}, #57",
            "smlal v2.8h, v27.8b, v6.8b",
            "ubfx {g8}, {g0}, #15, #5",
            "ldr d25, [{signs}, {g9}, lsl #3]",
            "eor v4.8b, v21.8b, v23.8b",
            "ubfx {g3}, {g14}, #16, #9",
            "dup v27.8h, {g10:w}",
            "smull v0.4s, v28.4h, v1.4h",
            "smull2 v11.4s, v28.8h, v1.8h",
            "ubfx {g9}, {g0}, #19, #5",
            "orr {g8:w}, {g8:w}, #1",
            "smull v20.4s, v2.4h, v16.4h",
            "smull2 v17.4s, v2.8h, v16.8h",
            "sub v4.8b, v4.8b, v23.8b",
            "eor v26.8b, v19.8b, v25.8b",
            "ldr {g10}, [{x}, #40]",
            "eor v28.8b, v18.8b, v24.8b",
            "eor v1.8b, v22.8b, v3.8b",
            "orr {g9:w}, {g9:w}, #1",
            "dup v2.8h, {g11:w}",
            "ldp d16, d21, [{y}, #96]",
            "ldr d19, [{grid}, {g1}, lsl #3]",
            "smull v5.8h, v4.8b, v7.8b",
            "sub v26.8b, v26.8b, v25.8b",
            "ldp d23, d18, [{y}, #112]",
            "ldr d22, [{grid}, {g2}, lsl #3]",
            "sub v28.8b, v28.8b, v24.8b",
            "sub v1.8b, v1.8b, v3.8b",
            "and {g11}, {g14}, #0x1ff",
            "ubfx {g1}, {g14}, #25, #7",
            "ldr d4, [{signs}, {g5}, lsl #3]",
            "ldr d7, [{signs}, {g6}, lsl #3]",
            "ldr d25, [{signs}, {g4}, lsl #3]",
            "ubfx {g2}, {g14}, #48, #9",
            "ldr d24, [{grid}, {g13}, lsl #3]",
            "ldr d3, [{grid}, {g15}, lsl #3]",
            "smlal v5.8h, v28.8b, v8.8b",
            "smull v6.8h, v1.8b, v9.8b",
            "lsr {g5}, {g14}, #57",
            "ubfx {g6}, {g0}, #23, #5",
            "ubfx {g4}, {g14}, #41, #7",
            "ubfx {g13}, {g14}, #32, #9",
            "ubfx {g15}, {g14}, #9, #7",
            "ldr d28, [{signs}, {g7}, lsl #3]",
            "eor v8.8b, v24.8b, v25.8b",
            "smlal v0.4s, v5.4h, v27.4h",
            "smlal2 v11.4s, v5.8h, v27.8h",
            "orr {g6:w}, {g6:w}, #1",
            "smlal v6.8h, v26.8b, v10.8b",
            "ubfx {g14}, {g12}, #16, #9",
            "ubfx {g7}, {g0}, #27, #5",
            "sub v8.8b, v8.8b, v25.8b",
            "eor v5.8b, v22.8b, v4.8b",
            "eor v27.8b, v3.8b, v7.8b",
            "eor v1.8b, v19.8b, v28.8b",
            "dup v26.8h, {g8:w}",
            "orr {g7:w}, {g7:w}, #1",
            "smlal v20.4s, v6.4h, v2.4h",
            "smlal2 v17.4s, v6.8h, v2.8h",
            "ldp d25, d22, [{y}, #144]",
            "smull v9.8h, v8.8b, v12.8b",
            "ldr d3, [{grid}, {g3}, lsl #3]",
            "sub v5.8b, v5.8b, v4.8b",
            "ldr d19, [{grid}, {g2}, lsl #3]",
            "sub v27.8b, v27.8b, v7.8b",
            "ldr {g8}, [{x}, #48]",
            "sub v1.8b, v1.8b, v28.8b",
            "dup v6.8h, {g9:w}",
            "ldp d2, d24, [{y}, #128]",
            "ldr d8, [{signs}, {g1}, lsl #3]",
            "ldr d12, [{signs}, {g4}, lsl #3]",
            "ubfx {g3}, {g12}, #48, #9",
            "ldr d4, [{grid}, {g11}, lsl #3]",
            "ubfx {g2}, {g12}, #25, #7",
            "smlal v9.8h, v5.8b, v13.8b",
            "ldr d7, [{grid}, {g13}, lsl #3]",
            "smull v10.8h, v27.8b, v14.8b",
            "ldr d28, [{signs}, {g15}, lsl #3]",
            "and {g9}, {g12}, #0x1ff",
            "lsr {g1}, {g12}, #57",
            "ubfx {g4}, {g0}, #31, #5",
            "ubfx {g11}, {g12}, #32, #9",
            "ldr d5, [{signs}, {g5}, lsl #3]",
            "ubfx {g13}, {g12}, #9, #7",
            "ubfx {g15}, {g12}, #41, #7",
            "smlal v0.4s, v9.4h, v26.4h",
            "smlal2 v11.4s, v9.8h, v26.8h",
            "smlal v10.8h, v1.8b, v15.8b",
            "eor v13.8b, v4.8b, v28.8b",
            "orr {g4:w}, {g4:w}, #1",
            "ubfx {g5}, {g0}, #35, #5",
            "ubfx {g12}, {g10}, #16, #9",
            "eor v27.8b, v19.8b, v5.8b",
            "eor v9.8b, v3.8b, v8.8b",
            "eor v26.8b, v7.8b, v12.8b",
            "dup v1.8h, {g6:w}",
            "sub v13.8b, v13.8b, v28.8b",
            "smlal v20.4s, v10.4h, v6.4h",
            "smlal2 v17.4s, v10.8h, v6.8h",
            "orr {g5:w}, {g5:w}, #1",
            "ldr d19, [{grid}, {g3}, lsl #3]",
            "sub v27.8b, v27.8b, v5.8b",
            "ldr d7, [{grid}, {g14}, lsl #3]",
            "sub v9.8b, v9.8b, v8.8b",
            "ldr {g6}, [{x}, #56]",
            "sub v26.8b, v26.8b, v12.8b",
            "ldp d28, d3, [{y}, #176]",
            "smull v14.8h, v13.8b, v16.8b",
            "dup v10.8h, {g7:w}",
            "ldp d6, d4, [{y}, #160]",
            "ubfx {g3}, {g10}, #25, #7",
            "ldr d5, [{signs}, {g13}, lsl #3]",
            "ubfx {g14}, {g10}, #48, #9",
            "ldr d8, [{grid}, {g9}, lsl #3]",
            "add {x}, {x}, #74",
            "ldr d12, [{grid}, {g11}, lsl #3]",
            "smull v15.8h, v26.8b, v23.8b",
            "ldr d13, [{signs}, {g2}, lsl #3]",
            "ldr d16, [{signs}, {g15}, lsl #3]",
            "and {g7}, {g10}, #0x1ff",
            "smlal v14.8h, v9.8b, v21.8b",
            "ubfx {g13}, {g10}, #41, #7",
            "ubfx {g9}, {g10}, #32, #9",
            "ubfx {g11}, {g10}, #9, #7",
            "lsr {g2}, {g10}, #57",
            "ubfx {g15}, {g0}, #39, #5",
            "smlal v15.8h, v27.8b, v18.8b",
            "ldr d9, [{signs}, {g1}, lsl #3]",
            "eor v21.8b, v8.8b, v5.8b",
            "smlal v0.4s, v14.4h, v1.4h",
            "smlal2 v11.4s, v14.8h, v1.8h",
            "ubfx {g10}, {g8}, #16, #9",
            "dup v27.8h, {g4:w}",
            "orr {g15:w}, {g15:w}, #1",
            "ubfx {g1}, {g0}, #43, #5",
            "smlal v20.4s, v15.4h, v10.4h",
            "smlal2 v17.4s, v15.8h, v10.8h",
            "sub v21.8b, v21.8b, v5.8b",
            "eor v14.8b, v7.8b, v13.8b",
            "eor v1.8b, v12.8b, v16.8b",
            "eor v26.8b, v19.8b, v9.8b",
            "ubfx {g4}, {g0}, #47, #5",
            "orr {g1:w}, {g1:w}, #1",
            "dup v15.8h, {g5:w}",
            "ldp d10, d8, [{y}, #192]",
            "ldp d5, d7, [{y}, #208]",
            "smull v23.8h, v21.8b, v2.8b",
            "ldr d12, [{grid}, {g12}, lsl #3]",
            "sub v14.8b, v14.8b, v13.8b",
            "ldr d19, [{grid}, {g14}, lsl #3]",
            "sub v1.8b, v1.8b, v16.8b",
            "sub v26.8b, v26.8b, v9.8b",
            "orr {g4:w}, {g4:w}, #1",
            "and {g5}, {g8}, #0x1ff",
            "ldr d21, [{signs}, {g3}, lsl #3]",
            "ldr d2, [{signs}, {g13}, lsl #3]",
            "ubfx {g12}, {g8}, #48, #9",
            "ldr d13, [{grid}, {g7}, lsl #3]",
            "ubfx {g14}, {g8}, #25, #7",
            "smlal v23.8h, v14.8b, v24.8b",
            "ldr d16, [{grid}, {g9}, lsl #3]",
            "ldr d9, [{signs}, {g11}, lsl #3]",
            "smull v18.8h, v1.8b, v25.8b",
            "lsr {g3}, {g8}, #57",
            "ubfx {g13}, {g0}, #51, #5",
            "ubfx {g7}, {g8}, #32, #9",
            "ldr d14, [{signs}, {g2}, lsl #3]",
            "ubfx {g9}, {g8}, #9, #7",
            "ubfx {g11}, {g8}, #41, #7",
            "smlal v0.4s, v23.4h, v27.4h",
            "smlal2 v11.4s, v23.8h, v27.8h",
            "eor v24.8b, v13.8b, v9.8b",
            "orr {g13:w}, {g13:w}, #1",
            "smlal v18.8h, v26.8b, v22.8b",
            "ubfx {g2}, {g0}, #55, #5",
            "ubfx {g8}, {g6}, #16, #9",
            "eor v1.8b, v19.8b, v14.8b",
            "eor v23.8b, v12.8b, v21.8b",
            "eor v27.8b, v16.8b, v2.8b",
            "sub v24.8b, v24.8b, v9.8b",
            "dup v26.8h, {g15:w}",
            "orr {g2:w}, {g2:w}, #1",
            "ldr d19, [{grid}, {g12}, lsl #3]",
            "smlal v20.4s, v18.4h, v15.4h",
            "smlal2 v17.4s, v18.8h, v15.8h",
            "sub v1.8b, v1.8b, v14.8b",
            "ldr d16, [{grid}, {g10}, lsl #3]",
            "sub v23.8b, v23.8b, v21.8b",
            "ldp d9, d12, [{y}, #240]",
            "sub v27.8b, v27.8b, v2.8b",
            "ubfx {g15}, {g0}, #59, #5",
            "smull v25.8h, v24.8b, v6.8b",
            "ubfx {g12}, {g6}, #25, #7",
            "dup v18.8h, {g1:w}",
            "ldp d15, d13, [{y}, #224]",
            "ldr d14, [{signs}, {g9}, lsl #3]",
            "ubfx {g10}, {g6}, #48, #9",
            "ldr d21, [{grid}, {g5}, lsl #3]",
            "ldr d2, [{grid}, {g7}, lsl #3]",
            "smull v22.8h, v27.8b, v28.8b",
            "ldr d24, [{signs}, {g14}, lsl #3]",
            "ldr d6, [{signs}, {g11}, lsl #3]",
            "orr {g15:w}, {g15:w}, #1",
            "and {g1}, {g6}, #0x1ff",
            "add {y}, {y}, #292",
            "smlal v25.8h, v23.8b, v4.8b",
            "ubfx {g9}, {g6}, #41, #7",
            "ubfx {g5}, {g6}, #32, #9",
            "ubfx {g7}, {g6}, #9, #7",
            "lsr {g14}, {g6}, #57",
            "smlal v22.8h, v1.8b, v3.8b",
            "ldr d23, [{signs}, {g3}, lsl #3]",
            "eor v4.8b, v21.8b, v14.8b",
            "smlal v0.4s, v25.4h, v26.4h",
            "smlal2 v11.4s, v25.8h, v26.8h",
            "dup v3.8h, {g4:w}",
            "dup v21.8h, {g2:w}",
            "smlal v20.4s, v22.4h, v18.4h",
            "smlal2 v17.4s, v22.8h, v18.8h",
            "sub v4.8b, v4.8b, v14.8b",
            "eor v25.8b, v16.8b, v24.8b",
            "eor v26.8b, v2.8b, v6.8b",
            "eor v27.8b, v19.8b, v23.8b",
            "dup v22.8h, {g13:w}",
            "ldr d18, [{grid}, {g1}, lsl #3]",
            "dup v14.8h, {g15:w}",
            "ldr d16, [{grid}, {g8}, lsl #3]",
            "smull v28.8h, v4.8b, v10.8b",
            "ldr d2, [{grid}, {g10}, lsl #3]",
            "sub v25.8b, v25.8b, v24.8b",
            "ldr d19, [{signs}, {g12}, lsl #3]",
            "sub v26.8b, v26.8b, v6.8b",
            "sub v27.8b, v27.8b, v23.8b",
            "ldr d4, [{signs}, {g14}, lsl #3]",
            "ldr d24, [{grid}, {g5}, lsl #3]",
            "smlal v28.8h, v25.8b, v8.8b",
            "ldr d6, [{signs}, {g7}, lsl #3]",
            "ldr d23, [{signs}, {g9}, lsl #3]",
            "smull v1.8h, v26.8b, v5.8b",
            "eor v25.8b, v16.8b, v19.8b",
            "eor v26.8b, v2.8b, v4.8b",
            "smlal v0.4s, v28.4h, v3.4h",
            "smlal2 v11.4s, v28.8h, v3.8h",
            "eor v10.8b, v18.8b, v6.8b",
            "eor v8.8b, v24.8b, v23.8b",
            "sub v25.8b, v25.8b, v19.8b",
            "smlal v1.8h, v27.8b, v7.8b",
            "sub v26.8b, v26.8b, v4.8b",
            "sub v10.8b, v10.8b, v6.8b",
            "sub v8.8b, v8.8b, v23.8b",
            "smlal v20.4s, v1.4h, v22.4h",
            "smlal2 v17.4s, v1.8h, v22.8h",
            "smull v5.8h, v10.8b, v15.8b",
            "smull v27.8h, v8.8b, v9.8b",
            "smlal v5.8h, v25.8b, v13.8b",
            "smlal v27.8h, v26.8b, v12.8b",
            "smlal v0.4s, v5.4h, v21.4h",
            "smlal2 v11.4s, v5.8h, v21.8h",
            "smlal v20.4s, v27.4h, v14.4h",
            "smlal2 v17.4s, v27.8h, v14.8h",
            "add v0.4s, v0.4s, v11.4s",
            "add v20.4s, v20.4s, v17.4s",
            "add v0.4s, v0.4s, v20.4s",
            "addv s30, v0.4s",
            "b.ne 2b",
        ]
    )
}

/// [`iq2_xs_row_neon`] with `sdot` (ARMv8.2 dotprod).
///
/// # Safety
/// As [`iq2_xs_row_neon`], and the CPU must implement dotprod.
#[inline(always)]
unsafe fn iq2_xs_row_dotprod(x: *const u8, y: *const u8, n: usize) -> f32 {
    grid_row_asm!(
        IQ2XS_GRID.as_ptr(),
        KSIGNS64.as_ptr(),
        x,
        y,
        n,
        [".arch_extension dotprod"],
        [
            "scvtf s0, s30",
            "ldur h1, [{x}, #-2]",
            "ldur s2, [{y}, #-4]",
            "ldr {g0}, [{x}, #64]",
            "ldr {g1}, [{x}, #0]",
            "ldp d3, d4, [{y}, #0]",
            "movi v5.2s, #0",
            "ldr {g2}, [{x}, #8]",
            "ldr {g3}, [{x}, #16]",
            "ldr {g4}, [{x}, #24]",
            "ldr {g5}, [{x}, #32]",
            "subs {n}, {n}, #1",
            "movi v7.2s, #0",
            "ldp d8, d9, [{y}, #16]",
            "movi v23.2s, #0",
            "movi v25.2s, #0",
            "ldp d26, d27, [{y}, #32]",
            "fmul s0, s29, s0",
            "fcvt s6, h1",
            "ubfiz {g14}, {g0}, #1, #4",
            "ubfx {g15}, {g0}, #3, #5",
            "and {g6}, {g1}, #0x1ff",
            "ubfx {g7}, {g1}, #16, #9",
            "ubfx {g8}, {g1}, #32, #9",
            "ubfx {g9}, {g1}, #48, #9",
            "ubfx {g10}, {g1}, #9, #7",
            "ubfx {g11}, {g1}, #25, #7",
            "ubfx {g12}, {g1}, #41, #7",
            "lsr {g13}, {g1}, #57",
            "orr {g14:w}, {g14:w}, #1",
            "fadd s31, s31, s0",
            "orr {g15:w}, {g15:w}, #1",
            "fmul s29, s6, s2",
            "ldr d10, [{grid}, {g6}, lsl #3]",
            "ldr d11, [{grid}, {g7}, lsl #3]",
            "ldr d12, [{grid}, {g8}, lsl #3]",
            "ldr d13, [{grid}, {g9}, lsl #3]",
            "ldr d14, [{signs}, {g10}, lsl #3]",
            "ldr d15, [{signs}, {g11}, lsl #3]",
            "ldr d16, [{signs}, {g12}, lsl #3]",
            "ldr {g1}, [{x}, #40]",
            "ldr d17, [{signs}, {g13}, lsl #3]",
            "dup v22.2s, {g14:w}",
            "dup v28.2s, {g15:w}",
            "and {g6}, {g2}, #0x1ff",
            "ubfx {g7}, {g2}, #16, #9",
            "ubfx {g8}, {g2}, #32, #9",
            "ubfx {g9}, {g2}, #48, #9",
            "ubfx {g10}, {g2}, #9, #7",
            "ubfx {g11}, {g2}, #25, #7",
            "ubfx {g12}, {g2}, #41, #7",
            "eor v18.8b, v10.8b, v14.8b",
            "eor v19.8b, v11.8b, v15.8b",
            "lsr {g13}, {g2}, #57",
            "eor v20.8b, v12.8b, v16.8b",
            "ubfx {g14}, {g0}, #7, #5",
            "ubfx {g15}, {g0}, #11, #5",
            "eor v21.8b, v13.8b, v17.8b",
            "ldr d0, [{grid}, {g6}, lsl #3]",
            "ldr d6, [{grid}, {g7}, lsl #3]",
            "ldr d2, [{grid}, {g8}, lsl #3]",
            "ldr d10, [{grid}, {g9}, lsl #3]",
            "ldr d11, [{signs}, {g11}, lsl #3]",
            "sub v18.8b, v18.8b, v14.8b",
            "ldr {g2}, [{x}, #48]",
            "sub v19.8b, v19.8b, v15.8b",
            "ldr d12, [{signs}, {g13}, lsl #3]",
            "sub v20.8b, v20.8b, v16.8b",
            "orr {g14:w}, {g14:w}, #1",
            "orr {g15:w}, {g15:w}, #1",
            "and {g6}, {g3}, #0x1ff",
            "sub v21.8b, v21.8b, v17.8b",
            "ubfx {g7}, {g3}, #16, #9",
            "ubfx {g8}, {g3}, #32, #9",
            "ubfx {g9}, {g3}, #48, #9",
            "ubfx {g11}, {g3}, #25, #7",
            "ldr d14, [{signs}, {g10}, lsl #3]",
            "sdot v5.2s, v18.8b, v3.8b",
            "ldr d15, [{signs}, {g12}, lsl #3]",
            "eor v13.8b, v6.8b, v11.8b",
            "lsr {g13}, {g3}, #57",
            "sdot v7.2s, v20.8b, v8.8b",
            "ubfx {g10}, {g3}, #9, #7",
            "eor v18.8b, v10.8b, v12.8b",
            "ubfx {g12}, {g3}, #41, #7",
            "eor v16.8b, v0.8b, v14.8b",
            "ldr d6, [{signs}, {g11}, lsl #3]",
            "sdot v5.2s, v19.8b, v4.8b",
            "sub v13.8b, v13.8b, v11.8b",
            "eor v17.8b, v2.8b, v15.8b",
            "movi v20.2s, #0",
            "ldr {g3}, [{x}, #56]",
            "sdot v7.2s, v21.8b, v9.8b",
            "sub v18.8b, v18.8b, v12.8b",
            "ldr d0, [{grid}, {g9}, lsl #3]",
            "ubfx {g11}, {g4}, #25, #7",
            "sub v16.8b, v16.8b, v14.8b",
            "ldp d3, d19, [{y}, #48]",
            "dup v4.2s, {g14:w}",
            "ldr d11, [{signs}, {g12}, lsl #3]",
            "ldr d2, [{signs}, {g13}, lsl #3]",
            "mul v24.2s, v5.2s, v22.2s",
            "sub v17.8b, v17.8b, v15.8b",
            "add {x}, {x}, #74",
            "movi v21.2s, #0",
            "ldr d9, [{grid}, {g6}, lsl #3]",
            "ubfx {g9}, {g4}, #48, #9",
            "mul v1.2s, v7.2s, v28.2s",
            "ldr d14, [{signs}, {g10}, lsl #3]",
            "sdot v23.2s, v16.8b, v26.8b",
            "ubfx {g14}, {g0}, #15, #5",
            "ubfx {g12}, {g4}, #41, #7",
            "lsr {g13}, {g4}, #57",
            "ldp d8, d5, [{y}, #64]",
            "dup v22.2s, {g15:w}",
            "sdot v25.2s, v17.8b, v3.8b",
            "and {g6}, {g4}, #0x1ff",
            "ldr d7, [{grid}, {g7}, lsl #3]",
            "ldr d28, [{grid}, {g8}, lsl #3]",
            "ubfx {g10}, {g4}, #9, #7",
            "eor v16.8b, v0.8b, v2.8b",
            "orr {g14:w}, {g14:w}, #1",
            "eor v15.8b, v9.8b, v14.8b",
            "sdot v23.2s, v13.8b, v27.8b",
            "ubfx {g15}, {g0}, #19, #5",
            "ubfx {g7}, {g4}, #16, #9",
            "ubfx {g8}, {g4}, #32, #9",
            "sdot v25.2s, v18.8b, v19.8b",
            "eor v10.8b, v7.8b, v6.8b",
            "eor v12.8b, v28.8b, v11.8b",
            "sub v16.8b, v16.8b, v2.8b",
            "ldr d9, [{grid}, {g9}, lsl #3]",
            "ldp d26, d13, [{y}, #80]",
            "dup v27.2s, {g14:w}",
            "sub v15.8b, v15.8b, v14.8b",
            "orr {g15:w}, {g15:w}, #1",
            "ubfx {g4}, {g0}, #31, #5",
            "mla v24.2s, v23.2s, v4.2s",
            "movi v18.2s, #0",
            "ldr d19, [{grid}, {g6}, lsl #3]",
            "ldr d7, [{signs}, {g11}, lsl #3]",
            "ldr d28, [{signs}, {g13}, lsl #3]",
            "sub v10.8b, v10.8b, v6.8b",
            "mla v1.2s, v25.2s, v22.2s",
            "sub v12.8b, v12.8b, v11.8b",
            "ubfx {g9}, {g5}, #48, #9",
            "ubfx {g14}, {g0}, #23, #5",
            "ldr d14, [{signs}, {g10}, lsl #3]",
            "sdot v20.2s, v15.8b, v8.8b",
            "dup v3.2s, {g15:w}",
            "movi v23.2s, #0",
            "ldp d4, d17, [{y}, #96]",
            "orr {g4:w}, {g4:w}, #1",
            "and {g6}, {g5}, #0x1ff",
            "ubfx {g11}, {g5}, #25, #7",
            "lsr {g13}, {g5}, #57",
            "ldr d6, [{signs}, {g12}, lsl #3]",
            "ldr d25, [{grid}, {g7}, lsl #3]",
            "ldr d22, [{grid}, {g8}, lsl #3]",
            "sdot v21.2s, v12.8b, v26.8b",
            "orr {g14:w}, {g14:w}, #1",
            "ubfx {g10}, {g5}, #9, #7",
            "eor v15.8b, v9.8b, v28.8b",
            "ubfx {g15}, {g0}, #27, #5",
            "eor v11.8b, v19.8b, v14.8b",
            "sdot v20.2s, v10.8b, v5.8b",
            "ubfx {g12}, {g5}, #41, #7",
            "ubfx {g7}, {g5}, #16, #9",
            "ubfx {g8}, {g5}, #32, #9",
            "eor v0.8b, v25.8b, v7.8b",
            "eor v2.8b, v22.8b, v6.8b",
            "sdot v21.2s, v16.8b, v13.8b",
            "orr {g15:w}, {g15:w}, #1",
            "sub v15.8b, v15.8b, v28.8b",
            "ldr d19, [{grid}, {g9}, lsl #3]",
            "ldp d8, d10, [{y}, #112]",
            "dup v5.2s, {g14:w}",
            "sub v11.8b, v11.8b, v14.8b",
            "ubfx {g5}, {g0}, #43, #5",
            "mla v24.2s, v20.2s, v27.2s",
            "ldr d25, [{signs}, {g11}, lsl #3]",
            "ldr d22, [{signs}, {g13}, lsl #3]",
            "sub v0.8b, v0.8b, v7.8b",
            "movi v16.2s, #0",
            "ldr d13, [{grid}, {g6}, lsl #3]",
            "sub v2.8b, v2.8b, v6.8b",
            "dup v26.2s, {g15:w}",
            "ubfx {g9}, {g1}, #48, #9",
            "mla v1.2s, v21.2s, v3.2s",
            "ubfx {g14}, {g0}, #35, #5",
            "ldr d14, [{signs}, {g10}, lsl #3]",
            "sdot v23.2s, v11.8b, v4.8b",
            "movi v20.2s, #0",
            "ldp d27, d12, [{y}, #128]",
            "orr {g5:w}, {g5:w}, #1",
            "ubfx {g11}, {g1}, #25, #7",
            "lsr {g13}, {g1}, #57",
            "ldr d7, [{signs}, {g12}, lsl #3]",
            "and {g6}, {g1}, #0x1ff",
            "ubfx {g15}, {g0}, #39, #5",
            "sdot v18.2s, v2.8b, v8.8b",
            "ldr d21, [{grid}, {g7}, lsl #3]",
            "ldr d3, [{grid}, {g8}, lsl #3]",
            "orr {g14:w}, {g14:w}, #1",
            "ubfx {g10}, {g1}, #9, #7",
            "eor v11.8b, v19.8b, v22.8b",
            "eor v6.8b, v13.8b, v14.8b",
            "sdot v23.2s, v0.8b, v17.8b",
            "ubfx {g12}, {g1}, #41, #7",
            "movi v2.2s, #0",
            "orr {g15:w}, {g15:w}, #1",
            "ubfx {g7}, {g1}, #16, #9",
            "ubfx {g8}, {g1}, #32, #9",
            "sdot v18.2s, v15.8b, v10.8b",
            "eor v9.8b, v21.8b, v25.8b",
            "dup v8.2s, {g14:w}",
            "eor v28.8b, v3.8b, v7.8b",
            "ldr d13, [{grid}, {g9}, lsl #3]",
            "sub v11.8b, v11.8b, v22.8b",
            "ldp d4, d0, [{y}, #144]",
            "sub v6.8b, v6.8b, v14.8b",
            "mla v24.2s, v23.2s, v5.2s",
            "ubfx {g1}, {g0}, #55, #5",
            "movi v15.2s, #0",
            "ldr d10, [{grid}, {g6}, lsl #3]",
            "ldr d21, [{signs}, {g11}, lsl #3]",
            "ubfx {g14}, {g0}, #51, #5",
            "sub v9.8b, v9.8b, v25.8b",
            "ldr d3, [{signs}, {g13}, lsl #3]",
            "mla v1.2s, v18.2s, v26.2s",
            "ubfx {g9}, {g2}, #32, #9",
            "sub v28.8b, v28.8b, v7.8b",
            "ldr d14, [{signs}, {g10}, lsl #3]",
            "ldp d17, d23, [{y}, #160]",
            "dup v5.2s, {g4:w}",
            "sdot v20.2s, v6.8b, v27.8b",
            "orr {g1:w}, {g1:w}, #1",
            "ubfx {g6}, {g0}, #59, #5",
            "ubfx {g11}, {g2}, #9, #7",
            "ldr d25, [{signs}, {g12}, lsl #3]",
            "orr {g14:w}, {g14:w}, #1",
            "ubfx {g13}, {g2}, #41, #7",
            "ldr d18, [{grid}, {g7}, lsl #3]",
            "ldr d26, [{grid}, {g8}, lsl #3]",
            "ubfx {g10}, {g2}, #48, #9",
            "sdot v16.2s, v28.8b, v4.8b",
            "ubfx {g4}, {g0}, #47, #5",
            "eor v7.8b, v10.8b, v14.8b",
            "eor v6.8b, v13.8b, v3.8b",
            "orr {g6:w}, {g6:w}, #1",
            "sdot v20.2s, v9.8b, v12.8b",
            "ubfx {g12}, {g2}, #25, #7",
            "and {g7}, {g2}, #0x1ff",
            "ubfx {g8}, {g2}, #16, #9",
            "eor v19.8b, v18.8b, v21.8b",
            "dup v4.2s, {g15:w}",
            "eor v22.8b, v26.8b, v25.8b",
            "ubfx {g0}, {g3}, #16, #9",
            "orr {g4:w}, {g4:w}, #1",
            "ldr d10, [{grid}, {g10}, lsl #3]",
            "sdot v16.2s, v11.8b, v0.8b",
            "sub v7.8b, v7.8b, v14.8b",
            "sub v6.8b, v6.8b, v3.8b",
            "ldp d27, d9, [{y}, #176]",
            "ldp d12, d28, [{y}, #192]",
            "mla v24.2s, v20.2s, v5.2s",
            "ldr d18, [{signs}, {g12}, lsl #3]",
            "lsr {g15}, {g2}, #57",
            "sub v19.8b, v19.8b, v21.8b",
            "sub v22.8b, v22.8b, v25.8b",
            "ubfx {g10}, {g3}, #41, #7",
            "movi v11.2s, #0",
            "dup v0.2s, {g5:w}",
            "ldr d14, [{signs}, {g11}, lsl #3]",
            "sdot v2.2s, v7.8b, v17.8b",
            "mla v1.2s, v16.2s, v8.2s",
            "movi v20.2s, #0",
            "ldr d5, [{grid}, {g7}, lsl #3]",
            "ubfx {g2}, {g3}, #32, #9",
            "ldr d21, [{signs}, {g13}, lsl #3]",
            "ldr d26, [{signs}, {g15}, lsl #3]",
            "sdot v15.2s, v22.8b, v27.8b",
            "and {g5}, {g3}, #0x1ff",
            "lsr {g11}, {g3}, #57",
            "ldr d16, [{grid}, {g8}, lsl #3]",
            "ldr d8, [{grid}, {g9}, lsl #3]",
            "ubfx {g7}, {g3}, #48, #9",
            "sdot v2.2s, v19.8b, v23.8b",
            "eor v25.8b, v5.8b, v14.8b",
            "dup v27.2s, {g4:w}",
            "eor v7.8b, v10.8b, v26.8b",
            "ubfx {g8}, {g3}, #9, #7",
            "sdot v15.2s, v6.8b, v9.8b",
            "ubfx {g9}, {g3}, #25, #7",
            "eor v13.8b, v16.8b, v18.8b",
            "ldp d17, d19, [{y}, #208]",
            "ldp d23, d22, [{y}, #224]",
            "eor v3.8b, v8.8b, v21.8b",
            "ldr d5, [{grid}, {g7}, lsl #3]",
            "sub v25.8b, v25.8b, v14.8b",
            "mla v24.2s, v2.2s, v4.2s",
            "sub v7.8b, v7.8b, v26.8b",
            "movi v6.2s, #0",
            "dup v9.2s, {g14:w}",
            "ldr d16, [{signs}, {g9}, lsl #3]",
            "mla v1.2s, v15.2s, v0.2s",
            "sub v13.8b, v13.8b, v18.8b",
            "ldr d8, [{signs}, {g11}, lsl #3]",
            "sub v3.8b, v3.8b, v21.8b",
            "ldr d14, [{signs}, {g8}, lsl #3]",
            "movi v2.2s, #0",
            "ldr d4, [{grid}, {g5}, lsl #3]",
            "sdot v11.2s, v25.8b, v12.8b",
            "ldr d15, [{grid}, {g0}, lsl #3]",
            "ldr d0, [{grid}, {g2}, lsl #3]",
            "ldr d18, [{signs}, {g10}, lsl #3]",
            "sdot v20.2s, v3.8b, v17.8b",
            "eor v25.8b, v5.8b, v8.8b",
            "eor v21.8b, v4.8b, v14.8b",
            "sdot v11.2s, v13.8b, v28.8b",
            "eor v10.8b, v15.8b, v16.8b",
            "dup v3.2s, {g6:w}",
            "eor v26.8b, v0.8b, v18.8b",
            "sub v25.8b, v25.8b, v8.8b",
            "ldp d12, d13, [{y}, #240]",
            "dup v28.2s, {g1:w}",
            "sdot v20.2s, v7.8b, v19.8b",
            "sub v21.8b, v21.8b, v14.8b",
            "sub v10.8b, v10.8b, v16.8b",
            "mla v24.2s, v11.2s, v27.2s",
            "sub v26.8b, v26.8b, v18.8b",
            "add {y}, {y}, #292",
            "sdot v6.2s, v21.8b, v23.8b",
            "mla v1.2s, v20.2s, v9.2s",
            "sdot v2.2s, v26.8b, v12.8b",
            "sdot v6.2s, v10.8b, v22.8b",
            "sdot v2.2s, v25.8b, v13.8b",
            "mla v24.2s, v6.2s, v28.2s",
            "mla v1.2s, v2.2s, v3.2s",
            "add v24.2s, v24.2s, v1.2s",
            "addp v30.2s, v24.2s, v24.2s",
            "b.ne 2b",
        ]
    )
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

/// IQ3_S block sums with ARMv8.0 widening multiplies.
///
/// # Safety
/// As [`block_sums_neon`], for IQ3_S super-blocks (`x` at the first one's byte 2).
#[inline(always)]
unsafe fn iq3_s_block_sums_neon(x: *const u8, y: *const u8, n: usize, out: *mut i32) {
    block_sums_iq3_s!(
        x,
        y,
        n,
        out,
        [],
        [
            "smull v18.8h, v0.8b, v16.8b",
            "smull2 v19.8h, v0.16b, v16.16b",
            "smlal v18.8h, v2.8b, v17.8b",
            "smlal2 v19.8h, v2.16b, v17.16b",
            "add v18.8h, v18.8h, v19.8h",
            "dup v21.8h, {b:w}",
            "smlal v20.4s, v18.4h, v21.4h",
            "smlal2 v20.4s, v18.8h, v21.8h"
        ]
    );
}

/// [`iq3_s_block_sums_neon`] with `sdot`.
///
/// # Safety
/// As [`iq3_s_block_sums_neon`], and the CPU must implement dotprod.
#[inline(always)]
unsafe fn iq3_s_block_sums_dotprod(x: *const u8, y: *const u8, n: usize, out: *mut i32) {
    block_sums_iq3_s!(
        x,
        y,
        n,
        out,
        [".arch_extension dotprod"],
        [
            "movi v18.4s, #0",
            "sdot v18.4s, v0.16b, v16.16b",
            "sdot v18.4s, v2.16b, v17.16b",
            "dup v21.4s, {b:w}",
            "mla v20.4s, v18.4s, v21.4s"
        ]
    );
}

/// IQ2_XS . Q8_K with widening multiplies (ARMv8.0). Bit-identical to the scalar twin.
pub fn vec_dot_iq2_xs_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ2_XS_BYTES, act, Q8_K_BYTES);
    if nb == 0 {
        return 0.0;
    }
    // SAFETY: nb >= 1 whole super-blocks lie inside both slices (whole_blocks).
    0.125 * unsafe { iq2_xs_row_neon(w.as_ptr().add(2), act.as_ptr().add(4), nb) }
}

/// IQ2_XS . Q8_K with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_iq2_xs_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ2_XS_BYTES, act, Q8_K_BYTES);
    if nb == 0 {
        return 0.0;
    }
    // SAFETY: as in vec_dot_iq2_xs_q8_k_neon; the caller vouches for dotprod.
    0.125 * iq2_xs_row_dotprod(w.as_ptr().add(2), act.as_ptr().add(4), nb)
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

/// IQ3_S . Q8_K with widening multiplies (ARMv8.0). Bit-identical to the scalar twin (whose
/// final factor is 1: `1.0 * sumf` is `sumf`).
pub fn vec_dot_iq3_s_q8_k_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ3_S_BYTES, act, Q8_K_BYTES);
    grid_row(nb, w, act, IQ3_S_BYTES, 1.0, iq3_s_block_sums_neon)
}

/// IQ3_S . Q8_K with `sdot` (ARMv8.2 dotprod). Bit-identical to the scalar twin.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn vec_dot_iq3_s_q8_k_dotprod(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = whole_blocks(n, QK_K, w, IQ3_S_BYTES, act, Q8_K_BYTES);
    grid_row(nb, w, act, IQ3_S_BYTES, 1.0, iq3_s_block_sums_dotprod)
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
