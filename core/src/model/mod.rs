//! The decoder-only transformer, one forward pass for every family smolrun runs (Llama, Qwen2,
//! Qwen3, Gemma 3, Qwen3-MoE, Qwen1.5-MoE, Ling 2.0 and the Qwen3.5 hybrid; the table is in
//! arch/).
//!
//! ```text
//! token -> embedding row (x sqrt(n_embd) for Gemma)
//!   for each layer:                      layer.rs: a token mixer, then an FFN
//!     x = x + mixer(x)                   attention.rs (KV cache), or delta_net.rs (fixed state)
//!     x = x + ffn(x)                     dense_ffn.rs, or moe_ffn.rs (a mixture of experts)
//! logits = Wout rms_norm(x)              Wout may be token_embd (tied), or a pruned head:
//!                                        only the kept ids' rows, the rest -inf
//! ```
//! Families differ in what their layers are made of and in the switches of the shared kinds:
//! each family's file in arch/ reads its own keys, lays out its layers (which mixer and which
//! FFN each has: dense, experts with its routing, recurrent or gated attention), sets its
//! [`Switches`] and names its tensor quirks; hparams.rs reads the keys they all share. Every
//! weight is reached through a [`WeightStore`] (store.rs), asked for just before its matvec and
//! released right after; a per-pass context ([`pass::Pass`]) carries the pool, the store and
//! the scratch, so a layer's forward reads like the math.

pub mod arch;
pub mod attention;
pub mod delta_net;
pub mod dense_ffn;
pub mod embedding;
mod error;
pub mod expert_cache;
pub mod head;
pub mod hparams;
pub mod layer;
pub mod mamba2;
pub mod matrix;
pub mod memory_plan;
pub mod moe_ffn;
pub mod mtp;
pub mod pager;
pub mod pass;
pub mod perplexity;
pub mod repack;
pub mod short_conv;
pub mod state;
pub mod store;
pub mod stream;
pub mod tensor_use;

pub use arch::{Activation, Architecture, Family, Layout, Switches, ARCHITECTURES};
pub use attention::{
    Attention, AttentionOptions, AttentionShape, KvCache, KvCacheType, QkvWeights,
};
pub use delta_net::{DeltaNet, DeltaNetShape, RecurrentState};
pub use dense_ffn::{DenseFfn, Gate};
pub use error::ModelError;
pub use hparams::{HParams, Keys, RopeScaling};
pub use layer::{Ffn, FfnShape, Layer, LayerShape, LayerState, MixerShape, TokenMixer};
pub use mamba2::{Mamba2, Mamba2Shape};
pub use matrix::{Loader, Matrix};
pub use memory_plan::MemoryPlan;
pub use moe_ffn::{
    Gating, MoeFfn, Routing, SelectionBias, SharedExpert, MAX_EXPERTS_USED, MAX_EXPERT_GROUPS,
};
pub use mtp::{Mtp, MtpState};
pub use pass::TILED_ATTENTION_MIN_BATCH;
pub use perplexity::{
    bits_per_byte, perplexity, perplexity_strided, strided_windows, PerplexityResult,
};
pub use short_conv::{ShortConv, ShortConvShape};
pub use state::{State, StateOptions, StateShape, DEFAULT_BATCH, TABLE_TOKENS};
pub use store::{
    PreadStore, RecordingStore, RepackedWeights, ResidentStore, StoreCall, StoreError,
    StoreErrorKind, StreamStats, TensorId, TensorTable, Weight, WeightKey, WeightStore,
};
pub use stream::{StreamBudget, StreamPlan, StreamStore};
pub use tensor_use::TensorUse;

use crate::gguf::Gguf;
use crate::kernels::KernelSet;
use crate::math::{self, AttentionKernel, Rope, RopeStyle};
use crate::platform::Parallel;
use alloc::sync::Arc;
use alloc::vec::Vec;
use pass::{row, row_mut, Pass};

