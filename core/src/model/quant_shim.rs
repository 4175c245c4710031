//! Stand-in for `core::quant`'s matvec dispatch while the quant branch is being written.
//!
//! Same signatures as the real API (`vec_dot_type`, `quantize_row`, `dequantize_row`,
//! `vec_dot_fn`, `matvec`), scalar only, for the types the test models use (F32, F16, Q8_0,
//! Q5_0, Q4_K, Q6_K with Q8_0/Q8_K activations). Replaced by `crate::quant` on merge.

use crate::quant::{GgmlType, QuantError};
use half::f16;

pub type VecDotFn = fn(usize, &[u8], &[u8]) -> f32;

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

fn f32_at(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

pub fn vec_dot_type(w: GgmlType) -> Result<GgmlType, QuantError> {
    match w {
        GgmlType::F32 => Ok(GgmlType::F32),
        GgmlType::F16 => Ok(GgmlType::F16),
        GgmlType::Q8_0 | GgmlType::Q5_0 => Ok(GgmlType::Q8_0),
        GgmlType::Q4_K | GgmlType::Q6_K => Ok(GgmlType::Q8_K),
        t => Err(QuantError::Unsupported {
            ggml_type: t,
            op: "matvec",
        }),
    }
}

fn round_half_even(x: f32) -> i32 {
    // ggml's nearest_int: the float magic-number trick rounds half to even.
    let r = libm::rintf(x);
    r as i32
}

pub fn quantize_row(ty: GgmlType, x: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    let need = ty.bytes_for(x.len() as u64).ok_or(QuantError::BadLength {
        ggml_type: ty,
        expected: ty.block_size(),
        found: x.len(),
    })? as usize;
    if out.len() < need {
        return Err(QuantError::BadLength {
            ggml_type: ty,
            expected: need,
            found: out.len(),
        });
    }
    match ty {
        GgmlType::F32 => {
            for (i, v) in x.iter().enumerate() {
                out[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for (i, v) in x.iter().enumerate() {
                out[2 * i..2 * i + 2].copy_from_slice(&f16::from_f32(*v).to_bits().to_le_bytes());
            }
        }
        GgmlType::Q8_0 => {
            for (b, xs) in x.chunks_exact(32).enumerate() {
                let o = &mut out[b * 34..b * 34 + 34];
                let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                o[0..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
                for (j, v) in xs.iter().enumerate() {
                    o[2 + j] = libm::roundf(v * id) as i8 as u8;
                }
            }
        }
        GgmlType::Q8_K => {
            for (b, xs) in x.chunks_exact(256).enumerate() {
                let o = &mut out[b * 292..b * 292 + 292];
                let (mut amax, mut max) = (0f32, 0f32);
                for &v in xs {
                    if v.abs() > amax {
                        amax = v.abs();
                        max = v;
                    }
                }
                if amax == 0.0 {
                    o.fill(0);
                    continue;
                }
                let iscale = -127.0 / max;
                for (j, &v) in xs.iter().enumerate() {
                    o[4 + j] = round_half_even(iscale * v).min(127) as i8 as u8;
                }
                for g in 0..16 {
                    let s: i32 = (0..16).map(|k| o[4 + g * 16 + k] as i8 as i32).sum();
                    o[260 + 2 * g..262 + 2 * g].copy_from_slice(&(s as i16).to_le_bytes());
                }
                o[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
            }
        }
        t => {
            return Err(QuantError::Unsupported {
                ggml_type: t,
                op: "quantize",
            })
        }
    }
    Ok(())
}

fn q4k_scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

pub fn dequantize_row(ty: GgmlType, src: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let need = ty
        .bytes_for(out.len() as u64)
        .ok_or(QuantError::BadLength {
            ggml_type: ty,
            expected: ty.block_size(),
            found: out.len(),
        })? as usize;
    if src.len() < need {
        return Err(QuantError::BadLength {
            ggml_type: ty,
            expected: need,
            found: src.len(),
        });
    }
    match ty {
        GgmlType::F32 => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = f32_at(src, 4 * i);
            }
        }
        GgmlType::F16 => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = f16_at(src, 2 * i);
            }
        }
        GgmlType::Q8_0 => {
            for (b, ys) in out.chunks_exact_mut(32).enumerate() {
                let blk = &src[b * 34..];
                let d = f16_at(blk, 0);
                for (j, y) in ys.iter_mut().enumerate() {
                    *y = (blk[2 + j] as i8) as f32 * d;
                }
            }
        }
        GgmlType::Q5_0 => {
            for (b, ys) in out.chunks_exact_mut(32).enumerate() {
                let blk = &src[b * 22..];
                let d = f16_at(blk, 0);
                let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
                for j in 0..16 {
                    let h0 = (((qh >> j) << 4) & 0x10) as u8;
                    let h1 = ((qh >> (j + 12)) & 0x10) as u8;
                    let x0 = ((blk[6 + j] & 0xF) | h0) as i32 - 16;
                    let x1 = ((blk[6 + j] >> 4) | h1) as i32 - 16;
                    ys[j] = x0 as f32 * d;
                    ys[j + 16] = x1 as f32 * d;
                }
            }
        }
        GgmlType::Q4_K => {
            for (b, ys) in out.chunks_exact_mut(256).enumerate() {
                let blk = &src[b * 144..];
                let d = f16_at(blk, 0);
                let dmin = f16_at(blk, 2);
                let scales = &blk[4..16];
                let qs = &blk[16..144];
                for c in 0..4 {
                    let (sc1, m1) = q4k_scale_min(2 * c, scales);
                    let (sc2, m2) = q4k_scale_min(2 * c + 1, scales);
                    let (d1, mm1) = (d * sc1 as f32, dmin * m1 as f32);
                    let (d2, mm2) = (d * sc2 as f32, dmin * m2 as f32);
                    let q = &qs[32 * c..32 * c + 32];
                    for l in 0..32 {
                        ys[64 * c + l] = d1 * (q[l] & 0xF) as f32 - mm1;
                        ys[64 * c + 32 + l] = d2 * (q[l] >> 4) as f32 - mm2;
                    }
                }
            }
        }
        GgmlType::Q6_K => {
            for (b, ys) in out.chunks_exact_mut(256).enumerate() {
                let blk = &src[b * 210..];
                for n in 0..2 {
                    let ql = &blk[64 * n..];
                    let qh = &blk[128 + 32 * n..];
                    let sc = &blk[192 + 8 * n..];
                    let d = f16_at(blk, 208);
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                        let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                        let y = &mut ys[128 * n..];
                        y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                        y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                        y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                        y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
                    }
                }
            }
        }
        t => {
            return Err(QuantError::Unsupported {
                ggml_type: t,
                op: "dequantize",
            })
        }
    }
    Ok(())
}

