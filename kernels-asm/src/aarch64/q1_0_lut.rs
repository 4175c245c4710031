//! Q1_0 . Q8_0 by table lookup (T-MAC style) in base ARMv8.0 NEON, for the cores without
//! dotprod (Cortex-A53, Apple A7) and, since llvm-mca predicts it beats the sdot kernel there
//! too, the A55. The layout, the tables and the scalar face are
//! `smolrun_core::quant::q1_0_lut` (its comment says why this works and why it is exact); the
//! two functions here are that module's `build_table` and `matvec` in NEON, with the same bytes
//! and the same bits.
//!
//! Per 16-row group and 128-column block, one loop trip: for each Q8_0 block k, 4 index vectors
//! (each byte the sign bits of one row for 8 activations: `and #15` gives the code of the first
//! 4, `ushr #4` of the next 4), 16 `tbl` lookups into that block's 8 lo and 8 hi tables, byte
//! adds (lo 4 groups at a time, hi 8), `uaddl` / `sshll #6` to the block's exact i16 sums of
//! the 16 rows, then per row the scalar's `sumi += d8 * sumi_block` (`scvtf`, `fmul`, `fadd`:
//! one rounding each, the scalar's order; the first block's product alone, which differs from
//! the scalar's `0 + p` only for p = -0, and that `sumf += d * sumi` cannot see: sumf is never
//! -0), and at the end `sumf += d * sumi` with the rows' f16 d. About 250 NEON operations for
//! 16 rows x 128 weights, against ~80 per row for the direct kernel
//! (tools/lowbit-asm.py mca has the llvm-mca figures).
//!
//! The loop bodies were ordered by the list scheduler of tools/lowbit-asm.py (`emit lut`,
//! `emit lut-build`), which also allocates their registers: every register dependence kept.

use core::arch::aarch64::float32x4_t;
use core::arch::asm;

/// Elements of a Q1_0 block, bytes of a Q8_0 block (shared with `smolrun_core::quant`; the
/// tests check that the two agree).
const Q1_0_ELEMS: usize = 128;
const Q8_0_BYTES: usize = 34;
/// Rows per group and bytes of one group block (16 f16 d, 16 x 16 bytes of sign bits).
pub const LUT_GROUP_ROWS: usize = 16;
pub const LUT_GROUP_BLOCK_BYTES: usize = 288;
/// Table bytes of one Q8_0 block (8 groups x 16 lo + 16 hi), then 4 bytes of its f32 d.
pub const LUT_TABLE_BLOCK_BYTES: usize = 256;

/// Table-build constants, i16 little-endian: the sign (+1 / -1) of bits 0, 1 and 2 for the
/// codes 0..7, ones, twos; then 16 bytes of 63 (the lo mask).
#[repr(align(16))]
struct BuildConsts([u8; 96]);

static BUILD_CONSTS: BuildConsts = {
    let mut c = [0u8; 96];
    let mut i = 0;
    while i < 8 {
        let lanes: [i16; 5] = [
            if i & 1 != 0 { 1 } else { -1 },
            if i & 2 != 0 { 1 } else { -1 },
            if i & 4 != 0 { 1 } else { -1 },
            1,
            2,
        ];
        let mut v = 0;
        while v < 5 {
            let b = lanes[v].to_le_bytes();
            c[16 * v + 2 * i] = b[0];
            c[16 * v + 2 * i + 1] = b[1];
            v += 1;
        }
        c[80 + i] = 63;
        c[88 + i] = 63;
        i += 1;
    }
    BuildConsts(c)
};

/// Blocks of 32 activations the table of `table_len` bytes holds.
fn table_blocks(table_len: usize) -> usize {
    table_len / (LUT_TABLE_BLOCK_BYTES + 4)
}

