//! AVX2 Q4_K and Q6_K kernels built for decode speed: the one-row dot product (the signature
//! of `smolrun_core::quant::VecDotFn`) and the batched matmul over a prompt's tokens (the
//! signature of `smolrun_core::kernels::ColsFn`), both from one generic body, so that a prompt
//! run in batches gives the bits it gives token by token by construction.
//!
//! Why a second set next to `avx2.rs`: the one-row kernels there are compute-bound on one
//! core (the `avx2_repack_headroom` example: about 11 GB/s of weights whether they come from
//! DRAM or L2, while one core streams about 15 GB/s), and decode is nothing but these dot
//! products. Most of their time went to per-block scalar work: the 6-bit scales decoded byte by
//! byte into arrays and each scale broadcast from memory (Q6_K: two `set1_epi16` and an insert
//! per 32 quants). Here the scales are decoded and spread in vector registers:
//!
//! - Q4_K: the 12 packed scale bytes become the 8 scales and 8 mins with two dword shuffles,
//!   a shift and masks; each sub-block's scale is then one `pshufb` of the scales widened to
//!   i16 (both 128-bit halves hold all 8), and the mins pairs for the bsums one more.
//! - Q6_K: the 16 signed scales are widened once per half and spread with one `pshufb` per 32
//!   quants; the high two bits are moved into place with one shift and one mask.
//!
//! Exactness: every kernel here computes, per super-block, the same 8 lanes of exact i32 sums
//! as the `avx2.rs` kernel of its type (lane l holds bytes 4l..4l+3 of every 32-quant vector,
//! each scaled by its sub-block's scale; Q4_K's mins and Q6_K's -32 offset through the
//! activation's bsums, lane l holding bsums 2l and 2l+1), and the same float operations in
//! the same order: one `f16 * d_act` rounding, one FMA per block into 8 accumulator lanes (a
//! second set for Q4_K's mins), the lanes summed by `hsum_ps` at the end. So the results are
//! bit for bit those of `avx2.rs` too, and core's tests check them against the scalar twins.
//!
//! Every function reads only whole blocks inside the slices.
//!
//! # Safety (all kernels)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use super::avx2::*;
use core::arch::x86_64::*;

/// Activation rows dotted with one unpacked weight block in the batched kernels.
pub const GROUP: usize = 4;

/// Weight rows dotted with every activation group before moving on (a few KB, kept in L1).
const ROW_TILE: usize = 16;

/// `pshufb` mask that spreads i16 element `lo` over the low 128 bits and i16 element `hi` over
/// the high 128 bits (element indices within each 128-bit half).
#[inline(always)]
pub(super) unsafe fn spread_i16(lo: i32, hi: i32) -> __m256i {
    let m = |e: i32| (2 * e) | ((2 * e + 1) << 8);
    _mm256_setr_epi32(
        m(lo) * 0x1_0001,
        m(lo) * 0x1_0001,
        m(lo) * 0x1_0001,
        m(lo) * 0x1_0001,
        m(hi) * 0x1_0001,
        m(hi) * 0x1_0001,
        m(hi) * 0x1_0001,
        m(hi) * 0x1_0001,
    )
}

/// How far ahead of the block being read the weights are prefetched, in bytes.
const PREFETCH_BYTES: usize = 4096;

/// Prefetches the block of `BLOCK` bytes that lies [`PREFETCH_BYTES`] after `x` (a cache line
/// per 64 bytes; prefetches never fault, so running past the end of the weights is harmless).
#[inline(always)]
pub(super) unsafe fn prefetch_ahead<const BLOCK: usize>(x: *const u8) {
    let p = x.wrapping_add(PREFETCH_BYTES) as *const i8;
    let mut off = 0;
    while off < BLOCK {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off));
        off += 64;
    }
}

/// One Q4_K super-block in registers: its 256 quants as 8 vectors of 32 (sub-block s in
/// `q[s]`), each sub-block's scale as 16 i16 lanes, the mins doubled for the 16 bsums, and
/// the two f16 factors (d, dmin) as f32.
pub(super) struct Q4KBlock {
    pub(super) q: [__m256i; 8],
    pub(super) sc: [__m256i; 8],
    pub(super) mins16: __m256i,
    pub(super) d_dmin: __m128,
}

