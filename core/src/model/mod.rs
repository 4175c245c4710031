//! The decoder-only transformer: Llama, Qwen2, Qwen3 and Gemma 3 in one forward pass.
//!
//! ```text
//! token -> embedding row (x sqrt(n_embd) for Gemma)
//!   for each layer:
//!     xb = rms_norm(x)                     attn_norm
//!     q, k, v = Wq xb (+bq), Wk xb (+bk), Wv xb (+bv)
//!     q, k = rms_norm per head             Qwen3, Gemma 3 (QK-norm)
//!     q, k = rope(q, k, pos)               normal (Llama) or neox (Qwen, Gemma)
//!     cache[pos] = k, v                    f16, like llama.cpp's default cache
//!     a = attention(q, cache[..=pos])      grouped-query, optional sliding window
//!     o = Wo a;  o = rms_norm(o)           post_attention_norm: Gemma 3
//!     x = x + o
//!     xb = rms_norm(x)                     ffn_norm
//!     h = act(Wgate xb) * (Wup xb)         SiLU (Llama, Qwen) or GELU-tanh (Gemma)
//!     f = Wdown h; f = rms_norm(f)         post_ffw_norm: Gemma 3
//!     x = x + f
//! logits = Wout rms_norm(x)                Wout may be token_embd (tied), or a pruned head:
//!                                          only the kept ids' rows, the rest -inf
//! ```
//! Families differ only in the switches of [`Switches`]; everything else is shared.
//! Every matrix is reached through a [`WeightStore`], asked for just before its matvec and
//! released right after.

mod act_quant;
mod error;
pub mod head;
pub mod hparams;
pub mod memory_plan;
pub mod perplexity;
pub mod repack;
pub mod store;

pub use error::ModelError;
pub use hparams::{Family, HParams, RopeScaling};
pub use memory_plan::MemoryPlan;
pub use perplexity::{bits_per_byte, perplexity, PerplexityResult};
pub use store::{RepackedWeights, ResidentStore, TensorId, WeightStore};

use crate::gguf::Gguf;
use crate::kernels::{KernelSet, WeightKernel};
use crate::math::{self, AttentionKernel, AttentionSpan, Rope, RopeStyle};
use crate::platform::{Parallel, RowDispenser};
use crate::quant::{self, GgmlType};
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

/// The per-family differences, and nothing else.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Switches {
    /// Q, K and V have biases (Qwen2).
    pub qkv_bias: bool,
    /// Each Q and K head is RMS-normed before RoPE (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// The attention and FFN outputs are RMS-normed before the residual add (Gemma 3).
    pub post_norms: bool,
    /// The embedding row is multiplied by sqrt(n_embd) (Gemma).
    pub scale_embedding: bool,
    pub activation: Activation,
    pub rope_style: RopeStyle,
    /// Q is multiplied by 1/sqrt(head_dim) before attention instead of scaling the scores
    /// (Gemma's order of operations; the same value, rounded as the reference rounds it).
    pub scale_q_before_attention: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Silu,
    GeluTanh,
}

impl Family {
    pub fn switches(self) -> Switches {
        let base = Switches {
            qkv_bias: false,
            qk_norm: false,
            post_norms: false,
            scale_embedding: false,
            activation: Activation::Silu,
            rope_style: RopeStyle::Neox,
            scale_q_before_attention: false,
        };
        match self {
            Family::Llama => Switches {
                rope_style: RopeStyle::Normal,
                ..base
            },
            Family::Qwen2 => Switches {
                qkv_bias: true,
                ..base
            },
            Family::Qwen3 => Switches {
                qk_norm: true,
                ..base
            },
            Family::Gemma3 => Switches {
                qk_norm: true,
                post_norms: true,
                scale_embedding: true,
                activation: Activation::GeluTanh,
                scale_q_before_attention: true,
                ..base
            },
        }
    }
}

/// A weight matrix of `n_rows` rows of `n_cols`, as stored, with its kernel chosen at load.
#[derive(Debug, Clone)]
pub struct Matrix {
    pub id: TensorId,
    pub name: String,
    pub ty: GgmlType,
    pub n_rows: usize,
    pub n_cols: usize,
    pub row_bytes: usize,
    /// The format the input vector is quantized to before the dot products.
    pub act_ty: GgmlType,
    /// Bytes of one input vector in `act_ty`.
    pub act_bytes: usize,
    /// The matvec kernel for `ty` on this CPU, picked once from the model's [`KernelSet`].
    pub kernel: WeightKernel,
}

