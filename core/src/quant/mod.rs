//! Block formats, laid out the way ggml-quants.c does it: one module per format, each with its
//! block struct, its reference dequantize, quantize where the matvec path needs it, and its scalar
//! dot product against the activation format it pairs with. These are the scalar truth every SIMD
//! kernel is tested against.

use core::fmt;

mod common;

pub mod bf16;
pub mod f16;
pub mod f32;
pub mod iq1_m;
pub mod iq1_s;
pub mod iq2_s;
pub mod iq2_xs;
pub mod iq2_xxs;
pub mod iq3_s;
pub mod iq3_xxs;
pub mod iq4_nl;
pub mod iq4_xs;
pub mod q1_0;
pub mod q1_0_lut;
pub mod q2_0;
pub mod q2_0_lut;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_1;
pub mod q8_k;
pub mod tq1_0;
pub mod tq2_0;

#[cfg(test)]
pub(crate) mod testutil;

/// Tensor element types by their GGUF/ggml type id. Ids that ggml retired (4, 5, 31-33, 36-38)
/// are not listed: a file that uses them is rejected as an unknown type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
    Q2_0,
}

/// (type, id, elements per block, bytes per block). The id and sizes are the on-disk contract
/// with ggml; `tests` cross-checks them with the `gguf` Python package.
const TYPE_TABLE: &[(GgmlType, u32, usize, usize)] = &[
    (GgmlType::F32, 0, 1, 4),
    (GgmlType::F16, 1, 1, 2),
    (GgmlType::Q4_0, 2, 32, 18),
    (GgmlType::Q4_1, 3, 32, 20),
    (GgmlType::Q5_0, 6, 32, 22),
    (GgmlType::Q5_1, 7, 32, 24),
    (GgmlType::Q8_0, 8, 32, 34),
    (GgmlType::Q8_1, 9, 32, 36),
    (GgmlType::Q2_K, 10, 256, 84),
    (GgmlType::Q3_K, 11, 256, 110),
    (GgmlType::Q4_K, 12, 256, 144),
    (GgmlType::Q5_K, 13, 256, 176),
    (GgmlType::Q6_K, 14, 256, 210),
    (GgmlType::Q8_K, 15, 256, 292),
    (GgmlType::IQ2_XXS, 16, 256, 66),
    (GgmlType::IQ2_XS, 17, 256, 74),
    (GgmlType::IQ3_XXS, 18, 256, 98),
    (GgmlType::IQ1_S, 19, 256, 50),
    (GgmlType::IQ4_NL, 20, 32, 18),
    (GgmlType::IQ3_S, 21, 256, 110),
    (GgmlType::IQ2_S, 22, 256, 82),
    (GgmlType::IQ4_XS, 23, 256, 136),
    (GgmlType::I8, 24, 1, 1),
    (GgmlType::I16, 25, 1, 2),
    (GgmlType::I32, 26, 1, 4),
    (GgmlType::I64, 27, 1, 8),
    (GgmlType::F64, 28, 1, 8),
    (GgmlType::IQ1_M, 29, 256, 56),
    (GgmlType::BF16, 30, 1, 2),
    (GgmlType::TQ1_0, 34, 256, 54),
    (GgmlType::TQ2_0, 35, 256, 66),
    (GgmlType::MXFP4, 39, 32, 17),
    (GgmlType::NVFP4, 40, 64, 36),
    (GgmlType::Q1_0, 41, 128, 18),
    (GgmlType::Q2_0, 42, 64, 18),
];

