//! AVX2 Q4_K and Q6_K prompt kernels with TOKENS in the lanes (`ColsFn`), and the one-row
//! dots that give their bits (`VecDotFn`, the prompt kernels' `cols_twin`).
//!
//! Why: the file-layout batched kernel (`avx2_k`) keeps 32 quants of one row in a vector, so
//! every 32 multiply-adds pay a `pmaddubsw` and a `pmaddwd` by the sub-block's scale (the
//! scale changes every vector). Here the activations of up to 32 tokens are transposed once
//! per chunk of blocks into "packed" vectors (vector k of a block holds dword k of 8 tokens,
//! one per lane), and each dword of a weight row (4 quants) is broadcast against 4 of them.
//! A lane then holds one (row, token) pair, so a sub-block's `pmaddubsw` results are summed
//! in i16 and multiplied by the (broadcast) scale once: about half the multiplies per
//! multiply-add of `avx2_k`, and the activations come from memory operands, with no
//! broadcast per multiply. The idea of `avx512_k` (there with `vpdpbusd`) on AVX2.
//!
//! i16 headroom: a `pmaddubsw` lane is two products, |q y| <= 15 x 128 (Q4_K) or 63 x 128
//! (Q6_K), so a Q4_K sub-block's 8 results sum to at most 16 x 1920 = 30720 and Q6_K's are
//! summed two at a time (4 x 8064 = 32256), under 32767 even for activations of -128.
//!
//! Exactness: both entry points of a type compute, per (row, token, block), the exact
//! integers S = sum over sub-blocks of scale x (quants . activations) (Q6_K's -32 offset
//! folded in through the bsums) and for Q4_K M = sum of min x (bsum pair); then the same
//! float operations in the same order: dd = f32(d) * d_act (one rounding), acc = fma(dd,
//! f32(S), acc), for Q4_K also accm = fma(f32(dmin) * d_act, f32(M), accm), blocks in order;
//! the result is acc (Q6_K) or acc - accm (Q4_K). These are `avx512_k`'s operations, so the
//! AVX2 and AVX-512 sets' prompts give the same bits. The one-row dots reach S by the
//! file-layout vectors and a horizontal integer sum per block, which the decode kernels
//! (`avx2_k`, 8 float lanes per row) do not pay: decoding runs those, and a prompt runs these
//! for every batch size (`cols_twin`), so a prompt gives the same logits however it is split.
//!
//! Every function reads only whole blocks inside the slices.
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use super::avx2::*;
use super::avx2_k::{add8, q4_k_scales_mins, unpack_q4_k, unpack_q6_k};
use core::arch::x86_64::*;

/// Token vectors (8 tokens each) at most per pass: 32 tokens, the model's batch.
pub(super) const MAX_VECS: usize = 4;

/// Blocks packed at once (2 x 9.3 KB: the packed activations stay in L1 while the rows of a
/// tile go by). Rows longer than this are run in chunks, the accumulators kept between them.
const K_CHUNK: usize = 2;

/// Weight rows whose float accumulators (2 x 4 vectors each, 8 KB in all) are kept across
/// the chunks of blocks.
const ROW_TILE: usize = 32;

/// Below this many tokens the packing does not pay: the pairs run through the one-row dot
/// (the same bits by construction).
const MIN_TOKENS: usize = 4;

/// The activations of K_CHUNK blocks of up to 32 tokens, token vector g holding tokens
/// 8g .. 8g + 7 in its lanes: `q[i][k][g]` dword k of block i's quants, `pairs[i][p][g]` two
/// i16 made from the bsums (see `Format::pack_bsums`), `d[i][g]` the scales.
#[repr(C, align(32))]
pub(super) struct Packed {
    pub(super) q: [[[__m256i; MAX_VECS]; 64]; K_CHUNK],
    pub(super) pairs: [[[__m256i; MAX_VECS]; 8]; K_CHUNK],
    pub(super) d: [[__m256; MAX_VECS]; K_CHUNK],
}

