//! The one dispatch table: which kernel runs each matvec, chosen once from the CPU's features.
//!
//! In the manner of tract's linalg: a [`KernelSet`] starts as the scalar reference functions
//! of [`crate::quant`] and [`crate::math`] (the generic twins), and one `install` per
//! architecture (`x86_64.rs`, `aarch64.rs`) replaces the entries it has a faster kernel for,
//! after checking that the CPU can run it. The model code picks a [`WeightKernel`] per weight
//! matrix at load time ([`KernelSet::weight`]) and calls [`WeightKernel::matvec`] on each
//! worker's chunk of rows; nothing is looked up per token.
//!
//! Every installed face is tested against its scalar twin: the weight kernels in
//! `exactness.rs`, attention and SwiGLU in `math_exactness.rs`, the delta rule in
//! `delta_exactness.rs`, what each CPU gets in the
//! architecture files' own tests.
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
//! let mut same = vec![0u8; act.len()];
//! q4k.quantize_activation(&[0.5; 256], &mut same).unwrap(); // the set's quantizer, kept
//! assert_eq!(act, same);
//! let mut out = [1.0f32; 3];
//! q4k.matvec(&weights, n_rows, n_cols, &act, &mut out).unwrap();
//! assert_eq!(out, [0.0; 3]);
//! ```
//!
//! Safety of the SIMD entries: the table holds safe `fn` pointers, so a kernel that needs a
//! CPU feature is wrapped in a private function and installed only after the kernels crate
//! confirmed the feature on the running CPU (cpuid on x86-64); a caller's `CpuFeatures` can
//! only switch kernels off, never force one that would fault.

/// The head and group faces of attention (`math::AttentionFaces`) built on one architecture's
/// `math::AttentionLoops` constant: `math::attention_head_with` and `attention_group_with`
/// over those loops, as plain `fn`s the kernel table can hold.
#[allow(unused_macros)]
macro_rules! attention_faces {
    ($loops:path, $q8:expr) => {{
        #[allow(clippy::too_many_arguments)]
        fn head(
            out: &mut [f32],
            q: &[f32],
            kv: &crate::math::KvHead,
            scores: &mut [f32],
            span: crate::math::AttentionSpan,
            scale: f32,
            softcap_at: Option<f32>,
            kernel: crate::math::AttentionKernel,
        ) {
            let loops = &$loops;
            crate::math::attention_head_with(
                loops, out, q, kv, scores, span, scale, softcap_at, kernel,
            );
        }
        #[allow(clippy::too_many_arguments)]
        fn group(
            outs: &mut [f32],
            qs: &[f32],
            kv: &crate::math::KvHead,
            scores: &mut [f32],
            span: crate::math::AttentionSpan,
            scale: f32,
            softcap_at: Option<f32>,
            kernel: crate::math::AttentionKernel,
        ) {
            let loops = &$loops;
            crate::math::attention_group_with(
                loops, outs, qs, kv, scores, span, scale, softcap_at, kernel,
            );
        }
        crate::math::AttentionFaces {
            head,
            group,
            q8: $q8,
        }
    }};
}

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod x86_64;

#[cfg(test)]
mod delta_exactness;
#[cfg(test)]
mod exactness;
#[cfg(test)]
mod math_exactness;

use crate::math::{self, AttentionFaces, DeltaRuleKernels};
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

/// Quantizes an f32 row into an activation format; `out` is exactly the row's size. Called
/// only through [`KernelSet::quantize_activation`] or [`WeightKernel::quantize_activation`],
/// which check it.
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
    /// Where set, `rows` does not read the quantized activation row but tables built from it
    /// (a lookup-table kernel): built once per token and matrix input, then shared by every
    /// row and worker. `None`: `rows` reads the activation row itself.
    pub act_table: Option<ActTable>,
}

