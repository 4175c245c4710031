//! AVX2 face of SwiGLU, bit for bit equal to `smolrun_core::math::swiglu`, whose exponential is
//! `libm::expf` (FreeBSD's algorithm): every lane runs its steps and picks its branch by mask.
//!
//! Why the bits can be the same: each step is the same IEEE f32 operation as in the scalar code
//! (multiplications and additions rounded one by one, no fused multiply-add; `vdivps` is IEEE
//! division; `vcvttps2dq` truncates like `as i32`), and `scalbnf(y, k)` is done as
//! `(y * 2^(k>>1)) * 2^(k - (k>>1))`: the first product is exact (|k| <= 150 keeps it normal),
//! so the result is rounded once, as `scalbnf` rounds it.
//!
//! # Safety (all functions)
//! Call only on a CPU with AVX2 (see [`super::avx2_fma_f16c_usable`]).

use core::arch::x86_64::*;

/// 8 lanes of `libm::expf`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn expf8(x: __m256) -> __m256 {
    let f = |bits: u32| _mm256_set1_ps(f32::from_bits(bits));
    let i = |v: i32| _mm256_set1_epi32(v);
    let bits = _mm256_castps_si256(x);
    let hx = _mm256_and_si256(bits, i(0x7fff_ffff));
    let negative = _mm256_srai_epi32::<31>(bits); // all ones where the sign bit is set
    let gt = |a: __m256i, b: i32| _mm256_cmpgt_epi32(a, i(b));

    // Argument reduction: k and x = hi - lo.
    let half = _mm256_blendv_ps(
        f(0x3f00_0000),
        f(0xbf00_0000),
        _mm256_castsi256_ps(negative),
    );
    let k_far = _mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(f(0x3fb8_aa3b), x), half));
    let k_near = _mm256_or_si256(negative, i(1)); // 1, or -1 where negative
    let far = gt(hx, 0x3f85_1592); // |x| > 1.5 ln2
    let mid = gt(hx, 0x3eb1_7218); // |x| > 0.5 ln2
    let k = _mm256_and_si256(mid, _mm256_blendv_epi8(k_near, k_far, far));
    let kf = _mm256_cvtepi32_ps(k);
    let hi = _mm256_sub_ps(x, _mm256_mul_ps(kf, f(0x3f31_7200)));
    let lo = _mm256_mul_ps(kf, f(0x35bf_be8e));
    let xr = _mm256_sub_ps(hi, lo);
    // Where |x| <= 0.5 ln2, k = 0 and the scalar code keeps x itself (hi = x, lo = 0).
    let midf = _mm256_castsi256_ps(mid);
    let (hi, lo, xr) = (
        _mm256_blendv_ps(x, hi, midf),
        _mm256_blendv_ps(_mm256_setzero_ps(), lo, midf),
        _mm256_blendv_ps(x, xr, midf),
    );

    // The primary range.
    let xx = _mm256_mul_ps(xr, xr);
    let p = _mm256_add_ps(f(0x3e2a_aa8f), _mm256_mul_ps(xx, f(0xbb35_5215)));
    let c = _mm256_sub_ps(xr, _mm256_mul_ps(xx, p));
    let q = _mm256_div_ps(_mm256_mul_ps(xr, c), _mm256_sub_ps(f(0x4000_0000), c));
    let y = _mm256_add_ps(f(0x3f80_0000), _mm256_add_ps(_mm256_sub_ps(q, lo), hi));
    // scalbnf(y, k) in two steps, the first exact.
    let k1 = _mm256_srai_epi32::<1>(k);
    let k2 = _mm256_sub_epi32(k, k1);
    let pow2 =
        |e: __m256i| _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(e, i(127))));
    let mut r = _mm256_mul_ps(_mm256_mul_ps(y, pow2(k1)), pow2(k2));

    // The scalar code's early returns, last to first so the first one wins.
    let tiny = _mm256_cmpgt_epi32(i(0x3900_0001), hx); // |x| <= 2^-14: 1 + x
    r = _mm256_blendv_ps(
        r,
        _mm256_add_ps(f(0x3f80_0000), x),
        _mm256_castsi256_ps(tiny),
    );
    let under = _mm256_and_si256(negative, gt(hx, 0x42cf_f1b4)); // x <= -103.972084: 0
    r = _mm256_blendv_ps(r, _mm256_setzero_ps(), _mm256_castsi256_ps(under));
    let over = _mm256_andnot_si256(negative, gt(hx, 0x42b1_7217)); // x >= 88.722839: x * 2^127
    r = _mm256_blendv_ps(
        r,
        _mm256_mul_ps(x, f(0x7f00_0000)),
        _mm256_castsi256_ps(over),
    );
    let nan = gt(hx, 0x7f80_0000); // NaN: x
    _mm256_blendv_ps(r, x, _mm256_castsi256_ps(nan))
}

/// `gate[i] = gate[i] / (1 + expf(-gate[i])) * up[i]` (`math::swiglu`).
///
/// # Safety
/// AVX2 must be available (see the module docs).
#[target_feature(enable = "avx2")]
pub unsafe fn swiglu(gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    let one = _mm256_set1_ps(1.0);
    let sign = _mm256_set1_ps(-0.0);
    let mut i = 0;
    let step = |g: &mut [f32], u: &[f32]| {
        let x = _mm256_loadu_ps(g.as_ptr());
        let e = expf8(_mm256_xor_ps(x, sign));
        let y = _mm256_mul_ps(
            _mm256_div_ps(x, _mm256_add_ps(one, e)),
            _mm256_loadu_ps(u.as_ptr()),
        );
        _mm256_storeu_ps(g.as_mut_ptr(), y);
    };
    while i + 8 <= n {
        step(&mut gate[i..i + 8], &up[i..i + 8]);
        i += 8;
    }
    if i < n {
        let (mut g, mut u) = ([0f32; 8], [0f32; 8]);
        g[..n - i].copy_from_slice(&gate[i..n]);
        u[..n - i].copy_from_slice(&up[i..n]);
        step(&mut g, &u);
        gate[i..n].copy_from_slice(&g[..n - i]);
    }
}

/// `x[i] = expf(x[i])` (`libm::expf`'s bits), 8 lanes at a time; the tail runs in a padded
/// vector.
///
/// # Safety
/// AVX2 must be available (see the module docs).
#[target_feature(enable = "avx2")]
pub unsafe fn exp_in_place(x: &mut [f32]) {
    let mut chunks = x.chunks_exact_mut(8);
    for c in &mut chunks {
        _mm256_storeu_ps(c.as_mut_ptr(), expf8(_mm256_loadu_ps(c.as_ptr())));
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let mut t = [0f32; 8];
        t[..tail.len()].copy_from_slice(tail);
        _mm256_storeu_ps(t.as_mut_ptr(), expf8(_mm256_loadu_ps(t.as_ptr())));
        let n = tail.len();
        tail.copy_from_slice(&t[..n]);
    }
}
