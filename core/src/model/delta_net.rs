//! The recurrent token mixer of Qwen3.5 (`qwen35`): a Gated DeltaNet layer, as llama.cpp b11434
//! runs it (src/models/qwen35.cpp, delta-net-base.cpp, ggml's ssm_conv and gated_delta_net).
//! Instead of a KV cache that grows with the context it keeps a fixed state: the last K-1 inputs
//! of a causal convolution and one dv x dk matrix per value head.
//!
//! ```text
//! xb = rms_norm(x)                               attn_norm
//! c = Wqkv xb                                    [q | k | v], 2*dk*Hk + dv*Hv channels
//! z = Wgate xb                                   the output gate, dv*Hv
//! beta = sigmoid(Wbeta xb)                       one per value head
//! g = softplus(Walpha xb + dt_bias) * ssm_a      one per value head; ssm_a = -exp(A_log) < 0
//! c = silu(conv(conv_state, c))                  out[ch] = sum_j window[j][ch] * w[ch][j] over the
//!                                                last K inputs, oldest first (w[ch][K-1] is the
//!                                                current token's tap); no bias
//! q, k, v = split(c);  q, k = l2_norm per head   x / sqrt(sum x^2 + rms_eps)
//! for each value head h (key head h % Hk: heads are tiled, not interleaved):
//!   S = exp(g) S                                 S: dv x dk, row j = value dim, k contiguous
//!   d = beta (v - S k)                           the delta rule
//!   S = S + d k^T
//!   o = S q / sqrt(dk)
//! o = rms_norm(o) per head (ssm_norm) * silu(z)  gated RMSNorm
//! x = x + Wout o                                 ssm_out
//! ```
//! A prompt runs its matrices once for the batch, then the convolution and the recurrence token
//! by token: the state after a chunk is the state token-by-token decoding reaches (the same
//! operations in the same order; only the matrices' batched kernels may round differently).
//! llama.cpp runs a chunked (WY) form for prompts that reaches the same state up to rounding.
//!
//! The state layout is the one the fused step (`math::delta_rule_step`, through the kernel
//! set) reads and writes in place: per layer, the conv window `[channel][K-1]` (oldest first,
//! f32) and the matrices `[Hv][dv][dk]`, f32, or f16 with `--state-f16` (half the bytes read
//! and written per token; each value is widened on load and rounded on store).

use super::error::ModelError;
use super::matrix::{Loader, Matrix};
use super::pass::{per_token, split, SharedMut};
use super::pass::{row, Pass};
use super::state::Activations;
use crate::arena::{Arena, ArenaError, ArenaPlan, ArenaSlice, Part};
use crate::math::{self, DeltaRuleKernels};
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

/// The shape of a Gated DeltaNet layer, from the header (`ssm.*` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaNetShape {
    /// Key heads (`ssm.group_count`).
    pub n_k_heads: usize,
    /// Value heads (`ssm.time_step_rank`), a multiple of the key heads.
    pub n_v_heads: usize,
    /// dk = dv (`ssm.state_size`).
    pub head_dim: usize,
    /// Taps of the causal convolution (`ssm.conv_kernel`).
    pub conv_kernel: usize,
    /// The delta-rule matrices are kept as f16 (`--state-f16`), not f32: a run's choice, not
    /// the file's (false when read from the header).
    pub state_f16: bool,
}

impl DeltaNetShape {
    pub fn key_dim(&self) -> usize {
        self.n_k_heads * self.head_dim
    }
    pub fn value_dim(&self) -> usize {
        self.n_v_heads * self.head_dim
    }
    /// Channels of the convolution: q, k and v.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
    /// f32s of the conv window (the last K-1 inputs).
    pub fn conv_state_len(&self) -> usize {
        (self.conv_kernel - 1) * self.conv_dim()
    }
    /// f32s of the delta-rule matrices (dv x dk per value head).
    pub fn ssm_state_len(&self) -> usize {
        self.n_v_heads * self.head_dim * self.head_dim
    }
    /// Bytes of one delta-rule matrix value: 2 with `state_f16`, else 4.
    pub fn ssm_value_bytes(&self) -> usize {
        if self.state_f16 {
            2
        } else {
            4
        }
    }
    /// Bytes of the state: fixed, whatever the context.
    pub fn state_bytes(&self) -> u64 {
        4 * self.conv_state_len() as u64
            + self.ssm_value_bytes() as u64 * self.ssm_state_len() as u64
    }
}

