//! AVX-512 VNNI kernels (at 256-bit width, AVX512VL) for the 32-element block formats against
//! Q8_0 activations: Q8_0, Q4_0 and Q5_0 weights. A one-row dot (the `VecDotFn`), a matvec
//! over [`ROWS`] rows at once (`RowsFn`) and a small-batch matmul (`ColsFn`).
//!
//! What AVX-512 brings here (besides 32 vector registers):
//! * `vpdpbusd` multiplies unsigned by signed bytes and adds groups of four straight into i32
//!   lanes, with no i16 step that could saturate. One side must be unsigned, so a signed side
//!   is shifted by a constant (Q8_0: x ^ 0x80 = x + 128; Q4_0/Q5_0 quants are stored with
//!   +8/+16 already) and the constant times the other side's sums is taken off, computed once
//!   where that other side is shared: once per activation block in the matvec (the shared
//!   activation is the signed side), once per weight block in the matmul (the activation is
//!   made unsigned as y ^ 0x80 and the shared weight, made signed, carries the correction).
//!   Both give the same exact integer in every lane: the dot of the 4 elements 4k..4k+3.
//! * Q5_0's 32 fifth bits are an `__mmask32`: one masked byte add merges them.
//!
//! Exactness: every (weight row, activation row) pair goes through the same float operations
//! in all three entry points: the per-block integer sums above (exact, in the same 8 lanes),
//! the scale product `f16(dx) * f16(dy)` (one f32 rounding, on a scalar or in a vector lane),
//! FMA into the even-block or odd-block accumulator, and the same final sum of lanes. So the
//! matvec and the matmul give the vec_dot's bits. The lanes are not those of the AVX2 kernels
//! (4 consecutive elements per lane here, two pairs 16 apart there), so this set's results
//! differ from the AVX2 set's in the last bits; both are within the summation-order bound of
//! the scalar twin, which core's tests check.
//!
//! Every function reads only whole blocks inside the slices; rows that the slices do not hold
//! in full are left as they are (the callers, `WeightKernel::matvec`/`matmul`, check shapes).
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA, F16C, AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (see
//! [`super::avx512_vnni_usable`]).

use super::avx2::*;
use super::avx2_q0::nibbles;
use core::arch::x86_64::*;

/// Weight rows that share one pass over the activation in the matvec.
pub const ROWS: usize = 4;

/// Activation rows dotted with one unpacked weight block in the matmul: 8 columns keep their
/// even and odd accumulators in 16 of the 32 registers.
pub const GROUP: usize = 8;

/// Weight rows dotted with every activation group before moving on (kept in L1).
const ROW_TILE: usize = 16;

/// Blocks per activation row whose scales are converted ahead into a stack buffer
/// (8192 columns; wider rows convert each scale where it is used, the same value).
const MAX_SCALED_BLOCKS: usize = 256;

/// One 32-element weight format, unpacked two ways.
trait Q0Format {
    /// Bytes per weight block.
    const W_BYTES: usize;
    /// What the unsigned form adds to each quant (see [`Q0Format::unsigned`]).
    const OFFSET: i8;
    /// The block's 32 quants as unsigned bytes, `quant + OFFSET` (for the matvec, where the
    /// shared activation is the signed side).
    unsafe fn unsigned(x: *const u8) -> __m256i;
    /// The block's 32 quants as signed bytes (for the matmul, where the activation is made
    /// the unsigned side).
    unsafe fn signed(x: *const u8) -> __m256i;
}

/// Q8_0: signed quants, -128 included.
struct Q80;

impl Q0Format for Q80 {
    const W_BYTES: usize = Q8_0_BYTES;
    const OFFSET: i8 = -128; // x ^ 0x80 = x + 128 (mod 256); -128 * 1 as the set1 byte 0x80

    #[inline(always)]
    unsafe fn unsigned(x: *const u8) -> __m256i {
        _mm256_xor_si256(load256(x.add(2)), _mm256_set1_epi8(-128))
    }

    #[inline(always)]
    unsafe fn signed(x: *const u8) -> __m256i {
        load256(x.add(2))
    }
}

/// Q4_0 (FIVE_BITS false) and Q5_0: quants stored as 0..15 / 0..31 for -8..7 / -16..15.
struct Q450<const FIVE_BITS: bool>;

impl<const FIVE_BITS: bool> Q0Format for Q450<FIVE_BITS> {
    const W_BYTES: usize = if FIVE_BITS { Q5_0_BYTES } else { Q4_0_BYTES };
    const OFFSET: i8 = if FIVE_BITS { 16 } else { 8 };

    #[inline(always)]
    unsafe fn unsigned(x: *const u8) -> __m256i {
        if FIVE_BITS {
            // Bit j of qh (bytes 2..6) is the fifth bit of element j, and element j is byte j.
            let qh = (x.add(2) as *const u32).read_unaligned();
            let low = nibbles(x.add(6));
            _mm256_mask_add_epi8(low, qh, low, _mm256_set1_epi8(16))
        } else {
            nibbles(x.add(2))
        }
    }

    #[inline(always)]
    unsafe fn signed(x: *const u8) -> __m256i {
        _mm256_sub_epi8(Self::unsigned(x), _mm256_set1_epi8(Self::OFFSET))
    }
}

/// `-(offset * (y[4k] + .. + y[4k+3]))` in lane k: what `vpdpbusd` over `quant + offset`
/// and `y` has too much. `offset_bytes` is the offset as bytes (Q8_0's 128 as 0x80).
#[inline(always)]
unsafe fn minus_offset_sums(offset_bytes: __m256i, signed: __m256i) -> __m256i {
    _mm256_sub_epi32(
        _mm256_setzero_si256(),
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset_bytes, signed),
    )
}