#[derive(Debug, Clone)]
pub struct Layer {
    pub attn_norm: Vec<f32>,
    pub wq: Matrix,
    pub wk: Matrix,
    pub wv: Matrix,
    pub wo: Matrix,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub post_attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub w_gate: Matrix,
    pub w_up: Matrix,
    pub w_down: Matrix,
    pub post_ffn_norm: Option<Vec<f32>>,
    pub rope: Rope,
    /// Sliding window of this layer, `None` for global attention.
    pub window: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct Model {
    pub hp: HParams,
    pub switches: Switches,
    pub token_embd: Matrix,
    pub layers: Vec<Layer>,
    pub output_norm: Vec<f32>,
    /// The LM head; `token_embd` itself when the file has no `output.weight` (tied). A pruned
    /// head has one row per id of `head_ids`.
    pub output: Matrix,
    /// The vocabulary id of each row of a pruned head (sorted); `None` for a full head.
    pub head_ids: Option<Vec<u32>>,
    /// Llama 3's per-pair RoPE frequency divisors (`rope_freqs.weight`).
    pub rope_freqs: Option<Vec<f32>>,
    /// Which kernel set the matrices' kernels came from ("scalar", "x86_64-avx2", ...).
    pub kernels_name: &'static str,
}

/// Reads small F32 vectors (norms, biases) at load time: a few KB per layer, kept in RAM.
fn f32_vector(g: &Gguf, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    let t = g
        .tensor(name)
        .ok_or_else(|| ModelError::MissingTensor { name: name.into() })?;
    let expected = [len as u64, 1, 1, 1];
    if t.dims != expected {
        return Err(ModelError::BadTensorShape {
            name: name.into(),
            expected,
            found: t.dims,
        });
    }
    if t.ggml_type != GgmlType::F32 {
        return Err(ModelError::BadTensorType {
            name: name.into(),
            expected: "F32",
            found: t.ggml_type,
        });
    }
    Ok(g.tensor_data(t)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

fn opt_f32_vector(g: &Gguf, name: &str, len: usize) -> Result<Option<Vec<f32>>, ModelError> {
    match g.tensor(name) {
        None => Ok(None),
        Some(_) => f32_vector(g, name, len).map(Some),
    }
}

/// A matrix of `n_rows` x `n_cols` (ggml dims `[n_cols, n_rows]`) whose type has a matvec
/// kernel in `kernels`.
fn matrix(
    g: &Gguf,
    kernels: &KernelSet,
    name: &str,
    n_cols: usize,
    n_rows: usize,
) -> Result<Matrix, ModelError> {
    let id = *g
        .tensors
        .iter()
        .position(|t| t.name == name)
        .as_ref()
        .ok_or_else(|| ModelError::MissingTensor { name: name.into() })?;
    let t = &g.tensors[id];
    let expected = [n_cols as u64, n_rows as u64, 1, 1];
    if t.dims != expected {
        return Err(ModelError::BadTensorShape {
            name: name.into(),
            expected,
            found: t.dims,
        });
    }
    let quant_err = |err| ModelError::Quant {
        tensor: name.into(),
        err,
    };
    let kernel = *kernels.weight(t.ggml_type).map_err(quant_err)?;
    let act_ty = kernel.act_type;
    let act_bytes = quant::row_bytes(act_ty, n_cols).map_err(|_| ModelError::BadTensorShape {
        name: name.into(),
        expected: [
            (n_cols as u64).div_ceil(act_ty.block_size() as u64) * act_ty.block_size() as u64,
            n_rows as u64,
            1,
            1,
        ],
        found: t.dims,
    })?;
    Ok(Matrix {
        id,
        name: name.into(),
        ty: t.ggml_type,
        n_rows,
        n_cols,
        row_bytes: t.row_bytes(),
        act_ty,
        act_bytes,
        kernel,
    })
}

impl Model {
    /// [`Model::load_with_kernels`] with the scalar reference kernels only: the ground truth,
    /// for tests and tools that must not depend on the CPU they run on.
    pub fn load(g: &Gguf) -> Result<Model, ModelError> {
        Model::load_with_kernels(g, &KernelSet::scalar())
    }

    /// Reads the hyperparameters, then finds and checks every tensor the forward pass needs,
    /// and picks each matrix's matvec kernel from `kernels` (normally
    /// `KernelSet::select(&features)` with the platform's CPU features), once, here.
    /// Nothing is sized from a number in the file before that number has been validated.
    pub fn load_with_kernels(g: &Gguf, kernels: &KernelSet) -> Result<Model, ModelError> {
        let hp = HParams::from_gguf(g)?;
        let sw = hp.family.switches();
        let (n_embd, n_ff) = (hp.n_embd, hp.n_ff);
        let q_dim = hp.n_head * hp.head_dim;
        let kv_dim = hp.n_head_kv * hp.head_dim;
        let v_dim = hp.n_head_kv * hp.head_dim_v;
        let o_dim = hp.n_head * hp.head_dim_v;

        let token_embd = matrix(g, kernels, "token_embd.weight", n_embd, hp.n_vocab)?;
        let (output, head_ids) = match g.tensor("output.weight") {
            Some(t) => {
                let head_ids = head::kept_ids(g, hp.n_vocab, t.dims[1])?;
                let n_rows = head_ids.as_ref().map_or(hp.n_vocab, |ids| ids.len());
                (
                    matrix(g, kernels, "output.weight", n_embd, n_rows)?,
                    head_ids,
                )
            }
            None => {
                if g.get(head::KEPT_IDS_KEY).is_some() {
                    return Err(ModelError::MissingTensor {
                        name:
                            "output.weight (the pruned head that smolrun.head.kept_ids describes)"
                                .into(),
                    });
                }
                (token_embd.clone(), None)
            }
        };
        let output_norm = f32_vector(g, "output_norm.weight", n_embd)?;
        let rope_freqs = opt_f32_vector(g, "rope_freqs.weight", hp.n_rot / 2)?;

        let ext_factor = if hp.rope_scaling == RopeScaling::Yarn {
            1.0
        } else {
            0.0
        };
        let yarn_attn_factor = if ext_factor != 0.0 && hp.rope_freq_scale < 1.0 {
            // llama.cpp cancels the magnitude scale that its YaRN kernel applies, then
            // multiplies by the file's own attention factor.
            let factor = 1.0 / hp.rope_freq_scale;
            let mscale = 0.1 * libm::logf(factor) + 1.0;
            mscale / (1.0 + 0.1 * libm::logf(factor))
        } else {
            1.0
        } * hp.rope_attn_factor;

        let mut layers = Vec::with_capacity(hp.n_layer);
        for l in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{l}.{s}");
            let swa = hp.is_swa[l];
            let freq_base = if swa {
                hp.rope_freq_base_swa
            } else {
                hp.rope_freq_base
            };
            // Sliding-window layers are never frequency-scaled.
            let freq_scale = if swa { 1.0 } else { hp.rope_freq_scale };
            let rope = Rope {
                style: sw.rope_style,
                n_rot: hp.n_rot,
                freq_base,
                freq_scale,
                ext_factor,
                attn_factor: yarn_attn_factor,
                corr_dims: Rope::yarn_corr_dims(hp.n_rot, hp.rope_n_ctx_orig, freq_base, 32.0, 1.0),
            };
            let bias = |s: &str, len| -> Result<Option<Vec<f32>>, ModelError> {
                if sw.qkv_bias {
                    f32_vector(g, &n(s), len).map(Some)
                } else {
                    opt_f32_vector(g, &n(s), len)
                }
            };
            let norm_if = |on: bool, s: &str, len| -> Result<Option<Vec<f32>>, ModelError> {
                if on {
                    f32_vector(g, &n(s), len).map(Some)
                } else {
                    Ok(None)
                }
            };
            layers.push(Layer {
                attn_norm: f32_vector(g, &n("attn_norm.weight"), n_embd)?,
                wq: matrix(g, kernels, &n("attn_q.weight"), n_embd, q_dim)?,
                wk: matrix(g, kernels, &n("attn_k.weight"), n_embd, kv_dim)?,
                wv: matrix(g, kernels, &n("attn_v.weight"), n_embd, v_dim)?,
                wo: matrix(g, kernels, &n("attn_output.weight"), o_dim, n_embd)?,
                bq: bias("attn_q.bias", q_dim)?,
                bk: bias("attn_k.bias", kv_dim)?,
                bv: bias("attn_v.bias", v_dim)?,
                q_norm: norm_if(sw.qk_norm, "attn_q_norm.weight", hp.head_dim)?,
                k_norm: norm_if(sw.qk_norm, "attn_k_norm.weight", hp.head_dim)?,
                post_attn_norm: norm_if(sw.post_norms, "post_attention_norm.weight", n_embd)?,
                ffn_norm: f32_vector(g, &n("ffn_norm.weight"), n_embd)?,
                w_gate: matrix(g, kernels, &n("ffn_gate.weight"), n_embd, n_ff)?,
                w_up: matrix(g, kernels, &n("ffn_up.weight"), n_embd, n_ff)?,
                w_down: matrix(g, kernels, &n("ffn_down.weight"), n_ff, n_embd)?,
                post_ffn_norm: norm_if(sw.post_norms, "post_ffw_norm.weight", n_embd)?,
                rope,
                window: if swa { hp.sliding_window } else { None },
            });
        }
        Ok(Model {
            hp,
            switches: sw,
            token_embd,
            layers,
            output_norm,
            output,
            head_ids,
            rope_freqs,
            kernels_name: kernels.name(),
        })
    }

    pub fn n_vocab(&self) -> usize {
        self.hp.n_vocab
    }

    /// Runs one token at position `pos` and returns the logits for the next token.
    pub fn forward<'s>(
        &self,
        state: &'s mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        token: u32,
        pos: usize,
    ) -> Result<&'s [f32], ModelError> {
        self.forward_inner(
            state,
            store,
            par,
            token,
            pos,
            true,
            AttentionKernel::F16Accumulator,
        )?;
        Ok(&state.logits)
    }

