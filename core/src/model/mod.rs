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
pub use perplexity::{
    bits_per_byte, perplexity, perplexity_strided, strided_windows, PerplexityResult,
};
pub use store::{RepackedWeights, ResidentStore, TensorId, WeightStore};

use crate::gguf::Gguf;
use crate::kernels::{KernelSet, WeightKernel};
use crate::math::{self, AttentionKernel, AttentionSpan, Rope, RopeStyle};
use crate::platform::{Parallel, RowDispenser};
use crate::quant::{self, GgmlType};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
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
    /// Attention of one query head, the kernel set's face of `math::attention_head`.
    pub attention: math::AttentionHeadFn,
    /// SwiGLU of one token's FFN row, the kernel set's face of `math::swiglu`.
    pub swiglu: fn(&mut [f32], &[f32]),
    /// GELU by table lookup (Gemma), built once here rather than a `tanhf` per element.
    pub gelu: Option<Arc<math::GeluTable>>,
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
            attention: kernels.attention(),
            swiglu: kernels.swiglu(),
            gelu: (sw.activation == Activation::GeluTanh).then(|| Arc::new(math::GeluTable::new())),
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
        let kernel = AttentionKernel::F16Accumulator;
        self.forward_chunk(
            state,
            store,
            par,
            &[token],
            pos,
            0..1,
            kernel,
            false,
            &mut |_, _| {},
        )?;
        Ok(&state.logits)
    }

    /// Runs a prompt from position `pos` and returns the last token's logits; the LM head (the
    /// largest matrix of a small model) runs for the last token only. The prompt goes through
    /// in chunks of `state`'s batch size, each weight read once per chunk (the logits are the
    /// ones token-by-token decoding gives, to the bit, on a kernel set whose prompt kernels keep
    /// its decode kernels' bits: all but AVX-512's K-quants, see `WeightKernel::cols_twin`);
    /// the attention kernel is chosen by the
    /// prompt's length as llama.cpp chooses it.
    pub fn forward_batch<'s>(
        &self,
        state: &'s mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        tokens: &[u32],
        pos: usize,
    ) -> Result<&'s [f32], ModelError> {
        let kernel = batch_attention_kernel(tokens.len());
        let n_batch = state.n_batch;
        for (c, chunk) in tokens.chunks(n_batch).enumerate() {
            let last_chunk = (c + 1) * n_batch >= tokens.len();
            let logits_rows = if last_chunk {
                chunk.len() - 1..chunk.len()
            } else {
                0..0
            };
            let at = pos + c * n_batch;
            self.forward_chunk(
                state,
                store,
                par,
                chunk,
                at,
                logits_rows,
                kernel,
                true,
                &mut |_, _| {},
            )?;
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
        let n_batch = state.n_batch;
        for (c, chunk) in tokens.chunks(n_batch).enumerate() {
            let first = c * n_batch;
            let logits_rows = logits_from.clamp(first, first + chunk.len()) - first..chunk.len();
            let at = pos + first;
            self.forward_chunk(
                state,
                store,
                par,
                chunk,
                at,
                logits_rows,
                kernel,
                true,
                &mut |t, l| on_logits(first + t, l),
            )?;
        }
        Ok(())
    }

    /// Runs `tokens` (at most the state's batch size) at positions `pos..`, then the LM head
    /// for the tokens `logits_rows` (indices into `tokens`), each handed to `on_logits`.
    #[allow(clippy::too_many_arguments)]
    fn forward_chunk(
        &self,
        s: &mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        tokens: &[u32],
        pos: usize,
        logits_rows: core::ops::Range<usize>,
        kernel: AttentionKernel,
        prompt: bool,
        on_logits: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<(), ModelError> {
        let hp = &self.hp;
        s.prompt = prompt;
        debug_assert!(tokens.len() <= s.n_batch);
        if pos + tokens.len() > s.n_ctx {
            return Err(ModelError::ContextFull {
                pos: pos.max(s.n_ctx),
                n_ctx: s.n_ctx,
            });
        }
        let n_tokens = tokens.len();
        for (t, &token) in tokens.iter().enumerate() {
            self.embed(s, store, token, t)?;
            s.tap("inp_scaled", 0, row(&s.x, hp.n_embd, t));
        }
        for (l, layer) in self.layers.iter().enumerate() {
            self.attention_block(s, store, par, l, layer, n_tokens, pos, kernel)?;
            self.ffn_block(s, store, par, l, layer, n_tokens)?;
        }
        s.pos = pos + n_tokens;
        for t in logits_rows {
            self.lm_head(s, store, par, t)?;
            on_logits(t, &s.logits);
        }
        Ok(())
    }

    /// logits = Wout rms_norm(x[t]) (softcapped for Gemma 2-style heads).
    fn lm_head(
        &self,
        s: &mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        t: usize,
    ) -> Result<(), ModelError> {
        let hp = &self.hp;
        let n = hp.n_embd;
        math::rms_norm(
            &mut s.xb[..n],
            row(&s.x, n, t),
            &self.output_norm,
            hp.rms_eps,
        );
        s.tap("result_norm", 0, &s.xb[..n]);
        quantize_rows(par, &self.output, &s.xb, n, 1, &mut s.act_q)?;
        // A pruned head computes its kept rows only, then puts them at their ids.
        let head_out = match self.head_ids {
            None => &mut s.logits,
            Some(_) => &mut s.head_logits,
        };
        matmul(
            par,
            store,
            &self.output,
            &s.act_q,
            1,
            s.prompt,
            &mut s.tile,
            head_out,
        )?;
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

    /// x[t] = the embedding row of `token` (only that row is read and dequantized).
    fn embed(
        &self,
        s: &mut State,
        store: &dyn WeightStore,
        token: u32,
        t: usize,
    ) -> Result<(), ModelError> {
        let m = &self.token_embd;
        if token as usize >= self.hp.n_vocab {
            return Err(ModelError::TokenOutOfRange {
                token,
                n_vocab: self.hp.n_vocab,
            });
        }
        let x = row_mut(&mut s.x, self.hp.n_embd, t);
        let bytes = store.get(m.id)?;
        let w = &bytes[token as usize * m.row_bytes..(token as usize + 1) * m.row_bytes];
        let r = quant::dequantize_row(m.ty, w, &mut x[..m.n_cols]);
        store.release(m.id);
        r.map_err(|err| ModelError::Quant {
            tensor: m.name.clone(),
            err,
        })?;
        if self.switches.scale_embedding {
            let scale = libm::sqrtf(self.hp.n_embd as f32);
            x.iter_mut().for_each(|v| *v *= scale);
        }
        Ok(())
    }

    /// For each of the `n` tokens: x += (post-norm of) Wo · attention(rope(Wq xb), cache), with
    /// xb = rms_norm(x). The matrices run once for all tokens; RoPE, the cache writes and the
    /// attention run per token (token t sees the cache up to its own position).
    #[allow(clippy::too_many_arguments)]
    fn attention_block(
        &self,
        s: &mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        l: usize,
        layer: &Layer,
        n: usize,
        pos: usize,
        kernel: AttentionKernel,
    ) -> Result<(), ModelError> {
        let hp = &self.hp;
        let (n_embd, hd) = (hp.n_embd, hp.head_dim);
        let (q_dim, o_dim) = (hp.n_head * hd, hp.n_head * hp.head_dim_v);
        let (kv_dim, v_dim) = (s.kv_dim, s.v_dim);
        rms_norm_rows(
            par,
            &mut s.xb,
            &s.x,
            n_embd,
            n,
            &layer.attn_norm,
            hp.rms_eps,
        );
        for t in 0..n {
            s.tap("attn_norm", l, row(&s.xb, n_embd, t));
        }

        // Q, K, V share one input: quantize it once per activation format.
        quantize_rows(par, &layer.wq, &s.xb, n_embd, n, &mut s.act_q)?;
        matmul(
            par,
            store,
            &layer.wq,
            &s.act_q,
            n,
            s.prompt,
            &mut s.tile,
            &mut s.q,
        )?;
        if layer.wk.act_ty != layer.wq.act_ty {
            quantize_rows(par, &layer.wk, &s.xb, n_embd, n, &mut s.act_q)?;
        }
        matmul(
            par,
            store,
            &layer.wk,
            &s.act_q,
            n,
            s.prompt,
            &mut s.tile,
            &mut s.k,
        )?;
        if layer.wv.act_ty != layer.wk.act_ty {
            quantize_rows(par, &layer.wv, &s.xb, n_embd, n, &mut s.act_q)?;
        }
        matmul(
            par,
            store,
            &layer.wv,
            &s.act_q,
            n,
            s.prompt,
            &mut s.tile,
            &mut s.v,
        )?;

        let inv_sqrt_hd = 1.0 / libm::sqrtf(hd as f32);
        let score_scale = if self.switches.scale_q_before_attention {
            1.0
        } else {
            inv_sqrt_hd
        };
        for t in 0..n {
            let q = row_mut(&mut s.q, q_dim, t);
            let k = row_mut(&mut s.k, kv_dim, t);
            let v = row_mut(&mut s.v, v_dim, t);
            for (out, bias) in [
                (&mut *q, &layer.bq),
                (&mut *k, &layer.bk),
                (&mut *v, &layer.bv),
            ] {
                if let Some(b) = bias {
                    out.iter_mut().zip(b).for_each(|(o, b)| *o += b);
                }
            }
            if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                q.chunks_exact_mut(hd)
                    .for_each(|h| math::rms_norm_in_place(h, qn, hp.rms_eps));
                k.chunks_exact_mut(hd)
                    .for_each(|h| math::rms_norm_in_place(h, kn, hp.rms_eps));
            }
            if let Some(f) = s.tap {
                f("Qcur_normed", l, q);
                f("Kcur_normed", l, k);
                f("Vcur", l, v);
            }
            let ff = self.rope_freqs.as_deref();
            layer.rope.apply(q, hd, pos + t, ff);
            layer.rope.apply(k, hd, pos + t, ff);
            if let Some(f) = s.tap {
                f("Qcur", l, q);
                f("Kcur", l, k);
            }
            if self.switches.scale_q_before_attention {
                q.iter_mut().for_each(|v| *v *= inv_sqrt_hd);
            }
            if kernel == AttentionKernel::F16Accumulator {
                // llama.cpp's decode kernel converts the query to f16 before the dot products.
                q.iter_mut()
                    .for_each(|v| *v = half::f16::from_f32(*v).to_f32());
            }
            // Append this position's K and V to the layer's cache.
            let p = pos + t;
            let kbase = l * s.n_ctx * kv_dim;
            let vbase = l * s.n_ctx * v_dim;
            math::to_f16_bits(&mut s.key_cache[kbase + p * kv_dim..][..kv_dim], k);
            math::to_f16_bits(&mut s.value_cache[vbase + p * v_dim..][..v_dim], v);
        }
        if n == 1 {
            self.attend_heads(s, par, l, layer, pos, score_scale, kernel);
        } else {
            self.attend_tokens(s, par, l, layer, n, pos, score_scale, kernel);
        }
        for t in 0..n {
            s.tap("kqv_out", l, row(&s.att_out, o_dim, t));
        }

        quantize_rows(par, &layer.wo, &s.att_out, o_dim, n, &mut s.act_q)?;
        matmul(
            par,
            store,
            &layer.wo,
            &s.act_q,
            n,
            s.prompt,
            &mut s.tile,
            &mut s.xb2,
        )?;
        let post_norm = layer.post_attn_norm.as_deref();
        add_rows(par, &mut s.x, &mut s.xb2, n_embd, n, post_norm, hp.rms_eps);
        for t in 0..n {
            s.tap("sa_out", l, row(&s.x, n_embd, t));
        }
        Ok(())
    }

    /// att_out = attention of one token's query (at position `pos`) over the layer's cache,
    /// heads split over the workers (decoding).
    #[allow(clippy::too_many_arguments)]
    fn attend_heads(
        &self,
        s: &mut State,
        par: &dyn Parallel,
        l: usize,
        layer: &Layer,
        pos: usize,
        score_scale: f32,
        kernel: AttentionKernel,
    ) {
        let hp = &self.hp;
        let group = hp.n_head / hp.n_head_kv;
        let n_workers = par.n_threads().clamp(1, hp.n_head_kv);
        let att_out = SharedMut::new(&mut s.att_out);
        let scores = SharedMut::new(&mut s.scores);
        let cache = LayerCache::of(s, l);
        let q = &s.q;
        par.run(&|w| {
            if w >= n_workers {
                return;
            }
            // Worker w takes whole KV groups, so each reads its part of the cache once.
            let (g0, g1) = split(hp.n_head_kv, n_workers, w);
            for h in g0 * group..g1 * group {
                // SAFETY: head h's output and score rows are touched by this worker only.
                let out = unsafe { att_out.slice(h * hp.head_dim_v, hp.head_dim_v) };
                let sc = unsafe { scores.slice(h * s.n_ctx, s.n_ctx) };
                self.attend_head(&cache, layer, q, h, pos, out, sc, score_scale, kernel);
            }
        });
    }

    /// att_out[t] = attention of token t's query (at position `pos + t`) for the `n` tokens of
    /// a batch, tokens split over the workers (worker w uses the score row of head w).
    #[allow(clippy::too_many_arguments)]
    fn attend_tokens(
        &self,
        s: &mut State,
        par: &dyn Parallel,
        l: usize,
        layer: &Layer,
        n: usize,
        pos: usize,
        score_scale: f32,
        kernel: AttentionKernel,
    ) {
        let hp = &self.hp;
        let (q_dim, o_dim) = (hp.n_head * hp.head_dim, hp.n_head * hp.head_dim_v);
        let n_workers = par.n_threads().clamp(1, hp.n_head.min(n));
        let att_out = SharedMut::new(&mut s.att_out[..n * o_dim]);
        let scores = SharedMut::new(&mut s.scores);
        let cache = LayerCache::of(s, l);
        let q = &s.q;
        par.run(&|w| {
            if w >= n_workers {
                return;
            }
            // SAFETY: score row w belongs to worker w; token t's output to the worker of t.
            let sc = unsafe { scores.slice(w * s.n_ctx, s.n_ctx) };
            let (t0, t1) = split(n, n_workers, w);
            for t in t0..t1 {
                let out = unsafe { att_out.slice(t * o_dim, o_dim) };
                let q = row(q, q_dim, t);
                for (h, out) in out.chunks_exact_mut(hp.head_dim_v).enumerate() {
                    let p = pos + t;
                    self.attend_head(&cache, layer, q, h, p, out, sc, score_scale, kernel);
                }
            }
        });
    }

    /// One query head `h` of `q` at position `pos` over the cache up to `pos`.
    #[allow(clippy::too_many_arguments)]
    fn attend_head(
        &self,
        cache: &LayerCache,
        layer: &Layer,
        q: &[f32],
        h: usize,
        pos: usize,
        out: &mut [f32],
        scores: &mut [f32],
        score_scale: f32,
        kernel: AttentionKernel,
    ) {
        let hp = &self.hp;
        let (hd, group) = (hp.head_dim, hp.n_head / hp.n_head_kv);
        let kv = math::KvHead {
            key_cache: &cache.keys[..(pos + 1) * cache.kv_dim],
            value_cache: &cache.values[..(pos + 1) * cache.v_dim],
            head: h / group,
            n_head_kv: hp.n_head_kv,
            head_dim: hd,
            head_dim_v: hp.head_dim_v,
        };
        let span = AttentionSpan {
            pos,
            window: layer.window,
        };
        let q = &q[h * hd..(h + 1) * hd];
        let softcap = hp.attn_logit_softcap;
        (self.attention)(out, q, &kv, scores, span, score_scale, softcap, kernel);
    }

    /// For each of the `n` tokens: x += (post-norm of) Wdown (act(Wgate xb) * Wup xb), with
    /// xb = rms_norm(x).
    fn ffn_block(
        &self,
        s: &mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        l: usize,
        layer: &Layer,
        n: usize,
    ) -> Result<(), ModelError> {
        let hp = &self.hp;
        let (n_embd, n_ff) = (hp.n_embd, hp.n_ff);
        rms_norm_rows(par, &mut s.xb, &s.x, n_embd, n, &layer.ffn_norm, hp.rms_eps);
        for t in 0..n {
            s.tap("ffn_norm", l, row(&s.xb, n_embd, t));
        }
        quantize_rows(par, &layer.w_gate, &s.xb, n_embd, n, &mut s.act_q)?;
        matmul(
            par,
            store,
            &layer.w_gate,
            &s.act_q,
            n,
            s.prompt,
            &mut s.tile,
            &mut s.hb,
        )?;
        if layer.w_up.act_ty != layer.w_gate.act_ty {
            quantize_rows(par, &layer.w_up, &s.xb, n_embd, n, &mut s.act_q)?;
        }
        matmul(
            par,
            store,
            &layer.w_up,
            &s.act_q,
            n,
            s.prompt,
            &mut s.tile,
            &mut s.hb2,
        )?;
        let (activation, gelu, swiglu) =
            (self.switches.activation, self.gelu.as_deref(), self.swiglu);
        if let Some(f) = s.tap {
            for t in 0..n {
                f("ffn_gate", l, row(&s.hb, n_ff, t));
                f("ffn_up", l, row(&s.hb2, n_ff, t));
            }
        }
        let gates = SharedMut::new(&mut s.hb[..n * n_ff]);
        let ups = &s.hb2;
        per_token(par, n, &|_, t| {
            // SAFETY: token t's row is written by this worker only.
            let gate = unsafe { gates.slice(t * n_ff, n_ff) };
            let up = row(ups, n_ff, t);
            match (activation, gelu) {
                (Activation::Silu, _) => swiglu(gate, up),
                (Activation::GeluTanh, _) => gate.iter_mut().zip(up).for_each(|(g, u)| {
                    *g = gelu.map_or_else(|| math::gelu_tanh(*g), |t| t.gelu(*g)) * u
                }),
            }
        });
        for t in 0..n {
            s.tap("ffn_act", l, row(&s.hb, n_ff, t));
        }
        quantize_rows(par, &layer.w_down, &s.hb, n_ff, n, &mut s.act_q)?;
        matmul(
            par,
            store,
            &layer.w_down,
            &s.act_q,
            n,
            s.prompt,
            &mut s.tile,
            &mut s.xb2,
        )?;
        for t in 0..n {
            s.tap("ffn_out", l, row(&s.xb2, n_embd, t));
        }
        let post_norm = layer.post_ffn_norm.as_deref();
        add_rows(par, &mut s.x, &mut s.xb2, n_embd, n, post_norm, hp.rms_eps);
        for t in 0..n {
            s.tap("l_out", l, row(&s.x, n_embd, t));
        }
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

/// Row `t` of a token-major buffer of rows of `width` values.
fn row(buf: &[f32], width: usize, t: usize) -> &[f32] {
    &buf[t * width..(t + 1) * width]
}

fn row_mut(buf: &mut [f32], width: usize, t: usize) -> &mut [f32] {
    &mut buf[t * width..(t + 1) * width]
}

/// Quantizes the `n` input rows of `m` (rows of `width` values in `x`) into its activation
/// format, back to back in `act_q` (`m.act_bytes` each).
fn quantize_rows(
    par: &dyn Parallel,
    m: &Matrix,
    x: &[f32],
    width: usize,
    n: usize,
    act_q: &mut [u8],
) -> Result<(), ModelError> {
    let quantize = |t: usize, out: &mut [u8]| {
        m.kernel
            .quantize_activation(&row(x, width, t)[..m.n_cols], out)
    };
    let failed = AtomicBool::new(false);
    let shared = SharedMut::new(&mut act_q[..n * m.act_bytes]);
    per_token(par, n, &|_, t| {
        // SAFETY: token t's row is written by this worker only.
        let out = unsafe { shared.slice(t * m.act_bytes, m.act_bytes) };
        if quantize(t, out).is_err() {
            failed.store(true, Ordering::Relaxed);
        }
    });
    if failed.load(Ordering::Relaxed) {
        // Run the first row again for the error to report.
        quantize(0, &mut act_q[..m.act_bytes]).map_err(|err| ModelError::Quant {
            tensor: m.name.clone(),
            err,
        })?;
    }
    Ok(())
}

/// out[t] = rms_norm(x[t]) * w for the `n` rows of `width` values.
fn rms_norm_rows(
    par: &dyn Parallel,
    out: &mut [f32],
    x: &[f32],
    width: usize,
    n: usize,
    w: &[f32],
    eps: f32,
) {
    let shared = SharedMut::new(&mut out[..n * width]);
    per_token(par, n, &|_, t| {
        // SAFETY: token t's row is written by this worker only.
        let o = unsafe { shared.slice(t * width, width) };
        math::rms_norm(o, row(x, width, t), w, eps);
    });
}

/// x[t] += (rms_norm(o[t]) * post_norm, or o[t] without one) for the `n` rows of `width`.
fn add_rows(
    par: &dyn Parallel,
    x: &mut [f32],
    o: &mut [f32],
    width: usize,
    n: usize,
    post_norm: Option<&[f32]>,
    eps: f32,
) {
    let (xs, os) = (
        SharedMut::new(&mut x[..n * width]),
        SharedMut::new(&mut o[..n * width]),
    );
    per_token(par, n, &|_, t| {
        // SAFETY: token t's rows are touched by this worker only.
        let (x, o) = unsafe { (xs.slice(t * width, width), os.slice(t * width, width)) };
        if let Some(w) = post_norm {
            math::rms_norm_in_place(o, w, eps);
        }
        x.iter_mut().zip(&*o).for_each(|(x, o)| *x += o);
    });
}

/// Rows `[lo, hi)` of `n` split into `parts` near-equal ranges.
fn split(n: usize, parts: usize, i: usize) -> (usize, usize) {
    let per = n.div_ceil(parts);
    ((i * per).min(n), ((i + 1) * per).min(n))
}

/// A mutable slice handed to parallel workers that write disjoint ranges of it.
struct SharedMut<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: workers only take disjoint sub-slices (see `slice`).
unsafe impl<T: Send> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    fn new(s: &mut [T]) -> Self {
        SharedMut {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        }
    }
    /// # Safety
    /// No two live slices may overlap, and the source slice must outlive them.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        assert!(start + len <= self.len);
        core::slice::from_raw_parts_mut(self.ptr.add(start), len)
    }
}

