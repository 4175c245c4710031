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
//! Only Q5_K is left here (the loop also serves [`super::avx2_3bit`]'s Q3_K): the Q4_K and Q6_K batches live with their vec_dots in
//! [`super::avx2_k`], the 32-element formats' in [`super::avx2_q0`] and [`super::avx512_q0`].
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use super::avx2::*;
use core::arch::x86_64::*;

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

/// Q4_K and Q5_K (see `q45_k_dot` in avx2.rs for the layout of the unpacked quants).
struct Q45K<const FIVE_BITS: bool>;

impl<const FIVE_BITS: bool> ColGroup for Q45K<FIVE_BITS> {
    const QK: usize = QK_K;
    const W_BYTES: usize = if FIVE_BITS { Q5_K_BYTES } else { Q4_K_BYTES };
    const A_BYTES: usize = Q8_K_BYTES;

    #[inline(always)]
    unsafe fn dot_group<const N: usize>(nb: usize, xr: *const u8, ys: [*const u8; N]) -> [f32; N] {
        let qs_off = if FIVE_BITS { 48 } else { 16 };
        let low4 = _mm256_set1_epi8(0x0F);
        let one = _mm256_set1_epi8(1);
        let mut acc = [_mm256_setzero_ps(); N];
        let mut acc_mins = [_mm256_setzero_ps(); N];
        for i in 0..nb {
            let x = xr.add(i * Self::W_BYTES);
            let (dx, dminx) = (f16_at(x), f16_at(x.add(2)));
            let (sc, mn) = scales_mins_k4(x.add(4));
            let mut pairs = [0u8; 16];
            for (s, &m) in mn.iter().enumerate() {
                pairs[2 * s] = m;
                pairs[2 * s + 1] = m;
            }
            let mins16 = _mm256_cvtepu8_epi16(load128(pairs.as_ptr()));
            // The block's 256 quants as 8 vectors of 32 (sub-block s in q[s]), once.
            let mut q = [_mm256_setzero_si256(); 8];
            let mut qh = if FIVE_BITS {
                load256(x.add(16))
            } else {
                _mm256_setzero_si256()
            };
            for c in 0..4 {
                let bytes = load256(x.add(qs_off + 32 * c));
                let mut lo = _mm256_and_si256(bytes, low4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
                if FIVE_BITS {
                    let h_lo = _mm256_slli_epi16(_mm256_and_si256(qh, one), 4);
                    let h_hi =
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4);
                    lo = _mm256_or_si256(lo, h_lo);
                    hi = _mm256_or_si256(hi, h_hi);
                    qh = _mm256_srli_epi16(qh, 2);
                }
                q[2 * c] = lo;
                q[2 * c + 1] = hi;
            }
            for j in 0..N {
                let y = ys[j].add(i * Q8_K_BYTES);
                let dy = f32_at(y);
                let (d, dmin) = (dx * dy, dminx * dy);
                let mins = _mm256_madd_epi16(load256(y.add(Q8_K_BSUMS)), mins16);
                acc_mins[j] =
                    _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(mins), acc_mins[j]);
                let mut sumi = _mm256_setzero_si256();
                for c in 0..4 {
                    let p_lo = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(q[2 * c], load256(y.add(Q8_K_QS + 64 * c))),
                        _mm256_set1_epi16(sc[2 * c] as i16),
                    );
                    let p_hi = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(q[2 * c + 1], load256(y.add(Q8_K_QS + 64 * c + 32))),
                        _mm256_set1_epi16(sc[2 * c + 1] as i16),
                    );
                    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_lo, p_hi));
                }
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[j]);
            }
        }
        let mut out = [0f32; N];
        for j in 0..N {
            out[j] = hsum_ps(acc[j]) - hsum_ps(acc_mins[j]);
        }
        out
    }
}

/// Q5_K weights x Q8_K activation rows.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q5_k_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul_by_groups::<Q45K<true>>(n, w, acts, n_acts, out)
}
