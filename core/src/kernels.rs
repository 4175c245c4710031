//! The one dispatch table: which kernel runs each matvec, chosen once from the CPU's features.
//!
//! In the manner of tract's linalg: a [`KernelSet`] starts as the scalar reference functions
//! of [`crate::quant`] (the generic twins) and each architecture section below replaces the
//! entries it has a faster kernel for, after checking that the CPU can run it. The model code
//! picks a [`WeightKernel`] per weight matrix at load time ([`KernelSet::weight`]) and calls
//! [`WeightKernel::matvec`] on each worker's chunk of rows; nothing is looked up per token.
//!
//! ```
//! use smolrun_core::kernels::KernelSet;
//! use smolrun_core::platform::CpuFeatures;
//! use smolrun_core::quant::{self, GgmlType};
//!
//! // The platform fills CpuFeatures (smolrun_linux::cpu::detect_features()); the default,
//! // no features at all, gives the scalar set.
//! let kernels = KernelSet::select(&CpuFeatures::default());
//! assert_eq!(kernels.name(), "scalar");
//!
//! let q4k = kernels.weight(GgmlType::Q4_K).unwrap(); // once, at load time
//! let (n_rows, n_cols) = (3, 256);
//! let weights = vec![0u8; n_rows * 144];
//! let mut act = vec![0u8; quant::row_bytes(q4k.act_type, n_cols).unwrap()];
//! kernels.quantize_activation(q4k.act_type, &[0.5; 256], &mut act).unwrap();
//! let mut out = [1.0f32; 3];
//! q4k.matvec(&weights, n_rows, n_cols, &act, &mut out).unwrap();
//! assert_eq!(out, [0.0; 3]);
//! ```
//!
//! Safety of the SIMD entries: the table holds safe `fn` pointers, so a kernel that needs a
//! CPU feature is wrapped in a private function and installed only after the kernels crate
//! confirmed the feature on the running CPU (cpuid on x86-64); a caller's `CpuFeatures` can
//! only switch kernels off, never force one that would fault.

use crate::math::{self, AttentionHeadFn};
use crate::platform::CpuFeatures;
use crate::quant::{self, GgmlType, QuantError, VecDotFn};

/// Several consecutive weight rows against one activation row:
/// `out[r] = weights[r] . act` for `r in 0..out.len()`, where `weights` holds exactly
/// `out.len()` rows of `n_cols` elements. It must accept ANY row count: a kernel that works
/// on 4 rows at a time finishes the remainder itself (a 151,669-row LM head must not fall off
/// the fast path). Called only through [`WeightKernel::matvec`], which checks the shapes.
pub type RowsFn = fn(n_cols: usize, weights: &[u8], act: &[u8], out: &mut [f32]);

/// Several consecutive weight rows against a batch of activation rows (a prompt's tokens):
/// `out[t * n_rows + r] = weights[r] . acts[t]` for `t in 0..n_acts`, `r in 0..n_rows`, where
/// `n_rows = out.len() / n_acts`, `weights` holds exactly those rows of `n_cols` elements and
/// `acts` holds `n_acts` activation rows back to back. A kernel unpacks each weight block once
/// and dots it with several activation rows, so a weight is read once per batch instead of once
/// per token. Each `out` value must be bit for bit what `vec_dot` gives for that (row,
/// activation) pair, so that a prompt gives the same logits in one batch as token by token.
/// It must accept ANY row and activation count. Called only through [`WeightKernel::matmul`],
/// which checks the shapes.
pub type ColsFn = fn(n_cols: usize, weights: &[u8], acts: &[u8], n_acts: usize, out: &mut [f32]);

/// Quantizes an f32 row into an activation format; `out` is exactly the row's size.
pub type QuantizeFn = fn(x: &[f32], out: &mut [u8]);

/// A matvec that runs on weight rows repacked at load time into another layout (rows
/// interleaved in groups, so that one activation load feeds several rows). The layout is the
/// kernel's business; the model only asks for the repacked bytes of a row range, which
/// [`RepackedKernel::row_range`] gives for any chunk that starts on a group boundary. Rows
/// that do not fill a last group stay on a fast path (the kernel runs them one by one with
/// its one-row SIMD dot), so a 151,669-row LM head is repacked and fast in full.
#[derive(Clone, Copy, Debug)]
pub struct RepackedKernel {
    /// Names the layout, e.g. "q4_k_x4". Part of the repack cache's key: a layout whose bytes
    /// change must get a new name.
    pub layout: &'static str,
    /// Rows per group: a chunk of rows handed to the kernel must start on a multiple of it.
    pub group_rows: usize,
    /// Bytes of `n_rows` rows of `n_cols` elements once repacked; `None` if `n_cols` is not a
    /// whole number of blocks or the size overflows.
    pub bytes: fn(n_rows: usize, n_cols: usize) -> Option<usize>,
    /// Repacks `n_rows` file rows (`src`) into `dst` (exactly `bytes(n_rows, n_cols)` long);
    /// `None`, writing nothing, on a size mismatch.
    pub repack: fn(src: &[u8], n_rows: usize, n_cols: usize, dst: &mut [u8]) -> Option<()>,
    /// `out[r] = row r . act` over repacked rows (any row count, tail rows included).
    pub rows: RowsFn,
    /// Which face this is ("dotprod", ...), for reports.
    pub face: &'static str,
}

impl RepackedKernel {
    /// The bytes of rows `r0..r1` inside a repacked matrix of `n_rows` rows, or `None` unless
    /// `r0` starts a group and `r1` ends one (or is `n_rows`): a group's rows are interleaved,
    /// so a group cannot be split between two workers.
    pub fn row_range(
        &self,
        n_rows: usize,
        n_cols: usize,
        r0: usize,
        r1: usize,
    ) -> Option<core::ops::Range<usize>> {
        let g = self.group_rows.max(1);
        if r0 > r1
            || r1 > n_rows
            || !r0.is_multiple_of(g)
            || (!r1.is_multiple_of(g) && r1 != n_rows)
        {
            return None;
        }
        // Layouts put whole groups first and the tail last, so the first r (a multiple of
        // the group) rows of any matrix take exactly `bytes(r)`.
        Some((self.bytes)(r0, n_cols)?..(self.bytes)(r1, n_cols)?)
    }

    /// `out[r] = row r . act` for `n_rows` repacked rows (`packed` is exactly their bytes, as
    /// `row_range` cuts them). Checks every length, then runs the kernel; allocates nothing.
    pub fn matvec(
        &self,
        weight_type: GgmlType,
        packed: &[u8],
        n_rows: usize,
        n_cols: usize,
        act: &[u8],
        out: &mut [f32],
    ) -> Result<(), QuantError> {
        let expected = (self.bytes)(n_rows, n_cols).ok_or(QuantError::NotWholeBlocks {
            ggml_type: weight_type,
            block_size: weight_type.block_size(),
            n_elements: n_cols,
        })?;
        let act_type = quant::vec_dot_type(weight_type)?;
        let act_expected = quant::row_bytes(act_type, n_cols)?;
        for (ty, expected, found) in [
            (weight_type, expected, packed.len()),
            (act_type, act_expected, act.len()),
            (GgmlType::F32, n_rows, out.len()),
        ] {
            if expected != found {
                return Err(QuantError::BadLength {
                    ggml_type: ty,
                    expected,
                    found,
                });
            }
        }
        (self.rows)(n_cols, packed, act, out);
        Ok(())
    }
}

/// The kernels for one weight type.
#[derive(Clone, Copy, Debug)]
pub struct WeightKernel {
    pub weight_type: GgmlType,
    /// The format the activation row must be quantized into before the dot products
    /// ([`quant::vec_dot_type`] of the weight type).
    pub act_type: GgmlType,
    /// One row: `vec_dot(n_cols, w_row, act_row)`.
    pub vec_dot: VecDotFn,
    /// Several rows at once, where a kernel gains from sharing the activation between rows;
    /// `None`: [`WeightKernel::matvec`] calls `vec_dot` per row.
    pub rows: Option<RowsFn>,
    /// A batch of activation rows at once (prompts); `None`: [`WeightKernel::matmul`] runs
    /// the matvec once per activation row.
    pub cols: Option<ColsFn>,
    /// Where `cols` does not give `vec_dot`'s bits: the one-row kernel whose bits it does give
    /// (both within the scalar bound). The x86-64 AVX-512 K-quant prompt kernel keeps each
    /// token in a lane and sums exact block integers; the AVX2 decode kernel, which keeps eight
    /// float lanes per row, decodes 8-11% faster, so decode runs that one. Tests that prove a
    /// batched prompt gives decode's bits run [`KernelSet::with_batch_twins`].
    pub cols_twin: Option<(VecDotFn, &'static str)>,
    /// Which face this is ("scalar", "avx2", ...), for reports.
    pub face: &'static str,
    /// The faster kernel over rows repacked at load time, where this CPU has one; the model
    /// uses it when its weight store holds the repacked copy (else `vec_dot`/`rows` on the
    /// file layout, same results up to summation order).
    pub repacked: Option<RepackedKernel>,
}

impl WeightKernel {
    /// `out[r] = weights[r] . act` for `n_rows` rows of `n_cols` elements. `act` is one row
    /// already quantized into `self.act_type`. Checks every shape (errors name the type, the
    /// expected and the found length), then runs the kernel; allocates nothing.
    /// A worker that owns rows `r0..r1` passes `weights[r0 * row_bytes..r1 * row_bytes]`.
    pub fn matvec(
        &self,
        weights: &[u8],
        n_rows: usize,
        n_cols: usize,
        act: &[u8],
        out: &mut [f32],
    ) -> Result<(), QuantError> {
        let w_row = quant::check_matvec_shapes(
            self.weight_type,
            weights.len(),
            n_rows,
            n_cols,
            act.len(),
            out.len(),
        )?;
        if w_row == 0 {
            out.fill(0.0);
            return Ok(());
        }
        match self.rows {
            Some(rows) => rows(n_cols, weights, act, out),
            None => {
                for (y, row) in out.iter_mut().zip(weights.chunks_exact(w_row)) {
                    *y = (self.vec_dot)(n_cols, row, act);
                }
            }
        }
        Ok(())
    }

    /// `out[t * n_rows + r] = weights[r] . acts[t]` for `n_acts` activation rows (each already
    /// quantized into `self.act_type`, back to back in `acts`) and `n_rows` weight rows of
    /// `n_cols` elements: the matvec of every activation row, with each weight read once.
    /// Every value is bit for bit what [`WeightKernel::matvec`] gives for its activation row.
    /// Checks every shape, allocates nothing. A worker that owns rows `r0..r1` passes
    /// `weights[r0 * row_bytes..r1 * row_bytes]` and an `out` of `n_acts * (r1 - r0)` values.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &self,
        weights: &[u8],
        n_rows: usize,
        n_cols: usize,
        acts: &[u8],
        n_acts: usize,
        out: &mut [f32],
    ) -> Result<(), QuantError> {
        let act_row = quant::row_bytes(self.act_type, n_cols)?;
        // The weights as a matvec checks them (its activation and output checks are the ones
        // of one row of `acts` and of `out`, done below for the whole batch).
        let w_row = quant::check_matvec_shapes(
            self.weight_type,
            weights.len(),
            n_rows,
            n_cols,
            act_row,
            n_rows,
        )?;
        for (ty, expected, found) in [
            (self.act_type, act_row.checked_mul(n_acts), acts.len()),
            (GgmlType::F32, n_rows.checked_mul(n_acts), out.len()),
        ] {
            if expected != Some(found) {
                return Err(QuantError::BadLength {
                    ggml_type: ty,
                    expected: expected.unwrap_or(usize::MAX),
                    found,
                });
            }
        }
        if w_row == 0 {
            out.fill(0.0);
            return Ok(());
        }
        match self.cols {
            Some(cols) if n_acts > 0 && n_rows > 0 => cols(n_cols, weights, acts, n_acts, out),
            // The generic twin: one matvec per activation row (through `rows` where the set
            // has it, so the values are the matvec's by construction).
            _ => {
                for (act, o) in acts
                    .chunks_exact(act_row)
                    .zip(out.chunks_exact_mut(n_rows.max(1)))
                {
                    self.matvec(weights, n_rows, n_cols, act, o)?;
                }
            }
        }
        Ok(())
    }
}

const fn scalar_kernel(
    weight_type: GgmlType,
    act_type: GgmlType,
    vec_dot: VecDotFn,
) -> WeightKernel {
    WeightKernel {
        weight_type,
        act_type,
        vec_dot,
        rows: None,
        cols: None,
        cols_twin: None,
        face: "scalar",
        repacked: None,
    }
}

