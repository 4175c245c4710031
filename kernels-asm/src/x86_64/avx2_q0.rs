//! AVX2 kernels for the 32-element block formats against Q8_0 activations (Q8_0, Q4_0, Q5_0
//! and IQ4_NL weights): a matvec that runs [`ROWS`] weight rows at once (decoding), with the
//! signature of `smolrun_core::kernels::RowsFn`, and a small-batch matmul (prompts), with the
//! signature of `smolrun_core::kernels::ColsFn`.
//!
//! Why: on these formats the one-row vec_dots of [`super::avx2`] are bound by instructions,
//! not by memory: each block of 32 elements is only 18-34 bytes, and per block the kernel also
//! converts two f16 scales and rebuilds the activation's side (Q8_0: widened to i16; Q4_0/Q5_0:
//! the offset times the activations). Here what depends on the activation block alone is done
//! once per block for [`ROWS`] weight rows (matvec), and what depends on the weight block alone
//! once for [`GROUP`] activation rows (matmul), with the activations' scales converted to f32
//! once per tile of weight rows.
//!
//! Exactness: for every (weight row, activation row) pair the float operations are exactly the
//! ones of the matching `avx2::vec_dot_*`: the same exact per-block integer sums in the same 8
//! lanes, the same scale product `f16(dx) * f16(dy)` (one f32 rounding, whether done on a
//! scalar or in a vector lane), FMA into the even-block or odd-block accumulator, and the same
//! final sum of lanes. So the matvec and the matmul give the vec_dot's bits for every row and
//! every token; core's kernel tests check this to the bit.
//!
//! Every function reads only whole blocks inside the slices; rows that the slices do not hold
//! in full are left as they are (the callers, `WeightKernel::matvec`/`matmul`, check shapes).
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use super::avx2::*;
use core::arch::x86_64::*;

/// Weight rows that share one pass over the activation in the matvec.
pub const ROWS: usize = 4;

/// Activation rows dotted with one unpacked weight block in the matmul: 4 columns keep their
/// even and odd accumulators (8 ymm) next to the unpacked block within the 16 ymm registers.
pub const GROUP: usize = 4;

/// Weight rows dotted with every activation group before moving on (a few hundred bytes per
/// row: the tile stays in L1 while the groups go by).
const ROW_TILE: usize = 16;

/// Blocks per activation row whose scales are converted ahead into a stack buffer
/// (8192 columns; wider rows convert each scale where it is used, the same value).
const MAX_SCALED_BLOCKS: usize = 256;

/// One 32-element weight format: how a block is unpacked, how an activation block is prepared
/// for it, and their exact integer dot in 8 i32 lanes (the lanes of the `avx2` vec_dot).
trait Q0Format {
    /// Bytes per weight block.
    const W_BYTES: usize;
    /// A weight block unpacked into registers.
    type W: Copy;
    /// An activation block prepared for this format.
    type Y: Copy;
    unsafe fn unpack(x: *const u8) -> Self::W;
    unsafe fn prepare(y: *const u8) -> Self::Y;
    unsafe fn dot(w: Self::W, y: Self::Y) -> __m256i;
}

/// Q8_0: both sides signed (and -128 possible on both), so widened to i16 and multiplied with
/// `madd_epi16`, as in `vec_dot_q8_0_q8_0`.
struct Q80;

impl Q0Format for Q80 {
    const W_BYTES: usize = Q8_0_BYTES;
    type W = (__m256i, __m256i);
    type Y = (__m256i, __m256i);

    #[inline(always)]
    unsafe fn unpack(x: *const u8) -> Self::W {
        (
            _mm256_cvtepi8_epi16(load128(x.add(2))),
            _mm256_cvtepi8_epi16(load128(x.add(18))),
        )
    }

    #[inline(always)]
    unsafe fn prepare(y: *const u8) -> Self::Y {
        Self::unpack(y)
    }

