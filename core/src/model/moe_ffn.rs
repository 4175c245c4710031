//! The mixture-of-experts feed-forward network (Qwen3-MoE's, Qwen1.5-MoE's, bailingmoe2's,
//! LFM2-MoE's, SmallThinker's): a router picks `k` of `n_expert` gated MLPs per token; their
//! outputs, weighted by the router's probabilities, are summed, plus a shared expert that every
//! token runs (bailingmoe2, qwen2moe; qwen2moe scales it by a sigmoid gate of its own).
//!
//! ```text
//! xb = rms_norm(x)                              ffn_norm
//! p = softmax(Wrouter xb)                       ffn_gate_inp, one logit per expert (Qwen3-MoE)
//!   or sigmoid(Wrouter xb)                      (bailingmoe2, lfm2moe)
//!   or of Wrouter x0, x0 the layer's input      before the token mixer (early_router:
//!                                               SmallThinker; its experts are read meanwhile)
//! s = p + b                                     exp_probs_b: for choosing only, never a weight
//! groups: score_g = the sum of the 2 largest s in group g; all s outside the
//!         n_group_used best groups are -inf     (expert_group_count > 1)
//! E = the k experts of largest s                in order of s, largest first
//! w_e = p_e / max(sum_E p, 2^-14)               normalised over the chosen (norm_w; not qwen2moe)
//! w_e = w_e * scale                             expert_weights_scale (when not 0 or 1)
//! f = sum_e w_e Wdown_e (silu(Wgate_e xb) * Wup_e xb)
//!   + g Wdown_sh (silu(Wgate_sh xb) * Wup_sh xb) the shared expert (ffn_*_shexp), g = 1, or
//!     g = sigmoid(w_g . xb)                     ffn_gate_inp_shexp, one weight per input (qwen2moe)
//! x = x + f
//! ```
//! Each expert is one slice of a 3-D tensor (`ffn_*_exps`, ggml dims
//! `[n_cols, n_rows, n_expert]`), asked of the store by [`WeightKey::expert`]: a store that pages
//! experts from flash reads only the chosen ones, after the router's `prefetch` hint.

use super::error::ModelError;
use super::matrix::{Loader, Matrix};
use super::pass::{row, row_mut, Pass};
use super::state::Activations;
use super::store::WeightKey;
use crate::math;
use alloc::format;
use alloc::vec::Vec;

/// Most experts a token may use (`expert_used_count`): the chosen experts live in fixed-size
/// lists, so routing allocates nothing. Real models use 8 (Qwen3-MoE, Ling) or fewer.
pub const MAX_EXPERTS_USED: usize = 16;

/// llama.cpp clamps the sum of the chosen probabilities from below (at 2^-14, 6.1035e-5)
/// before dividing by it.
const MIN_WEIGHT_SUM: f32 = 1.0 / 16384.0;

/// Most expert groups a layer may have (`expert_group_count`): the chosen groups live in a
/// fixed-size list. Real models have 8 (Ling) or fewer.
pub const MAX_EXPERT_GROUPS: usize = 64;

/// How the router's logits become probabilities (`expert_gating_func`: 1 softmax, 2 sigmoid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gating {
    Softmax,
    Sigmoid,
}

/// How a layer's router chooses and weights its experts, from the header.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Routing {
    pub gating: Gating,
    /// Divide the chosen experts' probabilities by their sum (llama.cpp's norm_w).
    pub norm_weights: bool,
    /// Multiplies every chosen weight (`expert_weights_scale`; 1.0 when unset).
    pub weights_scale: f32,
    /// Expert groups (`expert_group_count`; 0 or 1: none) and how many a token may use.
    pub n_group: usize,
    pub n_group_used: usize,
    /// Whether the layer has a selection bias (`blk.N.exp_probs_b.bias`).
    pub selection_bias: SelectionBias,
    /// The shared expert's output is scaled by sigmoid(`ffn_gate_inp_shexp` . xb) (qwen2moe).
    pub shared_gate: bool,
    /// The router reads the layer's input x, unnormalised, before the token mixer runs,
    /// instead of the FFN's normed input (SmallThinker): the chosen experts are known, and
    /// read, while attention runs.
    pub early_router: bool,
}