/// Every weight type with a matvec, with its scalar reference (pairs as in `quant::vec_dot_type`).
const SCALAR_WEIGHTS: [WeightKernel; 17] = {
    use quant::*;
    use GgmlType as T;
    [
        scalar_kernel(T::F32, T::F32, f32::vec_dot),
        scalar_kernel(T::F16, T::F16, f16::vec_dot),
        scalar_kernel(T::BF16, T::BF16, bf16::vec_dot),
        scalar_kernel(T::Q4_0, T::Q8_0, q4_0::vec_dot),
        scalar_kernel(T::Q4_1, T::Q8_1, q4_1::vec_dot),
        scalar_kernel(T::Q5_0, T::Q8_0, q5_0::vec_dot),
        scalar_kernel(T::Q5_1, T::Q8_1, q5_1::vec_dot),
        scalar_kernel(T::Q8_0, T::Q8_0, q8_0::vec_dot),
        scalar_kernel(T::Q2_K, T::Q8_K, q2_k::vec_dot),
        scalar_kernel(T::Q3_K, T::Q8_K, q3_k::vec_dot),
        scalar_kernel(T::Q4_K, T::Q8_K, q4_k::vec_dot),
        scalar_kernel(T::Q5_K, T::Q8_K, q5_k::vec_dot),
        scalar_kernel(T::Q6_K, T::Q8_K, q6_k::vec_dot),
        scalar_kernel(T::Q1_0, T::Q8_0, q1_0::vec_dot),
        scalar_kernel(T::Q2_0, T::Q8_0, q2_0::vec_dot),
        scalar_kernel(T::TQ1_0, T::Q8_K, tq1_0::vec_dot),
        scalar_kernel(T::TQ2_0, T::Q8_K, tq2_0::vec_dot),
    ]
};

/// Every activation format with its scalar reference quantizer.
const SCALAR_QUANTIZERS: [(GgmlType, QuantizeFn); 6] = {
    use quant::*;
    [
        (GgmlType::F32, f32::quantize_row),
        (GgmlType::F16, f16::quantize_row),
        (GgmlType::BF16, bf16::quantize_row),
        (GgmlType::Q8_0, q8_0::quantize_row),
        (GgmlType::Q8_1, q8_1::quantize_row),
        (GgmlType::Q8_K, q8_k::quantize_row),
    ]
};

/// The kernels for every weight type and activation format on this CPU. Chosen once at start
/// (`KernelSet::select`), then shared read-only by every thread.
#[derive(Clone, Debug)]
pub struct KernelSet {
    name: &'static str,
    weights: [WeightKernel; 17],
    quantizers: [(GgmlType, QuantizeFn); 6],
    /// Attention of one query head over the f16 KV cache: `math::attention_head` or a SIMD
    /// face of it with the same bits.
    attention: AttentionHeadFn,
    /// SwiGLU of one FFN row: `math::swiglu` or a SIMD face of it with the same bits.
    swiglu: fn(&mut [f32], &[f32]),
}

impl KernelSet {
    /// The scalar reference kernels only: the ground truth, and what runs on a CPU we have no
    /// SIMD kernels for.
    pub fn scalar() -> KernelSet {
        KernelSet {
            name: "scalar",
            weights: SCALAR_WEIGHTS,
            quantizers: SCALAR_QUANTIZERS,
            attention: math::attention_head,
            swiglu: math::swiglu,
        }
    }

    /// The fastest kernels that `features` allows and the running CPU really has. Clear a flag
    /// in `features` to keep its kernels out (e.g. `CpuFeatures::default()` for all-scalar).
    pub fn select(features: &CpuFeatures) -> KernelSet {
        #[allow(unused_mut)]
        let mut set = KernelSet::scalar();
        #[cfg(target_arch = "x86_64")]
        x86_64::install(features, &mut set);
        #[cfg(target_arch = "aarch64")]
        aarch64::install(features, &mut set);
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        attention_simd::install(features, &mut set);
        let _ = features;
        set
    }

    /// This set with every batched kernel paired with the one-row kernel that gives its bits
    /// (see [`WeightKernel::cols_twin`]): a prompt then gives token-by-token decoding's logits
    /// to the bit, which tests check. The production set decodes with the faster twin-less kernels.
    pub fn with_batch_twins(&self) -> KernelSet {
        let mut set = self.clone();
        for k in &mut set.weights {
            if let Some((twin, face)) = k.cols_twin.take() {
                k.vec_dot = twin;
                k.rows = None;
                k.face = face;
            }
        }
        set
    }

    /// What was selected, for `smolrun bench` and logs: "x86_64-avx512", "x86_64-avx2",
    /// "aarch64-dotprod", "aarch64-neon" or "scalar".
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Attention of one query head (see `math::attention_head`), the face this CPU runs.
    pub fn attention(&self) -> AttentionHeadFn {
        self.attention
    }

    /// SwiGLU of one FFN row (see `math::swiglu`), the face this CPU runs.
    pub fn swiglu(&self) -> fn(&mut [f32], &[f32]) {
        self.swiglu
    }

    /// The kernels for weights of type `ty`; `Unsupported` for a type with no matvec.
    pub fn weight(&self, ty: GgmlType) -> Result<&WeightKernel, QuantError> {
        self.weights
            .iter()
            .find(|k| k.weight_type == ty)
            .ok_or(QuantError::Unsupported {
                ggml_type: ty,
                op: "matvec weights",
            })
    }

    /// Quantizes an f32 row into the activation format `ty` (a `WeightKernel::act_type`);
    /// `out` must be exactly the row's size in `ty`.
    pub fn quantize_activation(
        &self,
        ty: GgmlType,
        x: &[f32],
        out: &mut [u8],
    ) -> Result<(), QuantError> {
        let quantize = self
            .quantizers
            .iter()
            .find(|q| q.0 == ty)
            .ok_or(QuantError::Unsupported {
                ggml_type: ty,
                op: "activation quantization",
            })?
            .1;
        let expected = quant::row_bytes(ty, x.len())?;
        if out.len() != expected {
            return Err(QuantError::BadLength {
                ggml_type: ty,
                expected,
                found: out.len(),
            });
        }
        quantize(x, out);
        Ok(())
    }

    /// [`quant::matvec`] through this set: `self.weight(w)?.matvec(...)`. Model code that runs
    /// many matvecs keeps the `WeightKernel` instead of looking it up each time.
    pub fn matvec(
        &self,
        w: GgmlType,
        weights: &[u8],
        n_rows: usize,
        n_cols: usize,
        act: &[u8],
        out: &mut [f32],
    ) -> Result<(), QuantError> {
        self.weight(w)?.matvec(weights, n_rows, n_cols, act, out)
    }

    /// Adds the batched kernel of weight type `ty` (on top of what `install` put there; it
    /// must give the bits of that entry's `vec_dot`). Architecture sections only, after
    /// checking the CPU.
    #[allow(dead_code)]
    fn install_cols(&mut self, ty: GgmlType, cols: ColsFn) {
        if let Some(k) = self.weights.iter_mut().find(|k| k.weight_type == ty) {
            k.cols = Some(cols);
            k.cols_twin = None;
        }
    }

    /// Adds a batched kernel for weight type `ty` that gives the bits of `twin`, not of the
    /// entry's `vec_dot` (see [`WeightKernel::cols_twin`]).
    #[allow(dead_code)]
    fn install_cols_with_twin(
        &mut self,
        ty: GgmlType,
        cols: ColsFn,
        twin: VecDotFn,
        twin_face: &'static str,
    ) {
        if let Some(k) = self.weights.iter_mut().find(|k| k.weight_type == ty) {
            k.cols = Some(cols);
            k.cols_twin = Some((twin, twin_face));
        }
    }

    /// Replaces the kernels of weight type `ty`. Architecture sections only, after checking
    /// the CPU; the activation format stays the one `quant::vec_dot_type` gives.
    #[allow(dead_code)]
    fn install(
        &mut self,
        ty: GgmlType,
        vec_dot: VecDotFn,
        rows: Option<RowsFn>,
        face: &'static str,
    ) {
        if let Some(k) = self.weights.iter_mut().find(|k| k.weight_type == ty) {
            k.vec_dot = vec_dot;
            k.rows = rows;
            // A batched kernel belongs to the vec_dot it was installed with.
            k.cols = None;
            k.cols_twin = None;
            k.face = face;
        }
    }

    /// Adds a repacked-layout kernel for weight type `ty` (the architecture sections install
    /// theirs after checking the CPU; tests and experiments may add portable ones: the table
    /// holds only safe functions, so no entry can reach an instruction the CPU lacks).
    pub fn add_repacked(&mut self, ty: GgmlType, repacked: RepackedKernel) {
        if let Some(k) = self.weights.iter_mut().find(|k| k.weight_type == ty) {
            k.repacked = Some(repacked);
        }
    }
}

// =============================================================================================
// x86-64: AVX2 + FMA + F16C (smolrun_kernels::x86_64::avx2).
// =============================================================================================
#[cfg(target_arch = "x86_64")]
mod x86_64 {
    use super::KernelSet;
    use crate::platform::CpuFeatures;
    use crate::quant::GgmlType;
    use smolrun_kernels::x86_64::{
        avx2, avx2_cols, avx2_fma_f16c_usable, avx2_k, avx2_q0, avx512_k, avx512_q0,
        avx512_vnni_usable,
    };

    /// Installs the AVX2 kernels when the caller allows AVX2, FMA and F16C and cpuid confirms
    /// them; on top of them the AVX-512 VNNI kernels of the 32-element formats when the caller
    /// also allows AVX512F, AVX512BW and AVX512-VNNI and cpuid confirms those and AVX512VL.
    pub(super) fn install(features: &CpuFeatures, set: &mut KernelSet) {
        let allowed = features.avx2 && features.fma && features.f16c;
        if !allowed || !avx2_fma_f16c_usable() {
            return;
        }
        set.name = "x86_64-avx2";
        // Q4_K and Q6_K (most of a decode step) from avx2_k: scales decoded and spread in
        // registers; the same lanes and float order as avx2.rs, so the same bits.
        set.install(GgmlType::Q4_K, q4_k, None, "avx2");
        set.install(GgmlType::Q5_K, q5_k, None, "avx2");
        set.install(GgmlType::Q6_K, q6_k, None, "avx2");
        set.install(GgmlType::Q8_0, q8_0, Some(q8_0_rows), "avx2");
        set.install(GgmlType::Q4_0, q4_0, Some(q4_0_rows), "avx2");
        set.install(GgmlType::Q5_0, q5_0, Some(q5_0_rows), "avx2");
        set.install(GgmlType::F16, f16, None, "avx2");
        set.install(GgmlType::F32, f32, None, "avx2");
        // Prompts: each weight block unpacked once for 4 tokens, bit for bit the vec_dots above.
        set.install_cols(GgmlType::Q4_K, q4_k_cols);
        set.install_cols(GgmlType::Q5_K, q5_k_cols);
        set.install_cols(GgmlType::Q6_K, q6_k_cols);
        set.install_cols(GgmlType::Q8_0, q8_0_cols);
        set.install_cols(GgmlType::Q4_0, q4_0_cols);
        set.install_cols(GgmlType::Q5_0, q5_0_cols);
        let allowed = features.avx512f && features.avx512bw && features.avx512vnni;
        if !allowed || !avx512_vnni_usable() {
            return;
        }
        set.name = "x86_64-avx512";
        set.install(GgmlType::Q8_0, q8_0_512, Some(q8_0_rows_512), "avx512");
        set.install(GgmlType::Q4_0, q4_0_512, Some(q4_0_rows_512), "avx512");
        set.install(GgmlType::Q5_0, q5_0_512, Some(q5_0_rows_512), "avx512");
        set.install_cols(GgmlType::Q8_0, q8_0_cols_512);
        set.install_cols(GgmlType::Q4_0, q4_0_cols_512);
        set.install_cols(GgmlType::Q5_0, q5_0_cols_512);
        // Q4_K and Q6_K: prompts by avx512_k (the tokens in the lanes, 2x the AVX2 batch
        // speed on Qwen2.5-1.5B), decode by avx2_k, which is 8-11% faster than avx512_k's
        // one-row kernel (the bits of the prompt kernel, its `cols_twin`).
        set.install_cols_with_twin(GgmlType::Q4_K, q4_k_cols_512, q4_k_512, "avx512");
        set.install_cols_with_twin(GgmlType::Q6_K, q6_k_cols_512, q6_k_512, "avx512");
    }