    #[inline(always)]
    unsafe fn dot(w: Self::W, y: Self::Y) -> __m256i {
        _mm256_add_epi32(_mm256_madd_epi16(w.0, y.0), _mm256_madd_epi16(w.1, y.1))
    }
}

/// Q4_0 (FIVE_BITS false) and Q5_0: unsigned quants 0..15 / 0..31 with an offset of 8 / 16,
/// taken off as `offset * y` in i16 (see `offset_dot` in avx2.rs); the activation side of that
/// product is prepared once per activation block.
struct Q450<const FIVE_BITS: bool>;

impl<const FIVE_BITS: bool> Q450<FIVE_BITS> {
    const OFFSET: i8 = if FIVE_BITS { 16 } else { 8 };
}

impl<const FIVE_BITS: bool> Q0Format for Q450<FIVE_BITS> {
    const W_BYTES: usize = if FIVE_BITS { Q5_0_BYTES } else { Q4_0_BYTES };
    type W = __m256i;
    /// The activation quants and `offset * (y[2k] + y[2k+1])` in 16 i16 lanes.
    type Y = (__m256i, __m256i);

    #[inline(always)]
    unsafe fn unpack(x: *const u8) -> __m256i {
        if FIVE_BITS {
            // Bit j of qh (bytes 2..6) is the fifth bit of element j: the u32 is spread so
            // that byte j holds qh's byte j / 8, then tested against bit j % 8.
            let spread = _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
            );
            let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
            let qh = (x.add(2) as *const i32).read_unaligned();
            let spread_qh = _mm256_shuffle_epi8(_mm256_set1_epi32(qh), spread);
            let is_set = _mm256_cmpeq_epi8(_mm256_and_si256(spread_qh, bit), bit);
            let fifth = _mm256_and_si256(is_set, _mm256_set1_epi8(16));
            _mm256_or_si256(nibbles(x.add(6)), fifth)
        } else {
            nibbles(x.add(2))
        }
    }

    #[inline(always)]
    unsafe fn prepare(y: *const u8) -> Self::Y {
        let q = load256(y.add(2));
        (q, _mm256_maddubs_epi16(_mm256_set1_epi8(Self::OFFSET), q))
    }

    #[inline(always)]
    unsafe fn dot(w: __m256i, y: Self::Y) -> __m256i {
        let p = _mm256_sub_epi16(_mm256_maddubs_epi16(w, y.0), y.1);
        _mm256_madd_epi16(p, _mm256_set1_epi16(1))
    }
}

/// IQ4_NL: each nibble indexes the 16-value grid `kvalues_iq4nl`, looked up 32 at a time with
/// one `pshufb` (a nibble is 0..15, so every lookup is in the table; no byte of a file can
/// reach outside it). The levels are signed (-127..113) and so are the activations (-128
/// possible in a file), so both sides are widened to i16 and multiplied with `madd_epi16`, as
/// Q8_0's are: exact for every byte.
struct IQ4NL;

/// ggml's `kvalues_iq4nl` in both 128-bit lanes, for `pshufb`.
#[inline(always)]
pub(super) unsafe fn iq4nl_table() -> __m256i {
    _mm256_setr_epi8(
        -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113, //
        -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
    )
}

impl Q0Format for IQ4NL {
    const W_BYTES: usize = IQ4_NL_BYTES;
    type W = (__m256i, __m256i);
    type Y = (__m256i, __m256i);

    #[inline(always)]
    unsafe fn unpack(x: *const u8) -> Self::W {
        let v = _mm256_shuffle_epi8(iq4nl_table(), nibbles(x.add(2)));
        (
            _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)),
            _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1)),
        )
    }

    #[inline(always)]
    unsafe fn prepare(y: *const u8) -> Self::Y {
        Q80::unpack(y)
    }

    #[inline(always)]
    unsafe fn dot(w: Self::W, y: Self::Y) -> __m256i {
        Q80::dot(w, y)
    }
}

