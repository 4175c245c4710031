//! Everything that changes while running: the activations, the matvec scratch and each
//! layer's state (an attention layer's KV cache, a recurrent layer's fixed state), all sized
//! once for a context length and a batch size and carved from one region by the state's
//! [`ArenaPlan`], so that a token allocates nothing and the plan is what the state holds.
//!
//! [`StateShape::plan`] counts every buffer, part by part; [`State::in_region`] takes the same
//! buffers in the same order from an [`Arena`] over the caller's [`Region`] (a heap block for
//! [`State::new`], an anonymous mmap, a static buffer on bare metal). The two lists sit side
//! by side below; the tests check, for every model family, that the arena's high-water mark is
//! the plan's total, part by part.

use super::attention::{KvCache, KvCacheType};
use super::error::ModelError;
use super::hparams::HParams;
use super::layer::{LayerState, LayerWidths};
use super::mtp::MtpState;
use super::pass::TapFn;
use super::Model;
use crate::arena::{Arena, ArenaError, ArenaPlan, ArenaSlice, ArenaUsage, Part, Region};
use alloc::vec::Vec;
use core::mem::MaybeUninit;

/// Tokens of a prompt that run together by default: each weight is read once per batch, and
/// the batch buffers (a few MB for a 1.5B model) stay small next to the KV cache.
pub const DEFAULT_BATCH: usize = 32;

/// Tokens whose lookup tables the state holds at once: a prompt's batch builds them this many
/// tokens at a time (a Q1_0 table is ~8 bytes per activation, so 8 tokens of a 12,288-wide
/// FFN input take 800 KB instead of 3.2 MB for the whole batch).
pub const TABLE_TOKENS: usize = 8;