/// What differs between the K-quant formats (Q4_K and Q6_K here, Q3_K and Q5_K in avx2_kt35)
/// around the shared packing and loops.
pub(super) trait Format {
    const BYTES: usize;
    /// Q4_K, Q5_K: a second accumulator (the mins), subtracted at the end.
    const MINS: bool;
    /// `pairs` vectors from 8 tokens' 16 bsums (one vector per token).
    unsafe fn pack_bsums(b: [__m256i; 8]) -> [__m256i; 8];
    /// Adds block `i` of `p` against the weight block at `x` into one row's accumulators.
    unsafe fn row_block<const G: usize>(
        x: *const u8,
        p: &Packed,
        i: usize,
        acc: &mut [__m256; MAX_VECS],
        accm: &mut [__m256; MAX_VECS],
    );
    /// The one-row dot of `nb` blocks, with the batched kernel's bits.
    unsafe fn dot(nb: usize, xr: *const u8, yr: *const u8) -> f32;
}

/// `out[k]` lane r = dword k of `a[r]`.
#[inline(always)]
pub(super) unsafe fn transpose8(a: [__m256i; 8]) -> [__m256i; 8] {
    let t0 = _mm256_unpacklo_epi32(a[0], a[1]);
    let t1 = _mm256_unpackhi_epi32(a[0], a[1]);
    let t2 = _mm256_unpacklo_epi32(a[2], a[3]);
    let t3 = _mm256_unpackhi_epi32(a[2], a[3]);
    let t4 = _mm256_unpacklo_epi32(a[4], a[5]);
    let t5 = _mm256_unpackhi_epi32(a[4], a[5]);
    let t6 = _mm256_unpacklo_epi32(a[6], a[7]);
    let t7 = _mm256_unpackhi_epi32(a[6], a[7]);
    // u_k: dword k of rows 0..3 (low half) and dword k + 4 (high half); u_{4+k} rows 4..7.
    let u0 = _mm256_unpacklo_epi64(t0, t2);
    let u1 = _mm256_unpackhi_epi64(t0, t2);
    let u2 = _mm256_unpacklo_epi64(t1, t3);
    let u3 = _mm256_unpackhi_epi64(t1, t3);
    let u4 = _mm256_unpacklo_epi64(t4, t6);
    let u5 = _mm256_unpackhi_epi64(t4, t6);
    let u6 = _mm256_unpacklo_epi64(t5, t7);
    let u7 = _mm256_unpackhi_epi64(t5, t7);
    [
        _mm256_permute2x128_si256(u0, u4, 0x20),
        _mm256_permute2x128_si256(u1, u5, 0x20),
        _mm256_permute2x128_si256(u2, u6, 0x20),
        _mm256_permute2x128_si256(u3, u7, 0x20),
        _mm256_permute2x128_si256(u0, u4, 0x31),
        _mm256_permute2x128_si256(u1, u5, 0x31),
        _mm256_permute2x128_si256(u2, u6, 0x31),
        _mm256_permute2x128_si256(u3, u7, 0x31),
    ]
}

/// `pairs` vectors for formats with 32-element sub-blocks (Q4_K, Q5_K, IQ4_XS): pair p holds
/// (b4p + b4p+1, b4p+2 + b4p+3), the activation sums of sub-blocks 2p and 2p + 1 (each at most
/// 32 x 128 in magnitude); entries 4..7 unused.
#[inline(always)]
pub(super) unsafe fn bsum_pairs_of_32(b: [__m256i; 8]) -> [__m256i; 8] {
    // In each 128-bit half: (b0 + b1, b2 + b3), (b4 + b5, b6 + b7), then zeros.
    let zero = _mm256_setzero_si256();
    let t = transpose8(b.map(|b| _mm256_hadd_epi16(b, zero)));
    [t[0], t[1], t[4], t[5], zero, zero, zero, zero]
}

/// Sum of the 8 i32 lanes (every exact sum here fits).
#[inline(always)]
pub(super) unsafe fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// `acc + a * b` with one rounding, as `_mm256_fmadd_ps` does in every lane.
#[inline(always)]
pub(super) unsafe fn fma1(a: f32, b: f32, acc: f32) -> f32 {
    _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(acc)))
}

