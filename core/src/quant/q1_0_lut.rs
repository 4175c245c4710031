//! Q1_0 weights in the lookup-table layout (T-MAC, "Four Russians"), for CPUs without dotprod
//! (Cortex-A53, Apple A7): the layout, its repack, the activation tables and the scalar matvec
//! over them. The NEON face is `smolrun_kernels::aarch64::matvec_q1_0_lut16_neon`; both give
//! `q1_0::vec_dot`'s bits for every row.
//!
//! Why: a row's sum over 4 activations with ±1 weights takes one of 16 values, fixed by the 4
//! sign bits. Build those 16 sums once per activation row (per token), and every weight row
//! then pays one table lookup per 4 weights instead of 4 multiply-adds. NEON's `tbl` looks up
//! 16 indices at once, so 16 rows share one lookup instruction.
//!
//! **Weights** (`repack`): rows in groups of [`GROUP_ROWS`] (16); the last group is padded with
//! zero rows (d = 0, so they add nothing), which keeps every row, the tail of a 151,669-row LM
//! head included, on the fast kernel. Each 128-column block of a group is [`GROUP_BLOCK_BYTES`]
//! (288 = 16 x the file's 18): the 16 rows' f16 d at 2r, then 16 vectors of 16 bytes at
//! 32 + 16v, byte r of vector v = byte v of row r's sign bits (a 16 x 16 byte transpose). The
//! low nibble of that byte holds the signs of elements 8v..8v+3, the high nibble 8v+4..8v+7:
//! the `tbl` index of row r for those 4 activations, one `and` or `ushr` away.
//!
//! **Activation tables** (`build_table`, once per token and matrix input): for each Q8_0 block
//! k and each group of 4 quants q0..q3 in it, `T[c] = sum_i (bit i of c ? q_i : -q_i)` for the
//! 16 codes c, in [-512, 512]. A byte lookup cannot return that, so each entry is split into
//! `lo = T & 63` (0..63) and `hi = T >> 6` (-8..8), `T = 64 hi + lo`; the kernel sums lo bytes 4
//! at a time (at most 252, no overflow) and hi bytes 8 at a time (|sum| <= 64), then widens. All
//! exact: the integer sum of each Q8_0 block comes out as `vec_dot`'s, activations of -128
//! included (why 6 bits: with 7, two lo bytes still fit but four do not; with 5, the 8 hi bytes
//! of a block of -128s sum to 128, one past i8).
//! Layout: Q8_0 block k's 256 bytes at 256k, for pair j (groups 2j, 2j+1) the 64 bytes
//! `lo[2j] hi[2j] lo[2j+1] hi[2j+1]` (16 entries each) at 256k + 64j; after all blocks, each
//! block's d as f32 (4 bytes, k-th at 256 nb8 + 4k).
//!
//! **Float order**: per row and Q1_0 block, `sumi = 0 + d8_0 s0 + d8_1 s1 + d8_2 s2 + d8_3 s3`,
//! then `sumf += d * sumi`, one rounding each, no fused multiply-add: `vec_dot`'s operations.

use super::common::f16_at;
use super::q1_0::{BLOCK_BYTES, BLOCK_ELEMS, OFF_D, OFF_QS};
use super::q8_0;

/// Rows per group: one `tbl` index vector holds a code for each of 16 rows.
pub const GROUP_ROWS: usize = 16;
/// Bytes of one 128-column block of a 16-row group (16 x 18, the file's bytes for 16 rows).
pub const GROUP_BLOCK_BYTES: usize = GROUP_ROWS * BLOCK_BYTES;
/// Offset of the sign vectors in a group block (the 16 f16 scales come first).
pub const GROUP_OFF_QS: usize = 2 * GROUP_ROWS;
/// Table bytes of one Q8_0 activation block: 8 groups of 4 quants x (16 lo + 16 hi) bytes.
pub const TABLE_BLOCK_BYTES: usize = 256;