/// The tables of one Q8_0 activation row (`act`) into `table` (`smolrun_core::quant::
/// q1_0_lut::build_table`'s bytes): as many Q8_0 blocks as both hold.
pub fn build_table_q1_0_lut_neon(act: &[u8], table: &mut [u8]) {
    let table_nb8 = table_blocks(table.len());
    let nb8 = (act.len() / Q8_0_BYTES).min(table_nb8);
    if nb8 == 0 {
        return;
    }
    let c = &BUILD_CONSTS;
    // SAFETY: reads nb8 activation blocks of 34 bytes, writes nb8 tables of 256 bytes and nb8
    // f32 scales from offset 256 * table_nb8, all inside the slices; base NEON only.
    unsafe {
        asm!(
            "ld1 {{v16.8h, v17.8h, v18.8h, v19.8h}}, [{c}], #64",
            "ld1 {{v29.8h}}, [{c}], #16",
            "ld1 {{v30.16b}}, [{c}]",
            "2:",
            "ldr h0, [{y}]",
            "ldur q1, [{y}, #2]",
            "ldur q2, [{y}, #18]",
            "subs {nb}, {nb}, #1",
            "add {y}, {y}, #34",
            "fcvt s0, h0",
            "sxtl v3.8h, v1.8b",
            "sxtl2 v4.8h, v1.16b",
            "sxtl v5.8h, v2.8b",
            "sxtl2 v6.8h, v2.16b",
            "mul v7.8h, v16.8h, v3.h[0]",
            "mul v8.8h, v29.8h, v3.h[3]",
            "mul v9.8h, v16.8h, v3.h[4]",
            "mul v10.8h, v29.8h, v3.h[7]",
            "str s0, [{s}], #4",
            "mul v11.8h, v16.8h, v4.h[0]",
            "mul v12.8h, v29.8h, v4.h[3]",
            "mul v13.8h, v16.8h, v4.h[4]",
            "mul v14.8h, v29.8h, v4.h[7]",
            "mul v15.8h, v16.8h, v5.h[0]",
            "mul v20.8h, v29.8h, v5.h[3]",
            "mul v21.8h, v16.8h, v5.h[4]",
            "mul v22.8h, v29.8h, v5.h[7]",
            "mul v23.8h, v16.8h, v6.h[0]",
            "mul v24.8h, v29.8h, v6.h[3]",
            "mul v25.8h, v16.8h, v6.h[4]",
            "mul v26.8h, v29.8h, v6.h[7]",
            "mla v7.8h, v17.8h, v3.h[1]",
            "mla v9.8h, v17.8h, v3.h[5]",
            "mla v11.8h, v17.8h, v4.h[1]",
            "mla v13.8h, v17.8h, v4.h[5]",
            "mla v15.8h, v17.8h, v5.h[1]",
            "mla v21.8h, v17.8h, v5.h[5]",
            "mla v23.8h, v17.8h, v6.h[1]",
            "mla v25.8h, v17.8h, v6.h[5]",
            "mla v7.8h, v18.8h, v3.h[2]",
            "mla v9.8h, v18.8h, v3.h[6]",
            "mla v11.8h, v18.8h, v4.h[2]",
            "mla v13.8h, v18.8h, v4.h[6]",
            "mla v15.8h, v18.8h, v5.h[2]",
            "mla v21.8h, v18.8h, v5.h[6]",
            "mla v23.8h, v18.8h, v6.h[2]",
            "mla v25.8h, v18.8h, v6.h[6]",
            "mls v7.8h, v19.8h, v3.h[3]",
            "mls v9.8h, v19.8h, v3.h[7]",
            "mls v11.8h, v19.8h, v4.h[3]",
            "mls v13.8h, v19.8h, v4.h[7]",
            "mls v15.8h, v19.8h, v5.h[3]",
            "mls v21.8h, v19.8h, v5.h[7]",
            "mls v23.8h, v19.8h, v6.h[3]",
            "mls v25.8h, v19.8h, v6.h[7]",
            "add v27.8h, v7.8h, v8.8h",
            "xtn v28.8b, v7.8h",
            "shrn v31.8b, v7.8h, #6",
            "add v1.8h, v9.8h, v10.8h",
            "xtn v2.8b, v9.8h",
            "shrn v0.8b, v9.8h, #6",
            "add v3.8h, v11.8h, v12.8h",
            "xtn v4.8b, v11.8h",
            "shrn v5.8b, v11.8h, #6",
            "add v6.8h, v13.8h, v14.8h",
            "xtn v8.8b, v13.8h",
            "shrn v7.8b, v13.8h, #6",
            "add v10.8h, v15.8h, v20.8h",
            "add v9.8h, v21.8h, v22.8h",
            "add v12.8h, v23.8h, v24.8h",
            "xtn2 v28.16b, v27.8h",
            "add v11.8h, v25.8h, v26.8h",
            "shrn2 v31.16b, v27.8h, #6",
            "xtn v14.8b, v15.8h",
            "shrn v13.8b, v15.8h, #6",
            "xtn2 v2.16b, v1.8h",
            "shrn2 v0.16b, v1.8h, #6",
            "xtn v20.8b, v21.8h",
            "shrn v22.8b, v21.8h, #6",
            "xtn2 v4.16b, v3.8h",
            "shrn2 v5.16b, v3.8h, #6",
            "xtn v24.8b, v23.8h",
            "shrn v26.8b, v23.8h, #6",
            "xtn2 v8.16b, v6.8h",
            "shrn2 v7.16b, v6.8h, #6",
            "xtn v27.8b, v25.8h",
            "shrn v15.8b, v25.8h, #6",
            "and v28.16b, v28.16b, v30.16b",
            "xtn2 v14.16b, v10.8h",
            "shrn2 v13.16b, v10.8h, #6",
            "and v2.16b, v2.16b, v30.16b",
            "xtn2 v20.16b, v9.8h",
            "shrn2 v22.16b, v9.8h, #6",
            "and v4.16b, v4.16b, v30.16b",
            "xtn2 v24.16b, v12.8h",
            "shrn2 v26.16b, v12.8h, #6",
            "and v8.16b, v8.16b, v30.16b",
            "xtn2 v27.16b, v11.8h",
            "shrn2 v15.16b, v11.8h, #6",
            "stp q28, q31, [{t}, #0]",
            "and v14.16b, v14.16b, v30.16b",
            "stp q2, q0, [{t}, #32]",
            "and v20.16b, v20.16b, v30.16b",
            "stp q4, q5, [{t}, #64]",
            "and v24.16b, v24.16b, v30.16b",
            "stp q8, q7, [{t}, #96]",
            "and v27.16b, v27.16b, v30.16b",
            "stp q14, q13, [{t}, #128]",
            "stp q20, q22, [{t}, #160]",
            "stp q24, q26, [{t}, #192]",
            "stp q27, q15, [{t}, #224]",
            "add {t}, {t}, #256",
            "b.ne 2b",
            y = inout(reg) act.as_ptr() => _,
            t = inout(reg) table.as_mut_ptr() => _,
            s = inout(reg) table.as_mut_ptr().add(table_nb8 * LUT_TABLE_BLOCK_BYTES) => _,
            nb = inout(reg) nb8 => _,
            c = inout(reg) c.0.as_ptr() => _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _, out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v14") _, out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _, out("v21") _, out("v22") _, out("v23") _, out("v24") _, out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _, out("v30") _, out("v31") _,
            options(nostack),
        );
    }
}