struct Q4K;

impl Format for Q4K {
    const BYTES: usize = Q4_K_BYTES;
    const MINS: bool = true;

    /// The sums of the 32-element sub-blocks, meeting mins 2p and 2p + 1.
    #[inline(always)]
    unsafe fn pack_bsums(b: [__m256i; 8]) -> [__m256i; 8] {
        bsum_pairs_of_32(b)
    }

    #[inline(always)]
    unsafe fn row_block<const G: usize>(
        x: *const u8,
        p: &Packed,
        i: usize,
        acc: &mut [__m256; MAX_VECS],
        accm: &mut [__m256; MAX_VECS],
    ) {
        q4_k_row_block::<G>(x, p, i, acc, accm)
    }

    #[inline(always)]
    unsafe fn dot(nb: usize, xr: *const u8, yr: *const u8) -> f32 {
        q4_k_dot(nb, xr, yr)
    }
}

#[inline(always)]
unsafe fn q4_k_dot(nb: usize, xr: *const u8, yr: *const u8) -> f32 {
    let (mut acc, mut accm) = (0f32, 0f32);
    for i in 0..nb {
        let y = yr.add(i * Q8_K_BYTES);
        let b = unpack_q4_k(xr.add(i * Q4_K_BYTES));
        // A loop, not `array::from_fn`: a closure does not inherit this function's
        // target features, so its intrinsics would be calls (measured: 2x slower).
        let mut p = [_mm256_setzero_si256(); 8];
        for (s, p) in p.iter_mut().enumerate() {
            let yq = load256(y.add(Q8_K_QS + 32 * s));
            *p = _mm256_madd_epi16(_mm256_maddubs_epi16(b.q[s], yq), b.sc[s]);
        }
        let s = hsum_epi32(add8(p));
        let m = hsum_epi32(_mm256_madd_epi16(load256(y.add(Q8_K_BSUMS)), b.mins16));
        let dy = f32_at(y);
        let d = _mm_cvtss_f32(b.d_dmin);
        let dmin = _mm_cvtss_f32(_mm_movehdup_ps(b.d_dmin));
        acc = fma1(d * dy, s as f32, acc);
        accm = fma1(dmin * dy, m as f32, accm);
    }
    acc - accm
}

/// Packs block `ib` of the G x 8 activation rows `ys` (null: a missing token, for which the
/// zero block `zero` stands) into slot `i` of `p`.
#[inline(always)]
unsafe fn pack_block<K: Format, const G: usize>(
    ys: &[*const u8; 32],
    zero: *const u8,
    ib: usize,
    p: &mut Packed,
    i: usize,
) {
    for g in 0..G {
        let y: [*const u8; 8] = core::array::from_fn(|l| {
            let y = ys[8 * g + l];
            if y.is_null() {
                zero
            } else {
                y.add(ib * Q8_K_BYTES)
            }
        });
        for m in 0..8 {
            let t = transpose8(core::array::from_fn(|l| {
                load256(y[l].add(Q8_K_QS + 32 * m))
            }));
            for (k, &t) in t.iter().enumerate() {
                p.q[i][8 * m + k][g] = t;
            }
        }
        let t = K::pack_bsums(core::array::from_fn(|l| load256(y[l].add(Q8_K_BSUMS))));
        for (k, &t) in t.iter().enumerate() {
            p.pairs[i][k][g] = t;
        }
        let d: [f32; 8] = core::array::from_fn(|l| f32_at(y[l]));
        p.d[i][g] = _mm256_loadu_ps(d.as_ptr());
    }
}