impl GgmlType {
    /// The type for a GGUF type id, or `None` for an id ggml does not define (or retired).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TYPE_TABLE.iter().find(|e| e.1 == id).map(|e| e.0)
    }

    fn entry(self) -> &'static (GgmlType, u32, usize, usize) {
        // The table lists every variant; a missing one is caught by `every_type_has_an_entry`.
        TYPE_TABLE
            .iter()
            .find(|e| e.0 == self)
            .unwrap_or(&TYPE_TABLE[0])
    }

    pub fn id(self) -> u32 {
        self.entry().1
    }

    /// Elements per block (1 for plain scalar types).
    pub fn block_size(self) -> usize {
        self.entry().2
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        self.entry().3
    }

    /// Bytes taken by `n_elements` elements, `None` if `n_elements` is not a whole number of
    /// blocks or the size overflows.
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n_elements.is_multiple_of(bs) {
            return None;
        }
        (n_elements / bs).checked_mul(self.type_size() as u64)
    }

    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q8_1 => "Q8_1",
            GgmlType::Q2_K => "Q2_K",
            GgmlType::Q3_K => "Q3_K",
            GgmlType::Q4_K => "Q4_K",
            GgmlType::Q5_K => "Q5_K",
            GgmlType::Q6_K => "Q6_K",
            GgmlType::Q8_K => "Q8_K",
            GgmlType::IQ2_XXS => "IQ2_XXS",
            GgmlType::IQ2_XS => "IQ2_XS",
            GgmlType::IQ3_XXS => "IQ3_XXS",
            GgmlType::IQ1_S => "IQ1_S",
            GgmlType::IQ4_NL => "IQ4_NL",
            GgmlType::IQ3_S => "IQ3_S",
            GgmlType::IQ2_S => "IQ2_S",
            GgmlType::IQ4_XS => "IQ4_XS",
            GgmlType::I8 => "I8",
            GgmlType::I16 => "I16",
            GgmlType::I32 => "I32",
            GgmlType::I64 => "I64",
            GgmlType::F64 => "F64",
            GgmlType::IQ1_M => "IQ1_M",
            GgmlType::BF16 => "BF16",
            GgmlType::TQ1_0 => "TQ1_0",
            GgmlType::TQ2_0 => "TQ2_0",
            GgmlType::MXFP4 => "MXFP4",
            GgmlType::NVFP4 => "NVFP4",
            GgmlType::Q1_0 => "Q1_0",
            GgmlType::Q2_0 => "Q2_0",
        }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_has_an_entry() {
        for &(t, id, bs, ts) in TYPE_TABLE {
            assert_eq!(GgmlType::from_id(id), Some(t));
            assert_eq!(t.id(), id);
            assert_eq!((t.block_size(), t.type_size()), (bs, ts));
        }
        assert_eq!(GgmlType::from_id(4), None);
        assert_eq!(GgmlType::from_id(999), None);
    }

    #[test]
    fn bytes_for_rejects_partial_blocks() {
        assert_eq!(GgmlType::Q4_K.bytes_for(512), Some(288));
        assert_eq!(GgmlType::Q4_K.bytes_for(100), None);
        assert_eq!(GgmlType::F32.bytes_for(u64::MAX), None);
    }
}

// ---------------------------------------------------------------------------------------------
// The matvec contract. Every weight type pairs with one activation format (ggml's
// `vec_dot_type`): the activation row is quantized once into that format, then dotted with
// every weight row. These four functions are the single entry point the model code uses; the
// per-format modules below them hold the block layouts and the scalar truth.
// ---------------------------------------------------------------------------------------------

/// Why a block-format operation could not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuantError {
    /// smolrun has no implementation for this type in this role.
    Unsupported {
        ggml_type: GgmlType,
        op: &'static str,
    },
    /// Buffers of mismatched size: `expected` and `found` are byte counts for packed data and
    /// element counts for f32 rows.
    BadLength {
        ggml_type: GgmlType,
        expected: usize,
        found: usize,
    },
    /// A row of `n_elements` that is not a whole number of this type's blocks.
    NotWholeBlocks {
        ggml_type: GgmlType,
        block_size: usize,
        n_elements: usize,
    },
}

impl fmt::Display for QuantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuantError::Unsupported { ggml_type, op } => write!(
                f,
                "tensor type {ggml_type} is not supported for {op}; re-quantize the model to a supported type \
                 (Q4_K_M, Q8_0, F16, ...)"
            ),
            QuantError::BadLength { ggml_type, expected, found } => {
                write!(f, "{ggml_type}: expected a length of {expected}, found {found}")
            }
            QuantError::NotWholeBlocks { ggml_type, block_size, n_elements } => write!(
                f,
                "{ggml_type}: a row of {n_elements} elements is not a whole number of {block_size}-element \
                 blocks; the tensor's shape does not fit its type (corrupt or unsupported file)"
            ),
        }
    }
}

/// Bytes of a row of `n` elements of `ty`, or the error if `n` is not whole blocks.
pub fn row_bytes(ty: GgmlType, n: usize) -> Result<usize, QuantError> {
    let bs = ty.block_size();
    if !n.is_multiple_of(bs) {
        return Err(QuantError::NotWholeBlocks {
            ggml_type: ty,
            block_size: bs,
            n_elements: n,
        });
    }
    Ok(n / bs * ty.type_size())
}

