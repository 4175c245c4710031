//! NEON faces of the attention loops over an f16 KV cache, bit for bit equal to the scalar
//! code in `smolrun_core::math::attention_head` (the golden tests depend on those bits: they
//! reproduce llama.cpp's flash attention). ARMv8.0 only (`fcvtl`/`fcvtn`, `fmla`, `trn`), so
//! one face serves the Cortex-A53 and the A76 alike, and every function is safe to call on any
//! aarch64 CPU.
//!
//! Why the bits can be the same:
//! - `fcvtl` converts f16 to f32 exactly, like `half::f16::to_f32` (NaNs come out quiet with
//!   the payload kept, as `half` does).
//! - `fcvtn` rounds f32 to f16 in the FPCR's mode, round-to-nearest-even on every OS we run
//!   on (FPCR is 0: no flush-to-zero, no default NaN), which is what `half::f16::from_f32`
//!   implements in software.
//! - `fmla`/`fmadd` round once, like `libm::fmaf`; `fmul` then `fadd` round twice, like the
//!   scalar code's `a * b + c`.
//! - Every sum keeps the scalar code's order: the same lanes, the same pairwise reduction, the
//!   same sequential chains; only independent chains run side by side in vector lanes.
//!
//! Keys and values are read as rows of `dim` f16 at `stride` apart (one KV head of the cache
//! at consecutive positions). Each function clamps the number of rows to what the slice
//! holds, so a short slice gives fewer results, never an out-of-bounds read.

use super::float::f16_to_f32;
use core::arch::asm;

/// How many rows of `dim` elements at `stride` apart `data` holds.
#[inline(always)]
fn rows_in(data: &[u16], dim: usize, stride: usize) -> usize {
    if dim == 0 || data.len() < dim {
        0
    } else {
        (data.len() - dim) / stride.max(1) + 1
    }
}

/// f32 -> nearest f16 -> f32.
#[inline(always)]
fn round_f16(x: f32) -> f32 {
    let out: f32;
    // SAFETY: register-only conversions.
    unsafe {
        asm!(
            "fcvt {h:h}, {x:s}",
            "fcvt {out:s}, {h:h}",
            x = in(vreg) x,
            h = out(vreg) _,
            out = lateout(vreg) out,
            options(nostack, nomem, pure),
        );
    }
    out
}

/// `a * b + c` rounded once.
#[inline(always)]
fn fmadd(a: f32, b: f32, c: f32) -> f32 {
    let out: f32;
    // SAFETY: register-only arithmetic.
    unsafe {
        asm!(
            "fmadd {out:s}, {a:s}, {b:s}, {c:s}",
            a = in(vreg) a,
            b = in(vreg) b,
            c = in(vreg) c,
            out = lateout(vreg) out,
            options(nostack, nomem, pure),
        );
    }
    out
}

