//! NEON face of the fused gated delta rule step, bit for bit
//! `smolrun_core::math::delta_rule_step` (f32 state) and `delta_rule_step_f16` (f16 state).
//! ARMv8.0 only (`fmla`, `fcvtl`/`fcvtn`), so one face serves the Cortex-A53, the A55 and the
//! Apple A7 alike, and both functions are safe to call on any aarch64 CPU.
//!
//! Why the bits can be the same: the scalar twin keeps 16 lanes per dot product (lane
//! `i % 16`), here four registers of 4; its `fmaf`s are `fmla` (one rounding, by element for
//! the delta), the decay is an `fmul` by element, and its pairwise reduction (l + 8, l + 4,
//! l + 2, l + 1) is `fadd` of registers 0,2 and 1,3, then of the two, then `ext` #8 and
//! `faddp`. `fcvtl` widens f16 exactly; `fcvtn` rounds to nearest even in the FPCR's mode
//! (FPCR is 0 on every OS we run on), which is `half::f16::from_f32`.
//!
//! Two rows run side by side in one asm block per sweep (eight accumulator chains: the
//! in-order A53/A55 issue an `fmla` every cycle instead of waiting out its latency), each in
//! the scalar order. A row is read from memory once; the second sweep finds it in L1. The
//! delta between the sweeps, `(v - sk) * beta`, is two f32 operations in Rust.

use core::arch::asm;

/// `(sk0, sk1)`: rows `r0` and `r1` (f32, `trips` * 16 values) decayed and dotted with `k`.
#[inline(always)]
unsafe fn sweep1_f32(
    r0: *const f32,
    r1: *const f32,
    k: *const f32,
    trips: usize,
    decay: f32,
) -> (f32, f32) {
    let (sk0, sk1): (f32, f32);
    asm!(
        "movi v0.4s, #0", "movi v1.4s, #0", "movi v2.4s, #0", "movi v3.4s, #0",
        "movi v4.4s, #0", "movi v5.4s, #0", "movi v6.4s, #0", "movi v7.4s, #0",
        "2:",
        "ld1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{k}], #64",
        "ld1 {{v20.4s, v21.4s, v22.4s, v23.4s}}, [{r0}], #64",
        "ld1 {{v24.4s, v25.4s, v26.4s, v27.4s}}, [{r1}], #64",
        "fmul v20.4s, v20.4s, v28.s[0]",
        "fmul v24.4s, v24.4s, v28.s[0]",
        "fmul v21.4s, v21.4s, v28.s[0]",
        "fmul v25.4s, v25.4s, v28.s[0]",
        "fmla v0.4s, v20.4s, v16.4s",
        "fmla v4.4s, v24.4s, v16.4s",
        "fmul v22.4s, v22.4s, v28.s[0]",
        "fmul v26.4s, v26.4s, v28.s[0]",
        "fmla v1.4s, v21.4s, v17.4s",
        "fmla v5.4s, v25.4s, v17.4s",
        "fmul v23.4s, v23.4s, v28.s[0]",
        "fmul v27.4s, v27.4s, v28.s[0]",
        "fmla v2.4s, v22.4s, v18.4s",
        "fmla v6.4s, v26.4s, v18.4s",
        "fmla v3.4s, v23.4s, v19.4s",
        "fmla v7.4s, v27.4s, v19.4s",
        "subs {cnt}, {cnt}, #1",
        "b.ne 2b",
        // lanes l + 8, l + 4, l + 2, l + 1 of both rows
        "fadd v0.4s, v0.4s, v2.4s",
        "fadd v4.4s, v4.4s, v6.4s",
        "fadd v1.4s, v1.4s, v3.4s",
        "fadd v5.4s, v5.4s, v7.4s",
        "fadd v0.4s, v0.4s, v1.4s",
        "fadd v4.4s, v4.4s, v5.4s",
        "ext v1.16b, v0.16b, v0.16b, #8",
        "ext v5.16b, v4.16b, v4.16b, #8",
        "fadd v0.2s, v0.2s, v1.2s",
        "fadd v4.2s, v4.2s, v5.2s",
        "faddp s0, v0.2s",
        "faddp s4, v4.2s",
        k = inout(reg) k => _,
        r0 = inout(reg) r0 => _,
        r1 = inout(reg) r1 => _,
        cnt = inout(reg) trips => _,
        in("v28") decay,
        out("v0") sk0, out("v4") sk1,
        out("v1") _, out("v2") _, out("v3") _, out("v5") _, out("v6") _, out("v7") _,
        out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
        out("v21") _, out("v22") _, out("v23") _, out("v24") _, out("v25") _,
        out("v26") _, out("v27") _,
        options(nostack, readonly, pure),
    );
    (sk0, sk1)
}

