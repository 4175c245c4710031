//! Q4_K rows interleaved in groups of 4 for the dotprod matvec: one `sdot` by element
//! multiplies 4 activation bytes with 4 elements of each of 4 rows, so the activation is
//! loaded once per group, and the per-row scales, mins and float sums become 4-lane vector
//! operations instead of per-row horizontal reductions.
//!
//! Repacked layout (`repack_q4_k_x4`): full groups of 4 rows first, then the `n_rows % 4` tail
//! rows verbatim (the matvec runs them through the one-row dotprod kernel). In a group, each
//! super-block index takes `X4_SUPERBLOCK_BYTES` = 592 bytes (4 x 144 = 576 in the file: the
//! 6-bit scales and mins are stored unpacked, one byte each, so no row decodes them per token):
//!
//! | offset | bytes | content                                                           |
//! |--------|-------|-------------------------------------------------------------------|
//! | 0      | 8     | d of rows 0..3 (f16)                                              |
//! | 8      | 8     | dmin of rows 0..3 (f16)                                           |
//! | 16     | 32    | scale of sub-block s, row r at 16 + 4s + r                        |
//! | 48     | 32    | min of sub-block s, row r at 48 + 4s + r                          |
//! | 80     | 512   | quants: 16-byte vector (c, j) at 80 + 16 (8c + j), c = 0..3 (pair |
//! |        |       | of sub-blocks 2c, 2c + 1), j = 0..7: byte 4r + k is the row r     |
//! |        |       | file byte qs[32c + 4j + k] (low nibble: sub-block 2c, element     |
//! |        |       | 4j + k; high nibble: sub-block 2c + 1, element 4j + k)            |
//!
//! Results equal the one-row kernels up to summation order, as for the one-row dotprod face:
//! the integer sums are exact, and each row's f32 sums follow the order documented on
//! `matvec_q4_k_x4_dotprod`.

use super::x4::X4Layout;
use super::{vec_dot_q4_k_q8_k_dotprod, Q8_K_BYTES, QK_K};
use core::arch::aarch64::float32x4_t;
use core::arch::asm;

const Q4_K_BYTES: usize = 144;
/// Bytes of one super-block index of a 4-row group.
pub const X4_SUPERBLOCK_BYTES: usize = 592;

const LAYOUT: X4Layout = X4Layout {
    block_elems: QK_K,
    row_block: Q4_K_BYTES,
    group_block: X4_SUPERBLOCK_BYTES,
    act_block: Q8_K_BYTES,
};

/// Size of `n_rows` Q4_K rows of `n_cols` elements after `repack_q4_k_x4`, or `None` if
/// `n_cols` is not a whole number of super-blocks or the size overflows.
pub fn q4_k_x4_bytes(n_rows: usize, n_cols: usize) -> Option<usize> {
    LAYOUT.bytes(n_rows, n_cols)
}

fn pack(rows: &[&[u8]; 4], out: &mut [u8]) {
    for (r, blk) in rows.iter().enumerate() {
        out[2 * r..2 * r + 2].copy_from_slice(&blk[0..2]);
        out[8 + 2 * r..8 + 2 * r + 2].copy_from_slice(&blk[2..4]);
        let q = &blk[4..16];
        for j in 0..4 {
            out[16 + 4 * j + r] = q[j] & 63;
            out[48 + 4 * j + r] = q[j + 4] & 63;
            out[16 + 4 * (j + 4) + r] = (q[j + 8] & 0xF) | ((q[j] >> 6) << 4);
            out[48 + 4 * (j + 4) + r] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
        }
        for c in 0..4 {
            for j in 0..8 {
                let at = 80 + 16 * (8 * c + j) + 4 * r;
                out[at..at + 4].copy_from_slice(&blk[16 + 32 * c + 4 * j..][..4]);
            }
        }
    }
}

/// Repacks `n_rows` Q4_K rows (`src`, file layout) into `dst` (layout in the module docs).
/// Returns `None`, writing nothing, if `src` or `dst` does not have the expected size.
pub fn repack_q4_k_x4(src: &[u8], n_rows: usize, n_cols: usize, dst: &mut [u8]) -> Option<()> {
    LAYOUT.repack(src, n_rows, n_cols, dst, pack)
}

