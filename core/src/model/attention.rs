//! The attention token mixer: grouped-query attention over an f16 KV cache, with the per-family
//! switches (Q/K/V biases, QK-norm, post-norm, RoPE style, sliding window).
//!
//! ```text
//! xb = rms_norm(x)                     attn_norm
//! q, k, v = Wq xb (+bq), Wk xb (+bk), Wv xb (+bv)
//!   or q|k|v = Wqkv xb                 one fused matrix (bailingmoe2's attn_qkv)
//!   or q|gate per head = Wq xb         gated attention (Qwen3.5): each head's query, then its gate
//! q, k = rms_norm per head             Qwen3, Gemma 3, Qwen3.5 (QK-norm); OLMoE: over all of q, of k
//! q, k = rope(q, k, pos)               normal (Llama) or neox (Qwen, Gemma); none on SmolLM3's every 4th layer
//! cache[pos] = k, v                    f16, like llama.cpp's default cache, or q8_0 blocks
//! a = attention(q, cache[..=pos])      grouped-query, optional sliding window
//! a = a * sigmoid(gate)                gated attention
//! o = Wo a;  o = rms_norm(o)           post_attention_norm: Gemma 3
//! x = x + o
//! ```

use super::error::ModelError;
use super::matrix::{Loader, Matrix};
use super::pass::{row, row_mut, split, Pass, SharedMut};
use super::state::Activations;
use crate::arena::{Arena, ArenaError, ArenaPlan, ArenaSlice, Part};
use crate::kv_q8;
use crate::math::{self, AttentionFaces, AttentionKernel, AttentionSpan, Rope};
use crate::quant::q8_0;
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

/// The shape of an attention layer, from the header: what its cache holds per position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub head_dim_v: usize,
    /// Sliding window of this layer, `None` for global attention.
    pub window: Option<usize>,
    /// Q, K and V come from one matrix (`attn_qkv`), its output rows q, then k, then v.
    pub fused_qkv: bool,
    /// Wq's output holds, per head, the query and then a gate of as many values; the
    /// attention output is multiplied by sigmoid(gate) before Wo (Qwen3.5's full attention).
    pub output_gate: bool,
    /// Q and K are rotated by RoPE; SmolLM3 leaves it out on every fourth layer.
    pub rope: bool,
}

impl AttentionShape {
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
    pub fn v_dim(&self) -> usize {
        self.n_head_kv * self.head_dim_v
    }
    pub fn o_dim(&self) -> usize {
        self.n_head * self.head_dim_v
    }
    /// Rows of the fused QKV matrix's output (0 when Q, K and V are separate).
    pub fn qkv_dim(&self) -> usize {
        match self.fused_qkv {
            true => self.q_dim() + self.kv_dim() + self.v_dim(),
            false => 0,
        }
    }
}

/// What differs between families inside attention, as the family's switches set it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionOptions {
    pub qkv_bias: bool,
    pub qk_norm: bool,
    /// QK-norm over the whole of Q and of K rather than per head (OLMoE).
    pub qk_norm_whole: bool,
    pub post_norm: bool,
    /// Q is multiplied by 1/sqrt(head_dim) before attention instead of scaling the scores
    /// (Gemma's order of operations; the same value, rounded as the reference rounds it).
    pub scale_q_before_attention: bool,
    pub softcap: Option<f32>,
    /// The scores' scale when the file sets one (Granite's `attention.scale`), instead of
    /// 1/sqrt(head_dim).
    pub score_scale: Option<f32>,
}

/// The projections to Q, K and V: three matrices, or one whose output is q, k and v back to back.
// One per layer, built once: the size of the larger kind costs nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum QkvWeights {
    Separate { wq: Matrix, wk: Matrix, wv: Matrix },
    Fused(Matrix),
}

#[derive(Debug, Clone)]
pub struct Attention {
    pub shape: AttentionShape,
    pub opts: AttentionOptions,
    pub attn_norm: Vec<f32>,
    pub qkv: QkvWeights,
    pub wo: Matrix,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub post_attn_norm: Option<Vec<f32>>,
    pub rope: Rope,
    /// Attention of one query head and of one KV head's query heads, the kernel set's faces of
    /// `math::attention_head` and `math::attention_group`.
    pub attend: AttentionFaces,
}

