//! Attention over a q8_0 KV cache (`--cache-type-k q8_0 --cache-type-v q8_0`): each cached
//! row is Q8_0 blocks (34 bytes per 32 values, 1.89x smaller than f16), as in llama.cpp.
//!
//! The numbers follow llama.cpp's CPU flash attention for a quantized cache
//! (`ggml_compute_forward_flash_attn_ext_f16_one_chunk`, used for every batch size when K is
//! not f16): the query is quantized to Q8_0 as well, each score is the Q8_0 . Q8_0 dot (an
//! exact integer sum per block, times the two scales, summed in f32), then the online softmax
//! in key order with an **f32** value accumulator (V is dequantized row by row and added with
//! a fused multiply-add). Quantizing the query is what llama.cpp does with `-ctk q8_0`; an f32
//! query against dequantized keys would be more exact but would not be the reference's number.
//!
//! ```text
//! qq = q8_0(q)                                  per query head
//! s_i = dot_q8_0(qq, key_i) * scale             (softcap)
//! online softmax over i: a new maximum rescales acc by ms = exp(old - max) (vs = 1),
//!                        otherwise vs = exp(s_i - max); acc = fma(deq(value_i), vs, acc)
//! out = acc / sum
//! ```
//!
//! The skip threshold (`--attn-skip-eps`, decoding only): every score is computed first, so the
//! maximum is known before any value is read; then only rows with `s_i - max >= ln(eps)` get
//! their exponential and their value row (weights below `eps` of the largest are dropped).
//!
//! The vector loops are [`AttentionLoopsQ8`]: the scalar ones here are the truth, the AVX2 and
//! NEON faces (smolrun_kernels) give the same bits (the integer sums are exact and every float
//! operation happens in the same order).

use crate::math::{softcap, AttentionSpan, ATTENTION_BLOCK};
use crate::quant::q8_0::{self, BLOCK_BYTES, BLOCK_ELEMS, OFF_QS};
use half::f16;

/// The Walsh-Hadamard rotations llama.cpp b11434 applies around a quantized cache (its
/// `attn_rot`): Q and K of each head in chunks of `k` values, V in chunks of `v`, and the
/// attention output rotated back with the V rotation (the rotation is its own inverse). Dot
/// products are unchanged; the outliers of K (Qwen2's biases) are spread over the chunk, so
/// Q8_0 rounds them far less coarsely: without it a q8_0 cache cost Qwen2.5-Coder-0.5B +1.7%
/// perplexity at -c 2048 where llama.cpp's cost +0.6%. `None` where llama.cpp has none
/// (a head dim that is not a multiple of 64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotations {
    pub k: Option<usize>,
    pub v: Option<usize>,
}

impl Rotations {
    /// llama.cpp's sizes: K's the largest power-of-two multiple of 64 dividing the head dim,
    /// V's 64.
    pub fn for_heads(head_dim: usize, head_dim_v: usize) -> Rotations {
        let k = (head_dim > 0 && head_dim.is_multiple_of(64)).then(|| {
            let mut n = 64;
            while head_dim.is_multiple_of(2 * n) {
                n *= 2;
            }
            n
        });
        let v = (head_dim_v > 0 && head_dim_v.is_multiple_of(64)).then_some(64);
        Rotations { k, v }
    }
}

/// `x` in chunks of `n` (a power of two) through the orthonormal Walsh-Hadamard transform,
/// in llama.cpp's order: each value times 1/sqrt(n), then the butterflies (u + v, u - v)
/// with spans 1, 2, 4, ... (`ggml_compute_forward_fwht`).
pub fn hadamard_in_place(x: &mut [f32], n: usize) {
    let scale = 1.0 / libm::sqrtf(n as f32);
    for c in x.chunks_exact_mut(n) {
        c.iter_mut().for_each(|v| *v *= scale);
        let mut len = 1;
        while len < n {
            for i in (0..n).step_by(2 * len) {
                for j in i..i + len {
                    let (u, v) = (c[j], c[j + len]);
                    c[j] = u + v;
                    c[j + len] = u - v;
                }
            }
            len *= 2;
        }
    }
}

/// The widest head a q8_0 cache takes (the quantized query of a group lives on the stack).
pub const MAX_HEAD_DIM: usize = 512;

/// Bytes of `dim` values as Q8_0 blocks (`dim` a multiple of 32).
pub const fn row_bytes(dim: usize) -> usize {
    dim / BLOCK_ELEMS * BLOCK_BYTES
}

/// One KV head of a layer's q8_0 cache: per position `n_head_kv` heads of `head_dim` keys and
/// `head_dim_v` values, each a run of Q8_0 blocks.
pub struct KvHeadQ8<'a> {
    pub key_cache: &'a [u8],
    pub value_cache: &'a [u8],
    pub head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub head_dim_v: usize,
}