#[inline(always)]
unsafe fn q4_k_row_block<const G: usize>(
    x: *const u8,
    p: &Packed,
    i: usize,
    acc: &mut [__m256; MAX_VECS],
    accm: &mut [__m256; MAX_VECS],
) {
    let low4 = _mm256_set1_epi8(0x0F);
    let mut scmn = [0u8; 16];
    _mm_storeu_si128(
        scmn.as_mut_ptr() as *mut __m128i,
        q4_k_scales_mins(x.add(4)),
    );
    let mut sumi = [_mm256_setzero_si256(); G];
    for c in 0..4 {
        // Chunk c: low nibbles are sub-block 2c (activation dwords 16c..16c + 7), high
        // nibbles sub-block 2c + 1 (dwords 16c + 8..16c + 15).
        let mut lo16 = [_mm256_setzero_si256(); G];
        let mut hi16 = [_mm256_setzero_si256(); G];
        for m in 0..8 {
            let w = _mm256_set1_epi32(core::ptr::read_unaligned(
                x.add(16 + 32 * c + 4 * m) as *const i32
            ));
            let lo = _mm256_and_si256(w, low4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
            for g in 0..G {
                let a_lo = p.q[i][16 * c + m][g];
                let a_hi = p.q[i][16 * c + 8 + m][g];
                lo16[g] = _mm256_add_epi16(lo16[g], _mm256_maddubs_epi16(lo, a_lo));
                hi16[g] = _mm256_add_epi16(hi16[g], _mm256_maddubs_epi16(hi, a_hi));
            }
        }
        let sc_lo = _mm256_set1_epi16(scmn[2 * c] as i16);
        let sc_hi = _mm256_set1_epi16(scmn[2 * c + 1] as i16);
        for g in 0..G {
            let s = _mm256_add_epi32(
                _mm256_madd_epi16(lo16[g], sc_lo),
                _mm256_madd_epi16(hi16[g], sc_hi),
            );
            sumi[g] = _mm256_add_epi32(sumi[g], s);
        }
    }
    let mut mins = [_mm256_setzero_si256(); G];
    for q in 0..4 {
        let mn = _mm256_set1_epi32(scmn[8 + 2 * q] as i32 | (scmn[9 + 2 * q] as i32) << 16);
        for (g, m) in mins.iter_mut().enumerate() {
            *m = _mm256_add_epi32(*m, _mm256_madd_epi16(p.pairs[i][q][g], mn));
        }
    }
    let d_dmin =
        _mm_cvtph_ps(_mm_cvtsi32_si128(
            u32::from_le_bytes([*x, *x.add(1), *x.add(2), *x.add(3)]) as i32,
        ));
    let d = _mm256_broadcastss_ps(d_dmin);
    let dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(d_dmin));
    for g in 0..G {
        let dy = p.d[i][g];
        acc[g] = _mm256_fmadd_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(sumi[g]), acc[g]);
        accm[g] = _mm256_fmadd_ps(
            _mm256_mul_ps(dmin, dy),
            _mm256_cvtepi32_ps(mins[g]),
            accm[g],
        );
    }
}

/// Up to 32 tokens (`nt`, in G vectors) against all rows.
#[inline(always)]
unsafe fn tokens_pass<K: Format, const G: usize>(
    (nb, w, w_row, n_rows): (usize, *const u8, usize, usize),
    ys: &[*const u8; 32],
    zero: *const u8,
    nt: usize,
    out: *mut f32,
    p: &mut Packed,
) {
    let mut acc = [[_mm256_setzero_ps(); MAX_VECS]; ROW_TILE];
    let mut accm = [[_mm256_setzero_ps(); MAX_VECS]; ROW_TILE];
    for r0 in (0..n_rows).step_by(ROW_TILE) {
        let rows = ROW_TILE.min(n_rows - r0);
        acc[..rows].fill([_mm256_setzero_ps(); MAX_VECS]);
        accm[..rows].fill([_mm256_setzero_ps(); MAX_VECS]);
        for k0 in (0..nb).step_by(K_CHUNK) {
            let kn = K_CHUNK.min(nb - k0);
            for i in 0..kn {
                pack_block::<K, G>(ys, zero, k0 + i, p, i);
            }
            for r in 0..rows {
                let x = w.add((r0 + r) * w_row + k0 * K::BYTES);
                for i in 0..kn {
                    K::row_block::<G>(x.add(i * K::BYTES), p, i, &mut acc[r], &mut accm[r]);
                }
            }
        }
        for r in 0..rows {
            for g in 0..G {
                let mut v = [0f32; 8];
                let o = if K::MINS {
                    _mm256_sub_ps(acc[r][g], accm[r][g])
                } else {
                    acc[r][g]
                };
                _mm256_storeu_ps(v.as_mut_ptr(), o);
                for (l, &v) in v.iter().enumerate() {
                    let t = 8 * g + l;
                    if t < nt {
                        *out.add(t * n_rows + r0 + r) = v;
                    }
                }
            }
        }
    }
}