/// What a KV cache stores per value: f16 (the default, like llama.cpp's) or q8_0 blocks
/// (`--cache-type-k/-v q8_0`: 34 bytes per 32 values, attention by `kv_q8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvCacheType {
    #[default]
    F16,
    Q8_0,
}

impl KvCacheType {
    /// The names `--cache-type-k/-v` accept, as llama.cpp spells them.
    pub const NAMES: &'static str = "f16, q8_0";

    pub fn parse(name: &str) -> Option<KvCacheType> {
        match name {
            "f16" => Some(KvCacheType::F16),
            "q8_0" => Some(KvCacheType::Q8_0),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KvCacheType::F16 => "f16",
            KvCacheType::Q8_0 => "q8_0",
        }
    }

    /// Bytes of one cached row of `dim` values (`dim` a multiple of 32 for q8_0).
    pub fn row_bytes(self, dim: usize) -> usize {
        match self {
            KvCacheType::F16 => 2 * dim,
            KvCacheType::Q8_0 => crate::kv_q8::row_bytes(dim),
        }
    }
}

/// One attention layer's K and V cache, `[pos][kv_dim]` and `[pos][v_dim]`, carved from the
/// state's arena: f16 bits, or q8_0 blocks (each row quantized as it is written).
pub enum KvCache {
    F16 {
        keys: ArenaSlice<u16>,
        values: ArenaSlice<u16>,
    },
    Q8_0 {
        keys: ArenaSlice<u8>,
        values: ArenaSlice<u8>,
    },
}

impl KvCache {
    /// Counts a cache of `n_ctx` positions of type `ty` in `part` of `plan` (the trunk's
    /// caches in `Part::KvCache`, the MTP block's in `Part::Mtp`).
    pub fn plan(
        plan: &mut ArenaPlan,
        part: Part,
        shape: &AttentionShape,
        n_ctx: usize,
        ty: KvCacheType,
    ) {
        match ty {
            KvCacheType::F16 => {
                plan.add::<u16>(part, n_ctx, shape.kv_dim());
                plan.add::<u16>(part, n_ctx, shape.v_dim());
            }
            KvCacheType::Q8_0 => {
                plan.add::<u8>(part, n_ctx, ty.row_bytes(shape.kv_dim()));
                plan.add::<u8>(part, n_ctx, ty.row_bytes(shape.v_dim()));
            }
        }
    }

    /// Takes the cache [`KvCache::plan`] counted from `arena`.
    ///
    /// # Safety
    /// The region under `arena` must outlive the cache (see [`ArenaSlice::detach`]).
    pub unsafe fn carve(
        arena: &mut Arena<'_>,
        part: Part,
        shape: &AttentionShape,
        n_ctx: usize,
        ty: KvCacheType,
    ) -> Result<KvCache, ArenaError> {
        // SAFETY: the caller's promise.
        unsafe {
            Ok(match ty {
                KvCacheType::F16 => KvCache::F16 {
                    keys: arena.take_detached(part, n_ctx, shape.kv_dim())?,
                    values: arena.take_detached(part, n_ctx, shape.v_dim())?,
                },
                KvCacheType::Q8_0 => KvCache::Q8_0 {
                    keys: arena.take_detached(part, n_ctx, ty.row_bytes(shape.kv_dim()))?,
                    values: arena.take_detached(part, n_ctx, ty.row_bytes(shape.v_dim()))?,
                },
            })
        }
    }

    pub fn kv_type(&self) -> KvCacheType {
        match self {
            KvCache::F16 { .. } => KvCacheType::F16,
            KvCache::Q8_0 { .. } => KvCacheType::Q8_0,
        }
    }

    pub fn bytes(&self) -> usize {
        match self {
            KvCache::F16 { keys, values } => 2 * (keys.len() + values.len()),
            KvCache::Q8_0 { keys, values } => keys.len() + values.len(),
        }
    }

