//! AVX-512 VNNI Q4_K and Q6_K kernels: the one-row dot product (`VecDotFn`, decode) and the
//! batched matmul over a prompt's tokens (`ColsFn`), giving the same bits.
//!
//! The batched kernel puts TOKENS in the vector lanes. The activation rows of up to 32 tokens
//! are transposed once per call into "packed" vectors: vector k of block i holds dword k of
//! block i of 16 tokens, one per lane (a Q8_K block is exactly 73 dwords: the f32 scale, 64
//! dwords of quants, 8 dwords of bsums). A weight row's block is unpacked once into 256 bytes
//! on the stack, and each dword of it (4 quants) is broadcast against a packed vector with one
//! `vpdpbusd`: 16 tokens x 4 multiply-adds, the weight (0..15 or 0..63) the unsigned side,
//! the raw activation the signed side. Each lane then accumulates a whole sub-block of one
//! (row, token) pair, so the sub-block's scale costs one `vpmulld` per 16 tokens, where a
//! file-layout kernel (lanes = elements) multiplies every 4 elements by the scale. Register
//! tile: 4 weight rows x 32 tokens (2 vectors) per broadcast.
//!
//! Exactness: both entry points compute, per (row, token, block), the same exact integers
//! S = sum over sub-blocks of scale x (quants . activations), with Q6_K's -32 offset folded in
//! through the bsums, and for Q4_K M = sum of min x (bsum pair); then the same float
//! operations in the same order: dd = f16(d) * d_act (one rounding), acc = fma(dd, f32(S),
//! acc), for Q4_K also accm = fma(f16(dmin) * d_act, f32(M), accm), blocks in order; the
//! result is acc (Q6_K) or acc - accm (Q4_K). The one-row dot gets S by a file-layout
//! `vpdpbusd` (lanes = 4 elements), `vpdpwssd` by the scales and a horizontal integer sum
//! (four blocks' sums at once: that horizontal step is what the AVX2 dots, which keep 8 float
//! lanes, do not pay, and decode is about 8% more CPU time than with them), the batched kernel
//! in token lanes; integer sums do not depend on the order, so every batched
//! output is bit for bit the one-row dot. These lanes are not the AVX2 kernels' (8 float lanes
//! per row), so this set differs from the AVX2 set in the last bits; both stay within the
//! summation-order bound of the scalar twins, which core's tests check.
//!
//! Every function reads only whole blocks inside the slices (the packing loads of the last
//! dwords of a block are masked).
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA, F16C, AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (see
//! [`super::avx512_vnni_usable`]).

use super::avx2::*;
use super::avx2_k::q4_k_scales_mins;
use core::arch::x86_64::*;

/// Tokens per packed vector (one per 32-bit lane).
const LANES: usize = 16;

/// Dwords in one Q8_K block (f32 scale, 256 quants, 16 i16 bsums).
const DWORDS: usize = Q8_K_BYTES / 4;
/// Where the quants and the bsums start, in dwords.
const QS_DWORD: usize = Q8_K_QS / 4;
const BSUMS_DWORD: usize = Q8_K_BSUMS / 4;

/// Blocks packed at once (8 blocks x 73 dwords x 32 tokens: 75 KB of stack). Rows longer than
/// this are run in chunks of blocks, the float accumulators kept between chunks.
const K_CHUNK: usize = 8;

/// Weight rows whose accumulators are kept (in a stack buffer) across the chunks of blocks.
const ROW_TILE: usize = 64;

/// Weight rows sharing one pass over the packed activations (register tile).
const ROWS: usize = 4;

/// Below this many tokens the packing does not pay: the pairs run through the one-row dot
/// (the same bits by definition).
const MIN_PACKED_TOKENS: usize = 4;

/// One weight block unpacked for the batched kernel: its 256 quants as unsigned bytes in
/// element order, one i32 scale per sub-block, the i16 pairs that meet the bsums (Q4_K: the
/// min twice; Q6_K: -32 x scale of two 16-element sub-blocks), and the f16 factors.
#[repr(C, align(64))]
struct Unpacked {
    q: [u8; 256],
    sc: [i32; 16],
    pairs: [i32; 16],
    d: f32,
    dmin: f32,
}

const EMPTY: Unpacked = Unpacked {
    q: [0; 256],
    sc: [0; 16],
    pairs: [0; 16],
    d: 0.0,
    dmin: 0.0,
};

/// One K-quant weight format against Q8_K activations.
trait KFormat {
    /// Bytes per weight block.
    const W_BYTES: usize;
    /// Elements per scale (Q4_K: 32, Q6_K: 16).
    const SUB: usize;
    /// Q4_K's mins: a second accumulator, subtracted at the end.
    const MINS: bool;
    /// Unpacks the block at `x` for the batched kernel.
    unsafe fn unpack(x: *const u8, u: &mut Unpacked);
    /// The block at `x` against a Q8_K block's quants `yq` (4 x 64) and bsums: lanes 0..8
    /// sum to S, lanes 8..16 to M (0 without mins), exact integers (module docs), in the
    /// file-layout lanes of the one-row dots.
    unsafe fn block_vecs(x: *const u8, yq: &[__m512i; 4], bsums: __m256i) -> __m512i;
    /// The block's f16 factors (d, dmin) as f32.
    unsafe fn factors(x: *const u8) -> (f32, f32);
}

/// (S, M) from a `block_vecs` vector: three butterfly steps inside each 256-bit half.
#[inline(always)]
unsafe fn reduce1(x: __m512i) -> (i32, i32) {
    let x = _mm512_add_epi32(x, _mm512_shuffle_i32x4::<0b10_11_00_01>(x, x));
    let x = _mm512_add_epi32(x, _mm512_shuffle_epi32::<0b01_00_11_10>(x));
    let x = _mm512_add_epi32(x, _mm512_shuffle_epi32::<0b10_11_00_01>(x));
    (
        _mm_cvtsi128_si32(_mm512_castsi512_si128(x)),
        _mm_cvtsi128_si32(_mm512_extracti32x4_epi32::<2>(x)),
    )
}

/// The (S, M) of four `block_vecs` vectors at once: S of x[r] in lane r, M in lane 8 + r.
#[inline(always)]
unsafe fn reduce4(x: &[__m512i; 4]) -> [i32; 16] {
    let add = _mm512_add_epi32;
    // Per 128-bit lane: [x0 0+2, x1 0+2, x0 1+3, x1 1+3], then the four rows' lane sums.
    let a = add(
        _mm512_unpacklo_epi32(x[0], x[1]),
        _mm512_unpackhi_epi32(x[0], x[1]),
    );
    let b = add(
        _mm512_unpacklo_epi32(x[2], x[3]),
        _mm512_unpackhi_epi32(x[2], x[3]),
    );
    let c = add(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
    let c = add(c, _mm512_shuffle_i32x4::<0b10_11_00_01>(c, c));
    let mut out = [0i32; 16];
    _mm512_storeu_si512(out.as_mut_ptr() as *mut _, c);
    out
}

/// The 32 bytes at `p` in both 256-bit halves.
#[inline(always)]
unsafe fn load256_twice(p: *const u8) -> __m512i {
    _mm512_broadcast_i64x4(load256(p))
}

#[inline(always)]
unsafe fn load512(p: *const u8) -> __m512i {
    _mm512_loadu_si512(p as *const _)
}

/// Q4_K chunk c (32 bytes at `p`) as 64 quants: low nibbles (sub-block 2c) in the low half,
/// high nibbles (sub-block 2c + 1) in the high half.
#[inline(always)]
unsafe fn q4_k_chunk(p: *const u8) -> __m512i {
    let shift = _mm512_inserti64x4::<1>(_mm512_setzero_si512(), _mm256_set1_epi16(4));
    _mm512_and_si512(
        _mm512_srlv_epi16(load256_twice(p), shift),
        _mm512_set1_epi8(0x0F),
    )
}

/// Q6_K half h (at `x`): elements 128h .. 128h + 64 and 128h + 64 .. 128h + 128 as unsigned
/// 0..63 (the layout in `smolrun_core::quant::q6_k`'s docs).
#[inline(always)]
unsafe fn q6_k_half(x: *const u8, h: usize) -> (__m512i, __m512i) {
    let low4 = _mm512_set1_epi8(0x0F);
    let bits45 = _mm512_set1_epi8(0x30);
    let ql = load512(x.add(64 * h));
    let qh = load256_twice(x.add(128 + 32 * h));
    let halves = |lo: i16, hi: i16| {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_set1_epi16(lo)),
            _mm256_set1_epi16(hi),
        )
    };
    // Quarters 0 and 1 take qh bits 0-1 and 2-3 to bits 4-5; quarters 2 and 3 bits 4-5 (in
    // place) and 6-7. 16-bit shifts move bits across bytes only outside the kept bits 4-5.
    let q01 = _mm512_or_si512(
        _mm512_and_si512(ql, low4),
        _mm512_and_si512(_mm512_sllv_epi16(qh, halves(4, 2)), bits45),
    );
    let q23 = _mm512_or_si512(
        _mm512_and_si512(_mm512_srli_epi16::<4>(ql), low4),
        _mm512_and_si512(_mm512_srlv_epi16(qh, halves(0, 2)), bits45),
    );
    (q01, q23)
}