/// `scores[i]` = the dot product of `q` with key row `i`, summed like
/// `smolrun_core::math::dot_f16_in_lanes`: 64 lanes (here v0..v15, 4 each) each take every
/// 64th product with a fused multiply-add, then v8..v15 are added onto v0..v7 (lanes l and
/// l + 32), v4..v7 onto v0..v3 (l + 16), v2,v3 onto v0,v1 (l + 8), v1 onto v0 (l + 4), then
/// lanes (0 + 2, 1 + 3) and their sum; the dimensions past the last whole 64 are added one by
/// one in f64 (f32 products), as the scalar code does.
pub fn key_dots_lanes64(q: &[f32], keys: &[u16], stride: usize, scores: &mut [f32]) {
    let dim = q.len();
    let n = scores.len().min(rows_in(keys, dim, stride));
    let chunks = dim / 64;
    for (i, score) in scores[..n].iter_mut().enumerate() {
        let row = &keys[i * stride..][..dim];
        let lanes: f32;
        // SAFETY: the loop reads `chunks` * 64 elements of `q` and of `row`, inside both.
        unsafe {
            asm!(
                "movi v0.4s, #0", "movi v1.4s, #0", "movi v2.4s, #0", "movi v3.4s, #0",
                "movi v4.4s, #0", "movi v5.4s, #0", "movi v6.4s, #0", "movi v7.4s, #0",
                "movi v8.4s, #0", "movi v9.4s, #0", "movi v10.4s, #0", "movi v11.4s, #0",
                "movi v12.4s, #0", "movi v13.4s, #0", "movi v14.4s, #0", "movi v15.4s, #0",
                "cbz {cnt}, 3f",
                "2:",
                // Lanes 0..15.
                "ld1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{q}], #64",
                "ld1 {{v20.8h, v21.8h}}, [{k}], #32",
                "fcvtl2 v22.4s, v20.8h",
                "fcvtl v20.4s, v20.4h",
                "fcvtl2 v23.4s, v21.8h",
                "fcvtl v21.4s, v21.4h",
                "fmla v0.4s, v16.4s, v20.4s",
                "fmla v1.4s, v17.4s, v22.4s",
                "fmla v2.4s, v18.4s, v21.4s",
                "fmla v3.4s, v19.4s, v23.4s",
                // Lanes 16..31.
                "ld1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{q}], #64",
                "ld1 {{v20.8h, v21.8h}}, [{k}], #32",
                "fcvtl2 v22.4s, v20.8h",
                "fcvtl v20.4s, v20.4h",
                "fcvtl2 v23.4s, v21.8h",
                "fcvtl v21.4s, v21.4h",
                "fmla v4.4s, v16.4s, v20.4s",
                "fmla v5.4s, v17.4s, v22.4s",
                "fmla v6.4s, v18.4s, v21.4s",
                "fmla v7.4s, v19.4s, v23.4s",
                // Lanes 32..47.
                "ld1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{q}], #64",
                "ld1 {{v20.8h, v21.8h}}, [{k}], #32",
                "fcvtl2 v22.4s, v20.8h",
                "fcvtl v20.4s, v20.4h",
                "fcvtl2 v23.4s, v21.8h",
                "fcvtl v21.4s, v21.4h",
                "fmla v8.4s, v16.4s, v20.4s",
                "fmla v9.4s, v17.4s, v22.4s",
                "fmla v10.4s, v18.4s, v21.4s",
                "fmla v11.4s, v19.4s, v23.4s",
                // Lanes 48..63.
                "ld1 {{v16.4s, v17.4s, v18.4s, v19.4s}}, [{q}], #64",
                "ld1 {{v20.8h, v21.8h}}, [{k}], #32",
                "fcvtl2 v22.4s, v20.8h",
                "fcvtl v20.4s, v20.4h",
                "fcvtl2 v23.4s, v21.8h",
                "fcvtl v21.4s, v21.4h",
                "fmla v12.4s, v16.4s, v20.4s",
                "fmla v13.4s, v17.4s, v22.4s",
                "fmla v14.4s, v18.4s, v21.4s",
                "fmla v15.4s, v19.4s, v23.4s",
                "subs {cnt}, {cnt}, #1",
                "b.ne 2b",
                "3:",
                "fadd v0.4s, v0.4s, v8.4s",
                "fadd v1.4s, v1.4s, v9.4s",
                "fadd v2.4s, v2.4s, v10.4s",
                "fadd v3.4s, v3.4s, v11.4s",
                "fadd v4.4s, v4.4s, v12.4s",
                "fadd v5.4s, v5.4s, v13.4s",
                "fadd v6.4s, v6.4s, v14.4s",
                "fadd v7.4s, v7.4s, v15.4s",
                "fadd v0.4s, v0.4s, v4.4s",
                "fadd v1.4s, v1.4s, v5.4s",
                "fadd v2.4s, v2.4s, v6.4s",
                "fadd v3.4s, v3.4s, v7.4s",
                "fadd v0.4s, v0.4s, v2.4s",
                "fadd v1.4s, v1.4s, v3.4s",
                "fadd v0.4s, v0.4s, v1.4s",
                "ext v1.16b, v0.16b, v0.16b, #8",
                "fadd v0.4s, v0.4s, v1.4s",
                "faddp s0, v0.2s",
                q = inout(reg) q.as_ptr() => _,
                k = inout(reg) row.as_ptr() => _,
                cnt = inout(reg) chunks => _,
                out("v0") lanes,
                out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _,
                out("v6") _, out("v7") _, out("v8") _, out("v9") _, out("v10") _,
                out("v11") _, out("v12") _, out("v13") _, out("v14") _, out("v15") _,
                out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
                out("v21") _, out("v22") _, out("v23") _,
                options(nostack, readonly, pure),
            );
        }
        let mut sum = lanes as f64;
        for d in chunks * 64..dim {
            sum += (q[d] * f16_to_f32(row[d])) as f64;
        }
        *score = sum as f32;
    }
}