    /// Forgets positions `keep..keep + discard` of the `n_cached` cached ones: the rows after
    /// them move down by `discard`, and their keys, rotated for their old positions, are
    /// rotated back by `discard` (llama.cpp's context shift: the cache then reads as if the
    /// dropped tokens had never been there). `rope`: the layer's rotation, `None` for a layer
    /// without one. Rotated in f32 and stored as f16 again, as llama.cpp does; no allocation.
    /// An f16 cache only (`Model::can_shift_context` says so for a q8_0 one, whose keys
    /// llama.cpp also turns back through its Hadamard rotation first).
    pub fn drop_positions(
        &mut self,
        shape: &AttentionShape,
        rope: Option<(&Rope, Option<&[f32]>)>,
        n_cached: usize,
        keep: usize,
        discard: usize,
    ) {
        let KvCache::F16 { keys, values } = self else {
            return;
        };
        let (kv_dim, v_dim, hd) = (shape.kv_dim(), shape.v_dim(), shape.head_dim);
        let moved = keep + discard..n_cached;
        let n_moved = moved.len();
        keys.copy_within(moved.start * kv_dim..moved.end * kv_dim, keep * kv_dim);
        values.copy_within(moved.start * v_dim..moved.end * v_dim, keep * v_dim);
        let Some((rope, freq_factors)) = rope else {
            return;
        };
        // One head at a time through a stack buffer (`Model::can_shift_context` refuses
        // heads wider than it).
        let mut head = [0f32; MAX_HEAD_DIM];
        let head = &mut head[..hd];
        let delta = -(discard as i32);
        let rows = &mut keys[keep * kv_dim..(keep + n_moved) * kv_dim];
        for bits in rows.chunks_exact_mut(hd) {
            head.iter_mut()
                .zip(bits.iter())
                .for_each(|(h, &b)| *h = half::f16::from_bits(b).to_f32());
            rope.shift(head, hd, delta, freq_factors);
            math::to_f16_bits(bits, head);
        }
    }
}