/// Lane l of the result is lane `idx[l]` of `v`.
#[inline(always)]
unsafe fn spread(v: __m512i, idx: [i32; 16]) -> __m512i {
    _mm512_permutexvar_epi32(_mm512_loadu_si512(idx.as_ptr() as *const _), v)
}

struct Q4K;

impl KFormat for Q4K {
    const W_BYTES: usize = Q4_K_BYTES;
    const SUB: usize = 32;
    const MINS: bool = true;

    #[inline(always)]
    unsafe fn unpack(x: *const u8, u: &mut Unpacked) {
        for c in 0..4 {
            _mm512_storeu_si512(
                u.q.as_mut_ptr().add(64 * c) as *mut _,
                q4_k_chunk(x.add(16 + 32 * c)),
            );
        }
        // Scales 0..7 then mins 0..7 as i32; pair j = min j in both i16 halves (bsum dword
        // j holds bsums 2j and 2j + 1, the two halves of sub-block j).
        let scmn = _mm512_cvtepu8_epi32(q4_k_scales_mins(x.add(4)));
        _mm512_storeu_si512(u.sc.as_mut_ptr() as *mut _, scmn);
        let pairs = _mm512_or_si512(scmn, _mm512_slli_epi32::<16>(scmn));
        _mm512_storeu_si512(
            u.pairs.as_mut_ptr() as *mut _,
            _mm512_alignr_epi32::<8>(pairs, pairs),
        );
        (u.d, u.dmin) = Self::factors(x);
    }