fn check_len(ty: GgmlType, expected: usize, found: usize) -> Result<(), QuantError> {
    if expected != found {
        return Err(QuantError::BadLength {
            ggml_type: ty,
            expected,
            found,
        });
    }
    Ok(())
}

/// The activation format a weight type is dotted against (ggml-cpu's `vec_dot_type`):
/// the K-quants and ternary types take Q8_K; Q4_0, Q5_0, Q8_0, Q1_0, Q2_0 take Q8_0;
/// Q4_1, Q5_1 take Q8_1; IQ4_NL takes Q8_0 and IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
/// IQ1_S, IQ1_M Q8_K; the float types take themselves.
/// Types smolrun cannot use as matvec weights (the activation-only Q8_1 and Q8_K, the other IQ
/// types, MXFP4/NVFP4, integers) are `Unsupported`.
pub fn vec_dot_type(w: GgmlType) -> Result<GgmlType, QuantError> {
    use GgmlType::*;
    Ok(match w {
        F32 => F32,
        F16 => F16,
        BF16 => BF16,
        Q4_0 | Q5_0 | Q8_0 | Q1_0 | Q2_0 | IQ4_NL => Q8_0,
        Q4_1 | Q5_1 => Q8_1,
        Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | TQ1_0 | TQ2_0 | IQ4_XS | IQ2_XXS | IQ3_XXS => Q8_K,
        IQ2_XS | IQ2_S | IQ3_S | IQ1_S | IQ1_M => Q8_K,
        _ => {
            return Err(QuantError::Unsupported {
                ggml_type: w,
                op: "matvec weights",
            })
        }
    })
}

/// Quantizes an f32 row into an activation format (F32, F16, BF16, Q8_0, Q8_1, Q8_K), with the
/// numerics of ggml's reference quantizers. `out` must be exactly the row's size in `ty`.
/// The engine does not run this on its matvec inputs: it runs the kernel set's quantizers
/// (`kernels::KernelSet::quantize_activation`), which round Q8_0 and Q8_1 as llama.cpp's x86
/// build does ([`q8_0::quantize_activation`]).
pub fn quantize_row(ty: GgmlType, x: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    let quantize: fn(&[f32], &mut [u8]) = match ty {
        GgmlType::F32 => f32::quantize_row,
        GgmlType::F16 => f16::quantize_row,
        GgmlType::BF16 => bf16::quantize_row,
        GgmlType::Q8_0 => q8_0::quantize_row,
        GgmlType::Q8_1 => q8_1::quantize_row,
        GgmlType::Q8_K => q8_k::quantize_row,
        _ => {
            return Err(QuantError::Unsupported {
                ggml_type: ty,
                op: "activation quantization",
            })
        }
    };
    check_len(ty, row_bytes(ty, x.len())?, out.len())?;
    quantize(x, out);
    Ok(())
}

/// The weight types [`quantize_weights`] writes: ggml's reference quantizers, the ones
/// llama-quantize runs when it has no importance matrix (for IQ4_NL and IQ4_XS its
/// `quantize_iq4_*`, which search 15 scales per block). Q4_0, Q5_0 and IQ4_NL are there also
/// as the fallbacks of the 256-block types for rows that are not whole super-blocks.
pub const WEIGHT_QUANTIZERS: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q5_0,
    GgmlType::Q4_0,
    GgmlType::Q4_K,
    GgmlType::Q2_K,
    GgmlType::Q2_0,
    GgmlType::Q1_0,
    GgmlType::TQ2_0,
    GgmlType::TQ1_0,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

/// Quantizes an f32 row of weights into `ty` exactly as ggml's `quantize_row_*_ref` does
/// (byte for byte: llama-quantize's output without an importance matrix). `x` must be whole
/// blocks of `ty` and `out` exactly their size.
pub fn quantize_weights(ty: GgmlType, x: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    let quantize: fn(&[f32], &mut [u8]) = match ty {
        GgmlType::F32 => f32::quantize_row,
        GgmlType::F16 => f16::quantize_row,
        GgmlType::BF16 => bf16::quantize_row,
        GgmlType::Q8_0 => q8_0::quantize_row,
        GgmlType::Q5_0 => q5_0::quantize_row,
        GgmlType::Q4_0 => q4_0::quantize_row,
        GgmlType::Q4_K => q4_k::quantize_row,
        GgmlType::Q2_K => q2_k::quantize_row,
        GgmlType::Q2_0 => q2_0::quantize_row,
        GgmlType::Q1_0 => q1_0::quantize_row,
        GgmlType::TQ2_0 => tq2_0::quantize_row,
        GgmlType::TQ1_0 => tq1_0::quantize_row,
        GgmlType::IQ4_NL => iq4_nl::quantize_row,
        GgmlType::IQ4_XS => iq4_xs::quantize_row,
        _ => {
            return Err(QuantError::Unsupported {
                ggml_type: ty,
                op: "weight quantization",
            })
        }
    };
    check_len(ty, row_bytes(ty, x.len())?, out.len())?;
    quantize(x, out);
    Ok(())
}

