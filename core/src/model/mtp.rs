//! Qwen3.5's MTP (multi-token prediction) block, the `nextn` layer after the trunk
//! (`blk.{n_layer}`), as llama.cpp b11434 runs it to draft tokens (src/models/qwen35.cpp
//! graph_mtp; common/speculative.cpp draft-mtp drives it):
//!
//! ```text
//! h_j = rms_norm(x_j) * output_norm              the trunk's last hidden state at position j,
//!                                                what its LM head multiplies ("h_nextn")
//! pair at position p: the token t_p and h_{p-1}  (zeros before position 0)
//! u = eh_proj [rms_norm(embed(t_p)) * enorm | rms_norm(h_{p-1}) * hnorm]     2 n_embd -> n_embd
//! u = u + gated_attention(u, own KV cache)       as the trunk's full-attention layers (attention.rs)
//! u = u + ffn(rms_norm(u) * post_attention_norm) (dense_ffn.rs)
//! g = rms_norm(u) * shared_head_norm             (output_norm when the file has none)
//! logits = head g                                shared_head_head, else the model's LM head
//! ```
//! h_{p-1} is what the trunk predicted t_p from; given t_p as well, the block at p predicts
//! t_{p+1}: the token after the one just sampled, before the trunk has run that one.
//! The block's layer is the one the family's file describes (`Family::mtp_layer`, in
//! arch/qwen35.rs), loaded as the trunk's layers are (`load_layer`).
//!
//! Drafting after the trunk sampled `t` at position `pos` (the trunk has run up to pos - 1):
//! the pair (t, h_{pos-1}) gives the first draft d1 (argmax); the pair (d1, g) at pos + 1, with
//! `g` the MTP's own normed output of the step before, gives d2, and so on (llama.cpp chains
//! three by default). The MTP's KV cache must hold the pairs of every accepted position, each
//! with the trunk's own hidden state: the prompt's as its chunks run, and after a verify pass the
//! accepted tokens', run together with the next draft's first step (one read of the MTP weights
//! for both). A rejected draft's entries lie beyond the accepted position and are overwritten
//! before attention reads them, as in the trunk's caches.

use super::arch::ARCHITECTURES;
use super::attention::KvCacheType;
use super::error::ModelError;
use super::layer::{LayerShape, LayerState};
use super::matrix::{Loader, Matrix};
use super::pass::{row_mut, Pass};
use super::state::State;
use super::store::{WeightKey, WeightStore};
use super::Layer;
use crate::arena::{Arena, ArenaError, ArenaPlan, ArenaSlice, Part};
use crate::gguf::Gguf;
use crate::kernels::KernelSet;
use crate::math::{self, AttentionKernel};
use crate::platform::Parallel;
use alloc::vec;
use alloc::vec::Vec;

/// The MTP block's weights (loaded by [`super::Model::load_mtp`]).
#[derive(Debug, Clone)]
pub struct Mtp {
    /// Gated full attention with its own KV cache, then a dense FFN.
    pub layer: Layer,
    /// `nextn.eh_proj`: 2 n_embd -> n_embd, over [enorm(embedding) | hnorm(hidden)].
    pub eh_proj: Matrix,
    pub enorm: Vec<f32>,
    pub hnorm: Vec<f32>,
    /// `nextn.shared_head_norm`, else the model's `output_norm`.
    pub head_norm: Vec<f32>,
    /// `nextn.shared_head_head` (a full head), else `None`: the model's LM head.
    pub head: Option<Matrix>,
    /// `nextn.embed_tokens`, else `None`: the model's `token_embd`.
    pub embed: Option<Matrix>,
    /// The weights in the order a step asks for them (the prefetch hint).
    pub keys: Vec<WeightKey>,
}

impl Mtp {
    /// The block's matrices, in the order a step uses them (its own head last, if any).
    pub fn matrices(&self) -> Vec<&Matrix> {
        let mut all = vec![&self.eh_proj];
        all.extend(self.layer.matrices());
        all.extend(self.head.as_ref());
        all
    }
}