/// One layer's K and V cache (f16 bits, `[pos][kv_dim]` and `[pos][v_dim]`), read-only.
struct LayerCache<'s> {
    keys: &'s [u16],
    values: &'s [u16],
    kv_dim: usize,
    v_dim: usize,
}

impl<'s> LayerCache<'s> {
    fn of(s: &'s State, l: usize) -> LayerCache<'s> {
        let (kv_dim, v_dim, n_ctx) = (s.kv_dim, s.v_dim, s.n_ctx);
        LayerCache {
            keys: &s.key_cache[l * n_ctx * kv_dim..(l + 1) * n_ctx * kv_dim],
            values: &s.value_cache[l * n_ctx * v_dim..(l + 1) * n_ctx * v_dim],
            kv_dim,
            v_dim,
        }
    }
}

/// Runs `f(t)` for the tokens `0..n`, each worker taking a run of them (the token-wise steps
/// of a batch: norms, quantizing, the FFN activation, attention). One token runs inline.
fn per_token(par: &dyn Parallel, n: usize, f: &(dyn Fn(usize, usize) + Sync)) {
    let n_workers = par.n_threads().clamp(1, n.max(1));
    if n_workers == 1 {
        (0..n).for_each(|t| f(0, t));
        return;
    }
    par.run(&|w| {
        if w < n_workers {
            let (t0, t1) = split(n, n_workers, w);
            (t0..t1).for_each(|t| f(w, t));
        }
    });
}

/// `out[t] = M · x[t]` for the `n` input rows already quantized into `act_q` (`out` holds
/// token-major rows of `m.n_rows`). The weight rows are split over the workers; a worker
/// computes its rows for all `n` tokens at once (each weight read once), into its part of
/// `tile`, then copies them into the tokens' rows. One token goes straight through the matvec.
/// The weight is fetched from the store just before and released right after. Where the
/// matrix's kernel has a repacked layout and the store holds that copy, the repacked kernel runs
/// on it, token by token (the file's pages of the tensor are then not touched).
#[allow(clippy::too_many_arguments)]
fn matmul(
    par: &dyn Parallel,
    store: &dyn WeightStore,
    m: &Matrix,
    act_q: &[u8],
    n: usize,
    prompt: bool,
    tile: &mut [f32],
    out: &mut [f32],
) -> Result<(), ModelError> {
    let n_rows = m.n_rows;
    let repacked = m
        .kernel
        .repacked
        .and_then(|rk| Some((rk, store.get_repacked(m.id, rk.layout)?)));
    let w = match repacked {
        Some((_, packed)) => packed,
        None => store.get(m.id)?,
    };
    let expected = match repacked {
        Some((rk, _)) => (rk.bytes)(n_rows, m.n_cols).unwrap_or(usize::MAX),
        None => n_rows * m.row_bytes,
    };
    if w.len() < expected {
        store.release(m.id);
        return Err(ModelError::Store {
            tensor: m.name.clone(),
            reason: format!(
                "got {} bytes, expected {expected} ({n_rows} rows of {} elements{})",
                w.len(),
                m.n_cols,
                match repacked {
                    Some((rk, _)) => format!(", repacked as {}", rk.layout),
                    None => String::new(),
                }
            ),
        });
    }
    let failed = AtomicBool::new(false);
    let n_workers = par.n_threads().max(1);
    let acts = &act_q[..n * m.act_bytes];
    let out = SharedMut::new(&mut out[..n * n_rows]);
    let tile = SharedMut::new(if n > 1 {
        &mut tile[..n * n_rows]
    } else {
        &mut tile[..0]
    });
    // Guided scheduling: each grab takes remaining / (2 x threads) rows, so a preempted worker
    // leaves a short tail. Chunks are multiples of 16 rows so that workers do not share cache
    // lines of `out` (and row-group kernels, groups of 4, get aligned starts).
    let rows_left = RowDispenser::new(n_rows, n_workers, MATVEC_CHUNK_ROWS);
    par.run(&|_| {
        while let Some(chunk) = rows_left.grab() {
            let (r0, r1, len) = (chunk.start, chunk.end, chunk.len());
            let result = match repacked {
                // The repacked kernels are matvecs: one pass over the chunk per token.
                Some((rk, packed)) => rk
                    .row_range(n_rows, m.n_cols, r0, r1)
                    .and_then(|range| packed.get(range))
                    .map_or(Err(()), |rows| {
                        (0..n).try_for_each(|t| {
                            // SAFETY: the dispenser hands each row to exactly one worker.
                            let o = unsafe { out.slice(t * n_rows + r0, len) };
                            let act = &acts[t * m.act_bytes..(t + 1) * m.act_bytes];
                            rk.matvec(m.ty, rows, len, m.n_cols, act, o).map_err(|_| ())
                        })
                    }),
                None => {
                    let rows = &w[r0 * m.row_bytes..r1 * m.row_bytes];
                    if n == 1 && prompt && m.kernel.cols_twin.is_some() {
                        // A one-token prompt (or prompt tail) takes the batched kernel, whose
                        // bits differ from the decode kernel's (cols_twin): a prompt then gives
                        // the same logits however it is split. One token's tile is its row.
                        // SAFETY: the dispenser hands each row to exactly one worker.
                        let o = unsafe { out.slice(r0, len) };
                        m.kernel
                            .matmul(rows, len, m.n_cols, acts, 1, o)
                            .map_err(|_| ())
                    } else if n == 1 {
                        // SAFETY: the dispenser hands each row to exactly one worker.
                        let o = unsafe { out.slice(r0, len) };
                        m.kernel
                            .matvec(rows, len, m.n_cols, acts, o)
                            .map_err(|_| ())
                    } else {
                        // SAFETY: as above; this chunk's tile is rows r0..r1 of every token.
                        let tl = unsafe { tile.slice(n * r0, n * len) };
                        let r = m.kernel.matmul(rows, len, m.n_cols, acts, n, tl);
                        for (t, src) in tl.chunks_exact(len).enumerate() {
                            // SAFETY: rows r0..r1 of token t belong to this chunk only.
                            unsafe { out.slice(t * n_rows + r0, len) }.copy_from_slice(src);
                        }
                        r.map_err(|_| ())
                    }
                }
            };
            if result.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
        }
    });
    store.release(m.id);
    if failed.load(Ordering::Relaxed) {
        // Shapes were checked at load and the weight's length above: a kernel refused them.
        return Err(ModelError::Store {
            tensor: m.name.clone(),
            reason: format!(
                "the {} kernel refused {} rows of {} columns for {n} tokens",
                m.kernel.face, n_rows, m.n_cols
            ),
        });
    }
    Ok(())
}

/// Rows per chunk of a parallel matvec: a multiple of every repacked kernel's group (4).
const MATVEC_CHUNK_ROWS: usize = 16;

/// Tokens of a prompt that run together by default: each weight is read once per batch, and
/// the batch buffers (a few MB for a 1.5B model) stay small next to the KV cache.
pub const DEFAULT_BATCH: usize = 32;

/// The element counts of every buffer a [`State`] holds for a model shape, a context and a
/// batch: what `State::with_batch` allocates, and what `MemoryPlan` plans for before a model is
/// loaded (one computation, so the plan cannot drift from the allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateShape {
    pub n_ctx: usize,
    /// Tokens per prompt batch (1..=n_ctx).
    pub n_batch: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub q_dim: usize,
    pub kv_dim: usize,
    pub v_dim: usize,
    pub o_dim: usize,
    /// f32 scores, `[n_head][n_ctx]`.
    pub scores: usize,
    /// Bytes of one quantized input row (worst case: f32).
    pub act_row_bytes: usize,
    /// f32s of the matmul tile (none when the batch is one token).
    pub tile: usize,
    /// f16 entries of each of the key and value caches.
    pub key_cache: usize,
    pub value_cache: usize,
    pub n_vocab: usize,
    /// Rows of a pruned head (0 for a full head).
    pub head_rows: usize,
}