/// What a [`State`] is sized for: the model's shape, a context, a batch, the rows of logits
/// and whether it drafts with the MTP block. [`StateShape::plan`] turns it into the arena's
/// plan, which is both what `State::in_region` carves and what `MemoryPlan` counts before a
/// model is loaded (one computation, so the plan cannot drift from the state).
///
/// Every field is a width or a count from the validated header, none the product of two of
/// them: the products are worked out in u64 by the plan, so a 32-bit device refuses a context
/// it cannot address instead of wrapping its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateShape {
    pub n_ctx: usize,
    /// Tokens per prompt batch (1..=n_ctx).
    pub n_batch: usize,
    pub n_embd: usize,
    /// The widest row of each kind over the layers.
    pub widths: LayerWidths,
    /// Rows a matmul tile holds per token: the most rows of a layer matrix (the tile is only
    /// there when the batch is more than one token).
    pub tile_rows: usize,
    /// Bytes of one quantized input row (worst case: f32).
    pub act_row_bytes: usize,
    /// Bytes of the lookup-table kernels' activation tables per token (see [`State`]'s
    /// `act_tables`; 0 when no matrix has such a kernel).
    pub act_table_bytes: usize,
    pub n_vocab: usize,
    /// Rows of a pruned head (0 for a full head).
    pub head_rows: usize,
    /// Tokens whose logits one pass computes together, with one read of the LM head (1: the
    /// head runs token by token; speculative decoding verifies its drafts with more). A verify
    /// pass of `n_logits` tokens keeps `n_logits - 1` copies of each recurrent layer's state
    /// (`RecurrentState::steps`).
    pub n_logits: usize,
    /// The state of Qwen3.5's MTP block is carved too ([`MtpState`]).
    pub mtp: bool,
    /// What the attention layers' KV caches store (`HParams::kv_type`; the MTP block's stays
    /// f16).
    pub kv_type: KvCacheType,
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
            tile_rows: most_rows,
            act_row_bytes: widest * 4,
            act_table_bytes: 0,
            n_vocab: hp.n_vocab,
            head_rows,
            n_logits: 1,
            mtp: false,
            kv_type: hp.kv_type,
        }
    }

    /// This shape with `n_logits` rows of logits (clamped to 1..=n_batch: the head's input rows
    /// are rows of the activation buffers).
    pub fn with_logit_rows(self, n_logits: usize) -> StateShape {
        StateShape {
            n_logits: n_logits.clamp(1, self.n_batch),
            ..self
        }
    }

    /// This shape with the state of Qwen3.5's MTP block (its KV cache, the trunk's hidden rows
    /// it reads, its input row), for MTP drafting ([`MtpState`]); unchanged for a model
    /// without one.
    pub fn with_mtp(self, hp: &HParams) -> StateShape {
        if hp.mtp_layer().is_none() {
            return self;
        }
        StateShape {
            // the MTP's eh_proj reads rows of 2 x n_embd
            act_row_bytes: self.act_row_bytes.max(2 * self.n_embd * 4),
            mtp: true,
            ..self
        }
    }

    /// This shape with scratch for the activation tables of [`TABLE_TOKENS`] tokens (at most
    /// the batch), `per_token` bytes each (`Model::act_table_bytes`).
    pub fn with_act_tables(self, per_token: usize) -> StateShape {
        StateShape {
            act_table_bytes: per_token,
            ..self
        }
    }

    /// Tokens whose activation tables the scratch holds at once.
    fn table_tokens(&self) -> usize {
        self.n_batch.min(TABLE_TOKENS)
    }

    /// Rows of `n_embd` in the mixture-of-experts scratch (one token's sum and one expert's
    /// output; none without MoE).
    fn moe_rows(&self) -> usize {
        if self.widths.router > 0 {
            2
        } else {
            0
        }
    }

    /// Rows of the matmul tile (none when the batch is one token).
    fn tile_tokens(&self) -> usize {
        if self.n_batch > 1 {
            self.n_batch
        } else {
            0
        }
    }

    /// The arena's plan for this shape: every buffer [`State::in_region`] takes, in the same
    /// order, each in its part.
    pub fn plan(&self, hp: &HParams) -> ArenaPlan {
        let mut plan = ArenaPlan::new();
        let (b, w, e) = (self.n_batch, &self.widths, self.n_embd);
        // The layer table, then each layer's KV cache or recurrent state.
        plan.add::<LayerState>(Part::LayerTable, 1, hp.layers.len());
        for l in &hp.layers {
            let steps = self.n_logits - 1;
            LayerState::plan(&mut plan, Part::KvCache, l, self.n_ctx, steps, self.kv_type);
        }
        let act = Part::Activations;
        plan.add::<f32>(act, b, e); // x
        plan.add::<f32>(act, b, e); // xb
        plan.add::<f32>(act, b, e); // xb2
        plan.add::<f32>(act, b, w.q);
        plan.add::<f32>(act, b, w.k);
        plan.add::<f32>(act, b, w.v);
        plan.add::<f32>(act, b, w.o); // att_out
        plan.add::<f32>(act, w.n_head, self.n_ctx); // scores
        plan.add::<f32>(act, b, w.ff); // hb
        plan.add::<f32>(act, b, w.ff_up); // hb2
        plan.add::<f32>(act, b, w.router);
        plan.add::<f32>(act, self.moe_rows(), e); // moe_acc
        plan.add::<f32>(act, 1, w.router); // router_guess
        plan.add::<bool>(act, 1, w.router); // moe_held
        plan.add::<f32>(act, b, w.qkv);
        plan.add::<f32>(act, b, w.gate);
        plan.add::<f32>(act, b, w.ssm_gates);
        let scratch = Part::Scratch;
        plan.add::<u8>(scratch, b, self.act_row_bytes); // act_q
        plan.add::<u8>(scratch, self.table_tokens(), self.act_table_bytes); // act_tables
        plan.add::<f32>(scratch, self.tile_tokens(), self.tile_rows); // tile
        plan.add::<f32>(Part::Logits, self.n_logits, self.n_vocab); // logits
        plan.add::<f32>(Part::Logits, self.n_logits, self.head_rows); // head_logits
        if let (true, Some(shape)) = (self.mtp, hp.mtp_layer()) {
            MtpState::plan(&mut plan, &shape, self.n_ctx, b, e);
        }
        plan
    }
}