/// What the MTP block keeps between passes: its KV cache, and the trunk's hidden states of the
/// last pass (and of the position before it), from which the pairs of the accepted positions are
/// made. Carved from the state's arena (`Part::Mtp`); a step allocates nothing.
pub struct MtpState {
    pub(super) kv: LayerState,
    pub(super) n_embd: usize,
    /// The trunk's last pass: its tokens and their hidden states `h` (after the output norm),
    /// `hidden_rows` of them from position `hidden_pos`.
    pub(super) tokens: ArenaSlice<u32>,
    pub(super) hidden: ArenaSlice<f32>,
    pub(super) hidden_pos: usize,
    pub(super) hidden_rows: usize,
    /// `h` at position `hidden_pos - 1` (zeros at position 0), when known.
    pub(super) h_prev: ArenaSlice<f32>,
    pub(super) h_prev_known: bool,
    /// Positions below `done` have their pair in the KV cache.
    pub(super) done: usize,
    /// The draft chain: the MTP's normed output after its last step, and where the next goes.
    pub(super) h_chain: ArenaSlice<f32>,
    pub(super) chain_pos: usize,
    /// A step's tokens, and eh_proj's input rows `[n][2 n_embd]` (the `h` half written first).
    pub(super) batch_tokens: ArenaSlice<u32>,
    pub(super) cat: ArenaSlice<f32>,
}

impl MtpState {
    /// Counts the block's state for `n_ctx` positions and batches of `n_batch` in `Part::Mtp`.
    pub fn plan(
        plan: &mut ArenaPlan,
        shape: &LayerShape,
        n_ctx: usize,
        n_batch: usize,
        n_embd: usize,
    ) {
        let part = Part::Mtp;
        // The MTP block's own cache stays f16 whatever the trunk's type (one layer, small).
        LayerState::plan(plan, part, shape, n_ctx, 0, KvCacheType::F16);
        plan.add::<u32>(part, 1, n_batch);
        plan.add::<f32>(part, n_batch, n_embd);
        plan.add::<f32>(part, 1, n_embd);
        plan.add::<f32>(part, 1, n_embd);
        plan.add::<u32>(part, 1, n_batch);
        plan.add::<f32>(part, n_batch, 2 * n_embd);
    }

    /// Takes the state [`MtpState::plan`] counted from `arena`.
    ///
    /// # Safety
    /// The region under `arena` must outlive the state (see [`ArenaSlice::detach`]).
    pub unsafe fn carve(
        arena: &mut Arena<'_>,
        shape: &LayerShape,
        n_ctx: usize,
        n_batch: usize,
        n_embd: usize,
    ) -> Result<MtpState, ArenaError> {
        let part = Part::Mtp;
        // SAFETY: the caller's promise, for every slice below.
        unsafe {
            let kv = LayerState::carve(arena, part, shape, n_ctx, 0, KvCacheType::F16)?;
            Ok(MtpState {
                kv,
                n_embd,
                tokens: arena.take_detached(part, 1, n_batch)?,
                hidden: arena.take_detached(part, n_batch, n_embd)?,
                hidden_pos: 0,
                hidden_rows: 0,
                h_prev: arena.take_detached(part, 1, n_embd)?,
                h_prev_known: true,
                done: 0,
                h_chain: arena.take_detached(part, 1, n_embd)?,
                chain_pos: 0,
                batch_tokens: arena.take_detached(part, 1, n_batch)?,
                cat: arena.take_detached(part, n_batch, 2 * n_embd)?,
            })
        }
    }

    /// The trunk went back to `pos`: pairs from there on are of forgotten tokens.
    pub(super) fn rewind(&mut self, pos: usize) {
        self.done = self.done.min(pos);
        if pos == 0 {
            self.hidden_rows = 0;
        }
    }

    /// Where `h` at position `j` is: the last pass's rows, or the row kept from before it.
    fn h_source(&self, j: usize) -> Option<HSource> {
        if j + 1 == self.hidden_pos {
            return self.h_prev_known.then_some(HSource::Prev);
        }
        let i = j.checked_sub(self.hidden_pos)?;
        (i < self.hidden_rows).then_some(HSource::Row(i))
    }