/// `scores[i]` = the dot product of `q` with key row `i` as Rust's `Iterator::sum` of the f32
/// products computes it: one sequential chain per key, starting at -0.0, each product rounded
/// before its addition. The chain of one key cannot be split, so the lanes run over keys
/// instead: 8 keys at a time (two registers of 4), their rows transposed 4 dimensions at a
/// time. A last partial group of keys reruns the final 8 keys (the same values again); fewer
/// than 8 keys in all run one by one.
pub fn key_dots_sequential(q: &[f32], keys: &[u16], stride: usize, scores: &mut [f32]) {
    let dim = q.len();
    let n = scores.len().min(rows_in(keys, dim, stride));
    let dim4 = dim / 4 * 4;
    let mut i0 = 0;
    while n >= 8 && i0 < n {
        let start = i0.min(n - 8);
        let base = &keys[start * stride..];
        let mut acc = [-0.0f32; 8];
        if dim4 > 0 {
            // SAFETY: row j's pointer advances by 8 bytes per trip for dim4 / 4 trips, inside
            // row j (j < 8 rows of `dim` elements at `stride` apart, which `n` guarantees);
            // q is read for dim4 elements.
            unsafe {
                asm!(
                    "ld1 {{v0.4s, v1.4s}}, [{acc}]",
                    "2:",
                    "ld1 {{v16.4s}}, [{q}], #16",
                    "ldr d20, [{k0}], #8",
                    "ldr d21, [{k1}], #8",
                    "ldr d22, [{k2}], #8",
                    "ldr d23, [{k3}], #8",
                    "ldr d24, [{k4}], #8",
                    "ldr d25, [{k5}], #8",
                    "ldr d26, [{k6}], #8",
                    "ldr d27, [{k7}], #8",
                    // Keys 0..3: 4 rows of 4 halves -> 4 columns (one per dimension).
                    "trn1 v28.4h, v20.4h, v21.4h",
                    "trn2 v29.4h, v20.4h, v21.4h",
                    "trn1 v30.4h, v22.4h, v23.4h",
                    "trn2 v31.4h, v22.4h, v23.4h",
                    "trn1 v20.2s, v28.2s, v30.2s",
                    "trn1 v21.2s, v29.2s, v31.2s",
                    "trn2 v22.2s, v28.2s, v30.2s",
                    "trn2 v23.2s, v29.2s, v31.2s",
                    // Keys 4..7.
                    "trn1 v28.4h, v24.4h, v25.4h",
                    "trn2 v29.4h, v24.4h, v25.4h",
                    "trn1 v30.4h, v26.4h, v27.4h",
                    "trn2 v31.4h, v26.4h, v27.4h",
                    "trn1 v24.2s, v28.2s, v30.2s",
                    "trn1 v25.2s, v29.2s, v31.2s",
                    "trn2 v26.2s, v28.2s, v30.2s",
                    "trn2 v27.2s, v29.2s, v31.2s",
                    "fcvtl v20.4s, v20.4h",
                    "fcvtl v21.4s, v21.4h",
                    "fcvtl v22.4s, v22.4h",
                    "fcvtl v23.4s, v23.4h",
                    "fcvtl v24.4s, v24.4h",
                    "fcvtl v25.4s, v25.4h",
                    "fcvtl v26.4s, v26.4h",
                    "fcvtl v27.4s, v27.4h",
                    // Dimension d + m: product rounded, then added (two chains, 4 keys each).
                    "fmul v28.4s, v20.4s, v16.s[0]",
                    "fmul v29.4s, v24.4s, v16.s[0]",
                    "fadd v0.4s, v0.4s, v28.4s",
                    "fadd v1.4s, v1.4s, v29.4s",
                    "fmul v28.4s, v21.4s, v16.s[1]",
                    "fmul v29.4s, v25.4s, v16.s[1]",
                    "fadd v0.4s, v0.4s, v28.4s",
                    "fadd v1.4s, v1.4s, v29.4s",
                    "fmul v28.4s, v22.4s, v16.s[2]",
                    "fmul v29.4s, v26.4s, v16.s[2]",
                    "fadd v0.4s, v0.4s, v28.4s",
                    "fadd v1.4s, v1.4s, v29.4s",
                    "fmul v28.4s, v23.4s, v16.s[3]",
                    "fmul v29.4s, v27.4s, v16.s[3]",
                    "fadd v0.4s, v0.4s, v28.4s",
                    "fadd v1.4s, v1.4s, v29.4s",
                    "subs {cnt}, {cnt}, #1",
                    "b.ne 2b",
                    "st1 {{v0.4s, v1.4s}}, [{acc}]",
                    acc = in(reg) acc.as_mut_ptr(),
                    q = inout(reg) q.as_ptr() => _,
                    k0 = inout(reg) base.as_ptr() => _,
                    k1 = inout(reg) base.as_ptr().add(stride) => _,
                    k2 = inout(reg) base.as_ptr().add(2 * stride) => _,
                    k3 = inout(reg) base.as_ptr().add(3 * stride) => _,
                    k4 = inout(reg) base.as_ptr().add(4 * stride) => _,
                    k5 = inout(reg) base.as_ptr().add(5 * stride) => _,
                    k6 = inout(reg) base.as_ptr().add(6 * stride) => _,
                    k7 = inout(reg) base.as_ptr().add(7 * stride) => _,
                    cnt = inout(reg) dim4 / 4 => _,
                    out("v0") _, out("v1") _, out("v16") _,
                    out("v20") _, out("v21") _, out("v22") _, out("v23") _,
                    out("v24") _, out("v25") _, out("v26") _, out("v27") _,
                    out("v28") _, out("v29") _, out("v30") _, out("v31") _,
                    options(nostack),
                );
            }
        }
        // The dimensions past the last 4, in order, continue each key's chain.
        for (j, a) in acc.iter_mut().enumerate() {
            let row = &base[j * stride..][..dim];
            for d in dim4..dim {
                *a += q[d] * f16_to_f32(row[d]);
            }
        }
        scores[start..start + 8].copy_from_slice(&acc);
        i0 = start + 8;
    }
    if n < 8 {
        for (i, score) in scores[..n].iter_mut().enumerate() {
            let row = &keys[i * stride..][..dim];
            let mut sum = -0.0f32;
            for d in 0..dim {
                sum += q[d] * f16_to_f32(row[d]);
            }
            *score = sum;
        }
    }
}