/// Bytes of `n_rows` Q1_0 rows of `n_cols` elements in this layout (whole groups, the last one
/// padded); `None` if `n_cols` is not a whole number of blocks or the size overflows.
pub fn bytes(n_rows: usize, n_cols: usize) -> Option<usize> {
    if !n_cols.is_multiple_of(BLOCK_ELEMS) {
        return None;
    }
    n_rows
        .div_ceil(GROUP_ROWS)
        .checked_mul(n_cols / BLOCK_ELEMS)?
        .checked_mul(GROUP_BLOCK_BYTES)
}

/// Repacks `n_rows` Q1_0 file rows (`src`) into `dst` (exactly `bytes(n_rows, n_cols)`); `None`,
/// writing nothing, on a size mismatch.
pub fn repack(src: &[u8], n_rows: usize, n_cols: usize, dst: &mut [u8]) -> Option<()> {
    repack_blocks(
        src,
        n_rows,
        n_cols / BLOCK_ELEMS,
        n_cols.is_multiple_of(BLOCK_ELEMS),
        dst,
    )
}

/// The 16-row transpose of blocks laid out as Q1_0's and Q2_0's are (f16 d at 0, 16 bytes of
/// codes at 2): `nb` blocks per row; `whole` says whether the row was a whole number of
/// blocks. Shared with `q2_0_lut`.
pub(crate) fn repack_blocks(
    src: &[u8],
    n_rows: usize,
    nb: usize,
    whole: bool,
    dst: &mut [u8],
) -> Option<()> {
    let row_bytes = nb.checked_mul(BLOCK_BYTES)?;
    let expected = n_rows
        .div_ceil(GROUP_ROWS)
        .checked_mul(nb)?
        .checked_mul(GROUP_BLOCK_BYTES)?;
    if !whole || src.len() != n_rows.checked_mul(row_bytes)? || dst.len() != expected {
        return None;
    }
    if nb == 0 {
        return Some(());
    }
    for (g, group) in dst.chunks_exact_mut(nb * GROUP_BLOCK_BYTES).enumerate() {
        for (b, out) in group.chunks_exact_mut(GROUP_BLOCK_BYTES).enumerate() {
            out.fill(0);
            for r in 0..GROUP_ROWS {
                let row = g * GROUP_ROWS + r;
                if row >= n_rows {
                    break;
                }
                let blk = &src[row * row_bytes + b * BLOCK_BYTES..][..BLOCK_BYTES];
                out[2 * r..2 * r + 2].copy_from_slice(&blk[OFF_D..OFF_D + 2]);
                for v in 0..16 {
                    out[GROUP_OFF_QS + 16 * v + r] = blk[OFF_QS + v];
                }
            }
        }
    }
    Some(())
}

/// Bytes of the tables of one activation row of `n_cols` elements; `None` unless `n_cols` is a
/// whole number of Q1_0 blocks.
pub fn table_bytes(n_cols: usize) -> Option<usize> {
    if !n_cols.is_multiple_of(BLOCK_ELEMS) {
        return None;
    }
    let nb8 = n_cols / q8_0::BLOCK_ELEMS;
    nb8.checked_mul(TABLE_BLOCK_BYTES + 4)
}

/// The 16 sums `T[c]` of one group of 4 quants (bit i of c set: +q_i, clear: -q_i).
#[inline(always)]
pub fn group_sums(q: [i8; 4]) -> [i16; 16] {
    core::array::from_fn(|c| {
        (0..4)
            .map(|i| {
                let q = q[i] as i16;
                if c >> i & 1 != 0 {
                    q
                } else {
                    -q
                }
            })
            .sum()
    })
}