/// [`Model::act_table_bytes`] of these layers and head.
fn act_table_bytes_of(layers: &[Layer], output: &Matrix) -> usize {
    let mut matrices: Vec<&Matrix> = Vec::new();
    for l in layers {
        matrices.extend(l.matrices());
    }
    matrices.push(output);
    matrices
        .iter()
        .filter_map(|m| (m.kernel.repacked?.act_table?.bytes)(m.n_cols))
        .max()
        .unwrap_or(0)
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
    /// Pre-gated prefetch: each MoE layer guesses the experts of the layer this many ahead
    /// (0: off; see [`Model::set_moe_options`]).
    pub moe_predict: usize,
    /// Qwen3.5's MTP block, loaded for drafting with it ([`Model::load_mtp`]); `None`: skipped.
    pub mtp: Option<Mtp>,
    /// [`Model::act_table_bytes`], worked out once at load (the kernels are chosen there), so
    /// that making a state allocates nothing.
    act_tables_per_token: usize,
}

/// How a mixture of experts runs, beyond what the file says (`--experts`, `--moe-cache-bias`,
/// `--moe-prefetch`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MoeOptions {
    /// Experts per token instead of the file's `expert_used_count`.
    pub experts_used: Option<usize>,
    /// Selection bonus of an expert in RAM.
    pub cache_bias: f32,
    /// Guess the experts of the layer this many ahead (0: off).
    pub predict_distance: usize,
    /// Do not ask the store early for the experts an early router (SmallThinker's, on the
    /// layer's input) has chosen: they are read when the FFN needs them, as in a family
    /// without one. Routing is unchanged; this is for measuring what the early read hides.
    pub no_early_prefetch: bool,
}

impl Model {
    /// [`Model::load_with_kernels`] with the scalar reference kernels only: the ground truth,
    /// for tests and tools that must not depend on the CPU they run on.
    pub fn load(g: &Gguf) -> Result<Model, ModelError> {
        Model::load_with_kernels(g, &KernelSet::scalar())
    }

    /// [`Model::load_from`] a file parsed whole (`Gguf::parse`), its vectors read in place.
    pub fn load_with_kernels(g: &Gguf, kernels: &KernelSet) -> Result<Model, ModelError> {
        Model::load_from(g, &ResidentStore::new(g), kernels)
    }

    /// Reads the hyperparameters, then finds and checks every tensor the forward pass needs
    /// (the small vectors read through `store`), and picks each matrix's matvec kernel from
    /// `kernels` (normally `KernelSet::select(&features)` with the platform's CPU features),
    /// once, here. Nothing is sized from a number in the file before that number has been
    /// validated.
    pub fn load_from(
        g: &Gguf,
        store: &dyn WeightStore,
        kernels: &KernelSet,
    ) -> Result<Model, ModelError> {
        let hp = HParams::from_gguf(g)?;
        let sw = hp.family.switches;
        let n_embd = hp.n_embd;
        let ld = Loader {
            gguf: g,
            store,
            kernels,
        };

        let token_embd = ld.matrix("token_embd.weight", n_embd, hp.n_vocab)?;
        let (output, head_ids) = match g.tensor("output.weight") {
            Some(t) => {
                let head_ids = head::kept_ids(g, hp.n_vocab, t.dims[1])?;
                let n_rows = head_ids.as_ref().map_or(hp.n_vocab, |ids| ids.len());
                (ld.matrix("output.weight", n_embd, n_rows)?, head_ids)
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
        let output_norm = ld.vector(hp.family.output_norm, n_embd)?;
        let rope_freqs = ld.opt_vector("rope_freqs.weight", hp.n_rot / 2)?;

        let gate = ffn_gate(sw.activation, kernels);
        let mut layers = Vec::with_capacity(hp.n_layer);
        for (l, &shape) in hp.layers.iter().enumerate() {
            // A windowed layer's RoPE: the family may run a layer unwindowed that the file
            // marks as windowed (Phi-3), and its RoPE is then the global one.
            let windowed = matches!(shape.mixer, MixerShape::Attention(a) if a.window.is_some());
            let rope = layer_rope(&hp, sw.rope_style, windowed);
            layers.push(load_layer(&ld, &hp, l, shape, rope, &gate)?);
        }
        let act_tables_per_token = act_table_bytes_of(&layers, &output);
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
            moe_predict: 0,
            mtp: None,
            act_tables_per_token,
        })
    }