/// Rows `r0`, `r1` (f32) decayed, updated by `k * d0` / `k * d1` and stored; returns the new
/// rows dotted with `q` (before the output scale).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn sweep2_f32(
    r0: *mut f32,
    r1: *mut f32,
    k: *const f32,
    q: *const f32,
    trips: usize,
    decay: f32,
    d0: f32,
    d1: f32,
) -> (f32, f32) {
    let (o0, o1): (f32, f32);
    asm!(
        "movi v0.4s, #0", "movi v1.4s, #0", "movi v2.4s, #0", "movi v3.4s, #0",
        "movi v4.4s, #0", "movi v5.4s, #0", "movi v6.4s, #0", "movi v7.4s, #0",
        "2:",
        "ld1 {{v20.4s, v21.4s, v22.4s, v23.4s}}, [{r0}]",
        "ld1 {{v24.4s, v25.4s, v26.4s, v27.4s}}, [{r1}]",
        "ld1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{k}], #64",
        "fmul v20.4s, v20.4s, v28.s[0]",
        "fmul v24.4s, v24.4s, v28.s[0]",
        "fmul v21.4s, v21.4s, v28.s[0]",
        "fmul v25.4s, v25.4s, v28.s[0]",
        "fmul v22.4s, v22.4s, v28.s[0]",
        "fmul v26.4s, v26.4s, v28.s[0]",
        "fmul v23.4s, v23.4s, v28.s[0]",
        "fmul v27.4s, v27.4s, v28.s[0]",
        "ld1 {{v8.4s, v9.4s, v10.4s, v11.4s}}, [{q}], #64",
        "fmla v20.4s, v16.4s, v29.s[0]",
        "fmla v24.4s, v16.4s, v30.s[0]",
        "fmla v21.4s, v17.4s, v29.s[0]",
        "fmla v25.4s, v17.4s, v30.s[0]",
        "fmla v22.4s, v18.4s, v29.s[0]",
        "fmla v26.4s, v18.4s, v30.s[0]",
        "fmla v23.4s, v19.4s, v29.s[0]",
        "fmla v27.4s, v19.4s, v30.s[0]",
        "fmla v0.4s, v20.4s, v8.4s",
        "fmla v4.4s, v24.4s, v8.4s",
        "fmla v1.4s, v21.4s, v9.4s",
        "fmla v5.4s, v25.4s, v9.4s",
        "st1 {{v20.4s, v21.4s, v22.4s, v23.4s}}, [{r0}], #64",
        "fmla v2.4s, v22.4s, v10.4s",
        "fmla v6.4s, v26.4s, v10.4s",
        "fmla v3.4s, v23.4s, v11.4s",
        "fmla v7.4s, v27.4s, v11.4s",
        "st1 {{v24.4s, v25.4s, v26.4s, v27.4s}}, [{r1}], #64",
        "subs {cnt}, {cnt}, #1",
        "b.ne 2b",
        "fadd v0.4s, v0.4s, v2.4s",
        "fadd v4.4s, v4.4s, v6.4s",
        "fadd v1.4s, v1.4s, v3.4s",
        "fadd v5.4s, v5.4s, v7.4s",
        "fadd v0.4s, v0.4s, v1.4s",
        "fadd v4.4s, v4.4s, v5.4s",
        "ext v1.16b, v0.16b, v0.16b, #8",
        "ext v5.16b, v4.16b, v4.16b, #8",
        "fadd v0.2s, v0.2s, v1.2s",
        "fadd v4.2s, v4.2s, v5.2s",
        "faddp s0, v0.2s",
        "faddp s4, v4.2s",
        k = inout(reg) k => _,
        q = inout(reg) q => _,
        r0 = inout(reg) r0 => _,
        r1 = inout(reg) r1 => _,
        cnt = inout(reg) trips => _,
        in("v28") decay,
        in("v29") d0,
        in("v30") d1,
        out("v0") o0, out("v4") o1,
        out("v1") _, out("v2") _, out("v3") _, out("v5") _, out("v6") _, out("v7") _,
        out("v8") _, out("v9") _, out("v10") _, out("v11") _,
        out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
        out("v21") _, out("v22") _, out("v23") _, out("v24") _, out("v25") _,
        out("v26") _, out("v27") _,
        options(nostack),
    );
    (o0, o1)
}