/// `out[d] += weights[i] * value_i[d]` for the value rows `i` in order (each product rounded,
/// then the sum): the f32 kernel's weighted sum. `out` stays in registers 16 dimensions at a
/// time while all rows go by.
pub fn weighted_values(out: &mut [f32], weights: &[f32], values: &[u16], stride: usize) {
    let dim = out.len();
    let n = weights.len().min(rows_in(values, dim, stride));
    let dim16 = dim / 16 * 16;
    if n > 0 {
        for d in (0..dim16).step_by(16) {
            // SAFETY: reads n weights, and 16 elements at offset d < dim16 <= dim of each of
            // the n value rows; writes out[d..d + 16].
            unsafe {
                asm!(
                    "ld1 {{v0.4s, v1.4s, v2.4s, v3.4s}}, [{o}]",
                    "2:",
                    "ld1r {{v31.4s}}, [{w}], #4",
                    "ld1 {{v4.8h, v5.8h}}, [{v}]",
                    "add {v}, {v}, {vstep}",
                    "fcvtl v6.4s, v4.4h",
                    "fcvtl2 v7.4s, v4.8h",
                    "fcvtl v16.4s, v5.4h",
                    "fcvtl2 v17.4s, v5.8h",
                    "fmul v6.4s, v6.4s, v31.4s",
                    "fmul v7.4s, v7.4s, v31.4s",
                    "fmul v16.4s, v16.4s, v31.4s",
                    "fmul v17.4s, v17.4s, v31.4s",
                    "fadd v0.4s, v0.4s, v6.4s",
                    "fadd v1.4s, v1.4s, v7.4s",
                    "fadd v2.4s, v2.4s, v16.4s",
                    "fadd v3.4s, v3.4s, v17.4s",
                    "subs {cnt}, {cnt}, #1",
                    "b.ne 2b",
                    "st1 {{v0.4s, v1.4s, v2.4s, v3.4s}}, [{o}]",
                    o = in(reg) out.as_mut_ptr().add(d),
                    w = inout(reg) weights.as_ptr() => _,
                    v = inout(reg) values.as_ptr().add(d) => _,
                    vstep = in(reg) stride * 2,
                    cnt = inout(reg) n => _,
                    out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                    out("v5") _, out("v6") _, out("v7") _, out("v16") _, out("v17") _,
                    out("v31") _,
                    options(nostack),
                );
            }
        }
    }
    for d in dim16..dim {
        let mut acc = out[d];
        for (i, &w) in weights[..n].iter().enumerate() {
            acc += w * f16_to_f32(values[i * stride + d]);
        }
        out[d] = acc;
    }
}