struct Q6K;

impl Format for Q6K {
    const BYTES: usize = Q6_K_BYTES;
    const MINS: bool = false;

    /// Pair p: (b2p, b2p+1), the bsums of sub-blocks 2p and 2p + 1 (16 quants each).
    #[inline(always)]
    unsafe fn pack_bsums(b: [__m256i; 8]) -> [__m256i; 8] {
        transpose8(b)
    }

    #[inline(always)]
    unsafe fn row_block<const G: usize>(
        x: *const u8,
        p: &Packed,
        i: usize,
        acc: &mut [__m256; MAX_VECS],
        _accm: &mut [__m256; MAX_VECS],
    ) {
        // The quants (0..63, in element order) on the stack, broadcast a dword at a time.
        let quants = unpack_q6_k(x).q;
        let qp = quants.as_ptr() as *const u8;
        let mut scales = [0i8; 16];
        core::ptr::copy_nonoverlapping(x.add(192), scales.as_mut_ptr() as *mut u8, 16);
        let mut sumi = [_mm256_setzero_si256(); G];
        for (b, &scale) in scales.iter().enumerate() {
            // Sub-block b: dwords 4b .. 4b + 3, summed in i16 two at a time (at most 32256).
            let sc = _mm256_set1_epi16(scale as i16);
            for half in 0..2 {
                let mut s16 = [_mm256_setzero_si256(); G];
                for k in 4 * b + 2 * half..4 * b + 2 * half + 2 {
                    let w =
                        _mm256_set1_epi32(core::ptr::read_unaligned(qp.add(4 * k) as *const i32));
                    for (g, s) in s16.iter_mut().enumerate() {
                        *s = _mm256_add_epi16(*s, _mm256_maddubs_epi16(w, p.q[i][k][g]));
                    }
                }
                for g in 0..G {
                    sumi[g] = _mm256_add_epi32(sumi[g], _mm256_madd_epi16(s16[g], sc));
                }
            }
        }
        // sum (q - 32) y = sum q y - 32 sum_b scale_b bsum_b.
        let mut offset = [_mm256_setzero_si256(); G];
        for q in 0..8 {
            let pair = (scales[2 * q] as i16 as u16 as i32) | (scales[2 * q + 1] as i32) << 16;
            let sc = _mm256_set1_epi32(pair);
            for (g, o) in offset.iter_mut().enumerate() {
                *o = _mm256_add_epi32(*o, _mm256_madd_epi16(p.pairs[i][q][g], sc));
            }
        }
        let d = _mm256_set1_ps(f16_at(x.add(208)));
        for g in 0..G {
            let s = _mm256_sub_epi32(sumi[g], _mm256_slli_epi32(offset[g], 5));
            acc[g] = _mm256_fmadd_ps(_mm256_mul_ps(d, p.d[i][g]), _mm256_cvtepi32_ps(s), acc[g]);
        }
    }