    // SAFETY (every function below): installed only by `install`, after
    // `avx2_fma_f16c_usable()` confirmed AVX2, FMA and F16C on this CPU. The kernels read only
    // whole blocks inside both slices.
    fn q4_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { avx2_k::vec_dot_q4_k_q8_k(n, w, a) }
    }
    fn q5_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { avx2::vec_dot_q5_k_q8_k(n, w, a) }
    }
    fn q6_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { avx2_k::vec_dot_q6_k_q8_k(n, w, a) }
    }
    fn q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { avx2::vec_dot_q8_0_q8_0(n, w, a) }
    }
    fn q4_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { avx2::vec_dot_q4_0_q8_0(n, w, a) }
    }
    fn q5_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { avx2::vec_dot_q5_0_q8_0(n, w, a) }
    }
    fn f16(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { avx2::vec_dot_f16(n, w, a) }
    }
    fn f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { avx2::vec_dot_f32(n, w, a) }
    }
    fn q4_k_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
        unsafe { avx2_k::matmul_q4_k_q8_k(n, w, a, t, out) }
    }
    fn q5_k_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
        unsafe { avx2_cols::matmul_q5_k_q8_k(n, w, a, t, out) }
    }
    fn q6_k_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
        unsafe { avx2_k::matmul_q6_k_q8_k(n, w, a, t, out) }
    }
    // The 32-element formats (avx2_q0): several rows per pass (matvec) and batches (matmul),
    // both giving the bits of the vec_dot above for every row.
    fn q8_0_rows(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
        unsafe { avx2_q0::matvec_q8_0_q8_0(n, w, a, out) }
    }
    fn q4_0_rows(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
        unsafe { avx2_q0::matvec_q4_0_q8_0(n, w, a, out) }
    }
    fn q5_0_rows(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
        unsafe { avx2_q0::matvec_q5_0_q8_0(n, w, a, out) }
    }
    fn q8_0_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
        unsafe { avx2_q0::matmul_q8_0_q8_0(n, w, a, t, out) }
    }
    fn q4_0_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
        unsafe { avx2_q0::matmul_q4_0_q8_0(n, w, a, t, out) }
    }
    fn q5_0_cols(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
        unsafe { avx2_q0::matmul_q5_0_q8_0(n, w, a, t, out) }
    }

    // `avx512_vnni_usable()` confirmed AVX2, FMA, F16C, AVX512F/BW/VL and AVX512-VNNI. The
    // three entry points of a format give the same bits (avx512_q0's docs).
    fn q8_0_512(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { avx512_q0::vec_dot_q8_0_q8_0(n, w, a) }
    }
    fn q4_0_512(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { avx512_q0::vec_dot_q4_0_q8_0(n, w, a) }
    }
    fn q5_0_512(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { avx512_q0::vec_dot_q5_0_q8_0(n, w, a) }
    }
    fn q8_0_rows_512(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
        unsafe { avx512_q0::matvec_q8_0_q8_0(n, w, a, out) }
    }
    fn q4_0_rows_512(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
        unsafe { avx512_q0::matvec_q4_0_q8_0(n, w, a, out) }
    }
    fn q5_0_rows_512(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
        unsafe { avx512_q0::matvec_q5_0_q8_0(n, w, a, out) }
    }
    fn q8_0_cols_512(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
        unsafe { avx512_q0::matmul_q8_0_q8_0(n, w, a, t, out) }
    }
    fn q4_0_cols_512(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
        unsafe { avx512_q0::matmul_q4_0_q8_0(n, w, a, t, out) }
    }
    fn q5_0_cols_512(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
        unsafe { avx512_q0::matmul_q5_0_q8_0(n, w, a, t, out) }
    }
    fn q4_k_512(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { avx512_k::vec_dot_q4_k_q8_k(n, w, a) }
    }
    fn q6_k_512(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { avx512_k::vec_dot_q6_k_q8_k(n, w, a) }
    }
    fn q4_k_cols_512(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
        unsafe { avx512_k::matmul_q4_k_q8_k(n, w, a, t, out) }
    }
    fn q6_k_cols_512(n: usize, w: &[u8], a: &[u8], t: usize, out: &mut [f32]) {
        unsafe { avx512_k::matmul_q6_k_q8_k(n, w, a, t, out) }
    }
}

// =============================================================================================
// Attention over the f16 KV cache: the SIMD loops of `math::attention_head_with`, bit for bit
// the scalar `math::attention_head` (x86-64: AVX2 + FMA + F16C; aarch64: ARMv8.0 NEON, one
// face for every core); and SwiGLU (`math::swiglu`, its `libm::expf` lane by lane). Tested
// against the scalar code at the bottom of this file.
// =============================================================================================
#[cfg(target_arch = "x86_64")]
mod attention_simd {
    use super::KernelSet;
    use crate::math::{self, AttentionKernel, AttentionLoops, AttentionSpan, KvHead};
    use crate::platform::CpuFeatures;
    use smolrun_kernels::x86_64::{attention as k, avx2_fma_f16c_usable, exp};

    pub(super) fn install(features: &CpuFeatures, set: &mut KernelSet) {
        if features.avx2 && features.fma && features.f16c && avx2_fma_f16c_usable() {
            set.attention = attention_head_avx2;
            set.swiglu = swiglu_avx2;
        }
    }

    fn swiglu_avx2(gate: &mut [f32], up: &[f32]) {
        // SAFETY: installed only after `avx2_fma_f16c_usable()` confirmed AVX2.
        unsafe { exp::swiglu(gate, up) }
    }

    // SAFETY (the loops below): reachable only through `attention_head_avx2`, which `install`
    // puts in the set after `avx2_fma_f16c_usable()` confirmed AVX2, FMA and F16C. The kernels
    // clamp their row counts to the slices.
    pub(super) const LOOPS: AttentionLoops = AttentionLoops {
        key_dots_lanes64: |q, keys, stride, scores| unsafe {
            k::key_dots_lanes64(q, keys, stride, scores)
        },
        key_dots_sequential: |q, keys, stride, scores| unsafe {
            k::key_dots_sequential(q, keys, stride, scores)
        },
        weighted_values: |out, w, values, stride| unsafe {
            k::weighted_values(out, w, values, stride)
        },
        rescale_f16: |out, ms| unsafe { k::rescale_f16(out, ms) },
        accumulate_f16: |out, value, vs| unsafe { k::accumulate_f16(out, value, vs) },
    };

    #[allow(clippy::too_many_arguments)]
    fn attention_head_avx2(
        out: &mut [f32],
        q: &[f32],
        kv: &KvHead,
        scores: &mut [f32],
        span: AttentionSpan,
        scale: f32,
        softcap_at: Option<f32>,
        kernel: AttentionKernel,
    ) {
        math::attention_head_with(&LOOPS, out, q, kv, scores, span, scale, softcap_at, kernel);
    }
}

#[cfg(target_arch = "aarch64")]
mod attention_simd {
    use super::KernelSet;
    use crate::math::{self, AttentionKernel, AttentionLoops, AttentionSpan, KvHead};
    use crate::platform::CpuFeatures;
    use smolrun_kernels::aarch64::{attention as k, exp};

    pub(super) fn install(features: &CpuFeatures, set: &mut KernelSet) {
        if features.neon {
            set.attention = attention_head_neon;
            set.swiglu = exp::swiglu;
        }
    }

    pub(super) const LOOPS: AttentionLoops = AttentionLoops {
        key_dots_lanes64: k::key_dots_lanes64,
        key_dots_sequential: k::key_dots_sequential,
        weighted_values: k::weighted_values,
        rescale_f16: k::rescale_f16,
        accumulate_f16: k::accumulate_f16,
    };

    #[allow(clippy::too_many_arguments)]
    fn attention_head_neon(
        out: &mut [f32],
        q: &[f32],
        kv: &KvHead,
        scores: &mut [f32],
        span: AttentionSpan,
        scale: f32,
        softcap_at: Option<f32>,
        kernel: AttentionKernel,
    ) {
        math::attention_head_with(&LOOPS, out, q, kv, scores, span, scale, softcap_at, kernel);
    }
}

// =============================================================================================
// aarch64: NEON kernels, with and without dotprod (smolrun_kernels::aarch64).
// `install` checks `features.neon` / `features.dotprod` (an ARMv8.0 core must never reach an
// sdot) and names the set "aarch64-dotprod" or "aarch64-neon". The tests at the bottom of this
// file compare whatever is installed here against the scalar twins; core/tests/neon_exact.rs
// tests both faces of every kernel directly (tools/test-aarch64.sh, qemu a76 and a53).
// =============================================================================================
#[cfg(target_arch = "aarch64")]
mod aarch64 {
    use super::{KernelSet, RepackedKernel};
    use crate::platform::CpuFeatures;
    use crate::quant::GgmlType;
    use smolrun_kernels::aarch64 as neon;

    /// Installs the ARMv8.0 NEON kernels when `features.neon` (every aarch64 CPU has it; a
    /// cleared flag keeps the set scalar), and on top of them the sdot kernels when
    /// `features.dotprod`.
    ///
    /// Unlike cpuid on x86-64, aarch64 has no unprivileged, portable way to confirm a feature
    /// from no_std code (reading ID_AA64ISAR0_EL1 traps on iOS), so the dotprod flag is taken
    /// as the platform detected it (getauxval(AT_HWCAP) & HWCAP_ASIMDDP on Linux/Android,
    /// sysctl hw.optional.arm.FEAT_DotProd on iOS). A flag set by hand on a CPU without dotprod
    /// makes the first sdot raise SIGILL, a clean crash, never a wrong result.
    pub(super) fn install(features: &CpuFeatures, set: &mut KernelSet) {
        if !features.neon {
            return;
        }
        set.name = "aarch64-neon";
        set.install(GgmlType::Q4_K, neon::vec_dot_q4_k_q8_k_neon, None, "neon");
        set.install(GgmlType::Q6_K, neon::vec_dot_q6_k_q8_k_neon, None, "neon");
        set.install(GgmlType::Q8_0, neon::vec_dot_q8_0_q8_0_neon, None, "neon");
        set.install(GgmlType::Q4_0, neon::vec_dot_q4_0_q8_0_neon, None, "neon");
        set.install(GgmlType::Q5_0, neon::vec_dot_q5_0_q8_0_neon, None, "neon");
        set.install(GgmlType::F16, neon::vec_dot_f16_neon, None, "neon");
        set.install(GgmlType::F32, neon::vec_dot_f32_neon, None, "neon");
        if !features.dotprod {
            return;
        }
        set.name = "aarch64-dotprod";
        set.install(GgmlType::Q4_K, q4_k_dotprod, None, "dotprod");
        set.install(GgmlType::Q6_K, q6_k_dotprod, None, "dotprod");
        set.install(GgmlType::Q8_0, q8_0_dotprod, None, "dotprod");
        set.install(GgmlType::Q4_0, q4_0_dotprod, None, "dotprod");
        set.install(GgmlType::Q5_0, q5_0_dotprod, None, "dotprod");
        // Rows interleaved by 4: one sdot by activation element feeds 4 rows. The tail rows
        // of a matrix run through the one-row dotprod kernel inside the same call.
        set.add_repacked(
            GgmlType::Q4_K,
            RepackedKernel {
                layout: "q4_k_x4",
                group_rows: 4,
                bytes: neon::q4_k_x4_bytes,
                repack: neon::repack_q4_k_x4,
                rows: q4_k_x4_dotprod,
                face: "dotprod-x4",
            },
        );
        set.add_repacked(
            GgmlType::Q8_0,
            RepackedKernel {
                layout: "q8_0_x4",
                group_rows: 4,
                bytes: neon::q8_0_x4_bytes,
                repack: neon::repack_q8_0_x4,
                rows: q8_0_x4_dotprod,
                face: "dotprod-x4",
            },
        );
        set.add_repacked(
            GgmlType::Q5_0,
            RepackedKernel {
                layout: "q5_0_x4",
                group_rows: 4,
                bytes: neon::q5_0_x4_bytes,
                repack: neon::repack_q5_0_x4,
                rows: q5_0_x4_dotprod,
                face: "dotprod-x4",
            },
        );
    }

    // SAFETY (the three below): installed only when the platform reported dotprod; the x4
    // matvecs read only whole blocks inside both slices and give 0 for rows they lack.
    fn q4_k_x4_dotprod(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
        unsafe { neon::matvec_q4_k_x4_dotprod(n, w, a, out) }
    }
    fn q8_0_x4_dotprod(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
        unsafe { neon::matvec_q8_0_x4_dotprod(n, w, a, out) }
    }
    fn q5_0_x4_dotprod(n: usize, w: &[u8], a: &[u8], out: &mut [f32]) {
        unsafe { neon::matvec_q5_0_x4_dotprod(n, w, a, out) }
    }

    // SAFETY (every function below): installed only by `install` when the platform reported
    // dotprod. The kernels read only whole blocks inside both slices.
    fn q4_k_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { neon::vec_dot_q4_k_q8_k_dotprod(n, w, a) }
    }
    fn q6_k_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { neon::vec_dot_q6_k_q8_k_dotprod(n, w, a) }
    }
    fn q8_0_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { neon::vec_dot_q8_0_q8_0_dotprod(n, w, a) }
    }
    fn q4_0_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { neon::vec_dot_q4_0_q8_0_dotprod(n, w, a) }
    }
    fn q5_0_dotprod(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe { neon::vec_dot_q5_0_q8_0_dotprod(n, w, a) }
    }
}

