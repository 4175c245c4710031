//! What one forward pass carries to every layer: the worker pool, the weight store, the
//! matvec scratch, and whether it is a prompt's pass. With it a matvec is one short call,
//! `p.matvec(&self.wo, &act.att_out, &mut act.xb2)?`, and a layer's forward reads like the math.
//!
//! Also here: the token-wise helpers of a batch (norms, residual adds) and the shared-slice
//! plumbing the parallel loops use.

use super::error::ModelError;
use super::matrix::Matrix;
use super::store::{WeightKey, WeightStore};
use crate::kernels::RepackedKernel;
use crate::math::{self, AttentionKernel};
use crate::platform::{Parallel, RowDispenser};
use crate::quant::GgmlType;
use alloc::format;
use alloc::string::String;
use core::sync::atomic::{AtomicBool, Ordering};

/// Called with (name, layer, one token's values) at the named points of the forward pass
/// (llama.cpp's tensor names), for comparing with the reference layer by layer.
pub type TapFn = fn(&str, usize, &[f32]);

pub struct Pass<'p> {
    pub par: &'p dyn Parallel,
    pub store: &'p dyn WeightStore,
    /// Tokens in this pass (rows in use of every activation buffer).
    pub n: usize,
    /// A prompt's pass runs the batched kernels even for one token, so that a prompt gives the
    /// same bits however it is split (see `WeightKernel::cols_twin`).
    pub prompt: bool,
    /// The attention kernel llama.cpp would pick for this pass's length.
    pub attention_kernel: AttentionKernel,
    /// Decoding's attention skip threshold, ln(eps) (`AttentionSpan::skip_below`; `None`: exact).
    pub attn_skip_below: Option<f32>,
    /// Per-pair RoPE frequency divisors of the model (Llama 3's `rope_freqs.weight`).
    pub rope_freqs: Option<&'p [f32]>,
    pub rms_eps: f32,
    /// A verify pass: each recurrent layer keeps a copy of its state after each token, so that
    /// a rejected draft can go back to the last accepted one (`RecurrentState::steps`).
    pub keep_steps: bool,
    /// Granite's residual multiplier: each mixer's and FFN's output is scaled by it before it
    /// is added to the residual stream ([`Pass::add_rows`]).
    pub residual_scale: Option<f32>,
    tap: Option<TapFn>,
    /// The `n` quantized input rows of the matvec in progress.
    act_q: &'p mut [u8],
    /// The tables a lookup-table kernel reads instead of `act_q` (`RepackedKernel::act_table`),
    /// for as many tokens at a time as it holds (empty when no matrix has such a kernel).
    act_tables: &'p mut [u8],
    /// Which kernel layout, weight type and width `act_tables` holds the whole pass's tables
    /// for, built from the current `act_q`: matrices that share an input (q, k, v; gate, up)
    /// read them without building them again. Cleared whenever `act_q` is written.
    tables_of: Option<(&'static str, GgmlType, usize)>,
    /// The matmul workers' output before it is copied into the tokens' rows.
    tile: &'p mut [f32],
}