/// `out[d] = f16(out[d] * ms)`: the f16 accumulator rescaled when a new maximum score
/// arrives.
pub fn rescale_f16(out: &mut [f32], ms: f32) {
    let dim8 = out.len() / 8 * 8;
    if dim8 > 0 {
        // SAFETY: reads and writes out[..dim8].
        unsafe {
            asm!(
                "2:",
                "ld1 {{v0.4s, v1.4s}}, [{o}]",
                "fmul v0.4s, v0.4s, {ms:v}.s[0]",
                "fmul v1.4s, v1.4s, {ms:v}.s[0]",
                "fcvtn v2.4h, v0.4s",
                "fcvtn2 v2.8h, v1.4s",
                "fcvtl v0.4s, v2.4h",
                "fcvtl2 v1.4s, v2.8h",
                "st1 {{v0.4s, v1.4s}}, [{o}], #32",
                "subs {cnt}, {cnt}, #1",
                "b.ne 2b",
                o = inout(reg) out.as_mut_ptr() => _,
                ms = in(vreg) ms,
                cnt = inout(reg) dim8 / 8 => _,
                out("v0") _, out("v1") _, out("v2") _,
                options(nostack),
            );
        }
    }
    for o in out[dim8..].iter_mut() {
        *o = round_f16(*o * ms);
    }
}