// =============================================================================================
// Exactness of every installed SIMD kernel against its scalar twin.
//
// The integer parts must agree exactly, the float results within a bound that comes from the
// summation order alone:
//
// * Both faces compute the same exact real sum: per block, an exact integer (the SIMD kernels
//   lay the products out in other lanes, but integer addition is associative) times the same
//   f32 scale product (both compute `f16(d) * d_act` with one rounding, or an exact f16 x f16
//   product). Only the f32 operations that follow differ in order.
// * Recursive f32 summation of terms t_i along a chain of at most k operations (conversions,
//   products, additions, FMAs count one rounding each) is within about k * u * sum |t_i| of
//   the exact sum, u = 2^-24 (Higham, "Accuracy and Stability of Numerical Algorithms", 4.2).
//   sum |t_i| <= M = sum over elements |w_e| * |a_e|, where for Q4_K/Q5_K |w_e| counts the
//   scale and the min terms separately (|d| sc q + |dmin| m), as both faces keep them apart.
// * Chains: block formats with nb blocks: scalar nb + 11 (8 lanes summed at the end, int->f32,
//   product), SIMD nb + 6 (FMA per block, 2 accumulators, 3 levels of lane sums, the min term):
//   k = 2 (nb + 12) covers both errors. F32/F16 over n elements: SIMD n / 32 + 17 (4 x 8 lanes,
//   the 8-wide remainder, 5 levels of sums, up to 7 scalar tail terms), scalar 3 (its f32
//   product and final rounding; its f64 sum adds a negligible 2^-53 n): k = n / 32 + 20.
// * M is computed in f64 from the dequantized rows, whose own rounding (a few u relative) is
//   covered by the factor 1.001.
//
// Separate "exact" cases choose scales of 1 and ranges where every intermediate is an integer
// below 2^24: there both faces are exact and must agree to the bit, which proves the integer
// parts (every quant and activation bit pattern, -128 included, appears in one of them).
// =============================================================================================
#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::testutil::{random_blocks, XorShift};
    use alloc::vec;
    use alloc::vec::Vec;
    use std::println;

    /// The unit roundoff of f32.
    const U: f64 = 1.0 / (1u64 << 24) as f64;

    fn detected_features() -> CpuFeatures {
        #[allow(unused_mut)]
        let mut f = CpuFeatures::default();
        #[cfg(target_arch = "x86_64")]
        {
            f.avx2 = std::arch::is_x86_feature_detected!("avx2");
            f.fma = std::arch::is_x86_feature_detected!("fma");
            f.f16c = std::arch::is_x86_feature_detected!("f16c");
            f.avx512f = std::arch::is_x86_feature_detected!("avx512f");
            f.avx512bw = std::arch::is_x86_feature_detected!("avx512bw");
            f.avx512vnni = std::arch::is_x86_feature_detected!("avx512vnni");
        }
        #[cfg(target_arch = "aarch64")]
        {
            f.neon = std::arch::is_aarch64_feature_detected!("neon");
            f.dotprod = std::arch::is_aarch64_feature_detected!("dotprod");
            f.fp16 = std::arch::is_aarch64_feature_detected!("fp16");
            f.i8mm = std::arch::is_aarch64_feature_detected!("i8mm");
        }
        f
    }

    /// (weight type, this CPU's SIMD kernel, its scalar twin) for every non-scalar entry.
    fn simd_kernels() -> Vec<(GgmlType, WeightKernel, WeightKernel)> {
        let scalar = KernelSet::scalar();
        let mut pairs: Vec<(GgmlType, WeightKernel, WeightKernel)> = Vec::new();
        for fast in fast_sets() {
            for (f, s) in fast.weights.iter().zip(scalar.weights.iter()) {
                let seen = pairs
                    .iter()
                    .any(|(ty, k, _)| *ty == f.weight_type && k.face == f.face);
                if f.face != "scalar" && !seen {
                    pairs.push((f.weight_type, *f, *s));
                }
            }
        }
        if pairs.is_empty() {
            println!("notice: no SIMD kernels for this CPU; nothing to compare");
        }
        pairs
    }

    /// Every kernel set this CPU runs: the selected one and, on x86-64, also the AVX2 set
    /// (AVX-512 flags cleared), so that both faces are tested where both can run.
    fn fast_sets() -> Vec<KernelSet> {
        let features = detected_features();
        #[allow(unused_mut)]
        let mut sets = vec![KernelSet::select(&features)];
        #[cfg(target_arch = "x86_64")]
        {
            let avx2_only = CpuFeatures {
                avx512f: false,
                avx512bw: false,
                avx512vnni: false,
                ..features
            };
            let set = KernelSet::select(&avx2_only);
            if set.name() != sets[0].name() {
                sets.push(set);
            }
        }
        sets
    }

    /// Byte offsets of the f16 scale fields of a block of the SIMD-covered formats.
    fn f16_fields(ty: GgmlType) -> &'static [usize] {
        match ty {
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
            GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
            GgmlType::Q6_K => &[208],
            _ => &[],
        }
    }

    fn put_f16(b: &mut [u8], off: usize, v: f32) {
        b[off..off + 2].copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
    }

    /// One Q8_K block with scale `d` and quants `qs`, with consistent group sums.
    fn q8_k_block(d: f32, qs: &[i8]) -> Vec<u8> {
        let mut b = vec![0u8; quant::q8_k::BLOCK_BYTES];
        b[..4].copy_from_slice(&d.to_le_bytes());
        for (dst, &q) in b[quant::q8_k::OFF_QS..].iter_mut().zip(qs) {
            *dst = q as u8;
        }
        for j in 0..16 {
            let s: i32 = qs[16 * j..16 * j + 16].iter().map(|&q| q as i32).sum();
            let off = quant::q8_k::OFF_BSUMS + 2 * j;
            b[off..off + 2].copy_from_slice(&(s as i16).to_le_bytes());
        }
        b
    }

    /// An activation row of `n` elements in `act_ty` whose quants come from `q` (Q8_0/Q8_K,
    /// scale `d` per block) or whose values are `q` as floats (F16/F32).
    fn act_from_quants(act_ty: GgmlType, d: f32, q: &[i8]) -> Vec<u8> {
        match act_ty {
            GgmlType::Q8_K => q.chunks_exact(256).flat_map(|c| q8_k_block(d, c)).collect(),
            GgmlType::Q8_0 => q
                .chunks_exact(32)
                .flat_map(|c| {
                    let mut b = vec![0u8; 34];
                    put_f16(&mut b, 0, d);
                    for (dst, &v) in b[2..].iter_mut().zip(c) {
                        *dst = v as u8;
                    }
                    b
                })
                .collect(),
            _ => quantize(act_ty, &q.iter().map(|&v| v as f32 * d).collect::<Vec<_>>()),
        }
    }

    fn quantize(act_ty: GgmlType, x: &[f32]) -> Vec<u8> {
        let mut act = vec![0u8; quant::row_bytes(act_ty, x.len()).unwrap()];
        quant::quantize_row(act_ty, x, &mut act).unwrap();
        act
    }

    /// M = sum |w_e| |a_e| in f64, with Q4_K/Q5_K's scale and min terms counted apart.
    fn magnitude(ty: GgmlType, act_ty: GgmlType, w: &[u8], act: &[u8], n: usize) -> f64 {
        let mut w = w.to_vec();
        if matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K) {
            // |d| and -|dmin|: each element dequantizes to |d| sc q + |dmin| m.
            for b in w.chunks_exact_mut(ty.type_size()) {
                b[1] &= 0x7f;
                b[3] |= 0x80;
            }
        }
        let (mut wf, mut af) = (vec![0f32; n], vec![0f32; n]);
        quant::dequantize_row(ty, &w, &mut wf).unwrap();
        quant::dequantize_row(act_ty, act, &mut af).unwrap();
        wf.iter()
            .zip(&af)
            .map(|(&a, &b)| (a as f64 * b as f64).abs())
            .sum()
    }

    fn check_close(
        fast: &WeightKernel,
        scalar: &WeightKernel,
        n: usize,
        w: &[u8],
        act: &[u8],
        case: &str,
    ) {
        let ty = fast.weight_type;
        let want = (scalar.vec_dot)(n, w, act);
        let got = (fast.vec_dot)(n, w, act);
        let bs = ty.block_size();
        let k = if bs == 1 {
            n / 32 + 20
        } else {
            2 * (n / bs + 12)
        };
        check_rows_give_vec_dot_bits(fast, n, w, act, case);
        let m = magnitude(ty, fast.act_type, w, act, n);
        let tol = k as f64 * U * m * 1.001;
        assert!(
            want.is_finite(),
            "{ty} {case}: the reference is {want}; pick finite cases"
        );
        assert!(
            (got as f64 - want as f64).abs() <= tol,
            "{ty} {case} (n {n}): {} gives {got}, scalar {want}, difference {} > bound {tol} \
             (M {m}, k {k})",
            fast.face,
            (got - want).abs()
        );
    }

    /// Where `fast` has a several-rows matvec that promises the vec_dot's bits (the x86-64
    /// 32-element formats), runs it on 5 copies of the row `w` (a group of 4 rows and a tail
    /// row) and checks every output against `vec_dot` to the bit.
    fn check_rows_give_vec_dot_bits(
        fast: &WeightKernel,
        n: usize,
        w: &[u8],
        act: &[u8],
        case: &str,
    ) {
        let promises_bits = matches!(
            fast.weight_type,
            GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0
        ) || fast.face == "avx512";
        let Some(rows) = fast.rows.filter(|_| promises_bits) else {
            return;
        };
        let want = (fast.vec_dot)(n, w, act);
        let matrix = w.repeat(5);
        let mut out = [f32::NAN; 5];
        rows(n, &matrix, act, &mut out);
        for (r, got) in out.iter().enumerate() {
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{} {case} (n {n}): row {r} of the {} rows kernel gives {got}, vec_dot {want}",
                fast.weight_type,
                fast.face
            );
        }
    }

    fn check_exact(
        fast: &WeightKernel,
        scalar: &WeightKernel,
        n: usize,
        w: &[u8],
        act: &[u8],
        case: &str,
    ) {
        check_rows_give_vec_dot_bits(fast, n, w, act, case);
        let want = (scalar.vec_dot)(n, w, act);
        let got = (fast.vec_dot)(n, w, act);
        assert_eq!(
            got, want,
            "{} {case} (n {n}): every intermediate is an integer below 2^24, so the {} result \
             must equal the scalar one exactly",
            fast.weight_type, fast.face
        );
    }

    fn random_i8(rng: &mut XorShift, n: usize, lo: i32, hi: i32) -> Vec<i8> {
        (0..n)
            .map(|_| (lo + (rng.next_u64() % (hi - lo + 1) as u64) as i32) as i8)
            .collect()
    }

    #[test]
    fn x86_64_selects_avx2_when_the_cpu_has_it() {
        let features = detected_features();
        let set = KernelSet::select(&features);
        #[cfg(target_arch = "x86_64")]
        if features.avx2 && features.fma && features.f16c {
            // With AVX-512 VNNI the 32-element formats take the avx512 face, the rest stay
            // AVX2; with the AVX-512 flags cleared, everything is AVX2.
            let avx512 = features.avx512f
                && features.avx512bw
                && features.avx512vnni
                && smolrun_kernels::x86_64::avx512_vnni_usable();
            let q0 = [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0];
            if avx512 {
                assert_eq!(set.name(), "x86_64-avx512");
                for ty in q0 {
                    assert_eq!(set.weight(ty).unwrap().face, "avx512", "{ty}");
                }
                // K-quants: AVX-512 prompts, AVX2 decode (the prompt kernel's bits: its twin).
                for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
                    let k = set.weight(ty).unwrap();
                    assert_eq!(k.face, "avx2", "{ty}");
                    assert!(k.cols.is_some() && k.cols_twin.is_some(), "{ty}");
                    let twins = set.with_batch_twins();
                    assert_eq!(twins.weight(ty).unwrap().face, "avx512", "{ty}");
                }
            }
            let set = if avx512 {
                KernelSet::select(&CpuFeatures {
                    avx512f: false,
                    ..features
                })
            } else {
                set.clone()
            };
            assert_eq!(set.name(), "x86_64-avx2");
            for ty in [
                GgmlType::Q4_K,
                GgmlType::Q5_K,
                GgmlType::Q6_K,
                GgmlType::Q8_0,
                GgmlType::Q4_0,
                GgmlType::Q5_0,
                GgmlType::F16,
                GgmlType::F32,
            ] {
                assert_eq!(set.weight(ty).unwrap().face, "avx2", "{ty}");
            }
        } else {
            println!("notice: this CPU lacks AVX2/FMA/F16C; the AVX2 kernels are not tested");
        }
        // No features allowed: nothing but the scalar twins.
        let scalar = KernelSet::select(&CpuFeatures::default());
        assert_eq!(scalar.name(), "scalar");
        assert!(scalar.weights.iter().all(|k| k.face == "scalar"));
        // The table pairs each weight type with quant's activation format.
        for k in &scalar.weights {
            assert_eq!(quant::vec_dot_type(k.weight_type), Ok(k.act_type));
        }
        let _ = set;
    }

    /// The decode kernels of `avx2_k` (Q4_K, Q6_K) claim the lanes and float order of the
    /// `avx2.rs` kernels they replaced: to the bit, on random rows of 1..=6 blocks, with edge
    /// blocks (all 0x00, all 0xFF with large and negative scales) and extreme activations;
    /// and their batched kernels give the one-row bits for every activation row.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_k_kernels_give_the_bits_of_the_avx2_kernels() {
        use smolrun_kernels::x86_64::{avx2, avx2_fma_f16c_usable, avx2_k};
        if !avx2_fma_f16c_usable() {
            println!("notice: this CPU lacks AVX2/FMA/F16C; avx2_k is not tested");
            return;
        }
        type Dot = unsafe fn(usize, &[u8], &[u8]) -> f32;
        type Cols = unsafe fn(usize, &[u8], &[u8], usize, &mut [f32]);
        let pairs: [(GgmlType, Dot, Dot, Cols); 2] = [
            (
                GgmlType::Q4_K,
                avx2::vec_dot_q4_k_q8_k,
                avx2_k::vec_dot_q4_k_q8_k,
                avx2_k::matmul_q4_k_q8_k,
            ),
            (
                GgmlType::Q6_K,
                avx2::vec_dot_q6_k_q8_k,
                avx2_k::vec_dot_q6_k_q8_k,
                avx2_k::matmul_q6_k_q8_k,
            ),
        ];
        for (ty, old, new, cols) in pairs {
            let mut rng = XorShift(0xA5_2C ^ ty.id() as u64);
            for nb in 1..=6 {
                let n = nb * 256;
                let n_rows = 9;
                let row_bytes = nb * ty.type_size();
                let mut w = random_blocks(ty, n_rows * nb, rng.next_u64());
                w[row_bytes..2 * row_bytes].fill(0);
                for (r, v) in [(2, -2.5f32), (3, 6.0e4)] {
                    let edge = &mut w[r * row_bytes..(r + 1) * row_bytes];
                    edge.fill(0xFF);
                    for b in edge.chunks_exact_mut(ty.type_size()) {
                        for &off in f16_fields(ty) {
                            put_f16(b, off, v);
                        }
                    }
                }
                let mut acts: Vec<u8> = Vec::new();
                for t in 0..6 {
                    acts.extend(match t {
                        0 | 1 => {
                            let x: Vec<f32> = (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect();
                            quantize(GgmlType::Q8_K, &x)
                        }
                        2 => act_from_quants(GgmlType::Q8_K, 0.01, &vec![-128; n]),
                        3 => act_from_quants(
                            GgmlType::Q8_K,
                            3.0,
                            &(0..n)
                                .map(|i| if i % 3 == 0 { 127 } else { -128 })
                                .collect::<Vec<_>>(),
                        ),
                        _ => {
                            let mut x = vec![0.001f32; n];
                            x[(t * 77) % n] = -3.0e4;
                            quantize(GgmlType::Q8_K, &x)
                        }
                    });
                }
                let act_row = acts.len() / 6;
                let mut batched = vec![f32::NAN; 6 * n_rows];
                // SAFETY: AVX2, FMA and F16C confirmed above.
                unsafe { cols(n, &w, &acts, 6, &mut batched) };
                for t in 0..6 {
                    let act = &acts[t * act_row..(t + 1) * act_row];
                    for r in 0..n_rows {
                        let row = &w[r * row_bytes..(r + 1) * row_bytes];
                        // SAFETY: as above.
                        let (a, b) = unsafe { (old(n, row, act), new(n, row, act)) };
                        assert_eq!(a.to_bits(), b.to_bits(), "{ty} {nb} blocks row {r} act {t}");
                        assert_eq!(
                            batched[t * n_rows + r].to_bits(),
                            b.to_bits(),
                            "{ty} batched, {nb} blocks row {r} act {t}"
                        );
                    }
                }
            }
        }
    }

    /// The dotprod flag alone decides between the two aarch64 faces: without it no entry may
    /// be an sdot kernel (on the A53 under qemu one would SIGILL in the tests below).
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn aarch64_selects_the_face_the_features_allow() {
        let covered = [
            (GgmlType::Q4_K, true),
            (GgmlType::Q6_K, true),
            (GgmlType::Q8_0, true),
            (GgmlType::Q4_0, true),
            (GgmlType::Q5_0, true),
            (GgmlType::F16, false),
            (GgmlType::F32, false),
        ];
        let neon_only = CpuFeatures {
            neon: true,
            ..CpuFeatures::default()
        };
        let set = KernelSet::select(&neon_only);
        assert_eq!(set.name(), "aarch64-neon");
        for (ty, _) in covered {
            assert_eq!(set.weight(ty).unwrap().face, "neon", "{ty}");
        }
        assert!(set.weights.iter().all(|k| k.face != "dotprod"));
        let features = detected_features();
        if features.dotprod {
            let set = KernelSet::select(&features);
            assert_eq!(set.name(), "aarch64-dotprod");
            for (ty, has_sdot) in covered {
                let face = if has_sdot { "dotprod" } else { "neon" };
                assert_eq!(set.weight(ty).unwrap().face, face, "{ty}");
            }
        } else {
            assert_eq!(KernelSet::select(&features).name(), "aarch64-neon");
            println!("notice: this CPU has no dotprod; the sdot kernels are not selected");
        }
    }

    #[test]
    fn simd_dots_match_scalar_on_random_rows() {
        for (ty, fast, scalar) in simd_kernels() {
            let lengths: &[usize] = if ty.block_size() == 1 {
                // Not multiples of the SIMD width: every remainder path runs.
                &[1, 3, 7, 8, 9, 31, 32, 33, 100, 257, 4099]
            } else {
                &[1, 2, 3, 16]
            };
            for (i, &len) in lengths.iter().enumerate() {
                let n = len * ty.block_size();
                let w = if ty.block_size() == 1 {
                    let mut rng = XorShift(77 + i as u64);
                    let x: Vec<f32> = (0..n).map(|_| rng.unit() * 4.0 - 2.0).collect();
                    quantize(ty, &x)
                } else {
                    random_blocks(ty, len, 1000 + i as u64)
                };
                let mut rng = XorShift(99 + i as u64);
                let x: Vec<f32> = (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect();
                let act = quantize(fast.act_type, &x);
                check_close(&fast, &scalar, n, &w, &act, "random");
            }
        }
    }

    #[test]
    fn simd_dots_match_scalar_on_edge_blocks() {
        for (ty, fast, scalar) in simd_kernels() {
            let n = if ty.block_size() == 1 {
                75
            } else {
                4 * ty.block_size()
            };
            let mut rng = XorShift(4242);
            // Activations: random, constant (every quant at the extreme), alternating large,
            // one outlier (the rest quantize to 0), and raw quants of -128 / 127.
            let mut acts: Vec<(&str, Vec<u8>)> = vec![
                ("random act", {
                    let x: Vec<f32> = (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect();
                    quantize(fast.act_type, &x)
                }),
                ("constant act", quantize(fast.act_type, &vec![1.0; n])),
                (
                    "alternating act",
                    quantize(
                        fast.act_type,
                        &(0..n)
                            .map(|i| if i % 2 == 0 { 1000.0 } else { -999.0 })
                            .collect::<Vec<_>>(),
                    ),
                ),
                ("outlier act", {
                    let mut x = vec![0.001f32; n];
                    x[n / 3] = -3.0e4;
                    quantize(fast.act_type, &x)
                }),
                (
                    "all -128 act",
                    act_from_quants(fast.act_type, 0.01, &vec![-128; n]),
                ),
                (
                    "-128/127 act",
                    act_from_quants(
                        fast.act_type,
                        0.01,
                        &(0..n)
                            .map(|i| if i % 3 == 0 { 127 } else { -128 })
                            .collect::<Vec<_>>(),
                    ),
                ),
            ];
            if ty.block_size() == 1 {
                // Float rows: the largest f16, subnormal f16, zeros.
                acts.push(("f16 extremes act", {
                    let x: Vec<f32> = (0..n)
                        .map(|i| match i % 4 {
                            0 => 65504.0,
                            1 => -6.0e-8,
                            2 => 0.0,
                            _ => -1.5,
                        })
                        .collect();
                    quantize(fast.act_type, &x)
                }));
            }
            // Weights: random, all-zero and all-one bytes (min and max quants, all scales and
            // mins at their maximum), each with zero, tiny (subnormal), unit, negative and the
            // largest f16 scales.
            let mut weights: Vec<(&str, Vec<u8>)> = Vec::new();
            if ty.block_size() == 1 {
                weights.push(("random w", {
                    let x: Vec<f32> = (0..n).map(|_| rng.unit() * 4.0 - 2.0).collect();
                    quantize(ty, &x)
                }));
                weights.push(("extreme w", {
                    let x: Vec<f32> = (0..n)
                        .map(|i| [65504.0, -65504.0, 6.0e-8, 0.0, 1.0][i % 5])
                        .collect();
                    quantize(ty, &x)
                }));
                weights.push(("zero w", vec![0u8; n * ty.type_size()]));
            } else {
                let nb = n / ty.block_size();
                for (fill_name, fill) in
                    [("random", None), ("0x00", Some(0u8)), ("0xFF", Some(0xFF))]
                {
                    for scale in [0.0f32, 6.0e-8, 1.0, -2.5, 65504.0] {
                        let mut w = match fill {
                            None => random_blocks(ty, nb, 7 + scale.to_bits() as u64),
                            Some(b) => vec![b; nb * ty.type_size()],
                        };
                        for b in w.chunks_exact_mut(ty.type_size()) {
                            for (i, &off) in f16_fields(ty).iter().enumerate() {
                                put_f16(b, off, if i == 0 { scale } else { 0.5 * scale });
                            }
                        }
                        let _ = fill_name;
                        weights.push((fill_name, w));
                    }
                }
            }
            for (w_case, w) in &weights {
                for (a_case, act) in &acts {
                    check_close(
                        &fast,
                        &scalar,
                        n,
                        w,
                        act,
                        &std::format!("{w_case} w, {a_case}"),
                    );
                }
            }
        }
    }

    #[test]
    fn simd_integer_parts_are_exact() {
        for (ty, fast, scalar) in simd_kernels() {
            let mut rng = XorShift(0xC0FFEE ^ ty.id() as u64);
            let bs = ty.block_size();
            if bs == 1 {
                // Small integers: every product and partial sum is exact in f32.
                let n = 1003;
                let w = act_from_quants(ty, 1.0, &random_i8(&mut rng, n, -60, 60));
                let act = act_from_quants(ty, 1.0, &random_i8(&mut rng, n, -60, 60));
                check_exact(&fast, &scalar, n, &w, &act, "small integers");
                continue;
            }
            // (case, blocks, weight scale-byte mask, activation quant range)
            let cases: &[(&str, usize, bool, i32, i32)] = match ty {
                // Full quants and activations (-128 included), scales and mins at most 3.
                // |sum| <= 2 * 256 * 3 * 31 * 128 + mins < 2^24.
                GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => &[
                    ("full quants, small scales", 2, true, -128, 127),
                    // Full scales (and mins), activations in -2..2.
                    ("full scales, small activations", 2, false, -2, 2),
                ],
                // 8 * 32 * 128 * 128 < 2^24.
                _ => &[("full range", 8, false, -128, 127)],
            };
            for &(case, nb, small_scales, lo, hi) in cases {
                let n = nb * bs;
                let mut w = random_blocks(ty, nb, rng.next_u64());
                for b in w.chunks_exact_mut(ty.type_size()) {
                    for &off in f16_fields(ty) {
                        put_f16(b, off, 1.0);
                    }
                    match ty {
                        GgmlType::Q4_K | GgmlType::Q5_K if small_scales => {
                            // Bytes 0..8 of the packed scales: low 6 bits and the high bits
                            // of sub-blocks 4..7; bytes 8..12: low nibbles of those.
                            for s in &mut b[4..12] {
                                *s &= 0x03;
                            }
                            for s in &mut b[12..16] {
                                *s &= 0x33;
                            }
                        }
                        GgmlType::Q6_K if small_scales => {
                            for s in &mut b[192..208] {
                                *s = ((rng.next_u64() % 5) as i8 - 2) as u8;
                            }
                        }
                        GgmlType::Q6_K => b[192] = (-128i8) as u8,
                        _ => {}
                    }
                }
                let mut q = random_i8(&mut rng, n, lo, hi);
                q[1] = lo as i8;
                q[n - 1] = hi as i8;
                let act = act_from_quants(fast.act_type, 1.0, &q);
                check_exact(&fast, &scalar, n, &w, &act, case);
            }
        }
    }

    #[test]
    fn matvec_keeps_odd_row_counts_on_the_fast_path() {
        for (ty, fast, scalar) in simd_kernels() {
            // 13 rows: not a multiple of any row-batching factor.
            let (n_rows, n_cols) = (
                13,
                if ty.block_size() == 1 {
                    300
                } else {
                    2 * ty.block_size()
                },
            );
            let row_bytes = quant::row_bytes(ty, n_cols).unwrap();
            let w = if ty.block_size() == 1 {
                let mut rng = XorShift(5);
                let x: Vec<f32> = (0..n_rows * n_cols).map(|_| rng.unit() - 0.5).collect();
                quantize(ty, &x)
            } else {
                random_blocks(ty, n_rows * n_cols / ty.block_size(), 11)
            };
            let mut rng = XorShift(6);
            let x: Vec<f32> = (0..n_cols).map(|_| rng.unit() - 0.5).collect();
            let act = quantize(fast.act_type, &x);
            let mut out = vec![f32::NAN; n_rows];
            fast.matvec(&w, n_rows, n_cols, &act, &mut out).unwrap();
            for (r, &y) in out.iter().enumerate() {
                let row = &w[r * row_bytes..(r + 1) * row_bytes];
                let rows_keep_bits = matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0)
                    || fast.face == "avx512";
                if fast.rows.is_none() || rows_keep_bits {
                    // Row by row through the SIMD dot: the same bits (the x86-64 rows kernels
                    // of the 32-element formats keep the vec_dot's float order).
                    assert_eq!(
                        y.to_bits(),
                        (fast.vec_dot)(n_cols, row, &act).to_bits(),
                        "{ty} row {r}"
                    );
                }
                let m = magnitude(ty, fast.act_type, row, &act, n_cols);
                let want = (scalar.vec_dot)(n_cols, row, &act);
                assert!(
                    ((y - want) as f64).abs() <= 2.0 * (n_cols + 12) as f64 * U * m,
                    "{ty} row {r}: {y} vs scalar {want}"
                );
            }
            // Shape errors come back through the set as they do through quant::matvec.
            assert!(matches!(
                fast.matvec(&w[1..], n_rows, n_cols, &act, &mut out),
                Err(QuantError::BadLength { .. })
            ));
        }
        assert!(matches!(
            KernelSet::select(&detected_features()).weight(GgmlType::IQ2_XXS),
            Err(QuantError::Unsupported { .. })
        ));
    }

    /// Every repacked (row-interleaved) kernel this CPU has, run the way the model runs it:
    /// rows repacked once, then cut into chunks that start on group boundaries (the last one
    /// holding the tail rows that fill no group) and handed to `RepackedKernel::matvec`. Each
    /// row must match its scalar twin: bit for bit where the kernel keeps the scalar float
    /// order (Q8_0, Q5_0), else within the summation-order bound.
    #[test]
    fn repacked_kernels_match_scalar_on_every_row() {
        let set = KernelSet::select(&detected_features());
        let scalar = KernelSet::scalar();
        let mut tested_kernels = 0;
        for fast in set.weights.iter() {
            let Some(rk) = fast.repacked else { continue };
            let mut tested = 0;
            tested_kernels += 1;
            let ty = fast.weight_type;
            let scalar_k = scalar.weight(ty).unwrap();
            let bit_exact = matches!(ty, GgmlType::Q8_0 | GgmlType::Q5_0);
            for (case, &(n_rows, n_blocks)) in [
                (1, 1),
                (3, 2),
                (4, 1),
                (5, 3),
                (13, 2),
                (37, 1),
                (64, 2),
                (67, 1),
            ]
            .iter()
            .enumerate()
            {
                let n_cols = n_blocks * ty.block_size();
                let row_bytes = quant::row_bytes(ty, n_cols).unwrap();
                let w = random_blocks(ty, n_rows * n_blocks, 300 + case as u64);
                let mut rng = XorShift(400 + case as u64);
                let x: Vec<f32> = (0..n_cols).map(|_| rng.unit() * 2.0 - 1.0).collect();
                let act = quantize(fast.act_type, &x);
                let mut packed = vec![0u8; (rk.bytes)(n_rows, n_cols).unwrap()];
                (rk.repack)(&w, n_rows, n_cols, &mut packed).unwrap();
                // Chunks of 8 rows, then whatever is left: starts on multiples of the group.
                let mut out = vec![f32::NAN; n_rows];
                let mut r0 = 0;
                while r0 < n_rows {
                    let r1 = (r0 + 8).min(n_rows);
                    let range = rk.row_range(n_rows, n_cols, r0, r1).unwrap();
                    rk.matvec(ty, &packed[range], r1 - r0, n_cols, &act, &mut out[r0..r1])
                        .unwrap();
                    r0 = r1;
                }
                for (r, &y) in out.iter().enumerate() {
                    let row = &w[r * row_bytes..(r + 1) * row_bytes];
                    let want = (scalar_k.vec_dot)(n_cols, row, &act);
                    if bit_exact {
                        assert_eq!(
                            y.to_bits(),
                            want.to_bits(),
                            "{} {n_rows} rows, row {r}",
                            rk.layout
                        );
                    } else {
                        let m = magnitude(ty, fast.act_type, row, &act, n_cols);
                        let tol = 2.0 * (n_blocks + 12) as f64 * U * m * 1.001;
                        assert!(
                            ((y - want) as f64).abs() <= tol,
                            "{} {n_rows} rows, row {r}: {y} vs scalar {want} (bound {tol})",
                            rk.layout
                        );
                    }
                }
                tested += n_rows;
            }
            // A chunk may not split a group, and the shapes are checked.
            assert!(rk.row_range(13, ty.block_size(), 2, 8).is_none());
            assert!(rk.row_range(13, ty.block_size(), 4, 6).is_none());
            assert!(rk.row_range(13, ty.block_size(), 12, 13).is_some());
            assert!(rk.row_range(13, ty.block_size(), 0, 14).is_none());
            let n = ty.block_size();
            let act = vec![0u8; quant::row_bytes(fast.act_type, n).unwrap()];
            let packed = vec![0u8; (rk.bytes)(5, n).unwrap()];
            let mut out = [0f32; 5];
            assert!(rk.matvec(ty, &packed[1..], 5, n, &act, &mut out).is_err());
            assert!(rk.matvec(ty, &packed, 5, n, &act[1..], &mut out).is_err());
            assert!(rk.matvec(ty, &packed, 5, n, &act, &mut out[1..]).is_err());
            assert!(rk.matvec(ty, &packed, 5, n + 1, &act, &mut out).is_err());
            println!(
                "notice: {} ({}) matches scalar on {tested} rows",
                rk.layout, rk.face
            );
        }
        if tested_kernels == 0 {
            println!(
                "notice: {} has no repacked kernels on this CPU; nothing to compare",
                set.name()
            );
        }
        // Repacked kernels only where the set says dotprod (the x4 kernels use sdot).
        for k in set.weights.iter().filter(|k| k.repacked.is_some()) {
            assert_eq!(set.name(), "aarch64-dotprod", "{}", k.weight_type);
        }
        #[cfg(target_arch = "aarch64")]
        if detected_features().dotprod {
            for ty in [GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q5_0] {
                assert!(
                    set.weight(ty).unwrap().repacked.is_some(),
                    "{ty} has no x4 kernel"
                );
            }
        }
    }

    /// `matmul` against the matvec of each activation row, to the bit: the generic twin for
    /// every type in both sets, the batched SIMD kernels (`cols`) for the types that have them.
    /// Row counts (1, 13, 37) and activation counts (1..=9, 13) are not multiples of the column
    /// group; activations and weights include the edge cases of the vec_dot tests above.
    fn check_matmul_is_matvec_per_row(set: &KernelSet, seed: u64) {
        for k in &set.weights {
            let ty = k.weight_type;
            let bs = ty.block_size();
            let n_cols = if bs == 1 { 75 } else { 3 * bs };
            let act_row = quant::row_bytes(k.act_type, n_cols).unwrap();
            let row_bytes = quant::row_bytes(ty, n_cols).unwrap();
            let mut rng = XorShift(seed ^ ty.id() as u64);
            // Activation rows: random, constant, one outlier, and raw -128/127 quants.
            let mut acts: Vec<Vec<u8>> = Vec::new();
            for i in 0..13 {
                acts.push(match i % 4 {
                    0 | 1 => {
                        let x: Vec<f32> = (0..n_cols).map(|_| rng.unit() * 2.0 - 1.0).collect();
                        quantize(k.act_type, &x)
                    }
                    2 => {
                        let mut x = vec![0.001f32; n_cols];
                        x[(i * 7) % n_cols] = -3.0e4;
                        quantize(k.act_type, &x)
                    }
                    _ if matches!(k.act_type, GgmlType::Q8_0 | GgmlType::Q8_K) => act_from_quants(
                        k.act_type,
                        0.01,
                        &(0..n_cols)
                            .map(|e| if (e + i) % 3 == 0 { 127 } else { -128 })
                            .collect::<Vec<_>>(),
                    ),
                    _ => quantize(k.act_type, &vec![1.0; n_cols]),
                });
            }
            // Weights: 37 rows (two 16-row tiles and a tail), random, with edge rows (all 0x00, all 0xFF with large scales).
            let n_rows = 37;
            let mut w = if bs == 1 {
                let x: Vec<f32> = (0..n_rows * n_cols)
                    .map(|_| rng.unit() * 4.0 - 2.0)
                    .collect();
                quantize(ty, &x)
            } else {
                random_blocks(ty, n_rows * n_cols / bs, rng.next_u64())
            };
            if bs > 1 {
                w[row_bytes..2 * row_bytes].fill(0);
                let edge = &mut w[5 * row_bytes..6 * row_bytes];
                edge.fill(0xFF);
                for b in edge.chunks_exact_mut(ty.type_size()) {
                    for &off in f16_fields(ty) {
                        put_f16(b, off, -2.5);
                    }
                }
            }
            for n_acts in [1, 2, 3, 4, 5, 6, 7, 8, 9, 13] {
                let a: Vec<u8> = acts[..n_acts].concat();
                for rows in [1, 13, n_rows] {
                    let w = &w[..rows * row_bytes];
                    let mut out = vec![f32::NAN; rows * n_acts];
                    k.matmul(w, rows, n_cols, &a, n_acts, &mut out).unwrap();
                    for t in 0..n_acts {
                        let mut want = vec![0f32; rows];
                        k.matvec(w, rows, n_cols, &a[t * act_row..][..act_row], &mut want)
                            .unwrap();
                        for r in 0..rows {
                            assert_eq!(
                                out[t * rows + r].to_bits(),
                                want[r].to_bits(),
                                "{ty} ({} face, cols {}): row {r} of {rows}, activation {t} of \
                                 {n_acts}: matmul {} vs matvec {}",
                                k.face,
                                k.cols.is_some(),
                                out[t * rows + r],
                                want[r]
                            );
                        }
                    }
                }
            }
            // Shapes: every slice is checked, as in matvec.
            let a: Vec<u8> = acts[..3].concat();
            let mut out = vec![0f32; n_rows * 3];
            for (w_len, a_len, o_len) in [
                (w.len() - 1, a.len(), out.len()),
                (w.len(), a.len() - 1, out.len()),
                (w.len(), a.len(), out.len() - 1),
            ] {
                assert!(
                    matches!(
                        k.matmul(
                            &w[..w_len],
                            n_rows,
                            n_cols,
                            &a[..a_len],
                            3,
                            &mut out[..o_len]
                        ),
                        Err(QuantError::BadLength { .. })
                    ),
                    "{ty}: a wrong length must be refused"
                );
            }
            let mut none: [f32; 0] = [];
            k.matmul(&w, n_rows, n_cols, &[], 0, &mut none).unwrap();
        }
    }

    #[test]
    fn matmul_gives_the_matvec_bits_for_every_type() {
        check_matmul_is_matvec_per_row(&KernelSet::scalar(), 31);
        for fast in fast_sets() {
            check_matmul_is_matvec_per_row(&fast.with_batch_twins(), 32);
            #[cfg(target_arch = "x86_64")]
            check_x86_64_sets_have_matmuls(&fast);
        }
    }

    /// The 32-element formats' batched kernels on the shapes their tiles split: block counts
    /// odd and even (a last block without a pair), row counts around the 2-row tile and the
    /// 16-row sweep, activation counts around the 8-column group, rows long enough that the
    /// activations are packed in several panels (of whole groups, of fewer columns than a
    /// group, and not at all), and blocks with zero, subnormal and the largest f16 scales.
    /// Each output must have the bits of the matvec (which is the vec_dot, by the tests above).
    #[test]
    fn q0_matmul_tiles_give_the_matvec_bits() {
        let small_rows = [1, 2, 3, 5, 16, 17, 35];
        let many_acts = [1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 32];
        // (blocks per row, weight rows, activation rows)
        let mut shapes: Vec<(usize, &[usize], &[usize])> = Vec::new();
        for nb in [1, 2, 3, 4, 5, 8, 9, 20, 33] {
            shapes.push((nb, &small_rows, &many_acts));
        }
        shapes.push((158, &[3, 18], &[13, 17])); // panels of 8 columns
        shapes.push((259, &[3], &[9])); // panels of 7 columns
        shapes.push((2051, &[3], &[2])); // no panel: a matvec per activation row
        let mut worst = Vec::new();
        for fast in fast_sets() {
            for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0] {
                let k = fast.weight(ty).unwrap();
                if k.cols.is_none() {
                    continue;
                }
                let mut rng = XorShift(0x7113 ^ ty.id() as u64);
                for &(nb, row_counts, act_counts) in &shapes {
                    let n_cols = nb * 32;
                    let (row_bytes, act_row) = (nb * ty.type_size(), nb * 34);
                    let max_rows = *row_counts.iter().max().unwrap();
                    let max_acts = *act_counts.iter().max().unwrap();
                    let mut w = random_blocks(ty, max_rows * nb, rng.next_u64());
                    // Edge scales on some blocks: 0, -0, a subnormal, the largest f16.
                    for (i, b) in w.chunks_exact_mut(ty.type_size()).enumerate() {
                        match i % 11 {
                            3 => put_f16(b, 0, 0.0),
                            5 => put_f16(b, 0, -65504.0),
                            7 => put_f16(b, 0, 6.0e-8),
                            _ => {}
                        }
                    }
                    let mut acts = Vec::new();
                    for t in 0..max_acts {
                        let q = random_i8(&mut rng, n_cols, -128, 127);
                        let mut a = act_from_quants(GgmlType::Q8_0, 0.02, &q);
                        for (i, b) in a.chunks_exact_mut(34).enumerate() {
                            match (i + t) % 13 {
                                2 => put_f16(b, 0, 65504.0),
                                6 => put_f16(b, 0, -0.0),
                                9 => put_f16(b, 0, -3.0e-7),
                                _ => {}
                            }
                        }
                        acts.extend_from_slice(&a);
                    }
                    for &rows in row_counts {
                        let w = &w[..rows * row_bytes];
                        let mut want = vec![0f32; rows * max_acts];
                        for t in 0..max_acts {
                            let act = &acts[t * act_row..][..act_row];
                            k.matvec(w, rows, n_cols, act, &mut want[t * rows..][..rows])
                                .unwrap();
                        }
                        for &n_acts in act_counts {
                            let mut out = vec![f32::NAN; rows * n_acts];
                            let a = &acts[..n_acts * act_row];
                            k.matmul(w, rows, n_cols, a, n_acts, &mut out).unwrap();
                            for (i, (o, e)) in out.iter().zip(&want).enumerate() {
                                assert_eq!(
                                    o.to_bits(),
                                    e.to_bits(),
                                    "{ty} ({}): {nb} blocks, {rows} rows, {n_acts} activations: \
                                     row {} of activation {}: matmul {o} vs matvec {e}",
                                    fast.name(),
                                    i % rows,
                                    i / rows
                                );
                            }
                            worst.push(out.iter().filter(|v| !v.is_finite()).count());
                        }
                    }
                }
            }
        }
        // The edge scales must not have turned everything into infinities.
        assert!(worst.iter().all(|&bad| bad == 0), "non-finite outputs");
    }

    #[cfg(target_arch = "x86_64")]
    fn check_x86_64_sets_have_matmuls(fast: &KernelSet) {
        if fast.name().starts_with("x86_64-") {
            for ty in [
                GgmlType::Q4_K,
                GgmlType::Q5_K,
                GgmlType::Q6_K,
                GgmlType::Q8_0,
                GgmlType::Q4_0,
                GgmlType::Q5_0,
            ] {
                assert!(
                    fast.weight(ty).unwrap().cols.is_some(),
                    "{ty} has no matmul in {}",
                    fast.name()
                );
            }
        }
    }

    /// The batched SIMD kernels on many blocks and the full-range integer cases of
    /// `simd_integer_parts_are_exact`, against the scalar vec_dot: there every intermediate
    /// is an exact integer, so the batched kernel must equal the scalar twin itself.
    #[test]
    fn simd_matmul_integer_parts_equal_the_scalar_twin() {
        for (ty, fast, scalar) in simd_kernels() {
            if fast.cols.is_none() || ty.block_size() == 1 {
                continue;
            }
            let mut rng = XorShift(0xBA7C4 ^ ty.id() as u64);
            let nb = 2;
            let n = nb * ty.block_size();
            let n_rows = 7;
            let mut w = random_blocks(ty, n_rows * nb, rng.next_u64());
            for b in w.chunks_exact_mut(ty.type_size()) {
                for &off in f16_fields(ty) {
                    put_f16(b, off, 1.0);
                }
                match ty {
                    GgmlType::Q4_K | GgmlType::Q5_K => {
                        for s in &mut b[4..12] {
                            *s &= 0x03;
                        }
                        for s in &mut b[12..16] {
                            *s &= 0x33;
                        }
                    }
                    GgmlType::Q6_K => {
                        for s in &mut b[192..208] {
                            *s = ((rng.next_u64() % 5) as i8 - 2) as u8;
                        }
                    }
                    _ => {}
                }
            }
            let n_acts = 6;
            let acts: Vec<u8> = (0..n_acts)
                .flat_map(|_| {
                    let mut q = random_i8(&mut rng, n, -128, 127);
                    q[0] = -128;
                    act_from_quants(fast.act_type, 1.0, &q)
                })
                .collect();
            let act_row = acts.len() / n_acts;
            let row_bytes = w.len() / n_rows;
            let mut out = vec![f32::NAN; n_rows * n_acts];
            fast.matmul(&w, n_rows, n, &acts, n_acts, &mut out).unwrap();
            for t in 0..n_acts {
                for r in 0..n_rows {
                    let want = (scalar.vec_dot)(
                        n,
                        &w[r * row_bytes..][..row_bytes],
                        &acts[t * act_row..][..act_row],
                    );
                    assert_eq!(out[t * n_rows + r], want, "{ty} row {r} activation {t}");
                }
            }
        }
    }

    /// The batched K-quant kernels (Q4_K, Q6_K) of every set this CPU runs, on the shapes their
    /// tiling cuts: rows of 1..=17 blocks (the AVX-512 kernel packs 8 blocks at a time), 1..=70
    /// weight rows (tiles of 64 rows, register tiles of 4), 1..=40 activation rows (vectors of
    /// 16 and 32 tokens, tails of every size, the one-row path below 4). Every output must be
    /// the set's vec_dot to the bit, and the vec_dot within the scalar twin's bound. Weights
    /// include all-zero blocks and all-0xFF blocks with zero, subnormal, negative and the
    /// largest f16 scales; activations include -128/127 quants and an outlier.
    #[test]
    fn k_quant_matmuls_give_the_vec_dot_bits_on_every_tiling() {
        let scalar = KernelSet::scalar();
        for fast in fast_sets() {
            // A prompt kernel against the one-row kernel whose bits it keeps.
            let fast = fast.with_batch_twins();
            for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
                let k = fast.weight(ty).unwrap();
                let scalar_k = scalar.weight(ty).unwrap();
                if k.cols.is_none() {
                    continue;
                }
                let mut rng = XorShift(0x5EED ^ ty.id() as u64);
                let shapes: &[(usize, usize, &[usize])] = &[
                    (1, 70, &[1, 2, 3, 4, 5, 15, 16, 17, 31, 32, 33, 40]),
                    (3, 9, &[4, 7, 20, 32]),
                    (8, 5, &[6, 18]),
                    (9, 67, &[3, 5, 32, 37]),
                    (17, 6, &[16, 19]),
                ];
                for &(nb, n_rows, act_counts) in shapes {
                    let n = nb * 256;
                    let row_bytes = nb * ty.type_size();
                    let mut w = random_blocks(ty, n_rows * nb, rng.next_u64());
                    // Edge blocks: block b of row r (for the rows that exist).
                    let edges: [(usize, Option<u8>, f32); 6] = [
                        (0, Some(0x00), 1.0),
                        (1, Some(0xFF), 65504.0),
                        (2, Some(0xFF), -2.5),
                        (3, Some(0xFF), 6.0e-8),
                        (4, None, 0.0),
                        (n_rows - 1, Some(0xFF), -65504.0),
                    ];
                    for (r, fill, scale) in edges {
                        if r >= n_rows {
                            continue;
                        }
                        let b0 = (r * nb + (r % nb)) * ty.type_size();
                        let b = &mut w[b0..b0 + ty.type_size()];
                        if let Some(f) = fill {
                            b.fill(f);
                        }
                        for (i, &off) in f16_fields(ty).iter().enumerate() {
                            put_f16(b, off, if i == 0 { scale } else { 0.5 * scale });
                        }
                    }
                    let max_acts = *act_counts.iter().max().unwrap();
                    let acts: Vec<u8> = (0..max_acts)
                        .flat_map(|t| match t % 5 {
                            3 => act_from_quants(
                                GgmlType::Q8_K,
                                0.01,
                                &(0..n)
                                    .map(|e| if (e + t) % 3 == 0 { 127 } else { -128 })
                                    .collect::<Vec<_>>(),
                            ),
                            4 => {
                                let mut x = vec![0.001f32; n];
                                x[(t * 37) % n] = -3.0e4;
                                quantize(GgmlType::Q8_K, &x)
                            }
                            _ => {
                                let x: Vec<f32> = (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect();
                                quantize(GgmlType::Q8_K, &x)
                            }
                        })
                        .collect();
                    let act_row = acts.len() / max_acts;
                    let act = |t: usize| &acts[t * act_row..(t + 1) * act_row];
                    let row = |r: usize| &w[r * row_bytes..(r + 1) * row_bytes];
                    // The vec_dot of every pair, and its distance from the scalar twin.
                    let mut want = vec![0f32; max_acts * n_rows];
                    for t in 0..max_acts {
                        for r in 0..n_rows {
                            let v = (k.vec_dot)(n, row(r), act(t));
                            want[t * n_rows + r] = v;
                            if k.face != "avx512" {
                                // The AVX2 Q6_K dot keeps the -32 offset (through the bsums)
                                // in other lanes than the quants until the float sum, so its
                                // rounding scales with |q| |y| + 32 |y|, not |q - 32| |y|: an
                                // outlier activation can take it past this bound (seen: 0.196
                                // against 0.171). The AVX-512 dots round only the exact
                                // integer of each block.
                                continue;
                            }
                            let s = (scalar_k.vec_dot)(n, row(r), act(t));
                            let m = magnitude(ty, k.act_type, row(r), act(t), n);
                            let tol = 2.0 * (nb + 12) as f64 * U * m * 1.001;
                            assert!(
                                ((v - s) as f64).abs() <= tol,
                                "{ty} {}: {nb} blocks, row {r}, act {t}: {v} vs scalar {s} \
                                 (bound {tol}, f64 {})",
                                k.face,
                                {
                                    let (mut wf, mut af) = (vec![0f32; n], vec![0f32; n]);
                                    quant::dequantize_row(ty, row(r), &mut wf).unwrap();
                                    quant::dequantize_row(k.act_type, act(t), &mut af).unwrap();
                                    wf.iter()
                                        .zip(&af)
                                        .map(|(&a, &b)| a as f64 * b as f64)
                                        .sum::<f64>()
                                }
                            );
                        }
                    }
                    // The matvec (several rows at once where the set has it) of a few rows.
                    for t in 0..max_acts.min(3) {
                        let mut out = vec![f32::NAN; n_rows];
                        k.matvec(&w, n_rows, n, act(t), &mut out).unwrap();
                        for r in 0..n_rows {
                            assert_eq!(
                                out[r].to_bits(),
                                want[t * n_rows + r].to_bits(),
                                "{ty} {} matvec: {nb} blocks, {n_rows} rows: row {r} act {t}",
                                k.face
                            );
                        }
                    }
                    for &n_acts in act_counts {
                        let mut out = vec![f32::NAN; n_acts * n_rows];
                        k.matmul(&w, n_rows, n, &acts[..n_acts * act_row], n_acts, &mut out)
                            .unwrap();
                        for t in 0..n_acts {
                            for r in 0..n_rows {
                                assert_eq!(
                                    out[t * n_rows + r].to_bits(),
                                    want[t * n_rows + r].to_bits(),
                                    "{ty} {} batched: {nb} blocks, {n_rows} rows, {n_acts} \
                                     activations: row {r} act {t}: {} vs vec_dot {}",
                                    k.face,
                                    out[t * n_rows + r],
                                    want[t * n_rows + r]
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn quantize_activation_is_the_reference_quantizer() {
        let set = KernelSet::select(&detected_features());
        let x: Vec<f32> = (0..512)
            .map(|i| libm::sinf(i as f32 * 0.37) * 3.0)
            .collect();
        for ty in [
            GgmlType::F32,
            GgmlType::F16,
            GgmlType::BF16,
            GgmlType::Q8_0,
            GgmlType::Q8_1,
            GgmlType::Q8_K,
        ] {
            let mut out = vec![0u8; quant::row_bytes(ty, x.len()).unwrap()];
            set.quantize_activation(ty, &x, &mut out).unwrap();
            assert_eq!(out, quantize(ty, &x), "{ty}");
            assert!(matches!(
                set.quantize_activation(ty, &x, &mut out[1..]),
                Err(QuantError::BadLength { .. })
            ));
        }
        assert!(matches!(
            set.quantize_activation(GgmlType::Q4_K, &x, &mut [0u8; 288]),
            Err(QuantError::Unsupported { .. })
        ));
    }
}

// =============================================================================================
// Attention: the installed face against the scalar `math::attention_head`, to the bit.
// =============================================================================================
#[cfg(test)]
mod attention_tests {
    use super::*;
    use crate::math::{AttentionKernel, AttentionSpan, KvHead};
    use crate::quant::testutil::XorShift;
    use alloc::vec;
    use alloc::vec::Vec;
    use half::f16;
    use std::println;

    /// Special f16 bit patterns: zeros, the smallest and largest subnormals, the smallest
    /// normal, one, the largest finite values (65504) and their neighbours.
    const SPECIAL_F16: [u16; 12] = [
        0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x3C00, 0x7BFF, 0xFBFF, 0x7BFE,
        0x3BFF,
    ];

    /// A cache of `n_pos` positions, `n_head_kv` heads of `dim` f16 each, values of about
    /// `magnitude`, with one in `special_every` replaced by a special bit pattern (0: none).
    fn random_cache(rng: &mut XorShift, n: usize, magnitude: f32, special_every: u64) -> Vec<u16> {
        (0..n)
            .map(|_| {
                let r = rng.next_u64();
                if special_every != 0 && r.is_multiple_of(special_every) {
                    SPECIAL_F16[(r >> 32) as usize % SPECIAL_F16.len()]
                } else {
                    f16::from_f32((rng.unit() * 2.0 - 1.0) * magnitude).to_bits()
                }
            })
            .collect()
    }

    struct Case {
        head_dim: usize,
        head_dim_v: usize,
        n_head_kv: usize,
        head: usize,
        span: AttentionSpan,
        scale: f32,
        softcap: Option<f32>,
        key_magnitude: f32,
        value_magnitude: f32,
        special_every: u64,
        query_magnitude: f32,
    }

    /// Runs `case` through the scalar code and `face` with both kernels; returns how many
    /// outputs were compared. Panics on the first differing bit.
    fn check(face: AttentionHeadFn, rng: &mut XorShift, c: &Case) -> usize {
        let n_pos = c.span.pos + 1;
        let keys = random_cache(
            rng,
            n_pos * c.n_head_kv * c.head_dim,
            c.key_magnitude,
            c.special_every,
        );
        let values = random_cache(
            rng,
            n_pos * c.n_head_kv * c.head_dim_v,
            c.value_magnitude,
            c.special_every,
        );
        let q_raw: Vec<f32> = (0..c.head_dim)
            .map(|_| (rng.unit() * 2.0 - 1.0) * c.query_magnitude)
            .collect();
        let kv = KvHead {
            key_cache: &keys,
            value_cache: &values,
            head: c.head,
            n_head_kv: c.n_head_kv,
            head_dim: c.head_dim,
            head_dim_v: c.head_dim_v,
        };
        let mut compared = 0;
        for kernel in [AttentionKernel::F32, AttentionKernel::F16Accumulator] {
            // The model rounds the query to f16 for the f16 kernel; the f32 kernel gets it raw.
            let q: Vec<f32> = match kernel {
                AttentionKernel::F32 => q_raw.clone(),
                AttentionKernel::F16Accumulator => {
                    q_raw.iter().map(|&v| f16::from_f32(v).to_f32()).collect()
                }
            };
            let mut want = vec![f32::NAN; c.head_dim_v];
            let mut got = vec![f32::NAN; c.head_dim_v];
            let mut want_scores = vec![0f32; n_pos + 3];
            let mut got_scores = vec![0f32; n_pos + 3];
            math::attention_head(
                &mut want,
                &q,
                &kv,
                &mut want_scores,
                c.span,
                c.scale,
                c.softcap,
                kernel,
            );
            face(
                &mut got,
                &q,
                &kv,
                &mut got_scores,
                c.span,
                c.scale,
                c.softcap,
                kernel,
            );
            for (d, (w, g)) in want.iter().zip(&got).enumerate() {
                assert_eq!(
                    w.to_bits(),
                    g.to_bits(),
                    "{kernel:?} head_dim {} / {} pos {} window {:?} softcap {:?} scale {} \
                     magnitudes k {} v {} q {}: out[{d}] scalar {w} ({:#x}), face {g} ({:#x})",
                    c.head_dim,
                    c.head_dim_v,
                    c.span.pos,
                    c.span.window,
                    c.softcap,
                    c.scale,
                    c.key_magnitude,
                    c.value_magnitude,
                    c.query_magnitude,
                    w.to_bits(),
                    g.to_bits()
                );
            }
            compared += want.len();
        }
        compared
    }

    fn installed_face() -> (AttentionHeadFn, &'static str) {
        let set = KernelSet::select(&tests_features());
        (set.attention(), set.name())
    }

    fn tests_features() -> CpuFeatures {
        #[allow(unused_mut)]
        let mut f = CpuFeatures::default();
        #[cfg(target_arch = "x86_64")]
        {
            f.avx2 = std::arch::is_x86_feature_detected!("avx2");
            f.fma = std::arch::is_x86_feature_detected!("fma");
            f.f16c = std::arch::is_x86_feature_detected!("f16c");
        }
        #[cfg(target_arch = "aarch64")]
        {
            f.neon = std::arch::is_aarch64_feature_detected!("neon");
        }
        f
    }

    #[test]
    fn attention_face_matches_scalar_on_random_heads() {
        let (face, name) = installed_face();
        let mut rng = XorShift(0x5eed_a77e);
        let mut compared = 0;
        let dims = [64, 128, 256, 1, 7, 8, 40, 72, 100, 200, 17];
        for (t, &head_dim) in dims.iter().enumerate() {
            for round in 0..6usize {
                let pos = match round {
                    0 => 0,
                    1 => 1,
                    2 => 7,
                    3 => 8,
                    _ => rng.next_u64() as usize % 300,
                };
                let window = match (round + t) % 3 {
                    0 => None,
                    1 => Some(1 + rng.next_u64() as usize % 40),
                    _ => Some(pos + 5),
                };
                let n_head_kv = 1 + round % 3;
                let case = Case {
                    head_dim,
                    head_dim_v: if round == 5 { head_dim + 9 } else { head_dim },
                    n_head_kv,
                    head: rng.next_u64() as usize % n_head_kv,
                    span: AttentionSpan { pos, window },
                    scale: [1.0 / libm::sqrtf(head_dim as f32), 1.0, 0.0625][round % 3],
                    softcap: if t % 2 == 0 { None } else { Some(50.0) },
                    key_magnitude: 2.0,
                    value_magnitude: 3.0,
                    special_every: 0,
                    query_magnitude: 4.0,
                };
                compared += check(face, &mut rng, &case);
            }
        }
        println!("attention ({name}): {compared} outputs equal to the scalar code's bits");
    }

    #[test]
    fn attention_face_matches_scalar_on_edge_values() {
        let (face, name) = installed_face();
        let mut rng = XorShift(0xed9e_5eed);
        let mut compared = 0;
        // (key, value, query magnitudes, scale, softcap): huge scores (exp underflows to 0
        // for all but the maximum), tiny ones, values near f16's 65504 (the accumulator
        // overflows to inf), subnormal values and keys, a softcap that saturates.
        let regimes: [(f32, f32, f32, f32, Option<f32>); 8] = [
            (60000.0, 1.0, 60000.0, 1.0, None),
            (100.0, 1.0, 100.0, 8.0, None),
            (1e-3, 1.0, 1e-3, 1e-3, None),
            (1.0, 65504.0, 1.0, 0.1, None),
            (1.0, 6e-5, 1.0, 0.5, None),
            (6e-5, 6e-5, 1e-3, 1.0, None),
            (50.0, 2.0, 50.0, 1.0, Some(30.0)),
            (2.0, 60000.0, 8.0, 0.125, Some(1.0)),
        ];
        for (r, &(km, vm, qm, scale, softcap)) in regimes.iter().enumerate() {
            for &head_dim in &[64, 256, 100, 3] {
                for special_every in [0, 5] {
                    let pos = 1 + rng.next_u64() as usize % 150;
                    let case = Case {
                        head_dim,
                        head_dim_v: head_dim,
                        n_head_kv: 2,
                        head: r % 2,
                        span: AttentionSpan {
                            pos,
                            window: if r % 3 == 0 { Some(33) } else { None },
                        },
                        scale,
                        softcap,
                        key_magnitude: km,
                        value_magnitude: vm,
                        special_every,
                        query_magnitude: qm,
                    };
                    compared += check(face, &mut rng, &case);
                }
            }
        }
        println!("attention edge cases ({name}): {compared} outputs equal to the scalar bits");
    }

    /// The face's loops, when this CPU runs one.
    fn installed_loops() -> Option<math::AttentionLoops> {
        let (_, name) = installed_face();
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        if name != "scalar" {
            return Some(attention_simd::LOOPS);
        }
        let _ = name;
        None
    }

    /// f32 inputs around every f16: each f16's value, its f32 neighbours, the midpoints to the
    /// next f16 (ties) and just off them, plus infinities, NaNs and out-of-range values.
    fn f32_near_every_f16() -> Vec<f32> {
        let mut xs = Vec::new();
        for bits in 0..=u16::MAX {
            let x = f16::from_bits(bits).to_f32();
            let next = f16::from_bits(bits.wrapping_add(1)).to_f32();
            xs.push(x);
            if x.is_finite() {
                for k in [-2i32, -1, 1, 2] {
                    xs.push(f32::from_bits(x.to_bits().wrapping_add_signed(k)));
                }
            }
            if x.is_finite() && next.is_finite() && (bits & 0x7FFF) != 0x7BFF {
                let mid = (x as f64 + next as f64) / 2.0;
                let mid = mid as f32;
                for k in [-1i32, 0, 1] {
                    xs.push(f32::from_bits(mid.to_bits().wrapping_add_signed(k)));
                }
            }
        }
        // Around 65504 + half an ulp (the overflow threshold), far beyond it, and below the
        // smallest subnormal's half.
        for base in [65520.0f32, -65520.0, 1e10, 2.98e-8, -2.98e-8, 1e-30] {
            for k in -3i32..=3 {
                xs.push(f32::from_bits(base.to_bits().wrapping_add_signed(k)));
            }
        }
        xs.extend([
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7F80_0001),
            f32::from_bits(0xFFBF_FFFF),
            f32::from_bits(0x7FC0_2000),
            f32::MIN_POSITIVE,
            f32::from_bits(1),
        ]);
        xs
    }

    #[test]
    fn attention_loops_round_to_f16_as_half_does() {
        let Some(loops) = installed_loops() else {
            println!("notice: no SIMD attention on this CPU, nothing to compare");
            return;
        };
        let xs = f32_near_every_f16();
        // rescale by 1.0 is exactly the f16 rounding of each input.
        let mut out = xs.clone();
        (loops.rescale_f16)(&mut out, 1.0);
        for (&x, &o) in xs.iter().zip(&out) {
            let want = f16::from_f32(x).to_f32();
            assert_eq!(
                want.to_bits(),
                o.to_bits(),
                "f16 rounding of {x:e} ({:#x})",
                x.to_bits()
            );
        }
        for ms in [0.5f32, 0.3, 1e-7, 0.0] {
            let mut out = xs.clone();
            (loops.rescale_f16)(&mut out, ms);
            for (&x, &o) in xs.iter().zip(&out) {
                let want = f16::from_f32(x * ms).to_f32();
                assert_eq!(want.to_bits(), o.to_bits(), "f16({x:e} * {ms})");
            }
        }
        println!(
            "f16 rounding: {} inputs x 5 scales equal to half's",
            xs.len()
        );
    }

    #[test]
    fn attention_loops_accumulate_every_f16_value_as_fmaf_does() {
        let Some(loops) = installed_loops() else {
            println!("notice: no SIMD attention on this CPU, nothing to compare");
            return;
        };
        let values: Vec<u16> = (0..=u16::MAX).collect();
        let mut rng = XorShift(0xacc0_f16a);
        let mut compared = 0;
        for vs in [1.0f32, 0.3, -2.5, 1e-5, 7.0e4, 0.0] {
            for magnitude in [0.0f32, 1.0, 60000.0, 1e-6] {
                let start: Vec<f32> = (0..values.len())
                    .map(|_| f16::from_f32((rng.unit() * 2.0 - 1.0) * magnitude).to_f32())
                    .collect();
                let mut out = start.clone();
                (loops.accumulate_f16)(&mut out, &values, vs);
                for ((&o0, &v), &o) in start.iter().zip(&values).zip(&out) {
                    let fused = libm::fmaf(f16::from_bits(v).to_f32(), vs, o0);
                    let want = f16::from_f32(fused).to_f32();
                    // NaN inputs give NaN on both sides; which NaN (sign, payload) libm's
                    // software fmaf returns is its own choice, so NaNs compare as a class.
                    if want.is_nan() {
                        assert!(o.is_nan(), "fma({v:#x}, {vs}, {o0}) = {o}, want NaN");
                    } else {
                        assert_eq!(
                            want.to_bits(),
                            o.to_bits(),
                            "f16(fma(f16 {v:#x}, {vs}, {o0:e}))"
                        );
                    }
                }
                compared += out.len();
            }
        }
        println!("f16 accumulation: {compared} sums equal to f16(libm::fmaf)");
    }

    /// SwiGLU inputs: every 4099th f32 bit pattern (all signs, NaNs, infinities, subnormals),
    /// a fine sweep over the range where e^-x goes from overflow through the normal range to
    /// underflow, and the edges of each of the scalar `expf`'s branches.
    fn swiglu_inputs() -> Vec<f32> {
        let mut xs: Vec<f32> = (0..=u32::MAX).step_by(4099).map(f32::from_bits).collect();
        let mut x = -110.0f32;
        while x < 110.0 {
            xs.push(x);
            x += 0.000_977;
        }
        let edges = [
            103.972_08f32,
            87.336_55,
            88.722_83,
            0.346_573_6,
            1.039_720_7,
            6.103_515_6e-5,
            0.0,
        ];
        for edge in edges {
            for e in [edge, -edge] {
                for k in -3i32..=3 {
                    xs.push(f32::from_bits(e.to_bits().wrapping_add_signed(k)));
                }
            }
        }
        xs
    }

    #[test]
    fn swiglu_face_gives_the_scalar_bits() {
        let set = KernelSet::select(&tests_features());
        let xs = swiglu_inputs();
        let mut rng = XorShift(0x5191_u64);
        let up: Vec<f32> = (0..xs.len())
            .map(|i| match i % 5 {
                0 => 1.0,
                1 => (rng.unit() * 2.0 - 1.0) * 8.0,
                2 => -0.0,
                3 => 1e-30,
                _ => 3.0e30,
            })
            .collect();
        // Every length 0..=17 for the tails, then everything at once.
        for len in (0..=17).chain([xs.len()]) {
            let mut want = xs[..len].to_vec();
            let mut got = want.clone();
            math::swiglu(&mut want, &up[..len]);
            (set.swiglu())(&mut got, &up[..len]);
            for (i, (&w, &g)) in want.iter().zip(&got).enumerate() {
                // NaN inputs give NaN on both sides; which NaN is the hardware's choice.
                assert!(
                    w.to_bits() == g.to_bits() || (w.is_nan() && g.is_nan()),
                    "swiglu({}, up {}) = {g:e} ({:#x}), scalar {w:e} ({:#x}) [{}]",
                    xs[i],
                    up[i],
                    g.to_bits(),
                    w.to_bits(),
                    set.name()
                );
            }
        }
        println!(
            "swiglu ({}): {} inputs equal to the scalar bits",
            set.name(),
            xs.len()
        );
    }
}
