//! The dense feed-forward network: a gated MLP.
//!
//! ```text
//! xb = rms_norm(x)                     ffn_norm (Qwen3.5: post_attention_norm)
//! h = act(Wgate xb) * (Wup xb)         SiLU (Llama, Qwen) or GELU-tanh (Gemma)
//!   or g|u = Wup xb; h = act(g) * u    gate and up fused in one matrix (Phi-3)
//! f = Wdown h;  f = rms_norm(f)        post_ffw_norm: Gemma 3
//! x = x + f
//! ```

use super::error::ModelError;
use super::matrix::{Loader, Matrix};
use super::pass::{per_token, row, Pass, SharedMut};
use super::state::Activations;
use crate::math::GeluTable;
use alloc::format;
use alloc::sync::Arc;
use alloc::vec::Vec;

/// The gate's activation: SiLU through the kernel set's SwiGLU face, GELU-tanh through
/// llama.cpp's f16 table (built once per model, shared by its layers), or ReLU.
#[derive(Debug, Clone)]
pub enum Gate {
    Silu { swiglu: fn(&mut [f32], &[f32]) },
    GeluTanh { table: Arc<GeluTable> },
    Relu,
}

#[derive(Debug, Clone)]
pub struct DenseFfn {
    pub n_ff: usize,
    pub ffn_norm: Vec<f32>,
    /// `None`: the gate's rows are the first `n_ff` of `w_up`'s 2 x `n_ff` (Phi-3).
    pub w_gate: Option<Matrix>,
    pub w_up: Matrix,
    pub w_down: Matrix,
    pub post_ffn_norm: Option<Vec<f32>>,
    pub gate: Gate,
}

impl DenseFfn {
    /// Loads layer `l`'s FFN tensors (`blk.{l}.ffn_*`), its input norm `blk.{l}.{norm}`.
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        ld: &Loader,
        l: usize,
        norm: &str,
        n_embd: usize,
        n_ff: usize,
        fused_gate_up: bool,
        post_norm: bool,
        gate: Gate,
    ) -> Result<DenseFfn, ModelError> {
        let n = |s: &str| format!("blk.{l}.{s}");
        let (w_gate, n_up) = match fused_gate_up {
            true => (None, 2 * n_ff),
            false => (Some(ld.matrix(&n("ffn_gate.weight"), n_embd, n_ff)?), n_ff),
        };
        Ok(DenseFfn {
            n_ff,
            ffn_norm: ld.vector(&n(norm), n_embd)?,
            w_gate,
            w_up: ld.matrix(&n("ffn_up.weight"), n_embd, n_up)?,
            w_down: ld.matrix(&n("ffn_down.weight"), n_ff, n_embd)?,
            post_ffn_norm: ld.vector_if(post_norm, &n("post_ffw_norm.weight"), n_embd)?,
            gate,
        })
    }

    /// The weights in the order `forward` asks for them.
    pub fn matrices(&self) -> Vec<&Matrix> {
        let gate = self.w_gate.as_ref();
        gate.into_iter().chain([&self.w_up, &self.w_down]).collect()
    }

    /// For each of the pass's tokens: x += (post-norm of) Wdown (act(Wgate xb) * Wup xb), with
    /// xb = rms_norm(x).
    pub fn forward(&self, p: &mut Pass, l: usize, a: &mut Activations) -> Result<(), ModelError> {
        let (n, n_embd, n_ff) = (p.n, a.n_embd, self.n_ff);
        p.rms_norm_rows(&mut a.xb, &a.x, &self.ffn_norm, n_embd);
        p.tap("ffn_norm", l, &a.xb, n_embd);
        match &self.w_gate {
            Some(w_gate) => p.matvecs(
                &a.xb,
                &mut [(w_gate, &mut a.hb[..]), (&self.w_up, &mut a.hb2[..])],
            )?,
            None => {
                // Rows of [gate | up]: the gates move to hb, the ups to the front of hb2's rows
                // (token t's up moves to row t of width n_ff, no later than where it was).
                p.matvec(&self.w_up, &a.xb, &mut a.hb2)?;
                for t in 0..n {
                    let src = t * 2 * n_ff;
                    a.hb[t * n_ff..][..n_ff].copy_from_slice(&a.hb2[src..][..n_ff]);
                    a.hb2.copy_within(src + n_ff..src + 2 * n_ff, t * n_ff);
                }
            }
        }
        if let Some(f) = p.tapping() {
            for t in 0..n {
                f("ffn_gate", l, row(&a.hb, n_ff, t));
                f("ffn_up", l, row(&a.hb2, n_ff, t));
            }
        }
        let gates = SharedMut::new(&mut a.hb[..n * n_ff]);
        let ups = &a.hb2;
        per_token(p.par, n, &|_, t| {
            // SAFETY: token t's row is written by this worker only.
            let gate = unsafe { gates.slice(t * n_ff, n_ff) };
            let up = row(ups, n_ff, t);
            match &self.gate {
                Gate::Silu { swiglu } => swiglu(gate, up),
                Gate::Relu => crate::math::reglu(gate, up),
                Gate::GeluTanh { table } => gate
                    .iter_mut()
                    .zip(up)
                    .for_each(|(g, u)| *g = table.gelu(*g) * u),
            }
        });
        p.tap("ffn_act", l, &a.hb, n_ff);
        p.matvec(&self.w_down, &a.hb, &mut a.xb2)?;
        p.tap("ffn_out", l, &a.xb2, n_embd);
        p.add_rows(&mut a.x, &mut a.xb2, self.post_ffn_norm.as_deref(), n_embd);
        p.tap("l_out", l, &a.x, n_embd);
        Ok(())
    }
}