/// The tables a lookup-table kernel reads instead of the activation row (see
/// [`RepackedKernel::act_table`]). They live in scratch the caller sizes with `bytes`
/// (the forward pass: `State`'s table scratch), so a token allocates nothing.
#[derive(Clone, Copy, Debug)]
pub struct ActTable {
    /// Bytes of the tables of one activation row of `n_cols` elements; `None` if the kernel
    /// cannot take that width.
    pub bytes: fn(n_cols: usize) -> Option<usize>,
    /// Builds the tables of one quantized activation row (`act`, exactly its row's bytes) into
    /// `table` (exactly `bytes(n_cols)`). Called through [`RepackedKernel::build_table`].
    pub build: fn(act: &[u8], table: &mut [u8]),
}

impl RepackedKernel {
    /// Bytes of what `rows` reads per token for `n_cols` columns: the quantized activation row,
    /// or its tables where the kernel has [`RepackedKernel::act_table`].
    pub fn input_bytes(&self, weight_type: GgmlType, n_cols: usize) -> Result<usize, QuantError> {
        match self.act_table {
            None => quant::row_bytes(quant::vec_dot_type(weight_type)?, n_cols),
            Some(t) => (t.bytes)(n_cols).ok_or(QuantError::NotWholeBlocks {
                ggml_type: weight_type,
                block_size: weight_type.block_size(),
                n_elements: n_cols,
            }),
        }
    }

