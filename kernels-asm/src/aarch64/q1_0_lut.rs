//! Q1_0 . Q8_0 by table lookup (T-MAC style) for ARMv8.0 NEON without dotprod (Cortex-A53,
//! Apple A7). The layout, the tables and the scalar face are
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
            "mul v12.8h, v16.8h, v3.h[4]",
            "mul v13.8h, v29.8h, v3.h[7]",
            "str s0, [{s}], #4",
            "mul v21.8h, v16.8h, v4.h[0]",
            "mul v22.8h, v29.8h, v4.h[3]",
            "mul v26.8h, v16.8h, v4.h[4]",
            "mul v27.8h, v29.8h, v4.h[7]",
            "mul v1.8h, v16.8h, v5.h[0]",
            "mul v2.8h, v29.8h, v5.h[3]",
            "mla v7.8h, v17.8h, v3.h[1]",
            "mla v12.8h, v17.8h, v3.h[5]",
            "mla v21.8h, v17.8h, v4.h[1]",
            "mla v26.8h, v17.8h, v4.h[5]",
            "mla v1.8h, v17.8h, v5.h[1]",
            "mla v7.8h, v18.8h, v3.h[2]",
            "mla v12.8h, v18.8h, v3.h[6]",
            "mla v21.8h, v18.8h, v4.h[2]",
            "mla v26.8h, v18.8h, v4.h[6]",
            "mla v1.8h, v18.8h, v5.h[2]",
            "mls v7.8h, v19.8h, v3.h[3]",
            "mls v12.8h, v19.8h, v3.h[7]",
            "mls v21.8h, v19.8h, v4.h[3]",
            "mls v26.8h, v19.8h, v4.h[7]",
            "mls v1.8h, v19.8h, v5.h[3]",
            "add v9.8h, v7.8h, v8.8h",
            "xtn v10.8b, v7.8h",
            "shrn v11.8b, v7.8h, #6",
            "add v14.8h, v12.8h, v13.8h",
            "xtn v15.8b, v12.8h",
            "shrn v20.8b, v12.8h, #6",
            "add v23.8h, v21.8h, v22.8h",
            "xtn v24.8b, v21.8h",
            "shrn v25.8b, v21.8h, #6",
            "add v28.8h, v26.8h, v27.8h",
            "xtn v31.8b, v26.8h",
            "shrn v0.8b, v26.8h, #6",
            "xtn2 v10.16b, v9.8h",
            "add v8.8h, v1.8h, v2.8h",
            "xtn v7.8b, v1.8h",
            "shrn2 v11.16b, v9.8h, #6",
            "xtn2 v15.16b, v14.8h",
            "shrn2 v20.16b, v14.8h, #6",
            "xtn2 v24.16b, v23.8h",
            "shrn2 v25.16b, v23.8h, #6",
            "xtn2 v31.16b, v28.8h",
            "shrn2 v0.16b, v28.8h, #6",
            "and v10.16b, v10.16b, v30.16b",
            "shrn v9.8b, v1.8h, #6",
            "xtn2 v7.16b, v8.8h",
            "mul v14.8h, v16.8h, v6.h[0]",
            "and v15.16b, v15.16b, v30.16b",
            "mul v23.8h, v16.8h, v6.h[4]",
            "and v24.16b, v24.16b, v30.16b",
            "and v31.16b, v31.16b, v30.16b",
            "stp q10, q11, [{t}, #0]",
            "shrn2 v9.16b, v8.8h, #6",
            "and v7.16b, v7.16b, v30.16b",
            "stp q15, q20, [{t}, #32]",
            "mla v14.8h, v17.8h, v6.h[1]",
            "stp q24, q25, [{t}, #64]",
            "mul v10.8h, v16.8h, v5.h[4]",
            "mul v11.8h, v29.8h, v5.h[7]",
            "stp q31, q0, [{t}, #96]",
            "mla v23.8h, v17.8h, v6.h[5]",
            "mul v15.8h, v29.8h, v6.h[3]",
            "stp q7, q9, [{t}, #128]",
            "mul v24.8h, v29.8h, v6.h[7]",
            "mla v14.8h, v18.8h, v6.h[2]",
            "mla v10.8h, v17.8h, v5.h[5]",
            "mla v23.8h, v18.8h, v6.h[6]",
            "mls v14.8h, v19.8h, v6.h[3]",
            "mla v10.8h, v18.8h, v5.h[6]",
            "mls v23.8h, v19.8h, v6.h[7]",
            "add v20.8h, v14.8h, v15.8h",
            "xtn v22.8b, v14.8h",
            "shrn v21.8b, v14.8h, #6",
            "mls v10.8h, v19.8h, v5.h[7]",
            "add v25.8h, v23.8h, v24.8h",
            "xtn v4.8b, v23.8h",
            "shrn v27.8b, v23.8h, #6",
            "xtn2 v22.16b, v20.8h",
            "shrn2 v21.16b, v20.8h, #6",
            "add v3.8h, v10.8h, v11.8h",
            "xtn v13.8b, v10.8h",
            "shrn v12.8b, v10.8h, #6",
            "xtn2 v4.16b, v25.8h",
            "shrn2 v27.16b, v25.8h, #6",
            "and v22.16b, v22.16b, v30.16b",
            "xtn2 v13.16b, v3.8h",
            "shrn2 v12.16b, v3.8h, #6",
            "and v4.16b, v4.16b, v30.16b",
            "stp q22, q21, [{t}, #192]",
            "and v13.16b, v13.16b, v30.16b",
            "stp q4, q27, [{t}, #224]",
            "stp q13, q12, [{t}, #160]",
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