    pub fn n_vocab(&self) -> usize {
        self.hp.n_vocab
    }

    /// Every weight the forward pass asks for whole, in the order it asks for them in one pass
    /// (each layer's matrices, then the LM head): the order a streaming store reads ahead in.
    pub fn weight_order(&self) -> Vec<WeightKey> {
        let layers = self.layers.iter().flat_map(|l| l.keys.iter().copied());
        layers.chain([self.output.key]).collect()
    }

    /// Each MoE layer's expert tensors, for the expert pager's pools.
    pub fn expert_groups(&self) -> Vec<pager::ExpertGroup> {
        let moe = self
            .layers
            .iter()
            .enumerate()
            .filter_map(|(l, layer)| match &layer.ffn {
                Ffn::Moe(f) => Some((l, f)),
                Ffn::Dense(_) => None,
            });
        moe.map(|(l, f)| pager::ExpertGroup {
            layer: l,
            tensors: [f.gate_exps.id, f.up_exps.id, f.down_exps.id],
            n_expert: f.n_expert,
            n_used: f.n_expert_used,
        })
        .collect()
    }

    /// KV caches of type `kv_type` for the states made from now on (`--cache-type-k/-v`;
    /// `State::new` sizes them from `hp`).
    pub fn set_kv_type(&mut self, kv_type: KvCacheType) {
        self.hp.kv_type = kv_type;
    }

    /// Keeps the recurrent layers' delta-rule matrices as f16 (`on`) or f32, for the states
    /// made from now on (`State::new` sizes them from `hp`). f16 halves the bytes the step
    /// reads and writes per token, at a rounding of every state value per token.
    pub fn set_state_f16(&mut self, on: bool) {
        self.hp.set_state_f16(on);
        for layer in &mut self.layers {
            if let TokenMixer::DeltaNet(d) = &mut layer.mixer {
                d.shape.state_f16 = on;
            }
        }
    }

    /// Sets how the mixture of experts runs. Refuses an expert count the routing cannot give
    /// (0, more than the layer has or than its groups allow, more than
    /// [`MAX_EXPERTS_USED`]).
    pub fn set_moe_options(&mut self, opts: MoeOptions) -> Result<(), ModelError> {
        for layer in &mut self.layers {
            let Ffn::Moe(f) = &mut layer.ffn else {
                continue;
            };
            if let Some(k) = opts.experts_used {
                let r = &f.routing;
                let reachable = match r.n_group {
                    0 | 1 => f.n_expert,
                    g => f.n_expert / g * r.n_group_used,
                };
                if k == 0 || k > reachable || k > MAX_EXPERTS_USED {
                    return Err(ModelError::BadOption {
                        option: "--experts",
                        reason: alloc::format!(
                            "{k} experts per token: this model's routing can choose 1 to {} \
                             (it uses {} by default)",
                            reachable.min(MAX_EXPERTS_USED),
                            f.n_expert_used
                        ),
                    });
                }
                f.n_expert_used = k;
            }
            f.cache_bias = opts.cache_bias;
            f.early_prefetch = !opts.no_early_prefetch;
        }
        self.moe_predict = opts.predict_distance;
        Ok(())
    }

    /// One expert of each expert tensor (the pass asks for experts one at a time, chosen per
    /// token): what a store sizes its buffer for experts by.
    pub fn expert_keys(&self) -> Vec<WeightKey> {
        let experts = self.layers.iter().flat_map(|l| l.expert_matrices());
        experts
            .map(|m| WeightKey::expert(m.key.tensor, 0))
            .collect()
    }

    /// Bytes of one token's activation tables for the widest matrix input whose kernel is a
    /// lookup-table kernel (`RepackedKernel::act_table`); 0 if none is. `State` sizes its
    /// table scratch with it.
    pub fn act_table_bytes(&self) -> usize {
        self.act_tables_per_token
    }

