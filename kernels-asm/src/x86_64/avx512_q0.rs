//! AVX-512 VNNI kernels for the 32-element block formats against Q8_0 activations: Q8_0,
//! Q4_0 and Q5_0 weights. A one-row dot (the `VecDotFn`) and a matvec over [`ROWS`] rows at
//! once (`RowsFn`) at 256-bit width (AVX512VL), and a small-batch matmul (`ColsFn`) at 512-bit
//! width, two blocks per register, on tiles of 2 weight rows x 8 activation rows.
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
//! * Q5_0's 32 fifth bits are an `__mmask32` (two blocks': an `__mmask64`): one masked byte
//!   add (or subtract) merges them.
//!
//! Exactness: every (weight row, activation row) pair goes through the same float operations
//! in all three entry points: the per-block integer sums above (exact, in the same 8 lanes),
//! the scale product `f16(dx) * f16(dy)` (one f32 rounding, on a scalar or in a vector lane),
//! FMA into the even-block or odd-block accumulator (in the matmul: the low or the high half of
//! one 512-bit accumulator), and the same final sum of lanes. So the matvec and the matmul
//! give the vec_dot's bits. The lanes are not those of the AVX2 kernels
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

/// One 32-element weight format.
trait Q0Format {
    /// Bytes per weight block.
    const W_BYTES: usize;
    /// What the unsigned form adds to each quant (see [`Q0Format::unsigned`]).
    const OFFSET: i8;
    /// The block's 32 quants as unsigned bytes, `quant + OFFSET` (for the matvec, where the
    /// shared activation is the signed side; the matmul unpacks two blocks at once in
    /// [`signed_pair`]).
    unsafe fn unsigned(x: *const u8) -> __m256i;
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
// Matmul: weight rows against a batch of activation rows, two blocks per 512-bit register.
//
// A zmm register holds blocks 2p and 2p+1 (the "pair" p): its low 8 lanes are exactly the
// decode's even-block lanes and its high 8 lanes the odd-block ones, so one 512-bit
// accumulator per (row, column) is the decode's even and odd accumulators side by side, fed
// the same products in the same order; the final `even + odd` adds its two halves.
// ---------------------------------------------------------------------------------------------

/// 64-byte vectors of packed activations kept on the stack (128 KiB): every activation row of
/// a batch of 32 fits for rows of up to 2048 elements; longer rows go in panels of fewer.
const PACK_VECS: usize = 2048;

/// Activation rows (columns of the output) that share one unpacked weight pair: 8 columns of
/// 2 rows keep their 16 accumulators and the operands in the 32 registers.
const GROUP: usize = 8;

/// Weight rows swept by every column group of a panel before moving on (they stay in L1).
const ROW_TILE: usize = 16;

/// The 16 nibble bytes at `q0` and at `q1` as 32 quants 0..15 each, in [`nibbles`]' order
/// (the low nibbles, then the high ones): `q0`'s in the low 256 bits, `q1`'s in the high.
#[inline(always)]
unsafe fn pair_nibbles(q0: *const u8, q1: *const u8) -> __m512i {
    let both = _mm512_inserti64x4::<1>(
        _mm512_castsi256_si512(_mm256_broadcastsi128_si256(load128(q0))),
        _mm256_broadcastsi128_si256(load128(q1)),
    );
    let shifted = _mm512_srlv_epi64(both, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
    _mm512_and_si512(shifted, _mm512_set1_epi8(0x0F))
}

/// The f16 scales at `b0` and `b1` as f32: `b0`'s in the low 8 lanes, `b1`'s in the high 8.
#[inline(always)]
unsafe fn scale_pair(b0: *const u8, b1: *const u8) -> __m512 {
    let bits = (b0 as *const u16).read_unaligned() as u32
        | ((b1 as *const u16).read_unaligned() as u32) << 16;
    let two = _mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32));
    let lanes = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm512_permutexvar_ps(lanes, _mm512_castps128_ps512(two))
}

/// The weight blocks at `x0` and `x1` as signed quants (`x0`'s in the low 256 bits).
#[inline(always)]
unsafe fn signed_pair<K: Q0Format>(x0: *const u8, x1: *const u8) -> __m512i {
    match K::W_BYTES {
        Q8_0_BYTES => _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(load256(x0.add(2))),
            load256(x1.add(2)),
        ),
        Q4_0_BYTES => _mm512_sub_epi8(
            pair_nibbles(x0.add(2), x1.add(2)),
            _mm512_set1_epi8(K::OFFSET),
        ),
        _ => {
            // Q5_0: quant = nibble + 16 * fifth bit - 16, so 16 comes off where the bit is 0.
            let low = pair_nibbles(x0.add(6), x1.add(6));
            let qh = (x0.add(2) as *const u32).read_unaligned() as u64
                | ((x1.add(2) as *const u32).read_unaligned() as u64) << 32;
            _mm512_mask_sub_epi8(low, !qh, low, _mm512_set1_epi8(16))
        }
    }
}

