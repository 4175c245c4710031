//! The short-convolution token mixer of LFM2 (`lfm2`, Liquid's hybrid), as llama.cpp b11434
//! runs it (src/models/lfm2.cpp, build_shortconv_block; ggml's ssm_conv). Instead of a KV cache
//! it keeps the last L-1 gated inputs of each channel (L = `shortconv.l_cache`, 3 in the real
//! models):
//!
//! ```text
//! xb = rms_norm(x)                         attn_norm (LFM2's operator_norm)
//! [b | c | u] = Win xb                     shortconv.in_proj: n_embd -> 3 n_embd, in that order
//! bx = b * u                               per channel
//! s = conv(window, bx)                     out[ch] = sum_j window[j][ch] * w[ch][j] over the last
//!                                          L inputs, oldest first (w[ch][L-1] is the current
//!                                          token's tap); no bias, no activation
//! y = c * s
//! x = x + Wout y                           shortconv.out_proj
//! ```
//! A prompt runs its two matrices once for the batch and the convolution token by token
//! (delta_net.rs's `causal_conv_rows`): the window after a chunk is the one token-by-token
//! decoding reaches, bit for bit. The state is a [`RecurrentState`] with a conv window alone,
//! so a verify pass keeps its copies and a rejected draft goes back as a Gated DeltaNet's does.

use super::delta_net::{causal_conv_rows, RecurrentState};
use super::error::ModelError;
use super::matrix::{Loader, Matrix};
use super::pass::{per_token, Pass, SharedMut};
use super::state::Activations;
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

/// The shape of a short-convolution layer, from the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShortConvShape {
    /// Channels: the embedding width.
    pub channels: usize,
    /// Taps of the convolution (`shortconv.l_cache`), at least 2.
    pub l_cache: usize,
}

impl ShortConvShape {
    /// in_proj's output: b, c and x.
    pub fn in_dim(&self) -> usize {
        3 * self.channels
    }
    /// f32s of the conv window (the last L-1 inputs of each channel).
    pub fn conv_state_len(&self) -> usize {
        (self.l_cache - 1) * self.channels
    }
    /// Bytes of the state: fixed, whatever the context.
    pub fn state_bytes(&self) -> u64 {
        4 * self.conv_state_len() as u64
    }
}

#[derive(Debug, Clone)]
pub struct ShortConv {
    pub shape: ShortConvShape,
    pub attn_norm: Vec<f32>,
    /// `shortconv.in_proj`: n_embd -> 3 n_embd ([b | c | x]).
    pub w_in: Matrix,
    /// `shortconv.conv`: `[channels][l_cache]`, oldest tap first.
    pub conv: Vec<f32>,
    /// `shortconv.out_proj`: n_embd -> n_embd.
    pub w_out: Matrix,
}

impl ShortConv {
    /// Loads layer `l`'s short-convolution tensors (`blk.{l}.attn_norm`, `shortconv.*`).
    pub fn load(ld: &Loader, l: usize, shape: ShortConvShape) -> Result<ShortConv, ModelError> {
        let n = |s: &str| format!("blk.{l}.{s}");
        let d = shape.channels;
        Ok(ShortConv {
            shape,
            attn_norm: ld.vector(&n("attn_norm.weight"), d)?,
            w_in: ld.matrix(&n("shortconv.in_proj.weight"), d, shape.in_dim())?,
            conv: ld.f32_rows(&n("shortconv.conv.weight"), shape.l_cache, d)?,
            w_out: ld.matrix(&n("shortconv.out_proj.weight"), d, d)?,
        })
    }

    /// The weights in the order `forward` asks for them.
    pub fn matrices(&self) -> Vec<&Matrix> {
        vec![&self.w_in, &self.w_out]
    }

    /// For each of the pass's tokens, in order: x += Wout (c * conv(b * x)).
    pub fn forward(
        &self,
        p: &mut Pass,
        l: usize,
        a: &mut Activations,
        state: &mut RecurrentState,
    ) -> Result<(), ModelError> {
        let (n, n_embd) = (p.n, a.n_embd);
        let (d, in_dim) = (self.shape.channels, self.shape.in_dim());
        p.rms_norm_rows(&mut a.xb, &a.x, &self.attn_norm, n_embd);
        p.tap("attn_norm", l, &a.xb, n_embd);
        p.matvec(&self.w_in, &a.xb, &mut a.qkv)?;
        p.tap("conv.in_proj", l, &a.qkv, in_dim);
        // bx = b * x, each token's row into att_out (the conv's input, convolved in place).
        let bcx = &a.qkv[..n * in_dim];
        let out = SharedMut::new(&mut a.att_out[..n * d]);
        per_token(p.par, n, &|_, t| {
            // SAFETY: token t's row is written by this worker only.
            let o = unsafe { out.slice(t * d, d) };
            let r = &bcx[t * in_dim..][..in_dim];
            for ((o, b), x) in o.iter_mut().zip(&r[..d]).zip(&r[2 * d..]) {
                *o = b * x;
            }
        });
        // A verify pass keeps the window after each of its tokens but the last (as many as
        // the state has room for).
        let n_steps = match p.keep_steps {
            true => n.saturating_sub(1).min(state.n_steps()),
            false => 0,
        };
        let k = self.shape.l_cache;
        causal_conv_rows(p, &self.conv, k, d, state, &mut a.att_out[..n * d], n_steps);
        p.tap("conv.conv", l, &a.att_out, d);
        // y = c * conv_out
        let out = SharedMut::new(&mut a.att_out[..n * d]);
        per_token(p.par, n, &|_, t| {
            // SAFETY: as above.
            let o = unsafe { out.slice(t * d, d) };
            let c = &bcx[t * in_dim + d..][..d];
            for (o, c) in o.iter_mut().zip(c) {
                *o *= c;
            }
        });
        p.matvec(&self.w_out, &a.att_out, &mut a.xb2)?;
        p.tap("conv.out_proj", l, &a.xb2, n_embd);
        p.add_rows(&mut a.x, &mut a.xb2, None, n_embd);
        p.tap("attn_residual", l, &a.x, n_embd);
        Ok(())
    }
}
