//! Q2_0 weights in the lookup-table layout: `q1_0_lut`'s scheme (read it first) for 2-bit codes.
//! The NEON face is `smolrun_kernels::aarch64::matvec_q2_0_lut16_neon`; both give
//! `q2_0::vec_dot`'s bits for every row.
//!
//! A 4-bit index now holds two codes, so a table covers 2 activations:
//! `T[c] = (c % 4 - 1) q0 + (c / 4 - 1) q1`, in [-512, 508]. Same split as Q1_0
//! (`lo = T & 63`, `hi = T >> 6` in -8..7); a Q8_0 block has 16 tables, whose hi bytes sum to
//! -128..112, still an i8.
//!
//! **Weights**: the file's 18-byte blocks (f16 d, 16 bytes of codes) transposed by 16 rows
//! exactly as Q1_0's ([`GROUP_BLOCK_BYTES`] = 288 per 64-column block): byte r of vector v is
//! byte v of row r, whose low nibble codes elements 4v, 4v+1 and high nibble 4v+2, 4v+3.
//!
//! **Tables**: Q8_0 block k's 512 bytes at 512k: for pair j (0..8; groups 2j, 2j+1, i.e.
//! activations 4j..4j+3) the 64 bytes `lo[2j] hi[2j] lo[2j+1] hi[2j+1]` at 512k + 64j; after all
//! blocks each block's d as f32.
//!
//! **Float order**: `sumi = 0 + d8_0 s0 + d8_1 s1`, then `sumf += d * sumi`, as `vec_dot`.

use super::common::f16_at;
use super::q1_0_lut::{repack_blocks, GROUP_OFF_QS};
use super::q2_0::{BLOCK_BYTES, BLOCK_ELEMS};
use super::q8_0;

pub use super::q1_0_lut::{GROUP_BLOCK_BYTES, GROUP_ROWS};

/// Table bytes of one Q8_0 activation block: 16 groups of 2 quants x (16 lo + 16 hi) bytes.
pub const TABLE_BLOCK_BYTES: usize = 512;

/// Bytes of `n_rows` Q2_0 rows of `n_cols` elements in this layout (whole groups, the last one
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

/// Repacks `n_rows` Q2_0 file rows (`src`) into `dst` (exactly `bytes(n_rows, n_cols)`); `None`,
/// writing nothing, on a size mismatch.
pub fn repack(src: &[u8], n_rows: usize, n_cols: usize, dst: &mut [u8]) -> Option<()> {
    debug_assert_eq!(BLOCK_BYTES, super::q1_0::BLOCK_BYTES);
    repack_blocks(
        src,
        n_rows,
        n_cols / BLOCK_ELEMS,
        n_cols.is_multiple_of(BLOCK_ELEMS),
        dst,
    )
}

/// Bytes of the tables of one activation row of `n_cols` elements; `None` unless `n_cols` is a
/// whole number of Q2_0 blocks.
pub fn table_bytes(n_cols: usize) -> Option<usize> {
    if !n_cols.is_multiple_of(BLOCK_ELEMS) {
        return None;
    }
    (n_cols / q8_0::BLOCK_ELEMS).checked_mul(TABLE_BLOCK_BYTES + 4)
}

/// The 16 sums `T[c]` of one group of 2 quants: codes `c % 4` for q0 and `c / 4` for q1.
#[inline(always)]
pub fn group_sums(q: [i8; 2]) -> [i16; 16] {
    core::array::from_fn(|c| {
        ((c % 4) as i16 - 1) * q[0] as i16 + ((c / 4) as i16 - 1) * q[1] as i16
    })
}

/// Builds the tables of one Q8_0 activation row (`act`, whole blocks) into `table` (exactly
/// `table_bytes` of its length). The scalar face of `build_table_q2_0_lut_neon`: same bytes.
pub fn build_table(act: &[u8], table: &mut [u8]) {
    let nb8 = act.len() / q8_0::BLOCK_BYTES;
    debug_assert_eq!(table.len(), nb8 * (TABLE_BLOCK_BYTES + 4));
    let (tables, scales) = table.split_at_mut(nb8 * TABLE_BLOCK_BYTES);
    for (k, (y, t)) in act
        .chunks_exact(q8_0::BLOCK_BYTES)
        .zip(tables.chunks_exact_mut(TABLE_BLOCK_BYTES))
        .enumerate()
    {
        for g in 0..16 {
            let q = [
                y[q8_0::OFF_QS + 2 * g] as i8,
                y[q8_0::OFF_QS + 2 * g + 1] as i8,
            ];
            let at = 64 * (g / 2) + 32 * (g % 2);
            for (c, s) in group_sums(q).into_iter().enumerate() {
                t[at + c] = (s & 63) as u8;
                t[at + 16 + c] = (s >> 6) as i8 as u8;
            }
        }
        scales[4 * k..4 * k + 4].copy_from_slice(&f16_at(y, q8_0::OFF_D).to_le_bytes());
    }
}