/// One weight row's pair, unpacked once for every column of a group.
#[derive(Clone, Copy)]
struct WeightPair {
    /// Signed quants of the two blocks.
    quants: __m512i,
    /// `-128 * (w[4k] + .. + w[4k+3])` per lane: what `vpdpbusd` over `y + 128` has too much.
    correction: __m512i,
    /// The two blocks' scales (8 lanes each).
    scales: __m512,
}

#[inline(always)]
unsafe fn weight_pair<K: Q0Format>(x0: *const u8, x1: *const u8) -> WeightPair {
    let quants = signed_pair::<K>(x0, x1);
    let sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(-128), quants);
    WeightPair {
        quants,
        correction: _mm512_sub_epi32(_mm512_setzero_si512(), sums),
        scales: scale_pair(x0, x1),
    }
}

/// Packs the activation row `y` of `nb` blocks into `dst`: per pair of blocks, one vector of
/// its 64 quants made unsigned (`y ^ 0x80 = y + 128`) and one of its two scales as f32 (8
/// lanes each). An odd last block is paired with itself; the matmul uses only its low half.
#[inline(always)]
unsafe fn pack_activation(nb: usize, y: *const u8, dst: *mut __m512i) {
    let sign = _mm512_set1_epi8(-128);
    for p in 0..nb.div_ceil(2) {
        let b0 = y.add(2 * p * Q8_0_BYTES);
        let b1 = if 2 * p + 1 < nb {
            b0.add(Q8_0_BYTES)
        } else {
            b0
        };
        let quants = _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(load256(b0.add(2))),
            load256(b1.add(2)),
        );
        _mm512_store_si512(dst.add(2 * p), _mm512_xor_si512(quants, sign));
        _mm512_store_ps(dst.add(2 * p + 1) as *mut f32, scale_pair(b0, b1));
    }
}

/// `acc[r][c] += d * sumi` for the weight pairs `w` against column `c`'s packed pair at
/// `col`; only the low (even-block) lanes when `LOW_ONLY`.
#[inline(always)]
unsafe fn pair_step<const R: usize, const LOW_ONLY: bool>(
    w: &[WeightPair; R],
    col: *const __m512i,
    acc: &mut [__m512; R],
) {
    let yu = _mm512_load_si512(col);
    let dy = _mm512_load_ps(col.add(1) as *const f32);
    for r in 0..R {
        let sumi = _mm512_dpbusd_epi32(w[r].correction, yu, w[r].quants);
        let d = _mm512_mul_ps(w[r].scales, dy);
        acc[r] = if LOW_ONLY {
            _mm512_mask3_fmadd_ps(d, _mm512_cvtepi32_ps(sumi), acc[r], 0x00FF)
        } else {
            _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi), acc[r])
        };
    }
}

/// The R weight rows at `xs` against the N packed columns at `cols` (each `col_vecs` vectors
/// after the previous): `[row][column]` dots, in the decode's float order.
#[inline(always)]
unsafe fn tile<K: Q0Format, const R: usize, const N: usize>(
    nb: usize,
    xs: [*const u8; R],
    cols: *const __m512i,
    col_vecs: usize,
) -> [[f32; N]; R] {
    let mut acc = [[_mm512_setzero_ps(); R]; N];
    let zero = WeightPair {
        quants: _mm512_setzero_si512(),
        correction: _mm512_setzero_si512(),
        scales: _mm512_setzero_ps(),
    };
    // (Plain loops: a closure would not inherit the target features, and its intrinsics
    // would become calls.)
    let mut w = [zero; R];
    for p in 0..nb / 2 {
        for r in 0..R {
            let x0 = xs[r].add(2 * p * K::W_BYTES);
            w[r] = weight_pair::<K>(x0, x0.add(K::W_BYTES));
        }
        for (c, acc) in acc.iter_mut().enumerate() {
            pair_step::<R, false>(&w, cols.add(c * col_vecs + 2 * p), acc);
        }
    }
    if nb % 2 == 1 {
        let p = nb / 2;
        for r in 0..R {
            let x0 = xs[r].add(2 * p * K::W_BYTES);
            w[r] = weight_pair::<K>(x0, x0);
        }
        for (c, acc) in acc.iter_mut().enumerate() {
            pair_step::<R, true>(&w, cols.add(c * col_vecs + 2 * p), acc);
        }
    }
    let mut out = [[0f32; N]; R];
    for (c, acc) in acc.iter().enumerate() {
        for r in 0..R {
            let even = _mm512_castps512_ps256(acc[r]);
            let odd = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc[r])));
            out[r][c] = hsum_ps(_mm256_add_ps(even, odd));
        }
    }
    out
}

