//! The mixture-of-experts feed-forward network (Qwen3-MoE's): a router picks `k` of `n_expert`
//! gated MLPs per token; their outputs, weighted by the router's probabilities, are summed.
//!
//! ```text
//! xb = rms_norm(x)                              ffn_norm
//! p = softmax(Wrouter xb)                       ffn_gate_inp, one logit per expert
//! E = the k experts of largest p                in order of p, largest first
//! w_e = p_e / max(sum_E p, 2^-14)               normalised over the chosen (norm_w)
//! f = sum_e w_e Wdown_e (silu(Wgate_e xb) * Wup_e xb)
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

#[derive(Debug, Clone)]
pub struct MoeFfn {
    pub n_expert: usize,
    pub n_expert_used: usize,
    /// Hidden width of one expert.
    pub n_ff: usize,
    /// Divide the chosen experts' probabilities by their sum.
    pub norm_weights: bool,
    pub ffn_norm: Vec<f32>,
    /// `[n_embd] -> [n_expert]` router logits.
    pub router: Matrix,
    /// The expert tensors, each matrix one expert's shape; `key` names the whole tensor.
    pub gate_exps: Matrix,
    pub up_exps: Matrix,
    pub down_exps: Matrix,
    pub swiglu: fn(&mut [f32], &[f32]),
}

impl MoeFfn {
    /// Loads layer `l`'s router and expert tensors (`blk.{l}.ffn_gate_inp`, `ffn_*_exps`).
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        ld: &Loader,
        l: usize,
        n_embd: usize,
        n_ff: usize,
        n_expert: usize,
        n_expert_used: usize,
        norm_weights: bool,
        swiglu: fn(&mut [f32], &[f32]),
    ) -> Result<MoeFfn, ModelError> {
        let n = |s: &str| format!("blk.{l}.{s}");
        Ok(MoeFfn {
            n_expert,
            n_expert_used,
            n_ff,
            norm_weights,
            ffn_norm: ld.vector(&n("ffn_norm.weight"), n_embd)?,
            router: ld.matrix(&n("ffn_gate_inp.weight"), n_embd, n_expert)?,
            gate_exps: ld.experts(&n("ffn_gate_exps.weight"), n_embd, n_ff, n_expert)?,
            up_exps: ld.experts(&n("ffn_up_exps.weight"), n_embd, n_ff, n_expert)?,
            down_exps: ld.experts(&n("ffn_down_exps.weight"), n_ff, n_embd, n_expert)?,
            swiglu,
        })
    }

    /// The matrices asked for whole: the router.
    pub fn matrices(&self) -> [&Matrix; 1] {
        [&self.router]
    }

    /// The expert tensors, asked for one expert at a time, in the order `forward` uses them.
    pub fn expert_matrices(&self) -> [&Matrix; 3] {
        [&self.gate_exps, &self.up_exps, &self.down_exps]
    }

    /// For each of the pass's tokens: x += the weighted sum of its chosen experts' outputs, on
    /// xb = rms_norm(x). Tokens are routed and run one at a time (a batch's tokens choose
    /// different experts).
    pub fn forward(&self, p: &mut Pass, l: usize, a: &mut Activations) -> Result<(), ModelError> {
        let (n, n_embd) = (p.n, a.n_embd);
        p.rms_norm_rows(&mut a.xb, &a.x, &self.ffn_norm, n_embd);
        p.tap("ffn_norm", l, &a.xb, n_embd);
        p.matvec(&self.router, &a.xb, &mut a.router)?;
        p.tap("ffn_moe_logits", l, &a.router, self.n_expert);

        // Each token runs its own experts: the pass goes one token at a time here.
        let n_pass = core::mem::replace(&mut p.n, 1);
        let result = (0..n).try_for_each(|t| self.token_experts(p, a, t));
        p.n = n_pass;
        result?;
        p.tap("ffn_moe_out", l, &a.xb2, n_embd);
        p.add_rows(&mut a.x, &mut a.xb2, None, n_embd);
        p.tap("l_out", l, &a.x, n_embd);
        Ok(())
    }

    /// Token `t`'s experts: route, hint the chosen experts to the store, run each, and leave
    /// their weighted sum in row `t` of `xb2`.
    fn token_experts(&self, p: &mut Pass, a: &mut Activations, t: usize) -> Result<(), ModelError> {
        let (n_embd, n_ff) = (a.n_embd, self.n_ff);
        let chosen = self.route(row_mut(&mut a.router, self.n_expert, t));
        let mut hint = heapless::Vec::<WeightKey, { 3 * MAX_EXPERTS_USED }>::new();
        for &(e, _) in &chosen {
            for m in self.expert_matrices() {
                // Capacity is 3 x MAX_EXPERTS_USED, and at most that many are chosen.
                let _ = hint.push(WeightKey::expert(m.id, e));
            }
        }
        p.store.prefetch(&hint);
        a.moe_acc[..n_embd].fill(0.0);
        for &(e, w) in &chosen {
            let xb = row(&a.xb, n_embd, t);
            let (gate, up) = (&mut a.hb[..n_ff], &mut a.hb2[..n_ff]);
            p.expert_matvecs(xb, e, &mut [(&self.gate_exps, gate), (&self.up_exps, up)])?;
            (self.swiglu)(&mut a.hb[..n_ff], &a.hb2[..n_ff]);
            let out = row_mut(&mut a.xb2, n_embd, t);
            p.expert_matvecs(&a.hb[..n_ff], e, &mut [(&self.down_exps, out)])?;
            // ggml scales each expert's output, then adds them up in the router's order.
            let out = row(&a.xb2, n_embd, t);
            a.moe_acc[..n_embd]
                .iter_mut()
                .zip(out)
                .for_each(|(acc, o)| *acc += o * w);
        }
        row_mut(&mut a.xb2, n_embd, t).copy_from_slice(&a.moe_acc[..n_embd]);
        Ok(())
    }

    /// The `k` experts of largest probability (largest first; the lower index on a tie) and
    /// their weights, from one token's router logits (turned into probabilities in place).
    fn route(&self, logits: &mut [f32]) -> heapless::Vec<(u16, f32), MAX_EXPERTS_USED> {
        math::softmax(logits);
        let mut chosen = heapless::Vec::<(u16, f32), MAX_EXPERTS_USED>::new();
        for _ in 0..self.n_expert_used {
            let mut best: Option<usize> = None;
            for (e, &prob) in logits.iter().enumerate() {
                let taken = chosen.iter().any(|&(c, _)| c as usize == e);
                if !taken && best.is_none_or(|b| prob > logits[b]) {
                    best = Some(e);
                }
            }
            if let Some(e) = best {
                // n_expert_used <= MAX_EXPERTS_USED was checked with the hyperparameters.
                let _ = chosen.push((e as u16, logits[e]));
            }
        }
        if self.norm_weights {
            let sum: f32 = chosen.iter().map(|&(_, w)| w).sum();
            let sum = sum.max(MIN_WEIGHT_SUM);
            chosen.iter_mut().for_each(|(_, w)| *w /= sum);
        }
        chosen
    }
}