/// A recurrent layer's state, carved from the state's arena, zeroed at the start of a sequence.
pub struct RecurrentState {
    /// `[conv_dim][K-1]`: each channel's last K-1 inputs, oldest first.
    pub conv: ArenaSlice<f32>,
    /// `[n_v_heads][dv][dk]` f32; empty when the state is kept as f16.
    pub ssm: ArenaSlice<f32>,
    /// The same as f16 bits with `state_f16`; else empty.
    pub ssm_f16: ArenaSlice<u16>,
    /// Copies of `conv` and `ssm` (and of `ssm_f16`, in `steps_f16`) after each of the first
    /// tokens of a verify pass (a pass whose `Pass::keep_steps` is set), back to back: a
    /// rejected draft goes back to the state after the last accepted token by copying one of
    /// them back ([`RecurrentState::restore_step`]), instead of running the accepted tokens
    /// again through the whole model. Empty when the state never verifies drafts.
    pub steps: ArenaSlice<f32>,
    pub steps_f16: ArenaSlice<u16>,
}

impl RecurrentState {
    /// (conv, f32 matrix values, f16 matrix values) of one copy of the state.
    fn lens(shape: &DeltaNetShape) -> (usize, usize, usize) {
        let conv = shape.conv_state_len();
        match shape.state_f16 {
            false => (conv, shape.ssm_state_len(), 0),
            true => (conv, 0, shape.ssm_state_len()),
        }
    }

    /// Counts, in `Part::RecurrentState`, a state that keeps a copy of itself after each of
    /// the first `n_steps` tokens of a verify pass.
    pub fn plan(plan: &mut ArenaPlan, shape: &DeltaNetShape, n_steps: usize) {
        RecurrentState::plan_lens(plan, RecurrentState::lens(shape), n_steps)
    }

    /// [`RecurrentState::plan`] for a state that is a conv window of `conv` f32s alone (a short
    /// convolution, short_conv.rs).
    pub fn plan_conv(plan: &mut ArenaPlan, conv: usize, n_steps: usize) {
        RecurrentState::plan_lens(plan, (conv, 0, 0), n_steps)
    }

    /// [`RecurrentState::plan`] for a conv window of `conv` f32s and an f32 state of `ssm`
    /// values (a Mamba-2 layer, mamba2.rs).
    pub fn plan_conv_ssm(plan: &mut ArenaPlan, conv: usize, ssm: usize, n_steps: usize) {
        RecurrentState::plan_lens(plan, (conv, ssm, 0), n_steps)
    }

    fn plan_lens(plan: &mut ArenaPlan, lens: (usize, usize, usize), n_steps: usize) {
        let (conv, n32, n16) = lens;
        let part = Part::RecurrentState;
        plan.add::<f32>(part, 1, conv);
        plan.add::<f32>(part, 1, n32);
        plan.add::<u16>(part, 1, n16);
        plan.add::<f32>(part, n_steps, conv + n32);
        plan.add::<u16>(part, n_steps, n16);
    }

    /// Takes the state [`RecurrentState::plan`] counted from `arena`.
    ///
    /// # Safety
    /// The region under `arena` must outlive the state (see [`ArenaSlice::detach`]).
    pub unsafe fn carve(
        arena: &mut Arena<'_>,
        shape: &DeltaNetShape,
        n_steps: usize,
    ) -> Result<RecurrentState, ArenaError> {
        // SAFETY: the caller's promise.
        unsafe { RecurrentState::carve_lens(arena, RecurrentState::lens(shape), n_steps) }
    }