    /// A trunk pass from `pos` is about to replace the hidden rows: keep `h` at `pos - 1`.
    pub(super) fn begin_pass(&mut self, pos: usize) {
        let e = self.n_embd;
        self.h_prev_known = match pos.checked_sub(1).map(|j| self.h_source(j)) {
            None => {
                self.h_prev.fill(0.0);
                true
            }
            Some(Some(HSource::Prev)) => true,
            Some(Some(HSource::Row(i))) => {
                self.h_prev
                    .copy_from_slice(&self.hidden[i * e..(i + 1) * e]);
                true
            }
            Some(None) => false,
        };
        self.hidden_pos = pos;
        self.hidden_rows = 0;
    }

    /// Fills the step's batch with the pairs of positions `done..upto` (the trunk's tokens and
    /// hidden states), then, with `next`, the pair (next, h_{upto-1}); returns its length.
    /// `None` if the hidden states of some of those positions are gone (the pairs cannot be
    /// made: the cache then keeps stale entries there, which costs drafts, never correctness).
    pub(super) fn fill_pairs(&mut self, upto: usize, next: Option<u32>) -> Option<usize> {
        let e = self.n_embd;
        let from = self.done.min(upto);
        let end = upto + usize::from(next.is_some());
        if end - from > self.batch_tokens.len() {
            return None;
        }
        for (t, j) in (from..end).enumerate() {
            self.batch_tokens[t] = match next {
                Some(token) if j == upto => token,
                _ => {
                    let i = j.checked_sub(self.hidden_pos)?;
                    if i >= self.hidden_rows {
                        return None;
                    }
                    self.tokens[i]
                }
            };
            let src = match j.checked_sub(1) {
                None => None,
                Some(before) => Some(self.h_source(before)?),
            };
            let dst = &mut self.cat[2 * e * t + e..2 * e * (t + 1)];
            match src {
                None => dst.fill(0.0),
                Some(HSource::Prev) => dst.copy_from_slice(&self.h_prev),
                Some(HSource::Row(i)) => dst.copy_from_slice(&self.hidden[i * e..(i + 1) * e]),
            }
        }
        Some(end - from)
    }
}

/// Where a hidden row is kept.
#[derive(Clone, Copy)]
enum HSource {
    /// `MtpState::h_prev`.
    Prev,
    /// Row `i` of `MtpState::hidden`.
    Row(usize),
}

/// Why MTP drafting cannot run on a model: no MTP layer, one smolrun does not run, or more
/// than the one block llama.cpp's MTP graph supports.
pub(super) fn check_mtp_layers(hp: &super::HParams) -> Result<LayerShape, ModelError> {
    let key = alloc::format!("{}.nextn_predict_layers", hp.arch);
    let Some(shape) = hp.mtp_layer() else {
        let with_mtp = ARCHITECTURES
            .iter()
            .filter(|a| a.family.mtp_layer.is_some());
        let names: Vec<&str> = with_mtp.map(|a| a.name).collect();
        return Err(ModelError::BadOption {
            option: "--draft mtp",
            reason: alloc::format!(
                "MTP drafting runs the MTP layer of {} models; this model is {}: use \
                 --draft ngram or a draft model",
                names.join(", "),
                hp.arch
            ),
        });
    };
    match hp.n_nextn {
        1 => Ok(shape),
        0 => Err(ModelError::BadOption {
            option: "--draft mtp",
            reason: alloc::format!(
                "this model has no MTP (nextn) layer ({key} is 0 or absent): use --draft ngram \
                 or a draft model"
            ),
        }),
        n => Err(ModelError::BadHParam {
            key,
            expected: "1 for MTP drafting (one nextn block, the graph llama.cpp runs)".into(),
            found: alloc::format!("{n}"),
        }),
    }
}

