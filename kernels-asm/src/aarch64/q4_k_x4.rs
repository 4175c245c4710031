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

/// One weight vector (4 rows x 4 elements of sub-blocks 2c and 2c + 1): unpack the nibbles,
/// then `sdot` each half with the 4 activation bytes it pairs with, lane `$i` of `$lo`/`$hi`.
macro_rules! quad {
    ($w:literal, $lo:literal, $hi:literal, $i:literal) => {
        concat!(
            "and v16.16b, ",
            $w,
            ".16b, v31.16b\n",
            "ushr v17.16b, ",
            $w,
            ".16b, #4\n",
            "sdot v20.4s, v16.16b, ",
            $lo,
            ".4b[",
            $i,
            "]\n",
            "sdot v21.4s, v17.16b, ",
            $hi,
            ".4b[",
            $i,
            "]\n",
        )
    };
}

/// One 4-row group: `nb` super-blocks of `group` against the activation.
unsafe fn group_dot(nb: usize, group: &[u8], act: &[u8]) -> [f32; 4] {
    debug_assert!(group.len() >= nb * X4_SUPERBLOCK_BYTES && act.len() >= nb * Q8_K_BYTES);
    // SAFETY (of the transmutes): float32x4_t is four f32s, any bits valid.
    let mut sums: float32x4_t = unsafe { core::mem::transmute([0.0f32; 4]) };
    let mut mins: float32x4_t = unsafe { core::mem::transmute([0.0f32; 4]) };
    for b in 0..nb {
        let x = unsafe { group.as_ptr().add(b * X4_SUPERBLOCK_BYTES) };
        let y = unsafe { act.as_ptr().add(b * Q8_K_BYTES) };
        // Registers: v0..v3 activation bytes of a 64-element chunk (v0, v1: sub-block 2c;
        // v2, v3: sub-block 2c + 1), v4..v7 weight vectors, v16/v17 unpacked nibbles,
        // v20/v21 per-row integer sums of sub-blocks 2c / 2c + 1, v22 per-row scaled sum.
        unsafe {
            asm!(
                ".arch_extension dotprod",
                "movi v22.4s, #0",
                "movi v31.16b, #0x0f",
                "mov {cnt:w}, #4",
                "2:",
                "ld1 {{v0.16b, v1.16b, v2.16b, v3.16b}}, [{q8}], #64",
                "movi v20.4s, #0",
                "movi v21.4s, #0",
                "ld1 {{v4.16b, v5.16b, v6.16b, v7.16b}}, [{qs}], #64",
                quad!("v4", "v0", "v2", 0),
                quad!("v5", "v0", "v2", 1),
                quad!("v6", "v0", "v2", 2),
                quad!("v7", "v0", "v2", 3),
                "ld1 {{v4.16b, v5.16b, v6.16b, v7.16b}}, [{qs}], #64",
                quad!("v4", "v1", "v3", 0),
                quad!("v5", "v1", "v3", 1),
                quad!("v6", "v1", "v3", 2),
                quad!("v7", "v1", "v3", 3),
                "ld1 {{v16.8b}}, [{sc}], #8",
                "uxtl v16.8h, v16.8b",
                "uxtl2 v17.4s, v16.8h",
                "uxtl v16.4s, v16.4h",
                "mla v22.4s, v20.4s, v16.4s",
                "mla v22.4s, v21.4s, v17.4s",
                "subs {cnt:w}, {cnt:w}, #1",
                "b.ne 2b",
                // Mins: per row, sum over sub-blocks s of min[s][row] * (bsum[2s] + bsum[2s+1]).
                "ld1 {{v24.16b, v25.16b}}, [{q8}]",
                "saddlp v24.4s, v24.8h",
                "saddlp v25.4s, v25.8h",
                "ld1 {{v26.16b, v27.16b}}, [{mn}]",
                "uxtl v28.8h, v26.8b",
                "uxtl2 v29.8h, v26.16b",
                "uxtl v30.4s, v28.4h",
                "mul v23.4s, v30.4s, v24.s[0]",
                "uxtl2 v30.4s, v28.8h",
                "mla v23.4s, v30.4s, v24.s[1]",
                "uxtl v30.4s, v29.4h",
                "mla v23.4s, v30.4s, v24.s[2]",
                "uxtl2 v30.4s, v29.8h",
                "mla v23.4s, v30.4s, v24.s[3]",
                "uxtl v28.8h, v27.8b",
                "uxtl2 v29.8h, v27.16b",
                "uxtl v30.4s, v28.4h",
                "mla v23.4s, v30.4s, v25.s[0]",
                "uxtl2 v30.4s, v28.8h",
                "mla v23.4s, v30.4s, v25.s[1]",
                "uxtl v30.4s, v29.4h",
                "mla v23.4s, v30.4s, v25.s[2]",
                "uxtl2 v30.4s, v29.8h",
                "mla v23.4s, v30.4s, v25.s[3]",
                // Floats: d_r * dy and dmin_r * dy as the scalar twin forms them.
                "ldr d16, [{x}]",
                "ldr d17, [{x}, #8]",
                "ldr s18, [{y}]",
                "fcvtl v16.4s, v16.4h",
                "fcvtl v17.4s, v17.4h",
                "fmul v16.4s, v16.4s, v18.s[0]",
                "fmul v17.4s, v17.4s, v18.s[0]",
                "scvtf v22.4s, v22.4s",
                "scvtf v23.4s, v23.4s",
                "fmul v22.4s, v16.4s, v22.4s",
                "fmul v23.4s, v17.4s, v23.4s",
                "fadd {sums:v}.4s, {sums:v}.4s, v22.4s",
                "fadd {mins:v}.4s, {mins:v}.4s, v23.4s",
                x = in(reg) x,
                y = in(reg) y,
                qs = inout(reg) x.add(80) => _,
                sc = inout(reg) x.add(16) => _,
                mn = in(reg) x.add(48),
                q8 = inout(reg) y.add(4) => _,
                cnt = out(reg) _,
                sums = inout(vreg) sums,
                mins = inout(vreg) mins,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                out("v5") _, out("v6") _, out("v7") _, out("v16") _, out("v17") _,
                out("v18") _, out("v20") _, out("v21") _, out("v22") _, out("v23") _,
                out("v24") _, out("v25") _, out("v26") _, out("v27") _, out("v28") _,
                out("v29") _, out("v30") _, out("v31") _,
                options(nostack, readonly, pure),
            );
        }
    }
    let sums: [f32; 4] = unsafe { core::mem::transmute(sums) };
    let mins: [f32; 4] = unsafe { core::mem::transmute(mins) };
    core::array::from_fn(|r| sums[r] - mins[r])
}