    /// Takes the state [`RecurrentState::plan_conv`] counted from `arena`.
    ///
    /// # Safety
    /// As [`RecurrentState::carve`].
    pub unsafe fn carve_conv(
        arena: &mut Arena<'_>,
        conv: usize,
        n_steps: usize,
    ) -> Result<RecurrentState, ArenaError> {
        // SAFETY: the caller's promise.
        unsafe { RecurrentState::carve_lens(arena, (conv, 0, 0), n_steps) }
    }

    /// Takes the state [`RecurrentState::plan_conv_ssm`] counted from `arena`.
    ///
    /// # Safety
    /// As [`RecurrentState::carve`].
    pub unsafe fn carve_conv_ssm(
        arena: &mut Arena<'_>,
        conv: usize,
        ssm: usize,
        n_steps: usize,
    ) -> Result<RecurrentState, ArenaError> {
        // SAFETY: the caller's promise.
        unsafe { RecurrentState::carve_lens(arena, (conv, ssm, 0), n_steps) }
    }

    unsafe fn carve_lens(
        arena: &mut Arena<'_>,
        lens: (usize, usize, usize),
        n_steps: usize,
    ) -> Result<RecurrentState, ArenaError> {
        let (conv, n32, n16) = lens;
        let part = Part::RecurrentState;
        // SAFETY: the caller's promise.
        unsafe {
            Ok(RecurrentState {
                conv: arena.take_detached(part, 1, conv)?,
                ssm: arena.take_detached(part, 1, n32)?,
                ssm_f16: arena.take_detached(part, 1, n16)?,
                steps: arena.take_detached(part, n_steps, conv + n32)?,
                steps_f16: arena.take_detached(part, n_steps, n16)?,
            })
        }
    }

    pub fn bytes(&self) -> usize {
        4 * (self.conv.len() + self.ssm.len() + self.steps.len())
            + 2 * (self.ssm_f16.len() + self.steps_f16.len())
    }

    /// Puts back the state kept after token `t` of the last verify pass.
    pub fn restore_step(&mut self, t: usize) {
        let (c, len, len16) = self.step_lens();
        let step = &self.steps[t * len..(t + 1) * len];
        self.conv.copy_from_slice(&step[..c]);
        self.ssm.copy_from_slice(&step[c..]);
        self.ssm_f16
            .copy_from_slice(&self.steps_f16[t * len16..(t + 1) * len16]);
    }

    /// How many step copies the state has room for.
    pub(super) fn n_steps(&self) -> usize {
        let (_, len, len16) = self.step_lens();
        match (len, len16) {
            (0, 0) => 0,
            (0, len16) => self.steps_f16.len() / len16,
            (len, _) => self.steps.len() / len,
        }
    }

    /// (conv, f32 values, f16 values) of one copy.
    pub(super) fn step_lens(&self) -> (usize, usize, usize) {
        let c = self.conv.len();
        (c, c + self.ssm.len(), self.ssm_f16.len())
    }

    /// The state of an empty sequence.
    pub fn clear(&mut self) {
        self.conv.fill(0.0);
        self.ssm.fill(0.0);
        self.ssm_f16.fill(0);
    }
}

/// Value heads' state values per layer from which the heads are split over the workers
/// (below it, waking them costs more than the step: the synthetic CI model's 4 x 32 x 32).
const PARALLEL_STATE_VALUES: usize = 1 << 15;

/// Convolution values (tokens x channels) of a pass from which the channels are split over the
/// workers (one token of the 0.8B shape's 6144 channels is not worth waking them for).
const PARALLEL_CONV_VALUES: usize = 1 << 14;