/// `out[d] = f16(fma(value[d], vs, out[d]))`: one value row added to the f16 accumulator.
pub fn accumulate_f16(out: &mut [f32], value: &[u16], vs: f32) {
    let dim = out.len().min(value.len());
    let dim8 = dim / 8 * 8;
    if dim8 > 0 {
        // SAFETY: reads value[..dim8], reads and writes out[..dim8].
        unsafe {
            asm!(
                "2:",
                "ld1 {{v4.8h}}, [{v}], #16",
                "ld1 {{v0.4s, v1.4s}}, [{o}]",
                "fcvtl v2.4s, v4.4h",
                "fcvtl2 v3.4s, v4.8h",
                "fmla v0.4s, v2.4s, {vs:v}.s[0]",
                "fmla v1.4s, v3.4s, {vs:v}.s[0]",
                "fcvtn v4.4h, v0.4s",
                "fcvtn2 v4.8h, v1.4s",
                "fcvtl v0.4s, v4.4h",
                "fcvtl2 v1.4s, v4.8h",
                "st1 {{v0.4s, v1.4s}}, [{o}], #32",
                "subs {cnt}, {cnt}, #1",
                "b.ne 2b",
                o = inout(reg) out.as_mut_ptr() => _,
                v = inout(reg) value.as_ptr() => _,
                vs = in(vreg) vs,
                cnt = inout(reg) dim8 / 8 => _,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                options(nostack),
            );
        }
    }
    for d in dim8..dim {
        out[d] = round_f16(fmadd(f16_to_f32(value[d]), vs, out[d]));
    }
}

// =============================================================================================
// A q8_0 KV cache (`smolrun_core::kv_q8`): the value rows into the f32 accumulator, bit for
// bit `kv_q8::accumulate_rows` (the keys' dots are the Q8_0 . Q8_0 row kernels of q8_0.rs,
// which keep the scalar twin's bits). ARMv8.0 only: one face for every core.
// - `sxtl` and `scvtf` turn the quants into exact f32 values; `fmul` by the block's scale
//   rounds as the scalar `q as f32 * d` does; `fmla` (by element) rounds once, like `fmaf`.
// =============================================================================================

/// Bytes of a Q8_0 block and values in it.
const Q8_BYTES: usize = 34;
const Q8_ELEMS: usize = 32;