fn dot_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    (0..n).map(|i| f32_at(w, 4 * i) * f32_at(a, 4 * i)).sum()
}

fn dot_f16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    (0..n).map(|i| f16_at(w, 2 * i) * f16_at(a, 2 * i)).sum()
}

fn dot_q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f32;
    for b in 0..n / 32 {
        let (wb, ab) = (&w[b * 34..b * 34 + 34], &a[b * 34..b * 34 + 34]);
        let s: i32 = (0..32)
            .map(|j| (wb[2 + j] as i8 as i32) * (ab[2 + j] as i8 as i32))
            .sum();
        sum += s as f32 * (f16_at(wb, 0) * f16_at(ab, 0));
    }
    sum
}

fn dot_q5_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f32;
    for b in 0..n / 32 {
        let (wb, ab) = (&w[b * 22..b * 22 + 22], &a[b * 34..b * 34 + 34]);
        let qh = u32::from_le_bytes([wb[2], wb[3], wb[4], wb[5]]);
        let mut s = 0i32;
        for j in 0..16 {
            let h0 = (((qh >> j) << 4) & 0x10) as u8;
            let h1 = ((qh >> (j + 12)) & 0x10) as u8;
            let x0 = ((wb[6 + j] & 0xF) | h0) as i32 - 16;
            let x1 = ((wb[6 + j] >> 4) | h1) as i32 - 16;
            s += x0 * (ab[2 + j] as i8 as i32) + x1 * (ab[2 + j + 16] as i8 as i32);
        }
        sum += s as f32 * (f16_at(wb, 0) * f16_at(ab, 0));
    }
    sum
}