    /// Bytes of the largest weight the forward pass asks a store for at once: what a store
    /// that reads each weight into one scratch buffer must hold.
    pub fn largest_weight_bytes(&self) -> usize {
        let layers = self.layers.iter().flat_map(|l| l.matrices());
        layers
            .chain([&self.output])
            .map(|m| m.n_rows * m.row_bytes)
            .max()
            .unwrap_or(0)
    }

    /// Whether [`Model::shift_context`] can drop positions from `state`'s cache: every layer
    /// attends through an f16 KV cache (a recurrent state or a conv window holds no positions
    /// to drop; a q8_0 cache's keys would have to go back through llama.cpp's Hadamard
    /// rotation first, not done), no MTP block keeps its own cache, and each head fits the
    /// shift's buffer.
    pub fn can_shift_context(&self, state: &State) -> bool {
        state.mtp.is_none()
            && state.kv_caches_are_f16()
            && self.layers.iter().all(|l| match &l.mixer {
                TokenMixer::Attention(a) => a.shape.head_dim <= attention::MAX_HEAD_DIM,
                _ => false,
            })
    }

    /// llama.cpp's context shift: forgets cached positions `keep..keep + discard`, moves the
    /// later ones down and rotates their keys back by `discard`, so decoding goes on at
    /// position `state.pos - discard`. The caller checks [`Model::can_shift_context`] first.
    pub fn shift_context(
        &self,
        state: &mut State,
        keep: usize,
        discard: usize,
    ) -> Result<(), ModelError> {
        let n_cached = state.pos;
        if !self.can_shift_context(state) || discard == 0 || keep + discard > n_cached {
            return Err(ModelError::ContextShift {
                keep,
                discard,
                n_cached,
            });
        }
        for (layer, st) in self.layers.iter().zip(state.layers.iter_mut()) {
            if let (TokenMixer::Attention(a), LayerState::Kv(cache)) = (&layer.mixer, st) {
                let rope = a
                    .shape
                    .rope
                    .then_some((&a.rope, self.rope_freqs.as_deref()));
                cache.drop_positions(&a.shape, rope, n_cached, keep, discard);
            }
        }
        state.pos = n_cached - discard;
        state.steps_kept = 0;
        Ok(())
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
        let mut no_logits = |_: usize, _: &[f32]| {};
        let chunk = Chunk {
            tokens: &[token],
            pos,
            logits_rows: 0..1,
            kernel,
            prompt: false,
            verify: false,
        };
        self.forward_chunk(state, store, par, chunk, Output::Logits(&mut no_logits))?;
        Ok(state.logits())
    }

