//! The Mamba-2 token mixer (IBM Granite 4.0 H, `granitehybrid`), as llama.cpp b11434 runs it
//! (src/models/mamba-base.cpp, build_mamba2_layer; ggml's ssm_conv and ssm_scan). Instead of a
//! KV cache it keeps a fixed state: the last K-1 inputs of a causal convolution and one
//! head_dim x d_state matrix per head.
//!
//! ```text
//! xb = rms_norm(x)                          attn_norm
//! [z | xBC | dt] = Win xb                   ssm_in: d_inner, d_inner + 2 G N, H rows
//! xBC = silu(conv(window, xBC) + bias)      out[ch] = sum_j window[j][ch] * w[ch][j] over the
//!                                           last K inputs, oldest first; then ssm_conv1d.bias
//! [x | B | C] = xBC                         x: H heads of P; B, C: G groups of N
//! for each head h (group g = h / (H / G): consecutive heads share a group):
//!   dt' = softplus(dt[h] + dt_bias[h]);  dA = exp(dt' A[h])       A = ssm_a < 0
//!   for each row i of the head (P rows):
//!     S[i] = S[i] dA + B[g] (x[h][i] dt')   S[i]: N values
//!     y[h][i] = S[i] . C[g]
//! y = y + x D[h]                            ssm_d
//! y = y * silu(z)
//! y = rms_norm(y) per group of d_inner / G, times ssm_norm
//! x = x + Wout y                            ssm_out
//! ```
//! A prompt runs its matrices once for the batch, then the convolution and the scan token by
//! token: the state after a chunk is the state token-by-token decoding reaches, bit for bit.
//! The state is a [`RecurrentState`] (a conv window, then `[H][P][N]` f32), so a verify pass
//! keeps its copies and a rejected draft goes back as a Gated DeltaNet's does.

use super::delta_net::{causal_conv_rows, RecurrentState};
use super::error::ModelError;
use super::matrix::{Loader, Matrix};
use super::pass::{per_token, split, Pass, SharedMut};
use super::state::Activations;
use crate::math;
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

/// The shape of a Mamba-2 layer, from the header (`ssm.*` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mamba2Shape {
    /// Inner width (`ssm.inner_size`): `n_head` heads of `head_dim`.
    pub d_inner: usize,
    /// State per row (`ssm.state_size`): B and C of each group are this long.
    pub d_state: usize,
    /// Heads (`ssm.time_step_rank`), each with its dt, A and D.
    pub n_head: usize,
    /// Groups of B and C (`ssm.group_count`), each shared by `n_head / n_group` heads.
    pub n_group: usize,
    /// Taps of the causal convolution (`ssm.conv_kernel`), at least 2.
    pub conv_kernel: usize,
}

impl Mamba2Shape {
    pub fn head_dim(&self) -> usize {
        self.d_inner / self.n_head
    }
    /// Channels of the convolution: x, B and C.
    pub fn conv_dim(&self) -> usize {
        self.d_inner + 2 * self.n_group * self.d_state
    }
    /// ssm_in's output: z, xBC and dt.
    pub fn in_dim(&self) -> usize {
        self.d_inner + self.conv_dim() + self.n_head
    }
    /// f32s of the conv window (the last K-1 inputs of each channel).
    pub fn conv_state_len(&self) -> usize {
        (self.conv_kernel - 1) * self.conv_dim()
    }
    /// f32s of the scan's state (head_dim x d_state per head).
    pub fn ssm_state_len(&self) -> usize {
        self.d_inner * self.d_state
    }
    /// Bytes of the state: fixed, whatever the context.
    pub fn state_bytes(&self) -> u64 {
        4 * (self.conv_state_len() as u64 + self.ssm_state_len() as u64)
    }
}

