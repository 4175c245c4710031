//! AVX2 small-batch matmul: several weight rows against a batch of activation rows (a
//! prompt's tokens), with the signature of `smolrun_core::kernels::ColsFn`:
//! `out[t * n_rows + r] = weights[r] . acts[t]`.
//!
//! Why: token by token, a prompt reads every weight once per token, and the matvec is bound by
//! memory bandwidth. Here each weight block is unpacked once (nibbles split, fifth/sixth bits
//! merged, scales decoded) and dotted with up to [`GROUP`] activation rows while it sits in
//! registers, so the weights are read from memory once per batch and the unpacking is shared.
//!
//! Exactness: for every activation row the float operations are the ones of the matching
//! [`super::avx2`] vec_dot, in the same order and on the same lanes (the per-block integer sums
//! are exact and land in the same lane as there; each column keeps its own accumulators). So
//! every output is bit for bit the vec_dot's, and a prompt run in batches gives the logits it
//! gives token by token. core's kernel tests check this to the bit.
//!
//! Every function reads only whole blocks inside the slices, like the vec_dots.
//!
//! Only the shared loop is left here (`matmul_by_groups`, for [`super::avx2_q1`]): the K-quants'
//! batches are [`super::avx2_kt`]'s and [`super::avx2_kt35`]'s (tokens in the lanes), the
//! 32-element formats' in [`super::avx2_q0`] and [`super::avx512_q0`].
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

/// Activation rows dotted with one unpacked weight block: 4 columns keep 8 (Q4_K: 2 per
/// column) accumulators next to the shared unpacked block within the 16 ymm registers.
pub const GROUP: usize = 4;

/// Weight rows dotted with every activation group before moving on.
const ROW_TILE: usize = 16;

/// One block format's dot of a weight row with N activation rows (N = 1..=GROUP).
pub(super) trait ColGroup {
    /// Elements per block, bytes per weight block, bytes per activation block.
    const QK: usize;
    const W_BYTES: usize;
    const A_BYTES: usize;
    /// `nb` blocks of the weight row at `x` against the activation rows at `ys`.
    unsafe fn dot_group<const N: usize>(nb: usize, x: *const u8, ys: [*const u8; N]) -> [f32; N];
}

/// Runs `K::dot_group` over every weight row and every group of up to [`GROUP`] activation
/// rows; the tail group (n_acts not a multiple of GROUP) takes the 1-, 2- or 3-column form.
#[inline(always)]
pub(super) unsafe fn matmul_by_groups<K: ColGroup>(
    n: usize,
    w: &[u8],
    acts: &[u8],
    n_acts: usize,
    out: &mut [f32],
) {
    if n_acts == 0 {
        return;
    }
    let n_rows = out.len() / n_acts;
    let nb = n / K::QK;
    let (w_row, a_row) = (nb * K::W_BYTES, nb * K::A_BYTES);
    if w.len() < n_rows * w_row || acts.len() < n_acts * a_row {
        // The caller (WeightKernel::matmul) checked the shapes; never read past the slices.
        return;
    }
    let y = |t: usize| acts.as_ptr().add(t * a_row);
    let mut put = |t: usize, r: usize, v: &[f32]| {
        for (j, &v) in v.iter().enumerate() {
            out[(t + j) * n_rows + r] = v;
        }
    };
    // Tiles of ROW_TILE weight rows (a few KB, kept in L1) against every group of activation
    // rows: the activations are read from L2 once per tile instead of once per weight row.
    for r0 in (0..n_rows).step_by(ROW_TILE) {
        let rows = r0..(r0 + ROW_TILE).min(n_rows);
        let x = |r: usize| w.as_ptr().add(r * w_row);
        let mut t = 0;
        while t + GROUP <= n_acts {
            for r in rows.clone() {
                let v = K::dot_group::<GROUP>(nb, x(r), [y(t), y(t + 1), y(t + 2), y(t + 3)]);
                put(t, r, &v);
            }
            t += GROUP;
        }
        for r in rows {
            match n_acts - t {
                3 => put(
                    t,
                    r,
                    &K::dot_group::<3>(nb, x(r), [y(t), y(t + 1), y(t + 2)]),
                ),
                2 => put(t, r, &K::dot_group::<2>(nb, x(r), [y(t), y(t + 1)])),
                1 => put(t, r, &K::dot_group::<1>(nb, x(r), [y(t)])),
                _ => {}
            }
        }
    }
}