/// Expands packed data of type `ty` into f32, exactly as ggml's `dequantize_row_*` does.
/// `src` must hold whole blocks and `out` exactly the elements they decode to.
pub fn dequantize_row(ty: GgmlType, src: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let dequantize: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::F32 => f32::dequantize_row,
        GgmlType::F16 => f16::dequantize_row,
        GgmlType::BF16 => bf16::dequantize_row,
        GgmlType::Q4_0 => q4_0::dequantize_row,
        GgmlType::Q4_1 => q4_1::dequantize_row,
        GgmlType::Q5_0 => q5_0::dequantize_row,
        GgmlType::Q5_1 => q5_1::dequantize_row,
        GgmlType::Q8_0 => q8_0::dequantize_row,
        GgmlType::Q8_1 => q8_1::dequantize_row,
        GgmlType::Q2_K => q2_k::dequantize_row,
        GgmlType::Q3_K => q3_k::dequantize_row,
        GgmlType::Q4_K => q4_k::dequantize_row,
        GgmlType::Q5_K => q5_k::dequantize_row,
        GgmlType::Q6_K => q6_k::dequantize_row,
        GgmlType::Q8_K => q8_k::dequantize_row,
        GgmlType::Q1_0 => q1_0::dequantize_row,
        GgmlType::Q2_0 => q2_0::dequantize_row,
        GgmlType::TQ1_0 => tq1_0::dequantize_row,
        GgmlType::TQ2_0 => tq2_0::dequantize_row,
        GgmlType::IQ4_NL => iq4_nl::dequantize_row,
        GgmlType::IQ4_XS => iq4_xs::dequantize_row,
        GgmlType::IQ2_XXS => iq2_xxs::dequantize_row,
        GgmlType::IQ3_XXS => iq3_xxs::dequantize_row,
        GgmlType::IQ2_XS => iq2_xs::dequantize_row,
        GgmlType::IQ2_S => iq2_s::dequantize_row,
        GgmlType::IQ3_S => iq3_s::dequantize_row,
        GgmlType::IQ1_S => iq1_s::dequantize_row,
        GgmlType::IQ1_M => iq1_m::dequantize_row,
        _ => {
            return Err(QuantError::Unsupported {
                ggml_type: ty,
                op: "dequantization",
            })
        }
    };
    check_len(ty, row_bytes(ty, out.len())?, src.len())?;
    dequantize(src, out);
    Ok(())
}

/// Dot product of one weight row (`n` elements of the weight type) with one activation row
/// already quantized into the weight type's `vec_dot_type`. Picked once by `vec_dot_fn`;
/// lengths are only debug-asserted, so callers check shapes when they pick it.
pub type VecDotFn = fn(n: usize, w_row: &[u8], act_row: &[u8]) -> f32;

/// The scalar reference dot product for weights of type `w`.
pub fn vec_dot_fn(w: GgmlType) -> Result<VecDotFn, QuantError> {
    Ok(match w {
        GgmlType::F32 => f32::vec_dot,
        GgmlType::F16 => f16::vec_dot,
        GgmlType::BF16 => bf16::vec_dot,
        GgmlType::Q4_0 => q4_0::vec_dot,
        GgmlType::Q4_1 => q4_1::vec_dot,
        GgmlType::Q5_0 => q5_0::vec_dot,
        GgmlType::Q5_1 => q5_1::vec_dot,
        GgmlType::Q8_0 => q8_0::vec_dot,
        GgmlType::Q2_K => q2_k::vec_dot,
        GgmlType::Q3_K => q3_k::vec_dot,
        GgmlType::Q4_K => q4_k::vec_dot,
        GgmlType::Q5_K => q5_k::vec_dot,
        GgmlType::Q6_K => q6_k::vec_dot,
        GgmlType::Q1_0 => q1_0::vec_dot,
        GgmlType::Q2_0 => q2_0::vec_dot,
        GgmlType::TQ1_0 => tq1_0::vec_dot,
        GgmlType::TQ2_0 => tq2_0::vec_dot,
        GgmlType::IQ4_NL => iq4_nl::vec_dot,
        GgmlType::IQ4_XS => iq4_xs::vec_dot,
        GgmlType::IQ2_XXS => iq2_xxs::vec_dot,
        GgmlType::IQ3_XXS => iq3_xxs::vec_dot,
        GgmlType::IQ2_XS => iq2_xs::vec_dot,
        GgmlType::IQ2_S => iq2_s::vec_dot,
        GgmlType::IQ3_S => iq3_s::vec_dot,
        GgmlType::IQ1_S => iq1_s::vec_dot,
        GgmlType::IQ1_M => iq1_m::vec_dot,
        _ => {
            return Err(QuantError::Unsupported {
                ggml_type: w,
                op: "matvec weights",
            })
        }
    })
}