impl<'p> Pass<'p> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        par: &'p dyn Parallel,
        store: &'p dyn WeightStore,
        n: usize,
        prompt: bool,
        attention_kernel: AttentionKernel,
        rope_freqs: Option<&'p [f32]>,
        rms_eps: f32,
        tap: Option<TapFn>,
        act_q: &'p mut [u8],
        act_tables: &'p mut [u8],
        tile: &'p mut [f32],
    ) -> Pass<'p> {
        Pass {
            par,
            store,
            n,
            prompt,
            attention_kernel,
            attn_skip_below: None,
            rope_freqs,
            rms_eps,
            keep_steps: false,
            residual_scale: None,
            tap,
            act_q,
            act_tables,
            tables_of: None,
            tile,
        }
    }

    /// Hands each of the pass's `n` rows of `x` (rows of `width`) to the tap, if one is set.
    pub fn tap(&self, name: &str, layer: usize, x: &[f32], width: usize) {
        if let Some(f) = self.tap {
            (0..self.n).for_each(|t| f(name, layer, row(x, width, t)));
        }
    }

    pub fn tapping(&self) -> Option<TapFn> {
        self.tap
    }

    /// `out[t] = m · x[t]` for the pass's tokens (`x` and `out` token-major, rows of
    /// `m.n_cols` and `m.n_rows`).
    pub fn matvec(&mut self, m: &Matrix, x: &[f32], out: &mut [f32]) -> Result<(), ModelError> {
        self.quantize(m, x)?;
        self.matmul(m, m.key, out)
    }

    /// Several matrices over one input (Q, K and V; gate and up): the input is quantized once
    /// per activation format, the matrices run in order.
    pub fn matvecs(
        &mut self,
        x: &[f32],
        jobs: &mut [(&Matrix, &mut [f32])],
    ) -> Result<(), ModelError> {
        self.keyed_matvecs(x, None, jobs)
    }

    /// [`Pass::matvecs`] with expert `e` of each expert tensor in `jobs` (each matrix has one
    /// expert's shape).
    pub fn expert_matvecs(
        &mut self,
        x: &[f32],
        e: u16,
        jobs: &mut [(&Matrix, &mut [f32])],
    ) -> Result<(), ModelError> {
        self.keyed_matvecs(x, Some(e), jobs)
    }

    fn keyed_matvecs(
        &mut self,
        x: &[f32],
        expert: Option<u16>,
        jobs: &mut [(&Matrix, &mut [f32])],
    ) -> Result<(), ModelError> {
        let mut quantized_as = None;
        for (m, out) in jobs.iter_mut() {
            if quantized_as != Some(m.act_ty) {
                self.quantize(m, x)?;
                quantized_as = Some(m.act_ty);
            }
            let key = match expert {
                Some(e) => WeightKey::expert(m.id, e),
                None => m.key,
            };
            self.matmul(m, key, out)?;
        }
        Ok(())
    }

    /// Quantizes the `n` input rows of `m` into its activation format, back to back.
    fn quantize(&mut self, m: &Matrix, x: &[f32]) -> Result<(), ModelError> {
        let (n, width) = (self.n, m.n_cols);
        let quantize =
            |t: usize, out: &mut [u8]| m.kernel.quantize_activation(row(x, width, t), out);
        let failed = AtomicBool::new(false);
        self.tables_of = None;
        let shared = SharedMut::new(&mut self.act_q[..n * m.act_bytes]);
        per_token(self.par, n, &|_, t| {
            // SAFETY: token t's row is written by this worker only.
            let out = unsafe { shared.slice(t * m.act_bytes, m.act_bytes) };
            if quantize(t, out).is_err() {
                failed.store(true, Ordering::Relaxed);
            }
        });
        if failed.load(Ordering::Relaxed) {
            // Run the first row again for the error to report.
            quantize(0, &mut self.act_q[..m.act_bytes]).map_err(|err| ModelError::Quant {
                tensor: m.name.clone(),
                err,
            })?;
        }
        Ok(())
    }

    /// `out[t] = M · x[t]` for the input rows already quantized into `act_q`. The weight rows
    /// are split over the workers; a worker computes its rows for all `n` tokens at once (each
    /// weight read once), into its part of `tile`, then copies them into the tokens' rows. One
    /// token goes straight through the matvec. The weight is asked of the store just before
    /// and released right after (the guard drops at the end). Where the matrix's kernel has a
    /// repacked layout and the store holds that copy, the repacked kernel runs on it, token by
    /// token (the file's pages of the tensor are then not touched).
    fn matmul(&mut self, m: &Matrix, key: WeightKey, out: &mut [f32]) -> Result<(), ModelError> {
        let (n, n_rows, store) = (self.n, m.n_rows, self.store);
        let repacked = m
            .kernel
            .repacked
            .and_then(|rk| Some((rk, store.get_repacked(key, rk.layout)?)));
        let (repacked_kernel, w) = match repacked {
            Some((rk, packed)) => (Some(rk), packed),
            None => (None, store.get(key)?),
        };
        let expected = match repacked_kernel {
            Some(rk) => (rk.bytes)(n_rows, m.n_cols).unwrap_or(usize::MAX),
            None => n_rows * m.row_bytes,
        };
        check_weight_len(m, w.len(), expected, repacked_kernel.map(|rk| rk.layout))?;
        let w: &[u8] = &w;
        if let Some(rk) = repacked_kernel {
            return self.matmul_repacked(m, rk, w, out);
        }
        let failed = AtomicBool::new(false);
        let n_workers = self.par.n_threads().max(1);
        let acts = &self.act_q[..n * m.act_bytes];
        let out = SharedMut::new(&mut out[..n * n_rows]);
        let prompt = self.prompt;
        // Several tokens whose matvecs must keep the one-token kernel's bits (a verify pass, on
        // a kernel whose batched face keeps other bits: `cols_twin`), or more output rows than
        // the tile holds (the LM head for several tokens): each worker runs the one-token
        // kernel per token over blocks of its rows small enough to stay in cache, straight into
        // the tokens' rows. The weight is still read from the store (and from RAM) once.
        let per_token_blocks =
            n > 1 && ((!prompt && m.kernel.cols_twin.is_some()) || self.tile.len() < n * n_rows);
        let tile = SharedMut::new(if n > 1 && !per_token_blocks {
            &mut self.tile[..n * n_rows]
        } else {
            &mut self.tile[..0]
        });
        // Guided scheduling: each grab takes remaining / (2 x threads) rows, so a preempted
        // worker leaves a short tail. Chunks are multiples of 16 rows so that workers do not
        // share cache lines of `out` (and row-group kernels, groups of 4, get aligned starts).
        let rows_left = RowDispenser::new(n_rows, n_workers, MATVEC_CHUNK_ROWS);
        self.par.run(&|_| {
            while let Some(chunk) = rows_left.grab() {
                let (r0, r1, len) = (chunk.start, chunk.end, chunk.len());
                let result = match () {
                    () if per_token_blocks => {
                        (r0..r1).step_by(PER_TOKEN_BLOCK_ROWS).try_for_each(|b0| {
                            let b1 = (b0 + PER_TOKEN_BLOCK_ROWS).min(r1);
                            let rows = &w[b0 * m.row_bytes..b1 * m.row_bytes];
                            (0..n).try_for_each(|t| {
                                let act = &acts[t * m.act_bytes..(t + 1) * m.act_bytes];
                                // SAFETY: the dispenser hands each row to exactly one worker.
                                let o = unsafe { out.slice(t * n_rows + b0, b1 - b0) };
                                // The kernel a one-token pass of this kind runs (below).
                                if prompt && m.kernel.cols_twin.is_some() {
                                    m.kernel.matmul(rows, b1 - b0, m.n_cols, act, 1, o)
                                } else {
                                    m.kernel.matvec(rows, b1 - b0, m.n_cols, act, o)
                                }
                                .map_err(|_| ())
                            })
                        })
                    }
                    () => {
                        let rows = &w[r0 * m.row_bytes..r1 * m.row_bytes];
                        if n == 1 && prompt && m.kernel.cols_twin.is_some() {
                            // A one-token prompt (or prompt tail) takes the batched kernel,
                            // whose bits differ from the decode kernel's (cols_twin): a prompt
                            // then gives the same logits however it is split.
                            // SAFETY: the dispenser hands each row to exactly one worker.
                            let o = unsafe { out.slice(r0, len) };
                            m.kernel
                                .matmul(rows, len, m.n_cols, acts, 1, o)
                                .map_err(|_| ())
                        } else if n == 1 {
                            // SAFETY: the dispenser hands each row to exactly one worker.
                            let o = unsafe { out.slice(r0, len) };
                            m.kernel
                                .matvec(rows, len, m.n_cols, acts, o)
                                .map_err(|_| ())
                        } else {
                            // SAFETY: as above; this chunk's tile is rows r0..r1 of every token.
                            let tl = unsafe { tile.slice(n * r0, n * len) };
                            let r = m.kernel.matmul(rows, len, m.n_cols, acts, n, tl);
                            for (t, src) in tl.chunks_exact(len).enumerate() {
                                // SAFETY: rows r0..r1 of token t belong to this chunk only.
                                unsafe { out.slice(t * n_rows + r0, len) }.copy_from_slice(src);
                            }
                            r.map_err(|_| ())
                        }
                    }
                };
                if result.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
            }
        });
        if failed.load(Ordering::Relaxed) {
            // Shapes were checked at load and the weight's length above: a kernel refused them.
            return Err(ModelError::Store {
                tensor: m.name.clone(),
                reason: format!(
                    "the {} kernel refused {} rows of {} columns for {n} tokens",
                    m.kernel.face, n_rows, m.n_cols
                ),
            });
        }
        Ok(())
    }

    /// [`Pass::matmul`] on a repacked copy: the repacked kernels are matvecs, so each worker
    /// runs its chunk of rows once per token. A lookup-table kernel first gets each token's
    /// tables (built once per token, by token in parallel, into the table scratch; every worker
    /// then reads them), as many tokens at a time as the scratch holds.
    fn matmul_repacked(
        &mut self,
        m: &Matrix,
        rk: RepackedKernel,
        w: &[u8],
        out: &mut [f32],
    ) -> Result<(), ModelError> {
        let (n, n_rows) = (self.n, m.n_rows);
        let quant_err = |err| ModelError::Quant {
            tensor: m.name.clone(),
            err,
        };
        let input_bytes = rk.input_bytes(m.ty, m.n_cols).map_err(quant_err)?;
        let tokens_at_once = match rk.act_table {
            None => n.max(1),
            Some(_) => self.act_tables.len() / input_bytes.max(1),
        };
        if tokens_at_once == 0 {
            return Err(ModelError::Store {
                tensor: m.name.clone(),
                reason: format!(
                    "its {} kernel needs {input_bytes} bytes of activation tables per token and \
                     the state has {}: make the state with State::new for this model",
                    rk.layout,
                    self.act_tables.len()
                ),
            });
        }
        let n_workers = self.par.n_threads().max(1);
        let failed = AtomicBool::new(false);
        let out = SharedMut::new(&mut out[..n * n_rows]);
        let whole_pass = tokens_at_once >= n;
        let table_key = (rk.layout, m.ty, m.n_cols);
        for t0 in (0..n).step_by(tokens_at_once) {
            let t1 = (t0 + tokens_at_once).min(n);
            let inputs: &[u8] = match rk.act_table {
                None => &self.act_q[t0 * m.act_bytes..t1 * m.act_bytes],
                Some(_) if whole_pass && self.tables_of == Some(table_key) => {
                    &self.act_tables[..n * input_bytes]
                }
                Some(_) => {
                    let acts = &self.act_q[..n * m.act_bytes];
                    let tables = SharedMut::new(&mut self.act_tables[..(t1 - t0) * input_bytes]);
                    per_token(self.par, t1 - t0, &|_, i| {
                        let act = &acts[(t0 + i) * m.act_bytes..][..m.act_bytes];
                        // SAFETY: token i's tables are written by this worker only.
                        let table = unsafe { tables.slice(i * input_bytes, input_bytes) };
                        if rk.build_table(m.ty, m.n_cols, act, table).is_err() {
                            failed.store(true, Ordering::Relaxed);
                        }
                    });
                    if failed.load(Ordering::Relaxed) {
                        // Build the first token's tables again for the error to report.
                        let table = &mut self.act_tables[..input_bytes];
                        rk.build_table(m.ty, m.n_cols, &acts[..m.act_bytes], table)
                            .map_err(quant_err)?;
                    }
                    self.tables_of = whole_pass.then_some(table_key);
                    &self.act_tables[..(t1 - t0) * input_bytes]
                }
            };
            // Chunks of 16 rows: a multiple of every repacked kernel's group (4, 16).
            let rows_left = RowDispenser::new(n_rows, n_workers, MATVEC_CHUNK_ROWS);
            self.par.run(&|_| {
                while let Some(chunk) = rows_left.grab() {
                    let (r0, r1, len) = (chunk.start, chunk.end, chunk.len());
                    let result = rk
                        .row_range(n_rows, m.n_cols, r0, r1)
                        .and_then(|range| w.get(range))
                        .map_or(Err(()), |rows| {
                            (t0..t1).try_for_each(|t| {
                                // SAFETY: the dispenser hands each row to exactly one worker.
                                let o = unsafe { out.slice(t * n_rows + r0, len) };
                                let input = &inputs[(t - t0) * input_bytes..][..input_bytes];
                                rk.matvec(m.ty, rows, len, m.n_cols, input, o)
                                    .map_err(|_| ())
                            })
                        });
                    if result.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                }
            });
            if failed.load(Ordering::Relaxed) {
                return Err(ModelError::Store {
                    tensor: m.name.clone(),
                    reason: format!(
                        "the {} kernel refused {n_rows} rows of {} columns for {n} tokens",
                        rk.layout, m.n_cols
                    ),
                });
            }
        }
        Ok(())
    }

    /// `out` = row `r` of `m`, read through the store into the quantized-input scratch (a row
    /// is at most `n_cols` f32s, and the scratch holds at least that) and dequantized: an
    /// embedding row, without fetching the table.
    pub fn read_row(&mut self, m: &Matrix, r: usize, out: &mut [f32]) -> Result<(), ModelError> {
        self.tables_of = None;
        let raw = &mut self.act_q[..m.row_bytes];
        self.store.read_rows(m.key, r, 1, raw)?;
        crate::quant::dequantize_row(m.ty, raw, out).map_err(|err| ModelError::Quant {
            tensor: m.name.clone(),
            err,
        })
    }

    /// `out[t] = rms_norm(x[t]) * w` for the pass's rows of `width` values.
    pub fn rms_norm_rows(&self, out: &mut [f32], x: &[f32], w: &[f32], width: usize) {
        let eps = self.rms_eps;
        let shared = SharedMut::new(&mut out[..self.n * width]);
        per_token(self.par, self.n, &|_, t| {
            // SAFETY: token t's row is written by this worker only.
            let o = unsafe { shared.slice(t * width, width) };
            math::rms_norm(o, row(x, width, t), w, eps);
        });
    }

    /// `x[t] += rms_norm(o[t]) * post_norm` (or `o[t]` without one), times the residual scale
    /// if the pass has one, for the pass's rows.
    pub fn add_rows(&self, x: &mut [f32], o: &mut [f32], post_norm: Option<&[f32]>, width: usize) {
        let (eps, scale) = (self.rms_eps, self.residual_scale);
        let n = self.n;
        let (xs, os) = (
            SharedMut::new(&mut x[..n * width]),
            SharedMut::new(&mut o[..n * width]),
        );
        per_token(self.par, n, &|_, t| {
            // SAFETY: token t's rows are touched by this worker only.
            let (x, o) = unsafe { (xs.slice(t * width, width), os.slice(t * width, width)) };
            if let Some(w) = post_norm {
                math::rms_norm_in_place(o, w, eps);
            }
            if let Some(s) = scale {
                o.iter_mut().for_each(|o| *o *= s);
            }
            x.iter_mut().zip(&*o).for_each(|(x, o)| *x += o);
        });
    }
}