#[derive(Debug, Clone)]
pub struct DeltaNet {
    pub shape: DeltaNetShape,
    pub attn_norm: Vec<f32>,
    /// `attn_qkv`: n_embd -> conv_dim.
    pub w_qkv: Matrix,
    /// `attn_gate` (z): n_embd -> value_dim.
    pub w_gate: Matrix,
    /// `ssm_beta`: n_embd -> n_v_heads.
    pub w_beta: Matrix,
    /// `ssm_alpha`: n_embd -> n_v_heads.
    pub w_alpha: Matrix,
    /// `ssm_conv1d`: `[conv_dim][K]`.
    pub conv: Vec<f32>,
    /// `ssm_dt.bias`: `[n_v_heads]`.
    pub dt_bias: Vec<f32>,
    /// `ssm_a` = -exp(A_log): `[n_v_heads]`.
    pub a: Vec<f32>,
    /// `ssm_norm`: `[dv]`, shared by the heads.
    pub ssm_norm: Vec<f32>,
    /// `ssm_out`: value_dim -> n_embd.
    pub w_out: Matrix,
    /// The fused one-token step, the kernel set's faces for f32 and f16 state.
    pub delta_rule: DeltaRuleKernels,
    /// The kernel set's SwiGLU (`gate = silu(gate) * up`, `math::swiglu`'s bits), for the
    /// conv output's SiLU (times ones) and the output gate's silu(z) * o.
    pub swiglu: fn(&mut [f32], &[f32]),
}

/// The `up` of a SwiGLU that is a plain SiLU: x * 1.0 is x, bit for bit.
static ONES: [f32; 1024] = [1.0; 1024];

impl DeltaNet {
    /// Loads layer `l`'s Gated DeltaNet tensors (`blk.{l}.attn_qkv`, `attn_gate`, `ssm_*`).
    pub fn load(
        ld: &Loader,
        l: usize,
        n_embd: usize,
        shape: DeltaNetShape,
        delta_rule: DeltaRuleKernels,
    ) -> Result<DeltaNet, ModelError> {
        let n = |s: &str| format!("blk.{l}.{s}");
        let h_v = shape.n_v_heads;
        Ok(DeltaNet {
            shape,
            attn_norm: ld.vector(&n("attn_norm.weight"), n_embd)?,
            w_qkv: ld.matrix(&n("attn_qkv.weight"), n_embd, shape.conv_dim())?,
            w_gate: ld.matrix(&n("attn_gate.weight"), n_embd, shape.value_dim())?,
            w_beta: ld.matrix(&n("ssm_beta.weight"), n_embd, h_v)?,
            w_alpha: ld.matrix(&n("ssm_alpha.weight"), n_embd, h_v)?,
            conv: ld.f32_rows(&n("ssm_conv1d.weight"), shape.conv_kernel, shape.conv_dim())?,
            dt_bias: ld.vector(&n("ssm_dt.bias"), h_v)?,
            a: ld.vector(&n("ssm_a"), h_v)?,
            ssm_norm: ld.vector(&n("ssm_norm.weight"), shape.head_dim)?,
            w_out: ld.matrix(&n("ssm_out.weight"), shape.value_dim(), n_embd)?,
            delta_rule,
            swiglu: ld.kernels.swiglu(),
        })
    }

    /// The weights in the order `forward` asks for them.
    pub fn matrices(&self) -> Vec<&Matrix> {
        vec![
            &self.w_qkv,
            &self.w_gate,
            &self.w_beta,
            &self.w_alpha,
            &self.w_out,
        ]
    }

