use super::store::StoreError;
use crate::arena::ArenaError;
use crate::gguf::GgufError;
use crate::quant::{GgmlType, QuantError};
use alloc::string::String;
use core::fmt;

/// Why a model could not be loaded or run. Every variant names the key or tensor involved and
/// the expected versus found value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelError {
    Gguf(GgufError),
    UnsupportedArch {
        arch: String,
    },
    /// A hyperparameter outside what any real model uses, or inconsistent with another.
    BadHParam {
        key: String,
        expected: String,
        found: String,
    },
    MissingTensor {
        name: String,
    },
    BadTensorShape {
        name: String,
        expected: [u64; 4],
        found: [u64; 4],
    },
    /// A tensor the file has that smolrun does not run yet, said with what to do instead.
    UnsupportedTensor {
        name: String,
        reason: String,
    },
    BadTensorType {
        name: String,
        expected: &'static str,
        found: GgmlType,
    },
    Quant {
        tensor: String,
        err: QuantError,
    },
    /// The weights of a tensor do not fit what the model or its kernel expects.
    Store {
        tensor: String,
        reason: String,
    },
    /// The weight store could not hand over a weight: the tensor, the offset, the OS error.
    WeightRead(StoreError),
    TokenOutOfRange {
        token: u32,
        n_vocab: usize,
    },
    /// A position at or beyond the context the state was sized for.
    ContextFull {
        pos: usize,
        n_ctx: usize,
    },
    BadContext {
        requested: usize,
        max: usize,
    },
    /// A run option the model cannot honour (`--experts` beyond what its routing chooses).
    BadOption {
        option: &'static str,
        reason: String,
    },
    /// A pass that starts at `pos` on a recurrent model whose state has reached `at`: a
    /// recurrent state cannot go back to an earlier position (only to 0, a new sequence).
    RecurrentRewind {
        pos: usize,
        at: usize,
    },
    /// A context shift this state cannot make: its layers keep no positions to drop, or the
    /// positions asked for are not all cached.
    ContextShift {
        keep: usize,
        discard: usize,
        n_cached: usize,
    },
    /// A verify pass of more tokens than the state has logit rows for (or of none).
    BadVerifyBatch {
        tokens: usize,
        n_logits: usize,
    },
    /// The run's state could not be carved from the region it was given (too small,
    /// misaligned, more than the device can address).
    Arena(ArenaError),
}

impl From<StoreError> for ModelError {
    fn from(e: StoreError) -> Self {
        ModelError::WeightRead(e)
    }
}

impl From<GgufError> for ModelError {
    fn from(e: GgufError) -> Self {
        ModelError::Gguf(e)
    }
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ModelError::*;
        match self {
            Gguf(e) => e.fmt(f),
            UnsupportedArch { arch } => write!(
                f,
                "model architecture '{arch}' is not supported: expected {}",
                super::arch::ArchitectureNames
            ),
            BadOption { option, reason } => write!(f, "{option}: {reason}"),
            BadHParam { key, expected, found } => write!(
                f,
                "metadata key '{key}': expected {expected}, found {found}; the model file is corrupt or not a model smolrun can run"
            ),
            MissingTensor { name } => write!(
                f,
                "tensor '{name}' is missing; the model file is incomplete or of a different architecture"
            ),
            BadTensorShape { name, expected, found } => write!(
                f,
                "tensor '{name}': expected shape {expected:?}, found {found:?}; the file does not match its own metadata"
            ),
            BadTensorType { name, expected, found } => write!(
                f,
                "tensor '{name}': expected type {expected}, found {found}"
            ),
            UnsupportedTensor { name, reason } => {
                write!(f, "tensor '{name}' is not supported: {reason}")
            }
            Quant { tensor, err } => write!(f, "tensor '{tensor}': {err}"),
            Store { tensor, reason } => write!(f, "could not use weights of '{tensor}': {reason}"),
            WeightRead(e) => write!(f, "could not read {e}"),
            TokenOutOfRange { token, n_vocab } => write!(
                f,
                "token id {token} is out of range: the vocabulary has {n_vocab} tokens"
            ),
            ContextFull { pos, n_ctx } => write!(
                f,
                "position {pos} is beyond the context of {n_ctx} tokens; start a new session or raise -c"
            ),
            BadContext { requested, max } => write!(
                f,
                "context length {requested} is not possible: expected 1..={max} (the model's trained context)"
            ),
            RecurrentRewind { pos, at } => write!(
                f,
                "cannot run from position {pos}: this model's recurrent layers have read {at} \
                 tokens and keep no earlier state; start the sequence again from position 0"
            ),
            ContextShift {
                keep,
                discard,
                n_cached,
            } => write!(
                f,
                "cannot drop cached positions {keep}..{}: {n_cached} are cached, and only a model \
                 whose every layer is attention (no recurrent or convolution state, no MTP \
                 drafting) can shift its context; start the sequence again instead",
                keep + discard
            ),
            BadVerifyBatch { tokens, n_logits } => write!(
                f,
                "a verify pass of {tokens} tokens: expected 1..={n_logits} (the state's rows of \
                 logits; size it with State::with_logit_rows)"
            ),
            Arena(e) => e.fmt(f),
        }
    }
}