impl StateShape {
    pub fn new(hp: &HParams, n_ctx: usize, n_batch: usize, head_rows: usize) -> StateShape {
        let b = n_batch.clamp(1, n_ctx.max(1));
        let q_dim = hp.n_head * hp.head_dim;
        let kv_dim = hp.n_head_kv * hp.head_dim;
        let v_dim = hp.n_head_kv * hp.head_dim_v;
        let o_dim = hp.n_head * hp.head_dim_v;
        let widest = hp.n_embd.max(hp.n_ff).max(o_dim);
        let most_rows = widest.max(q_dim).max(kv_dim).max(v_dim);
        StateShape {
            n_ctx,
            n_batch: b,
            n_embd: hp.n_embd,
            n_ff: hp.n_ff,
            q_dim,
            kv_dim,
            v_dim,
            o_dim,
            scores: hp.n_head * n_ctx,
            act_row_bytes: widest * 4,
            tile: if b > 1 { b * most_rows } else { 0 },
            key_cache: hp.n_layer * n_ctx * kv_dim,
            value_cache: hp.n_layer * n_ctx * v_dim,
            n_vocab: hp.n_vocab,
            head_rows,
        }
    }

    /// Bytes of the KV cache (f16 keys and values).
    pub fn kv_cache_bytes(&self) -> usize {
        2 * (self.key_cache + self.value_cache)
    }