/// `scores[i]` = the Q8_0 dot of the quantized query `qq` with key row `i` (rows at `stride`
/// bytes apart, each `qq.len()` bytes).
pub type KeyDotsQ8Fn = fn(qq: &[u8], keys: &[u8], stride: usize, scores: &mut [f32]);
/// For each value row `i` in order: `out *= ms[i]` where `ms[i] != 1`, then, unless
/// `vs[i] == 0` (a skipped row, not read), `out[d] = fmaf(deq(value_i)[d], vs[i], out[d])`.
pub type AccumulateRowsQ8Fn =
    fn(out: &mut [f32], values: &[u8], stride: usize, ms: &[f32], vs: &[f32]);

/// The vector loops of [`attention_q8_with`], one face per CPU, each bit for bit the scalar
/// one ([`AttentionLoopsQ8::SCALAR`]).
#[derive(Clone, Copy, Debug)]
pub struct AttentionLoopsQ8 {
    pub key_dots: KeyDotsQ8Fn,
    pub accumulate_rows: AccumulateRowsQ8Fn,
    /// `x[i] = libm::expf(x[i])`.
    pub exp_in_place: fn(x: &mut [f32]),
}

impl AttentionLoopsQ8 {
    pub const SCALAR: AttentionLoopsQ8 = AttentionLoopsQ8 {
        key_dots,
        accumulate_rows,
        exp_in_place: crate::math::exp_in_place,
    };
}

/// The scalar truth of [`AttentionLoopsQ8::key_dots`]: ggml's `ggml_vec_dot_q8_0_q8_0`
/// (an i32 sum per block, times dk * dq, summed in f32 block after block).
pub fn key_dots(qq: &[u8], keys: &[u8], stride: usize, scores: &mut [f32]) {
    let n = qq.len() / BLOCK_BYTES * BLOCK_ELEMS;
    let bytes = row_bytes(n);
    for (i, s) in scores.iter_mut().enumerate() {
        let Some(k) = keys.get(i * stride..i * stride + bytes) else {
            return;
        };
        *s = q8_0::vec_dot(n, k, &qq[..bytes]);
    }
}