/// The 32 quants of a Q4_0/Q5_0 block as bytes (the layout of `nibbles_0` in avx2.rs: low
/// nibbles, elements 0..15, in the low 128 bits, high nibbles in the high 128 bits), from one
/// broadcast load and one variable shift instead of two shifts and an insert.
#[inline(always)]
pub(super) unsafe fn nibbles(qs: *const u8) -> __m256i {
    let both = _mm256_broadcastsi128_si256(load128(qs));
    let shifted = _mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4));
    _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F))
}

// ---------------------------------------------------------------------------------------------
// Matvec: ROWS weight rows against one activation row.
// ---------------------------------------------------------------------------------------------

/// Block `i` of the R weight rows at `xs` against the activation row at `y`, into their
/// accumulators (the even or the odd ones, chosen by the caller as `acc[i & 1]` in the vec_dot).
#[inline(always)]
unsafe fn rows_block<K: Q0Format, const R: usize>(
    nb: usize,
    i: usize,
    xs: &[*const u8; R],
    y: *const u8,
    acc: &mut [__m256; R],
) {
    let yb = y.add(i * Q8_0_BYTES);
    let dy = f16_at(yb);
    let yq = K::prepare(yb);
    // The R rows are consecutive in memory, but read in R interleaved streams, which the
    // hardware prefetchers do not follow well: fetch the next R rows ahead, as far into them
    // as this block is into these (R blocks' bytes per block, a line at a time).
    let ahead = xs[0].wrapping_add(R * (nb * K::W_BYTES) + i * R * K::W_BYTES);
    for line in 0..(R * K::W_BYTES).div_ceil(64) {
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * line) as *const i8);
    }
    // The R rows' scale products, converted and multiplied together (lane by lane the
    // product the vec_dot takes on scalars: the same rounding).
    let mut dx = [0u16; 8];
    for j in 0..R {
        dx[j] = (xs[j].add(i * K::W_BYTES) as *const u16).read_unaligned();
    }
    let d = _mm_mul_ps(
        _mm_cvtph_ps(_mm_loadu_si128(dx.as_ptr() as *const __m128i)),
        _mm_set1_ps(dy),
    );
    let d = _mm256_castps128_ps256(d);
    for j in 0..R {
        let x = xs[j].add(i * K::W_BYTES);
        let sumi = K::dot(K::unpack(x), yq);
        let dj = _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(j as i32));
        acc[j] = _mm256_fmadd_ps(dj, _mm256_cvtepi32_ps(sumi), acc[j]);
    }
}

/// `nb` blocks of R weight rows against one activation row.
#[inline(always)]
unsafe fn rows_dot<K: Q0Format, const R: usize>(
    nb: usize,
    xs: [*const u8; R],
    y: *const u8,
) -> [f32; R] {
    // Two accumulators per row, for even and odd blocks, as the vec_dot has them; unrolled
    // by two so that they stay in registers.
    let (mut even, mut odd) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
    let mut i = 0;
    while i + 2 <= nb {
        rows_block::<K, R>(nb, i, &xs, y, &mut even);
        rows_block::<K, R>(nb, i + 1, &xs, y, &mut odd);
        i += 2;
    }
    if i < nb {
        rows_block::<K, R>(nb, i, &xs, y, &mut even);
    }
    let mut out = [0f32; R];
    for j in 0..R {
        out[j] = hsum_ps(_mm256_add_ps(even[j], odd[j]));
    }
    out
}

