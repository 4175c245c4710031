//! F32 . F32 and F16 . F16 dot products. The scalar twins (`smolrun_core::quant::f32::vec_dot`,
//! `f16::vec_dot`) multiply in f32 and add the products in f64, one after another. These
//! kernels make the same f32 products (for F16 the product of two halves is exact in f32) and
//! add them in f64 too, but in 8 f64 lanes: the f64 sums differ by reassociation only (at
//! most 2 * gamma53(n) * sum |product|, far below an f32 ulp for any real row), so after the
//! final rounding to f32 the results agree to within one f32 ulp plus that, and bit for bit
//! whenever the f64 sums are exact (e.g. F16 rows of moderate range). Neither needs dotprod.

use core::arch::aarch64::float64x2_t;
use core::arch::asm;

/// Elements per trip through the asm loop.
const STEP: usize = 8;

/// Adds the 8 f64 lanes, then the tail products, in a fixed order.
#[inline(always)]
fn finish(acc: [float64x2_t; 4], tail: f64) -> f32 {
    // SAFETY: float64x2_t is two f64s, any bits valid.
    let lanes: [[f64; 2]; 4] = unsafe { core::mem::transmute(acc) };
    let pairs = [
        lanes[0][0] + lanes[0][1],
        lanes[1][0] + lanes[1][1],
        lanes[2][0] + lanes[2][1],
        lanes[3][0] + lanes[3][1],
    ];
    (((pairs[0] + pairs[1]) + (pairs[2] + pairs[3])) + tail) as f32
}

#[inline(always)]
fn zero_acc() -> [float64x2_t; 4] {
    // SAFETY: as in `finish`.
    unsafe { core::mem::transmute([[0.0f64; 2]; 4]) }
}

/// F32 . F32 (both rows little-endian f32 bytes). ARMv8.0 NEON, safe on every aarch64 CPU.
pub fn vec_dot_f32_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let n = n.min(w.len() / 4).min(act.len() / 4);
    let trips = n / STEP;
    let [mut a0, mut a1, mut a2, mut a3] = zero_acc();
    if trips > 0 {
        // SAFETY: the loop reads trips * 32 bytes of each row, inside both slices.
        unsafe {
            asm!(
                "2:",
                "ld1 {{v0.4s, v1.4s}}, [{x}], #32",
                "ld1 {{v2.4s, v3.4s}}, [{y}], #32",
                "fmul v0.4s, v0.4s, v2.4s",
                "fmul v1.4s, v1.4s, v3.4s",
                "fcvtl v4.2d, v0.2s",
                "fcvtl2 v5.2d, v0.4s",
                "fcvtl v6.2d, v1.2s",
                "fcvtl2 v7.2d, v1.4s",
                "fadd {a0:v}.2d, {a0:v}.2d, v4.2d",
                "fadd {a1:v}.2d, {a1:v}.2d, v5.2d",
                "fadd {a2:v}.2d, {a2:v}.2d, v6.2d",
                "fadd {a3:v}.2d, {a3:v}.2d, v7.2d",
                "subs {cnt}, {cnt}, #1",
                "b.ne 2b",
                x = inout(reg) w.as_ptr() => _,
                y = inout(reg) act.as_ptr() => _,
                cnt = inout(reg) trips => _,
                a0 = inout(vreg) a0,
                a1 = inout(vreg) a1,
                a2 = inout(vreg) a2,
                a3 = inout(vreg) a3,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _,
                out("v4") _, out("v5") _, out("v6") _, out("v7") _,
                options(nostack, readonly, pure),
            );
        }
    }
    let mut tail = 0.0f64;
    for i in trips * STEP..n {
        let f = |b: &[u8]| f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
        tail += (f(w) * f(act)) as f64;
    }
    finish([a0, a1, a2, a3], tail)
}

/// The f16 at `b[2i..2i + 2]`, widened to f32 with the hardware conversion (base ARMv8).
#[inline(always)]
fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]))
}

/// f16 bits -> f32, exactly (base ARMv8 `fcvt`): the weights' and the KV cache's halves.
#[inline(always)]
pub(super) fn f16_to_f32(bits: u16) -> f32 {
    let out: f32;
    // SAFETY: register-only conversion.
    unsafe {
        asm!(
            "fmov {h:s}, {bits:w}",
            "fcvt {out:s}, {h:h}",
            bits = in(reg) bits as u32,
            h = out(vreg) _,
            out = lateout(vreg) out,
            options(nostack, nomem, pure),
        );
    }
    out
}

/// F16 . F16 (both rows little-endian f16 bytes). ARMv8.0 NEON (the half -> single
/// conversions are base ARMv8), safe on every aarch64 CPU.
pub fn vec_dot_f16_neon(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let n = n.min(w.len() / 2).min(act.len() / 2);
    let trips = n / STEP;
    let [mut a0, mut a1, mut a2, mut a3] = zero_acc();
    if trips > 0 {
        // SAFETY: the loop reads trips * 16 bytes of each row, inside both slices.
        unsafe {
            asm!(
                "2:",
                "ld1 {{v0.8h}}, [{x}], #16",
                "ld1 {{v1.8h}}, [{y}], #16",
                "fcvtl v2.4s, v0.4h",
                "fcvtl2 v3.4s, v0.8h",
                "fcvtl v4.4s, v1.4h",
                "fcvtl2 v5.4s, v1.8h",
                "fmul v2.4s, v2.4s, v4.4s",
                "fmul v3.4s, v3.4s, v5.4s",
                "fcvtl v4.2d, v2.2s",
                "fcvtl2 v5.2d, v2.4s",
                "fcvtl v6.2d, v3.2s",
                "fcvtl2 v7.2d, v3.4s",
                "fadd {a0:v}.2d, {a0:v}.2d, v4.2d",
                "fadd {a1:v}.2d, {a1:v}.2d, v5.2d",
                "fadd {a2:v}.2d, {a2:v}.2d, v6.2d",
                "fadd {a3:v}.2d, {a3:v}.2d, v7.2d",
                "subs {cnt}, {cnt}, #1",
                "b.ne 2b",
                x = inout(reg) w.as_ptr() => _,
                y = inout(reg) act.as_ptr() => _,
                cnt = inout(reg) trips => _,
                a0 = inout(vreg) a0,
                a1 = inout(vreg) a1,
                a2 = inout(vreg) a2,
                a3 = inout(vreg) a3,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _,
                out("v4") _, out("v5") _, out("v6") _, out("v7") _,
                options(nostack, readonly, pure),
            );
        }
    }
    let mut tail = 0.0f64;
    for i in trips * STEP..n {
        tail += (f16_at(w, i) * f16_at(act, i)) as f64;
    }
    finish([a0, a1, a2, a3], tail)
}