#[derive(Debug, Clone)]
pub struct Mamba2 {
    pub shape: Mamba2Shape,
    pub attn_norm: Vec<f32>,
    /// `ssm_in`: n_embd -> in_dim ([z | xBC | dt]).
    pub w_in: Matrix,
    /// `ssm_conv1d.weight`: `[conv_dim][conv_kernel]`, oldest tap first.
    pub conv: Vec<f32>,
    /// `ssm_conv1d.bias`: `[conv_dim]`.
    pub conv_bias: Vec<f32>,
    /// `ssm_dt.bias`, `ssm_a`, `ssm_d`: one per head.
    pub dt_bias: Vec<f32>,
    pub a: Vec<f32>,
    pub d: Vec<f32>,
    /// `ssm_norm`: `[n_group][d_inner / n_group]`, the grouped RMSNorm's weights.
    pub norm: Vec<f32>,
    /// `ssm_out`: d_inner -> n_embd.
    pub w_out: Matrix,
    /// The kernel set's SwiGLU (silu(gate) * up, in place on the gate).
    pub swiglu: fn(&mut [f32], &[f32]),
}

/// Scan values (tokens x heads x head_dim x d_state) of a pass from which the heads are split
/// over the workers (one token of the synthetic model's 4 x 64 x 32 is not worth waking them).
const PARALLEL_SCAN_VALUES: usize = 1 << 15;

/// Accumulators side by side in a row's dot product with C: one AVX2 vector of f32.
const LANES: usize = 8;

/// Ones for SiLU through the SwiGLU kernel (silu(x) * 1).
static ONES: [f32; 64] = [1.0; 64];

impl Mamba2 {
    /// Loads layer `l`'s Mamba-2 tensors (`blk.{l}.attn_norm`, `ssm_*`).
    pub fn load(
        ld: &Loader,
        l: usize,
        n_embd: usize,
        shape: Mamba2Shape,
        swiglu: fn(&mut [f32], &[f32]),
    ) -> Result<Mamba2, ModelError> {
        let n = |s: &str| format!("blk.{l}.{s}");
        let (h, g, conv_dim) = (shape.n_head, shape.n_group, shape.conv_dim());
        Ok(Mamba2 {
            shape,
            attn_norm: ld.vector(&n("attn_norm.weight"), n_embd)?,
            w_in: ld.matrix(&n("ssm_in.weight"), n_embd, shape.in_dim())?,
            conv: ld.f32_rows(&n("ssm_conv1d.weight"), shape.conv_kernel, conv_dim)?,
            conv_bias: ld.vector(&n("ssm_conv1d.bias"), conv_dim)?,
            dt_bias: ld.vector(&n("ssm_dt.bias"), h)?,
            a: ld.f32_rows(&n("ssm_a"), 1, h)?,
            d: ld.f32_rows(&n("ssm_d"), 1, h)?,
            norm: ld.f32_rows(&n("ssm_norm.weight"), shape.d_inner / g, g)?,
            w_out: ld.matrix(&n("ssm_out.weight"), shape.d_inner, n_embd)?,
            swiglu,
        })
    }

    /// The weights in the order `forward` asks for them.
    pub fn matrices(&self) -> Vec<&Matrix> {
        vec![&self.w_in, &self.w_out]
    }