/// out[r] = weights[r] . act for every row: `weights` is `n_rows` rows of `n_cols` elements of
/// type `w`, `act` one row of `n_cols` already quantized into `vec_dot_type(w)`. Checks every
/// shape once, then runs the scalar dot per row; allocates nothing.
pub fn matvec(
    w: GgmlType,
    weights: &[u8],
    n_rows: usize,
    n_cols: usize,
    act: &[u8],
    out: &mut [f32],
) -> Result<(), QuantError> {
    let dot = vec_dot_fn(w)?;
    let w_row = check_matvec_shapes(w, weights.len(), n_rows, n_cols, act.len(), out.len())?;
    if w_row == 0 {
        out.fill(0.0);
        return Ok(());
    }
    for (y, row) in out.iter_mut().zip(weights.chunks_exact(w_row)) {
        *y = dot(n_cols, row, act);
    }
    Ok(())
}

/// The shape checks of [`matvec`] (shared with `kernels::WeightKernel::matvec`): returns the
/// bytes of one weight row.
pub(crate) fn check_matvec_shapes(
    w: GgmlType,
    weights_len: usize,
    n_rows: usize,
    n_cols: usize,
    act_len: usize,
    out_len: usize,
) -> Result<usize, QuantError> {
    let act_ty = vec_dot_type(w)?;
    let w_row = row_bytes(w, n_cols)?;
    check_len(act_ty, row_bytes(act_ty, n_cols)?, act_len)?;
    let w_total = w_row.checked_mul(n_rows).ok_or(QuantError::BadLength {
        ggml_type: w,
        expected: usize::MAX,
        found: weights_len,
    })?;
    check_len(w, w_total, weights_len)?;
    check_len(GgmlType::F32, n_rows, out_len)?;
    Ok(w_row)
}