/// Whether a layer of `shape` can keep a cache of type `ty`: q8_0 rows are whole blocks of 32
/// per head (llama.cpp asks the same), and the quantized query of a head fits its buffer.
pub fn kv_type_fits(shape: &AttentionShape, ty: KvCacheType) -> Result<(), alloc::string::String> {
    match ty {
        KvCacheType::F16 => Ok(()),
        KvCacheType::Q8_0 => {
            let (k, v) = (shape.head_dim, shape.head_dim_v);
            if !k.is_multiple_of(32) || !v.is_multiple_of(32) || k > crate::kv_q8::MAX_HEAD_DIM {
                Err(format!(
                    "a q8_0 cache needs head dims that are multiples of 32 (at most {}); \
                     this model's are {k} (keys) and {v} (values): use f16",
                    crate::kv_q8::MAX_HEAD_DIM
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// The widest attention head a context shift rotates in place (Gemma 3's are 256).
pub const MAX_HEAD_DIM: usize = 512;

impl Attention {
    /// Loads layer `l`'s attention tensors (`blk.{l}.attn_*`).
    pub fn load(
        ld: &Loader,
        l: usize,
        n_embd: usize,
        shape: AttentionShape,
        opts: AttentionOptions,
        rope: Rope,
        attend: AttentionFaces,
    ) -> Result<Attention, ModelError> {
        let n = |s: &str| format!("blk.{l}.{s}");
        let (q_dim, kv_dim, v_dim, o_dim) =
            (shape.q_dim(), shape.kv_dim(), shape.v_dim(), shape.o_dim());
        // Per head, or over the whole projection.
        let qk_norm_len = |whole: usize| match opts.qk_norm_whole {
            true => whole,
            false => shape.head_dim,
        };
        let bias = |s: &str, len| match opts.qkv_bias {
            true => ld.vector(&n(s), len).map(Some),
            false => ld.opt_vector(&n(s), len),
        };
        Ok(Attention {
            shape,
            opts,
            attn_norm: ld.vector(&n("attn_norm.weight"), n_embd)?,
            qkv: match shape.fused_qkv {
                true => {
                    QkvWeights::Fused(ld.matrix(&n("attn_qkv.weight"), n_embd, shape.qkv_dim())?)
                }
                false => QkvWeights::Separate {
                    wq: ld.matrix(
                        &n("attn_q.weight"),
                        n_embd,
                        if shape.output_gate { 2 * q_dim } else { q_dim },
                    )?,
                    wk: ld.matrix(&n("attn_k.weight"), n_embd, kv_dim)?,
                    wv: ld.matrix(&n("attn_v.weight"), n_embd, v_dim)?,
                },
            },
            wo: ld.matrix(&n("attn_output.weight"), o_dim, n_embd)?,
            bq: bias("attn_q.bias", q_dim)?,
            bk: bias("attn_k.bias", kv_dim)?,
            bv: bias("attn_v.bias", v_dim)?,
            q_norm: ld.vector_if(opts.qk_norm, &n("attn_q_norm.weight"), qk_norm_len(q_dim))?,
            k_norm: ld.vector_if(opts.qk_norm, &n("attn_k_norm.weight"), qk_norm_len(kv_dim))?,
            post_attn_norm: ld.vector_if(
                opts.post_norm,
                &n("post_attention_norm.weight"),
                n_embd,
            )?,
            rope,
            attend,
        })
    }

    /// The weights in the order `forward` asks for them.
    pub fn matrices(&self) -> Vec<&Matrix> {
        match &self.qkv {
            QkvWeights::Separate { wq, wk, wv } => vec![wq, wk, wv, &self.wo],
            QkvWeights::Fused(wqkv) => vec![wqkv, &self.wo],
        }
    }

    /// For each of the pass's tokens: x += (post-norm of) Wo · attention(rope(Wq xb), cache),
    /// with xb = rms_norm(x). The matrices run once for all tokens; RoPE, the cache writes and
    /// the attention run per token (token t sees the cache up to its own position `pos + t`).
    pub fn forward(
        &self,
        p: &mut Pass,
        l: usize,
        a: &mut Activations,
        cache: &mut KvCache,
        pos: usize,
    ) -> Result<(), ModelError> {
        let sh = &self.shape;
        let (n, n_embd, hd) = (p.n, a.n_embd, sh.head_dim);
        let (q_dim, kv_dim, v_dim, o_dim) = (sh.q_dim(), sh.kv_dim(), sh.v_dim(), sh.o_dim());
        p.rms_norm_rows(&mut a.xb, &a.x, &self.attn_norm, n_embd);
        p.tap("attn_norm", l, &a.xb, n_embd);

        match &self.qkv {
            // Q, K and V share one input, quantized once per activation format.
            QkvWeights::Separate { wq, wk, wv } => p.matvecs(
                &a.xb,
                &mut [(wq, &mut a.q[..]), (wk, &mut a.k[..]), (wv, &mut a.v[..])],
            )?,
            QkvWeights::Fused(wqkv) => {
                p.matvec(wqkv, &a.xb, &mut a.qkv)?;
                for t in 0..n {
                    let qkv = row(&a.qkv, sh.qkv_dim(), t);
                    let (q, kv) = qkv.split_at(q_dim);
                    let (k, v) = kv.split_at(kv_dim);
                    row_mut(&mut a.q, q_dim, t).copy_from_slice(q);
                    row_mut(&mut a.k, kv_dim, t).copy_from_slice(k);
                    row_mut(&mut a.v, v_dim, t).copy_from_slice(v);
                }
            }
        }
        if sh.output_gate {
            split_query_gates(&mut a.q, &mut a.gate, n, sh.n_head, hd);
        }

        let inv_sqrt_hd = match self.opts.score_scale {
            Some(s) => s,
            None => 1.0 / libm::sqrtf(hd as f32),
        };
        let score_scale = if self.opts.scale_q_before_attention {
            1.0
        } else {
            inv_sqrt_hd
        };
        for t in 0..n {
            let q = row_mut(&mut a.q, q_dim, t);
            let k = row_mut(&mut a.k, kv_dim, t);
            let v = row_mut(&mut a.v, v_dim, t);
            for (out, bias) in [
                (&mut *q, &self.bq),
                (&mut *k, &self.bk),
                (&mut *v, &self.bv),
            ] {
                if let Some(b) = bias {
                    out.iter_mut().zip(b).for_each(|(o, b)| *o += b);
                }
            }
            if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
                // The norm's length: a head's (hd), or the whole projection's.
                q.chunks_exact_mut(qn.len())
                    .for_each(|h| math::rms_norm_in_place(h, qn, p.rms_eps));
                k.chunks_exact_mut(kn.len())
                    .for_each(|h| math::rms_norm_in_place(h, kn, p.rms_eps));
            }
            if let Some(f) = p.tapping() {
                f("Qcur_normed", l, q);
                f("Kcur_normed", l, k);
                f("Vcur", l, v);
            }
            if sh.rope {
                self.rope.apply(q, hd, pos + t, p.rope_freqs);
                self.rope.apply(k, hd, pos + t, p.rope_freqs);
            }
            if let Some(f) = p.tapping() {
                f("Qcur", l, q);
                f("Kcur", l, k);
            }
            if self.opts.scale_q_before_attention {
                q.iter_mut().for_each(|v| *v *= inv_sqrt_hd);
            }
            // Append this position's K and V to the layer's cache.
            let at = pos + t;
            match cache {
                KvCache::F16 { keys, values } => {
                    if p.attention_kernel == AttentionKernel::F16Accumulator {
                        // llama.cpp's decode kernel converts the query to f16 before the dots.
                        q.iter_mut()
                            .for_each(|v| *v = half::f16::from_f32(*v).to_f32());
                    }
                    math::to_f16_bits(&mut keys[at * kv_dim..][..kv_dim], k);
                    math::to_f16_bits(&mut values[at * v_dim..][..v_dim], v);
                }
                // Rotated and quantized as llama.cpp b11434 does (`kv_q8::Rotations`; its x86
                // rounding).
                KvCache::Q8_0 { keys, values } => {
                    let rot = kv_q8::Rotations::for_heads(hd, sh.head_dim_v);
                    if let Some(r) = rot.k {
                        kv_q8::hadamard_in_place(q, r);
                        kv_q8::hadamard_in_place(k, r);
                    }
                    if let Some(r) = rot.v {
                        kv_q8::hadamard_in_place(v, r);
                    }
                    let (kb, vb) = (kv_q8::row_bytes(kv_dim), kv_q8::row_bytes(v_dim));
                    q8_0::quantize_activation(k, &mut keys[at * kb..][..kb]);
                    q8_0::quantize_activation(v, &mut values[at * vb..][..vb]);
                }
            }
        }
        match cache {
            KvCache::F16 { keys, values } if n == 1 => {
                self.attend_heads(p, a, keys, values, pos, score_scale)
            }
            KvCache::F16 { keys, values } => {
                self.attend_tokens(p, a, keys, values, pos, score_scale)
            }
            KvCache::Q8_0 { keys, values } => {
                self.attend_q8(p, a, keys, values, pos, score_scale);
                // The values were rotated: the output goes back (the rotation is its inverse).
                if let Some(r) = kv_q8::Rotations::for_heads(hd, sh.head_dim_v).v {
                    kv_q8::hadamard_in_place(&mut a.att_out[..n * o_dim], r);
                }
            }
        }
        p.tap("kqv_out", l, &a.att_out, o_dim);
        if sh.output_gate {
            let gated = a.att_out[..n * o_dim].iter_mut().zip(&a.gate[..n * o_dim]);
            gated.for_each(|(o, &g)| *o *= math::sigmoid(g));
            p.tap("attn_gated", l, &a.att_out, o_dim);
        }

        p.matvec(&self.wo, &a.att_out, &mut a.xb2)?;
        p.add_rows(&mut a.x, &mut a.xb2, self.post_attn_norm.as_deref(), n_embd);
        p.tap("sa_out", l, &a.x, n_embd);
        Ok(())
    }

    /// att_out = attention of one token's query (at position `pos`) over the cache, heads
    /// split over the workers (decoding).
    fn attend_heads(
        &self,
        p: &Pass,
        a: &mut Activations,
        keys: &[u16],
        values: &[u16],
        pos: usize,
        score_scale: f32,
    ) {
        let sh = &self.shape;
        let group = sh.n_head / sh.n_head_kv;
        let n_workers = p.par.n_threads().clamp(1, sh.n_head_kv);
        let n_ctx = a.n_ctx;
        let att_out = SharedMut::new(&mut a.att_out);
        let scores = SharedMut::new(&mut a.scores);
        let q = &a.q;
        let kernel = p.attention_kernel;
        let skip_below = p.attn_skip_below;
        p.par.run(&|w| {
            if w >= n_workers {
                return;
            }
            // Worker w takes whole KV groups; the group's query heads go through the cache
            // together, so each part of it is read from memory once.
            let (g0, g1) = split(sh.n_head_kv, n_workers, w);
            for g in g0..g1 {
                let h0 = g * group;
                // SAFETY: the group's output and score rows are touched by this worker only.
                let outs = unsafe { att_out.slice(h0 * sh.head_dim_v, group * sh.head_dim_v) };
                let sc = unsafe { scores.slice(h0 * n_ctx, group * n_ctx) };
                let kv = math::KvHead {
                    key_cache: &keys[..(pos + 1) * sh.kv_dim()],
                    value_cache: &values[..(pos + 1) * sh.v_dim()],
                    head: g,
                    n_head_kv: sh.n_head_kv,
                    head_dim: sh.head_dim,
                    head_dim_v: sh.head_dim_v,
                };
                let span = AttentionSpan {
                    pos,
                    window: sh.window,
                    skip_below,
                };
                let qs = &q[h0 * sh.head_dim..][..group * sh.head_dim];
                let softcap = self.opts.softcap;
                (self.attend.group)(outs, qs, &kv, sc, span, score_scale, softcap, kernel);
            }
        });
    }

    /// att_out[t] = attention of token t's query (at position `pos + t`) for the tokens of a
    /// batch, tokens split over the workers (worker w uses the score row of head w).
    fn attend_tokens(
        &self,
        p: &Pass,
        a: &mut Activations,
        keys: &[u16],
        values: &[u16],
        pos: usize,
        score_scale: f32,
    ) {
        let sh = &self.shape;
        let (n, q_dim, o_dim) = (p.n, sh.q_dim(), sh.o_dim());
        let n_workers = p.par.n_threads().clamp(1, sh.n_head.min(n));
        let n_ctx = a.n_ctx;
        let att_out = SharedMut::new(&mut a.att_out[..n * o_dim]);
        let scores = SharedMut::new(&mut a.scores);
        let q = &a.q;
        let kernel = p.attention_kernel;
        p.par.run(&|w| {
            if w >= n_workers {
                return;
            }
            // SAFETY: score row w belongs to worker w; token t's output to the worker of t.
            let sc = unsafe { scores.slice(w * n_ctx, n_ctx) };
            let (t0, t1) = split(n, n_workers, w);
            for t in t0..t1 {
                let out = unsafe { att_out.slice(t * o_dim, o_dim) };
                let q = row(q, q_dim, t);
                for (h, out) in out.chunks_exact_mut(sh.head_dim_v).enumerate() {
                    self.attend_head(keys, values, q, h, pos + t, out, sc, score_scale, kernel);
                }
            }
        });
    }

    /// att_out = attention over a q8_0 cache (`kv_q8`), llama.cpp's one kernel for a quantized
    /// cache at every batch size. Decoding splits the KV groups over the workers (each group's
    /// query heads read the cache together, with the skip threshold if set); a batch splits its
    /// tokens, each query head on its own (worker w uses the score row of head w).
    fn attend_q8(
        &self,
        p: &Pass,
        a: &mut Activations,
        keys: &[u8],
        values: &[u8],
        pos: usize,
        score_scale: f32,
    ) {
        let sh = &self.shape;
        let (n, hd, dv) = (p.n, sh.head_dim, sh.head_dim_v);
        let group = sh.n_head / sh.n_head_kv;
        let (q_dim, o_dim) = (sh.q_dim(), sh.o_dim());
        let n_ctx = a.n_ctx;
        let (k_row, v_row) = (kv_q8::row_bytes(sh.kv_dim()), kv_q8::row_bytes(sh.v_dim()));
        let att_out = SharedMut::new(&mut a.att_out[..n * o_dim]);
        let scores = SharedMut::new(&mut a.scores);
        let q = &a.q;
        let loops = &self.attend.q8;
        let softcap = self.opts.softcap;
        let kv_at = |g: usize, at: usize| kv_q8::KvHeadQ8 {
            key_cache: &keys[..(at + 1) * k_row],
            value_cache: &values[..(at + 1) * v_row],
            head: g,
            n_head_kv: sh.n_head_kv,
            head_dim: hd,
            head_dim_v: dv,
        };
        let skip_below = p.attn_skip_below;
        if n == 1 {
            let n_workers = p.par.n_threads().clamp(1, sh.n_head_kv);
            p.par.run(&|w| {
                if w >= n_workers {
                    return;
                }
                let (g0, g1) = split(sh.n_head_kv, n_workers, w);
                for g in g0..g1 {
                    let h0 = g * group;
                    // SAFETY: the group's output and score rows are touched by this worker only.
                    let outs = unsafe { att_out.slice(h0 * dv, group * dv) };
                    let sc = unsafe { scores.slice(h0 * n_ctx, group * n_ctx) };
                    let span = AttentionSpan {
                        pos,
                        window: sh.window,
                        skip_below,
                    };
                    let qs = &q[h0 * hd..][..group * hd];
                    let kv = kv_at(g, pos);
                    kv_q8::attention_q8_with(loops, outs, qs, &kv, sc, span, score_scale, softcap);
                }
            });
            return;
        }
        let n_workers = p.par.n_threads().clamp(1, sh.n_head.min(n));
        p.par.run(&|w| {
            if w >= n_workers {
                return;
            }
            // SAFETY: score row w belongs to worker w; token t's output to the worker of t.
            let sc = unsafe { scores.slice(w * n_ctx, n_ctx) };
            let (t0, t1) = split(n, n_workers, w);
            for t in t0..t1 {
                let out = unsafe { att_out.slice(t * o_dim, o_dim) };
                let qt = row(q, q_dim, t);
                // The skip threshold too, if set: the same kernel as decoding's, which is how a
                // perplexity run measures what it costs.
                let span = AttentionSpan {
                    pos: pos + t,
                    window: sh.window,
                    skip_below,
                };
                for (h, out) in out.chunks_exact_mut(dv).enumerate() {
                    let kv = kv_at(h / group, pos + t);
                    let qh = &qt[h * hd..][..hd];
                    kv_q8::attention_q8_with(loops, out, qh, &kv, sc, span, score_scale, softcap);
                }
            }
        });
    }

    /// One query head `h` of `q` at position `pos` over the cache up to `pos`.
    #[allow(clippy::too_many_arguments)]
    fn attend_head(
        &self,
        keys: &[u16],
        values: &[u16],
        q: &[f32],
        h: usize,
        pos: usize,
        out: &mut [f32],
        scores: &mut [f32],
        score_scale: f32,
        kernel: AttentionKernel,
    ) {
        let sh = &self.shape;
        let (hd, group) = (sh.head_dim, sh.n_head / sh.n_head_kv);
        let kv = math::KvHead {
            key_cache: &keys[..(pos + 1) * sh.kv_dim()],
            value_cache: &values[..(pos + 1) * sh.v_dim()],
            head: h / group,
            n_head_kv: sh.n_head_kv,
            head_dim: hd,
            head_dim_v: sh.head_dim_v,
        };
        let span = AttentionSpan {
            pos,
            window: sh.window,
            skip_below: None,
        };
        let q = &q[h * hd..(h + 1) * hd];
        let softcap = self.opts.softcap;
        (self.attend.head)(out, q, &kv, scores, span, score_scale, softcap, kernel);
    }
}

/// Gated attention's Wq output, `n` rows of `[q_h | gate_h]` per head, becomes `n` rows of
/// queries in `q` (now `n_head * hd` wide) and the gates in `gate`, in place: every query moves
/// to a place no later than its own, after the gate it might overwrite has moved out.
fn split_query_gates(q: &mut [f32], gate: &mut [f32], n: usize, n_head: usize, hd: usize) {
    let q_dim = n_head * hd;
    for t in 0..n {
        for h in 0..n_head {
            let src = t * 2 * q_dim + 2 * h * hd;
            gate[t * q_dim + h * hd..][..hd].copy_from_slice(&q[src + hd..][..hd]);
            q.copy_within(src..src + hd, t * q_dim + h * hd);
        }
    }
}