/// `out[r] = row r . act` for `out.len()` Q1_0 rows in the lookup-table layout (`packed`, as
/// `smolrun_core::quant::q1_0_lut::repack` writes it) against the tables of `act` (`table`,
/// from `build_table_q1_0_lut_neon`): bit for bit `q1_0::vec_dot` on every row. Rows whose
/// data `packed` lacks get 0.
pub fn matvec_q1_0_lut16_neon(n_cols: usize, packed: &[u8], table: &[u8], out: &mut [f32]) {
    let table_nb8 = table_blocks(table.len());
    let nb = (n_cols / Q1_0_ELEMS).min(table_nb8 / 4);
    let group_bytes = nb * LUT_GROUP_BLOCK_BYTES;
    for (g, out) in out.chunks_mut(LUT_GROUP_ROWS).enumerate() {
        match packed.get(g * group_bytes..(g + 1) * group_bytes) {
            Some(group) if nb > 0 => {
                let sums = group_dot(nb, group, table, table_nb8);
                out.copy_from_slice(&sums[..out.len()]);
            }
            _ => out.fill(0.0),
        }
    }
}

/// One group: `nb` (> 0) blocks of 16 rows against the first `4 nb` blocks of the tables.
fn group_dot(nb: usize, group: &[u8], table: &[u8], table_nb8: usize) -> [f32; 16] {
    debug_assert!(nb > 0 && group.len() >= nb * LUT_GROUP_BLOCK_BYTES && 4 * nb <= table_nb8);
    // SAFETY (of the transmutes): float32x4_t is four f32s, any bits valid.
    let zero: float32x4_t = unsafe { core::mem::transmute([0.0f32; 4]) };
    let (mut s0, mut s1, mut s2, mut s3) = (zero, zero, zero, zero);
    // SAFETY: the loop reads nb group blocks of 288 bytes, 4 nb tables of 256 bytes and 4 nb
    // f32 scales from offset 256 * table_nb8, all inside the slices; base NEON only.
    unsafe {
        asm!(
            "movi v31.16b, #15",
            "2:",
            "ldr q0, [{s}]",
            "ldp q1, q2, [{x}, #32]",
            "ldp q3, q4, [{x}, #64]",
            "ldp q5, q6, [{t}, #0]",
            "ldp q7, q8, [{t}, #32]",
            "ldp q17, q18, [{t}, #64]",
            "ldp q19, q24, [{t}, #96]",
            "subs {nb}, {nb}, #1",
            "add {s}, {s}, #16",
            "and v9.16b, v1.16b, v31.16b",
            "ushr v10.16b, v1.16b, #4",
            "and v25.16b, v2.16b, v31.16b",
            "ushr v26.16b, v2.16b, #4",
            "tbl v11.16b, {{v5.16b}}, v9.16b",
            "tbl v12.16b, {{v6.16b}}, v9.16b",
            "tbl v13.16b, {{v7.16b}}, v10.16b",
            "tbl v14.16b, {{v8.16b}}, v10.16b",
            "tbl v27.16b, {{v17.16b}}, v25.16b",
            "tbl v28.16b, {{v18.16b}}, v25.16b",
            "tbl v29.16b, {{v19.16b}}, v26.16b",
            "tbl v30.16b, {{v24.16b}}, v26.16b",
            "ldp q6, q9, [{t}, #128]",
            "ldp q7, q8, [{t}, #160]",
            "and v10.16b, v3.16b, v31.16b",
            "add v15.16b, v11.16b, v13.16b",
            "add v16.16b, v12.16b, v14.16b",
            "ldp q25, q19, [{t}, #192]",
            "ldp q24, q26, [{t}, #224]",
            "add v1.16b, v27.16b, v29.16b",
            "add v5.16b, v28.16b, v30.16b",
            "ushr v11.16b, v3.16b, #4",
            "tbl v13.16b, {{v6.16b}}, v10.16b",
            "tbl v12.16b, {{v9.16b}}, v10.16b",
            "and v27.16b, v4.16b, v31.16b",
            "ushr v29.16b, v4.16b, #4",
            "tbl v14.16b, {{v7.16b}}, v11.16b",
            "tbl v2.16b, {{v8.16b}}, v11.16b",
            "tbl v28.16b, {{v25.16b}}, v27.16b",
            "tbl v30.16b, {{v19.16b}}, v27.16b",
            "add v7.16b, v15.16b, v1.16b",
            "tbl v3.16b, {{v24.16b}}, v29.16b",
            "tbl v6.16b, {{v26.16b}}, v29.16b",
            "add v11.16b, v16.16b, v5.16b",
            "add v17.16b, v13.16b, v14.16b",
            "add v18.16b, v12.16b, v2.16b",
            "add v9.16b, v28.16b, v3.16b",
            "add v10.16b, v30.16b, v6.16b",
            "add v8.16b, v17.16b, v9.16b",
            "ldp q1, q17, [{x}, #96]",
            "ldp q9, q16, [{x}, #128]",
            "add v13.16b, v18.16b, v10.16b",
            "uaddl v12.8h, v7.8b, v8.8b",
            "uaddl2 v2.8h, v7.16b, v8.16b",
            "ldp q5, q18, [{t}, #256]",
            "add v14.16b, v11.16b, v13.16b",
            "ushr v7.16b, v1.16b, #4",
            "ldp q10, q11, [{t}, #288]",
            "and v13.16b, v1.16b, v31.16b",
            "sshll v4.8h, v14.8b, #6",
            "sshll2 v25.8h, v14.16b, #6",
            "tbl v8.16b, {{v5.16b}}, v13.16b",
            "tbl v14.16b, {{v18.16b}}, v13.16b",
            "add v19.8h, v12.8h, v4.8h",
            "add v27.8h, v2.8h, v25.8h",
            "tbl v12.16b, {{v10.16b}}, v7.16b",
            "tbl v4.16b, {{v11.16b}}, v7.16b",
            "sxtl v24.4s, v19.4h",
            "sxtl2 v29.4s, v19.8h",
            "sxtl v3.4s, v27.4h",
            "sxtl2 v6.4s, v27.8h",
            "add v2.16b, v8.16b, v12.16b",
            "add v25.16b, v14.16b, v4.16b",
            "scvtf v24.4s, v24.4s",
            "scvtf v29.4s, v29.4s",
            "and v27.16b, v17.16b, v31.16b",
            "scvtf v3.4s, v3.4s",
            "ldp q7, q8, [{t}, #384]",
            "scvtf v6.4s, v6.4s",
            "ldp q12, q14, [{t}, #416]",
            "and v4.16b, v9.16b, v31.16b",
            "fmul v26.4s, v24.4s, v0.s[0]",
            "fmul v28.4s, v29.4s, v0.s[0]",
            "fmul v30.4s, v3.4s, v0.s[0]",
            "ldp q24, q19, [{t}, #320]",
            "fmul v15.4s, v6.4s, v0.s[0]",
            "ldp q29, q3, [{t}, #352]",
            "ushr v6.16b, v17.16b, #4",
            "ushr v17.16b, v9.16b, #4",
            "tbl v1.16b, {{v24.16b}}, v27.16b",
            "tbl v5.16b, {{v19.16b}}, v27.16b",
            "and v9.16b, v16.16b, v31.16b",
            "tbl v24.16b, {{v7.16b}}, v4.16b",
            "tbl v18.16b, {{v29.16b}}, v6.16b",
            "tbl v13.16b, {{v3.16b}}, v6.16b",
            "tbl v19.16b, {{v8.16b}}, v4.16b",
            "tbl v27.16b, {{v12.16b}}, v17.16b",
            "ushr v7.16b, v16.16b, #4",
            "tbl v29.16b, {{v14.16b}}, v17.16b",
            "add v10.16b, v1.16b, v18.16b",
            "add v11.16b, v5.16b, v13.16b",
            "add v3.16b, v24.16b, v27.16b",
            "ldp q1, q18, [{t}, #448]",
            "add v6.16b, v19.16b, v29.16b",
            "ldp q5, q13, [{t}, #480]",
            "add v27.16b, v2.16b, v10.16b",
            "add v29.16b, v25.16b, v11.16b",
            "tbl v8.16b, {{v1.16b}}, v9.16b",
            "tbl v4.16b, {{v18.16b}}, v9.16b",
            "tbl v12.16b, {{v5.16b}}, v7.16b",
            "tbl v14.16b, {{v13.16b}}, v7.16b",
            "add v17.16b, v8.16b, v12.16b",
            "add v24.16b, v4.16b, v14.16b",
            "add v19.16b, v3.16b, v17.16b",
            "add v16.16b, v6.16b, v24.16b",
            "ldp q11, q6, [{x}, #160]",
            "uaddl v18.8h, v27.8b, v19.8b",
            "uaddl2 v9.8h, v27.16b, v19.16b",
            "add v1.16b, v29.16b, v16.16b",
            "ldp q24, q29, [{x}, #192]",
            "ldp q16, q27, [{t}, #512]",
            "sshll v5.8h, v1.8b, #6",
            "sshll2 v13.8h, v1.16b, #6",
            "ldp q19, q1, [{t}, #544]",
            "add v7.8h, v18.8h, v5.8h",
            "add v8.8h, v9.8h, v13.8h",
            "and v18.16b, v11.16b, v31.16b",
            "ushr v5.16b, v11.16b, #4",
            "sxtl v12.4s, v7.4h",
            "sxtl2 v14.4s, v7.8h",
            "sxtl v10.4s, v8.4h",
            "sxtl2 v17.4s, v8.8h",
            "tbl v9.16b, {{v16.16b}}, v18.16b",
            "tbl v13.16b, {{v27.16b}}, v18.16b",
            "scvtf v12.4s, v12.4s",
            "scvtf v14.4s, v14.4s",
            "scvtf v10.4s, v10.4s",
            "scvtf v17.4s, v17.4s",
            "fmul v12.4s, v12.4s, v0.s[1]",
            "fmul v14.4s, v14.4s, v0.s[1]",
            "fmul v10.4s, v10.4s, v0.s[1]",
            "fmul v17.4s, v17.4s, v0.s[1]",
            "fadd v4.4s, v26.4s, v12.4s",
            "tbl v26.16b, {{v19.16b}}, v5.16b",
            "tbl v12.16b, {{v1.16b}}, v5.16b",
            "fadd v2.4s, v28.4s, v14.4s",
            "fadd v3.4s, v30.4s, v10.4s",
            "fadd v25.4s, v15.4s, v17.4s",
            "add v7.16b, v9.16b, v26.16b",
            "add v28.16b, v13.16b, v12.16b",
            "ldp q14, q30, [{t}, #576]",
            "ldp q10, q8, [{t}, #608]",
            "and v15.16b, v6.16b, v31.16b",
            "ushr v17.16b, v6.16b, #4",
            "ldp q5, q9, [{t}, #640]",
            "ldp q26, q13, [{t}, #672]",
            "and v12.16b, v24.16b, v31.16b",
            "ushr v6.16b, v24.16b, #4",
            "tbl v11.16b, {{v14.16b}}, v15.16b",
            "tbl v16.16b, {{v30.16b}}, v15.16b",
            "tbl v27.16b, {{v10.16b}}, v17.16b",
            "tbl v18.16b, {{v8.16b}}, v17.16b",
            "and v24.16b, v29.16b, v31.16b",
            "tbl v14.16b, {{v5.16b}}, v12.16b",
            "tbl v30.16b, {{v9.16b}}, v12.16b",
            "tbl v15.16b, {{v26.16b}}, v6.16b",
            "tbl v10.16b, {{v13.16b}}, v6.16b",
            "add v19.16b, v11.16b, v27.16b",
            "add v1.16b, v16.16b, v18.16b",
            "ushr v5.16b, v29.16b, #4",
            "add v8.16b, v14.16b, v15.16b",
            "ldp q11, q27, [{t}, #704]",
            "add v17.16b, v30.16b, v10.16b",
            "ldp q16, q18, [{t}, #736]",
            "add v15.16b, v7.16b, v19.16b",
            "add v10.16b, v28.16b, v1.16b",
            "tbl v9.16b, {{v11.16b}}, v24.16b",
            "tbl v12.16b, {{v27.16b}}, v24.16b",
            "tbl v26.16b, {{v16.16b}}, v5.16b",
            "tbl v13.16b, {{v18.16b}}, v5.16b",
            "add v6.16b, v9.16b, v26.16b",
            "add v14.16b, v12.16b, v13.16b",
            "add v30.16b, v8.16b, v6.16b",
            "add v29.16b, v17.16b, v14.16b",
            "ldp q1, q17, [{x}, #224]",
            "uaddl v27.8h, v15.8b, v30.8b",
            "uaddl2 v24.8h, v15.16b, v30.16b",
            "add v11.16b, v10.16b, v29.16b",
            "ldp q14, q10, [{x}, #256]",
            "ldp q29, q15, [{t}, #768]",
            "sshll v16.8h, v11.8b, #6",
            "sshll2 v18.8h, v11.16b, #6",
            "ldp q30, q11, [{t}, #800]",
            "add v5.8h, v27.8h, v16.8h",
            "add v9.8h, v24.8h, v18.8h",
            "and v27.16b, v1.16b, v31.16b",
            "ushr v16.16b, v1.16b, #4",
            "sxtl v26.4s, v5.4h",
            "sxtl2 v13.4s, v5.8h",
            "sxtl v19.4s, v9.4h",
            "sxtl2 v6.4s, v9.8h",
            "tbl v24.16b, {{v29.16b}}, v27.16b",
            "tbl v18.16b, {{v15.16b}}, v27.16b",
            "scvtf v26.4s, v26.4s",
            "scvtf v13.4s, v13.4s",
            "scvtf v19.4s, v19.4s",
            "scvtf v6.4s, v6.4s",
            "fmul v26.4s, v26.4s, v0.s[2]",
            "fmul v13.4s, v13.4s, v0.s[2]",
            "fmul v19.4s, v19.4s, v0.s[2]",
            "fmul v6.4s, v6.4s, v0.s[2]",
            "fadd v12.4s, v4.4s, v26.4s",
            "tbl v4.16b, {{v30.16b}}, v16.16b",
            "tbl v26.16b, {{v11.16b}}, v16.16b",
            "fadd v7.4s, v2.4s, v13.4s",
            "fadd v8.4s, v3.4s, v19.4s",
            "fadd v28.4s, v25.4s, v6.4s",
            "add v5.16b, v24.16b, v4.16b",
            "add v2.16b, v18.16b, v26.16b",
            "ldp q13, q3, [{t}, #832]",
            "ldp q19, q9, [{t}, #864]",
            "and v25.16b, v17.16b, v31.16b",
            "ushr v6.16b, v17.16b, #4",
            "ldp q16, q24, [{t}, #896]",
            "ldp q4, q18, [{t}, #928]",
            "and v26.16b, v14.16b, v31.16b",
            "ushr v17.16b, v14.16b, #4",
            "tbl v1.16b, {{v13.16b}}, v25.16b",
            "tbl v29.16b, {{v3.16b}}, v25.16b",
            "tbl v15.16b, {{v19.16b}}, v6.16b",
            "tbl v27.16b, {{v9.16b}}, v6.16b",
            "and v14.16b, v10.16b, v31.16b",
            "tbl v13.16b, {{v16.16b}}, v26.16b",
            "tbl v3.16b, {{v24.16b}}, v26.16b",
            "tbl v25.16b, {{v4.16b}}, v17.16b",
            "tbl v19.16b, {{v18.16b}}, v17.16b",
            "add v30.16b, v1.16b, v15.16b",
            "add v11.16b, v29.16b, v27.16b",
            "ushr v16.16b, v10.16b, #4",
            "add v9.16b, v13.16b, v25.16b",
            "ldp q1, q15, [{t}, #960]",
            "add v6.16b, v3.16b, v19.16b",
            "ldp q29, q27, [{t}, #992]",
            "add v25.16b, v5.16b, v30.16b",
            "add v19.16b, v2.16b, v11.16b",
            "add {t}, {t}, #1024",
            "tbl v24.16b, {{v1.16b}}, v14.16b",
            "tbl v26.16b, {{v15.16b}}, v14.16b",
            "tbl v4.16b, {{v29.16b}}, v16.16b",
            "tbl v18.16b, {{v27.16b}}, v16.16b",
            "add v17.16b, v24.16b, v4.16b",
            "add v13.16b, v26.16b, v18.16b",
            "add v3.16b, v9.16b, v17.16b",
            "add v10.16b, v6.16b, v13.16b",
            "ldp q11, q6, [{x}]",
            "uaddl v15.8h, v25.8b, v3.8b",
            "uaddl2 v14.8h, v25.16b, v3.16b",
            "add {x}, {x}, #288",
            "add v1.16b, v19.16b, v10.16b",
            "fcvtl v13.4s, v11.4h",
            "fcvtl2 v19.4s, v11.8h",
            "fcvtl v10.4s, v6.4h",
            "fcvtl2 v25.4s, v6.8h",
            "sshll v29.8h, v1.8b, #6",
            "sshll2 v27.8h, v1.16b, #6",
            "add v16.8h, v15.8h, v29.8h",
            "add v24.8h, v14.8h, v27.8h",
            "sxtl v4.4s, v16.4h",
            "sxtl2 v18.4s, v16.8h",
            "sxtl v30.4s, v24.4h",
            "sxtl2 v17.4s, v24.8h",
            "scvtf v4.4s, v4.4s",
            "scvtf v18.4s, v18.4s",
            "scvtf v30.4s, v30.4s",
            "scvtf v17.4s, v17.4s",
            "fmul v4.4s, v4.4s, v0.s[3]",
            "fmul v18.4s, v18.4s, v0.s[3]",
            "fmul v30.4s, v30.4s, v0.s[3]",
            "fmul v17.4s, v17.4s, v0.s[3]",
            "fadd v26.4s, v12.4s, v4.4s",
            "fadd v5.4s, v7.4s, v18.4s",
            "fadd v9.4s, v8.4s, v30.4s",
            "fadd v2.4s, v28.4s, v17.4s",
            "fmul v13.4s, v13.4s, v26.4s",
            "fmul v19.4s, v19.4s, v5.4s",
            "fmul v10.4s, v10.4s, v9.4s",
            "fmul v25.4s, v25.4s, v2.4s",
            "fadd v20.4s, v20.4s, v13.4s",
            "fadd v21.4s, v21.4s, v19.4s",
            "fadd v22.4s, v22.4s, v10.4s",
            "fadd v23.4s, v23.4s, v25.4s",
            "b.ne 2b",
            x = inout(reg) group.as_ptr() => _,
            t = inout(reg) table.as_ptr() => _,
            s = inout(reg) table.as_ptr().add(table_nb8 * LUT_TABLE_BLOCK_BYTES) => _,
            nb = inout(reg) nb => _,
            inout("v20") s0, inout("v21") s1, inout("v22") s2, inout("v23") s3,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _, out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v14") _, out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v24") _, out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _, out("v30") _, out("v31") _,
            options(nostack, readonly, pure),
        );
        core::mem::transmute([s0, s1, s2, s3])
    }
}