/// [`sweep1_f32`] on rows of f16 bits.
#[inline(always)]
unsafe fn sweep1_f16(
    r0: *const u16,
    r1: *const u16,
    k: *const f32,
    trips: usize,
    decay: f32,
) -> (f32, f32) {
    let (sk0, sk1): (f32, f32);
    asm!(
        "movi v0.4s, #0", "movi v1.4s, #0", "movi v2.4s, #0", "movi v3.4s, #0",
        "movi v4.4s, #0", "movi v5.4s, #0", "movi v6.4s, #0", "movi v7.4s, #0",
        "2:",
        "ld1 {{v20.8h, v21.8h}}, [{r0}], #32",
        "ld1 {{v24.8h, v25.8h}}, [{r1}], #32",
        "ld1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{k}], #64",
        // values 8..15 first: their halves' register is overwritten last
        "fcvtl v22.4s, v21.4h",
        "fcvtl v26.4s, v25.4h",
        "fcvtl2 v23.4s, v21.8h",
        "fcvtl2 v27.4s, v25.8h",
        "fcvtl2 v21.4s, v20.8h",
        "fcvtl2 v25.4s, v24.8h",
        "fcvtl v20.4s, v20.4h",
        "fcvtl v24.4s, v24.4h",
        "fmul v20.4s, v20.4s, v28.s[0]",
        "fmul v24.4s, v24.4s, v28.s[0]",
        "fmul v21.4s, v21.4s, v28.s[0]",
        "fmul v25.4s, v25.4s, v28.s[0]",
        "fmla v0.4s, v20.4s, v16.4s",
        "fmla v4.4s, v24.4s, v16.4s",
        "fmul v22.4s, v22.4s, v28.s[0]",
        "fmul v26.4s, v26.4s, v28.s[0]",
        "fmla v1.4s, v21.4s, v17.4s",
        "fmla v5.4s, v25.4s, v17.4s",
        "fmul v23.4s, v23.4s, v28.s[0]",
        "fmul v27.4s, v27.4s, v28.s[0]",
        "fmla v2.4s, v22.4s, v18.4s",
        "fmla v6.4s, v26.4s, v18.4s",
        "fmla v3.4s, v23.4s, v19.4s",
        "fmla v7.4s, v27.4s, v19.4s",
        "subs {cnt}, {cnt}, #1",
        "b.ne 2b",
        "fadd v0.4s, v0.4s, v2.4s",
        "fadd v4.4s, v4.4s, v6.4s",
        "fadd v1.4s, v1.4s, v3.4s",
        "fadd v5.4s, v5.4s, v7.4s",
        "fadd v0.4s, v0.4s, v1.4s",
        "fadd v4.4s, v4.4s, v5.4s",
        "ext v1.16b, v0.16b, v0.16b, #8",
        "ext v5.16b, v4.16b, v4.16b, #8",
        "fadd v0.2s, v0.2s, v1.2s",
        "fadd v4.2s, v4.2s, v5.2s",
        "faddp s0, v0.2s",
        "faddp s4, v4.2s",
        k = inout(reg) k => _,
        r0 = inout(reg) r0 => _,
        r1 = inout(reg) r1 => _,
        cnt = inout(reg) trips => _,
        in("v28") decay,
        out("v0") sk0, out("v4") sk1,
        out("v1") _, out("v2") _, out("v3") _, out("v5") _, out("v6") _, out("v7") _,
        out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
        out("v21") _, out("v22") _, out("v23") _, out("v24") _, out("v25") _,
        out("v26") _, out("v27") _,
        options(nostack, readonly, pure),
    );
    (sk0, sk1)
}

