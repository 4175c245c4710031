//! Everything that changes while running: the activations, the matvec scratch and each
//! layer's state (an attention layer's KV cache, a recurrent layer's fixed state), all sized once for a context length and a
//! batch size so that a token allocates nothing.

use super::error::ModelError;
use super::hparams::HParams;
use super::layer::{LayerShape, LayerState, LayerWidths, MixerShape};
use super::mtp::MtpState;
use super::pass::TapFn;
use super::Model;
use alloc::vec;
use alloc::vec::Vec;

/// Tokens of a prompt that run together by default: each weight is read once per batch, and
/// the batch buffers (a few MB for a 1.5B model) stay small next to the KV cache.
pub const DEFAULT_BATCH: usize = 32;

/// Tokens whose lookup tables the state holds at once: a prompt's batch builds them this many
/// tokens at a time (a Q1_0 table is ~8 bytes per activation, so 8 tokens of a 12,288-wide
/// FFN input take 800 KB instead of 3.2 MB for the whole batch).
pub const TABLE_TOKENS: usize = 8;

/// The element counts of every buffer a [`State`] holds for a model shape, a context and a
/// batch: what `State::with_batch` allocates, and what `MemoryPlan` plans for before a model is
/// loaded (one computation, so the plan cannot drift from the allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateShape {
    pub n_ctx: usize,
    /// Tokens per prompt batch (1..=n_ctx).
    pub n_batch: usize,
    pub n_embd: usize,
    /// The widest row of each kind over the layers.
    pub widths: LayerWidths,
    /// f32 scores, `[n_head][n_ctx]`.
    pub scores: usize,
    /// Bytes of one quantized input row (worst case: f32).
    pub act_row_bytes: usize,
    /// f32s of the matmul tile (none when the batch is one token).
    pub tile: usize,
    /// Bytes of the lookup-table kernels' activation tables (see [`State`]'s `act_tables`).
    pub act_tables: usize,
    /// Bytes of every layer's state together (KV caches, recurrent states).
    pub layer_state_bytes: usize,
    pub n_vocab: usize,
    /// Rows of a pruned head (0 for a full head).
    pub head_rows: usize,
    /// Tokens whose logits one pass computes together, with one read of the LM head (1: the
    /// head runs token by token; speculative decoding verifies its drafts with more).
    pub n_logits: usize,
    /// Bytes of the MTP block's buffers besides its KV cache (0 without MTP drafting).
    pub mtp_bytes: usize,
}

/// Bytes of the recurrent layers' state (one copy).
fn recurrent_bytes(layers: &[LayerShape]) -> usize {
    let recurrent = layers.iter().filter_map(|l| match l.mixer {
        MixerShape::DeltaNet(d) => Some(d.state_bytes()),
        MixerShape::Attention(_) => None,
    });
    recurrent.sum()
}

impl StateShape {
    pub fn new(hp: &HParams, n_ctx: usize, n_batch: usize, head_rows: usize) -> StateShape {
        let b = n_batch.clamp(1, n_ctx.max(1));
        let w = LayerWidths::max_over(&hp.layers);
        let widest = hp.n_embd.max(w.ff).max(w.o);
        let most_rows = widest.max(w.q).max(w.k).max(w.v).max(w.router).max(w.qkv);
        StateShape {
            n_ctx,
            n_batch: b,
            n_embd: hp.n_embd,
            widths: w,
            scores: w.n_head * n_ctx,
            act_row_bytes: widest * 4,
            tile: if b > 1 { b * most_rows } else { 0 },
            act_tables: 0,
            layer_state_bytes: hp.layers.iter().map(|l| l.state_bytes(n_ctx)).sum(),
            n_vocab: hp.n_vocab,
            head_rows,
            n_logits: 1,
            mtp_bytes: 0,
        }
    }

    /// This shape with `n_logits` rows of logits (clamped to 1..=n_batch: the head's input rows
    /// are rows of the activation buffers). A verify pass of `n_logits` tokens keeps
    /// `n_logits - 1` copies of each recurrent layer's state (`RecurrentState::steps`).
    pub fn with_logit_rows(self, hp: &HParams, n_logits: usize) -> StateShape {
        let n_logits = n_logits.clamp(1, self.n_batch);
        StateShape {
            n_logits,
            layer_state_bytes: self.layer_state_bytes
                + (n_logits - 1) * recurrent_bytes(&hp.layers),
            ..self
        }
    }

