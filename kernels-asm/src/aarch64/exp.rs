//! NEON face of SwiGLU, bit for bit equal to `smolrun_core::math::swiglu`, whose exponential is
//! `libm::expf` (FreeBSD's algorithm): every lane runs its steps and picks its branch by mask.
//! ARMv8.0 only.
//!
//! Why the bits can be the same: each step is the same IEEE f32 operation as in the scalar code
//! (multiplications and additions rounded one by one, no fused multiply-add; `fdiv` is IEEE
//! division; `fcvtzs` truncates like `as i32`), and `scalbnf(y, k)` is done as
//! `(y * 2^(k>>1)) * 2^(k - (k>>1))`: the first product is exact (|k| <= 150 keeps it normal),
//! so the result is rounded once, as `scalbnf` rounds it. A tail of fewer than 4 values goes
//! through the same vector code from a padded buffer.

use core::arch::asm;

/// The constants of `libm::expf`, in the order the asm loads them into v16..v31.
static CONSTS: [u32; 16] = [
    0x3f00_0000, // v16: 0.5
    0x3fb8_aa3b, // v17: 1/ln2
    0x3f31_7200, // v18: ln2, high part
    0x35bf_be8e, // v19: ln2, low part
    0x3e2a_aa8f, // v20: P1
    0xbb35_5215, // v21: P2
    0x4000_0000, // v22: 2.0
    0x3f80_0000, // v23: 1.0
    0x7f00_0000, // v24: 2^127
    0x3f85_1592, // v25: |x| above this (as bits): k from x/ln2
    0x3eb1_7218, // v26: above this: k = +-1; below: k = 0
    0x3900_0001, // v27: below this: 1 + x
    0x42cf_f1b4, // v28: above this and negative: 0
    0x42b1_7217, // v29: above this and positive: x * 2^127
    0x7f80_0000, // v30: above this: NaN
    127,         // v31: the f32 exponent bias
];