    #[inline(always)]
    unsafe fn block_vecs(x: *const u8, yq: &[__m512i; 4], bsums: __m256i) -> __m512i {
        let scmn = q4_k_scales_mins(x.add(4));
        // Scales zero-extended to i32: as i16 pairs (scale, 0) for vpdpwssd.
        let sc32 = _mm512_cvtepu8_epi32(scmn);
        let mut acc = _mm512_setzero_si512();
        for (c, &y) in yq.iter().enumerate() {
            let q = q4_k_chunk(x.add(16 + 32 * c));
            // |lane| <= 4 * 15 * 128: an i16, so (lane, sign) x (scale, 0) is lane x scale.
            let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, y);
            let s = 2 * c as i32;
            let sc = spread(
                sc32,
                [
                    s,
                    s,
                    s,
                    s,
                    s,
                    s,
                    s,
                    s,
                    s + 1,
                    s + 1,
                    s + 1,
                    s + 1,
                    s + 1,
                    s + 1,
                    s + 1,
                    s + 1,
                ],
            );
            acc = _mm512_dpwssd_epi32(acc, p, sc);
        }
        // Mins as i16 pairs (m0, m0, m1, m1, ...) against the 16 bsums.
        let mins16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(
            scmn,
            _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15),
        ));
        let m = _mm256_madd_epi16(bsums, mins16);
        // S's lanes folded into the low half, M's in the high half.
        let s8 = _mm256_add_epi32(
            _mm512_castsi512_si256(acc),
            _mm512_extracti64x4_epi64::<1>(acc),
        );
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(s8), m)
    }

    #[inline(always)]
    unsafe fn factors(x: *const u8) -> (f32, f32) {
        let dd =
            _mm_cvtph_ps(_mm_cvtsi32_si128(
                u32::from_le_bytes([*x, *x.add(1), *x.add(2), *x.add(3)]) as i32,
            ));
        (_mm_cvtss_f32(dd), _mm_cvtss_f32(_mm_movehdup_ps(dd)))
    }
}