/// 128-column blocks of one column tile: the matvec runs every group of its rows over one
/// tile of columns before the next, so that the tile's tables (16 x 4 x 260 bytes = 16.6 KB)
/// stay in the 32 KB L1 of an A53 while all the groups read them. Untiled, a 6,144-wide input
/// has 50 KB of tables, re-read from L2 by every group, and the in-order core stalls on each
/// miss. Each row's sum is carried from tile to tile in `out`, block after block as before:
/// the float order, and so the bits, do not change.
pub const LUT_TILE_BLOCKS: usize = 16;

/// `out[r] = row r . act` for `out.len()` Q1_0 rows in the lookup-table layout (`packed`, as
/// `smolrun_core::quant::q1_0_lut::repack` writes it) against the tables of `act` (`table`,
/// from `build_table_q1_0_lut_neon`): bit for bit `q1_0::vec_dot` on every row. Rows whose
/// data `packed` lacks get 0.
pub fn matvec_q1_0_lut16_neon(n_cols: usize, packed: &[u8], table: &[u8], out: &mut [f32]) {
    let table_nb8 = table_blocks(table.len());
    let nb = (n_cols / Q1_0_ELEMS).min(table_nb8 / 4);
    let group_bytes = nb * LUT_GROUP_BLOCK_BYTES;
    let (tables, scales) = table.split_at(table_nb8 * LUT_TABLE_BLOCK_BYTES);
    if nb == 0 {
        out.fill(0.0);
        return;
    }
    for b0 in (0..nb).step_by(LUT_TILE_BLOCKS) {
        let b1 = (b0 + LUT_TILE_BLOCKS).min(nb);
        let tile_tables = &tables[4 * b0 * LUT_TABLE_BLOCK_BYTES..4 * b1 * LUT_TABLE_BLOCK_BYTES];
        let tile_scales = &scales[16 * b0..16 * b1];
        for (g, out) in out.chunks_mut(LUT_GROUP_ROWS).enumerate() {
            let Some(group) = packed.get(g * group_bytes..(g + 1) * group_bytes) else {
                out.fill(0.0);
                continue;
            };
            // The rows' sums so far (the padding rows of a last group start from 0 each
            // tile: their sums are never read).
            let mut sums = [0.0f32; LUT_GROUP_ROWS];
            if b0 > 0 {
                sums[..out.len()].copy_from_slice(out);
            }
            let blocks = &group[b0 * LUT_GROUP_BLOCK_BYTES..b1 * LUT_GROUP_BLOCK_BYTES];
            let sums = group_dot(b1 - b0, blocks, tile_tables, tile_scales, sums);
            out.copy_from_slice(&sums[..out.len()]);
        }
    }
}

