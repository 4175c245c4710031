//! The frame shared by the row-interleaved (x4) matvecs: full groups of 4 rows first, each
//! block index of a group in one `group_block` bytes record, then the `n_rows % 4` tail rows
//! verbatim in the file layout, which the matvec runs through the one-row kernel.

/// Sizes of one format's x4 layout.
pub(crate) struct X4Layout {
    /// Elements per block.
    pub block_elems: usize,
    /// Bytes of one block of one row in the file.
    pub row_block: usize,
    /// Bytes of one block index of a 4-row group.
    pub group_block: usize,
    /// Bytes of one activation block.
    pub act_block: usize,
}

impl X4Layout {
    /// Bytes of `n_rows` rows of `n_cols` elements once repacked.
    pub fn bytes(&self, n_rows: usize, n_cols: usize) -> Option<usize> {
        if !n_cols.is_multiple_of(self.block_elems) {
            return None;
        }
        let nb = n_cols / self.block_elems;
        let groups = (n_rows / 4)
            .checked_mul(nb)?
            .checked_mul(self.group_block)?;
        let tail = (n_rows % 4).checked_mul(nb)?.checked_mul(self.row_block)?;
        groups.checked_add(tail)
    }

    /// Repacks `src` (`n_rows` file rows) into `dst`: `pack(rows, out)` writes one group
    /// block from the 4 rows' blocks. `None`, writing nothing, on a size mismatch.
    pub fn repack(
        &self,
        src: &[u8],
        n_rows: usize,
        n_cols: usize,
        dst: &mut [u8],
        pack: fn(&[&[u8]; 4], &mut [u8]),
    ) -> Option<()> {
        let nb = n_cols / self.block_elems;
        let row_bytes = nb.checked_mul(self.row_block)?;
        if src.len() != n_rows.checked_mul(row_bytes)? || dst.len() != self.bytes(n_rows, n_cols)? {
            return None;
        }
        let groups = n_rows / 4;
        for g in 0..groups {
            for b in 0..nb {
                let rows: [&[u8]; 4] = core::array::from_fn(|r| {
                    &src[(4 * g + r) * row_bytes + b * self.row_block..][..self.row_block]
                });
                pack(
                    &rows,
                    &mut dst[(g * nb + b) * self.group_block..][..self.group_block],
                );
            }
        }
        let packed = groups * nb * self.group_block;
        dst[packed..].copy_from_slice(&src[groups * 4 * row_bytes..]);
        Some(())
    }

    /// `out[r] = row r . act` over a repacked matrix of `out.len()` rows: `group(nb, group,
    /// act)` for each full group, `row(n, row, act)` for the tail. Rows whose data `packed`
    /// lacks get 0.
    ///
    /// # Safety
    /// `group` and `row` must be safe to call on this CPU with whole blocks.
    pub unsafe fn matvec(
        &self,
        n_cols: usize,
        packed: &[u8],
        act: &[u8],
        out: &mut [f32],
        group: unsafe fn(usize, &[u8], &[u8]) -> [f32; 4],
        row: unsafe fn(usize, &[u8], &[u8]) -> f32,
    ) {
        let nb = (n_cols / self.block_elems).min(act.len() / self.act_block);
        let act = &act[..nb * self.act_block];
        let group_bytes = nb * self.group_block;
        let groups = if nb == 0 {
            0
        } else {
            (out.len() / 4).min(packed.len() / group_bytes)
        };
        for (g, out4) in out.chunks_exact_mut(4).take(groups).enumerate() {
            // SAFETY: the group holds nb block records and the activation nb blocks.
            out4.copy_from_slice(&unsafe {
                group(nb, &packed[g * group_bytes..][..group_bytes], act)
            });
        }
        let tail = &packed[groups * group_bytes..];
        let row_bytes = nb * self.row_block;
        for (r, y) in out[groups * 4..].iter_mut().enumerate() {
            *y = match tail.get(r * row_bytes..(r + 1) * row_bytes) {
                // SAFETY: as above, whole blocks.
                Some(w) if nb > 0 => unsafe { row(nb * self.block_elems, w, act) },
                _ => 0.0,
            };
        }
    }
}