/// The 8 six-bit scales (bytes 0..7) and 8 six-bit mins (bytes 8..15) of the 12 packed scale
/// bytes at `p` (the layout `scale_min_k4` decodes one at a time). Reads 16 bytes: the 4 after
/// the scales are the block's first quants, masked away.
#[inline(always)]
pub(super) unsafe fn q4_k_scales_mins(p: *const u8) -> __m128i {
    // Dwords s0, s1, s2 of the packed bytes. Scales 0..3 = s0 & 0x3f, mins 0..3 = s1 & 0x3f,
    // scales 4..7 = (s2 & 0x0f) | (top two bits of s0) << 4, mins 4..7 = (s2 >> 4) | (top two
    // bits of s1) << 4, byte by byte; ((s >> 6) & 3) << 4 is (s >> 2) & 0x30 in every byte.
    let raw = load128(p);
    let low_src = _mm_shuffle_epi32(raw, 0b10_01_10_00); // s0, s2, s1, s2
    let top_src = _mm_shuffle_epi32(raw, 0b01_01_00_00); // s0, s0, s1, s1
    let low = _mm_and_si128(
        _mm_srlv_epi32(low_src, _mm_setr_epi32(0, 0, 0, 4)),
        _mm_setr_epi32(0x3f3f_3f3f, 0x0f0f_0f0f, 0x3f3f_3f3f, 0x0f0f_0f0f),
    );
    let top = _mm_and_si128(
        _mm_srli_epi32(top_src, 2),
        _mm_setr_epi32(0, 0x3030_3030, 0, 0x3030_3030),
    );
    // Dwords: scales 0..3, scales 4..7, mins 0..3, mins 4..7.
    _mm_or_si128(low, top)
}

#[inline(always)]
pub(super) unsafe fn unpack_q4_k(x: *const u8) -> Q4KBlock {
    let low4 = _mm256_set1_epi8(0x0F);
    let scmn = q4_k_scales_mins(x.add(4));
    // Scales as i16 in both halves, so an in-lane pshufb can spread any of them.
    let sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scmn));
    // Mins 0..7 as i16 pairs (m0, m0, m1, m1, ...): min s meets bsums 2s and 2s + 1.
    let mins16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(
        scmn,
        _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15),
    ));
    let mut q = [_mm256_setzero_si256(); 8];
    let mut sc = [_mm256_setzero_si256(); 8];
    for c in 0..4 {
        // Chunk c: low nibbles are sub-block 2c, high nibbles sub-block 2c + 1.
        let bytes = load256(x.add(16 + 32 * c));
        q[2 * c] = _mm256_and_si256(bytes, low4);
        q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
        let s = 2 * c as i32;
        sc[2 * c] = _mm256_shuffle_epi8(sc16, spread_i16(s, s));
        sc[2 * c + 1] = _mm256_shuffle_epi8(sc16, spread_i16(s + 1, s + 1));
    }
    let d_dmin =
        _mm_cvtph_ps(_mm_cvtsi32_si128(
            u32::from_le_bytes([*x, *x.add(1), *x.add(2), *x.add(3)]) as i32,
        ));
    Q4KBlock {
        q,
        sc,
        mins16,
        d_dmin,
    }
}

/// Sum of the 8 vectors' lanes, as a tree (integer addition: the order does not matter).
#[inline(always)]
pub(super) unsafe fn add8(p: [__m256i; 8]) -> __m256i {
    let a = _mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3]));
    let b = _mm256_add_epi32(_mm256_add_epi32(p[4], p[5]), _mm256_add_epi32(p[6], p[7]));
    _mm256_add_epi32(a, b)
}

/// Adds one unpacked Q4_K block dotted with the Q8_K activation block at `y` into `acc` (the
/// scale term) and `acc_mins` (the min term), as `q45_k_dot` in avx2.rs does.
#[inline(always)]
unsafe fn q4_k_block_dot(b: &Q4KBlock, y: *const u8, acc: &mut __m256, acc_mins: &mut __m256) {
    // d * d_act and dmin * d_act, each one f32 rounding as in the scalar code.
    let dd = _mm_mul_ps(b.d_dmin, _mm_set1_ps(f32_at(y)));
    let d = _mm256_broadcastss_ps(dd);
    let dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(dd));
    let mins = _mm256_madd_epi16(load256(y.add(Q8_K_BSUMS)), b.mins16);
    *acc_mins = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(mins), *acc_mins);
    let mut p = [_mm256_setzero_si256(); 8];
    for (s, p) in p.iter_mut().enumerate() {
        let yq = load256(y.add(Q8_K_QS + 32 * s));
        *p = _mm256_madd_epi16(_mm256_maddubs_epi16(b.q[s], yq), b.sc[s]);
    }
    *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(add8(p)), *acc);
}