    /// Bytes of the activation buffers, the scores, the quantized-input scratch and the tile.
    pub fn activation_bytes(&self) -> usize {
        let b = self.n_batch;
        4 * (b * (3 * self.n_embd + self.q_dim + self.kv_dim + self.v_dim + self.o_dim)
            + b * 2 * self.n_ff
            + self.scores
            + self.tile)
            + b * self.act_row_bytes
    }

    /// Bytes of the logits and a pruned head's rows.
    pub fn logits_bytes(&self) -> usize {
        4 * (self.n_vocab + self.head_rows)
    }
}

/// Everything that changes while running: activations, the quantized-activation scratch and
/// the KV cache, all sized once for a context length and a batch size so that a token
/// allocates nothing. Activation buffers hold one row per token of a batch (`[n_batch][dim]`).
pub struct State {
    pub n_ctx: usize,
    /// Next position to fill (tokens in the cache).
    pub pos: usize,
    /// Tokens run together by `forward_batch` (rows of the activation buffers).
    n_batch: usize,
    /// Whether the pass in progress is a prompt's (`forward_batch*`) or a decode step's
    /// (`forward`): a prompt runs the batched kernels even for one token, so that a prompt
    /// gives the same bits however it is split (see `WeightKernel::cols_twin`).
    prompt: bool,
    kv_dim: usize,
    v_dim: usize,
    x: Vec<f32>,
    xb: Vec<f32>,
    xb2: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att_out: Vec<f32>,
    /// `[n_head][n_ctx]`: one token's attention at a time.
    scores: Vec<f32>,
    hb: Vec<f32>,
    hb2: Vec<f32>,
    /// `n_batch` quantized input rows, back to back.
    act_q: Vec<u8>,
    /// The matmul workers' output before it is copied into the tokens' rows: `n_batch` x the
    /// most rows of a layer matrix.
    tile: Vec<f32>,
    /// f16 bits, `[layer][pos][n_head_kv * head_dim]`.
    key_cache: Vec<u16>,
    value_cache: Vec<u16>,
    logits: Vec<f32>,
    /// The rows of a pruned head before they are scattered into `logits` (empty for a full head).
    head_logits: Vec<f32>,
    /// Called with (name, layer, values) at the named points of the forward pass (llama.cpp's
    /// tensor names: attn_norm, Qcur, Kcur, Vcur, kqv_out, sa_out, ffn_out, l_out,
    /// result_norm), once per token, for debugging a disagreement layer by layer. `None` in
    /// normal use.
    pub tap: Option<fn(&str, usize, &[f32])>,
}