struct Q6K;

impl KFormat for Q6K {
    const W_BYTES: usize = Q6_K_BYTES;
    const SUB: usize = 16;
    const MINS: bool = false;

    #[inline(always)]
    unsafe fn unpack(x: *const u8, u: &mut Unpacked) {
        for h in 0..2 {
            let (q01, q23) = q6_k_half(x, h);
            _mm512_storeu_si512(u.q.as_mut_ptr().add(128 * h) as *mut _, q01);
            _mm512_storeu_si512(u.q.as_mut_ptr().add(128 * h + 64) as *mut _, q23);
        }
        let scales = load128(x.add(192));
        _mm512_storeu_si512(u.sc.as_mut_ptr() as *mut _, _mm512_cvtepi8_epi32(scales));
        // -32 x scale as i16; dword j = (sub-blocks 2j, 2j + 1), as bsum dword j.
        let minus32 = _mm256_sub_epi16(
            _mm256_setzero_si256(),
            _mm256_slli_epi16::<5>(_mm256_cvtepi8_epi16(scales)),
        );
        _mm256_storeu_si256(u.pairs.as_mut_ptr() as *mut _, minus32);
        (u.d, u.dmin) = Self::factors(x);
    }

    #[inline(always)]
    unsafe fn block_vecs(x: *const u8, yq: &[__m512i; 4], bsums: __m256i) -> __m512i {
        let scales = load128(x.add(192));
        let sc16 = _mm256_cvtepi8_epi16(scales);
        // Scales as i16 zero-extended to i32: pairs (scale, 0) for vpdpwssd.
        let sc32 = _mm512_cvtepu16_epi32(sc16);
        let mut acc = _mm512_setzero_si512();
        for h in 0..2 {
            let (q01, q23) = q6_k_half(x, h);
            for (k, q) in [q01, q23].into_iter().enumerate() {
                // |lane| <= 4 * 63 * 128 < 2^15: an i16.
                let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, yq[2 * h + k]);
                // Lanes 4j..4j+3 of quarter pair (h, k) belong to sub-block 8h + 4k + j.
                let b = (8 * h + 4 * k) as i32;
                let sc = spread(
                    sc32,
                    [
                        b,
                        b,
                        b,
                        b,
                        b + 1,
                        b + 1,
                        b + 1,
                        b + 1,
                        b + 2,
                        b + 2,
                        b + 2,
                        b + 2,
                        b + 3,
                        b + 3,
                        b + 3,
                        b + 3,
                    ],
                );
                acc = _mm512_dpwssd_epi32(acc, p, sc);
            }
        }
        // sum (q - 32) y = sum q y - 32 sum_j scale_j bsum_j, the second term added into the
        // low lanes (bsum pairs against -32 x scale pairs).
        let minus32 = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16::<5>(sc16));
        let acc = _mm512_dpwssd_epi32(
            acc,
            _mm512_zextsi256_si512(bsums),
            _mm512_zextsi256_si512(minus32),
        );
        let s8 = _mm256_add_epi32(
            _mm512_castsi512_si256(acc),
            _mm512_extracti64x4_epi64::<1>(acc),
        );
        _mm512_zextsi256_si512(s8)
    }

    #[inline(always)]
    unsafe fn factors(x: *const u8) -> (f32, f32) {
        (f16_at(x.add(208)), 0.0)
    }
}

