//! How a forward pass reads each tensor of a file: the one rule that the memory plan, the
//! streaming store's plan and the expert pager's sizes share, from the header alone.

use crate::gguf::{is_expert_tensor, TensorInfo};

/// How a pass reads one tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorUse {
    /// A matrix read whole by every pass (the tied embedding table is the LM head: whole).
    Whole,
    /// An untied embedding table: one row per token, the rest stays on flash.
    Rows,
    /// An expert tensor: each pass reads the experts its router chose, one slice each.
    Experts,
    /// A norm or bias vector: copied to RAM as f32 when the model is set up.
    Vector,
}

impl TensorUse {
    /// How a pass reads `t`; `head_is_embedding`: the file has no `output.weight`, so the
    /// embedding table is the LM head (see [`head_is_embedding`]).
    pub fn of(t: &TensorInfo, head_is_embedding: bool) -> TensorUse {
        if t.name == "token_embd.weight" {
            match head_is_embedding {
                true => TensorUse::Whole,
                false => TensorUse::Rows,
            }
        } else if t.dims[1..].iter().all(|&d| d == 1) {
            TensorUse::Vector
        } else if is_expert_tensor(t) {
            TensorUse::Experts
        } else {
            TensorUse::Whole
        }
    }
}

/// The file has no `output.weight`: its embedding table is the LM head (tied).
pub fn head_is_embedding(tensors: &[TensorInfo]) -> bool {
    !tensors.iter().any(|t| t.name == "output.weight")
}