impl super::Model {
    /// Loads the MTP block (`blk.{n_layer}`: the block the family's `mtp_layer` describes, then
    /// `nextn.*`) for drafting with it; refuses a model without one, of a family without one
    /// smolrun runs, or with more than one (llama.cpp's MTP graph runs exactly one).
    pub fn load_mtp(
        &mut self,
        g: &Gguf,
        store: &dyn WeightStore,
        kernels: &KernelSet,
    ) -> Result<(), ModelError> {
        let shape = check_mtp_layers(&self.hp)?;
        let hp = &self.hp;
        let (l, n_embd) = (hp.n_layer, hp.n_embd);
        let ld = Loader {
            gguf: g,
            store,
            kernels,
        };
        let n = |s: &str| alloc::format!("blk.{l}.{s}");
        // The block attends globally, as the trunk's layers without a window.
        let rope = super::layer_rope(hp, self.switches.rope_style, false);
        let gate = super::ffn_gate(self.switches.activation, kernels);
        let layer = super::load_layer(&ld, hp, l, shape, rope, &gate)?;
        let head_norm = match ld.opt_vector(&n("nextn.shared_head_norm.weight"), n_embd)? {
            Some(w) => w,
            None => self.output_norm.clone(),
        };
        let head = match g.tensor(&n("nextn.shared_head_head.weight")) {
            Some(_) if self.head_ids.is_some() => {
                return Err(ModelError::BadOption {
                    option: "--draft mtp",
                    reason: "this pruned-head file's MTP layer has a head of its own \
                             (nextn.shared_head_head), which prune-head does not prune: use the \
                             unpruned file"
                        .into(),
                })
            }
            Some(_) => Some(ld.matrix(&n("nextn.shared_head_head.weight"), n_embd, hp.n_vocab)?),
            None => None,
        };
        let embed = match g.tensor(&n("nextn.embed_tokens.weight")) {
            Some(_) => Some(ld.matrix(&n("nextn.embed_tokens.weight"), n_embd, hp.n_vocab)?),
            None => None,
        };
        let mut block = Mtp {
            layer,
            eh_proj: ld.matrix(&n("nextn.eh_proj.weight"), 2 * n_embd, n_embd)?,
            enorm: ld.vector(&n("nextn.enorm.weight"), n_embd)?,
            hnorm: ld.vector(&n("nextn.hnorm.weight"), n_embd)?,
            head_norm,
            head,
            embed,
            keys: Vec::new(),
        };
        block.keys = block.matrices().iter().map(|m| m.key).collect();
        block.keys.push(self.output.key);
        self.mtp = Some(block);
        Ok(())
    }