#[cfg(test)]
mod dispatch_tests {
    use super::testutil::*;
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    const WEIGHT_TYPES: [GgmlType; 26] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q1_0,
        GgmlType::Q2_0,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
        GgmlType::IQ2_XXS,
        GgmlType::IQ3_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
    ];

    #[test]
    fn partial_blocks_are_rejected() {
        for ty in WEIGHT_TYPES
            .iter()
            .copied()
            .chain([GgmlType::Q8_1, GgmlType::Q8_K])
        {
            let bs = ty.block_size();
            if bs == 1 {
                continue;
            }
            let mut out = vec![0f32; bs + 1];
            let src = vec![0u8; 2 * ty.type_size()];
            assert_eq!(
                dequantize_row(ty, &src, &mut out),
                Err(QuantError::NotWholeBlocks {
                    ggml_type: ty,
                    block_size: bs,
                    n_elements: bs + 1
                }),
                "{ty}"
            );
            // Whole blocks, but a source of the wrong size.
            let mut out = vec![0f32; bs];
            assert!(
                matches!(
                    dequantize_row(ty, &src, &mut out),
                    Err(QuantError::BadLength { .. })
                ),
                "{ty}"
            );
        }
        for ty in [GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K] {
            let bs = ty.block_size();
            let x = vec![0f32; bs - 1];
            let mut out = vec![0u8; ty.type_size()];
            assert!(matches!(
                quantize_row(ty, &x, &mut out),
                Err(QuantError::NotWholeBlocks { .. })
            ));
            let x = vec![0f32; bs];
            let mut out = vec![0u8; ty.type_size() + 1];
            assert!(matches!(
                quantize_row(ty, &x, &mut out),
                Err(QuantError::BadLength { .. })
            ));
        }
    }

    /// The weight quantizers that pack (not the float types), with the largest reconstruction
    /// error allowed, as a share of the block's largest |x|: half a step of each format's grid,
    /// plus the rounding of its 6- or 4-bit sub-scales for the K types. Q1_0 keeps only signs
    /// (x = +-mean|x|), so its bound is the whole range.
    const PACKING_QUANTIZERS: [(GgmlType, f32); 11] = [
        (GgmlType::Q8_0, 0.5 / 127.0 + 1e-3),
        // A whole step: the extreme opposite to the signed max is clipped to the last level.
        (GgmlType::Q5_0, 1.0 / 16.0 + 1e-3),
        (GgmlType::Q4_0, 1.0 / 8.0 + 1e-3),
        (GgmlType::Q4_K, 0.1),
        (GgmlType::Q2_K, 0.4),
        (GgmlType::Q2_0, 0.5 + 1e-3),
        (GgmlType::TQ2_0, 0.5 + 1e-3),
        (GgmlType::TQ1_0, 0.5 + 1e-3),
        (GgmlType::Q1_0, 1.0 + 1e-3),
        // Half the widest gap of the grid (89..113) over its end (127), plus for IQ4_XS the
        // rounding of its 6-bit sub-block scales.
        (GgmlType::IQ4_NL, 12.0 / 127.0 + 1e-3),
        (GgmlType::IQ4_XS, 0.15),
    ];

    /// Quantizes `x` to `ty` and back.
    fn round_trip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
        let mut q = vec![0u8; row_bytes(ty, x.len()).unwrap()];
        quantize_weights(ty, x, &mut q).unwrap();
        let mut y = vec![0f32; x.len()];
        dequantize_row(ty, &q, &mut y).unwrap();
        y
    }

    /// Largest |x - y| per 256 elements (every block size divides 256) as a share of that
    /// stretch's largest |x|.
    fn worst_relative_error(x: &[f32], y: &[f32]) -> f32 {
        x.chunks(256)
            .zip(y.chunks(256))
            .map(|(x, y)| {
                let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
                let err = x.iter().zip(y).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                if amax > 0.0 {
                    err / amax
                } else {
                    err
                }
            })
            .fold(0.0, f32::max)
    }

    #[test]
    fn weight_quantizers_round_trip_within_half_a_step() {
        for (ty, bound) in PACKING_QUANTIZERS {
            let x = ramp(1024, 0.37);
            let err = worst_relative_error(&x, &round_trip(ty, &x));
            assert!(
                err <= bound,
                "{ty}: error {err} of the block's range, bound {bound}"
            );
        }
    }

    #[test]
    fn weight_quantizers_on_edge_blocks() {
        for (ty, bound) in PACKING_QUANTIZERS {
            // All zeros: every quant and scale zero, decoded exactly.
            let y = round_trip(ty, &[0.0; 512]);
            assert!(y.iter().all(|&v| v == 0.0), "{ty}: zeros decode as {y:?}");

            // Negative only: no sign flips beyond the format's error.
            let x: Vec<f32> = ramp(512, 0.11).iter().map(|v| -v.abs() - 0.25).collect();
            let y = round_trip(ty, &x);
            let err = worst_relative_error(&x, &y);
            assert!(
                err <= bound,
                "{ty}: negative-only error {err}, bound {bound}"
            );
            if ty != GgmlType::Q1_0 {
                assert!(y.iter().all(|&v| v <= 0.0), "{ty}: {y:?}");
            }

            // One huge value among small ones: the scale follows it, so it survives (within
            // f16's rounding of the scale); Q1_0 keeps only its sign.
            let mut x = ramp(512, 0.23);
            x[300] = -1.0e4;
            let y = round_trip(ty, &x);
            if ty == GgmlType::Q1_0 {
                assert!(y[300] < 0.0, "{ty}");
            } else {
                assert!(
                    (y[300] - x[300]).abs() <= 1.0e4 * 2e-3,
                    "{ty}: huge value decodes as {}",
                    y[300]
                );
            }
            assert!(y.iter().all(|v| v.is_finite()), "{ty}");
        }
    }

    #[test]
    fn weight_quantizers_check_lengths() {
        let x = [0f32; 256];
        let mut out = [0u8; 84];
        assert!(quantize_weights(GgmlType::Q2_K, &x, &mut out).is_ok());
        assert!(matches!(
            quantize_weights(GgmlType::Q2_K, &x[..128], &mut out),
            Err(QuantError::NotWholeBlocks { .. })
        ));
        assert!(matches!(
            quantize_weights(GgmlType::Q2_K, &x, &mut out[..80]),
            Err(QuantError::BadLength { .. })
        ));
        assert!(matches!(
            quantize_weights(GgmlType::Q3_K, &x, &mut out),
            Err(QuantError::Unsupported { .. })
        ));
    }

    #[test]
    fn unsupported_types_say_so() {
        assert!(matches!(
            vec_dot_type(GgmlType::MXFP4),
            Err(QuantError::Unsupported { .. })
        ));
        assert!(matches!(
            vec_dot_fn(GgmlType::Q8_K),
            Err(QuantError::Unsupported { .. })
        ));
        assert!(matches!(
            vec_dot_fn(GgmlType::Q8_1),
            Err(QuantError::Unsupported { .. })
        ));
        let mut out = [0u8; 32];
        assert!(matches!(
            quantize_row(GgmlType::Q4_K, &[0.0; 256], &mut out),
            Err(QuantError::Unsupported { .. })
        ));
        let mut y = [0f32; 32];
        assert!(matches!(
            dequantize_row(GgmlType::MXFP4, &[0; 17], &mut y),
            Err(QuantError::Unsupported { .. })
        ));
    }

    #[test]
    fn every_weight_type_dots_like_its_dequantized_rows() {
        for ty in WEIGHT_TYPES {
            let blocks = if ty.block_size() == 1 { 96 } else { 3 };
            check_random_dot(ty, blocks);
        }
    }

    #[test]
    fn matvec_runs_each_row_and_checks_shapes() {
        let ty = GgmlType::Q4_K;
        let (rows, cols) = (3, 512);
        let w = random_blocks(ty, rows * 2, 7);
        let x = ramp(cols, 0.05);
        let mut act = vec![0u8; 2 * q8_k::BLOCK_BYTES];
        quantize_row(GgmlType::Q8_K, &x, &mut act).unwrap();
        let mut out = [0f32; 3];
        matvec(ty, &w, rows, cols, &act, &mut out).unwrap();
        for r in 0..rows {
            let row = &w[r * 2 * q4_k::BLOCK_BYTES..(r + 1) * 2 * q4_k::BLOCK_BYTES];
            assert_eq!(out[r].to_bits(), q4_k::vec_dot(cols, row, &act).to_bits());
        }
        assert!(matches!(
            matvec(ty, &w, rows, cols, &act[1..], &mut out),
            Err(QuantError::BadLength { .. })
        ));
        assert!(matches!(
            matvec(ty, &w[1..], rows, cols, &act, &mut out),
            Err(QuantError::BadLength { .. })
        ));
        assert!(matches!(
            matvec(ty, &w, rows, 100, &act, &mut out),
            Err(QuantError::NotWholeBlocks { .. })
        ));
        assert!(matches!(
            matvec(ty, &w, rows, cols, &act, &mut out[..2]),
            Err(QuantError::BadLength { .. })
        ));
    }
}