    /// This shape with the state of Qwen3.5's MTP block (its KV cache, the trunk's hidden rows
    /// it reads, its input row), for MTP drafting ([`MtpState`]).
    pub fn with_mtp(self, hp: &HParams) -> StateShape {
        let Some(shape) = hp.mtp_layer() else {
            return self;
        };
        let e = self.n_embd;
        StateShape {
            layer_state_bytes: self.layer_state_bytes + shape.state_bytes(self.n_ctx),
            // the MTP's eh_proj reads rows of 2 x n_embd
            act_row_bytes: self.act_row_bytes.max(2 * e * 4),
            mtp_bytes: 4 * (self.n_batch * (e + 2 * e) + 2 * e) + 4 * self.n_batch,
            ..self
        }
    }

    /// This shape with scratch for the activation tables of [`TABLE_TOKENS`] tokens (at most
    /// the batch), `per_token` bytes each (`Model::act_table_bytes`).
    pub fn with_act_tables(self, per_token: usize) -> StateShape {
        StateShape {
            act_tables: per_token * self.n_batch.min(TABLE_TOKENS),
            ..self
        }
    }

    /// Bytes of the layers' state: the KV cache (f16 keys and values) of the attention layers
    /// and the fixed f32 state of the recurrent ones (which does not grow with the context).
    pub fn kv_cache_bytes(&self) -> usize {
        self.layer_state_bytes
    }

    /// Bytes of the activation buffers, the scores, the quantized-input scratch and the tile.
    pub fn activation_bytes(&self) -> usize {
        let (b, w) = (self.n_batch, &self.widths);
        4 * (b
            * (3 * self.n_embd + w.q + w.k + w.v + w.o + w.router + w.qkv + w.gate + w.ssm_gates)
            + b * 2 * w.ff
            + self.scores
            + self.tile
            + self.moe_acc()
            + self.widths.router)
            + b * self.act_row_bytes
            + self.act_tables
            + self.widths.router
            + self.mtp_bytes
    }

    /// f32s of the mixture-of-experts scratch (one token's sum and one expert's output; none
    /// without MoE).
    fn moe_acc(&self) -> usize {
        if self.widths.router > 0 {
            2 * self.n_embd
        } else {
            0
        }
    }

    /// Bytes of the logits and a pruned head's rows.
    pub fn logits_bytes(&self) -> usize {
        4 * self.n_logits * (self.n_vocab + self.head_rows)
    }
}

/// The activation buffers one pass works in, one row per token of a batch (`[n_batch][dim]`).
/// Every layer kind reads and writes these; a kind with other needs adds its own here.
pub struct Activations {
    pub n_embd: usize,
    pub n_ctx: usize,
    /// The residual stream.
    pub x: Vec<f32>,
    pub xb: Vec<f32>,
    pub xb2: Vec<f32>,
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub att_out: Vec<f32>,
    /// `[n_head][n_ctx]`: one token's attention at a time.
    pub scores: Vec<f32>,
    pub hb: Vec<f32>,
    pub hb2: Vec<f32>,
    /// Router logits, then probabilities, of a mixture-of-experts FFN, `[n_batch][n_expert]`.
    pub router: Vec<f32>,
    /// One token's weighted sum of expert outputs, then one expert's output, `[2][n_embd]`
    /// (empty without MoE).
    pub moe_acc: Vec<f32>,
    /// A later layer's router logits on this hidden state (pre-gated prefetch), `[n_expert]`.
    pub router_guess: Vec<f32>,
    /// Which experts the store holds in RAM, for cache-aware routing, `[n_expert]`.
    pub moe_held: Vec<bool>,
    /// A fused QKV matrix's output before it is split into q, k and v, `[n_batch][qkv]`; a
    /// recurrent layer's convolution channels.
    pub qkv: Vec<f32>,
    /// Output gates, `[n_batch][gate]`: gated attention's, a recurrent layer's z.
    pub gate: Vec<f32>,
    /// A recurrent layer's beta rows, then its alpha rows: `[2][n_batch][n_v_heads]`.
    pub ssm_gates: Vec<f32>,
}