/// `nb` Q4_K blocks of the weight row at `xr` against the N activation rows at `ys`.
#[inline(always)]
unsafe fn q4_k_dot_group<const N: usize>(nb: usize, xr: *const u8, ys: [*const u8; N]) -> [f32; N] {
    let mut acc = [_mm256_setzero_ps(); N];
    let mut acc_mins = [_mm256_setzero_ps(); N];
    for i in 0..nb {
        let xb = xr.add(i * Q4_K_BYTES);
        prefetch_ahead::<Q4_K_BYTES>(xb);
        let b = unpack_q4_k(xb);
        for j in 0..N {
            q4_k_block_dot(&b, ys[j].add(i * Q8_K_BYTES), &mut acc[j], &mut acc_mins[j]);
        }
    }
    let mut out = [0f32; N];
    for j in 0..N {
        out[j] = hsum_ps(acc[j]) - hsum_ps(acc_mins[j]);
    }
    out
}

/// One Q6_K super-block in registers: quants as unsigned 0..63 in 8 vectors of 32 (quarter
/// 4h + k holds elements 128h + 32k .. + 32, sub-blocks 8h + 2k in the low and 8h + 2k + 1 in
/// the high 128 bits), the matching scales as i16 lanes, all 16 scales as i16 (for the offset
/// through the bsums), and d.
pub(super) struct Q6KBlock {
    pub(super) q: [__m256i; 8],
    pub(super) sc: [__m256i; 8],
    pub(super) scales16: __m256i,
    pub(super) d: f32,
}

#[inline(always)]
pub(super) unsafe fn unpack_q6_k(x: *const u8) -> Q6KBlock {
    let low4 = _mm256_set1_epi8(0x0F);
    let bits45 = _mm256_set1_epi8(0x30);
    let scales = load128(x.add(192));
    let mut q = [_mm256_setzero_si256(); 8];
    let mut sc = [_mm256_setzero_si256(); 8];
    for h in 0..2 {
        let ql0 = load256(x.add(64 * h));
        let ql1 = load256(x.add(64 * h + 32));
        let qh = load256(x.add(128 + 32 * h));
        // Bits 2k, 2k + 1 of qh are bits 4, 5 of quarter k. The 16-bit shifts move bits across
        // bytes only outside bits 4 and 5, which the mask keeps.
        q[4 * h] = _mm256_or_si256(
            _mm256_and_si256(ql0, low4),
            _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45),
        );
        q[4 * h + 1] = _mm256_or_si256(
            _mm256_and_si256(ql1, low4),
            _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45),
        );
        q[4 * h + 2] = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
            _mm256_and_si256(qh, bits45),
        );
        q[4 * h + 3] = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
            _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45),
        );
        // Scales 8h..8h + 7 as i16 in both halves; quarter k takes 2k (low) and 2k + 1 (high).
        let half = if h == 0 {
            scales
        } else {
            _mm_srli_si128(scales, 8)
        };
        let sc_h = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(half));
        for k in 0..4 {
            let s = 2 * k as i32;
            sc[4 * h + k] = _mm256_shuffle_epi8(sc_h, spread_i16(s, s + 1));
        }
    }
    Q6KBlock {
        q,
        sc,
        scales16: _mm256_cvtepi8_epi16(scales),
        d: f16_at(x.add(208)),
    }
}

/// Adds one unpacked Q6_K block dotted with the Q8_K activation block at `y` into `acc`, as
/// `vec_dot_q6_k_q8_k` in avx2.rs does: sum (q - 32) y = sum q y - 32 sum_j scale_j bsum_j.
#[inline(always)]
unsafe fn q6_k_block_dot(b: &Q6KBlock, y: *const u8, acc: &mut __m256) {
    let d = b.d * f32_at(y);
    let offset = _mm256_madd_epi16(load256(y.add(Q8_K_BSUMS)), b.scales16);
    let mut p = [_mm256_setzero_si256(); 8];
    for (k, p) in p.iter_mut().enumerate() {
        let yq = load256(y.add(Q8_K_QS + 32 * k));
        *p = _mm256_madd_epi16(_mm256_maddubs_epi16(b.q[k], yq), b.sc[k]);
    }
    let sumi = _mm256_sub_epi32(add8(p), _mm256_slli_epi32(offset, 5));
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), *acc);
}

/// `nb` Q6_K blocks of the weight row at `xr` against the N activation rows at `ys`.
#[inline(always)]
unsafe fn q6_k_dot_group<const N: usize>(nb: usize, xr: *const u8, ys: [*const u8; N]) -> [f32; N] {
    let mut acc = [_mm256_setzero_ps(); N];
    for i in 0..nb {
        let xb = xr.add(i * Q6_K_BYTES);
        prefetch_ahead::<Q6_K_BYTES>(xb);
        let b = unpack_q6_k(xb);
        for j in 0..N {
            q6_k_block_dot(&b, ys[j].add(i * Q8_K_BYTES), &mut acc[j]);
        }
    }
    let mut out = [0f32; N];
    for j in 0..N {
        out[j] = hsum_ps(acc[j]);
    }
    out
}