fn dot_q4_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f32;
    for b in 0..n / 256 {
        let (wb, ab) = (&w[b * 144..b * 144 + 144], &a[b * 292..b * 292 + 292]);
        let (d, dmin, dy) = (f16_at(wb, 0), f16_at(wb, 2), f32_at(ab, 0));
        let (scales, qs, aq) = (&wb[4..16], &wb[16..144], &ab[4..260]);
        let (mut sumi, mut summ) = (0i32, 0i32);
        for c in 0..4 {
            let (sc1, m1) = q4k_scale_min(2 * c, scales);
            let (sc2, m2) = q4k_scale_min(2 * c + 1, scales);
            let q = &qs[32 * c..];
            let (mut s1, mut s2) = (0i32, 0i32);
            for l in 0..32 {
                s1 += (q[l] & 0xF) as i32 * (aq[64 * c + l] as i8 as i32);
                s2 += (q[l] >> 4) as i32 * (aq[64 * c + 32 + l] as i8 as i32);
            }
            sumi += sc1 as i32 * s1 + sc2 as i32 * s2;
            let bs = |g: usize| i16::from_le_bytes([ab[260 + 2 * g], ab[261 + 2 * g]]) as i32;
            summ += m1 as i32 * (bs(4 * c) + bs(4 * c + 1))
                + m2 as i32 * (bs(4 * c + 2) + bs(4 * c + 3));
        }
        sum += dy * d * sumi as f32 - dy * dmin * summ as f32;
    }
    sum
}

fn dot_q6_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f32;
    let mut q = [0i32; 256];
    for b in 0..n / 256 {
        let (wb, ab) = (&w[b * 210..b * 210 + 210], &a[b * 292..b * 292 + 292]);
        for n in 0..2 {
            let ql = &wb[64 * n..];
            let qh = &wb[128 + 32 * n..];
            for l in 0..32 {
                q[128 * n + l] = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                q[128 * n + l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                q[128 * n + l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                q[128 * n + l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            }
        }
        let mut sumi = 0i32;
        for g in 0..16 {
            let s: i32 = (0..16)
                .map(|k| q[16 * g + k] * (ab[4 + 16 * g + k] as i8 as i32))
                .sum();
            sumi += (wb[192 + g] as i8 as i32) * s;
        }
        sum += f16_at(wb, 208) * f32_at(ab, 0) * sumi as f32;
    }
    sum
}

pub fn vec_dot_fn(w: GgmlType) -> Result<VecDotFn, QuantError> {
    match w {
        GgmlType::F32 => Ok(dot_f32),
        GgmlType::F16 => Ok(dot_f16),
        GgmlType::Q8_0 => Ok(dot_q8_0),
        GgmlType::Q5_0 => Ok(dot_q5_0),
        GgmlType::Q4_K => Ok(dot_q4_k),
        GgmlType::Q6_K => Ok(dot_q6_k),
        t => Err(QuantError::Unsupported {
            ggml_type: t,
            op: "matvec",
        }),
    }
}

/// `out[r] = dot(row r of weights, activation)` for `n_rows` rows of `n_cols` elements.
pub fn matvec(
    w_ty: GgmlType,
    weights: &[u8],
    n_rows: usize,
    n_cols: usize,
    act_quantized: &[u8],
    out: &mut [f32],
) -> Result<(), QuantError> {
    let dot = vec_dot_fn(w_ty)?;
    let row_bytes = w_ty.bytes_for(n_cols as u64).unwrap_or(0) as usize;
    if weights.len() < row_bytes * n_rows || out.len() < n_rows {
        return Err(QuantError::BadLength {
            ggml_type: w_ty,
            expected: row_bytes * n_rows,
            found: weights.len(),
        });
    }
    for (r, o) in out[..n_rows].iter_mut().enumerate() {
        *o = dot(
            n_cols,
            &weights[r * row_bytes..(r + 1) * row_bytes],
            act_quantized,
        );
    }
    Ok(())
}