// ---------------------------------------------------------------------------------------------
// One row and the matvec: ROWS weight rows against one activation row.
// ---------------------------------------------------------------------------------------------

/// Block `i` of the R weight rows at `xs` (each `w_row` bytes after the previous) against the
/// activation row at `y`, into their even or odd accumulators.
#[inline(always)]
unsafe fn rows_block<K: Q0Format, const R: usize>(
    w_row: usize,
    i: usize,
    xs: &[*const u8; R],
    y: *const u8,
    acc: &mut [__m256; R],
) {
    let yb = y.add(i * Q8_0_BYTES);
    let dy = f16_at(yb);
    let yq = load256(yb.add(2));
    let correction = minus_offset_sums(_mm256_set1_epi8(K::OFFSET), yq);
    if R > 1 {
        // The R rows are consecutive in memory but read as R interleaved streams, which the
        // hardware prefetchers follow badly: fetch the next R rows ahead, as far into them
        // as this block is into these.
        let ahead = xs[0].wrapping_add(R * w_row + i * R * K::W_BYTES);
        for line in 0..(R * K::W_BYTES).div_ceil(64) {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * line) as *const i8);
        }
    }
    // The R rows' scale products, converted and multiplied together (lane by lane the
    // product of two scalars: the same rounding).
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
        let sumi = _mm256_dpbusd_epi32(correction, K::unsigned(x), yq);
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
    let w_row = nb * K::W_BYTES;
    let (mut even, mut odd) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
    let mut i = 0;
    while i + 2 <= nb {
        rows_block::<K, R>(w_row, i, &xs, y, &mut even);
        rows_block::<K, R>(w_row, i + 1, &xs, y, &mut odd);
        i += 2;
    }
    if i < nb {
        rows_block::<K, R>(w_row, i, &xs, y, &mut even);
    }
    let mut out = [0f32; R];
    for j in 0..R {
        out[j] = hsum_ps(_mm256_add_ps(even[j], odd[j]));
    }
    out
}