/// Weight rows `rows` (two at a time, then a last odd one) against N packed columns, the
/// first of them activation row `t`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_tile<K: Q0Format, const N: usize>(
    nb: usize,
    rows: core::ops::Range<usize>,
    x: impl Fn(usize) -> *const u8,
    cols: *const __m512i,
    col_vecs: usize,
    t: usize,
    n_rows: usize,
    out: &mut [f32],
) {
    let mut r = rows.start;
    while r + 2 <= rows.end {
        let v = tile::<K, 2, N>(nb, [x(r), x(r + 1)], cols, col_vecs);
        for (j, v) in v.iter().enumerate() {
            for (c, &v) in v.iter().enumerate() {
                out[(t + c) * n_rows + r + j] = v;
            }
        }
        r += 2;
    }
    if r < rows.end {
        let v = tile::<K, 1, N>(nb, [x(r)], cols, col_vecs);
        for (c, &v) in v[0].iter().enumerate() {
            out[(t + c) * n_rows + r] = v;
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
    let (w_row, a_row) = (nb * K::W_BYTES, nb * Q8_0_BYTES);
    if w.len() < n_rows * w_row || acts.len() < n_acts * a_row {
        // The caller (WeightKernel::matmul) checked the shapes; never read past the slices.
        return;
    }
    let col_vecs = 2 * nb.div_ceil(2).max(1);
    let fit = PACK_VECS / col_vecs;
    if fit == 0 {
        // Rows of more than 65536 elements: one matvec per activation row (the same bits).
        for t in 0..n_acts {
            let act = &acts[t * a_row..(t + 1) * a_row];
            matvec::<K>(n, w, act, &mut out[t * n_rows..(t + 1) * n_rows]);
        }
        return;
    }
    // Columns per panel: whole groups when at least one fits.
    let panel = if fit >= GROUP {
        fit / GROUP * GROUP
    } else {
        fit
    };
    let mut packed = core::mem::MaybeUninit::<[__m512i; PACK_VECS]>::uninit();
    let packed = packed.as_mut_ptr() as *mut __m512i;
    let x = |r: usize| w.as_ptr().add(r * w_row);
    let mut t0 = 0;
    while t0 < n_acts {
        let n_cols = (n_acts - t0).min(panel);
        for c in 0..n_cols {
            let y = acts.as_ptr().add((t0 + c) * a_row);
            pack_activation(nb, y, packed.add(c * col_vecs));
        }
        for r0 in (0..n_rows).step_by(ROW_TILE) {
            let rows = r0..(r0 + ROW_TILE).min(n_rows);
            let mut g0 = 0;
            while g0 < n_cols {
                let g = (n_cols - g0).min(GROUP);
                let cols = packed.add(g0 * col_vecs) as *const __m512i;
                let (rows, t) = (rows.clone(), t0 + g0);
                match g {
                    8 => rows_tile::<K, 8>(nb, rows, x, cols, col_vecs, t, n_rows, out),
                    7 => rows_tile::<K, 7>(nb, rows, x, cols, col_vecs, t, n_rows, out),
                    6 => rows_tile::<K, 6>(nb, rows, x, cols, col_vecs, t, n_rows, out),
                    5 => rows_tile::<K, 5>(nb, rows, x, cols, col_vecs, t, n_rows, out),
                    4 => rows_tile::<K, 4>(nb, rows, x, cols, col_vecs, t, n_rows, out),
                    3 => rows_tile::<K, 3>(nb, rows, x, cols, col_vecs, t, n_rows, out),
                    2 => rows_tile::<K, 2>(nb, rows, x, cols, col_vecs, t, n_rows, out),
                    _ => rows_tile::<K, 1>(nb, rows, x, cols, col_vecs, t, n_rows, out),
                }
                g0 += g;
            }
        }
        t0 += n_cols;
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