// ---------------------------------------------------------------------------------------------
// One row (decode).
// ---------------------------------------------------------------------------------------------

/// `acc + a * b` with one rounding, as `_mm512_fmadd_ps` does in every lane.
#[inline(always)]
unsafe fn fma1(a: f32, b: f32, acc: f32) -> f32 {
    _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(acc)))
}

#[inline(always)]
unsafe fn vec_dot<K: KFormat>(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / K::W_BYTES)
        .min(act.len() / Q8_K_BYTES);
    dot_row::<K>(nb, w.as_ptr(), act.as_ptr())
}

/// The Q8_K block at `y`: its quants as 4 vectors of 64, its bsums, its scale.
#[inline(always)]
unsafe fn act_block(y: *const u8) -> ([__m512i; 4], __m256i, f32) {
    let yq = [
        load512(y.add(Q8_K_QS)),
        load512(y.add(Q8_K_QS + 64)),
        load512(y.add(Q8_K_QS + 128)),
        load512(y.add(Q8_K_QS + 192)),
    ];
    (yq, load256(y.add(Q8_K_BSUMS)), f32_at(y))
}

/// `block_vecs` of the blocks at `x` and `y`, the weights prefetched 4 KB ahead.
#[inline(always)]
unsafe fn block_vecs_at<K: KFormat>(x: *const u8, y: *const u8) -> __m512i {
    let p = x.wrapping_add(4096) as *const i8;
    for line in 0..K::W_BYTES.div_ceil(64) {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64 * line));
    }
    let (yq, bsums, _) = act_block(y);
    K::block_vecs(x, &yq, bsums)
}

/// One weight row against one activation row, blocks in order; the integers of four blocks
/// reduced together (`reduce4`), then their float operations one block after the other.
#[inline(always)]
unsafe fn dot_row<K: KFormat>(nb: usize, xr: *const u8, yr: *const u8) -> f32 {
    let (mut acc, mut accm) = (0f32, 0f32);
    let x = |i: usize| xr.add(i * K::W_BYTES);
    let y = |i: usize| yr.add(i * Q8_K_BYTES);
    let mut step = |i: usize, s: i32, m: i32| {
        let (d, dmin) = K::factors(x(i));
        let dy = f32_at(y(i));
        acc = fma1(d * dy, s as f32, acc);
        if K::MINS {
            accm = fma1(dmin * dy, m as f32, accm);
        }
    };
    let vecs = |i: usize| block_vecs_at::<K>(x(i), y(i));
    let mut i = 0;
    while i + 4 <= nb {
        let sm = reduce4(&[vecs(i), vecs(i + 1), vecs(i + 2), vecs(i + 3)]);
        for j in 0..4 {
            step(i + j, sm[j], sm[8 + j]);
        }
        i += 4;
    }
    while i < nb {
        let (s, m) = reduce1(vecs(i));
        step(i, s, m);
        i += 1;
    }
    if K::MINS {
        acc - accm
    } else {
        acc
    }
}

#[inline(always)]
unsafe fn matvec<K: KFormat>(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
    let nb = n / QK_K;
    let w_row = nb * K::W_BYTES;
    let n_rows = out.len();
    if w.len() < n_rows * w_row || act.len() < nb * Q8_K_BYTES {
        // The caller (WeightKernel::matvec) checked the shapes; never read past the slices.
        return;
    }
    for (r, o) in out.iter_mut().enumerate() {
        *o = dot_row::<K>(nb, w.as_ptr().add(r * w_row), act.as_ptr());
    }
}

// ---------------------------------------------------------------------------------------------
// Batched: tokens in the lanes.
// ---------------------------------------------------------------------------------------------