/// [`sweep2_f32`] on rows of f16 bits: the new values are rounded to f16 when stored, and
/// dotted with `q` before that rounding.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn sweep2_f16(
    r0: *mut u16,
    r1: *mut u16,
    k: *const f32,
    q: *const f32,
    trips: usize,
    decay: f32,
    d0: f32,
    d1: f32,
) -> (f32, f32) {
    let (o0, o1): (f32, f32);
    asm!(
        "movi v0.4s, #0", "movi v1.4s, #0", "movi v2.4s, #0", "movi v3.4s, #0",
        "movi v4.4s, #0", "movi v5.4s, #0", "movi v6.4s, #0", "movi v7.4s, #0",
        "2:",
        "ld1 {{v20.8h, v21.8h}}, [{r0}]",
        "ld1 {{v24.8h, v25.8h}}, [{r1}]",
        "ld1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{k}], #64",
        "fcvtl v22.4s, v21.4h",
        "fcvtl v26.4s, v25.4h",
        "fcvtl2 v23.4s, v21.8h",
        "fcvtl2 v27.4s, v25.8h",
        "fcvtl2 v21.4s, v20.8h",
        "fcvtl2 v25.4s, v24.8h",
        "fcvtl v20.4s, v20.4h",
        "fcvtl v24.4s, v24.4h",
        "fmul v20.4s, v20.4s, v28.s[0]",
        "fmul v24.4s, v24.4s, v28.s[0]",
        "fmul v21.4s, v21.4s, v28.s[0]",
        "fmul v25.4s, v25.4s, v28.s[0]",
        "fmul v22.4s, v22.4s, v28.s[0]",
        "fmul v26.4s, v26.4s, v28.s[0]",
        "fmul v23.4s, v23.4s, v28.s[0]",
        "fmul v27.4s, v27.4s, v28.s[0]",
        "ld1 {{v8.4s, v9.4s, v10.4s, v11.4s}}, [{q}], #64",
        "fmla v20.4s, v16.4s, v29.s[0]",
        "fmla v24.4s, v16.4s, v30.s[0]",
        "fmla v21.4s, v17.4s, v29.s[0]",
        "fmla v25.4s, v17.4s, v30.s[0]",
        "fmla v22.4s, v18.4s, v29.s[0]",
        "fmla v26.4s, v18.4s, v30.s[0]",
        "fmla v23.4s, v19.4s, v29.s[0]",
        "fmla v27.4s, v19.4s, v30.s[0]",
        "fmla v0.4s, v20.4s, v8.4s",
        "fmla v4.4s, v24.4s, v8.4s",
        "fmla v1.4s, v21.4s, v9.4s",
        "fmla v5.4s, v25.4s, v9.4s",
        "fmla v2.4s, v22.4s, v10.4s",
        "fmla v6.4s, v26.4s, v10.4s",
        "fmla v3.4s, v23.4s, v11.4s",
        "fmla v7.4s, v27.4s, v11.4s",
        // round to f16 after the dots (they take the unrounded values)
        "fcvtn v20.4h, v20.4s",
        "fcvtn v24.4h, v24.4s",
        "fcvtn2 v20.8h, v21.4s",
        "fcvtn2 v24.8h, v25.4s",
        "fcvtn v21.4h, v22.4s",
        "fcvtn v25.4h, v26.4s",
        "fcvtn2 v21.8h, v23.4s",
        "fcvtn2 v25.8h, v27.4s",
        "st1 {{v20.8h, v21.8h}}, [{r0}], #32",
        "st1 {{v24.8h, v25.8h}}, [{r1}], #32",
        "subs {cnt}, {cnt}, #1",
        "b.ne 2b",
        "fadd v0.4s, v0.4s, v2.4s",
        "fadd v4.4s, v4.4s, v6.4s",
        "fadd v1.4s, v1.4s, v3.4s",
        "fadd v5.4s, v5.4s, v7.4s",
        "fadd v0.4s, v0.4s, v1.4s",
        "fadd v4.4s, v4.4s, v5.4s",
        "ext v1.16b, v0.16b, v0.16b, #8",
        "ext v5.16b, v4.16b, v4.16b, #8",
        "fadd v0.2s, v0.2s, v1.2s",
        "fadd v4.2s, v4.2s, v5.2s",
        "faddp s0, v0.2s",
        "faddp s4, v4.2s",
        k = inout(reg) k => _,
        q = inout(reg) q => _,
        r0 = inout(reg) r0 => _,
        r1 = inout(reg) r1 => _,
        cnt = inout(reg) trips => _,
        in("v28") decay,
        in("v29") d0,
        in("v30") d1,
        out("v0") o0, out("v4") o1,
        out("v1") _, out("v2") _, out("v3") _, out("v5") _, out("v6") _, out("v7") _,
        out("v8") _, out("v9") _, out("v10") _, out("v11") _,
        out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
        out("v21") _, out("v22") _, out("v23") _, out("v24") _, out("v25") _,
        out("v26") _, out("v27") _,
        options(nostack),
    );
    (o0, o1)
}

