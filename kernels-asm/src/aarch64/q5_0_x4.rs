//! Q5_0 rows interleaved by 4 for the dotprod matvec (most weights of the small Q4_K_M
//! files are Q5_0). Group block (88 bytes = 4 x 22, the file's size):
//!
//! | offset | bytes | content                                                            |
//! |--------|-------|--------------------------------------------------------------------|
//! | 0      | 8     | d of rows 0..3 (f16)                                               |
//! | 8      | 16    | fifth bits: byte 4r + k, bit v (v = 0..3) = element 4v + k of row  |
//! |        |       | r, bit 4 + v = element 16 + 4v + k                                 |
//! | 24     | 64    | nibbles: vector v at 24 + 16v, byte 4r + k = row r's file byte     |
//! |        |       | qs[4v + k] (low nibble element 4v + k, high nibble 16 + 4v + k)    |
//!
//! Each row's float chain is the scalar twin's (`sumf += (dx * dy) * sumi as f32`, block after
//! block), so results are bit-identical.

use super::x4::X4Layout;
use super::{vec_dot_q5_0_q8_0_dotprod, Q8_0_BYTES, QK};
use core::arch::aarch64::float32x4_t;
use core::arch::asm;

const Q5_0_BYTES: usize = 22;

const LAYOUT: X4Layout = X4Layout {
    block_elems: QK,
    row_block: Q5_0_BYTES,
    group_block: 4 * Q5_0_BYTES,
    act_block: Q8_0_BYTES,
};

/// Size of `n_rows` Q5_0 rows of `n_cols` elements after `repack_q5_0_x4` (as in the file).
pub fn q5_0_x4_bytes(n_rows: usize, n_cols: usize) -> Option<usize> {
    LAYOUT.bytes(n_rows, n_cols)
}

fn pack(rows: &[&[u8]; 4], out: &mut [u8]) {
    for (r, blk) in rows.iter().enumerate() {
        out[2 * r..2 * r + 2].copy_from_slice(&blk[0..2]);
        let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
        for k in 0..4 {
            let mut bits = 0u8;
            for v in 0..4 {
                bits |= (((qh >> (4 * v + k)) & 1) as u8) << v;
                bits |= (((qh >> (16 + 4 * v + k)) & 1) as u8) << (4 + v);
            }
            out[8 + 4 * r + k] = bits;
        }
        for v in 0..4 {
            out[24 + 16 * v + 4 * r..24 + 16 * v + 4 * r + 4]
                .copy_from_slice(&blk[6 + 4 * v..10 + 4 * v]);
        }
    }
}

/// Repacks `n_rows` Q5_0 rows (file layout) for `matvec_q5_0_x4_dotprod`; `None`, writing
/// nothing, if `src` or `dst` has the wrong size.
pub fn repack_q5_0_x4(src: &[u8], n_rows: usize, n_cols: usize, dst: &mut [u8]) -> Option<()> {
    LAYOUT.repack(src, n_rows, n_cols, dst, pack)
}

/// `out[r] = row r . act` for Q5_0 rows repacked by `repack_q5_0_x4` (`out.len()` rows),
/// bit-identical to the scalar twin row by row.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn matvec_q5_0_x4_dotprod(n_cols: usize, packed: &[u8], act: &[u8], out: &mut [f32]) {
    // SAFETY: the caller vouches for dotprod.
    unsafe {
        LAYOUT.matvec(
            n_cols,
            packed,
            act,
            out,
            group_dot,
            vec_dot_q5_0_q8_0_dotprod,
        )
    }
}