/// One group over `nb` (> 0) blocks: `sums[r] += d_r * sumi_r` block after block, against
/// `4 nb` tables and their `4 nb` f32 scales.
fn group_dot(nb: usize, group: &[u8], tables: &[u8], scales: &[u8], sums: [f32; 16]) -> [f32; 16] {
    debug_assert!(
        nb > 0
            && group.len() >= nb * LUT_GROUP_BLOCK_BYTES
            && tables.len() >= 4 * nb * LUT_TABLE_BLOCK_BYTES
            && scales.len() >= 16 * nb
    );
    // SAFETY (of the transmutes): float32x4_t is four f32s, any bits valid.
    let [mut s0, mut s1, mut s2, mut s3]: [float32x4_t; 4] = unsafe { core::mem::transmute(sums) };
    // SAFETY: the loop reads nb group blocks of 288 bytes, 4 nb tables of 256 bytes and 4 nb
    // f32 scales, all inside the slices; base NEON only.
    unsafe {
        asm!(
            "movi v31.16b, #15",
            "2:",
            "ldr q0, [{s}]",
            "ldr q1, [{x}, #32]",
            "ldr q2, [{x}, #48]",
            "ldr q3, [{x}, #64]",
            "ldr q4, [{x}, #80]",
            "ldr q5, [{t}, #0]",
            "ldr q6, [{t}, #16]",
            "ldr q7, [{t}, #32]",
            "ldr q8, [{t}, #48]",
            "ldr q9, [{t}, #64]",
            "ldr q10, [{t}, #80]",
            "ldr q11, [{t}, #96]",
            "ldr q12, [{t}, #112]",
            "ldr q13, [{t}, #128]",
            "ldr q14, [{t}, #144]",
            "ldr q15, [{t}, #160]",
            "ldr q16, [{t}, #176]",
            "ldr q17, [{t}, #192]",
            "ldr q18, [{t}, #208]",
            "ldr q19, [{t}, #224]",
            "ldr q24, [{t}, #240]",
            "ldr q25, [{x}, #96]",
            "ldr q26, [{x}, #112]",
            "subs {nb}, {nb}, #1",
            "add {s}, {s}, #16",
            "and v27.16b, v1.16b, v31.16b",
            "ushr v28.16b, v1.16b, #4",
            "and v29.16b, v2.16b, v31.16b",
            "ushr v30.16b, v2.16b, #4",
            "and v1.16b, v3.16b, v31.16b",
            "ushr v2.16b, v3.16b, #4",
            "and v3.16b, v4.16b, v31.16b",
            "ushr v4.16b, v4.16b, #4",
            "tbl v5.16b, {{v5.16b}}, v27.16b",
            "tbl v6.16b, {{v6.16b}}, v27.16b",
            "and v27.16b, v25.16b, v31.16b",
            "ushr v25.16b, v25.16b, #4",
            "tbl v7.16b, {{v7.16b}}, v28.16b",
            "tbl v8.16b, {{v8.16b}}, v28.16b",
            "and v28.16b, v26.16b, v31.16b",
            "ushr v26.16b, v26.16b, #4",
            "tbl v9.16b, {{v9.16b}}, v29.16b",
            "tbl v10.16b, {{v10.16b}}, v29.16b",
            "tbl v29.16b, {{v11.16b}}, v30.16b",
            "tbl v11.16b, {{v12.16b}}, v30.16b",
            "tbl v12.16b, {{v13.16b}}, v1.16b",
            "tbl v30.16b, {{v14.16b}}, v1.16b",
            "tbl v13.16b, {{v15.16b}}, v2.16b",
            "tbl v14.16b, {{v16.16b}}, v2.16b",
            "tbl v1.16b, {{v17.16b}}, v3.16b",
            "tbl v15.16b, {{v18.16b}}, v3.16b",
            "ldr q16, [{x}, #128]",
            "tbl v2.16b, {{v19.16b}}, v4.16b",
            "tbl v17.16b, {{v24.16b}}, v4.16b",
            "ldr q18, [{x}, #144]",
            "add v3.16b, v5.16b, v7.16b",
            "ldr q19, [{t}, #256]",
            "add v24.16b, v6.16b, v8.16b",
            "ldr q4, [{t}, #272]",
            "add v5.16b, v9.16b, v29.16b",
            "ldr q7, [{t}, #288]",
            "add v6.16b, v10.16b, v11.16b",
            "ldr q8, [{t}, #304]",
            "add v9.16b, v12.16b, v13.16b",
            "ldr q29, [{t}, #320]",
            "add v10.16b, v30.16b, v14.16b",
            "ldr q11, [{t}, #336]",
            "add v12.16b, v1.16b, v2.16b",
            "ldr q13, [{t}, #352]",
            "add v30.16b, v15.16b, v17.16b",
            "ldr q14, [{t}, #368]",
            "and v1.16b, v16.16b, v31.16b",
            "ushr v2.16b, v16.16b, #4",
            "and v15.16b, v18.16b, v31.16b",
            "ushr v17.16b, v18.16b, #4",
            "tbl v16.16b, {{v19.16b}}, v27.16b",
            "add v18.16b, v3.16b, v5.16b",
            "tbl v19.16b, {{v4.16b}}, v27.16b",
            "add v3.16b, v24.16b, v6.16b",
            "ldr q5, [{t}, #384]",
            "tbl v4.16b, {{v7.16b}}, v25.16b",
            "tbl v27.16b, {{v8.16b}}, v25.16b",
            "ldr q24, [{t}, #400]",
            "tbl v6.16b, {{v29.16b}}, v28.16b",
            "add v7.16b, v9.16b, v12.16b",
            "ldr q8, [{t}, #416]",
            "tbl v25.16b, {{v11.16b}}, v28.16b",
            "ldr q29, [{t}, #432]",
            "add v9.16b, v10.16b, v30.16b",
            "ldr q12, [{t}, #448]",
            "tbl v11.16b, {{v13.16b}}, v26.16b",
            "tbl v28.16b, {{v14.16b}}, v26.16b",
            "ldr q10, [{t}, #464]",
            "add v30.16b, v16.16b, v4.16b",
            "ldr q13, [{t}, #480]",
            "add v14.16b, v19.16b, v27.16b",
            "ldr q26, [{t}, #496]",
            "tbl v16.16b, {{v5.16b}}, v1.16b",
            "uaddl v4.8h, v18.8b, v7.8b",
            "uaddl2 v19.8h, v18.16b, v7.16b",
            "tbl v27.16b, {{v24.16b}}, v1.16b",
            "ldr q5, [{x}, #160]",
            "tbl v18.16b, {{v8.16b}}, v2.16b",
            "add v7.16b, v3.16b, v9.16b",
            "ldr q24, [{x}, #176]",
            "tbl v1.16b, {{v29.16b}}, v2.16b",
            "ldr q8, [{x}, #192]",
            "add v3.16b, v6.16b, v11.16b",
            "ldr q9, [{x}, #208]",
            "add v29.16b, v25.16b, v28.16b",
            "ldr q2, [{t}, #512]",
            "tbl v6.16b, {{v12.16b}}, v15.16b",
            "tbl v11.16b, {{v10.16b}}, v15.16b",
            "ldr q25, [{t}, #528]",
            "tbl v28.16b, {{v13.16b}}, v17.16b",
            "tbl v12.16b, {{v26.16b}}, v17.16b",
            "ldr q10, [{t}, #544]",
            "add v15.16b, v16.16b, v18.16b",
            "ldr q13, [{t}, #560]",
            "sshll v26.8h, v7.8b, #6",
            "sshll2 v17.8h, v7.16b, #6",
            "and v16.16b, v5.16b, v31.16b",
            "ushr v18.16b, v5.16b, #4",
            "add v7.16b, v27.16b, v1.16b",
            "and v5.16b, v24.16b, v31.16b",
            "ushr v27.16b, v24.16b, #4",
            "add v1.16b, v30.16b, v3.16b",
            "and v24.16b, v8.16b, v31.16b",
            "ushr v30.16b, v8.16b, #4",
            "add v3.16b, v14.16b, v29.16b",
            "and v8.16b, v9.16b, v31.16b",
            "ushr v14.16b, v9.16b, #4",
            "add v29.16b, v6.16b, v28.16b",
            "add v9.16b, v11.16b, v12.16b",
            "add v6.8h, v4.8h, v26.8h",
            "ldr q28, [{t}, #576]",
            "add v11.8h, v19.8h, v17.8h",
            "ldr q12, [{t}, #592]",
            "tbl v4.16b, {{v2.16b}}, v16.16b",
            "tbl v26.16b, {{v25.16b}}, v16.16b",
            "ldr q19, [{t}, #608]",
            "tbl v17.16b, {{v10.16b}}, v18.16b",
            "tbl v2.16b, {{v13.16b}}, v18.16b",
            "ldr q25, [{t}, #624]",
            "add v16.16b, v15.16b, v29.16b",
            "ldr q10, [{t}, #640]",
            "add v13.16b, v7.16b, v9.16b",
            "ldr q18, [{t}, #656]",
            "sxtl v15.4s, v6.4h",
            "sxtl2 v29.4s, v6.8h",
            "sxtl v7.4s, v11.4h",
            "sxtl2 v9.4s, v11.8h",
            "tbl v6.16b, {{v28.16b}}, v5.16b",
            "tbl v11.16b, {{v12.16b}}, v5.16b",
            "add v28.16b, v4.16b, v17.16b",
            "add v12.16b, v26.16b, v2.16b",
            "ldr q5, [{t}, #672]",
            "tbl v4.16b, {{v19.16b}}, v27.16b",
            "uaddl v17.8h, v1.8b, v16.8b",
            "uaddl2 v26.8h, v1.16b, v16.16b",
            "tbl v2.16b, {{v25.16b}}, v27.16b",
            "ldr q19, [{t}, #688]",
            "add v1.16b, v3.16b, v13.16b",
            "ldr q16, [{t}, #704]",
            "tbl v25.16b, {{v10.16b}}, v24.16b",
            "scvtf v15.4s, v15.4s",
            "scvtf v29.4s, v29.4s",
            "tbl v27.16b, {{v18.16b}}, v24.16b",
            "ldr q3, [{t}, #720]",
            "scvtf v7.4s, v7.4s",
            "scvtf v9.4s, v9.4s",
            "add v13.16b, v6.16b, v4.16b",
            "ldr q10, [{t}, #736]",
            "tbl v18.16b, {{v5.16b}}, v30.16b",
            "add v24.16b, v11.16b, v2.16b",
            "ldr q6, [{t}, #752]",
            "sshll v4.8h, v1.8b, #6",
            "sshll2 v5.8h, v1.16b, #6",
            "tbl v11.16b, {{v19.16b}}, v30.16b",
            "tbl v2.16b, {{v16.16b}}, v8.16b",
            "fmul v1.4s, v15.4s, v0.s[0]",
            "fmul v19.4s, v29.4s, v0.s[0]",
            "tbl v30.16b, {{v3.16b}}, v8.16b",
            "ldr q16, [{x}, #224]",
            "fmul v15.4s, v7.4s, v0.s[0]",
            "add v29.16b, v28.16b, v13.16b",
            "ldr q3, [{x}, #240]",
            "fmul v8.4s, v9.4s, v0.s[0]",
            "add v7.16b, v25.16b, v18.16b",
            "ldr q28, [{x}, #256]",
            "tbl v13.16b, {{v10.16b}}, v14.16b",
            "add v9.16b, v12.16b, v24.16b",
            "ldr q25, [{x}, #272]",
            "add v18.8h, v17.8h, v4.8h",
            "ldr q10, [{t}, #768]",
            "add v12.8h, v26.8h, v5.8h",
            "ldr q24, [{t}, #784]",
            "tbl v17.16b, {{v6.16b}}, v14.16b",
            "ldr q4, [{t}, #800]",
            "add v26.16b, v27.16b, v11.16b",
            "ldr q5, [{t}, #816]",
            "and v6.16b, v16.16b, v31.16b",
            "ushr v14.16b, v16.16b, #4",
            "and v27.16b, v3.16b, v31.16b",
            "ushr v11.16b, v3.16b, #4",
            "add v16.16b, v2.16b, v13.16b",
            "and v3.16b, v28.16b, v31.16b",
            "ushr v2.16b, v28.16b, #4",
            "sxtl v13.4s, v18.4h",
            "sxtl2 v28.4s, v18.8h",
            "and v18.16b, v25.16b, v31.16b",
            "ushr v25.16b, v25.16b, #4",
            "add v30.16b, v30.16b, v17.16b",
            "sxtl v17.4s, v12.4h",
            "sxtl2 v12.4s, v12.8h",
            "tbl v10.16b, {{v10.16b}}, v6.16b",
            "tbl v24.16b, {{v24.16b}}, v6.16b",
            "tbl v6.16b, {{v4.16b}}, v14.16b",
            "tbl v4.16b, {{v5.16b}}, v14.16b",
            "add v5.16b, v7.16b, v16.16b",
            "scvtf v13.4s, v13.4s",
            "scvtf v28.4s, v28.4s",
            "add v14.16b, v26.16b, v30.16b",
            "scvtf v17.4s, v17.4s",
            "scvtf v12.4s, v12.4s",
            "add v7.16b, v10.16b, v6.16b",
            "ldr q16, [{t}, #832]",
            "add v26.16b, v24.16b, v4.16b",
            "ldr q30, [{t}, #848]",
            "uaddl v10.8h, v29.8b, v5.8b",
            "uaddl2 v6.8h, v29.16b, v5.16b",
            "fmul v13.4s, v13.4s, v0.s[1]",
            "add v24.16b, v9.16b, v14.16b",
            "ldr q4, [{t}, #864]",
            "fmul v28.4s, v28.4s, v0.s[1]",
            "fmul v17.4s, v17.4s, v0.s[1]",
            "fmul v12.4s, v12.4s, v0.s[1]",
            "tbl v29.16b, {{v16.16b}}, v27.16b",
            "tbl v5.16b, {{v30.16b}}, v27.16b",
            "ldr q9, [{t}, #880]",
            "sshll v14.8h, v24.8b, #6",
            "sshll2 v16.8h, v24.16b, #6",
            "fadd v30.4s, v1.4s, v13.4s",
            "tbl v27.16b, {{v4.16b}}, v11.16b",
            "fadd v24.4s, v19.4s, v28.4s",
            "ldr q1, [{t}, #896]",
            "fadd v13.4s, v15.4s, v17.4s",
            "ldr q4, [{t}, #912]",
            "fadd v19.4s, v8.4s, v12.4s",
            "ldr q28, [{t}, #928]",
            "add v15.8h, v10.8h, v14.8h",
            "ldr q17, [{t}, #944]",
            "add v8.8h, v6.8h, v16.8h",
            "ldr q12, [{t}, #960]",
            "tbl v10.16b, {{v9.16b}}, v11.16b",
            "ldr q14, [{t}, #976]",
            "add v6.16b, v29.16b, v27.16b",
            "ldr q16, [{t}, #992]",
            "tbl v9.16b, {{v1.16b}}, v3.16b",
            "tbl v11.16b, {{v4.16b}}, v3.16b",
            "ldr q29, [{t}, #1008]",
            "sxtl v27.4s, v15.4h",
            "sxtl2 v1.4s, v15.8h",
            "tbl v4.16b, {{v28.16b}}, v2.16b",
            "sxtl v3.4s, v8.4h",
            "sxtl2 v15.4s, v8.8h",
            "tbl v28.16b, {{v17.16b}}, v2.16b",
            "add v8.16b, v5.16b, v10.16b",
            "tbl v17.16b, {{v12.16b}}, v18.16b",
            "add v2.16b, v7.16b, v6.16b",
            "ldr q5, [{x}]",
            "tbl v10.16b, {{v14.16b}}, v18.16b",
            "ldr q12, [{x}, #16]",
            "add {t}, {t}, #1024",
            "tbl v7.16b, {{v16.16b}}, v25.16b",
            "scvtf v27.4s, v27.4s",
            "scvtf v1.4s, v1.4s",
            "tbl v6.16b, {{v29.16b}}, v25.16b",
            "add v14.16b, v9.16b, v4.16b",
            "scvtf v3.4s, v3.4s",
            "scvtf v15.4s, v15.4s",
            "add v18.16b, v11.16b, v28.16b",
            "add v16.16b, v26.16b, v8.16b",
            "add {x}, {x}, #288",
            "fcvtl v29.4s, v5.4h",
            "fcvtl2 v25.4s, v5.8h",
            "add v9.16b, v17.16b, v7.16b",
            "fcvtl v4.4s, v12.4h",
            "fcvtl2 v11.4s, v12.8h",
            "fmul v27.4s, v27.4s, v0.s[2]",
            "add v28.16b, v10.16b, v6.16b",
            "fmul v1.4s, v1.4s, v0.s[2]",
            "fmul v3.4s, v3.4s, v0.s[2]",
            "fmul v15.4s, v15.4s, v0.s[2]",
            "add v26.16b, v14.16b, v9.16b",
            "add v8.16b, v18.16b, v28.16b",
            "fadd v5.4s, v30.4s, v27.4s",
            "fadd v17.4s, v24.4s, v1.4s",
            "fadd v7.4s, v13.4s, v3.4s",
            "uaddl v12.8h, v2.8b, v26.8b",
            "uaddl2 v10.8h, v2.16b, v26.16b",
            "fadd v6.4s, v19.4s, v15.4s",
            "add v14.16b, v16.16b, v8.16b",
            "sshll v9.8h, v14.8b, #6",
            "sshll2 v18.8h, v14.16b, #6",
            "add v28.8h, v12.8h, v9.8h",
            "add v30.8h, v10.8h, v18.8h",
            "sxtl v27.4s, v28.4h",
            "sxtl2 v24.4s, v28.8h",
            "sxtl v1.4s, v30.4h",
            "sxtl2 v13.4s, v30.8h",
            "scvtf v27.4s, v27.4s",
            "scvtf v24.4s, v24.4s",
            "scvtf v1.4s, v1.4s",
            "scvtf v13.4s, v13.4s",
            "fmul v27.4s, v27.4s, v0.s[3]",
            "fmul v24.4s, v24.4s, v0.s[3]",
            "fmul v1.4s, v1.4s, v0.s[3]",
            "fmul v13.4s, v13.4s, v0.s[3]",
            "fadd v3.4s, v5.4s, v27.4s",
            "fadd v2.4s, v17.4s, v24.4s",
            "fadd v26.4s, v7.4s, v1.4s",
            "fadd v19.4s, v6.4s, v13.4s",
            "fmul v29.4s, v29.4s, v3.4s",
            "fmul v25.4s, v25.4s, v2.4s",
            "fmul v4.4s, v4.4s, v26.4s",
            "fmul v11.4s, v11.4s, v19.4s",
            "fadd v20.4s, v20.4s, v29.4s",
            "fadd v21.4s, v21.4s, v25.4s",
            "fadd v22.4s, v22.4s, v4.4s",
            "fadd v23.4s, v23.4s, v11.4s",
            "b.ne 2b",
            x = inout(reg) group.as_ptr() => _,
            t = inout(reg) tables.as_ptr() => _,
            s = inout(reg) scales.as_ptr() => _,
            nb = inout(reg) nb => _,
            inout("v20") s0, inout("v21") s1, inout("v22") s2, inout("v23") s3,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _, out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v14") _, out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v24") _, out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _, out("v30") _, out("v31") _,
            options(nostack, readonly, pure),
        );
        core::mem::transmute([s0, s1, s2, s3])
    }
}