/// Builds the tables of one Q8_0 activation row (`act`, whole blocks) into `table` (exactly
/// `table_bytes` of its length). The scalar face of `build_table_q1_0_lut_neon`: same bytes.
pub fn build_table(act: &[u8], table: &mut [u8]) {
    let nb8 = act.len() / q8_0::BLOCK_BYTES;
    debug_assert_eq!(Some(table.len()), table_bytes(nb8 * q8_0::BLOCK_ELEMS));
    let (tables, rest) = table.split_at_mut(nb8 * TABLE_BLOCK_BYTES);
    for (k, (y, t)) in act
        .chunks_exact(q8_0::BLOCK_BYTES)
        .zip(tables.chunks_exact_mut(TABLE_BLOCK_BYTES))
        .enumerate()
    {
        for g in 0..8 {
            let q = core::array::from_fn(|i| y[q8_0::OFF_QS + 4 * g + i] as i8);
            // Group g's lo bytes at 64 (g / 2) + 32 (g % 2), its hi bytes 16 further.
            let at = 64 * (g / 2) + 32 * (g % 2);
            for (c, s) in group_sums(q).into_iter().enumerate() {
                t[at + c] = (s & 63) as u8;
                t[at + 16 + c] = (s >> 6) as i8 as u8;
            }
        }
        rest[4 * k..4 * k + 4].copy_from_slice(&f16_at(y, q8_0::OFF_D).to_le_bytes());
    }
}