/// `out[r] = row r . act` over `out.len()` rows in this layout with `table` built from `act` by
/// [`build_table`]: the scalar face, bit for bit `q2_0::vec_dot` on every row. Rows whose data
/// `packed` lacks get 0.
pub fn matvec(n_cols: usize, packed: &[u8], table: &[u8], out: &mut [f32]) {
    let table_nb8 = table.len() / (TABLE_BLOCK_BYTES + 4);
    let nb = (n_cols / BLOCK_ELEMS).min(table_nb8 / 2);
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
            for k in 0..2 {
                let kb = 2 * b + k;
                let t = &table[kb * TABLE_BLOCK_BYTES..][..TABLE_BLOCK_BYTES];
                let d8 = f32::from_le_bytes(core::array::from_fn(|i| table[d8_at + 4 * kb + i]));
                for (r, sumi) in sumi.iter_mut().enumerate() {
                    let mut s = 0i32;
                    for j in 0..8 {
                        let code = blk[GROUP_OFF_QS + 16 * (8 * k + j) + r];
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
    use super::super::{q2_0, GgmlType};
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    fn act_from(quants: &[i8], d: f32) -> Vec<u8> {
        let mut out = Vec::new();
        for q in quants.chunks_exact(32) {
            out.extend(half::f16::from_f32(d).to_bits().to_le_bytes());
            out.extend(q.iter().map(|&q| q as u8));
        }
        out
    }

    #[test]
    fn group_sums_span_the_range() {
        assert_eq!(group_sums([-128, -128])[0], 256);
        assert_eq!(group_sums([-128, -128])[15], -512);
        assert_eq!(group_sums([127, 127])[15], 508);
        // c = 6: codes 2 (x1) and 1 (x0); c = 13: codes 1 (x0) and 3 (x2).
        assert_eq!(group_sums([3, 5])[6], 3);
        assert_eq!(group_sums([3, 5])[13], 10);
        // 16 hi bytes of -8 still fit an i8.
        assert_eq!((-512i16 >> 6) * 16, -128);
        assert_eq!((508i16 >> 6) * 16, 112);
    }

    /// Every row of random, all-0x00 and all-0xFF codes against random, -128/127 and zero
    /// activations, with partial last groups: bit for bit `vec_dot`.
    #[test]
    fn matvec_is_vec_dot_bit_for_bit() {
        for (case, &(n_rows, nb)) in [(1usize, 1usize), (16, 1), (17, 2), (37, 3), (64, 1)]
            .iter()
            .enumerate()
        {
            let n_cols = nb * BLOCK_ELEMS;
            let row_bytes = nb * BLOCK_BYTES;
            let mut w = random_blocks(GgmlType::Q2_0, n_rows * nb, 170 + case as u64);
            for (r, fill) in [(0usize, 0xFFu8), (n_rows / 2, 0x00)] {
                for b in 0..nb {
                    let blk = &mut w[r * row_bytes + b * BLOCK_BYTES..][..BLOCK_BYTES];
                    blk[..2].copy_from_slice(&half::f16::from_f32(1000.0).to_bits().to_le_bytes());
                    blk[2..].fill(fill);
                }
            }
            let mut rng = XorShift(190 + case as u64);
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
                act_from(&vec![127; n_cols], 3.0),
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
                    let want = q2_0::vec_dot(n_cols, &w[r * row_bytes..][..row_bytes], act);
                    assert_eq!(
                        y.to_bits(),
                        want.to_bits(),
                        "{n_rows} rows, act {a}, row {r}"
                    );
                }
            }
        }
        assert_eq!(bytes(17, 128), Some(2 * 2 * 288));
        assert_eq!(table_bytes(64), Some(2 * 516));
        assert_eq!(bytes(1, 100), None);
        assert!(repack(&[0u8; 18], 1, 64, &mut [0u8; 287]).is_none());
    }
}