    /// For each of the pass's tokens, in order: x += Wout gated_norm(delta_rule(conv(Wqkv xb))).
    /// The matrices run once for all tokens; the convolution and the recurrence token by token.
    pub fn forward(
        &self,
        p: &mut Pass,
        l: usize,
        a: &mut Activations,
        state: &mut RecurrentState,
    ) -> Result<(), ModelError> {
        let sh = &self.shape;
        let (n, n_embd) = (p.n, a.n_embd);
        let (conv_dim, key_dim, value_dim, h_v) =
            (sh.conv_dim(), sh.key_dim(), sh.value_dim(), sh.n_v_heads);
        p.rms_norm_rows(&mut a.xb, &a.x, &self.attn_norm, n_embd);
        p.tap("attn_norm", l, &a.xb, n_embd);
        {
            let (beta, alpha) = a.ssm_gates.split_at_mut(n * h_v);
            p.matvecs(
                &a.xb,
                &mut [
                    (&self.w_qkv, &mut a.qkv[..]),
                    (&self.w_gate, &mut a.gate[..]),
                    (&self.w_beta, beta),
                    (&self.w_alpha, alpha),
                ],
            )?;
        }
        p.tap("linear_attn_qkv_mixed", l, &a.qkv, conv_dim);
        p.tap("z", l, &a.gate, value_dim);

        // The recurrence runs token by token, but each stage is independent across channels
        // (the convolution), tokens (the SiLU and norms) or heads (the delta rule), so a
        // prompt's stages split over the workers; every value gets the same operations in the
        // same order as one token at a time, so the same bits.
        // A verify pass keeps the state after each of its tokens but the last (as many as the
        // state has room for).
        let n_steps = match p.keep_steps {
            true => n.saturating_sub(1).min(state.n_steps()),
            false => 0,
        };
        self.conv_rows(p, state, &mut a.qkv[..n * conv_dim], n_steps);
        let swiglu = self.swiglu;
        let qkv = SharedMut::new(&mut a.qkv[..n * conv_dim]);
        per_token(p.par, n, &|_, t| {
            // SAFETY: token t's row is written by this worker only.
            let c = unsafe { qkv.slice(t * conv_dim, conv_dim) };
            // silu(c) as SwiGLU with ones: the SIMD face, math::silu's bits.
            for ch in c.chunks_mut(ONES.len()) {
                swiglu(ch, &ONES[..ch.len()]);
            }
        });
        p.tap("conv_output_silu", l, &a.qkv, conv_dim);
        let (hd, eps) = (sh.head_dim, p.rms_eps);
        let qkv = SharedMut::new(&mut a.qkv[..n * conv_dim]);
        per_token(p.par, n, &|_, t| {
            // SAFETY: as above.
            let c = unsafe { qkv.slice(t * conv_dim, 2 * key_dim) };
            c.chunks_exact_mut(hd)
                .for_each(|h| math::l2_norm_in_place(h, eps));
        });
        self.delta_rule_heads(p, state, &a.qkv, &a.ssm_gates, &mut a.att_out, n_steps);
        p.tap("attn_output", l, &a.att_out, value_dim);
        // Gated RMSNorm: each head's output normed, times silu(z) (as SwiGLU into z, whose
        // row is not read again: silu(z) * o has the bits of o * silu(z)).
        let outs = SharedMut::new(&mut a.att_out[..n * value_dim]);
        let gates = SharedMut::new(&mut a.gate[..n * value_dim]);
        let ssm_norm = &self.ssm_norm[..];
        per_token(p.par, n, &|_, t| {
            // SAFETY: token t's rows are written by this worker only.
            let (out, z) = unsafe {
                (
                    outs.slice(t * value_dim, value_dim),
                    gates.slice(t * value_dim, value_dim),
                )
            };
            for (o, z) in out.chunks_exact_mut(hd).zip(z.chunks_exact_mut(hd)) {
                math::rms_norm_in_place(o, ssm_norm, eps);
                swiglu(z, o);
                o.copy_from_slice(z);
            }
        });
        p.tap("final_output", l, &a.att_out, value_dim);
        p.matvec(&self.w_out, &a.att_out, &mut a.xb2)?;
        p.tap("linear_attn_out", l, &a.xb2, n_embd);
        p.add_rows(&mut a.x, &mut a.xb2, None, n_embd);
        p.tap("attn_residual", l, &a.x, n_embd);
        Ok(())
    }