    /// The MTP block's first draft step after the trunk sampled `token` at position
    /// `state.pos`: runs the pairs of the accepted positions the block has not seen yet (the
    /// last verify pass's accepted tokens) and the pair (token, h_{pos-1}) in one batch, and
    /// returns the logits for the token after `token`. [`Model::mtp_next`] goes on from there.
    pub fn mtp_begin<'s>(
        &self,
        state: &'s mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        token: u32,
    ) -> Result<&'s [f32], ModelError> {
        let pos = state.pos;
        let m = state.mtp.as_mut().ok_or_else(no_mtp_state)?;
        // The pairs up to here are the accepted text's; the trunk runs `token` at `pos` next.
        let known = m.fill_pairs(pos, Some(token));
        let n = match known {
            Some(n) => n,
            None => {
                // The hidden states of some accepted positions are gone: their entries stay
                // stale (drafts get worse, the output does not change), the step runs alone.
                m.done = pos;
                m.fill_pairs(pos, Some(token)).ok_or_else(no_mtp_state)?
            }
        };
        self.mtp_pass(state, store, par, pos + 1 - n, n, true)?;
        let m = state.mtp.as_mut().ok_or_else(no_mtp_state)?;
        m.done = pos + 1;
        m.chain_pos = pos + 1;
        Ok(state.logits())
    }

    /// The next draft step: the pair (`draft`, the block's own output of the step before) at
    /// the next position, and the logits for the token after `draft`.
    pub fn mtp_next<'s>(
        &self,
        state: &'s mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        draft: u32,
    ) -> Result<&'s [f32], ModelError> {
        let m = state.mtp.as_mut().ok_or_else(no_mtp_state)?;
        let (e, pos) = (m.n_embd, m.chain_pos);
        m.batch_tokens[0] = draft;
        let MtpState { cat, h_chain, .. } = m;
        cat[e..2 * e].copy_from_slice(h_chain);
        self.mtp_pass(state, store, par, pos, 1, true)?;
        if let Some(m) = &mut state.mtp {
            m.chain_pos = pos + 1;
        }
        Ok(state.logits())
    }

    /// Runs the MTP pairs of the accepted positions `done..upto` that the last trunk pass has
    /// the hidden states of.
    pub(super) fn mtp_catch_up(
        &self,
        state: &mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        upto: usize,
    ) -> Result<(), ModelError> {
        let Some(m) = &mut state.mtp else {
            return Ok(());
        };
        if m.done >= upto {
            return Ok(());
        }
        // (hidden states gone: those entries stay stale, see `mtp_begin`)
        if let Some(n) = m.fill_pairs(upto, None) {
            self.mtp_pass(state, store, par, upto - n, n, false)?;
        }
        if let Some(m) = &mut state.mtp {
            m.done = upto;
        }
        Ok(())
    }

    /// The MTP block over the `n` pairs of `state.mtp`'s batch at positions `pos..`, with
    /// `logits` for the last one (into the state's first logits row; the block's normed output
    /// is kept for the next chained step). Decode kernels throughout (`prompt` false), so that
    /// a pair gives the same bits in a batch or alone.
    fn mtp_pass(
        &self,
        s: &mut State,
        store: &dyn WeightStore,
        par: &dyn Parallel,
        pos: usize,
        n: usize,
        logits: bool,
    ) -> Result<(), ModelError> {
        let block = self.mtp.as_ref().ok_or_else(no_mtp_state)?;
        if pos + n > s.n_ctx {
            return Err(ModelError::ContextFull {
                pos: (pos + n).max(s.n_ctx),
                n_ctx: s.n_ctx,
            });
        }
        let e = self.hp.n_embd;
        let State {
            act,
            act_q,
            act_tables,
            tile,
            logits: logit_rows,
            head_logits,
            tap,
            mtp: Some(m),
            ..
        } = s
        else {
            return Err(no_mtp_state());
        };
        let mut p = Pass::new(
            par,
            store,
            n,
            false,
            AttentionKernel::F16Accumulator,
            self.rope_freqs.as_deref(),
            self.hp.rms_eps,
            *tap,
            act_q,
            act_tables,
            tile,
        );
        store.prefetch(&block.keys);
        // [enorm(embedding) | hnorm(h)] per pair, the h half already in place.
        let embed = block.embed.as_ref().unwrap_or(&self.token_embd);
        for t in 0..n {
            let token = m.batch_tokens[t];
            if token as usize >= self.hp.n_vocab {
                return Err(ModelError::TokenOutOfRange {
                    token,
                    n_vocab: self.hp.n_vocab,
                });
            }
            let x = row_mut(&mut act.x, e, t);
            p.read_row(embed, token as usize, x)?;
            let (en, hn) = row_mut(&mut m.cat, 2 * e, t).split_at_mut(e);
            math::rms_norm(en, x, &block.enorm, self.hp.rms_eps);
            math::rms_norm_in_place(hn, &block.hnorm, self.hp.rms_eps);
        }
        p.matvec(&block.eh_proj, &m.cat[..n * 2 * e], &mut act.x[..n * e])?;
        p.tap("mtp_eh_proj", self.hp.n_layer, &act.x, e);
        block
            .layer
            .forward(&mut p, self.hp.n_layer, act, &mut m.kv, pos, None)?;
        if logits {
            let head = block.head.as_ref();
            let ids = match head {
                Some(_) => None,
                None => self.head_ids.as_deref(),
            };
            let head = (&block.head_norm[..], head.unwrap_or(&self.output), ids);
            self.lm_head(&mut p, act, logit_rows, head_logits, n - 1..n, head)?;
            // The normed row the head read: the next chained step's h.
            m.h_chain.copy_from_slice(&act.xb[..e]);
        }
        Ok(())
    }
}

fn no_mtp_state() -> ModelError {
    ModelError::BadOption {
        option: "--draft mtp",
        reason: "the state has no MTP block (make it with State::with_mtp after Model::load_mtp)"
            .into(),
    }
}