/// Rows per chunk of a parallel matvec: a multiple of every repacked kernel's group (4, 16).
const MATVEC_CHUNK_ROWS: usize = 16;

/// The weight of `m` the store handed over holds at least `expected` bytes (its rows, in the
/// file layout or `repacked` into a kernel's): a store that hands over less would have the
/// kernels read past it.
fn check_weight_len(
    m: &Matrix,
    got: usize,
    expected: usize,
    repacked: Option<&str>,
) -> Result<(), ModelError> {
    if got >= expected {
        return Ok(());
    }
    Err(ModelError::Store {
        tensor: m.name.clone(),
        reason: format!(
            "got {got} bytes, expected {expected} ({} rows of {} elements{})",
            m.n_rows,
            m.n_cols,
            match repacked {
                Some(layout) => format!(", repacked as {layout}"),
                None => String::new(),
            }
        ),
    })
}

/// Rows of a block that the per-token path of a matmul runs every token over before the next:
/// a multiple of [`MATVEC_CHUNK_ROWS`], so blocks start where decoding's chunks may (the same
/// row groups, the same bits), and a few tens of KB of weights that stay in cache.
const PER_TOKEN_BLOCK_ROWS: usize = 32;

/// llama.cpp runs flash attention through a tiled f32 kernel when a batch has at least this
/// many queries, and through a kernel with an f16 accumulator otherwise (decode).
pub const TILED_ATTENTION_MIN_BATCH: usize = 64;