    /// The delta rule on every value head for each of the pass's tokens in order (see
    /// `math::delta_rule_step`), the state read and written in place; `qkv` holds each token's
    /// normed q, k and v, `gates` the pass's beta rows then its alpha rows. Heads are
    /// independent, so a layer with a big state (Qwen3.5-0.8B: 16 heads of 128 x 128, 1 MB per
    /// token) or a prompt splits its heads over the workers, each running its heads through
    /// every token (a head's 64 KB stays in cache from token to token); each head's steps are
    /// the same whichever worker runs them. Each head's state after each of the first `n_steps`
    /// tokens is copied into its place in the state's step copies.
    fn delta_rule_heads(
        &self,
        p: &Pass,
        state: &mut RecurrentState,
        qkv: &[f32],
        gates: &[f32],
        out: &mut [f32],
        n_steps: usize,
    ) {
        let sh = &self.shape;
        let n = p.n;
        let (h_v, hd) = (sh.n_v_heads, sh.head_dim);
        let (conv_dim, key_dim, value_dim) = (sh.conv_dim(), sh.key_dim(), sh.value_dim());
        let per_head = hd * hd;
        let dr = self.delta_rule;
        let (conv_len, step_len, step_len16) = state.step_lens();
        let shared_out = SharedMut::new(&mut out[..n * value_dim]);
        let shared_f32 = SharedMut::new(&mut state.ssm);
        let shared_f16 = SharedMut::new(&mut state.ssm_f16);
        let steps = SharedMut::new(&mut state.steps);
        let steps_f16 = SharedMut::new(&mut state.steps_f16);
        let f16 = sh.state_f16;
        let head = |h: usize| {
            let kh = h % sh.n_k_heads;
            for t in 0..n {
                let c = row(qkv, conv_dim, t);
                let q = &c[kh * hd..][..hd];
                let k = &c[key_dim + kh * hd..][..hd];
                let v = &c[2 * key_dim + h * hd..][..hd];
                let (beta, alpha) = (gates[t * h_v + h], gates[(n + t) * h_v + h]);
                let g = math::softplus(alpha + self.dt_bias[h]) * self.a[h];
                let (decay, beta) = (libm::expf(g), math::sigmoid(beta));
                // SAFETY: head h owns state[h * per_head..][..per_head], its slices of the
                // step copies and out[t * value_dim + h * hd..][..hd]; every head runs once,
                // so no two live slices overlap.
                let o = unsafe { shared_out.slice(t * value_dim + h * hd, hd) };
                if f16 {
                    let s = unsafe { shared_f16.slice(h * per_head, per_head) };
                    (dr.f16)(s, q, k, v, decay, beta, o);
                    if t < n_steps {
                        let at = t * step_len16 + h * per_head;
                        unsafe { steps_f16.slice(at, per_head) }.copy_from_slice(s);
                    }
                } else {
                    let s = unsafe { shared_f32.slice(h * per_head, per_head) };
                    (dr.f32)(s, q, k, v, decay, beta, o);
                    if t < n_steps {
                        let at = t * step_len + conv_len + h * per_head;
                        unsafe { steps.slice(at, per_head) }.copy_from_slice(s);
                    }
                }
            }
        };
        let n_workers = p.par.n_threads().clamp(1, h_v);
        if n_workers == 1 || n * h_v * per_head < PARALLEL_STATE_VALUES {
            (0..h_v).for_each(head);
            return;
        }
        p.par.run(&|w| {
            if w < n_workers {
                let (h0, h1) = split(h_v, n_workers, w);
                (h0..h1).for_each(head);
            }
        });
    }

    /// The causal depthwise convolution over the pass's tokens, in place on `qkv` (each
    /// token's `conv_dim` channels); the window moves on by one input per token. Channels are
    /// independent, so a prompt splits them over the workers; each
    /// channel's window after each of the first `n_steps` tokens goes into the step copies.
    fn conv_rows(&self, p: &Pass, state: &mut RecurrentState, qkv: &mut [f32], n_steps: usize) {
        let (k, conv_dim) = (self.shape.conv_kernel, self.shape.conv_dim());
        causal_conv_rows(p, &self.conv, k, conv_dim, state, qkv, n_steps);
    }
}