/// One group: `nb` (> 0) block records of `group` against `nb` activation blocks. Nibble
/// vector v's quants minus 16 (elements 4v..4v+3 and 16+4v.. of the 4 rows) are the nibble
/// minus 16 where its fifth bit (bit v of v21 for the low nibble, bit 4 + v for the high one,
/// shifted to bit 4) is clear: `bic` of 0x10 (v30) by the shifted bits, then `sub`. The loop
/// body is block i's unpacking and `sdot`s (low nibbles into v20, high into v22, summed into
/// v14) and its rows' dx * dy (v15), interleaved with block i - 1's float part: the A55
/// issues in order, and each block's float part is a chain of dependent operations. The first
/// trip's "previous block" is zeros (+0 added to +0 sums); the last block's float part runs
/// after the loop. The order of the lines is the list scheduler's of tools/lowbit-asm.py
/// (`tools/lowbit-asm.py emit q5x4 dot`).
unsafe fn group_dot(nb: usize, group: &[u8], act: &[u8]) -> [f32; 4] {
    debug_assert!(nb > 0 && group.len() >= nb * 4 * Q5_0_BYTES && act.len() >= nb * Q8_0_BYTES);
    // SAFETY (of the transmutes): float32x4_t is four f32s, any bits valid.
    let mut sums: float32x4_t = unsafe { core::mem::transmute([0.0f32; 4]) };
    // SAFETY: the loop reads nb records of 88 bytes and nb activation blocks of 34 bytes.
    unsafe {
        asm!(
            ".arch_extension dotprod",
            "movi v31.16b, #0x0f",
            "movi v30.16b, #0x10",
            "movi v14.4s, #0",
            "movi v15.4s, #0",
            "2:",
            "scvtf v24.4s, v14.4s",
            "ldr d16, [{x}]",
            "ldur q21, [{x}, #8]",
            "ldr h17, [{y}]",
            "ldur q18, [{y}, #2]",
            "ldur q19, [{y}, #18]",
            "ldur q0, [{x}, #24]",
            "ldur q1, [{x}, #40]",
            "ldur q2, [{x}, #56]",
            "ldur q3, [{x}, #72]",
            "movi v20.4s, #0",
            "movi v22.4s, #0",
            "subs {nb}, {nb}, #1",
            "fmul v24.4s, v15.4s, v24.4s",
            "fcvtl v16.4s, v16.4h",
            "shl v6.16b, v21.16b, #4",
            "bic v7.16b, v30.16b, v21.16b",
            "shl v10.16b, v21.16b, #3",
            "ushr v11.16b, v21.16b, #1",
            "shl v23.16b, v21.16b, #2",
            "ushr v25.16b, v21.16b, #2",
            "add {y}, {y}, #34",
            "fcvt s17, h17",
            "and v4.16b, v0.16b, v31.16b",
            "ushr v5.16b, v0.16b, #4",
            "add {x}, {x}, #88",
            "and v8.16b, v1.16b, v31.16b",
            "ushr v9.16b, v1.16b, #4",
            "and v12.16b, v2.16b, v31.16b",
            "ushr v13.16b, v2.16b, #4",
            "fadd {sums:v}.4s, {sums:v}.4s, v24.4s",
            "bic v6.16b, v30.16b, v6.16b",
            "bic v10.16b, v30.16b, v10.16b",
            "bic v11.16b, v30.16b, v11.16b",
            "bic v23.16b, v30.16b, v23.16b",
            "bic v25.16b, v30.16b, v25.16b",
            "fmul v15.4s, v16.4s, v17.s[0]",
            "sub v5.16b, v5.16b, v7.16b",
            "sub v4.16b, v4.16b, v6.16b",
            "sub v8.16b, v8.16b, v10.16b",
            "sub v9.16b, v9.16b, v11.16b",
            "ushr v7.16b, v21.16b, #3",
            "sub v12.16b, v12.16b, v23.16b",
            "shl v6.16b, v21.16b, #1",
            "sub v13.16b, v13.16b, v25.16b",
            "sdot v22.4s, v5.16b, v19.4b[0]",
            "sdot v20.4s, v4.16b, v18.4b[0]",
            "ushr v5.16b, v3.16b, #4",
            "bic v7.16b, v30.16b, v7.16b",
            "and v4.16b, v3.16b, v31.16b",
            "bic v6.16b, v30.16b, v6.16b",
            "sdot v22.4s, v9.16b, v19.4b[1]",
            "sdot v20.4s, v8.16b, v18.4b[1]",
            "sub v5.16b, v5.16b, v7.16b",
            "sub v4.16b, v4.16b, v6.16b",
            "sdot v22.4s, v13.16b, v19.4b[2]",
            "sdot v20.4s, v12.16b, v18.4b[2]",
            "sdot v22.4s, v5.16b, v19.4b[3]",
            "sdot v20.4s, v4.16b, v18.4b[3]",
            "add v14.4s, v20.4s, v22.4s",
            "b.ne 2b",
            "scvtf v24.4s, v14.4s",
            "fmul v24.4s, v15.4s, v24.4s",
            "fadd {sums:v}.4s, {sums:v}.4s, v24.4s",
            x = inout(reg) group.as_ptr() => _,
            y = inout(reg) act.as_ptr() => _,
            nb = inout(reg) nb => _,
            sums = inout(vreg) sums,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _,
            out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v14") _,
            out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v22") _, out("v23") _, out("v24") _,
            out("v25") _, out("v30") _, out("v31") _,
            options(nostack, readonly, pure),
        );
    }
    unsafe { core::mem::transmute(sums) }
}