/// The attention kernel llama.cpp picks for a prompt of `n_tokens` (decided for the whole
/// prompt, not for each of its chunks).
pub fn batch_attention_kernel(n_tokens: usize) -> AttentionKernel {
    if n_tokens >= TILED_ATTENTION_MIN_BATCH {
        AttentionKernel::F32
    } else {
        AttentionKernel::F16Accumulator
    }
}

/// Row `t` of a token-major buffer of rows of `width` values.
pub fn row(buf: &[f32], width: usize, t: usize) -> &[f32] {
    &buf[t * width..(t + 1) * width]
}

pub fn row_mut(buf: &mut [f32], width: usize, t: usize) -> &mut [f32] {
    &mut buf[t * width..(t + 1) * width]
}

/// Runs `f(worker, t)` for the tokens `0..n`, each worker taking a run of them (the token-wise
/// steps of a batch: norms, quantizing, the FFN activation, attention). One token runs inline.
pub fn per_token(par: &dyn Parallel, n: usize, f: &(dyn Fn(usize, usize) + Sync)) {
    let n_workers = par.n_threads().clamp(1, n.max(1));
    if n_workers == 1 {
        (0..n).for_each(|t| f(0, t));
        return;
    }
    par.run(&|w| {
        if w < n_workers {
            let (t0, t1) = split(n, n_workers, w);
            (t0..t1).for_each(|t| f(w, t));
        }
    });
}

/// Rows `[lo, hi)` of `n` split into `parts` near-equal ranges.
pub fn split(n: usize, parts: usize, i: usize) -> (usize, usize) {
    let per = n.div_ceil(parts);
    ((i * per).min(n), ((i + 1) * per).min(n))
}

/// A mutable slice handed to parallel workers that write disjoint ranges of it.
pub struct SharedMut<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: workers only take disjoint sub-slices (see `slice`).
unsafe impl<T: Send> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    pub fn new(s: &mut [T]) -> Self {
        SharedMut {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        }
    }
    /// # Safety
    /// No two live slices may overlap, and the source slice must outlive them.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        assert!(start + len <= self.len);
        core::slice::from_raw_parts_mut(self.ptr.add(start), len)
    }
}