/// `gate[i] = gate[i] / (1 + expf(-gate[i])) * up[i]` for `chunks` groups of 4.
///
/// # Safety
/// `gate` and `up` must hold `4 * chunks` floats.
unsafe fn swiglu_chunks(gate: *mut f32, up: *const f32, chunks: usize) {
    asm!(
        "ld1r {{v16.4s}}, [{c}], #4",
        "ld1r {{v17.4s}}, [{c}], #4",
        "ld1r {{v18.4s}}, [{c}], #4",
        "ld1r {{v19.4s}}, [{c}], #4",
        "ld1r {{v20.4s}}, [{c}], #4",
        "ld1r {{v21.4s}}, [{c}], #4",
        "ld1r {{v22.4s}}, [{c}], #4",
        "ld1r {{v23.4s}}, [{c}], #4",
        "ld1r {{v24.4s}}, [{c}], #4",
        "ld1r {{v25.4s}}, [{c}], #4",
        "ld1r {{v26.4s}}, [{c}], #4",
        "ld1r {{v27.4s}}, [{c}], #4",
        "ld1r {{v28.4s}}, [{c}], #4",
        "ld1r {{v29.4s}}, [{c}], #4",
        "ld1r {{v30.4s}}, [{c}], #4",
        "ld1r {{v31.4s}}, [{c}], #4",
        "2:",
        "ld1 {{v13.4s}}, [{g}]",
        "fneg v0.4s, v13.4s", // x = -gate
        // expf(x) into v1.
        "fabs v2.4s, v0.4s", // hx: the bits of |x|
        "sshr v3.4s, v0.4s, #31", // all ones where x < 0
        "shl v4.4s, v3.4s, #31",
        "eor v4.16b, v4.16b, v16.16b", // +-0.5, x's sign
        "fmul v5.4s, v17.4s, v0.4s",
        "fadd v5.4s, v5.4s, v4.4s",
        "fcvtzs v5.4s, v5.4s", // k, far from 0
        "movi v6.4s, #1",
        "orr v6.16b, v6.16b, v3.16b", // k = +-1
        "cmgt v7.4s, v2.4s, v25.4s",
        "cmgt v8.4s, v2.4s, v26.4s", // k != 0
        "bsl v7.16b, v5.16b, v6.16b",
        "and v7.16b, v7.16b, v8.16b", // k
        "scvtf v9.4s, v7.4s",
        "fmul v10.4s, v9.4s, v18.4s",
        "fsub v10.4s, v0.4s, v10.4s", // hi = x - k ln2hi
        "fmul v11.4s, v9.4s, v19.4s", // lo = k ln2lo
        "fsub v12.4s, v10.4s, v11.4s", // x - k ln2
        "bif v10.16b, v0.16b, v8.16b", // k = 0: hi = x,
        "and v11.16b, v11.16b, v8.16b", // lo = 0,
        "bif v12.16b, v0.16b, v8.16b", // x kept
        "fmul v4.4s, v12.4s, v12.4s", // xx
        "fmul v5.4s, v4.4s, v21.4s",
        "fadd v5.4s, v20.4s, v5.4s",
        "fmul v5.4s, v4.4s, v5.4s",
        "fsub v5.4s, v12.4s, v5.4s", // c = x - xx (P1 + xx P2)
        "fmul v6.4s, v12.4s, v5.4s",
        "fsub v5.4s, v22.4s, v5.4s",
        "fdiv v6.4s, v6.4s, v5.4s", // x c / (2 - c)
        "fsub v6.4s, v6.4s, v11.4s",
        "fadd v6.4s, v6.4s, v10.4s",
        "fadd v6.4s, v23.4s, v6.4s", // y
        "sshr v5.4s, v7.4s, #1",
        "sub v9.4s, v7.4s, v5.4s",
        "add v5.4s, v5.4s, v31.4s",
        "shl v5.4s, v5.4s, #23",
        "add v9.4s, v9.4s, v31.4s",
        "shl v9.4s, v9.4s, #23",
        "fmul v6.4s, v6.4s, v5.4s",
        "fmul v1.4s, v6.4s, v9.4s", // y * 2^k
        "cmgt v5.4s, v27.4s, v2.4s",
        "fadd v6.4s, v23.4s, v0.4s",
        "bit v1.16b, v6.16b, v5.16b", // tiny: 1 + x
        "cmgt v5.4s, v2.4s, v28.4s",
        "and v5.16b, v5.16b, v3.16b",
        "bic v1.16b, v1.16b, v5.16b", // far below: 0
        "cmgt v5.4s, v2.4s, v29.4s",
        "bic v5.16b, v5.16b, v3.16b",
        "fmul v6.4s, v0.4s, v24.4s",
        "bit v1.16b, v6.16b, v5.16b", // far above: x * 2^127
        "cmgt v5.4s, v2.4s, v30.4s",
        "bit v1.16b, v0.16b, v5.16b", // NaN: x
        // gate / (1 + e) * up
        "fadd v1.4s, v23.4s, v1.4s",
        "fdiv v1.4s, v13.4s, v1.4s",
        "ld1 {{v14.4s}}, [{u}], #16",
        "fmul v1.4s, v1.4s, v14.4s",
        "st1 {{v1.4s}}, [{g}], #16",
        "subs {cnt}, {cnt}, #1",
        "b.ne 2b",
        c = inout(reg) CONSTS.as_ptr() => _,
        g = inout(reg) gate => _,
        u = inout(reg) up => _,
        cnt = inout(reg) chunks => _,
        out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _,
        out("v6") _, out("v7") _, out("v8") _, out("v9") _, out("v10") _, out("v11") _,
        out("v12") _, out("v13") _, out("v14") _, out("v16") _, out("v17") _, out("v18") _,
        out("v19") _, out("v20") _, out("v21") _, out("v22") _, out("v23") _, out("v24") _,
        out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _, out("v30") _,
        out("v31") _,
        options(nostack),
    );
}

/// `gate[i] = silu(gate[i]) * up[i]` (`math::swiglu`).
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    let whole = n / 4;
    if whole > 0 {
        // SAFETY: gate and up hold at least 4 * whole floats.
        unsafe { swiglu_chunks(gate.as_mut_ptr(), up.as_ptr(), whole) };
    }
    let rest = n - whole * 4;
    if rest > 0 {
        let (mut g, mut u) = ([0f32; 4], [0f32; 4]);
        g[..rest].copy_from_slice(&gate[whole * 4..n]);
        u[..rest].copy_from_slice(&up[whole * 4..n]);
        // SAFETY: g and u hold 4 floats.
        unsafe { swiglu_chunks(g.as_mut_ptr(), u.as_ptr(), 1) };
        gate[whole * 4..n].copy_from_slice(&g[..rest]);
    }
}
