//! AVX2 + FMA + F16C face of the fused gated delta rule step, bit for bit
//! `smolrun_core::math::delta_rule_step` (f32 state) and `delta_rule_step_f16` (f16 state).
//!
//! Why the bits can be the same: the scalar twin keeps 16 lanes per dot product (lane
//! `i % 16`), which here are two registers of 8; its `fmaf`s are `vfmadd` (one rounding),
//! its products and sums are `vmulps`/`vaddps`, and its pairwise reduction (l + 8, l + 4,
//! l + 2, l + 1) is the register add, the 128-bit halves, `movhlps` and `movshdup` below.
//! `vcvtph2ps` widens f16 exactly and `vcvtps2ph` with round-to-nearest-even is IEEE's
//! narrowing, which `half::f16::from_f32` implements.
//!
//! Rows are independent, so four run side by side (eight accumulator chains instead of two:
//! the FMA latency is hidden), each in the scalar order. A state row (512 bytes at dk = 128)
//! is read from memory once: the second sweep finds it in L1.
//!
//! # Safety (all functions)
//! Call only on a CPU with AVX2, FMA and F16C (see [`super::avx2_fma_f16c_usable`]).

use core::arch::x86_64::*;

/// A state element: f32, or f16 bits widened on load and rounded on store.
trait Cell: Copy {
    unsafe fn load8(p: *const Self) -> __m256;
    unsafe fn store8(p: *mut Self, x: __m256);
}

impl Cell for f32 {
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store8(p: *mut f32, x: __m256) {
        _mm256_storeu_ps(p, x)
    }
}

impl Cell for u16 {
    #[inline(always)]
    unsafe fn load8(p: *const u16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }
    #[inline(always)]
    unsafe fn store8(p: *mut u16, x: __m256) {
        _mm_storeu_si128(
            p as *mut __m128i,
            _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x),
        )
    }
}

/// `((t4[0] + t4[2]) + (t4[1] + t4[3]))` of `t4[l] = t8[l] + t8[l + 4]`, `t8 = lo + hi`.
#[inline(always)]
unsafe fn sum16(lo: __m256, hi: __m256) -> f32 {
    let t8 = _mm256_add_ps(lo, hi);
    let t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
    let t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
    _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)))
}

/// `R` consecutive rows starting at `sp` (each `dk` cells, dk a multiple of 16).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows<S: Cell, const R: usize>(
    sp: *mut S,
    dk: usize,
    qp: *const f32,
    kp: *const f32,
    v: &[f32; R],
    decay: f32,
    beta: f32,
    scale: f32,
) -> [f32; R] {
    let dec = _mm256_set1_ps(decay);
    // Sweep 1: the decayed row times k.
    let mut lo = [_mm256_setzero_ps(); R];
    let mut hi = [_mm256_setzero_ps(); R];
    let mut c = 0;
    while c < dk {
        let k0 = _mm256_loadu_ps(kp.add(c));
        let k1 = _mm256_loadu_ps(kp.add(c + 8));
        for r in 0..R {
            let p = sp.add(r * dk + c);
            lo[r] = _mm256_fmadd_ps(_mm256_mul_ps(S::load8(p), dec), k0, lo[r]);
            hi[r] = _mm256_fmadd_ps(_mm256_mul_ps(S::load8(p.add(8)), dec), k1, hi[r]);
        }
        c += 16;
    }
    let mut d = [_mm256_setzero_ps(); R];
    for r in 0..R {
        d[r] = _mm256_set1_ps((v[r] - sum16(lo[r], hi[r])) * beta);
        lo[r] = _mm256_setzero_ps();
        hi[r] = _mm256_setzero_ps();
    }
    // Sweep 2: the update, stored, and the new row times q.
    let mut c = 0;
    while c < dk {
        let k0 = _mm256_loadu_ps(kp.add(c));
        let k1 = _mm256_loadu_ps(kp.add(c + 8));
        let q0 = _mm256_loadu_ps(qp.add(c));
        let q1 = _mm256_loadu_ps(qp.add(c + 8));
        for r in 0..R {
            let p = sp.add(r * dk + c);
            let x0 = _mm256_fmadd_ps(k0, d[r], _mm256_mul_ps(S::load8(p), dec));
            let x1 = _mm256_fmadd_ps(k1, d[r], _mm256_mul_ps(S::load8(p.add(8)), dec));
            S::store8(p, x0);
            S::store8(p.add(8), x1);
            lo[r] = _mm256_fmadd_ps(x0, q0, lo[r]);
            hi[r] = _mm256_fmadd_ps(x1, q1, hi[r]);
        }
        c += 16;
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = sum16(lo[r], hi[r]) * scale;
    }
    out
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn step<S: Cell>(
    s: &mut [S],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: f32,
    beta: f32,
    scale: f32,
    out: &mut [f32],
) {
    let dk = k.len();
    assert!(
        dk.is_multiple_of(16) && q.len() >= dk,
        "delta rule: dk must be a multiple of 16"
    );
    if dk == 0 {
        return;
    }
    let n = out.len().min(v.len()).min(s.len() / dk);
    let (sp, qp, kp) = (s.as_mut_ptr(), q.as_ptr(), k.as_ptr());
    let mut j = 0;
    while j + 4 <= n {
        let vj = [v[j], v[j + 1], v[j + 2], v[j + 3]];
        let o = rows::<S, 4>(sp.add(j * dk), dk, qp, kp, &vj, decay, beta, scale);
        out[j..j + 4].copy_from_slice(&o);
        j += 4;
    }
    while j < n {
        let o = rows::<S, 1>(sp.add(j * dk), dk, qp, kp, &[v[j]], decay, beta, scale);
        out[j] = o[0];
        j += 1;
    }
}

/// One token of the gated delta rule on one value head's f32 state `s` (`out.len()` rows of
/// `k.len()`; rows past what `s` or `v` holds are left alone), `scale` = 1 / sqrt(dk).
/// Panics unless dk is a multiple of 16 and `q` holds dk values.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn delta_rule_f32(
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: f32,
    beta: f32,
    scale: f32,
    out: &mut [f32],
) {
    step(s, q, k, v, decay, beta, scale, out)
}

/// [`delta_rule_f32`] on a state of f16 bits.
///
/// # Safety
/// AVX2, FMA and F16C must be available (see the module docs).
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn delta_rule_f16(
    s: &mut [u16],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: f32,
    beta: f32,
    scale: f32,
    out: &mut [f32],
) {
    step(s, q, k, v, decay, beta, scale, out)
}