/// `out[r] = row r . act` for a repacked Q4_K matrix of `out.len()` rows (`packed` from
/// `repack_q4_k_x4` with the same row count and `n_cols`), with `sdot` (ARMv8.2 dotprod).
/// Per row of a group: f32 sums = sum over super-blocks of d * (integer sum), minus the sum
/// over super-blocks of dmin * (integer min sum), each added in super-block order; tail rows
/// as `vec_dot_q4_k_q8_k_dotprod`. Rows whose data is missing (`packed` too short) get 0.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn matvec_q4_k_x4_dotprod(n_cols: usize, packed: &[u8], act: &[u8], out: &mut [f32]) {
    // SAFETY: the caller vouches for dotprod.
    unsafe {
        LAYOUT.matvec(
            n_cols,
            packed,
            act,
            out,
            group_dot,
            vec_dot_q4_k_q8_k_dotprod,
        )
    }
}

/// One 4-row group: `nb` super-blocks of `group` against the activation. One asm block per
/// super-block, straight-line: chunk c (sub-blocks 2c, 2c + 1; 8 weight vectors) alternates
/// its activation bytes between v0..v3 and v4..v7, rotates its weight vectors and their low
/// nibbles through a few registers, and spreads its `sdot`s over 4 accumulators, so that the
/// in-order A55 never waits on the `sdot` before; the sums are scaled by the rows' sub-block
/// scales into v19, the mins go through the activation's 16-element sums into v24, and the
/// floats follow the scalar order (d_r * dy, then times the integer sum, added to the row's
/// sum; the same for dmin). The order of the lines is the list scheduler's of
/// tools/lowbit-asm.py (`tools/lowbit-asm.py emit q4kx4 dot`).
unsafe fn group_dot(nb: usize, group: &[u8], act: &[u8]) -> [f32; 4] {
    debug_assert!(group.len() >= nb * X4_SUPERBLOCK_BYTES && act.len() >= nb * Q8_K_BYTES);
    // SAFETY (of the transmutes): float32x4_t is four f32s, any bits valid.
    let mut sums: float32x4_t = unsafe { core::mem::transmute([0.0f32; 4]) };
    let mut mins: float32x4_t = unsafe { core::mem::transmute([0.0f32; 4]) };
    for b in 0..nb {
        let x = unsafe { group.as_ptr().add(b * X4_SUPERBLOCK_BYTES) };
        let y = unsafe { act.as_ptr().add(b * Q8_K_BYTES) };
        unsafe {
            asm!(
                ".arch_extension dotprod",
                "movi v23.16b, #0x0f",
                "ldr q0, [{q8}, #0]",
                "ldr q1, [{q8}, #16]",
                "ldr q2, [{q8}, #32]",
                "ldr q3, [{q8}, #48]",
                "ldr d20, [{x}, #16]",
                "movi v15.4s, #0",
                "movi v16.4s, #0",
                "movi v17.4s, #0",
                "movi v18.4s, #0",
                "ldr q8, [{x}, #80]",
                "ldr q9, [{x}, #96]",
                "ldr q10, [{x}, #112]",
                "ldr q11, [{x}, #128]",
                "ldr q4, [{q8}, #64]",
                "ldr q5, [{q8}, #80]",
                "ldr q6, [{q8}, #96]",
                "ldr q7, [{q8}, #112]",
                "ldr q25, [{q8}, #256]",
                "ldr q26, [{q8}, #272]",
                "ldr q27, [{x}, #48]",
                "uxtl v22.8h, v20.8b",
                "and v12.16b, v8.16b, v23.16b",
                "and v13.16b, v9.16b, v23.16b",
                "and v14.16b, v10.16b, v23.16b",
                "saddlp v25.4s, v25.8h",
                "ushr v8.16b, v8.16b, #4",
                "saddlp v26.4s, v26.8h",
                "ushr v9.16b, v9.16b, #4",
                "uxtl v28.8h, v27.8b",
                "ushr v10.16b, v10.16b, #4",
                "uxtl v20.4s, v22.4h",
                "uxtl2 v21.4s, v22.8h",
                "sdot v15.4s, v12.16b, v0.4b[0]",
                "sdot v17.4s, v8.16b, v2.4b[0]",
                "and v12.16b, v11.16b, v23.16b",
                "uxtl v29.4s, v28.4h",
                "ldr q8, [{x}, #144]",
                "ushr v11.16b, v11.16b, #4",
                "sdot v15.4s, v13.16b, v0.4b[1]",
                "sdot v17.4s, v9.16b, v2.4b[1]",
                "and v13.16b, v8.16b, v23.16b",
                "ldr q9, [{x}, #160]",
                "mul v24.4s, v29.4s, v25.s[0]",
                "ushr v8.16b, v8.16b, #4",
                "sdot v15.4s, v14.16b, v0.4b[2]",
                "uxtl2 v29.4s, v28.8h",
                "sdot v17.4s, v10.16b, v2.4b[2]",
                "sdot v16.4s, v13.16b, v1.4b[0]",
                "and v14.16b, v9.16b, v23.16b",
                "uxtl2 v28.8h, v27.16b",
                "ldr q10, [{x}, #176]",
                "sdot v18.4s, v8.16b, v3.4b[0]",
                "sdot v15.4s, v12.16b, v0.4b[3]",
                "ushr v9.16b, v9.16b, #4",
                "mla v24.4s, v29.4s, v25.s[1]",
                "ldr q27, [{x}, #64]",
                "sdot v17.4s, v11.16b, v2.4b[3]",
                "ldr q8, [{x}, #208]",
                "sdot v16.4s, v14.16b, v1.4b[1]",
                "ldr q0, [{q8}, #128]",
                "and v12.16b, v10.16b, v23.16b",
                "uxtl v29.4s, v28.4h",
                "ldr q11, [{x}, #192]",
                "ldr q2, [{q8}, #160]",
                "sdot v18.4s, v9.16b, v3.4b[1]",
                "ushr v10.16b, v10.16b, #4",
                "sdot v16.4s, v12.16b, v1.4b[2]",
                "ldr q9, [{x}, #224]",
                "and v13.16b, v11.16b, v23.16b",
                "mla v24.4s, v29.4s, v25.s[2]",
                "and v12.16b, v8.16b, v23.16b",
                "ushr v11.16b, v11.16b, #4",
                "sdot v18.4s, v10.16b, v3.4b[2]",
                "uxtl2 v29.4s, v28.8h",
                "ushr v8.16b, v8.16b, #4",
                "sdot v16.4s, v13.16b, v1.4b[3]",
                "ldr q10, [{x}, #240]",
                "uxtl v28.8h, v27.8b",
                "and v13.16b, v9.16b, v23.16b",
                "ldr q1, [{q8}, #144]",
                "sdot v18.4s, v11.16b, v3.4b[3]",
                "mla v24.4s, v29.4s, v25.s[3]",
                "ushr v9.16b, v9.16b, #4",
                "add v15.4s, v15.4s, v16.4s",
                "and v14.16b, v10.16b, v23.16b",
                "ldr q11, [{x}, #256]",
                "ldr q3, [{q8}, #176]",
                "uxtl v29.4s, v28.4h",
                "movi v16.4s, #0",
                "add v17.4s, v17.4s, v18.4s",
                "ushr v10.16b, v10.16b, #4",
                "mul v19.4s, v15.4s, v20.4s",
                "movi v18.4s, #0",
                "ldr d20, [{x}, #24]",
                "movi v15.4s, #0",
                "mla v24.4s, v29.4s, v26.s[0]",
                "mla v19.4s, v17.4s, v21.4s",
                "sdot v15.4s, v12.16b, v4.4b[0]",
                "uxtl2 v29.4s, v28.8h",
                "uxtl v22.8h, v20.8b",
                "movi v17.4s, #0",
                "and v12.16b, v11.16b, v23.16b",
                "uxtl2 v28.8h, v27.16b",
                "sdot v17.4s, v8.16b, v6.4b[0]",
                "sdot v15.4s, v13.16b, v4.4b[1]",
                "ushr v11.16b, v11.16b, #4",
                "mla v24.4s, v29.4s, v26.s[1]",
                "uxtl v20.4s, v22.4h",
                "uxtl2 v21.4s, v22.8h",
                "ldr q8, [{x}, #272]",
                "uxtl v29.4s, v28.4h",
                "sdot v17.4s, v9.16b, v6.4b[1]",
                "sdot v15.4s, v14.16b, v4.4b[2]",
                "ldr q9, [{x}, #288]",
                "and v13.16b, v8.16b, v23.16b",
                "ushr v8.16b, v8.16b, #4",
                "mla v24.4s, v29.4s, v26.s[2]",
                "sdot v17.4s, v10.16b, v6.4b[2]",
                "sdot v15.4s, v12.16b, v4.4b[3]",
                "and v14.16b, v9.16b, v23.16b",
                "uxtl2 v29.4s, v28.8h",
                "ldr q10, [{x}, #304]",
                "sdot v16.4s, v13.16b, v5.4b[0]",
                "ldr q4, [{q8}, #192]",
                "sdot v18.4s, v8.16b, v7.4b[0]",
                "ushr v9.16b, v9.16b, #4",
                "sdot v17.4s, v11.16b, v6.4b[3]",
                "and v12.16b, v10.16b, v23.16b",
                "ldr q8, [{x}, #336]",
                "mla v24.4s, v29.4s, v26.s[3]",
                "sdot v16.4s, v14.16b, v5.4b[1]",
                "ldr q11, [{x}, #320]",
                "ldr q6, [{q8}, #224]",
                "ushr v10.16b, v10.16b, #4",
                "sdot v18.4s, v9.16b, v7.4b[1]",
                "scvtf v24.4s, v24.4s",
                "sdot v16.4s, v12.16b, v5.4b[2]",
                "and v13.16b, v11.16b, v23.16b",
                "ldr q9, [{x}, #352]",
                "and v12.16b, v8.16b, v23.16b",
                "ushr v11.16b, v11.16b, #4",
                "sdot v18.4s, v10.16b, v7.4b[2]",
                "ushr v8.16b, v8.16b, #4",
                "sdot v16.4s, v13.16b, v5.4b[3]",
                "ldr q10, [{x}, #368]",
                "and v13.16b, v9.16b, v23.16b",
                "ldr q5, [{q8}, #208]",
                "sdot v18.4s, v11.16b, v7.4b[3]",
                "ushr v9.16b, v9.16b, #4",
                "add v15.4s, v15.4s, v16.4s",
                "and v14.16b, v10.16b, v23.16b",
                "ldr q11, [{x}, #384]",
                "ldr q7, [{q8}, #240]",
                "movi v16.4s, #0",
                "ushr v10.16b, v10.16b, #4",
                "add v17.4s, v17.4s, v18.4s",
                "mla v19.4s, v15.4s, v20.4s",
                "movi v18.4s, #0",
                "ldr d20, [{x}, #32]",
                "movi v15.4s, #0",
                "mla v19.4s, v17.4s, v21.4s",
                "movi v17.4s, #0",
                "sdot v15.4s, v12.16b, v0.4b[0]",
                "uxtl v22.8h, v20.8b",
                "sdot v17.4s, v8.16b, v2.4b[0]",
                "and v12.16b, v11.16b, v23.16b",
                "ldr q8, [{x}, #400]",
                "ushr v11.16b, v11.16b, #4",
                "sdot v15.4s, v13.16b, v0.4b[1]",
                "uxtl v20.4s, v22.4h",
                "uxtl2 v21.4s, v22.8h",
                "sdot v17.4s, v9.16b, v2.4b[1]",
                "and v13.16b, v8.16b, v23.16b",
                "ldr q9, [{x}, #416]",
                "sdot v15.4s, v14.16b, v0.4b[2]",
                "ushr v8.16b, v8.16b, #4",
                "sdot v17.4s, v10.16b, v2.4b[2]",
                "sdot v16.4s, v13.16b, v1.4b[0]",
                "and v14.16b, v9.16b, v23.16b",
                "ldr q10, [{x}, #432]",
                "sdot v15.4s, v12.16b, v0.4b[3]",
                "ushr v9.16b, v9.16b, #4",
                "sdot v18.4s, v8.16b, v3.4b[0]",
                "sdot v17.4s, v11.16b, v2.4b[3]",
                "sdot v16.4s, v14.16b, v1.4b[1]",
                "and v12.16b, v10.16b, v23.16b",
                "ldr q8, [{x}, #464]",
                "ldr q11, [{x}, #448]",
                "ushr v10.16b, v10.16b, #4",
                "sdot v18.4s, v9.16b, v3.4b[1]",
                "sdot v16.4s, v12.16b, v1.4b[2]",
                "ldr q9, [{x}, #480]",
                "and v13.16b, v11.16b, v23.16b",
                "and v12.16b, v8.16b, v23.16b",
                "ushr v11.16b, v11.16b, #4",
                "sdot v18.4s, v10.16b, v3.4b[2]",
                "ushr v8.16b, v8.16b, #4",
                "ldr q10, [{x}, #496]",
                "sdot v16.4s, v13.16b, v1.4b[3]",
                "and v13.16b, v9.16b, v23.16b",
                "sdot v18.4s, v11.16b, v3.4b[3]",
                "ushr v9.16b, v9.16b, #4",
                "and v14.16b, v10.16b, v23.16b",
                "ldr q11, [{x}, #512]",
                "add v15.4s, v15.4s, v16.4s",
                "ushr v10.16b, v10.16b, #4",
                "add v17.4s, v17.4s, v18.4s",
                "movi v16.4s, #0",
                "movi v18.4s, #0",
                "mla v19.4s, v15.4s, v20.4s",
                "ldr d20, [{x}, #40]",
                "movi v15.4s, #0",
                "sdot v15.4s, v12.16b, v4.4b[0]",
                "and v12.16b, v11.16b, v23.16b",
                "mla v19.4s, v17.4s, v21.4s",
                "uxtl v22.8h, v20.8b",
                "ushr v11.16b, v11.16b, #4",
                "movi v17.4s, #0",
                "sdot v15.4s, v13.16b, v4.4b[1]",
                "sdot v17.4s, v8.16b, v6.4b[0]",
                "uxtl v20.4s, v22.4h",
                "uxtl2 v21.4s, v22.8h",
                "ldr q8, [{x}, #528]",
                "ldr s22, [{y}]",
                "sdot v15.4s, v14.16b, v4.4b[2]",
                "sdot v17.4s, v9.16b, v6.4b[1]",
                "and v13.16b, v8.16b, v23.16b",
                "ldr q9, [{x}, #544]",
                "ushr v8.16b, v8.16b, #4",
                "sdot v15.4s, v12.16b, v4.4b[3]",
                "sdot v17.4s, v10.16b, v6.4b[2]",
                "sdot v16.4s, v13.16b, v5.4b[0]",
                "and v14.16b, v9.16b, v23.16b",
                "ldr q10, [{x}, #560]",
                "sdot v18.4s, v8.16b, v7.4b[0]",
                "ushr v9.16b, v9.16b, #4",
                "sdot v17.4s, v11.16b, v6.4b[3]",
                "sdot v16.4s, v14.16b, v5.4b[1]",
                "and v12.16b, v10.16b, v23.16b",
                "ldr q11, [{x}, #576]",
                "ushr v10.16b, v10.16b, #4",
                "sdot v18.4s, v9.16b, v7.4b[1]",
                "sdot v16.4s, v12.16b, v5.4b[2]",
                "and v13.16b, v11.16b, v23.16b",
                "ushr v11.16b, v11.16b, #4",
                "sdot v18.4s, v10.16b, v7.4b[2]",
                "sdot v16.4s, v13.16b, v5.4b[3]",
                "sdot v18.4s, v11.16b, v7.4b[3]",
                "add v15.4s, v15.4s, v16.4s",
                "add v17.4s, v17.4s, v18.4s",
                "mla v19.4s, v15.4s, v20.4s",
                "ldr d20, [{x}]",
                "mla v19.4s, v17.4s, v21.4s",
                "ldr d21, [{x}, #8]",
                "fcvtl v20.4s, v20.4h",
                "fcvtl v21.4s, v21.4h",
                "scvtf v19.4s, v19.4s",
                "fmul v20.4s, v20.4s, v22.s[0]",
                "fmul v21.4s, v21.4s, v22.s[0]",
                "fmul v19.4s, v20.4s, v19.4s",
                "fmul v24.4s, v21.4s, v24.4s",
                "fadd {sums:v}.4s, {sums:v}.4s, v19.4s",
                "fadd {mins:v}.4s, {mins:v}.4s, v24.4s",
                x = in(reg) x,
                y = in(reg) y,
                q8 = in(reg) y.add(4),
                sums = inout(vreg) sums,
                mins = inout(vreg) mins,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _,
                out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v14") _,
                out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _,
                out("v20") _, out("v21") _, out("v22") _, out("v23") _, out("v24") _,
                out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _,
                options(nostack, readonly, pure),
            );
        }
    }
    let sums: [f32; 4] = unsafe { core::mem::transmute(sums) };
    let mins: [f32; 4] = unsafe { core::mem::transmute(mins) };
    core::array::from_fn(|r| sums[r] - mins[r])
}