    /// Runs a prompt from position `pos` and returns the last token's logits; the LM head (the
    /// largest matrix of a small model) runs for the last token only. Tokens go through one at a
    /// time; the attention kernel is chosen by batch size as llama.cpp chooses it.
    pub fn forward_batch<'s>(
        &self,
        state: &'s mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        tokens: &[u32],
        pos: usize,
    ) -> Result<&'s [f32], ModelError> {
        let kernel = batch_attention_kernel(tokens.len());
        for (i, &t) in tokens.iter().enumerate() {
            let last = i + 1 == tokens.len();
            self.forward_inner(state, store, par, t, pos + i, last, kernel)?;
        }
        Ok(&state.logits)
    }

    /// Like [`Model::forward_batch`], but computes the logits at every position from
    /// `logits_from` on and hands them to `on_logits(i, logits)` (teacher forcing, perplexity).
    #[allow(clippy::too_many_arguments)]
    pub fn forward_batch_all(
        &self,
        state: &mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        tokens: &[u32],
        pos: usize,
        logits_from: usize,
        on_logits: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<(), ModelError> {
        let kernel = batch_attention_kernel(tokens.len());
        for (i, &t) in tokens.iter().enumerate() {
            let want = i >= logits_from;
            self.forward_inner(state, store, par, t, pos + i, want, kernel)?;
            if want {
                on_logits(i, &state.logits);
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn forward_inner(
        &self,
        s: &mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        token: u32,
        pos: usize,
        want_logits: bool,
        kernel: AttentionKernel,
    ) -> Result<(), ModelError> {
        let hp = &self.hp;
        if pos >= s.n_ctx {
            return Err(ModelError::ContextFull {
                pos,
                n_ctx: s.n_ctx,
            });
        }
        self.embed(s, store, token)?;
        s.tap("inp_scaled", 0, &s.x);
        for (l, layer) in self.layers.iter().enumerate() {
            self.attention_block(s, store, par, l, layer, pos, kernel)?;
            self.ffn_block(s, store, par, l, layer)?;
        }
        s.pos = pos + 1;
        if !want_logits {
            return Ok(());
        }
        math::rms_norm(&mut s.xb, &s.x, &self.output_norm, hp.rms_eps);
        s.tap("result_norm", 0, &s.xb);
        quantize_input(&self.output, &s.xb, &mut s.act_q)?;
        // A pruned head computes its kept rows only, then puts them at their ids.
        let head_out = match self.head_ids {
            None => &mut s.logits,
            Some(_) => &mut s.head_logits,
        };
        matvec(par, store, &self.output, &s.act_q, head_out)?;
        if let Some(cap) = hp.final_logit_softcap {
            for v in head_out.iter_mut() {
                *v = math::softcap(*v, cap);
            }
        }
        if let Some(ids) = &self.head_ids {
            head::scatter(&s.head_logits, ids, &mut s.logits);
        }
        Ok(())
    }

    /// x = the embedding row of `token` (only that row is read and dequantized).
    fn embed(&self, s: &mut State, store: &dyn WeightStore, token: u32) -> Result<(), ModelError> {
        let m = &self.token_embd;
        if token as usize >= self.hp.n_vocab {
            return Err(ModelError::TokenOutOfRange {
                token,
                n_vocab: self.hp.n_vocab,
            });
        }
        let bytes = store.get(m.id)?;
        let row = &bytes[token as usize * m.row_bytes..(token as usize + 1) * m.row_bytes];
        let r = quant::dequantize_row(m.ty, row, &mut s.x[..m.n_cols]);
        store.release(m.id);
        r.map_err(|err| ModelError::Quant {
            tensor: m.name.clone(),
            err,
        })?;
        if self.switches.scale_embedding {
            let scale = libm::sqrtf(self.hp.n_embd as f32);
            s.x.iter_mut().for_each(|v| *v *= scale);
        }
        Ok(())
    }

    /// x += (post-norm of) Wo · attention(rope(Wq xb), cache), with xb = rms_norm(x).
    #[allow(clippy::too_many_arguments)]
    fn attention_block(
        &self,
        s: &mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        l: usize,
        layer: &Layer,
        pos: usize,
        kernel: AttentionKernel,
    ) -> Result<(), ModelError> {
        let hp = &self.hp;
        let (hd, hdv) = (hp.head_dim, hp.head_dim_v);
        math::rms_norm(&mut s.xb, &s.x, &layer.attn_norm, hp.rms_eps);
        s.tap("attn_norm", l, &s.xb);

        // Q, K, V share one input: quantize it once per activation format.
        quantize_input(&layer.wq, &s.xb, &mut s.act_q)?;
        matvec(par, store, &layer.wq, &s.act_q, &mut s.q)?;
        if layer.wk.act_ty != layer.wq.act_ty {
            quantize_input(&layer.wk, &s.xb, &mut s.act_q)?;
        }
        matvec(par, store, &layer.wk, &s.act_q, &mut s.k)?;
        if layer.wv.act_ty != layer.wk.act_ty {
            quantize_input(&layer.wv, &s.xb, &mut s.act_q)?;
        }
        matvec(par, store, &layer.wv, &s.act_q, &mut s.v)?;
        for (out, bias) in [
            (&mut s.q, &layer.bq),
            (&mut s.k, &layer.bk),
            (&mut s.v, &layer.bv),
        ] {
            if let Some(b) = bias {
                out.iter_mut().zip(b).for_each(|(o, b)| *o += b);
            }
        }
        if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
            s.q.chunks_exact_mut(hd)
                .for_each(|h| math::rms_norm_in_place(h, qn, hp.rms_eps));
            s.k.chunks_exact_mut(hd)
                .for_each(|h| math::rms_norm_in_place(h, kn, hp.rms_eps));
        }
        s.tap("Qcur_normed", l, &s.q);
        s.tap("Kcur_normed", l, &s.k);
        s.tap("Vcur", l, &s.v);
        let ff = self.rope_freqs.as_deref();
        layer.rope.apply(&mut s.q, hd, pos, ff);
        layer.rope.apply(&mut s.k, hd, pos, ff);
        s.tap("Qcur", l, &s.q);
        s.tap("Kcur", l, &s.k);

        let inv_sqrt_hd = 1.0 / libm::sqrtf(hd as f32);
        let score_scale = if self.switches.scale_q_before_attention {
            s.q.iter_mut().for_each(|v| *v *= inv_sqrt_hd);
            1.0
        } else {
            inv_sqrt_hd
        };
        if kernel == AttentionKernel::F16Accumulator {
            // llama.cpp's decode kernel converts the query to f16 before the dot products.
            s.q.iter_mut()
                .for_each(|v| *v = half::f16::from_f32(*v).to_f32());
        }

        // Append this position's K and V to the layer's cache.
        let (kv_dim, v_dim) = (s.kv_dim, s.v_dim);
        let kbase = l * s.n_ctx * kv_dim;
        let vbase = l * s.n_ctx * v_dim;
        math::to_f16_bits(&mut s.key_cache[kbase + pos * kv_dim..][..kv_dim], &s.k);
        math::to_f16_bits(&mut s.value_cache[vbase + pos * v_dim..][..v_dim], &s.v);

        let span = AttentionSpan {
            pos,
            window: layer.window,
        };
        let key_cache = &s.key_cache[kbase..kbase + (pos + 1) * kv_dim];
        let value_cache = &s.value_cache[vbase..vbase + (pos + 1) * v_dim];
        // Heads are independent: split them over the workers.
        let group = hp.n_head / hp.n_head_kv;
        let n_workers = par.n_threads().clamp(1, hp.n_head_kv);
        let att_out = SharedMut::new(&mut s.att_out);
        let scores = SharedMut::new(&mut s.scores);
        let q = &s.q;
        let n_ctx = s.n_ctx;
        let softcap = hp.attn_logit_softcap;
        par.run(&|w| {
            if w >= n_workers {
                return;
            }
            // Worker w takes whole KV groups, so each reads its part of the cache once.
            let (g0, g1) = split(hp.n_head_kv, n_workers, w);
            for kvh in g0..g1 {
                for h in kvh * group..(kvh + 1) * group {
                    // SAFETY: head h's output and score rows are touched by this worker only.
                    let out = unsafe { att_out.slice(h * hdv, hdv) };
                    let sc = unsafe { scores.slice(h * n_ctx, n_ctx) };
                    let kv = math::KvHead {
                        key_cache,
                        value_cache,
                        head: kvh,
                        n_head_kv: hp.n_head_kv,
                        head_dim: hd,
                        head_dim_v: hdv,
                    };
                    let q = &q[h * hd..(h + 1) * hd];
                    math::attention_head(out, q, &kv, sc, span, score_scale, softcap, kernel);
                }
            }
        });

        s.tap("kqv_out", l, &s.att_out);
        quantize_input(&layer.wo, &s.att_out, &mut s.act_q)?;
        matvec(par, store, &layer.wo, &s.act_q, &mut s.xb2)?;
        if let Some(w) = &layer.post_attn_norm {
            math::rms_norm_in_place(&mut s.xb2, w, hp.rms_eps);
        }
        s.x.iter_mut().zip(&s.xb2).for_each(|(x, o)| *x += o);
        s.tap("sa_out", l, &s.x);
        Ok(())
    }

    /// x += (post-norm of) Wdown (act(Wgate xb) * Wup xb), with xb = rms_norm(x).
    fn ffn_block(
        &self,
        s: &mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        l: usize,
        layer: &Layer,
    ) -> Result<(), ModelError> {
        let hp = &self.hp;
        math::rms_norm(&mut s.xb, &s.x, &layer.ffn_norm, hp.rms_eps);
        s.tap("ffn_norm", l, &s.xb);
        quantize_input(&layer.w_gate, &s.xb, &mut s.act_q)?;
        matvec(par, store, &layer.w_gate, &s.act_q, &mut s.hb)?;
        if layer.w_up.act_ty != layer.w_gate.act_ty {
            quantize_input(&layer.w_up, &s.xb, &mut s.act_q)?;
        }
        matvec(par, store, &layer.w_up, &s.act_q, &mut s.hb2)?;
        let act = match self.switches.activation {
            Activation::Silu => math::silu,
            Activation::GeluTanh => math::gelu_tanh,
        };
        s.tap("ffn_gate", l, &s.hb);
        s.tap("ffn_up", l, &s.hb2);
        s.hb.iter_mut()
            .zip(&s.hb2)
            .for_each(|(g, u)| *g = act(*g) * u);
        s.tap("ffn_act", l, &s.hb);
        quantize_input(&layer.w_down, &s.hb, &mut s.act_q)?;
        matvec(par, store, &layer.w_down, &s.act_q, &mut s.xb2)?;
        s.tap("ffn_out", l, &s.xb2);
        if let Some(w) = &layer.post_ffn_norm {
            math::rms_norm_in_place(&mut s.xb2, w, hp.rms_eps);
        }
        s.x.iter_mut().zip(&s.xb2).for_each(|(x, o)| *x += o);
        s.tap("l_out", l, &s.x);
        Ok(())
    }
}

/// llama.cpp runs flash attention through a tiled f32 kernel when a batch has at least this
/// many queries, and through a kernel with an f16 accumulator otherwise (decode).
pub const TILED_ATTENTION_MIN_BATCH: usize = 64;

fn batch_attention_kernel(n_tokens: usize) -> AttentionKernel {
    if n_tokens >= TILED_ATTENTION_MIN_BATCH {
        AttentionKernel::F32
    } else {
        AttentionKernel::F16Accumulator
    }
}

/// Quantizes the input vector of `m` into its activation format.
fn quantize_input(m: &Matrix, x: &[f32], act_q: &mut [u8]) -> Result<(), ModelError> {
    act_quant::quantize_activation(m.act_ty, &x[..m.n_cols], &mut act_q[..m.act_bytes]).map_err(
        |err| ModelError::Quant {
            tensor: m.name.clone(),
            err,
        },
    )
}

/// Rows `[lo, hi)` of `n` split into `parts` near-equal ranges.
fn split(n: usize, parts: usize, i: usize) -> (usize, usize) {
    let per = n.div_ceil(parts);
    ((i * per).min(n), ((i + 1) * per).min(n))
}

/// A mutable slice handed to parallel workers that write disjoint ranges of it.
struct SharedMut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: workers only take disjoint sub-slices (see `slice`).
unsafe impl Sync for SharedMut {}

impl SharedMut {
    fn new(s: &mut [f32]) -> Self {
        SharedMut {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        }
    }
    /// # Safety
    /// No two live slices may overlap, and the source slice must outlive them.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, start: usize, len: usize) -> &mut [f32] {
        assert!(start + len <= self.len);
        core::slice::from_raw_parts_mut(self.ptr.add(start), len)
    }
}

/// `out = M · x` with `x` already quantized into `act_q`; rows split over the workers. The
/// weight is fetched from the store just before and released right after. Where the matrix's
/// kernel has a repacked layout and the store holds that copy, the repacked kernel runs on it
/// (the file's pages of the tensor are then not touched).
fn matvec(
    par: &dyn Parallel,
    store: &dyn WeightStore,
    m: &Matrix,
    act_q: &[u8],
    out: &mut [f32],
) -> Result<(), ModelError> {
    let repacked = m
        .kernel
        .repacked
        .and_then(|rk| Some((rk, store.get_repacked(m.id, rk.layout)?)));
    let w = match repacked {
        Some((_, packed)) => packed,
        None => store.get(m.id)?,
    };
    let failed = AtomicBool::new(false);
    let n_workers = par.n_threads().max(1);
    let shared = SharedMut::new(&mut out[..m.n_rows]);
    // Guided scheduling: each grab takes remaining / (2 x threads) rows, so a preempted worker
    // leaves a short tail. Chunks are multiples of 16 rows so that workers do not share cache
    // lines of `out` (and row-group kernels, groups of 4, get aligned starts).
    let rows_left = RowDispenser::new(m.n_rows, n_workers, MATVEC_CHUNK_ROWS);
    par.run(&|_| {
        while let Some(chunk) = rows_left.grab() {
            let (r0, r1) = (chunk.start, chunk.end);
            // SAFETY: the dispenser hands each row to exactly one worker.
            let o = unsafe { shared.slice(r0, r1 - r0) };
            let act = &act_q[..m.act_bytes];
            let ok = match repacked {
                Some((rk, packed)) => rk
                    .row_range(m.n_rows, m.n_cols, r0, r1)
                    .and_then(|range| packed.get(range))
                    .is_some_and(|rows| rk.matvec(m.ty, rows, r1 - r0, m.n_cols, act, o).is_ok()),
                None => w
                    .get(r0 * m.row_bytes..r1 * m.row_bytes)
                    .is_some_and(|rows| m.kernel.matvec(rows, r1 - r0, m.n_cols, act, o).is_ok()),
            };
            if !ok {
                failed.store(true, Ordering::Relaxed);
            }
        }
    });
    store.release(m.id);
    if failed.load(Ordering::Relaxed) {
        // Shapes were checked at load, so this means the store handed over the wrong bytes.
        let expected = match repacked {
            Some((rk, _)) => (rk.bytes)(m.n_rows, m.n_cols).unwrap_or(0),
            None => m.n_rows * m.row_bytes,
        };
        return Err(ModelError::Store {
            tensor: m.name.clone(),
            reason: format!(
                "got {} bytes, expected {expected} ({} rows of {} elements{})",
                w.len(),
                m.n_rows,
                m.n_cols,
                match repacked {
                    Some((rk, _)) => format!(", repacked as {}", rk.layout),
                    None => String::new(),
                }
            ),
        });
    }
    Ok(())
}

/// Rows per chunk of a parallel matvec: a multiple of every repacked kernel's group (4).
const MATVEC_CHUNK_ROWS: usize = 16;

/// Everything that changes while running: activations, the quantized-activation scratch and
/// the KV cache, all sized once for a context length so that a token allocates nothing.
pub struct State {
    pub n_ctx: usize,
    /// Next position to fill (tokens in the cache).
    pub pos: usize,
    kv_dim: usize,
    v_dim: usize,
    x: Vec<f32>,
    xb: Vec<f32>,
    xb2: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att_out: Vec<f32>,
    scores: Vec<f32>,
    hb: Vec<f32>,
    hb2: Vec<f32>,
    act_q: Vec<u8>,
    /// f16 bits, `[layer][pos][n_head_kv * head_dim]`.
    key_cache: Vec<u16>,
    value_cache: Vec<u16>,
    logits: Vec<f32>,
    /// The rows of a pruned head before they are scattered into `logits` (empty for a full head).
    head_logits: Vec<f32>,
    /// Called with (name, layer, values) at the named points of the forward pass (llama.cpp's
    /// tensor names: attn_norm, Qcur, Kcur, Vcur, kqv_out, sa_out, ffn_out, l_out,
    /// result_norm), for debugging a disagreement layer by layer. `None` in normal use.
    pub tap: Option<fn(&str, usize, &[f32])>,
}

impl State {
    /// Sizes every buffer for `n_ctx` positions (at most the model's trained context).
    pub fn new(model: &Model, n_ctx: usize) -> Result<State, ModelError> {
        let hp = &model.hp;
        if n_ctx == 0 || n_ctx > hp.n_ctx_train {
            return Err(ModelError::BadContext {
                requested: n_ctx,
                max: hp.n_ctx_train,
            });
        }
        let q_dim = hp.n_head * hp.head_dim;
        let kv_dim = hp.n_head_kv * hp.head_dim;
        let v_dim = hp.n_head_kv * hp.head_dim_v;
        let o_dim = hp.n_head * hp.head_dim_v;
        let widest = hp.n_embd.max(hp.n_ff).max(o_dim);
        // Worst case for the activation scratch is F32 (4 bytes per element).
        let act_bytes = widest * 4;
        Ok(State {
            n_ctx,
            pos: 0,
            kv_dim,
            v_dim,
            x: vec![0.0; hp.n_embd],
            xb: vec![0.0; hp.n_embd],
            xb2: vec![0.0; hp.n_embd],
            q: vec![0.0; q_dim],
            k: vec![0.0; kv_dim],
            v: vec![0.0; v_dim],
            att_out: vec![0.0; o_dim],
            scores: vec![0.0; hp.n_head * n_ctx],
            hb: vec![0.0; hp.n_ff],
            hb2: vec![0.0; hp.n_ff],
            act_q: vec![0; act_bytes],
            key_cache: vec![0; hp.n_layer * n_ctx * kv_dim],
            value_cache: vec![0; hp.n_layer * n_ctx * v_dim],
            // A pruned head never writes its dropped ids: they stay -inf.
            logits: vec![
                if model.head_ids.is_some() {
                    f32::NEG_INFINITY
                } else {
                    0.0
                };
                hp.n_vocab
            ],
            head_logits: vec![0.0; model.head_ids.as_ref().map_or(0, |ids| ids.len())],
            tap: None,
        })
    }

    fn tap(&self, name: &str, layer: usize, x: &[f32]) {
        if let Some(f) = self.tap {
            f(name, layer, x)
        }
    }

    /// Forgets the context (the cache is overwritten as positions are refilled).
    pub fn reset(&mut self) {
        self.pos = 0;
    }

    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Bytes this state holds (activations and KV cache).
    pub fn memory_bytes(&self) -> usize {
        4 * (self.x.len() * 3
            + self.q.len()
            + self.k.len()
            + self.v.len()
            + self.att_out.len()
            + self.scores.len()
            + self.hb.len() * 2
            + self.logits.len()
            + self.head_logits.len())
            + self.act_q.len()
            + 2 * (self.key_cache.len() + self.value_cache.len())
    }
}