/// For each value row `i` in order: `out *= ms[i]` where it is not 1, then (unless
/// `vs[i] == 0`, a skipped row, not read) `out[d] = fma(q[d] as f32 * scale, vs[i], out[d])`:
/// `smolrun_core::kv_q8::accumulate_rows`. One block of the accumulator (32 values, 8
/// registers) at a time goes through every row.
pub fn accumulate_rows_q8_0(out: &mut [f32], values: &[u8], stride: usize, ms: &[f32], vs: &[f32]) {
    let nb = out.len() / Q8_ELEMS;
    let bytes = nb * Q8_BYTES;
    let rows = if bytes == 0 || values.len() < bytes {
        0
    } else {
        (values.len() - bytes) / stride.max(1) + 1
    };
    let n = ms.len().min(vs.len()).min(rows);
    for b in 0..nb {
        if n == 0 {
            break;
        }
        // SAFETY: 32 f32 of `out` at block b; rows 0..n of the values hold block b (n is
        // clamped to the rows the slice holds); n values of `ms` and `vs`; base NEON only.
        unsafe {
            asm!(
                "ldp q16, q17, [{o}]",
                "ldp q18, q19, [{o}, #32]",
                "ldp q20, q21, [{o}, #64]",
                "ldp q22, q23, [{o}, #96]",
                "fmov s13, #1.0",
                "2:",
                "ldr s10, [{ms}], #4",
                "ldr s11, [{vs}], #4",
                "fcmp s10, s13",
                "b.eq 3f",
                "fmul v16.4s, v16.4s, v10.s[0]",
                "fmul v17.4s, v17.4s, v10.s[0]",
                "fmul v18.4s, v18.4s, v10.s[0]",
                "fmul v19.4s, v19.4s, v10.s[0]",
                "fmul v20.4s, v20.4s, v10.s[0]",
                "fmul v21.4s, v21.4s, v10.s[0]",
                "fmul v22.4s, v22.4s, v10.s[0]",
                "fmul v23.4s, v23.4s, v10.s[0]",
                "3:",
                "fcmp s11, #0.0",
                "b.eq 4f",
                "ldr h12, [{v}]",
                "ldur q0, [{v}, #2]",
                "ldur q1, [{v}, #18]",
                "fcvt s12, h12",
                "sxtl v2.8h, v0.8b",
                "sxtl2 v3.8h, v0.16b",
                "sxtl v4.8h, v1.8b",
                "sxtl2 v5.8h, v1.16b",
                "sxtl v6.4s, v2.4h",
                "sxtl2 v7.4s, v2.8h",
                "sxtl v24.4s, v3.4h",
                "sxtl2 v25.4s, v3.8h",
                "sxtl v26.4s, v4.4h",
                "sxtl2 v27.4s, v4.8h",
                "sxtl v28.4s, v5.4h",
                "sxtl2 v29.4s, v5.8h",
                "scvtf v6.4s, v6.4s",
                "scvtf v7.4s, v7.4s",
                "scvtf v24.4s, v24.4s",
                "scvtf v25.4s, v25.4s",
                "scvtf v26.4s, v26.4s",
                "scvtf v27.4s, v27.4s",
                "scvtf v28.4s, v28.4s",
                "scvtf v29.4s, v29.4s",
                "fmul v6.4s, v6.4s, v12.s[0]",
                "fmul v7.4s, v7.4s, v12.s[0]",
                "fmul v24.4s, v24.4s, v12.s[0]",
                "fmul v25.4s, v25.4s, v12.s[0]",
                "fmul v26.4s, v26.4s, v12.s[0]",
                "fmul v27.4s, v27.4s, v12.s[0]",
                "fmul v28.4s, v28.4s, v12.s[0]",
                "fmul v29.4s, v29.4s, v12.s[0]",
                "fmla v16.4s, v6.4s, v11.s[0]",
                "fmla v17.4s, v7.4s, v11.s[0]",
                "fmla v18.4s, v24.4s, v11.s[0]",
                "fmla v19.4s, v25.4s, v11.s[0]",
                "fmla v20.4s, v26.4s, v11.s[0]",
                "fmla v21.4s, v27.4s, v11.s[0]",
                "fmla v22.4s, v28.4s, v11.s[0]",
                "fmla v23.4s, v29.4s, v11.s[0]",
                "4:",
                "add {v}, {v}, {stride}",
                "subs {n}, {n}, #1",
                "b.ne 2b",
                "stp q16, q17, [{o}]",
                "stp q18, q19, [{o}, #32]",
                "stp q20, q21, [{o}, #64]",
                "stp q22, q23, [{o}, #96]",
                o = in(reg) out.as_mut_ptr().add(b * Q8_ELEMS),
                v = inout(reg) values.as_ptr().add(b * Q8_BYTES) => _,
                ms = inout(reg) ms.as_ptr() => _,
                vs = inout(reg) vs.as_ptr() => _,
                n = inout(reg) n => _,
                stride = in(reg) stride,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _,
                out("v4") _, out("v5") _, out("v6") _, out("v7") _,
                out("v10") _, out("v11") _, out("v12") _, out("v13") _,
                out("v16") _, out("v17") _, out("v18") _, out("v19") _,
                out("v20") _, out("v21") _, out("v22") _, out("v23") _,
                out("v24") _, out("v25") _, out("v26") _, out("v27") _,
                out("v28") _, out("v29") _,
                options(nostack),
            );
        }
    }
    // Values past the last whole block are only rescaled, as the scalar code does.
    let tail = nb * Q8_ELEMS;
    for &m in &ms[..n] {
        if m != 1.0 {
            out[tail..].iter_mut().for_each(|o| *o *= m);
        }
    }
}