/// Transposes 16 rows of 16 dwords: `out[k]` lane t = `rows[t]` dword k.
#[inline(always)]
unsafe fn transpose16(r: [__m512i; 16]) -> [__m512i; 16] {
    let mut a = [_mm512_setzero_si512(); 16];
    for j in 0..8 {
        a[2 * j] = _mm512_unpacklo_epi32(r[2 * j], r[2 * j + 1]);
        a[2 * j + 1] = _mm512_unpackhi_epi32(r[2 * j], r[2 * j + 1]);
    }
    // b[4j + m], 128-bit lane L: tokens 4j..4j+3 of dword 4L + m.
    let mut b = [_mm512_setzero_si512(); 16];
    for j in 0..4 {
        b[4 * j] = _mm512_unpacklo_epi64(a[4 * j], a[4 * j + 2]);
        b[4 * j + 1] = _mm512_unpackhi_epi64(a[4 * j], a[4 * j + 2]);
        b[4 * j + 2] = _mm512_unpacklo_epi64(a[4 * j + 1], a[4 * j + 3]);
        b[4 * j + 3] = _mm512_unpackhi_epi64(a[4 * j + 1], a[4 * j + 3]);
    }
    // Dword 4L + m: 128-bit lane L of b[m], b[4 + m], b[8 + m], b[12 + m].
    let mut out = [_mm512_setzero_si512(); 16];
    for m in 0..4 {
        let c0 = _mm512_shuffle_i32x4::<0b01_00_01_00>(b[m], b[4 + m]);
        let c1 = _mm512_shuffle_i32x4::<0b11_10_11_10>(b[m], b[4 + m]);
        let c2 = _mm512_shuffle_i32x4::<0b01_00_01_00>(b[8 + m], b[12 + m]);
        let c3 = _mm512_shuffle_i32x4::<0b11_10_11_10>(b[8 + m], b[12 + m]);
        out[m] = _mm512_shuffle_i32x4::<0b10_00_10_00>(c0, c2);
        out[4 + m] = _mm512_shuffle_i32x4::<0b11_01_11_01>(c0, c2);
        out[8 + m] = _mm512_shuffle_i32x4::<0b10_00_10_00>(c1, c3);
        out[12 + m] = _mm512_shuffle_i32x4::<0b11_01_11_01>(c1, c3);
    }
    out
}

/// Packs blocks `k0..k1` of the `nt` (1..=16 V) activation rows at `y(0)..`: `pack[(i - k0)
/// * DWORDS + k][v]` lane l = dword k of block i of token 16 v + l (0 past `nt`).
#[inline(always)]
unsafe fn pack_acts<const V: usize>(
    y: impl Fn(usize) -> *const u8,
    nt: usize,
    k0: usize,
    k1: usize,
    pack: &mut [[__m512i; V]],
) {
    for i in k0..k1 {
        #[allow(clippy::needless_range_loop)] // v also picks the tokens
        for v in 0..V {
            for kc in 0..DWORDS.div_ceil(LANES) {
                let first = LANES * kc;
                let n_dw = (DWORDS - first).min(LANES);
                let mask: __mmask16 = ((1u32 << n_dw) - 1) as u16;
                let rows: [__m512i; 16] = core::array::from_fn(|l| {
                    let t = LANES * v + l;
                    if t < nt {
                        _mm512_maskz_loadu_epi32(
                            mask,
                            y(t).add(i * Q8_K_BYTES + 4 * first) as *const i32,
                        )
                    } else {
                        _mm512_setzero_si512()
                    }
                });
                let cols = transpose16(rows);
                for (k, col) in cols.iter().enumerate().take(n_dw) {
                    pack[(i - k0) * DWORDS + first + k][v] = *col;
                }
            }
        }
    }
}

