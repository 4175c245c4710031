//! Qwen3.5-MoE (`qwen35moe`, Qwen3.5/3.6-35B-A3B and larger): Qwen3.5's layers (qwen35.rs:
//! recurrent Gated DeltaNet layers, every `full_attention_interval`-th one gated full attention
//! with QK-norm and IMRoPE) with a mixture of experts in place of every dense FFN: a softmax
//! router picks `expert_used_count` of `expert_count` experts, weighted by their probabilities
//! normalised over the chosen (no `expert_weights_scale`: llama.cpp's qwen35moe reads none),
//! plus, when the file has one, a shared expert scaled by a sigmoid gate of its own
//! (`ffn_gate_inp_shexp`, as qwen2moe's). llama.cpp: src/models/qwen35moe.cpp.
//!
//! Its MTP block is a MoE block too; smolrun does not draft with it yet (`mtp_layer: None`:
//! the nextn layers are left unread).

use super::qwen35::hybrid_layout;
use super::{expert_counts, Family, Layout, Switches};
use crate::model::hparams::{in_range, HParams, Keys, MAX_FEED_FORWARD};
use crate::model::layer::FfnShape;
use crate::model::moe_ffn::{Gating, Routing, SelectionBias};
use crate::model::ModelError;

pub static FAMILY: Family = Family {
    switches: Switches {
        qk_norm: true,
        ..Switches::PLAIN
    },
    layout,
    ffn_norm: "post_attention_norm.weight",
    output_norm: "output_norm.weight",
    swa_period: 0,
    mtp_layer: None,
};

fn layout(k: &Keys, hp: &HParams) -> Result<Layout, ModelError> {
    let (n_expert, n_expert_used) = expert_counts(k)?;
    let n_ff_expert = k.count("expert_feed_forward_length", 1, MAX_FEED_FORWARD)?;
    // The shared expert: its width from its own key; none when the file gives no width.
    let n_ff_shared = match k.opt_u64("expert_shared_feed_forward_length")? {
        Some(v) => in_range(
            &k.key("expert_shared_feed_forward_length"),
            v,
            1,
            MAX_FEED_FORWARD,
        )?,
        None => 0,
    };
    let experts = FfnShape::Moe {
        n_ff: n_ff_expert,
        n_expert,
        n_expert_used,
        routing: Routing {
            gating: Gating::Softmax,
            norm_weights: true,
            weights_scale: 1.0,
            n_group: 0,
            n_group_used: 0,
            selection_bias: SelectionBias::None,
            shared_gate: n_ff_shared > 0,
            early_router: false,
        },
        n_ff_shared,
    };
    // No dense layer: the file may leave the dense width out.
    let n_ff = k.feed_forward_length(Some(n_ff_expert))?;
    hybrid_layout(k, hp, n_ff, experts)
}