    /// Runs a prompt from position `pos` and returns the last token's logits; the LM head (the
    /// largest matrix of a small model) runs for the last token only. The prompt goes through
    /// in chunks of `state`'s batch size, each weight read once per chunk (the logits are the
    /// ones token-by-token decoding gives, to the bit, on a kernel set whose prompt kernels keep
    /// its decode kernels' bits: all but AVX-512's K-quants, see `WeightKernel::cols_twin`);
    /// the attention kernel is chosen by the prompt's length as llama.cpp chooses it.
    pub fn forward_batch<'s>(
        &self,
        state: &'s mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        tokens: &[u32],
        pos: usize,
    ) -> Result<&'s [f32], ModelError> {
        let kernel = pass::batch_attention_kernel(tokens.len());
        let n_batch = state.n_batch;
        for (c, chunk) in tokens.chunks(n_batch).enumerate() {
            let last_chunk = (c + 1) * n_batch >= tokens.len();
            let logits_rows = if last_chunk {
                chunk.len() - 1..chunk.len()
            } else {
                0..0
            };
            let chunk = Chunk {
                tokens: chunk,
                pos: pos + c * n_batch,
                logits_rows,
                kernel,
                prompt: true,
                verify: false,
            };
            self.forward_chunk(state, store, par, chunk, Output::Logits(&mut |_, _| {}))?;
        }
        Ok(state.logits())
    }

    /// Runs `tokens` at positions `pos..` in one pass, as decoding would run them one by one,
    /// and computes the logits after every one of them into the state's logit rows
    /// ([`State::logits_row`]): how speculative decoding verifies a draft (the token sampled
    /// last, then the drafted ones). Each weight, the LM head included, is asked of the store
    /// once. The logits are decoding's (`forward`'s) to the bit: the decode attention kernel, and
    /// each matrix's decode kernel wherever its batched kernel keeps other bits
    /// (`WeightKernel::cols_twin`). At most [`State::n_logits`] tokens. The cache keeps every
    /// token's keys and values; a caller that rejects a draft runs its next token at the
    /// position after the last accepted one (attention reads the cache only up to a token's own
    /// position, so what lies beyond is never read before it is overwritten).
    pub fn forward_verify(
        &self,
        state: &mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        tokens: &[u32],
        pos: usize,
    ) -> Result<(), ModelError> {
        if tokens.is_empty() || tokens.len() > state.n_logits {
            return Err(ModelError::BadVerifyBatch {
                tokens: tokens.len(),
                n_logits: state.n_logits,
            });
        }
        let chunk = Chunk {
            tokens,
            pos,
            logits_rows: 0..tokens.len(),
            kernel: AttentionKernel::F16Accumulator,
            prompt: false,
            verify: true,
        };
        self.forward_chunk(state, store, par, chunk, Output::Logits(&mut |_, _| {}))
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
        let kernel = pass::batch_attention_kernel(tokens.len());
        let n_batch = state.n_batch;
        for (c, chunk) in tokens.chunks(n_batch).enumerate() {
            let first = c * n_batch;
            let logits_rows = logits_from.clamp(first, first + chunk.len()) - first..chunk.len();
            let chunk = Chunk {
                tokens: chunk,
                pos: pos + first,
                logits_rows,
                kernel,
                prompt: true,
                verify: false,
            };
            self.forward_chunk(
                state,
                store,
                par,
                chunk,
                Output::Logits(&mut |t, l| on_logits(first + t, l)),
            )?;
        }
        Ok(())
    }

    /// Runs a prompt from position `pos` like [`Model::forward_batch`], but instead of logits
    /// hands every position's final hidden state after the output norm (what the LM head would
    /// multiply) to `on_hidden(i, row)`, `i` counting from 0 in order; the LM head never runs.
    /// For embeddings ([`embedding`]).
    pub fn forward_batch_hidden(
        &self,
        state: &mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        tokens: &[u32],
        pos: usize,
        on_hidden: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<(), ModelError> {
        let kernel = pass::batch_attention_kernel(tokens.len());
        let n_batch = state.n_batch;
        for (c, chunk) in tokens.chunks(n_batch).enumerate() {
            let first = c * n_batch;
            let chunk = Chunk {
                tokens: chunk,
                pos: pos + first,
                logits_rows: 0..chunk.len(),
                kernel,
                prompt: true,
                verify: false,
            };
            self.forward_chunk(
                state,
                store,
                par,
                chunk,
                Output::NormedHidden(&mut |t, h| on_hidden(first + t, h)),
            )?;
        }
        Ok(())
    }

    /// Runs `chunk.tokens` (at most the state's batch size) at positions `chunk.pos..`, then
    /// the LM head for the tokens `chunk.logits_rows`, each handed to `on_logits`.
    fn forward_chunk(
        &self,
        s: &mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        chunk: Chunk,
        out: Output<'_>,
    ) -> Result<(), ModelError> {
        let (n, pos) = (chunk.tokens.len(), chunk.pos);
        debug_assert!(n <= s.n_batch);
        let (n_logits, n_vocab) = (s.n_logits, s.n_vocab);
        if pos + n > s.n_ctx {
            return Err(ModelError::ContextFull {
                pos: pos.max(s.n_ctx),
                n_ctx: s.n_ctx,
            });
        }
        // A recurrent state holds everything before `s.pos` folded in: it can go on from
        // there, or start over at 0, or go back into the last verify pass (`State::rewind`).
        if s.has_recurrent_layers() && pos != s.pos {
            if pos != 0 {
                return Err(ModelError::RecurrentRewind { pos, at: s.pos });
            }
            s.layers.iter_mut().for_each(LayerState::clear);
        }
        // The MTP block's pairs of the accepted positions before this pass, while their hidden
        // states are still at hand (normally a draft's first step has run them already).
        if s.mtp.is_some() {
            self.mtp_catch_up(s, store, par, pos)?;
            if let Some(m) = &mut s.mtp {
                // This pass writes every position from `pos` on again (a draft's first step
                // wrote the pair at `pos` already; it is made again from this pass's rows).
                m.rewind(pos);
                m.begin_pass(pos);
            }
        }
        let attn_skip_below = s.attn_skip_below;
        s.steps_from = pos;
        s.steps_kept = match chunk.verify {
            true => (n - 1).min(s.n_logits - 1),
            false => 0,
        };
        let State {
            act,
            act_q,
            act_tables,
            tile,
            layers,
            logits,
            head_logits,
            tap,
            mtp: mtp_state,
            ..
        } = s;
        let mut p = Pass::new(
            par,
            store,
            n,
            chunk.prompt,
            chunk.kernel,
            self.rope_freqs.as_deref(),
            self.hp.rms_eps,
            *tap,
            act_q,
            act_tables,
            tile,
        );
        p.keep_steps = chunk.verify;
        p.residual_scale = self.hp.scales.residual;
        p.attn_skip_below = attn_skip_below;
        for (t, &token) in chunk.tokens.iter().enumerate() {
            self.embed(&mut p, act, token, t)?;
        }
        p.tap("inp_scaled", 0, &act.x, self.hp.n_embd);
        if let Some(first) = self.layers.first() {
            store.prefetch(&first.keys);
        }
        for (l, (layer, state)) in self.layers.iter().zip(layers.iter_mut()).enumerate() {
            // Hint one layer ahead: the next layer's weights, or after the last, the LM head.
            match self.layers.get(l + 1) {
                Some(next) => store.prefetch(&next.keys),
                None => store.prefetch(core::slice::from_ref(&self.output.key)),
            }
            let predict = match self.moe_predict {
                0 => None,
                d => self.layers.get(l + d),
            };
            layer.forward(&mut p, l, act, state, pos, predict)?;
        }
        if let Some(m) = mtp_state {
            // The hidden states the MTP block pairs with the next tokens: the head's input.
            let e = self.hp.n_embd;
            for t in 0..n {
                let h = row_mut(&mut m.hidden, e, t);
                math::rms_norm(h, row(&act.x, e, t), &self.output_norm, self.hp.rms_eps);
            }
            m.tokens[..n].copy_from_slice(chunk.tokens);
            m.hidden_rows = n;
        }
        s.pos = pos + n;
        let on_logits = match out {
            Output::Logits(f) => f,
            Output::NormedHidden(on_hidden) => {
                // The output norm only, row by row into the (now free) matvec input scratch.
                let width = self.hp.n_embd;
                let xb = &mut act.xb[..width];
                for t in chunk.logits_rows {
                    math::rms_norm(
                        xb,
                        row(&act.x, width, t),
                        &self.output_norm,
                        self.hp.rms_eps,
                    );
                    on_hidden(t, xb);
                }
                return Ok(());
            }
        };
        // The head runs for up to `n_logits` tokens at a time, its weight read once for them.
        let mut rows = chunk.logits_rows;
        while !rows.is_empty() {
            let group = rows.start..(rows.start + n_logits).min(rows.end);
            let head = (
                &self.output_norm[..],
                &self.output,
                self.head_ids.as_deref(),
            );
            self.lm_head(&mut p, act, logits, head_logits, group.clone(), head)?;
            for (i, t) in group.clone().enumerate() {
                on_logits(t, row(logits, n_vocab, i));
            }
            rows.start = group.end;
        }
        // A prompt's tokens are all accepted: their MTP pairs run now, one chunk at a time
        // (the next chunk replaces these hidden states).
        if chunk.prompt && s.mtp.is_some() {
            self.mtp_catch_up(s, store, par, pos + n)?;
        }
        Ok(())
    }

    /// logits[i] = Wout rms_norm(x[t]) (softcapped for Gemma 2-style heads) for the tokens `t`
    /// of `rows` (at most the state's `n_logits`), as one matmul: the head is asked of the store
    /// once for all of them.
    /// `head` is (the norm, the head, a pruned head's ids): the model's, or the MTP block's.
    fn lm_head(
        &self,
        p: &mut Pass,
        a: &mut state::Activations,
        logits: &mut [f32],
        head_logits: &mut [f32],
        rows: core::ops::Range<usize>,
        head: (&[f32], &Matrix, Option<&[u32]>),
    ) -> Result<(), ModelError> {
        let hp = &self.hp;
        let (norm, output, head_ids) = head;
        let (n, count) = (hp.n_embd, rows.len());
        for (i, t) in rows.enumerate() {
            let xb = row_mut(&mut a.xb, n, i);
            math::rms_norm(xb, row(&a.x, n, t), norm, hp.rms_eps);
            if let Some(f) = p.tapping() {
                f("result_norm", 0, xb);
            }
        }
        // A pruned head computes its kept rows only, then puts them at their ids.
        let width = output.n_rows;
        let head_out = match head_ids {
            None => &mut logits[..count * width],
            Some(_) => &mut head_logits[..count * width],
        };
        let n_pass = core::mem::replace(&mut p.n, count);
        let result = p.matvec(output, &a.xb[..count * n], head_out);
        p.n = n_pass;
        result?;
        if let Some(s) = hp.scales.logit {
            // llama.cpp scales by the reciprocal, rounded to f32 once.
            let inv = 1.0 / s;
            head_out.iter_mut().for_each(|v| *v *= inv);
        }
        if let Some(cap) = hp.final_logit_softcap {
            for v in head_out.iter_mut() {
                *v = math::softcap(*v, cap);
            }
        }
        if let Some(ids) = head_ids {
            let n_vocab = hp.n_vocab;
            for i in 0..count {
                head::scatter(row(head_logits, width, i), ids, row_mut(logits, n_vocab, i));
            }
        }
        Ok(())
    }

    /// x[t] = the embedding row of `token`: only that row is read (through the store, into the
    /// quantized-input scratch) and dequantized.
    fn embed(
        &self,
        p: &mut Pass,
        a: &mut state::Activations,
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
        let x = row_mut(&mut a.x, self.hp.n_embd, t);
        p.read_row(m, token as usize, &mut x[..m.n_cols])?;
        if self.switches.scale_embedding {
            let scale = libm::sqrtf(self.hp.n_embd as f32);
            x.iter_mut().for_each(|v| *v *= scale);
        }
        if let Some(scale) = self.hp.scales.embedding {
            x.iter_mut().for_each(|v| *v *= scale);
        }
        Ok(())
    }
}