/// Where a block format keeps its f16 scales (byte offsets inside one block), or `None` for a
/// type whose scales this does not know (the float types have none; the IQ types other than
/// IQ4_NL, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S and IQ1_S are not run).
fn scale_offsets(ty: GgmlType) -> Option<&'static [usize]> {
    use GgmlType as T;
    Some(match ty {
        T::Q4_0 => &[q4_0::OFF_D],
        T::Q5_0 => &[q5_0::OFF_D],
        T::Q8_0 => &[q8_0::OFF_D],
        T::Q1_0 => &[q1_0::OFF_D],
        T::Q2_0 => &[q2_0::OFF_D],
        T::Q4_1 => &[q4_1::OFF_D, q4_1::OFF_M],
        T::Q5_1 => &[q5_1::OFF_D, q5_1::OFF_M],
        T::Q2_K => &[q2_k::OFF_D, q2_k::OFF_DMIN],
        T::Q3_K => &[q3_k::OFF_D],
        T::Q4_K => &[q4_k::OFF_D, q4_k::OFF_DMIN],
        T::Q5_K => &[q5_k::OFF_D, q5_k::OFF_DMIN],
        T::Q6_K => &[q6_k::OFF_D],
        T::TQ1_0 => &[tq1_0::OFF_D],
        T::TQ2_0 => &[tq2_0::OFF_D],
        T::IQ4_NL => &[iq4_nl::OFF_D],
        T::IQ4_XS => &[iq4_xs::OFF_D],
        T::IQ2_XXS => &[iq2_xxs::OFF_D],
        T::IQ3_XXS => &[iq3_xxs::OFF_D],
        T::IQ2_XS => &[iq2_xs::OFF_D],
        T::IQ2_S => &[iq2_s::OFF_D],
        T::IQ3_S => &[iq3_s::OFF_D],
        T::IQ1_S => &[iq1_s::OFF_D],
        _ => return None,
    })
}