/// The rows a step may touch: an even count (the asm runs pairs) within `s`, `v` and `out`.
/// Panics unless dk is a non-zero multiple of 16 and `q` holds dk values.
fn checked_pairs(dk: usize, q: usize, s_cells: usize, v: usize, out: usize) -> usize {
    assert!(
        dk > 0 && dk.is_multiple_of(16) && q >= dk,
        "delta rule: dk must be a non-zero multiple of 16"
    );
    out.min(v).min(s_cells / dk) / 2
}

/// One token of the gated delta rule on one value head's f32 state `s` (rows of `k.len()`,
/// one per `out` value), `scale` = 1 / sqrt(dk). Rows run in pairs: an odd last row (and any
/// row past what `s` or `v` holds) is left alone, for the caller to run. Panics unless dk is
/// a non-zero multiple of 16 and `q` holds dk values.
#[allow(clippy::too_many_arguments)]
pub fn delta_rule_f32_neon(
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: f32,
    beta: f32,
    scale: f32,
    out: &mut [f32],
) {
    let dk = k.len();
    let pairs = checked_pairs(dk, q.len(), s.len(), v.len(), out.len());
    let trips = dk / 16;
    for p in 0..pairs {
        let j = 2 * p;
        // SAFETY: rows j and j + 1 lie inside `s` (checked_pairs), each sweep reads and
        // writes dk values of each and reads dk of `k` and `q`.
        unsafe {
            let r0 = s.as_mut_ptr().add(j * dk);
            let r1 = r0.add(dk);
            let (sk0, sk1) = sweep1_f32(r0, r1, k.as_ptr(), trips, decay);
            let d0 = (v[j] - sk0) * beta;
            let d1 = (v[j + 1] - sk1) * beta;
            let (o0, o1) = sweep2_f32(r0, r1, k.as_ptr(), q.as_ptr(), trips, decay, d0, d1);
            out[j] = o0 * scale;
            out[j + 1] = o1 * scale;
        }
    }
}

/// [`delta_rule_f32_neon`] on a state of f16 bits.
#[allow(clippy::too_many_arguments)]
pub fn delta_rule_f16_neon(
    s: &mut [u16],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: f32,
    beta: f32,
    scale: f32,
    out: &mut [f32],
) {
    let dk = k.len();
    let pairs = checked_pairs(dk, q.len(), s.len(), v.len(), out.len());
    let trips = dk / 16;
    for p in 0..pairs {
        let j = 2 * p;
        // SAFETY: as in `delta_rule_f32_neon`.
        unsafe {
            let r0 = s.as_mut_ptr().add(j * dk);
            let r1 = r0.add(dk);
            let (sk0, sk1) = sweep1_f16(r0, r1, k.as_ptr(), trips, decay);
            let d0 = (v[j] - sk0) * beta;
            let d1 = (v[j + 1] - sk1) * beta;
            let (o0, o1) = sweep2_f16(r0, r1, k.as_ptr(), q.as_ptr(), trips, decay, d0, d1);
            out[j] = o0 * scale;
            out[j + 1] = o1 * scale;
        }
    }
}