#[inline(always)]
unsafe fn vec_dot<K: Q0Format>(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK8_0)
        .min(w.len() / K::W_BYTES)
        .min(act.len() / Q8_0_BYTES);
    rows_dot::<K, 1>(nb, [w.as_ptr()], act.as_ptr())[0]
}

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
    let sign = _mm256_set1_epi8(-128);
    let wq = K::signed(x);
    // (y + 128) . w counts 128 times the weights' sums too much.
    let correction = minus_offset_sums(sign, wq);
    for j in 0..N {
        let d = _mm256_mul_ps(dx, act_scale::<PRE>(ys[j], dys[j], i));
        let yu = _mm256_xor_si256(load256(ys[j].add(i * Q8_0_BYTES + 2)), sign);
        let sumi = _mm256_dpbusd_epi32(correction, yu, wq);
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

/// Every weight row of a tile against `N` activation rows from `t`, into `out`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn cols_tile<K: Q0Format, const N: usize, const PRE: bool>(
    nb: usize,
    rows: core::ops::Range<usize>,
    x: impl Fn(usize) -> *const u8,
    y: impl Fn(usize) -> *const u8,
    dy: impl Fn(usize) -> *const f32,
    t: usize,
    n_rows: usize,
    out: &mut [f32],
) {
    let ys: [*const u8; N] = core::array::from_fn(|j| y(t + j));
    let dys: [*const f32; N] = core::array::from_fn(&dy);
    for r in rows {
        let v = cols_dot::<K, N, PRE>(nb, x(r), ys, dys);
        for (j, &v) in v.iter().enumerate() {
            out[(t + j) * n_rows + r] = v;
        }
    }
}

/// Every weight row against every activation row: tiles of ROW_TILE weight rows, each against
/// the activation groups of GROUP rows (a tail group of 1..GROUP-1 rows takes its own form).
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
            let base = scales.as_ptr();
            let dy = |j: usize| base.add(j * MAX_SCALED_BLOCKS);
            let rows = rows.clone();
            match g {
                8 => cols_tile::<K, 8, PRE>(nb, rows, x, y, dy, t, n_rows, out),
                7 => cols_tile::<K, 7, PRE>(nb, rows, x, y, dy, t, n_rows, out),
                6 => cols_tile::<K, 6, PRE>(nb, rows, x, y, dy, t, n_rows, out),
                5 => cols_tile::<K, 5, PRE>(nb, rows, x, y, dy, t, n_rows, out),
                4 => cols_tile::<K, 4, PRE>(nb, rows, x, y, dy, t, n_rows, out),
                3 => cols_tile::<K, 3, PRE>(nb, rows, x, y, dy, t, n_rows, out),
                2 => cols_tile::<K, 2, PRE>(nb, rows, x, y, dy, t, n_rows, out),
                _ => cols_tile::<K, 1, PRE>(nb, rows, x, y, dy, t, n_rows, out),
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

macro_rules! entry_points {
    ($fmt:ty, $vec_dot:ident, $matvec:ident, $matmul:ident, $name:literal) => {
        #[doc = concat!($name, " weights . one Q8_0 activation row.")]
        ///
        /// # Safety
        /// The CPU features of the module docs must be available.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub unsafe fn $vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
            vec_dot::<$fmt>(n, w, act)
        }

        #[doc = concat!($name, " weight rows . one Q8_0 activation row, ROWS rows at a time.")]
        ///
        /// # Safety
        /// The CPU features of the module docs must be available.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub unsafe fn $matvec(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
            matvec::<$fmt>(n, w, act, out)
        }

        #[doc = concat!($name, " weights x Q8_0 activation rows.")]
        ///
        /// # Safety
        /// The CPU features of the module docs must be available.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub unsafe fn $matmul(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
            matmul::<$fmt>(n, w, acts, n_acts, out)
        }
    };
}

entry_points!(
    Q80,
    vec_dot_q8_0_q8_0,
    matvec_q8_0_q8_0,
    matmul_q8_0_q8_0,
    "Q8_0"
);
entry_points!(
    Q450<false>,
    vec_dot_q4_0_q8_0,
    matvec_q4_0_q8_0,
    matmul_q4_0_q8_0,
    "Q4_0"
);
entry_points!(
    Q450<true>,
    vec_dot_q5_0_q8_0,
    matvec_q5_0_q8_0,
    matmul_q5_0_q8_0,
    "Q5_0"
);