    /// For each of the pass's tokens, in order: x += Wout norm(silu(z) (scan(conv(xBC)) + x D)).
    pub fn forward(
        &self,
        p: &mut Pass,
        l: usize,
        a: &mut Activations,
        state: &mut RecurrentState,
    ) -> Result<(), ModelError> {
        let sh = &self.shape;
        let (n, n_embd) = (p.n, a.n_embd);
        let (d_inner, conv_dim, in_dim) = (sh.d_inner, sh.conv_dim(), sh.in_dim());
        p.rms_norm_rows(&mut a.xb, &a.x, &self.attn_norm, n_embd);
        p.tap("attn_norm", l, &a.xb, n_embd);
        p.matvec(&self.w_in, &a.xb, &mut a.qkv)?;
        p.tap("zxBCdt", l, &a.qkv, in_dim);
        // xBC of each token into its own row (`gate`), convolved there in place.
        for t in 0..n {
            let src = &a.qkv[t * in_dim + d_inner..][..conv_dim];
            a.gate[t * conv_dim..][..conv_dim].copy_from_slice(src);
        }
        // A verify pass keeps the state after each of its tokens but the last (as many as the
        // state has room for).
        let n_steps = match p.keep_steps {
            true => n.saturating_sub(1).min(state.n_steps()),
            false => 0,
        };
        let k = sh.conv_kernel;
        causal_conv_rows(
            p,
            &self.conv,
            k,
            conv_dim,
            state,
            &mut a.gate[..n * conv_dim],
            n_steps,
        );
        let swiglu = self.swiglu;
        let bias = &self.conv_bias[..];
        let xbc = SharedMut::new(&mut a.gate[..n * conv_dim]);
        per_token(p.par, n, &|_, t| {
            // SAFETY: token t's row is written by this worker only.
            let c = unsafe { xbc.slice(t * conv_dim, conv_dim) };
            c.iter_mut().zip(bias).for_each(|(c, b)| *c += b);
            // silu(c) as SwiGLU with ones: the SIMD face, math::silu's bits.
            for ch in c.chunks_mut(ONES.len()) {
                swiglu(ch, &ONES[..ch.len()]);
            }
        });
        p.tap("conv_output_silu", l, &a.gate, conv_dim);
        self.scan_heads(p, state, &a.qkv, &a.gate, &mut a.att_out, n_steps);
        // y += x D; y *= silu(z) (SwiGLU into z, whose row is not read again); the grouped norm
        // from z's row back into y's.
        let (hd, eps, group) = (sh.head_dim(), p.rms_eps, d_inner / sh.n_group);
        let ys = SharedMut::new(&mut a.att_out[..n * d_inner]);
        let zs = SharedMut::new(&mut a.qkv[..n * in_dim]);
        let xbc = &a.gate[..n * conv_dim];
        let (d, norm) = (&self.d[..], &self.norm[..]);
        per_token(p.par, n, &|_, t| {
            // SAFETY: token t's rows are written by this worker only.
            let (y, z) = unsafe {
                (
                    ys.slice(t * d_inner, d_inner),
                    zs.slice(t * in_dim, d_inner),
                )
            };
            let x = &xbc[t * conv_dim..][..d_inner];
            for ((y, x), d) in y.chunks_exact_mut(hd).zip(x.chunks_exact(hd)).zip(d) {
                y.iter_mut().zip(x).for_each(|(y, x)| *y += x * d);
            }
            swiglu(z, y);
            for ((y, z), w) in y
                .chunks_exact_mut(group)
                .zip(z.chunks_exact(group))
                .zip(norm.chunks_exact(group))
            {
                math::rms_norm(y, z, w, eps);
            }
        });
        p.tap("mamba_y", l, &a.att_out, d_inner);
        p.matvec(&self.w_out, &a.att_out, &mut a.xb2)?;
        p.tap("mamba_out", l, &a.xb2, n_embd);
        p.add_rows(&mut a.x, &mut a.xb2, None, n_embd);
        p.tap("attn_residual", l, &a.x, n_embd);
        Ok(())
    }

