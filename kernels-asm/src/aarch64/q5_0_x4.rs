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

/// Nibble vector `$q` (index `$v`): 5-bit quants minus 16 for elements 4v..4v+3 (v4) and
/// 16+4v.. (v5) of the 4 rows, fifth bits from v21 (bit v -> bit 4 by `$lo_bit`, bit 4 + v ->
/// bit 4 by `$hi_bit`), then `sdot` with activation lanes v of v18 and v19.
macro_rules! vector {
    ($q:literal, $v:literal, $lo_bit:literal, $hi_bit:literal) => {
        concat!(
            "and v4.16b, ",
            $q,
            ".16b, v31.16b\n",
            "ushr v5.16b, ",
            $q,
            ".16b, #4\n",
            $lo_bit,
            "\n",
            $hi_bit,
            "\n",
            "and v6.16b, v6.16b, v30.16b\n",
            "and v7.16b, v7.16b, v30.16b\n",
            "orr v4.16b, v4.16b, v6.16b\n",
            "orr v5.16b, v5.16b, v7.16b\n",
            "sub v4.16b, v4.16b, v30.16b\n",
            "sub v5.16b, v5.16b, v30.16b\n",
            "sdot v20.4s, v4.16b, v18.4b[",
            $v,
            "]\n",
            "sdot v20.4s, v5.16b, v19.4b[",
            $v,
            "]\n",
        )
    };
}

/// One group: `nb` (> 0) block records of `group` against `nb` activation blocks.
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
            "2:",
            "ldr d16, [{x}], #8",
            "ld1 {{v21.16b}}, [{x}], #16",
            "ld1 {{v0.16b, v1.16b, v2.16b, v3.16b}}, [{x}], #64",
            "ldr h17, [{y}], #2",
            "ld1 {{v18.16b, v19.16b}}, [{y}], #32",
            "movi v20.4s, #0",
            vector!("v0", 0, "shl v6.16b, v21.16b, #4", "mov v7.16b, v21.16b"),
            vector!("v1", 1, "shl v6.16b, v21.16b, #3", "ushr v7.16b, v21.16b, #1"),
            vector!("v2", 2, "shl v6.16b, v21.16b, #2", "ushr v7.16b, v21.16b, #2"),
            vector!("v3", 3, "shl v6.16b, v21.16b, #1", "ushr v7.16b, v21.16b, #3"),
            "fcvtl v16.4s, v16.4h",
            "fcvt s17, h17",
            "fmul v16.4s, v16.4s, v17.s[0]",
            "scvtf v20.4s, v20.4s",
            "fmul v20.4s, v16.4s, v20.4s",
            "fadd {sums:v}.4s, {sums:v}.4s, v20.4s",
            "subs {cnt}, {cnt}, #1",
            "b.ne 2b",
            x = inout(reg) group.as_ptr() => _,
            y = inout(reg) act.as_ptr() => _,
            cnt = inout(reg) nb => _,
            sums = inout(vreg) sums,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v7") _, out("v16") _, out("v17") _,
            out("v18") _, out("v19") _, out("v20") _, out("v21") _, out("v30") _,
            out("v31") _,
            options(nostack, readonly, pure),
        );
    }
    unsafe { core::mem::transmute(sums) }
}