    /// The tables of one quantized activation row for a lookup-table kernel: checks both
    /// lengths, then builds; allocates nothing. `Unsupported` for a kernel without tables.
    pub fn build_table(
        &self,
        weight_type: GgmlType,
        n_cols: usize,
        act: &[u8],
        table: &mut [u8],
    ) -> Result<(), QuantError> {
        let t = self.act_table.ok_or(QuantError::Unsupported {
            ggml_type: weight_type,
            op: "activation tables",
        })?;
        let act_type = quant::vec_dot_type(weight_type)?;
        for (ty, expected, found) in [
            (act_type, quant::row_bytes(act_type, n_cols)?, act.len()),
            (
                GgmlType::I8,
                self.input_bytes(weight_type, n_cols)?,
                table.len(),
            ),
        ] {
            if expected != found {
                return Err(QuantError::BadLength {
                    ggml_type: ty,
                    expected,
                    found,
                });
            }
        }
        (t.build)(act, table);
        Ok(())
    }

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
    /// `row_range` cuts them). `act` is the quantized activation row, or for a kernel with
    /// [`RepackedKernel::act_table`] the tables [`RepackedKernel::build_table`] built from it.
    /// Checks every length, then runs the kernel; allocates nothing.
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
        let act_type = match self.act_table {
            None => quant::vec_dot_type(weight_type)?,
            Some(_) => GgmlType::I8,
        };
        let act_expected = self.input_bytes(weight_type, n_cols)?;
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

/// The scalar face of the Q1_0 lookup-table kernel (`quant::q1_0_lut`): same layout and tables
/// as the NEON face that `aarch64::install` puts in ARMv8.0 sets, same bits as `q1_0::vec_dot`.
/// No set selects it (on a CPU without NEON it is slower than the direct dot); tests add it
/// with [`KernelSet::add_repacked`] to run the repack, the table scratch and the pass on any CPU.
pub const Q1_0_LUT16_SCALAR: RepackedKernel = RepackedKernel {
    layout: "q1_0_lut16",
    group_rows: quant::q1_0_lut::GROUP_ROWS,
    bytes: quant::q1_0_lut::bytes,
    repack: quant::q1_0_lut::repack,
    rows: quant::q1_0_lut::matvec,
    face: "scalar-lut16",
    act_table: Some(ActTable {
        bytes: quant::q1_0_lut::table_bytes,
        build: quant::q1_0_lut::build_table,
    }),
};

/// The scalar face of the Q2_0 lookup-table kernel (`quant::q2_0_lut`), as
/// [`Q1_0_LUT16_SCALAR`] is for Q1_0.
pub const Q2_0_LUT16_SCALAR: RepackedKernel = RepackedKernel {
    layout: "q2_0_lut16",
    group_rows: quant::q2_0_lut::GROUP_ROWS,
    bytes: quant::q2_0_lut::bytes,
    repack: quant::q2_0_lut::repack,
    rows: quant::q2_0_lut::matvec,
    face: "scalar-lut16",
    act_table: Some(ActTable {
        bytes: quant::q2_0_lut::table_bytes,
        build: quant::q2_0_lut::build_table,
    }),
};

/// The kernels for one weight type.
#[derive(Clone, Copy, Debug)]
pub struct WeightKernel {
    pub weight_type: GgmlType,
    /// The format the activation row must be quantized into before the dot products
    /// ([`quant::vec_dot_type`] of the weight type).
    pub act_type: GgmlType,
    /// The set's quantizer for `act_type` (see [`KernelSet::quantize_activation`]), kept here
    /// so that model code holding only this kernel quantizes as the set does; called through
    /// [`WeightKernel::quantize_activation`].
    pub quantize: QuantizeFn,
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
    /// Quantizes an f32 row into `self.act_type` with the set's quantizer, the input of
    /// [`WeightKernel::matvec`]; `out` must be exactly the row's size in `act_type`.
    pub fn quantize_activation(&self, x: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
        quantize_checked(self.act_type, self.quantize, x, out)
    }

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

/// Checks `out`'s length for a row of `x.len()` values in `ty`, then runs `quantize`.
fn quantize_checked(
    ty: GgmlType,
    quantize: QuantizeFn,
    x: &[f32],
    out: &mut [u8],
) -> Result<(), QuantError> {
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

const fn scalar_kernel(
    weight_type: GgmlType,
    act_type: GgmlType,
    vec_dot: VecDotFn,
) -> WeightKernel {
    WeightKernel {
        weight_type,
        act_type,
        quantize: scalar_quantizer(act_type),
        vec_dot,
        rows: None,
        cols: None,
        cols_twin: None,
        face: "scalar",
        repacked: None,
    }
}

/// Every weight type with a matvec, with its scalar reference (pairs as in `quant::vec_dot_type`).
const SCALAR_WEIGHTS: [WeightKernel; 26] = {
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
        scalar_kernel(T::IQ4_NL, T::Q8_0, iq4_nl::vec_dot),
        scalar_kernel(T::IQ4_XS, T::Q8_K, iq4_xs::vec_dot),
        scalar_kernel(T::IQ2_XXS, T::Q8_K, iq2_xxs::vec_dot),
        scalar_kernel(T::IQ3_XXS, T::Q8_K, iq3_xxs::vec_dot),
        scalar_kernel(T::IQ2_XS, T::Q8_K, iq2_xs::vec_dot),
        scalar_kernel(T::IQ2_S, T::Q8_K, iq2_s::vec_dot),
        scalar_kernel(T::IQ3_S, T::Q8_K, iq3_s::vec_dot),
        scalar_kernel(T::IQ1_S, T::Q8_K, iq1_s::vec_dot),
        scalar_kernel(T::IQ1_M, T::Q8_K, iq1_m::vec_dot),
    ]
};

/// Every activation format with its scalar quantizer: ggml's reference quantizers, but for Q8_0
/// and Q8_1 the rounding of llama.cpp's x86 build, which the logits depend on
/// (`quant::q8_0::quantize_activation` says why).
const SCALAR_QUANTIZERS: [(GgmlType, QuantizeFn); 6] = {
    use quant::*;
    [
        (GgmlType::F32, f32::quantize_row),
        (GgmlType::F16, f16::quantize_row),
        (GgmlType::BF16, bf16::quantize_row),
        (GgmlType::Q8_0, q8_0::quantize_activation),
        (GgmlType::Q8_1, q8_1::quantize_activation),
        (GgmlType::Q8_K, q8_k::quantize_row),
    ]
};

/// The quantizer of `act_type` in [`SCALAR_QUANTIZERS`]. Evaluated at compile time for
/// [`SCALAR_WEIGHTS`]: a weight type whose activation format has no quantizer does not build.
const fn scalar_quantizer(act_type: GgmlType) -> QuantizeFn {
    let mut i = 0;
    while i < SCALAR_QUANTIZERS.len() {
        // `==` is not const for GgmlType; its variants carry no data, so compare discriminants.
        if SCALAR_QUANTIZERS[i].0 as u32 == act_type as u32 {
            return SCALAR_QUANTIZERS[i].1;
        }
        i += 1;
    }
    panic!("an activation format without a quantizer")
}

/// The kernels for every weight type and activation format on this CPU. Chosen once at start
/// (`KernelSet::select`), then shared read-only by every thread.
#[derive(Clone, Debug)]
pub struct KernelSet {
    name: &'static str,
    weights: [WeightKernel; 26],
    quantizers: [(GgmlType, QuantizeFn); 6],
    /// Attention over the f16 KV cache, of one query head (`math::attention_head`) and of the
    /// query heads of one KV head (`math::attention_group`), or SIMD faces with the same bits.
    attention: AttentionFaces,
    /// SwiGLU of one FFN row: `math::swiglu` or a SIMD face of it with the same bits.
    swiglu: fn(&mut [f32], &[f32]),
    /// One token of the gated delta rule on one value head, f32 and f16 state:
    /// `math::delta_rule_step{,_f16}` or SIMD faces of them with the same bits.
    delta_rule: DeltaRuleKernels,
}

impl KernelSet {
    /// The scalar reference kernels only: the ground truth, and what runs on a CPU we have no
    /// SIMD kernels for.
    pub fn scalar() -> KernelSet {
        KernelSet {
            name: "scalar",
            weights: SCALAR_WEIGHTS,
            quantizers: SCALAR_QUANTIZERS,
            attention: AttentionFaces {
                head: math::attention_head,
                group: math::attention_group,
                q8: crate::kv_q8::AttentionLoopsQ8::SCALAR,
            },
            swiglu: math::swiglu,
            delta_rule: DeltaRuleKernels::SCALAR,
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

    /// Attention (see `math::attention_head` and `math::attention_group`), the faces this CPU
    /// runs.
    pub fn attention(&self) -> AttentionFaces {
        self.attention
    }

    /// SwiGLU of one FFN row (see `math::swiglu`), the face this CPU runs.
    pub fn swiglu(&self) -> fn(&mut [f32], &[f32]) {
        self.swiglu
    }

    /// The gated delta rule's one-token step (see `math::delta_rule_step`), the faces this CPU
    /// runs.
    pub fn delta_rule(&self) -> DeltaRuleKernels {
        self.delta_rule
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
    /// `out` must be exactly the row's size in `ty`. The one activation quantizer of the
    /// engine: every `WeightKernel` of this set carries the same function for its `act_type`.
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
        quantize_checked(ty, quantize, x, out)
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
    /// must give the bits of that entry's `vec_dot`). Architecture installs only, after
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

    /// Replaces the kernels of weight type `ty`. Architecture installs only, after checking
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

    /// Adds a repacked-layout kernel for weight type `ty` (the architecture installs put
    /// theirs after checking the CPU; tests and experiments may add portable ones: the table
    /// holds only safe functions, so no entry can reach an instruction the CPU lacks).
    pub fn add_repacked(&mut self, ty: GgmlType, repacked: RepackedKernel) {
        if let Some(k) = self.weights.iter_mut().find(|k| k.weight_type == ty) {
            k.repacked = Some(repacked);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::exactness::{detected_features, quantize};
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn no_features_select_the_scalar_twins() {
        // No features allowed: nothing but the scalar twins.
        let scalar = KernelSet::select(&CpuFeatures::default());
        assert_eq!(scalar.name(), "scalar");
        assert!(scalar.weights.iter().all(|k| k.face == "scalar"));
        // The table pairs each weight type with quant's activation format.
        for k in &scalar.weights {
            assert_eq!(quant::vec_dot_type(k.weight_type), Ok(k.act_type));
        }
    }

    /// llama.cpp's x86 (AVX2) rounding of Q8_0 and Q8_1 written out on its own, apart from
    /// `quant`'s: per block of 32, `d = amax / 127` and `q = rint(x * (127 / amax))` (half to
    /// even), `d` and Q8_1's `s = d * sum(q)` stored as f16. For finite inputs.
    fn x86_q8_rounding(ty: GgmlType, x: &[f32]) -> Vec<u8> {
        let q8_1 = ty == GgmlType::Q8_1;
        let mut out = Vec::new();
        for xs in x.chunks_exact(32) {
            let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
            let id = if amax == 0.0 { 0.0 } else { 127.0 / amax };
            let q: Vec<i32> = xs.iter().map(|&v| libm::rintf(v * id) as i32).collect();
            let d = amax / 127.0;
            out.extend(half::f16::from_f32(d).to_bits().to_le_bytes());
            if q8_1 {
                let s = d * q.iter().sum::<i32>() as f32;
                out.extend(half::f16::from_f32(s).to_bits().to_le_bytes());
            }
            out.extend(q.iter().map(|&q| q as i8 as u8));
        }
        out
    }

    /// Rows for the activation quantizers: smooth values, exact ties of the Q8 rounding (a
    /// block whose amax is 127 has `127 / amax = 1`, so `k + 0.5` is a tie), outliers in the
    /// thousands beside small values (Gemma 3's residual stream), and an all-zero block.
    fn activation_rows() -> Vec<(&'static str, Vec<f32>)> {
        let smooth: Vec<f32> = (0..512)
            .map(|i| libm::sinf(i as f32 * 0.37) * 3.0)
            .collect();
        let ties: Vec<f32> = (0..512)
            .map(|i| match i % 32 {
                0 => 127.0,
                j => (j as f32 - 16.0) + 0.5,
            })
            .collect();
        let outliers: Vec<f32> = (0..512)
            .map(|i| match i % 97 {
                0 => -3172.25,
                1 => 1055.0,
                _ => libm::sinf(i as f32) * 0.07,
            })
            .collect();
        let mut zero_block = smooth.clone();
        zero_block[32..64].fill(0.0);
        vec![
            ("smooth", smooth),
            ("ties", ties),
            ("outliers", outliers),
            ("zero block", zero_block),
        ]
    }

    /// The set's activation quantizers: ggml's reference ones (`quant::quantize_row`, which
    /// tests/tests/quant_blocks.rs checks against ggml byte for byte), but for Q8_0 and Q8_1
    /// llama.cpp's x86 rounding, the one the model has always run (the logits depend on it).
    #[test]
    fn quantize_activation_rounds_as_the_reference_engine() {
        let set = KernelSet::select(&detected_features());
        for (case, x) in activation_rows() {
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
                let want = match ty {
                    GgmlType::Q8_0 | GgmlType::Q8_1 => x86_q8_rounding(ty, &x),
                    _ => quantize(ty, &x),
                };
                assert_eq!(out, want, "{ty} {case}");
                if case == "ties" && matches!(ty, GgmlType::Q8_0 | GgmlType::Q8_1) {
                    // ggml's reference rounds the ties away from zero: the test tells them apart.
                    assert_ne!(out, quantize(ty, &x), "{ty} {case}");
                }
                assert!(matches!(
                    set.quantize_activation(ty, &x, &mut out[1..]),
                    Err(QuantError::BadLength { .. })
                ));
            }
        }
        let x = &activation_rows()[0].1;
        assert!(matches!(
            set.quantize_activation(GgmlType::Q4_K, x, &mut [0u8; 288]),
            Err(QuantError::Unsupported { .. })
        ));
    }

    /// A `WeightKernel` quantizes its input as its set does (the model holds only the kernel).
    #[test]
    fn weight_kernels_quantize_as_their_set() {
        for set in [KernelSet::scalar(), KernelSet::select(&detected_features())] {
            for k in &set.weights {
                for (case, x) in activation_rows() {
                    let mut want = vec![0u8; quant::row_bytes(k.act_type, x.len()).unwrap()];
                    set.quantize_activation(k.act_type, &x, &mut want).unwrap();
                    let mut got = vec![0xAAu8; want.len()];
                    k.quantize_activation(&x, &mut got).unwrap();
                    assert_eq!(got, want, "{} ({}) {case}", k.weight_type, set.name());
                    assert!(matches!(
                        k.quantize_activation(&x, &mut got[1..]),
                        Err(QuantError::BadLength { .. })
                    ));
                }
            }
        }
    }
}