/// The first block of `bytes` (whole blocks of `ty`) whose f16 scale is NaN or infinite, with
/// that scale: such a block turns every dot product it enters into NaN, and with it the logits.
/// A damaged or hostile file is the only way to get one (no quantizer writes it). Types without
/// known scales give `None`.
pub fn first_nonfinite_scale(ty: GgmlType, bytes: &[u8]) -> Option<(usize, f32)> {
    if ty == GgmlType::IQ1_M {
        // its d is spread over the top nibbles of the scale words
        for (i, block) in bytes.chunks_exact(ty.type_size()).enumerate() {
            let bits = iq1_m::d_bits(block);
            if bits & 0x7c00 == 0x7c00 {
                return Some((i, half::f16::from_bits(bits).to_f32()));
            }
        }
        return None;
    }
    let offsets = scale_offsets(ty)?;
    let size = ty.type_size();
    for (i, block) in bytes.chunks_exact(size).enumerate() {
        for &off in offsets {
            let bits = u16::from_le_bytes([block[off], block[off + 1]]);
            // f16 exponent all ones: infinity or NaN
            if bits & 0x7c00 == 0x7c00 {
                return Some((i, half::f16::from_bits(bits).to_f32()));
            }
        }
    }
    None
}

#[cfg(test)]
mod scale_check_tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn an_iq1_m_scale_spread_over_nibbles_is_checked() {
        // IQ1_M's d is the top nibbles of its 4 scale words (bytes 49, 51, 53, 55).
        let size = GgmlType::IQ1_M.type_size();
        let mut bytes = vec![0u8; 3 * size];
        assert_eq!(first_nonfinite_scale(GgmlType::IQ1_M, &bytes), None);
        // block 2: d = 0x7c00 (+inf): nibbles 0, 0, 0xc, 0x7
        bytes[2 * size + 53] = 0xc0;
        bytes[2 * size + 55] = 0x70;
        assert_eq!(
            first_nonfinite_scale(GgmlType::IQ1_M, &bytes),
            Some((2, f32::INFINITY))
        );
    }

    #[test]
    fn a_nan_or_infinite_scale_is_found_in_its_block() {
        for ty in [
            GgmlType::Q1_0,
            GgmlType::Q2_0,
            GgmlType::TQ1_0,
            GgmlType::TQ2_0,
            GgmlType::Q2_K,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::Q8_0,
            GgmlType::IQ4_NL,
            GgmlType::IQ4_XS,
            GgmlType::IQ2_XXS,
            GgmlType::IQ3_XXS,
            GgmlType::IQ2_XS,
            GgmlType::IQ2_S,
            GgmlType::IQ3_S,
            GgmlType::IQ1_S,
        ] {
            let offsets = scale_offsets(ty).unwrap();
            let size = ty.type_size();
            let mut bytes = vec![0u8; 4 * size];
            // finite scales everywhere: the largest f16 and a subnormal
            for b in bytes.chunks_exact_mut(size) {
                b[offsets[0]..offsets[0] + 2].copy_from_slice(&0x7bffu16.to_le_bytes());
            }
            assert_eq!(first_nonfinite_scale(ty, &bytes), None, "{ty:?}");
            let last = *offsets.last().unwrap();
            bytes[2 * size + last..2 * size + last + 2].copy_from_slice(&0x7c00u16.to_le_bytes());
            assert_eq!(
                first_nonfinite_scale(ty, &bytes),
                Some((2, f32::INFINITY)),
                "{ty:?}"
            );
            bytes[size + offsets[0]..size + offsets[0] + 2]
                .copy_from_slice(&0xfe00u16.to_le_bytes());
            let (block, v) = first_nonfinite_scale(ty, &bytes).unwrap();
            assert!(block == 1 && v.is_nan(), "{ty:?}");
        }
        assert_eq!(first_nonfinite_scale(GgmlType::F32, &[0xff; 8]), None);
    }
}