/// `out[r] = w row r . act` for `out.len()` rows, ROWS at a time; the last `len % ROWS` rows
/// run through the same code one at a time (still this kernel's bits, the vec_dot's).
#[inline(always)]
unsafe fn matvec<K: Q0Format>(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
    let nb = n / QK8_0;
    let w_row = nb * K::W_BYTES;
    let n_rows = out.len();
    if w.len() < n_rows * w_row || act.len() < nb * Q8_0_BYTES {
        return;
    }
    let x = |r: usize| w.as_ptr().add(r * w_row);
    let y = act.as_ptr();
    let mut r = 0;
    while r + ROWS <= n_rows {
        let v = rows_dot::<K, ROWS>(nb, [x(r), x(r + 1), x(r + 2), x(r + 3)], y);
        out[r..r + ROWS].copy_from_slice(&v);
        r += ROWS;
    }
    while r < n_rows {
        out[r] = rows_dot::<K, 1>(nb, [x(r)], y)[0];
        r += 1;
    }
}

/// Q8_0 weight rows . one Q8_0 activation row.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matvec_q8_0_q8_0(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
    matvec::<Q80>(n, w, act, out)
}

/// Q4_0 weight rows . one Q8_0 activation row.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matvec_q4_0_q8_0(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
    matvec::<Q450<false>>(n, w, act, out)
}

/// Q5_0 weight rows . one Q8_0 activation row.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matvec_q5_0_q8_0(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
    matvec::<Q450<true>>(n, w, act, out)
}

/// IQ4_NL weight rows . one Q8_0 activation row.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matvec_iq4_nl_q8_0(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
    matvec::<IQ4NL>(n, w, act, out)
}

/// IQ4_NL . Q8_0, one row: the matvec's one-row form (its bits, and so `matmul`'s).
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_iq4_nl_q8_0(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let mut out = [0f32; 1];
    matvec::<IQ4NL>(n, w, act, &mut out);
    out[0]
}

// ---------------------------------------------------------------------------------------------
// Matmul: weight rows against a batch of activation rows.
// ---------------------------------------------------------------------------------------------

/// Where a column's activation scales come from: converted ahead into a buffer (`PRE`), or
/// from the f16 field of each block as it is used. The same f32 value either way.
#[inline(always)]
unsafe fn act_scale<const PRE: bool>(y: *const u8, dy: *const f32, i: usize) -> __m256 {
    if PRE {
        _mm256_broadcast_ss(&*dy.add(i))
    } else {
        _mm256_set1_ps(f16_at(y.add(i * Q8_0_BYTES)))
    }
}

/// Block `i` of the weight row at `xr` against N activation rows (scales in `dys` if PRE).
#[inline(always)]
unsafe fn cols_block<K: Q0Format, const N: usize, const PRE: bool>(
    i: usize,
    xr: *const u8,
    ys: &[*const u8; N],
    dys: &[*const f32; N],
    acc: &mut [__m256; N],
) {
    let x = xr.add(i * K::W_BYTES);
    let dx = _mm256_set1_ps(f16_at(x));
    let wq = K::unpack(x);
    for j in 0..N {
        // Lane by lane the product the vec_dot takes on scalars: the same rounding.
        let d = _mm256_mul_ps(dx, act_scale::<PRE>(ys[j], dys[j], i));
        let sumi = K::dot(wq, K::prepare(ys[j].add(i * Q8_0_BYTES)));
        acc[j] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc[j]);
    }
}

/// `nb` blocks of one weight row against N activation rows.
#[inline(always)]
unsafe fn cols_dot<K: Q0Format, const N: usize, const PRE: bool>(
    nb: usize,
    xr: *const u8,
    ys: [*const u8; N],
    dys: [*const f32; N],
) -> [f32; N] {
    let (mut even, mut odd) = ([_mm256_setzero_ps(); N], [_mm256_setzero_ps(); N]);
    let mut i = 0;
    while i + 2 <= nb {
        cols_block::<K, N, PRE>(i, xr, &ys, &dys, &mut even);
        cols_block::<K, N, PRE>(i + 1, xr, &ys, &dys, &mut odd);
        i += 2;
    }
    if i < nb {
        cols_block::<K, N, PRE>(i, xr, &ys, &dys, &mut even);
    }
    let mut out = [0f32; N];
    for j in 0..N {
        out[j] = hsum_ps(_mm256_add_ps(even[j], odd[j]));
    }
    out
}