impl Routing {
    /// Qwen3-MoE's: softmax, normalised over the chosen, no groups, no bias.
    pub const SOFTMAX_NORMALISED: Routing = Routing {
        gating: Gating::Softmax,
        norm_weights: true,
        weights_scale: 1.0,
        n_group: 0,
        n_group_used: 0,
        selection_bias: SelectionBias::None,
        shared_gate: false,
        early_router: false,
    };
}

/// Whether a layer's router has a selection bias (`blk.N.exp_probs_b.bias`, added to the
/// probabilities to choose the experts, never to weight them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectionBias {
    /// None is read.
    None,
    /// Read when the file has it (bailingmoe2).
    Optional,
    /// The file must have it (lfm2moe): a missing one is an error, not a silent other routing.
    Required,
}

/// The shared expert: a gated MLP every token runs beside its chosen experts.
#[derive(Debug, Clone)]
pub struct SharedExpert {
    pub n_ff: usize,
    pub w_gate: Matrix,
    pub w_up: Matrix,
    pub w_down: Matrix,
    /// `[n_embd]`: the gate's weights (qwen2moe's `ffn_gate_inp_shexp`); `None`: ungated.
    pub gate_inp: Option<Vec<f32>>,
}

#[derive(Debug, Clone)]
pub struct MoeFfn {
    pub n_expert: usize,
    pub n_expert_used: usize,
    /// Hidden width of one expert.
    pub n_ff: usize,
    pub routing: Routing,
    pub ffn_norm: Vec<f32>,
    /// `[n_embd] -> [n_expert]` router logits.
    pub router: Matrix,
    /// Added to the probabilities to choose the experts, not to weight them.
    pub selection_bias: Option<Vec<f32>>,
    pub shared: Option<SharedExpert>,
    /// The expert tensors, each matrix one expert's shape; `key` names the whole tensor.
    pub gate_exps: Matrix,
    pub up_exps: Matrix,
    pub down_exps: Matrix,
    pub swiglu: fn(&mut [f32], &[f32]),
    /// Added to the selection score of the experts the store holds in RAM (`--moe-cache-bias`;
    /// 0: off): fewer reads from flash for a small change of routing. Never a weight.
    pub cache_bias: f32,
    /// With an early router: ask the store for the chosen experts before the token mixer runs,
    /// so a pager reads them meanwhile (off only to measure what that hides).
    pub early_prefetch: bool,
}