/// The activation buffers one pass works in, one row per token of a batch (`[n_batch][dim]`).
/// Every layer kind reads and writes these; a kind with other needs adds its own here (and to
/// the plan).
pub struct Activations {
    pub n_embd: usize,
    pub n_ctx: usize,
    /// The residual stream.
    pub x: ArenaSlice<f32>,
    pub xb: ArenaSlice<f32>,
    pub xb2: ArenaSlice<f32>,
    pub q: ArenaSlice<f32>,
    pub k: ArenaSlice<f32>,
    pub v: ArenaSlice<f32>,
    pub att_out: ArenaSlice<f32>,
    /// `[n_head][n_ctx]`: one token's attention at a time.
    pub scores: ArenaSlice<f32>,
    pub hb: ArenaSlice<f32>,
    pub hb2: ArenaSlice<f32>,
    /// Router logits, then probabilities, of a mixture-of-experts FFN, `[n_batch][n_expert]`.
    pub router: ArenaSlice<f32>,
    /// One token's weighted sum of expert outputs, then one expert's output, `[2][n_embd]`
    /// (empty without MoE).
    pub moe_acc: ArenaSlice<f32>,
    /// A later layer's router logits on this hidden state (pre-gated prefetch), `[n_expert]`.
    pub router_guess: ArenaSlice<f32>,
    /// Which experts the store holds in RAM, for cache-aware routing, `[n_expert]`.
    pub moe_held: ArenaSlice<bool>,
    /// A fused QKV matrix's output before it is split into q, k and v, `[n_batch][qkv]`; a
    /// recurrent layer's convolution channels.
    pub qkv: ArenaSlice<f32>,
    /// Output gates, `[n_batch][gate]`: gated attention's, a recurrent layer's z.
    pub gate: ArenaSlice<f32>,
    /// A recurrent layer's beta rows, then its alpha rows: `[2][n_batch][n_v_heads]`.
    pub ssm_gates: ArenaSlice<f32>,
}

pub struct State {
    pub n_ctx: usize,
    /// Next position to fill (tokens in the cache).
    pub pos: usize,
    /// Tokens run together by `forward_batch` (rows of the activation buffers).
    pub(super) n_batch: usize,
    pub(super) act: Activations,
    /// `n_batch` quantized input rows, back to back.
    pub(super) act_q: ArenaSlice<u8>,
    /// Activation tables of the lookup-table kernels (`RepackedKernel::act_table`) for up to
    /// [`TABLE_TOKENS`] tokens; empty when no matrix of the model has such a kernel.
    pub(super) act_tables: ArenaSlice<u8>,
    /// The matmul workers' output before it is copied into the tokens' rows: `n_batch` x the
    /// most rows of a layer matrix.
    pub(super) tile: ArenaSlice<f32>,
    /// One per layer: its KV cache (or, for a recurrent layer, its state).
    pub(super) layers: ArenaSlice<LayerState>,
    /// `n_logits` rows of `n_vocab` logits: the last pass's tokens whose logits were asked for,
    /// in order (row 0 is what [`State::logits`] returns).
    pub(super) logits: ArenaSlice<f32>,
    /// Rows of logits the LM head computes with one read of its weight.
    pub(super) n_logits: usize,
    pub(super) n_vocab: usize,
    /// The rows of a pruned head before they are scattered into `logits` (empty for a full
    /// head), `n_logits` rows.
    pub(super) head_logits: ArenaSlice<f32>,
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
    /// Decoding's attention skip threshold as ln(eps) ([`State::set_attn_skip_eps`]).
    pub(super) attn_skip_below: Option<f32>,
    /// The plan and what the arena handed out, part by part.
    arena: ArenaUsage,
    /// The memory every slice above points into: it lives exactly as long as the state (no
    /// slice is reachable once the state is dropped, and none has drop glue).
    _region: Region,
}

/// What a [`State`] is made for: a context, a prompt batch, rows of logits, MTP drafting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateOptions {
    /// Positions of context (at most the model's trained context).
    pub n_ctx: usize,
    /// Prompt tokens run together (1: token by token; more than `n_ctx` is capped).
    pub n_batch: usize,
    /// Rows of logits one pass computes (at most `n_batch`; more than one to verify drafts).
    pub n_logits: usize,
    /// Carve the MTP block's state too (the model must have it loaded).
    pub mtp: bool,
}

impl StateOptions {
    /// `n_ctx` positions, prompts in batches of [`DEFAULT_BATCH`], one row of logits.
    pub fn new(n_ctx: usize) -> StateOptions {
        StateOptions {
            n_ctx,
            n_batch: DEFAULT_BATCH,
            n_logits: 1,
            mtp: false,
        }
    }
}

impl State {
    /// Decoding's attention skip threshold (`--attn-skip-eps`): once every score is known,
    /// keys whose softmax weight is below `eps` times the largest are left out (no exponential,
    /// no value read). 0 (or anything not above 0) is exact attention, the default.
    pub fn set_attn_skip_eps(&mut self, eps: f32) {
        self.attn_skip_below = (eps > 0.0 && eps < 1.0).then(|| libm::logf(eps));
    }

    /// What the attention layers' KV caches store.
    pub fn kv_type(&self) -> KvCacheType {
        self.layers
            .iter()
            .find_map(|l| match l {
                LayerState::Kv(kv) => Some(kv.kv_type()),
                LayerState::Recurrent(_) => None,
            })
            .unwrap_or_default()
    }

