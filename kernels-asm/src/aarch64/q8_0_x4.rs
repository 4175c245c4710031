//! Q8_0 rows interleaved by 4 for the dotprod matvec (the LM head and embeddings of the
//! Q4_K_M files are Q8_0). Group block (136 bytes = 4 x 34, the file's size): the 4 rows' f16
//! d at 0, then 8 vectors of 16 bytes at 8 + 16j holding elements 4j..4j+3 of rows 0..3
//! (byte 4r + k = row r, element 4j + k). One `sdot` by element multiplies a vector with 4
//! activation bytes, all 4 rows at once. Each row's float chain is the scalar twin's
//! (`sumf += sumi as f32 * (dx * dy)`, block after block), so results are bit-identical.

use super::x4::X4Layout;
use super::{vec_dot_q8_0_q8_0_dotprod, Q8_0_BYTES, QK};
use core::arch::aarch64::float32x4_t;
use core::arch::asm;

const LAYOUT: X4Layout = X4Layout {
    block_elems: QK,
    row_block: Q8_0_BYTES,
    group_block: 4 * Q8_0_BYTES,
    act_block: Q8_0_BYTES,
};

/// Size of `n_rows` Q8_0 rows of `n_cols` elements after `repack_q8_0_x4` (as in the file).
pub fn q8_0_x4_bytes(n_rows: usize, n_cols: usize) -> Option<usize> {
    LAYOUT.bytes(n_rows, n_cols)
}

fn pack(rows: &[&[u8]; 4], out: &mut [u8]) {
    for (r, blk) in rows.iter().enumerate() {
        out[2 * r..2 * r + 2].copy_from_slice(&blk[0..2]);
        for j in 0..8 {
            out[8 + 16 * j + 4 * r..8 + 16 * j + 4 * r + 4]
                .copy_from_slice(&blk[2 + 4 * j..6 + 4 * j]);
        }
    }
}

/// Repacks `n_rows` Q8_0 rows (file layout) for `matvec_q8_0_x4_dotprod`; `None`, writing
/// nothing, if `src` or `dst` has the wrong size.
pub fn repack_q8_0_x4(src: &[u8], n_rows: usize, n_cols: usize, dst: &mut [u8]) -> Option<()> {
    LAYOUT.repack(src, n_rows, n_cols, dst, pack)
}

/// `out[r] = row r . act` for Q8_0 rows repacked by `repack_q8_0_x4` (`out.len()` rows),
/// bit-identical to the scalar twin row by row.
///
/// # Safety
/// The CPU must implement the dotprod extension (HWCAP_ASIMDDP); without it this raises SIGILL.
pub unsafe fn matvec_q8_0_x4_dotprod(n_cols: usize, packed: &[u8], act: &[u8], out: &mut [f32]) {
    // SAFETY: the caller vouches for dotprod.
    unsafe {
        LAYOUT.matvec(
            n_cols,
            packed,
            act,
            out,
            group_dot,
            vec_dot_q8_0_q8_0_dotprod,
        )
    }
}

/// One group: `nb` (> 0) block records of `group` against `nb` activation blocks. The loop
/// body is block i's loads and `sdot`s (two accumulators of 4, summed into v14) and its
/// rows' dx * dy (v15), interleaved with block i - 1's float part (v14, v15 of the trip
/// before): the A55 issues in order, and each block's float part is a chain of dependent
/// operations. The first trip's "previous block" is zeros (+0 added to +0 sums); the last
/// block's float part runs after the loop. The order of the lines is the list scheduler's of
/// tools/lowbit-asm.py (`tools/lowbit-asm.py emit q8x4 dot`).
unsafe fn group_dot(nb: usize, group: &[u8], act: &[u8]) -> [f32; 4] {
    debug_assert!(nb > 0 && group.len() >= nb * 4 * Q8_0_BYTES && act.len() >= nb * Q8_0_BYTES);
    // SAFETY (of the transmutes): float32x4_t is four f32s, any bits valid.
    let mut sums: float32x4_t = unsafe { core::mem::transmute([0.0f32; 4]) };
    // SAFETY: the loop reads nb records of 136 bytes and nb activation blocks of 34 bytes.
    unsafe {
        asm!(
            ".arch_extension dotprod",
            "movi v14.4s, #0",
            "movi v15.4s, #0",
            "2:",
            "scvtf v24.4s, v14.4s",
            "ldr d16, [{x}]",
            "ldr h17, [{y}]",
            "ldur q0, [{x}, #8]",
            "ldur q1, [{x}, #24]",
            "ldur q2, [{x}, #40]",
            "ldur q3, [{x}, #56]",
            "ldur q4, [{x}, #72]",
            "ldur q5, [{x}, #88]",
            "ldur q6, [{x}, #104]",
            "ldur q7, [{x}, #120]",
            "ldur q18, [{y}, #2]",
            "ldur q19, [{y}, #18]",
            "movi v20.4s, #0",
            "movi v22.4s, #0",
            "subs {nb}, {nb}, #1",
            "fmul v24.4s, v24.4s, v15.4s",
            "fcvtl v16.4s, v16.4h",
            "fcvt s17, h17",
            "add {x}, {x}, #136",
            "add {y}, {y}, #34",
            "sdot v20.4s, v0.16b, v18.4b[0]",
            "sdot v22.4s, v4.16b, v19.4b[0]",
            "fadd {sums:v}.4s, {sums:v}.4s, v24.4s",
            "fmul v15.4s, v16.4s, v17.s[0]",
            "sdot v20.4s, v1.16b, v18.4b[1]",
            "sdot v22.4s, v5.16b, v19.4b[1]",
            "sdot v20.4s, v2.16b, v18.4b[2]",
            "sdot v22.4s, v6.16b, v19.4b[2]",
            "sdot v20.4s, v3.16b, v18.4b[3]",
            "sdot v22.4s, v7.16b, v19.4b[3]",
            "add v14.4s, v20.4s, v22.4s",
            "b.ne 2b",
            "scvtf v24.4s, v14.4s",
            "fmul v24.4s, v24.4s, v15.4s",
            "fadd {sums:v}.4s, {sums:v}.4s, v24.4s",
            x = inout(reg) group.as_ptr() => _,
            y = inout(reg) act.as_ptr() => _,
            nb = inout(reg) nb => _,
            sums = inout(vreg) sums,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v7") _, out("v14") _, out("v15") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
            out("v22") _, out("v24") _,
            options(nostack, readonly, pure),
        );
    }
    unsafe { core::mem::transmute(sums) }
}