/// Block `i` of R unpacked weight rows against the packed block at `pk` (DWORDS entries of V
/// vectors), into the accumulators.
#[inline(always)]
unsafe fn rows_block<K: KFormat, const R: usize, const V: usize>(
    u: &[Unpacked; R],
    pk: *const [__m512i; V],
    acc: &mut [[__m512; V]; R],
    accm: &mut [[__m512; V]; R],
) {
    let zero = _mm512_setzero_si512();
    let mut sumi = [[zero; V]; R];
    let per_sub = K::SUB / 4;
    for s in 0..QK_K / K::SUB {
        let mut part = [[zero; V]; R];
        for p in 0..per_sub {
            let k = s * per_sub + p;
            let a: [__m512i; V] = *pk.add(QS_DWORD + k);
            for r in 0..R {
                let wq = _mm512_set1_epi32((u[r].q.as_ptr() as *const i32).add(k).read());
                for v in 0..V {
                    part[r][v] = _mm512_dpbusd_epi32(part[r][v], wq, a[v]);
                }
            }
        }
        for r in 0..R {
            let sc = _mm512_set1_epi32(u[r].sc[s]);
            for v in 0..V {
                sumi[r][v] = _mm512_add_epi32(sumi[r][v], _mm512_mullo_epi32(part[r][v], sc));
            }
        }
    }
    // The bsum terms: Q4_K's mins (kept apart), Q6_K's -32 offset (part of S).
    let mut m = [[zero; V]; R];
    for j in 0..8 {
        let b: [__m512i; V] = *pk.add(BSUMS_DWORD + j);
        for r in 0..R {
            let pair = _mm512_set1_epi32(u[r].pairs[j]);
            for v in 0..V {
                m[r][v] = _mm512_dpwssd_epi32(m[r][v], b[v], pair);
            }
        }
    }
    let dy: [__m512; V] = core::array::from_fn(|v| _mm512_castsi512_ps((*pk)[v]));
    for r in 0..R {
        let d = _mm512_set1_ps(u[r].d);
        for v in 0..V {
            let s = if K::MINS {
                sumi[r][v]
            } else {
                _mm512_add_epi32(sumi[r][v], m[r][v])
            };
            acc[r][v] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy[v]), _mm512_cvtepi32_ps(s), acc[r][v]);
        }
        if K::MINS {
            let dmin = _mm512_set1_ps(u[r].dmin);
            for v in 0..V {
                accm[r][v] = _mm512_fmadd_ps(
                    _mm512_mul_ps(dmin, dy[v]),
                    _mm512_cvtepi32_ps(m[r][v]),
                    accm[r][v],
                );
            }
        }
    }
}

/// Rows `r..r + R` over blocks `k0..k1`, their accumulators in `accs` (index: row - tile start).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_chunk<K: KFormat, const R: usize, const V: usize>(
    x: impl Fn(usize) -> *const u8,
    r: usize,
    k0: usize,
    k1: usize,
    pack: &[[__m512i; V]],
    accs: &mut [[[__m512; V]; 2]],
    first_chunk: bool,
) {
    let zero = _mm512_setzero_ps();
    let (mut acc, mut accm) = ([[zero; V]; R], [[zero; V]; R]);
    if !first_chunk {
        for j in 0..R {
            acc[j] = accs[j][0];
            accm[j] = accs[j][1];
        }
    }
    let mut u = [EMPTY; R];
    for i in k0..k1 {
        for (j, u) in u.iter_mut().enumerate() {
            K::unpack(x(r + j).add(i * K::W_BYTES), u);
        }
        rows_block::<K, R, V>(
            &u,
            pack.as_ptr().add((i - k0) * DWORDS),
            &mut acc,
            &mut accm,
        );
    }
    for j in 0..R {
        accs[j] = [acc[j], accm[j]];
    }
}