impl MoeFfn {
    /// Loads layer `l`'s router and expert tensors (`blk.{l}.ffn_gate_inp`, `ffn_*_exps`, the
    /// selection bias `exp_probs_b.bias` if `routing` looks for one, and `ffn_*_shexp` if
    /// `n_ff_shared` is not 0), its input norm `blk.{l}.{norm}`.
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        ld: &Loader,
        l: usize,
        norm: &str,
        n_embd: usize,
        n_ff: usize,
        n_expert: usize,
        n_expert_used: usize,
        routing: Routing,
        n_ff_shared: usize,
        swiglu: fn(&mut [f32], &[f32]),
    ) -> Result<MoeFfn, ModelError> {
        let n = |s: &str| format!("blk.{l}.{s}");
        let shared = match n_ff_shared {
            0 => None,
            f => Some(SharedExpert {
                n_ff: f,
                w_gate: ld.matrix(&n("ffn_gate_shexp.weight"), n_embd, f)?,
                w_up: ld.matrix(&n("ffn_up_shexp.weight"), n_embd, f)?,
                w_down: ld.matrix(&n("ffn_down_shexp.weight"), f, n_embd)?,
                gate_inp: ld.vector_if(
                    routing.shared_gate,
                    &n("ffn_gate_inp_shexp.weight"),
                    n_embd,
                )?,
            }),
        };
        let bias = n("exp_probs_b.bias");
        let selection_bias = match routing.selection_bias {
            SelectionBias::None => None,
            SelectionBias::Optional => ld.opt_vector(&bias, n_expert)?,
            SelectionBias::Required => Some(ld.vector(&bias, n_expert)?),
        };
        Ok(MoeFfn {
            n_expert,
            n_expert_used,
            n_ff,
            routing,
            ffn_norm: ld.vector(&n(norm), n_embd)?,
            router: ld.matrix(&n("ffn_gate_inp.weight"), n_embd, n_expert)?,
            selection_bias,
            shared,
            gate_exps: ld.experts(&n("ffn_gate_exps.weight"), n_embd, n_ff, n_expert)?,
            up_exps: ld.experts(&n("ffn_up_exps.weight"), n_embd, n_ff, n_expert)?,
            down_exps: ld.experts(&n("ffn_down_exps.weight"), n_ff, n_embd, n_expert)?,
            swiglu,
            cache_bias: 0.0,
            early_prefetch: true,
        })
    }

    /// The matrices asked for whole, in the order `forward` uses them: the router, then the
    /// shared expert's.
    pub fn matrices(&self) -> Vec<&Matrix> {
        let mut all = alloc::vec![&self.router];
        if let Some(sh) = &self.shared {
            all.extend([&sh.w_gate, &sh.w_up, &sh.w_down]);
        }
        all
    }

    /// The expert tensors, asked for one expert at a time, in the order `forward` uses them.
    pub fn expert_matrices(&self) -> [&Matrix; 3] {
        [&self.gate_exps, &self.up_exps, &self.down_exps]
    }

    /// For each of the pass's tokens: x += the weighted sum of its chosen experts' outputs, on
    /// xb = rms_norm(x). Tokens are routed and run one at a time (a batch's tokens choose
    /// different experts).
    ///
    /// `predict`: a later MoE layer whose experts to guess from this hidden state while this
    /// one runs (pre-gated prefetch, decoding only).
    pub fn forward(
        &self,
        p: &mut Pass,
        l: usize,
        a: &mut Activations,
        predict: Option<&MoeFfn>,
    ) -> Result<(), ModelError> {
        let (n, n_embd) = (p.n, a.n_embd);
        p.rms_norm_rows(&mut a.xb, &a.x, &self.ffn_norm, n_embd);
        p.tap("ffn_norm", l, &a.xb, n_embd);
        if !self.routing.early_router {
            p.matvec(&self.router, &a.xb, &mut a.router)?;
            p.tap("ffn_moe_logits", l, &a.router, self.n_expert);
        }
        if let Some(sh) = &self.shared {
            // The shared expert runs for all tokens at once, into xb2, before the routed experts
            // (which reuse hb and hb2) add their sum to it.
            let nf = sh.n_ff;
            p.matvecs(
                &a.xb,
                &mut [(&sh.w_gate, &mut a.hb[..]), (&sh.w_up, &mut a.hb2[..])],
            )?;
            for t in 0..n {
                (self.swiglu)(row_mut(&mut a.hb, nf, t), row(&a.hb2, nf, t));
            }
            p.matvec(&sh.w_down, &a.hb, &mut a.xb2)?;
            p.tap("ffn_shexp", l, &a.xb2, n_embd);
            if let Some(w_gate) = &sh.gate_inp {
                for t in 0..n {
                    let logit: f32 = w_gate
                        .iter()
                        .zip(row(&a.xb, n_embd, t))
                        .map(|(w, x)| w * x)
                        .sum();
                    // llama.cpp writes this sigmoid as silu(g) / g: the same value to the last
                    // bit or two, except at g = 0 exactly, where its 0/0 is NaN and this is 1/2.
                    let gate = 1.0 / (1.0 + libm::expf(-logit));
                    row_mut(&mut a.xb2, n_embd, t)
                        .iter_mut()
                        .for_each(|v| *v *= gate);
                }
                p.tap("ffn_shexp_out", l, &a.xb2, n_embd);
            }
        }

        // Each token runs its own experts: the pass goes one token at a time here.
        let n_pass = core::mem::replace(&mut p.n, 1);
        // Guesses are for decoding: a prompt's batch has its own experts for every token.
        let predict = predict.filter(|_| n == 1);
        let result = (0..n).try_for_each(|t| self.token_experts(p, a, t, predict));
        p.n = n_pass;
        result?;
        p.tap("ffn_moe_out", l, &a.xb2, n_embd);
        p.add_rows(&mut a.x, &mut a.xb2, None, n_embd);
        p.tap("l_out", l, &a.x, n_embd);
        Ok(())
    }

    /// Token `t`'s experts: route, hint the chosen experts to the store, run each, and leave
    /// their weighted sum in row `t` of `xb2` (added to the shared expert's output there, if
    /// the layer has one).
    fn token_experts(
        &self,
        p: &mut Pass,
        a: &mut Activations,
        t: usize,
        predict: Option<&MoeFfn>,
    ) -> Result<(), ModelError> {
        let (n_embd, n_ff) = (a.n_embd, self.n_ff);
        let held = self.held_experts(p, &mut a.moe_held);
        let chosen = self.route(row_mut(&mut a.router, self.n_expert, t), held);
        let mut hint = heapless::Vec::<WeightKey, { 3 * MAX_EXPERTS_USED }>::new();
        for &(e, _) in &chosen {
            for m in self.expert_matrices() {
                // Capacity is 3 x MAX_EXPERTS_USED, and at most that many are chosen.
                let _ = hint.push(WeightKey::expert(m.id, e));
            }
        }
        p.store.prefetch(&hint);
        // After this layer's own reads were asked for, so a guess never delays them.
        if let Some(next) = predict {
            next.predict_from(p, a)?;
        }
        // moe_acc: the weighted sum, then one expert's output.
        let (acc, out) = a.moe_acc.split_at_mut(n_embd);
        acc.fill(0.0);
        for &(e, w) in &chosen {
            let xb = row(&a.xb, n_embd, t);
            let (gate, up) = (&mut a.hb[..n_ff], &mut a.hb2[..n_ff]);
            p.expert_matvecs(xb, e, &mut [(&self.gate_exps, gate), (&self.up_exps, up)])?;
            (self.swiglu)(&mut a.hb[..n_ff], &a.hb2[..n_ff]);
            p.expert_matvecs(&a.hb[..n_ff], e, &mut [(&self.down_exps, &mut out[..])])?;
            // ggml scales each expert's output, then adds them up in the router's order.
            acc.iter_mut()
                .zip(out.iter())
                .for_each(|(acc, o)| *acc += o * w);
        }
        let dst = row_mut(&mut a.xb2, n_embd, t);
        match self.shared {
            // ggml adds the shared expert's output to the routed sum: moe_out + shexp (the
            // same float either way round).
            Some(_) => dst.iter_mut().zip(acc.iter()).for_each(|(d, s)| *d += s),
            None => dst.copy_from_slice(acc),
        }
        Ok(())
    }

    /// The early router (`Routing::early_router`): the router's logits on the layer's input x,
    /// before the token mixer runs, into `router` (which `forward` then routes on); when
    /// decoding, the experts they choose are asked of the store at once, so a store that pages
    /// experts reads them while attention runs. Uses `router_guess` for that choice.
    pub fn route_early(
        &self,
        p: &mut Pass,
        l: usize,
        a: &mut Activations,
    ) -> Result<(), ModelError> {
        p.matvec(&self.router, &a.x, &mut a.router)?;
        p.tap("ffn_moe_logits", l, &a.router, self.n_expert);
        if p.n == 1 && self.early_prefetch {
            let logits = &mut a.router_guess[..self.n_expert];
            logits.copy_from_slice(&a.router[..self.n_expert]);
            let held = self.held_experts(p, &mut a.moe_held);
            let chosen = self.route(logits, held);
            let mut keys = heapless::Vec::<WeightKey, { 3 * MAX_EXPERTS_USED }>::new();
            for &(e, _) in &chosen {
                for m in self.expert_matrices() {
                    let _ = keys.push(WeightKey::expert(m.id, e));
                }
            }
            p.store.prefetch(&keys);
        }
        Ok(())
    }

    /// Which experts the store holds, when routing favours them (`cache_bias`): `held` filled
    /// and returned, or `None`.
    fn held_experts<'h>(&self, p: &Pass, held: &'h mut [bool]) -> Option<&'h [bool]> {
        let held = held.get_mut(..self.n_expert)?;
        (self.cache_bias != 0.0 && p.store.experts_held(self.gate_exps.id, held)).then_some(&*held)
    }

    /// Pre-gated prefetch: this layer's router on the hidden state of an earlier layer (x of
    /// the pass's one token, normalised with this layer's FFN norm unless the router is an
    /// early one) picks the experts this layer will likely want; the store is told to load
    /// them while the earlier layer runs.
    /// Uses `moe_acc` (before the earlier layer's experts fill it) and `router_guess`.
    fn predict_from(&self, p: &mut Pass, a: &mut Activations) -> Result<(), ModelError> {
        let n_embd = a.n_embd;
        let normed = &mut a.moe_acc[..n_embd];
        match self.routing.early_router {
            // Its router reads the layer's input as it is.
            true => normed.copy_from_slice(&a.x[..n_embd]),
            false => math::rms_norm(normed, &a.x[..n_embd], &self.ffn_norm, p.rms_eps),
        }
        let logits = &mut a.router_guess[..self.n_expert];
        p.matvec(&self.router, &a.moe_acc[..n_embd], logits)?;
        let held = self.held_experts(p, &mut a.moe_held);
        let chosen = self.route(logits, held);
        let mut keys = heapless::Vec::<WeightKey, { 3 * MAX_EXPERTS_USED }>::new();
        for &(e, _) in &chosen {
            for m in self.expert_matrices() {
                let _ = keys.push(WeightKey::expert(m.id, e));
            }
        }
        p.store.predict(&keys);
        Ok(())
    }

    /// The `k` experts of largest selection score (largest first; the lower index on a tie)
    /// and their weights, from one token's router logits (turned into probabilities in place).
    /// `held`: the experts in RAM, whose score gets `cache_bias` (choosing only).
    fn route(
        &self,
        logits: &mut [f32],
        held: Option<&[bool]>,
    ) -> heapless::Vec<(u16, f32), MAX_EXPERTS_USED> {
        let r = &self.routing;
        match r.gating {
            Gating::Softmax => math::softmax(logits),
            // ggml's sigmoid, as it writes it.
            Gating::Sigmoid => logits
                .iter_mut()
                .for_each(|v| *v = 1.0 / (1.0 + libm::expf(-*v))),
        }
        let probs = &*logits;
        let bias = self.selection_bias.as_deref();
        let cached = |e: usize| match held {
            Some(h) if h[e] => self.cache_bias,
            _ => 0.0,
        };
        let score = |e: usize| bias.map_or(probs[e], |b| probs[e] + b[e]) + cached(e);
        let groups = self.chosen_groups(&score);
        let per_group = self.n_expert / r.n_group.max(1);
        let allowed = |e: usize| groups.is_empty() || groups.contains(&((e / per_group) as u16));
        let mut chosen = heapless::Vec::<(u16, f32), MAX_EXPERTS_USED>::new();
        for _ in 0..self.n_expert_used {
            let mut best: Option<(usize, f32)> = None;
            for e in 0..self.n_expert {
                let taken = chosen.iter().any(|&(c, _)| c as usize == e);
                if taken || !allowed(e) {
                    continue;
                }
                let s = score(e);
                if best.is_none_or(|(_, b)| s > b) {
                    best = Some((e, s));
                }
            }
            if let Some((e, _)) = best {
                // n_expert_used <= MAX_EXPERTS_USED was checked with the hyperparameters.
                let _ = chosen.push((e as u16, probs[e]));
            }
        }
        if r.norm_weights {
            let sum: f32 = chosen.iter().map(|&(_, w)| w).sum();
            let sum = sum.max(MIN_WEIGHT_SUM);
            chosen.iter_mut().for_each(|(_, w)| *w /= sum);
        }
        if r.weights_scale != 0.0 && r.weights_scale != 1.0 {
            chosen.iter_mut().for_each(|(_, w)| *w *= r.weights_scale);
        }
        chosen
    }

    /// The `n_group_used` groups of largest score (the sum of a group's two largest selection
    /// scores; largest first, the lower index on a tie); empty when the layer has no groups.
    fn chosen_groups(&self, score: &dyn Fn(usize) -> f32) -> heapless::Vec<u16, MAX_EXPERT_GROUPS> {
        let r = &self.routing;
        let mut chosen = heapless::Vec::<u16, MAX_EXPERT_GROUPS>::new();
        if r.n_group <= 1 {
            return chosen;
        }
        let per_group = self.n_expert / r.n_group;
        let group_score = |g: usize| {
            let (mut top1, mut top2) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
            for e in g * per_group..(g + 1) * per_group {
                let s = score(e);
                if s > top1 {
                    (top1, top2) = (s, top1);
                } else if s > top2 {
                    top2 = s;
                }
            }
            top1 + top2
        };
        for _ in 0..r.n_group_used {
            let mut best: Option<(usize, f32)> = None;
            for g in 0..r.n_group {
                if chosen.contains(&(g as u16)) {
                    continue;
                }
                let s = group_score(g);
                if best.is_none_or(|(_, b)| s > b) {
                    best = Some((g, s));
                }
            }
            if let Some((g, _)) = best {
                // n_group <= MAX_EXPERT_GROUPS was checked with the hyperparameters.
                let _ = chosen.push(g as u16);
            }
        }
        chosen
    }
}