/// The causal depthwise convolution of `k` taps (`weights`: `[conv_dim][k]`, oldest tap first;
/// no bias) over the pass's tokens, in place on `x` (each token's `conv_dim` channels), the
/// window in `state.conv` (`[conv_dim][k-1]`, oldest first) moving on by one input per token,
/// as ggml's ssm_conv sums it. Channels are independent, so a prompt splits them over the
/// workers; each channel's window after each of the first `n_steps` tokens goes into the
/// step copies. Shared by the Gated DeltaNet and the short convolution (short_conv.rs).
pub(super) fn causal_conv_rows(
    p: &Pass,
    weights: &[f32],
    k: usize,
    conv_dim: usize,
    state: &mut RecurrentState,
    x: &mut [f32],
    n_steps: usize,
) {
    let n = p.n;
    let kept = k - 1;
    let (_, step_len, _) = state.step_lens();
    let window = SharedMut::new(&mut state.conv);
    let steps = SharedMut::new(&mut state.steps);
    let x = SharedMut::new(x);
    let conv = ConvPass {
        weights,
        k,
        conv_dim,
        n,
        x: &x,
        steps: &steps,
        step_len,
        n_steps,
    };
    let channels = |ch0: usize, ch1: usize| {
        // SAFETY: channels ch0..ch1's windows, their values in every token's row and their
        // place in the step copies belong to this worker only.
        let windows = unsafe { window.slice(ch0 * kept, (ch1 - ch0) * kept) };
        let mut ch = ch0;
        // Blocks of CONV_LANES channels side by side (vectorised), the rest one by one.
        while ch + CONV_LANES <= ch1 && (2..=4).contains(&k) {
            let win = &mut windows[(ch - ch0) * kept..][..CONV_LANES * kept];
            unsafe {
                match k {
                    2 => conv.block::<2>(ch, win),
                    3 => conv.block::<3>(ch, win),
                    _ => conv.block::<4>(ch, win),
                }
            }
            ch += CONV_LANES;
        }
        for ch in ch..ch1 {
            let win = &mut windows[(ch - ch0) * kept..][..kept];
            unsafe { conv.channel(ch, win) };
        }
    };
    let n_workers = p.par.n_threads().max(1);
    if n_workers == 1 || n * conv_dim < PARALLEL_CONV_VALUES {
        channels(0, conv_dim);
        return;
    }
    p.par.run(&|w| {
        let (ch0, ch1) = split(conv_dim, n_workers, w);
        channels(ch0, ch1);
    });
}

/// Channels side by side in [`ConvPass::block`]: one AVX2 vector of f32.
const CONV_LANES: usize = 8;

/// One pass's causal convolution, as the workers share it: each runs its own channels
/// through every token.
struct ConvPass<'a> {
    /// `[conv_dim][k]`, oldest tap first.
    weights: &'a [f32],
    k: usize,
    conv_dim: usize,
    n: usize,
    /// The pass's rows, `conv_dim` channels per token, convolved in place.
    x: &'a SharedMut<f32>,
    /// The state's step copies (`step_len` values each, the conv windows first), written
    /// after each of the first `n_steps` tokens.
    steps: &'a SharedMut<f32>,
    step_len: usize,
    n_steps: usize,
}