/// Every weight row against the `nt` activation rows from token `t0` (V vectors of 16 lanes).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn matmul_group<K: KFormat, const V: usize>(
    nb: usize,
    x: impl Fn(usize) -> *const u8 + Copy,
    y: impl Fn(usize) -> *const u8 + Copy,
    n_rows: usize,
    t0: usize,
    nt: usize,
    out: &mut [f32],
) {
    let mut pack = [[_mm512_setzero_si512(); V]; K_CHUNK * DWORDS];
    let mut accs = [[[_mm512_setzero_ps(); V]; 2]; ROW_TILE];
    let ty = |t: usize| y(t0 + t);
    let mut packed_all = false;
    for r0 in (0..n_rows).step_by(ROW_TILE) {
        let r1 = (r0 + ROW_TILE).min(n_rows);
        for k0 in (0..nb).step_by(K_CHUNK) {
            let k1 = (k0 + K_CHUNK).min(nb);
            // One chunk holds the whole row: packed once for every tile.
            if !packed_all {
                pack_acts::<V>(ty, nt, k0, k1, &mut pack);
                packed_all = nb <= K_CHUNK;
            }
            let mut r = r0;
            while r + ROWS <= r1 {
                rows_chunk::<K, ROWS, V>(x, r, k0, k1, &pack, &mut accs[r - r0..], k0 == 0);
                r += ROWS;
            }
            while r < r1 {
                rows_chunk::<K, 1, V>(x, r, k0, k1, &pack, &mut accs[r - r0..], k0 == 0);
                r += 1;
            }
        }
        for r in r0..r1 {
            let [acc, accm] = accs[r - r0];
            for v in 0..V {
                let res = if K::MINS {
                    _mm512_sub_ps(acc[v], accm[v])
                } else {
                    acc[v]
                };
                let mut lanes = [0f32; LANES];
                _mm512_storeu_ps(lanes.as_mut_ptr(), res);
                for (l, &val) in lanes.iter().enumerate() {
                    let t = LANES * v + l;
                    if t < nt {
                        out[(t0 + t) * n_rows + r] = val;
                    }
                }
            }
        }
    }
}

#[inline(always)]
unsafe fn matmul<K: KFormat>(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    if n_acts == 0 {
        return;
    }
    let n_rows = out.len() / n_acts;
    let nb = n / QK_K;
    let (w_row, a_row) = (nb * K::W_BYTES, nb * Q8_K_BYTES);
    if w.len() < n_rows * w_row || acts.len() < n_acts * a_row {
        // The caller (WeightKernel::matmul) checked the shapes; never read past the slices.
        return;
    }
    let x = |r: usize| w.as_ptr().add(r * w_row);
    let y = |t: usize| acts.as_ptr().add(t * a_row);
    let mut t0 = 0;
    while t0 < n_acts {
        let nt = (n_acts - t0).min(2 * LANES);
        if nt > LANES {
            matmul_group::<K, 2>(nb, x, y, n_rows, t0, nt, out);
        } else if nt >= MIN_PACKED_TOKENS {
            matmul_group::<K, 1>(nb, x, y, n_rows, t0, nt, out);
        } else {
            for t in t0..t0 + nt {
                for r in 0..n_rows {
                    out[t * n_rows + r] = dot_row::<K>(nb, x(r), y(t));
                }
            }
        }
        t0 += nt;
    }
}

/// Q4_K weights . one Q8_K activation row.
///
/// # Safety
/// The CPU features of the module docs must be available.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn vec_dot_q4_k_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    vec_dot::<Q4K>(n, w, act)
}

/// Q6_K weights . one Q8_K activation row.
///
/// # Safety
/// The CPU features of the module docs must be available.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn vec_dot_q6_k_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    vec_dot::<Q6K>(n, w, act)
}

/// Q4_K weight rows . one Q8_K activation row, every output bit for bit
/// [`vec_dot_q4_k_q8_k`].
///
/// # Safety
/// The CPU features of the module docs must be available.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn matvec_q4_k_q8_k(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
    matvec::<Q4K>(n, w, act, out)
}

/// Q6_K weight rows . one Q8_K activation row, every output bit for bit
/// [`vec_dot_q6_k_q8_k`].
///
/// # Safety
/// The CPU features of the module docs must be available.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn matvec_q6_k_q8_k(n: usize, w: &[u8], act: &[u8], out: &mut [f32]) {
    matvec::<Q6K>(n, w, act, out)
}

/// Q4_K weights x Q8_K activation rows, every output bit for bit [`vec_dot_q4_k_q8_k`].
///
/// # Safety
/// The CPU features of the module docs must be available.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn matmul_q4_k_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Q4K>(n, w, acts, n_acts, out)
}

/// Q6_K weights x Q8_K activation rows, every output bit for bit [`vec_dot_q6_k_q8_k`].
///
/// # Safety
/// The CPU features of the module docs must be available.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn matmul_q6_k_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Q6K>(n, w, acts, n_acts, out)
}