impl State {
    /// Sizes every buffer for `n_ctx` positions (at most the model's trained context) and
    /// prompts in batches of [`DEFAULT_BATCH`] tokens.
    pub fn new(model: &Model, n_ctx: usize) -> Result<State, ModelError> {
        State::with_batch(model, n_ctx, DEFAULT_BATCH)
    }

    /// Like [`State::new`] with prompts run `n_batch` tokens at a time (1: token by token;
    /// more than `n_ctx` is capped to `n_ctx`).
    pub fn with_batch(model: &Model, n_ctx: usize, n_batch: usize) -> Result<State, ModelError> {
        let hp = &model.hp;
        if n_ctx == 0 || n_ctx > hp.n_ctx_train {
            return Err(ModelError::BadContext {
                requested: n_ctx,
                max: hp.n_ctx_train,
            });
        }
        let head_rows = model.head_ids.as_ref().map_or(0, |ids| ids.len());
        let sh = StateShape::new(hp, n_ctx, n_batch, head_rows);
        let b = sh.n_batch;
        Ok(State {
            n_ctx,
            pos: 0,
            prompt: false,
            n_batch: b,
            kv_dim: sh.kv_dim,
            v_dim: sh.v_dim,
            x: vec![0.0; b * sh.n_embd],
            xb: vec![0.0; b * sh.n_embd],
            xb2: vec![0.0; b * sh.n_embd],
            q: vec![0.0; b * sh.q_dim],
            k: vec![0.0; b * sh.kv_dim],
            v: vec![0.0; b * sh.v_dim],
            att_out: vec![0.0; b * sh.o_dim],
            scores: vec![0.0; sh.scores],
            hb: vec![0.0; b * sh.n_ff],
            hb2: vec![0.0; b * sh.n_ff],
            act_q: vec![0; b * sh.act_row_bytes],
            tile: vec![0.0; sh.tile],
            key_cache: vec![0; sh.key_cache],
            value_cache: vec![0; sh.value_cache],
            // A pruned head never writes its dropped ids: they stay -inf.
            logits: vec![
                if model.head_ids.is_some() {
                    f32::NEG_INFINITY
                } else {
                    0.0
                };
                hp.n_vocab
            ],
            head_logits: vec![0.0; head_rows],
            tap: None,
        })
    }

    /// Tokens a prompt runs in at a time.
    pub fn n_batch(&self) -> usize {
        self.n_batch
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
            + self.tile.len()
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