/// Every weight row against every activation row: tiles of ROW_TILE weight rows, each against
/// the activation groups of GROUP rows (the tail group takes the 1-, 2- or 3-column form).
#[inline(always)]
unsafe fn matmul_tiles<K: Q0Format, const PRE: bool>(
    nb: usize,
    w: &[u8],
    acts: &[u8],
    n_acts: usize,
    out: &mut [f32],
) {
    let n_rows = out.len() / n_acts;
    let (w_row, a_row) = (nb * K::W_BYTES, nb * Q8_0_BYTES);
    // The activation scales of one group as f32, converted once per tile (PRE only).
    let mut scales = [0f32; GROUP * MAX_SCALED_BLOCKS];
    let y = |t: usize| acts.as_ptr().add(t * a_row);
    let x = |r: usize| w.as_ptr().add(r * w_row);
    for r0 in (0..n_rows).step_by(ROW_TILE) {
        let rows = r0..(r0 + ROW_TILE).min(n_rows);
        let mut t = 0;
        while t < n_acts {
            let g = (n_acts - t).min(GROUP);
            if PRE {
                for j in 0..g {
                    for i in 0..nb {
                        scales[j * MAX_SCALED_BLOCKS + i] = f16_at(y(t + j).add(i * Q8_0_BYTES));
                    }
                }
            }
            let dy = |j: usize| scales.as_ptr().add(j * MAX_SCALED_BLOCKS);
            for r in rows.clone() {
                let xr = x(r);
                let mut put = |v: &[f32]| {
                    for (j, &v) in v.iter().enumerate() {
                        out[(t + j) * n_rows + r] = v;
                    }
                };
                match g {
                    4 => put(&cols_dot::<K, 4, PRE>(
                        nb,
                        xr,
                        [y(t), y(t + 1), y(t + 2), y(t + 3)],
                        [dy(0), dy(1), dy(2), dy(3)],
                    )),
                    3 => put(&cols_dot::<K, 3, PRE>(
                        nb,
                        xr,
                        [y(t), y(t + 1), y(t + 2)],
                        [dy(0), dy(1), dy(2)],
                    )),
                    2 => put(&cols_dot::<K, 2, PRE>(
                        nb,
                        xr,
                        [y(t), y(t + 1)],
                        [dy(0), dy(1)],
                    )),
                    _ => put(&cols_dot::<K, 1, PRE>(nb, xr, [y(t)], [dy(0)])),
                }
            }
            t += g;
        }
    }
}

#[inline(always)]
unsafe fn matmul<K: Q0Format>(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    if n_acts == 0 {
        return;
    }
    let n_rows = out.len() / n_acts;
    let nb = n / QK8_0;
    if w.len() < n_rows * nb * K::W_BYTES || acts.len() < n_acts * nb * Q8_0_BYTES {
        // The caller (WeightKernel::matmul) checked the shapes; never read past the slices.
        return;
    }
    if nb <= MAX_SCALED_BLOCKS {
        matmul_tiles::<K, true>(nb, w, acts, n_acts, out)
    } else {
        matmul_tiles::<K, false>(nb, w, acts, n_acts, out)
    }
}

/// Q8_0 weights x Q8_0 activation rows.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q8_0_q8_0(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Q80>(n, w, acts, n_acts, out)
}

/// Q4_0 weights x Q8_0 activation rows.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q4_0_q8_0(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Q450<false>>(n, w, acts, n_acts, out)
}

/// Q5_0 weights x Q8_0 activation rows.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q5_0_q8_0(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Q450<true>>(n, w, acts, n_acts, out)
}

/// IQ4_NL weights x Q8_0 activation rows.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_iq4_nl_q8_0(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<IQ4NL>(n, w, acts, n_acts, out)
}