    /// Sizes every buffer for `n_ctx` positions (at most the model's trained context) and
    /// prompts in batches of [`DEFAULT_BATCH`], on a heap region of exactly the plan's size.
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
        let opts = StateOptions {
            n_ctx,
            n_batch,
            n_logits,
            mtp: false,
        };
        State::on_heap(model, &opts)
    }

    /// Like [`State::with_logit_rows`], with the state of the model's MTP block for drafting
    /// with it ([`Model::mtp_begin`]); the model must have it loaded ([`Model::load_mtp`]).
    pub fn with_mtp(
        model: &Model,
        n_ctx: usize,
        n_batch: usize,
        n_logits: usize,
    ) -> Result<State, ModelError> {
        let opts = StateOptions {
            n_ctx,
            n_batch,
            n_logits,
            mtp: true,
        };
        State::on_heap(model, &opts)
    }

    /// A state for `opts` on a heap region of exactly its plan's size.
    pub fn on_heap(model: &Model, opts: &StateOptions) -> Result<State, ModelError> {
        let plan = State::plan(model, opts)?;
        let bytes = plan.total_usize().map_err(ModelError::Arena)?;
        let region = Region::heap(bytes).map_err(ModelError::Arena)?;
        State::in_region(model, opts, region)
    }

    /// What a state for `opts` holds, for this model (its kernels decide the lookup tables,
    /// its head the pruned rows).
    pub fn shape(model: &Model, opts: &StateOptions) -> Result<StateShape, ModelError> {
        let hp = &model.hp;
        if opts.n_ctx == 0 || opts.n_ctx > hp.n_ctx_train {
            return Err(ModelError::BadContext {
                requested: opts.n_ctx,
                max: hp.n_ctx_train,
            });
        }
        if opts.mtp && model.mtp.is_none() {
            return Err(ModelError::BadOption {
                option: "--draft mtp",
                reason: "the model's MTP layer is not loaded (Model::load_mtp)".into(),
            });
        }
        for l in &hp.layers {
            if let super::MixerShape::Attention(a) = l.mixer {
                if let Err(reason) = super::attention::kv_type_fits(&a, hp.kv_type) {
                    return Err(ModelError::BadOption {
                        option: "--cache-type-k/--cache-type-v",
                        reason,
                    });
                }
            }
        }
        let head_rows = model.head_ids.as_ref().map_or(0, |ids| ids.len());
        let shape = StateShape::new(hp, opts.n_ctx, opts.n_batch, head_rows)
            .with_logit_rows(opts.n_logits)
            .with_act_tables(model.act_table_bytes());
        Ok(match opts.mtp {
            true => shape.with_mtp(hp),
            false => shape,
        })
    }

    /// The arena's plan for a state for `opts`: the size of the region [`State::in_region`]
    /// needs, part by part.
    pub fn plan(model: &Model, opts: &StateOptions) -> Result<ArenaPlan, ModelError> {
        Ok(State::shape(model, opts)?.plan(&model.hp))
    }

    /// A state for `opts` carved from `region`, which the state keeps (and gives back when it
    /// is dropped). Refused before anything is written if the region is smaller than the plan
    /// or misaligned for it, or the plan is more than this target can address. Nothing is
    /// allocated on the heap.
    pub fn in_region(
        model: &Model,
        opts: &StateOptions,
        mut region: Region,
    ) -> Result<State, ModelError> {
        let sh = State::shape(model, opts)?;
        let hp = &model.hp;
        let plan = sh.plan(hp);
        let (kind, region_bytes) = (region.kind(), region.len());
        let mut arena = region.arena(&plan).map_err(ModelError::Arena)?;
        // SAFETY: every slice carved below is kept in the state beside `region`, which the
        // state owns and drops with them; nothing else reaches the region.
        let carved = unsafe { State::carve(model, &sh, &mut arena) };
        let mut state = carved.map_err(ModelError::Arena)?;
        debug_assert_eq!(
            arena.high_water() as u64,
            plan.total(),
            "plan and carving differ"
        );
        state.arena = arena.usage(kind, region_bytes);
        state._region = region;
        Ok(state)
    }

    /// Takes every buffer [`StateShape::plan`] counts, in its order. The returned state's
    /// `arena` and `_region` are placeholders the caller fills.
    ///
    /// # Safety
    /// The region under `arena` must outlive the state (see [`ArenaSlice::detach`]).
    unsafe fn carve(
        model: &Model,
        sh: &StateShape,
        arena: &mut Arena<'_>,
    ) -> Result<State, ArenaError> {
        let hp = &model.hp;
        let (b, w, e, n_ctx) = (sh.n_batch, sh.widths, sh.n_embd, sh.n_ctx);
        let table = arena.take_uninit::<LayerState>(Part::LayerTable, 1, hp.layers.len())?;
        for (slot, l) in table.iter_mut().zip(&hp.layers) {
            // SAFETY: the caller's promise.
            let (steps, kv_type) = (sh.n_logits - 1, sh.kv_type);
            let layer =
                unsafe { LayerState::carve(arena, Part::KvCache, l, n_ctx, steps, kv_type)? };
            slot.write(layer);
        }
        // SAFETY: every slot was written in the loop above (an error returned before this).
        let layers =
            unsafe { &mut *(table as *mut [MaybeUninit<LayerState>] as *mut [LayerState]) };
        // A pruned head never writes its dropped ids: they stay -inf.
        let unwritten = match model.head_ids {
            Some(_) => f32::NEG_INFINITY,
            None => 0.0,
        };
        let (act, scratch) = (Part::Activations, Part::Scratch);
        // SAFETY (every `take_detached` and `detach`): the caller's promise.
        unsafe {
            let act = Activations {
                n_embd: e,
                n_ctx,
                x: arena.take_detached(act, b, e)?,
                xb: arena.take_detached(act, b, e)?,
                xb2: arena.take_detached(act, b, e)?,
                q: arena.take_detached(act, b, w.q)?,
                k: arena.take_detached(act, b, w.k)?,
                v: arena.take_detached(act, b, w.v)?,
                att_out: arena.take_detached(act, b, w.o)?,
                scores: arena.take_detached(act, w.n_head, n_ctx)?,
                hb: arena.take_detached(act, b, w.ff)?,
                hb2: arena.take_detached(act, b, w.ff_up)?,
                router: arena.take_detached(act, b, w.router)?,
                moe_acc: arena.take_detached(act, sh.moe_rows(), e)?,
                router_guess: arena.take_detached(act, 1, w.router)?,
                moe_held: arena.take_detached(act, 1, w.router)?,
                qkv: arena.take_detached(act, b, w.qkv)?,
                gate: arena.take_detached(act, b, w.gate)?,
                ssm_gates: arena.take_detached(act, b, w.ssm_gates)?,
            };
            let act_q = arena.take_detached(scratch, b, sh.act_row_bytes)?;
            let act_tables = arena.take_detached(scratch, sh.table_tokens(), sh.act_table_bytes)?;
            let tile = arena.take_detached(scratch, sh.tile_tokens(), sh.tile_rows)?;
            let logits = arena.take_filled(Part::Logits, sh.n_logits, sh.n_vocab, unwritten)?;
            let logits = ArenaSlice::detach(logits);
            let head_logits = arena.take_detached(Part::Logits, sh.n_logits, sh.head_rows)?;
            let mtp = match (sh.mtp, hp.mtp_layer()) {
                (true, Some(shape)) => Some(MtpState::carve(arena, &shape, n_ctx, b, e)?),
                _ => None,
            };
            Ok(State {
                n_ctx,
                pos: 0,
                n_batch: b,
                act,
                act_q,
                act_tables,
                tile,
                layers: ArenaSlice::detach(layers),
                logits,
                n_logits: sh.n_logits,
                n_vocab: sh.n_vocab,
                head_logits,
                steps_from: 0,
                steps_kept: 0,
                mtp,
                tap: None,
                attn_skip_below: None,
                arena: arena.usage("", 0),
                _region: Region::empty(),
            })
        }
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

    /// The state after its first `n` positions as byte pieces, in a fixed order, for a saved
    /// slot or a prompt cache: each attention layer's first `n` key rows then value rows, each
    /// recurrent layer's conv window and delta-rule matrices (which hold position `pos` only,
    /// so `n` must be `pos` when there are any). `None` when the state cannot be saved at `n`:
    /// past what is cached, a recurrent state asked for an earlier position, or MTP drafting
    /// (its own cache is not saved).
    pub fn pieces(&self, n: usize) -> Option<Vec<&[u8]>> {
        if n > self.pos || self.mtp.is_some() || (n != self.pos && self.has_recurrent_layers()) {
            return None;
        }
        let mut out = Vec::new();
        for l in self.layers.iter() {
            match l {
                LayerState::Kv(KvCache::F16 { keys, values }) => {
                    let (kv, v) = (keys.len() / self.n_ctx, values.len() / self.n_ctx);
                    out.push(bytes_of(&keys[..n * kv]));
                    out.push(bytes_of(&values[..n * v]));
                }
                LayerState::Kv(KvCache::Q8_0 { keys, values }) => {
                    let (kv, v) = (keys.len() / self.n_ctx, values.len() / self.n_ctx);
                    out.push(&keys[..n * kv]);
                    out.push(&values[..n * v]);
                }
                LayerState::Recurrent(r) => {
                    out.push(bytes_of(&r.conv));
                    out.push(bytes_of(&r.ssm));
                    out.push(bytes_of(&r.ssm_f16));
                }
            }
        }
        Some(out)
    }

    /// The pieces [`State::pieces`] gives for `n` positions, to be filled in the same order
    /// (a restore, which [`State::restored`] then ends). `None` past the context, or with MTP
    /// drafting. What the caller does not fill is left as it was: it must fill them all.
    pub fn pieces_mut(&mut self, n: usize) -> Option<Vec<&mut [u8]>> {
        if n > self.n_ctx || self.mtp.is_some() {
            return None;
        }
        let n_ctx = self.n_ctx;
        let mut out = Vec::new();
        for l in self.layers.iter_mut() {
            match l {
                LayerState::Kv(KvCache::F16 { keys, values }) => {
                    let (kv, v) = (keys.len() / n_ctx, values.len() / n_ctx);
                    out.push(bytes_of_mut(&mut keys[..n * kv]));
                    out.push(bytes_of_mut(&mut values[..n * v]));
                }
                LayerState::Kv(KvCache::Q8_0 { keys, values }) => {
                    let (kv, v) = (keys.len() / n_ctx, values.len() / n_ctx);
                    out.push(&mut keys[..n * kv]);
                    out.push(&mut values[..n * v]);
                }
                LayerState::Recurrent(r) => {
                    out.push(bytes_of_mut(&mut r.conv));
                    out.push(bytes_of_mut(&mut r.ssm));
                    out.push(bytes_of_mut(&mut r.ssm_f16));
                }
            }
        }
        Some(out)
    }

    /// The pieces of [`State::pieces_mut`] for `n` positions were filled: the state stands at
    /// position `n`, with no copies of a verify pass to go back to.
    pub fn restored(&mut self, n: usize) {
        self.pos = n.min(self.n_ctx);
        self.steps_kept = 0;
    }

    /// Layer `l`'s f16 KV cache, `(keys, values)` as f16 bits, `[pos][kv_dim]` and
    /// `[pos][v_dim]` for every position the state has room for; `None` for a recurrent layer
    /// or a q8_0 cache.
    pub fn kv_cache(&self, l: usize) -> Option<(&[u16], &[u16])> {
        match self.layers.get(l)? {
            LayerState::Kv(KvCache::F16 { keys, values }) => Some((keys, values)),
            _ => None,
        }
    }

    /// Every attention layer's cache is f16 (what a context shift can rotate).
    pub fn kv_caches_are_f16(&self) -> bool {
        self.layers
            .iter()
            .all(|l| !matches!(l, LayerState::Kv(KvCache::Q8_0 { .. })))
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

    /// Bytes this state holds (activations, scratch, logits and the layers' state): the
    /// arena's high-water mark, which is the plan's total.
    pub fn memory_bytes(&self) -> usize {
        self.arena.high_water()
    }

    /// The arena's plan and what it handed out, part by part (`--verbose` prints it).
    pub fn arena(&self) -> &ArenaUsage {
        &self.arena
    }
}

/// A value type whose every bit pattern is a value and which has no padding: its slices may
/// be seen as bytes both ways (what a saved state is made of).
trait Plain: Copy {}
impl Plain for u8 {}
impl Plain for u16 {}
impl Plain for f32 {}

fn bytes_of<T: Plain>(x: &[T]) -> &[u8] {
    // SAFETY: `Plain` types have no padding, so every byte of the slice is initialised; the
    // length is the slice's size in bytes and u8 has alignment 1.
    unsafe { core::slice::from_raw_parts(x.as_ptr().cast::<u8>(), core::mem::size_of_val(x)) }
}

fn bytes_of_mut<T: Plain>(x: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `bytes_of`; and every bit pattern written through the bytes is a valid
    // `T` (`Plain`), so the slice stays valid whatever is written.
    unsafe {
        core::slice::from_raw_parts_mut(x.as_mut_ptr().cast::<u8>(), core::mem::size_of_val(x))
    }
}