/// What `forward_chunk` hands over for the tokens of `Chunk::logits_rows`.
enum Output<'f> {
    /// The LM head's logits.
    Logits(&'f mut dyn FnMut(usize, &[f32])),
    /// The final hidden state after the output norm; the LM head is skipped.
    NormedHidden(&'f mut dyn FnMut(usize, &[f32])),
}

/// The tokens one `forward_chunk` runs, where, and what it computes logits for.
struct Chunk<'t> {
    tokens: &'t [u32],
    pos: usize,
    logits_rows: core::ops::Range<usize>,
    kernel: AttentionKernel,
    prompt: bool,
    /// A verify pass: the recurrent layers keep their state after each token (`State::rewind`).
    verify: bool,
}

/// Loads block `l`, of the kinds `shape` says: its token mixer, then its FFN, set by the
/// family's switches and named as the family names them. `rope` is the block's RoPE, `gate`
/// the dense FFN's activation.
pub(crate) fn load_layer(
    ld: &Loader,
    hp: &HParams,
    l: usize,
    shape: LayerShape,
    rope: Rope,
    gate: &Gate,
) -> Result<Layer, ModelError> {
    let (family, n_embd, kernels) = (hp.family, hp.n_embd, ld.kernels);
    let sw = &family.switches;
    let mixer = match shape.mixer {
        MixerShape::Attention(a) => {
            let opts = attention_options(hp, sw);
            let attend = kernels.attention();
            TokenMixer::Attention(Attention::load(ld, l, n_embd, a, opts, rope, attend)?)
        }
        MixerShape::DeltaNet(d) => {
            TokenMixer::DeltaNet(DeltaNet::load(ld, l, n_embd, d, kernels.delta_rule())?)
        }
        MixerShape::ShortConv(c) => TokenMixer::ShortConv(ShortConv::load(ld, l, c)?),
        MixerShape::Mamba2(m) => {
            TokenMixer::Mamba2(Mamba2::load(ld, l, n_embd, m, kernels.swiglu())?)
        }
    };
    let norm = family.ffn_norm;
    let ffn = match shape.ffn {
        FfnShape::Dense {
            n_ff,
            fused_gate_up,
        } => Ffn::Dense(DenseFfn::load(
            ld,
            l,
            norm,
            n_embd,
            n_ff,
            fused_gate_up,
            sw.post_norms,
            gate.clone(),
        )?),
        FfnShape::Moe {
            n_ff,
            n_expert,
            n_expert_used,
            routing,
            n_ff_shared,
        } => Ffn::Moe(MoeFfn::load(
            ld,
            l,
            norm,
            n_embd,
            n_ff,
            n_expert,
            n_expert_used,
            routing,
            n_ff_shared,
            expert_gate(hp.family.switches.activation, kernels),
        )?),
    };
    Ok(Layer::new(mixer, ffn))
}