/// `out[r] = row r . act` over `out.len()` rows in this layout (`packed` holds their groups),
/// with `table` built from `act` by [`build_table`]: the scalar face, bit for bit
/// `q1_0::vec_dot` on every row. Rows whose data `packed` lacks get 0.
pub fn matvec(n_cols: usize, packed: &[u8], table: &[u8], out: &mut [f32]) {
    // The table's own block count places its scales; the row uses as many as both hold.
    let table_nb8 = table.len() / (TABLE_BLOCK_BYTES + 4);
    let nb = (n_cols / BLOCK_ELEMS).min(table_nb8 / 4);
    let d8_at = table_nb8 * TABLE_BLOCK_BYTES;
    let group_bytes = nb * GROUP_BLOCK_BYTES;
    for (g, out) in out.chunks_mut(GROUP_ROWS).enumerate() {
        let group = match packed.get(g * group_bytes..(g + 1) * group_bytes) {
            Some(group) if nb > 0 => group,
            _ => {
                out.fill(0.0);
                continue;
            }
        };
        let mut sumf = [0.0f32; GROUP_ROWS];
        for (b, blk) in group.chunks_exact(GROUP_BLOCK_BYTES).enumerate() {
            let mut sumi = [0.0f32; GROUP_ROWS];
            for k in 0..4 {
                let kb = 4 * b + k;
                let t = &table[kb * TABLE_BLOCK_BYTES..][..TABLE_BLOCK_BYTES];
                let d8 = f32::from_le_bytes(core::array::from_fn(|i| table[d8_at + 4 * kb + i]));
                for (r, sumi) in sumi.iter_mut().enumerate() {
                    let mut s = 0i32;
                    for j in 0..4 {
                        let code = blk[GROUP_OFF_QS + 16 * (4 * k + j) + r];
                        let (a, b) = ((code & 15) as usize, (code >> 4) as usize);
                        let p = &t[64 * j..];
                        let lo = p[a] as i32 + p[32 + b] as i32;
                        let hi = p[16 + a] as i8 as i32 + p[48 + b] as i8 as i32;
                        s += lo + 64 * hi;
                    }
                    *sumi += d8 * s as f32;
                }
            }
            for (r, (sumf, sumi)) in sumf.iter_mut().zip(sumi).enumerate() {
                *sumf += f16_at(blk, 2 * r) * sumi;
            }
        }
        out.copy_from_slice(&sumf[..out.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{q1_0, GgmlType};
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    /// Q8_0 activation blocks with the given quants and scale.
    fn act_from(quants: &[i8], d: f32) -> Vec<u8> {
        let mut out = Vec::new();
        for q in quants.chunks_exact(32) {
            out.extend(half::f16::from_f32(d).to_bits().to_le_bytes());
            out.extend(q.iter().map(|&q| q as u8));
        }
        out
    }

    #[test]
    fn group_sums_span_the_signed_range() {
        assert_eq!(group_sums([-128; 4])[0], 512);
        assert_eq!(group_sums([-128; 4])[15], -512);
        assert_eq!(group_sums([1, 2, 4, 8])[0b0101], 1 - 2 + 4 - 8);
        // Every entry splits into a 6-bit lo and a hi in -8..=8.
        for s in [-512i16, -511, -1, 0, 63, 64, 511, 512] {
            let (lo, hi) = (s & 63, s >> 6);
            assert!((0..64).contains(&lo) && (-8..=8).contains(&hi) && 64 * hi + lo == s);
        }
    }

    #[test]
    fn sizes_pad_the_last_group() {
        assert_eq!(bytes(16, 128), Some(288));
        assert_eq!(bytes(17, 256), Some(2 * 2 * 288));
        assert_eq!(bytes(0, 128), Some(0));
        assert_eq!(bytes(16, 100), None);
        assert_eq!(table_bytes(256), Some(8 * 260));
        assert_eq!(table_bytes(96), None);
        let mut dst = vec![0u8; 288];
        assert!(repack(&[0u8; 18], 1, 128, &mut dst[1..]).is_none());
        assert!(repack(&[0u8; 17], 1, 128, &mut dst).is_none());
    }

    /// Every row of random, all-set and all-clear weights against random, -128/127 and zero
    /// activations, at row counts that leave a partial last group: bit for bit `vec_dot`.
    #[test]
    fn matvec_is_vec_dot_bit_for_bit() {
        for (case, &(n_rows, nb)) in [(1usize, 1usize), (16, 1), (17, 2), (37, 3), (64, 1)]
            .iter()
            .enumerate()
        {
            let n_cols = nb * BLOCK_ELEMS;
            let row_bytes = nb * BLOCK_BYTES;
            let mut w = random_blocks(GgmlType::Q1_0, n_rows * nb, 70 + case as u64);
            // Edge rows: all bits set, all clear, with large scales.
            for (r, fill) in [(0usize, 0xFFu8), (n_rows / 2, 0x00)] {
                for b in 0..nb {
                    let blk = &mut w[r * row_bytes + b * BLOCK_BYTES..][..BLOCK_BYTES];
                    blk[..2].copy_from_slice(&half::f16::from_f32(1000.0).to_bits().to_le_bytes());
                    blk[2..].fill(fill);
                }
            }
            let mut rng = XorShift(90 + case as u64);
            let x: Vec<f32> = (0..n_cols).map(|_| rng.unit() * 2.0 - 1.0).collect();
            let mut random = vec![0u8; n_cols / 32 * q8_0::BLOCK_BYTES];
            q8_0::quantize_activation(&x, &mut random);
            let extremes: Vec<i8> = (0..n_cols)
                .map(|e| if e % 5 == 0 { 127 } else { -128 })
                .collect();
            let acts = [
                random,
                act_from(&extremes, 0.01),
                act_from(&vec![-128; n_cols], 3.0),
                act_from(&vec![0; n_cols], 0.0),
            ];
            let mut packed = vec![0u8; bytes(n_rows, n_cols).unwrap()];
            repack(&w, n_rows, n_cols, &mut packed).unwrap();
            for (a, act) in acts.iter().enumerate() {
                let mut table = vec![0xAAu8; table_bytes(n_cols).unwrap()];
                build_table(act, &mut table);
                let mut out = vec![f32::NAN; n_rows];
                matvec(n_cols, &packed, &table, &mut out);
                for (r, y) in out.iter().enumerate() {
                    let want = q1_0::vec_dot(n_cols, &w[r * row_bytes..][..row_bytes], act);
                    assert_eq!(
                        y.to_bits(),
                        want.to_bits(),
                        "{n_rows} rows, act {a}, row {r}"
                    );
                }
            }
        }
    }
}