pub struct State {
    pub n_ctx: usize,
    /// Next position to fill (tokens in the cache).
    pub pos: usize,
    /// Tokens run together by `forward_batch` (rows of the activation buffers).
    pub(super) n_batch: usize,
    pub(super) act: Activations,
    /// `n_batch` quantized input rows, back to back.
    pub(super) act_q: Vec<u8>,
    /// Activation tables of the lookup-table kernels (`RepackedKernel::act_table`) for up to
    /// [`TABLE_TOKENS`] tokens; empty when no matrix of the model has such a kernel.
    pub(super) act_tables: Vec<u8>,
    /// The matmul workers' output before it is copied into the tokens' rows: `n_batch` x the
    /// most rows of a layer matrix.
    pub(super) tile: Vec<f32>,
    /// One per layer: its KV cache (or, for a recurrent layer, its state).
    pub(super) layers: Vec<LayerState>,
    /// `n_logits` rows of `n_vocab` logits: the last pass's tokens whose logits were asked for,
    /// in order (row 0 is what [`State::logits`] returns).
    pub(super) logits: Vec<f32>,
    /// Rows of logits the LM head computes with one read of its weight.
    pub(super) n_logits: usize,
    pub(super) n_vocab: usize,
    /// The rows of a pruned head before they are scattered into `logits` (empty for a full
    /// head), `n_logits` rows.
    pub(super) head_logits: Vec<f32>,
    /// The first position of the last verify pass and how many of its tokens each recurrent
    /// layer kept a copy of its state after (0 after any other pass): where [`State::rewind`]
    /// may go back to.
    pub(super) steps_from: usize,
    pub(super) steps_kept: usize,
    /// Qwen3.5's MTP block's state, when the state drafts with it ([`State::with_mtp`]).
    pub(super) mtp: Option<MtpState>,
    /// Called with (name, layer, values) at the named points of the forward pass (llama.cpp's
    /// tensor names: attn_norm, Qcur, Kcur, Vcur, kqv_out, sa_out, ffn_out, l_out,
    /// result_norm), once per token, for debugging a disagreement layer by layer. `None` in
    /// normal use.
    pub tap: Option<TapFn>,
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
        State::with_logit_rows(model, n_ctx, n_batch, 1)
    }

    /// Like [`State::with_batch`], with `n_logits` rows of logits (at most `n_batch`): a pass
    /// that wants the logits of several tokens (verifying a speculative draft) gets them with
    /// one read of the LM head ([`Model::forward_verify`]).
    pub fn with_logit_rows(
        model: &Model,
        n_ctx: usize,
        n_batch: usize,
        n_logits: usize,
    ) -> Result<State, ModelError> {
        State::sized(model, n_ctx, n_batch, n_logits, false)
    }

    /// Like [`State::with_logit_rows`], with the state of the model's MTP block for drafting
    /// with it ([`Model::mtp_begin`]); the model must have it loaded ([`Model::load_mtp`]).
    pub fn with_mtp(
        model: &Model,
        n_ctx: usize,
        n_batch: usize,
        n_logits: usize,
    ) -> Result<State, ModelError> {
        if model.mtp.is_none() {
            return Err(ModelError::BadOption {
                option: "--draft mtp",
                reason: "the model's MTP layer is not loaded (Model::load_mtp)".into(),
            });
        }
        State::sized(model, n_ctx, n_batch, n_logits, true)
    }

    fn sized(
        model: &Model,
        n_ctx: usize,
        n_batch: usize,
        n_logits: usize,
        mtp: bool,
    ) -> Result<State, ModelError> {
        let hp = &model.hp;
        if n_ctx == 0 || n_ctx > hp.n_ctx_train {
            return Err(ModelError::BadContext {
                requested: n_ctx,
                max: hp.n_ctx_train,
            });
        }
        let head_rows = model.head_ids.as_ref().map_or(0, |ids| ids.len());
        let mut sh = StateShape::new(hp, n_ctx, n_batch, head_rows)
            .with_logit_rows(hp, n_logits)
            .with_act_tables(model.act_table_bytes());
        if mtp {
            sh = sh.with_mtp(hp);
        }
        let (b, w) = (sh.n_batch, sh.widths);
        Ok(State {
            n_ctx,
            pos: 0,
            n_batch: b,
            act: Activations {
                n_embd: sh.n_embd,
                n_ctx,
                x: vec![0.0; b * sh.n_embd],
                xb: vec![0.0; b * sh.n_embd],
                xb2: vec![0.0; b * sh.n_embd],
                q: vec![0.0; b * w.q],
                k: vec![0.0; b * w.k],
                v: vec![0.0; b * w.v],
                att_out: vec![0.0; b * w.o],
                scores: vec![0.0; sh.scores],
                hb: vec![0.0; b * w.ff],
                hb2: vec![0.0; b * w.ff],
                router: vec![0.0; b * w.router],
                moe_acc: vec![0.0; sh.moe_acc()],
                router_guess: vec![0.0; w.router],
                moe_held: vec![false; w.router],
                qkv: vec![0.0; b * w.qkv],
                gate: vec![0.0; b * w.gate],
                ssm_gates: vec![0.0; b * w.ssm_gates],
            },
            act_q: vec![0; b * sh.act_row_bytes],
            act_tables: vec![0; sh.act_tables],
            tile: vec![0.0; sh.tile],
            layers: hp
                .layers
                .iter()
                .map(|l| LayerState::with_steps(l, n_ctx, sh.n_logits - 1))
                .collect(),
            // A pruned head never writes its dropped ids: they stay -inf.
            logits: vec![
                if model.head_ids.is_some() {
                    f32::NEG_INFINITY
                } else {
                    0.0
                };
                sh.n_logits * hp.n_vocab
            ],
            n_logits: sh.n_logits,
            n_vocab: hp.n_vocab,
            head_logits: vec![0.0; sh.n_logits * head_rows],
            steps_from: 0,
            steps_kept: 0,
            mtp: match (mtp, hp.mtp_layer()) {
                (true, Some(shape)) => Some(MtpState::new(&shape, n_ctx, b, sh.n_embd)),
                _ => None,
            },
            tap: None,
        })
    }

    /// Goes back to position `pos` (at most the current one): a rejected draft's tokens are
    /// forgotten. A KV cache only moves its position (what lies beyond is overwritten before it
    /// is read). A recurrent state can go back only into the last verify pass, to the copy it
    /// kept after token `pos - 1`, or to 0, where it starts over (zeroed).
    pub fn rewind(&mut self, pos: usize) -> Result<(), ModelError> {
        if pos == self.pos {
            return Ok(());
        }
        if pos > self.pos {
            return Err(ModelError::RecurrentRewind { pos, at: self.pos });
        }
        if pos == 0 {
            self.reset();
            return Ok(());
        }
        if self.has_recurrent_layers() {
            // The copy after token t of the pass is the state at position steps_from + t + 1.
            let kept = self.steps_from + 1..=self.steps_from + self.steps_kept;
            if !kept.contains(&pos) {
                return Err(ModelError::RecurrentRewind { pos, at: self.pos });
            }
            let t = pos - self.steps_from - 1;
            for l in &mut self.layers {
                if let LayerState::Recurrent(r) = l {
                    r.restore_step(t);
                }
            }
            // The copies after it are of tokens now forgotten.
            self.steps_kept = t;
        }
        self.pos = pos;
        if let Some(m) = &mut self.mtp {
            m.rewind(pos);
        }
        Ok(())
    }

    /// Layer `l`'s recurrent state, `(conv window, delta-rule matrices)` (see delta_net.rs for
    /// the layout); `None` for an attention layer.
    pub fn recurrent_state(&self, l: usize) -> Option<(&[f32], &[f32])> {
        match self.layers.get(l)? {
            LayerState::Recurrent(r) => Some((&r.conv, &r.ssm)),
            LayerState::Kv(_) => None,
        }
    }

    /// Layer `l`'s delta-rule matrices when they are kept as f16 (`Model::set_state_f16`);
    /// `None` for an attention layer or an f32 state.
    pub fn recurrent_state_f16(&self, l: usize) -> Option<&[u16]> {
        match self.layers.get(l)? {
            LayerState::Recurrent(r) if !r.ssm_f16.is_empty() => Some(&r.ssm_f16),
            _ => None,
        }
    }

    /// Some layer keeps a recurrent state: the sequence can go on or start over at 0, but
    /// not go back to an earlier position (no prefix reuse, no rejected drafts).
    pub fn has_recurrent_layers(&self) -> bool {
        self.layers
            .iter()
            .any(|l| matches!(l, LayerState::Recurrent(_)))
    }

    pub fn n_batch(&self) -> usize {
        self.n_batch
    }

    /// Forgets the context (the cache is overwritten as positions are refilled; a recurrent
    /// state is zeroed).
    pub fn reset(&mut self) {
        self.pos = 0;
        self.steps_kept = 0;
        self.layers.iter_mut().for_each(LayerState::clear);
        if let Some(m) = &mut self.mtp {
            m.rewind(0);
        }
    }

    /// The logits of the last token whose logits the last pass computed (decoding, a prompt),
    /// or of the first token of a verify pass.
    pub fn logits(&self) -> &[f32] {
        &self.logits[..self.n_vocab]
    }

    /// Row `i` of the logits of the last pass (`i` below [`State::n_logits`]).
    pub fn logits_row(&self, i: usize) -> &[f32] {
        &self.logits[i * self.n_vocab..(i + 1) * self.n_vocab]
    }

    /// Rows of logits one pass computes with one read of the LM head.
    pub fn n_logits(&self) -> usize {
        self.n_logits
    }

    /// Bytes this state holds (activations, scratch, logits and the layers' state).
    pub fn memory_bytes(&self) -> usize {
        let a = &self.act;
        4 * (a.x.len() * 3
            + self.tile.len()
            + a.q.len()
            + a.k.len()
            + a.v.len()
            + a.att_out.len()
            + a.scores.len()
            + a.hb.len() * 2
            + a.router.len()
            + a.moe_acc.len()
            + a.router_guess.len()
            + a.qkv.len()
            + a.gate.len()
            + a.ssm_gates.len()
            + self.logits.len()
            + self.head_logits.len())
            + self.act_q.len()
            + self.act_tables.len()
            + a.moe_held.len()
            + self.layers.iter().map(LayerState::bytes).sum::<usize>()
            + self.mtp.as_ref().map_or(0, MtpState::bytes)
    }
}