impl ConvPass<'_> {
    /// Channel `ch` through every token; `past` is its window (`k - 1` inputs, oldest first).
    ///
    /// # Safety
    /// Channel `ch` belongs to the caller alone (its values in `x` and its step copies).
    unsafe fn channel(&self, ch: usize, past: &mut [f32]) {
        let (k, kept) = (self.k, self.k - 1);
        let w = &self.weights[ch * k..][..k];
        for t in 0..self.n {
            let x = &mut self.x.slice(t * self.conv_dim + ch, 1)[0];
            // ggml's ssm_conv: one f32 sum over the taps, oldest input first.
            let mut sum = 0.0f32;
            for (p, w) in past.iter().zip(w) {
                sum += p * w;
            }
            sum += *x * w[kept];
            if kept > 0 {
                past.copy_within(1.., 0);
                past[kept - 1] = *x;
            }
            *x = sum;
            if t < self.n_steps {
                let at = t * self.step_len + ch * kept;
                self.steps.slice(at, kept).copy_from_slice(past);
            }
        }
    }

    /// [`ConvPass::channel`] for the `CONV_LANES` channels from `ch0` at once, `K` taps: the
    /// windows and taps held lane by lane, so each step is a few vector multiplies and adds
    /// with every channel's operations in `channel`'s order (the same bits).
    ///
    /// # Safety
    /// As [`ConvPass::channel`], for each of the channels; `K == self.k`.
    #[allow(clippy::needless_range_loop)] // lanes and taps indexed side by side read plainer
    unsafe fn block<const K: usize>(&self, ch0: usize, windows: &mut [f32]) {
        const L: usize = CONV_LANES;
        let kept = K - 1;
        // taps[j][i], win[j][i]: tap j and the j-th oldest input of channel ch0 + i.
        let mut taps = [[0f32; L]; K];
        let mut win = [[0f32; L]; K];
        for i in 0..L {
            for j in 0..K {
                taps[j][i] = self.weights[(ch0 + i) * K + j];
            }
            for j in 0..kept {
                win[j][i] = windows[i * kept + j];
            }
        }
        for t in 0..self.n {
            let x: &mut [f32; L] = self.x.slice(t * self.conv_dim + ch0, L).try_into().unwrap();
            let mut sum = [0f32; L];
            for j in 0..kept {
                for i in 0..L {
                    sum[i] += win[j][i] * taps[j][i];
                }
            }
            for i in 0..L {
                sum[i] += x[i] * taps[kept][i];
            }
            for j in 1..kept {
                win[j - 1] = win[j];
            }
            win[kept - 1] = *x;
            *x = sum;
            if t < self.n_steps {
                for i in 0..L {
                    let step = self.steps.slice(t * self.step_len + (ch0 + i) * kept, kept);
                    for (j, s) in step.iter_mut().enumerate() {
                        *s = win[j][i];
                    }
                }
            }
        }
        for i in 0..L {
            for j in 0..kept {
                windows[i * kept + j] = win[j][i];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::testutil::XorShift;

    /// The vectorised block of channels gives each channel's one-by-one bits: outputs, the
    /// windows left behind and the step copies, for 2 to 4 taps and 1 to 9 tokens (values of
    /// mixed sign and size, -0.0 and a subnormal among them).
    #[test]
    fn conv_block_gives_the_bits_of_one_channel_at_a_time() {
        let mut rng = XorShift(0xC0_4F);
        let mut value = |i: usize| match i % 17 {
            3 => -0.0,
            11 => 1e-40,
            _ => (rng.unit() * 2.0 - 1.0) * [1.0, 1e3, 1e-3][i % 3],
        };
        for k in 2..=4 {
            let kept = k - 1;
            let conv_dim = 3 * CONV_LANES;
            let weights: Vec<f32> = (0..conv_dim * k).map(&mut value).collect();
            for n in 1..=9 {
                let n_steps = n - 1;
                let step_len = conv_dim * kept + 5;
                let x0: Vec<f32> = (0..n * conv_dim).map(&mut value).collect();
                let w0: Vec<f32> = (0..conv_dim * kept).map(&mut value).collect();
                let run = |blocks: bool| {
                    let (mut x, mut win) = (x0.clone(), w0.clone());
                    let mut steps = vec![f32::NAN; n_steps * step_len];
                    let (xs, ss) = (SharedMut::new(&mut x), SharedMut::new(&mut steps));
                    let conv = ConvPass {
                        weights: &weights,
                        k,
                        conv_dim,
                        n,
                        x: &xs,
                        steps: &ss,
                        step_len,
                        n_steps,
                    };
                    for ch0 in (0..conv_dim).step_by(CONV_LANES) {
                        let w = &mut win[ch0 * kept..(ch0 + CONV_LANES) * kept];
                        // SAFETY: one thread, each channel once.
                        unsafe {
                            match (blocks, k) {
                                (true, 2) => conv.block::<2>(ch0, w),
                                (true, 3) => conv.block::<3>(ch0, w),
                                (true, _) => conv.block::<4>(ch0, w),
                                (false, _) => {
                                    for (i, w) in w.chunks_exact_mut(kept).enumerate() {
                                        conv.channel(ch0 + i, w);
                                    }
                                }
                            }
                        }
                    }
                    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    (bits(&x), bits(&win), bits(&steps))
                };
                assert_eq!(run(true), run(false), "{k} taps, {n} tokens");
            }
        }
    }
}