    #[inline(always)]
    unsafe fn dot(nb: usize, xr: *const u8, yr: *const u8) -> f32 {
        let mut acc = 0f32;
        for i in 0..nb {
            let y = yr.add(i * Q8_K_BYTES);
            let b = unpack_q6_k(xr.add(i * Q6_K_BYTES));
            // A loop, not `array::from_fn` (see `q4_k_dot`).
            let mut p = [_mm256_setzero_si256(); 8];
            for (k, p) in p.iter_mut().enumerate() {
                let yq = load256(y.add(Q8_K_QS + 32 * k));
                *p = _mm256_madd_epi16(_mm256_maddubs_epi16(b.q[k], yq), b.sc[k]);
            }
            let offset = hsum_epi32(_mm256_madd_epi16(load256(y.add(Q8_K_BSUMS)), b.scales16));
            let s = hsum_epi32(add8(p)).wrapping_sub(offset.wrapping_mul(32));
            acc = fma1(b.d * f32_at(y), s as f32, acc);
        }
        acc
    }
}

/// `out[t * n_rows + r] = weights[r] . acts[t]`: up to 32 tokens per pass over the rows.
#[inline(always)]
pub(super) unsafe fn matmul<K: Format>(
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
    let nb = n / QK_K;
    let (w_row, a_row) = (nb * K::BYTES, nb * Q8_K_BYTES);
    if w.len() < n_rows * w_row || acts.len() < n_acts * a_row {
        // The caller (WeightKernel::matmul) checked the shapes; never read past the slices.
        return;
    }
    let y = |t: usize| acts.as_ptr().add(t * a_row);
    if n_acts < MIN_TOKENS {
        for t in 0..n_acts {
            for r in 0..n_rows {
                out[t * n_rows + r] = K::dot(nb, w.as_ptr().add(r * w_row), y(t));
            }
        }
        return;
    }
    // Missing tokens of the last vector read this zero block.
    let zero_block = [0u8; Q8_K_BYTES];
    let mut p = Packed {
        q: [[[_mm256_setzero_si256(); MAX_VECS]; 64]; K_CHUNK],
        pairs: [[[_mm256_setzero_si256(); MAX_VECS]; 8]; K_CHUNK],
        d: [[_mm256_setzero_ps(); MAX_VECS]; K_CHUNK],
    };
    for t0 in (0..n_acts).step_by(8 * MAX_VECS) {
        let nt = (8 * MAX_VECS).min(n_acts - t0);
        let ys: [*const u8; 32] =
            core::array::from_fn(|t| if t < nt { y(t0 + t) } else { core::ptr::null() });
        let out_t = out.as_mut_ptr().add(t0 * n_rows);
        let args = (nb, w.as_ptr(), w_row, n_rows);
        match nt.div_ceil(8) {
            1 => tokens_pass::<K, 1>(args, &ys, zero_block.as_ptr(), nt, out_t, &mut p),
            2 => tokens_pass::<K, 2>(args, &ys, zero_block.as_ptr(), nt, out_t, &mut p),
            3 => tokens_pass::<K, 3>(args, &ys, zero_block.as_ptr(), nt, out_t, &mut p),
            _ => tokens_pass::<K, 4>(args, &ys, zero_block.as_ptr(), nt, out_t, &mut p),
        }
    }
}

/// Q4_K weights . Q8_K activations (one row), with the bits of [`matmul_q4_k_q8_k`].
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q4_k_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / Q4_K_BYTES)
        .min(act.len() / Q8_K_BYTES);
    Q4K::dot(nb, w.as_ptr(), act.as_ptr())
}

/// Q6_K weights . Q8_K activations (one row), with the bits of [`matmul_q6_k_q8_k`].
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q6_k_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / Q6_K_BYTES)
        .min(act.len() / Q8_K_BYTES);
    Q6K::dot(nb, w.as_ptr(), act.as_ptr())
}

/// Q4_K weights x Q8_K activation rows, tokens in the lanes; every output bit for bit
/// [`vec_dot_q4_k_q8_k`] (this module's, not `avx2_k`'s).
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q4_k_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Q4K>(n, w, acts, n_acts, out)
}

/// Q6_K weights x Q8_K activation rows, tokens in the lanes; every output bit for bit
/// [`vec_dot_q6_k_q8_k`] (this module's, not `avx2_k`'s).
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q6_k_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul::<Q6K>(n, w, acts, n_acts, out)
}