    /// The selective scan on every head for each of the pass's tokens in order, the state read
    /// and written in place; `zxbcdt` holds each token's ssm_in row (its dt at the end), `xbc`
    /// its convolved x, B and C; `out` gets y. Heads are independent: a big layer or a prompt
    /// splits them over the workers, each running its heads through every token (the same
    /// operations in the same order whichever worker runs them). Each head's state after each
    /// of the first `n_steps` tokens is copied into its place in the state's step copies.
    fn scan_heads(
        &self,
        p: &Pass,
        state: &mut RecurrentState,
        zxbcdt: &[f32],
        xbc: &[f32],
        out: &mut [f32],
        n_steps: usize,
    ) {
        let sh = &self.shape;
        let n = p.n;
        let (h_n, hd, ds) = (sh.n_head, sh.head_dim(), sh.d_state);
        let (d_inner, conv_dim, in_dim) = (sh.d_inner, sh.conv_dim(), sh.in_dim());
        let heads_per_group = h_n / sh.n_group;
        let per_head = hd * ds;
        let (conv_len, step_len, _) = state.step_lens();
        let shared_out = SharedMut::new(&mut out[..n * d_inner]);
        let shared_ssm = SharedMut::new(&mut state.ssm);
        let steps = SharedMut::new(&mut state.steps);
        let head = |h: usize| {
            let g = h / heads_per_group;
            // SAFETY: head h owns ssm[h * per_head..][..per_head], its slices of the step
            // copies and out[t * d_inner + h * hd..][..hd]; every head runs once, so no two
            // live slices overlap.
            let s = unsafe { shared_ssm.slice(h * per_head, per_head) };
            for t in 0..n {
                let row = &xbc[t * conv_dim..][..conv_dim];
                let x = &row[h * hd..][..hd];
                let b = &row[d_inner + g * ds..][..ds];
                let c = &row[d_inner + (sh.n_group + g) * ds..][..ds];
                let dt = zxbcdt[t * in_dim + d_inner + conv_dim + h] + self.dt_bias[h];
                let dt = math::softplus(dt);
                let da = libm::expf(dt * self.a[h]);
                let y = unsafe { shared_out.slice(t * d_inner + h * hd, hd) };
                for ((s, x), y) in s.chunks_exact_mut(ds).zip(x).zip(y.iter_mut()) {
                    *y = scan_row(s, b, c, da, x * dt);
                }
                if t < n_steps {
                    let at = t * step_len + conv_len + h * per_head;
                    unsafe { steps.slice(at, per_head) }.copy_from_slice(s);
                }
            }
        };
        let n_workers = p.par.n_threads().clamp(1, h_n);
        if n_workers == 1 || n * h_n * per_head < PARALLEL_SCAN_VALUES {
            (0..h_n).for_each(head);
            return;
        }
        p.par.run(&|w| {
            if w < n_workers {
                let (h0, h1) = split(h_n, n_workers, w);
                (h0..h1).for_each(head);
            }
        });
    }
}

/// One row of a head's state through one token: `s = s * da + b * x_dt`, returning `s . c`
/// (ggml's ssm_scan for a scalar decay per head). The dot product sums in [`LANES`]
/// accumulators side by side so the loop vectorises; the state update is exact per element.
#[inline]
fn scan_row(s: &mut [f32], b: &[f32], c: &[f32], da: f32, x_dt: f32) -> f32 {
    let mut acc = [0f32; LANES];
    let mut s_blocks = s.chunks_exact_mut(LANES);
    let mut b_blocks = b.chunks_exact(LANES);
    let mut c_blocks = c.chunks_exact(LANES);
    for ((s, b), c) in (&mut s_blocks).zip(&mut b_blocks).zip(&mut c_blocks) {
        for i in 0..LANES {
            let v = s[i] * da + b[i] * x_dt;
            s[i] = v;
            acc[i] += v * c[i];
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    let tail = s_blocks.into_remainder().iter_mut();
    for ((s, b), c) in tail.zip(b_blocks.remainder()).zip(c_blocks.remainder()) {
        let v = *s * da + b * x_dt;
        *s = v;
        sum += v * c;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lane-wise row gives the plain loop's state to the bit and its sum to rounding, for
    /// state sizes on and off the lane count.
    #[test]
    fn scan_row_updates_the_state_as_the_plain_loop() {
        for ds in [1, 7, 8, 16, 19, 64] {
            let v = |i: usize, k: f32| (i as f32 * k).sin() * 1.7;
            let (b, c): (Vec<f32>, Vec<f32>) = (0..ds).map(|i| (v(i, 0.7), v(i, 1.3))).unzip();
            let s0: Vec<f32> = (0..ds).map(|i| v(i, 2.1)).collect();
            let (da, x_dt) = (0.83, -0.41);
            let mut s = s0.clone();
            let y = scan_row(&mut s, &b, &c, da, x_dt);
            let mut want = 0f32;
            for i in 0..ds {
                let st = s0[i] * da + b[i] * x_dt;
                assert_eq!(st.to_bits(), s[i].to_bits(), "state {i} of {ds}");
                want += st * c[i];
            }
            assert!(
                (y - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "{y} vs {want}"
            );
        }
    }
}