/// Q4_K weights . Q8_K activations (one row).
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q4_k_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / Q4_K_BYTES)
        .min(act.len() / Q8_K_BYTES);
    q4_k_dot_group::<1>(nb, w.as_ptr(), [act.as_ptr()])[0]
}

/// Q6_K weights . Q8_K activations (one row).
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q6_k_q8_k(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = (n / QK_K)
        .min(w.len() / Q6_K_BYTES)
        .min(act.len() / Q8_K_BYTES);
    q6_k_dot_group::<1>(nb, w.as_ptr(), [act.as_ptr()])[0]
}

/// `out[t * n_rows + r] = weights[r] . acts[t]` through `dot_group::<N>` (N activation rows
/// per unpacked weight block): tiles of [`ROW_TILE`] rows against every group of [`GROUP`]
/// activation rows, the tail group in its 1-, 2- or 3-column form.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn matmul_by_groups(
    n: usize,
    w: &[u8],
    w_block: usize,
    acts: &[u8],
    n_acts: usize,
    out: &mut [f32],
    dot4: unsafe fn(usize, *const u8, [*const u8; 4]) -> [f32; 4],
    dot3: unsafe fn(usize, *const u8, [*const u8; 3]) -> [f32; 3],
    dot2: unsafe fn(usize, *const u8, [*const u8; 2]) -> [f32; 2],
    dot1: unsafe fn(usize, *const u8, [*const u8; 1]) -> [f32; 1],
) {
    if n_acts == 0 {
        return;
    }
    let n_rows = out.len() / n_acts;
    let nb = n / QK_K;
    let (w_row, a_row) = (nb * w_block, nb * Q8_K_BYTES);
    if w.len() < n_rows * w_row || acts.len() < n_acts * a_row {
        // The caller (WeightKernel::matmul) checked the shapes; never read past the slices.
        return;
    }
    let y = |t: usize| acts.as_ptr().add(t * a_row);
    let x = |r: usize| w.as_ptr().add(r * w_row);
    let mut put = |t: usize, r: usize, v: &[f32]| {
        for (j, &v) in v.iter().enumerate() {
            out[(t + j) * n_rows + r] = v;
        }
    };
    for r0 in (0..n_rows).step_by(ROW_TILE) {
        let rows = r0..(r0 + ROW_TILE).min(n_rows);
        let mut t = 0;
        while t + GROUP <= n_acts {
            for r in rows.clone() {
                put(t, r, &dot4(nb, x(r), [y(t), y(t + 1), y(t + 2), y(t + 3)]));
            }
            t += GROUP;
        }
        for r in rows {
            match n_acts - t {
                3 => put(t, r, &dot3(nb, x(r), [y(t), y(t + 1), y(t + 2)])),
                2 => put(t, r, &dot2(nb, x(r), [y(t), y(t + 1)])),
                1 => put(t, r, &dot1(nb, x(r), [y(t)])),
                _ => {}
            }
        }
    }
}

/// The Q4_K column groups as functions with AVX2 enabled (so the generic body is compiled with
/// it), for `matmul_by_groups`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_group<const N: usize>(nb: usize, x: *const u8, ys: [*const u8; N]) -> [f32; N] {
    q4_k_dot_group::<N>(nb, x, ys)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_group<const N: usize>(nb: usize, x: *const u8, ys: [*const u8; N]) -> [f32; N] {
    q6_k_dot_group::<N>(nb, x, ys)
}

/// Q4_K weights x Q8_K activation rows: each weight block unpacked once for [`GROUP`] rows,
/// every output bit for bit [`vec_dot_q4_k_q8_k`].
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q4_k_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul_by_groups(
        n,
        w,
        Q4_K_BYTES,
        acts,
        n_acts,
        out,
        q4_k_group::<4>,
        q4_k_group::<3>,
        q4_k_group::<2>,
        q4_k_group::<1>,
    )
}

/// Q6_K weights x Q8_K activation rows: each weight block unpacked once for [`GROUP`] rows,
/// every output bit for bit [`vec_dot_q6_k_q8_k`].
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q6_k_q8_k(n: usize, w: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]) {
    matmul_by_groups(
        n,
        w,
        Q6_K_BYTES,
        acts,
        n_acts,
        out,
        q6_k_group::<4>,
        q6_k_group::<3>,
        q6_k_group::<2>,
        q6_k_group::<1>,
    )
}