/// The scale of a Q8_0 block as f32.
#[inline(always)]
pub fn block_scale(b: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// The scalar truth of [`AttentionLoopsQ8::accumulate_rows`]. Leaving out the rescale where
/// `ms` is 1 changes nothing (x * 1 = x), and a skipped row (`vs == 0`) would add only zeros.
pub fn accumulate_rows(out: &mut [f32], values: &[u8], stride: usize, ms: &[f32], vs: &[f32]) {
    let dim = out.len() / BLOCK_ELEMS * BLOCK_ELEMS;
    let bytes = row_bytes(dim);
    for (i, (&m, &v)) in ms.iter().zip(vs).enumerate() {
        let Some(row) = values.get(i * stride..i * stride + bytes) else {
            return;
        };
        if m != 1.0 {
            out.iter_mut().for_each(|o| *o *= m);
        }
        if v == 0.0 {
            continue;
        }
        for (o, b) in out[..dim]
            .chunks_exact_mut(BLOCK_ELEMS)
            .zip(row.chunks_exact(BLOCK_BYTES))
        {
            let d = block_scale(b);
            for (o, &q) in o.iter_mut().zip(&b[OFF_QS..BLOCK_BYTES]) {
                *o = libm::fmaf((q as i8) as f32 * d, v, *o);
            }
        }
    }
}

/// Query heads whose quantized queries and softmax state are kept at once.
const GROUP_MAX: usize = 16;

/// Attention of the `qs.len() / kv.head_dim` query heads that read KV head `kv.head` over the
/// span's keys, a block of [`ATTENTION_BLOCK`] positions at a time (every head reads a block's
/// keys, then its values, while they are in the cache): `outs` gets their outputs one after
/// another and `scores` is scratch of as many equal rows of at least `span.pos + 1` floats.
/// `span.skip_below` is ln(eps) of the skip threshold (`None`: exact, llama.cpp's online
/// softmax).
/// Head dims must be multiples of 32, at most [`MAX_HEAD_DIM`] (`State` checks).
#[allow(clippy::too_many_arguments)]
pub fn attention_q8_with(
    loops: &AttentionLoopsQ8,
    outs: &mut [f32],
    qs: &[f32],
    kv: &KvHeadQ8,
    scores: &mut [f32],
    span: AttentionSpan,
    scale: f32,
    softcap_at: Option<f32>,
) {
    let skip_below = span.skip_below;
    let (hd, dv) = (kv.head_dim, kv.head_dim_v);
    let g_all = qs.len() / hd.max(1);
    let stride = scores.len() / g_all.max(1);
    let (k_row, v_row) = (row_bytes(hd), row_bytes(dv));
    let k_stride = kv.n_head_kv * k_row;
    let v_stride = kv.n_head_kv * v_row;
    let first = span.first_key();
    let n = span.pos + 1 - first;
    let keys = &kv.key_cache[first * k_stride + kv.head * k_row..];
    let values = &kv.value_cache[first * v_stride + kv.head * v_row..];
    let mut qq = [0u8; GROUP_MAX * row_bytes(MAX_HEAD_DIM)];
    for h0 in (0..g_all).step_by(GROUP_MAX) {
        let g = (g_all - h0).min(GROUP_MAX);
        let outs = &mut outs[h0 * dv..][..g * dv];
        let scores = &mut scores[h0 * stride..][..g * stride];
        outs.fill(0.0);
        for h in 0..g {
            let q = &qs[(h0 + h) * hd..][..hd];
            q8_0::quantize_activation(q, &mut qq[h * k_row..][..k_row]);
        }

        // Scores, a block of keys at a time for every head.
        for b0 in (0..n).step_by(ATTENTION_BLOCK) {
            let b1 = (b0 + ATTENTION_BLOCK).min(n);
            let block_keys = &keys[b0 * k_stride..];
            for h in 0..g {
                let sc = &mut scores[h * stride..][b0..b1];
                (loops.key_dots)(&qq[h * k_row..][..k_row], block_keys, k_stride, sc);
                for s in sc.iter_mut() {
                    let v = *s * scale;
                    *s = match softcap_at {
                        Some(cap) => softcap(v, cap),
                        None => v,
                    };
                }
            }
        }

        // The values, a block of rows at a time for every head: each row's (ms, vs) first
        // (their exponentials in one vector call), then the rows into the accumulator.
        let mut sums = [0f32; GROUP_MAX];
        let mut maxes = [f32::NEG_INFINITY; GROUP_MAX];
        if skip_below.is_some() {
            for (h, max) in maxes[..g].iter_mut().enumerate() {
                *max = scores[h * stride..][..n]
                    .iter()
                    .fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            }
        }
        let mut ms = [1f32; ATTENTION_BLOCK];
        let mut vs = [1f32; ATTENTION_BLOCK];
        let mut picked = [0u16; ATTENTION_BLOCK];
        let mut rescales = [false; ATTENTION_BLOCK];
        for b0 in (0..n).step_by(ATTENTION_BLOCK) {
            let b1 = (b0 + ATTENTION_BLOCK).min(n);
            let m = b1 - b0;
            let (ms, vs, rescales) = (&mut ms[..m], &mut vs[..m], &mut rescales[..m]);
            for h in 0..g {
                let acc = &mut outs[h * dv..][..dv];
                let (max, sum) = (&mut maxes[h], &mut sums[h]);
                let sc = &scores[h * stride..][b0..b1];
                match skip_below {
                    // llama.cpp's online softmax: row i rescales the accumulator by
                    // ms = expf(old - new) on a new maximum (and adds with vs = 1), otherwise
                    // adds with vs = expf(s - max).
                    None => {
                        for ((&s, e), r) in sc.iter().zip(ms.iter_mut()).zip(rescales.iter_mut()) {
                            *r = s > *max;
                            if *r {
                                let old = *max;
                                *max = s;
                                *e = old - *max;
                            } else {
                                *e = s - *max;
                            }
                        }
                        (loops.exp_in_place)(ms);
                        for ((ms, vs), &r) in ms.iter_mut().zip(vs.iter_mut()).zip(rescales.iter())
                        {
                            (*ms, *vs) = if r { (*ms, 1.0) } else { (1.0, *ms) };
                            *sum = *sum * *ms + *vs;
                        }
                    }
                    // The maximum is known: no rescale, and only the rows above the threshold
                    // get an exponential (gathered, one vector call) and a weight.
                    Some(ln_eps) => {
                        let mut k = 0;
                        for (i, &s) in sc.iter().enumerate() {
                            let e = s - *max;
                            if e >= ln_eps {
                                ms[k] = e;
                                picked[k] = i as u16;
                                k += 1;
                            }
                        }
                        (loops.exp_in_place)(&mut ms[..k]);
                        vs.fill(0.0);
                        for (&i, &w) in picked[..k].iter().zip(ms.iter()) {
                            vs[i as usize] = w;
                        }
                        ms.fill(1.0);
                        for &w in vs.iter() {
                            *sum += w;
                        }
                    }
                }
                let values = &values[b0 * v_stride..];
                (loops.accumulate_rows)(acc, values, v_stride, ms, vs);
            }
        }
        for (h, &sum) in sums[..g].iter().enumerate() {
            let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
            outs[h * dv..][..dv].iter_mut().for_each(|o| *o *= inv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    /// The rotation is orthonormal and its own inverse (llama.cpp rotates the attention output
    /// back with it), so a dot product of two rotated vectors is the dot product.
    #[test]
    fn hadamard_is_its_own_inverse_and_keeps_dots() {
        assert_eq!(
            Rotations::for_heads(64, 64),
            Rotations {
                k: Some(64),
                v: Some(64)
            }
        );
        assert_eq!(
            Rotations::for_heads(256, 256),
            Rotations {
                k: Some(256),
                v: Some(64)
            }
        );
        assert_eq!(Rotations::for_heads(96, 32), Rotations { k: None, v: None });
        let a: Vec<f32> = (0..128)
            .map(|i| ((i * 37 % 17) as f32 - 8.0) * 0.3)
            .collect();
        let b: Vec<f32> = (0..128)
            .map(|i| ((i * 11 % 13) as f32 - 6.0) * 0.7)
            .collect();
        let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
        let (mut ra, mut rb) = (a.clone(), b.clone());
        hadamard_in_place(&mut ra, 128);
        hadamard_in_place(&mut rb, 128);
        assert!(
            (dot(&ra, &rb) - dot(&a, &b)).abs() < 1e-3 * dot(&a, &a).sqrt() * dot(&b, &b).sqrt()
        );
        hadamard_in_place(&mut ra, 128);
        for (x, y) in ra.iter().zip(&a) {
            assert!((x - y).abs() < 1e-5, "{x} vs {y}");
        }
    }

    /// The driver over the scalar loops against a plain online softmax written out per key
    /// (dequantized values, f32 accumulator), to the bit; and the skip threshold against the
    /// exact result, within eps of the output's scale.
    #[test]
    fn scalar_q8_attention_is_the_plain_online_softmax() {
        let (n_head_kv, hd, group, n_pos) = (2, 64, 3, 300);
        let mut seed = 0x5EED_u64;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let kv_dim = n_head_kv * hd;
        let raw_k: Vec<f32> = (0..n_pos * kv_dim).map(|_| rnd() * 3.0).collect();
        let raw_v: Vec<f32> = (0..n_pos * kv_dim).map(|_| rnd()).collect();
        let mut kc = vec![0u8; n_pos * row_bytes(kv_dim)];
        let mut vc = vec![0u8; n_pos * row_bytes(kv_dim)];
        q8_0::quantize_activation(&raw_k, &mut kc);
        q8_0::quantize_activation(&raw_v, &mut vc);
        let qs: Vec<f32> = (0..group * hd).map(|_| rnd()).collect();
        let span = AttentionSpan {
            pos: n_pos - 1,
            window: None,
            skip_below: None,
        };
        let kv = KvHeadQ8 {
            key_cache: &kc,
            value_cache: &vc,
            head: 1,
            n_head_kv,
            head_dim: hd,
            head_dim_v: hd,
        };
        let scale = 0.125;
        let mut outs = vec![0f32; group * hd];
        let mut scores = vec![0f32; group * n_pos];
        let l = AttentionLoopsQ8::SCALAR;
        attention_q8_with(&l, &mut outs, &qs, &kv, &mut scores, span, scale, None);
        for h in 0..group {
            let mut qq = vec![0u8; row_bytes(hd)];
            q8_0::quantize_activation(&qs[h * hd..][..hd], &mut qq);
            let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
            let mut acc = vec![0f32; hd];
            for p in 0..n_pos {
                let k = &kc[(p * n_head_kv + 1) * row_bytes(hd)..][..row_bytes(hd)];
                let s = q8_0::vec_dot(hd, k, &qq) * scale;
                let (mut ms, mut vs) = (1f32, 1f32);
                if s > max {
                    ms = libm::expf(max - s);
                    max = s;
                    acc.iter_mut().for_each(|a| *a *= ms);
                } else {
                    vs = libm::expf(s - max);
                }
                let mut v = vec![0f32; hd];
                let vrow = &vc[(p * n_head_kv + 1) * row_bytes(hd)..][..row_bytes(hd)];
                q8_0::dequantize_row(vrow, &mut v);
                for (a, &x) in acc.iter_mut().zip(&v) {
                    *a = libm::fmaf(x, vs, *a);
                }
                sum = sum * ms + vs;
            }
            for (d, a) in acc.iter().enumerate() {
                assert_eq!(
                    (a * (1.0 / sum)).to_bits(),
                    outs[h * hd + d].to_bits(),
                    "head {h} dim {d}"
                );
            }
        }
        let mut skipped = vec![0f32; group * hd];
        let span = AttentionSpan {
            skip_below: Some(libm::logf(1e-4)),
            ..span
        };
        attention_q8_with(&l, &mut skipped, &qs, &kv, &mut scores, span, scale, None);
        for (a, b) in outs.iter().zip(&skipped) {
            assert!((a - b).abs() < 1e-3, "{a} vs {b}");
        }
    }
}