/// The dense FFN's gate for `activation`, with the kernel set's SwiGLU face.
pub(crate) fn ffn_gate(activation: Activation, kernels: &KernelSet) -> Gate {
    match activation {
        Activation::Silu => Gate::Silu {
            swiglu: kernels.swiglu(),
        },
        // GELU by table lookup, built once here rather than a `tanhf` per element.
        Activation::GeluTanh => Gate::GeluTanh {
            table: Arc::new(math::GeluTable::new()),
        },
        Activation::Relu => Gate::Relu,
    }
}

/// The experts' gate for `activation`: SiLU through the kernel set's SwiGLU face, or ReLU
/// (no mixture of experts has GELU experts; theirs would run as SiLU).
fn expert_gate(activation: Activation, kernels: &KernelSet) -> fn(&mut [f32], &[f32]) {
    match activation {
        Activation::Relu => math::reglu,
        Activation::Silu | Activation::GeluTanh => kernels.swiglu(),
    }
}

/// What differs inside attention for this family, from its switches and the header.
fn attention_options(hp: &HParams, sw: &Switches) -> AttentionOptions {
    AttentionOptions {
        qkv_bias: sw.qkv_bias,
        qk_norm: sw.qk_norm,
        qk_norm_whole: sw.qk_norm_whole,
        post_norm: sw.post_norms,
        scale_q_before_attention: sw.scale_q_before_attention,
        softcap: hp.attn_logit_softcap,
        score_scale: hp.scales.attention,
    }
}

/// The RoPE of a layer with a sliding window (`swa`) or without: sliding-window layers use
/// their own base and are never frequency-scaled; YaRN scales the magnitude as llama.cpp does.
pub(crate) fn layer_rope(hp: &HParams, style: RopeStyle, swa: bool) -> Rope {
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
    let freq_base = if swa {
        hp.rope_freq_base_swa
    } else {
        hp.rope_freq_base
    };
    let freq_scale = if swa { 1.0 } else { hp.rope_freq_scale };
    Rope {
        style,
        n_rot: hp.n_rot,
        freq_base,
        freq_scale,
        ext_factor,
        attn_factor: yarn_attn_factor,
        corr_dims: Rope::yarn_corr_dims(hp.n_rot, hp.rope_n_ctx_orig, freq_base, 32.0, 1.0),
    }
}
