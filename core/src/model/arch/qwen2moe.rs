//! Qwen1.5-MoE (`qwen2moe`): Qwen2's attention (Q, K and V biases, no QK-norm) and, in every
//! layer, a mixture of experts whose softmax router's chosen probabilities weight the experts
//! as they are (neither normalised nor scaled), plus one shared expert that every token runs,
//! scaled by a sigmoid gate of its own (`ffn_gate_inp_shexp`). llama.cpp: src/models/qwen2moe.cpp.

use super::{expert_counts, Family, Layout, Switches};
use crate::model::hparams::{in_range, HParams, Keys, MAX_FEED_FORWARD};
use crate::model::layer::{FfnShape, LayerShape, MixerShape};
use crate::model::moe_ffn::{Gating, Routing, SelectionBias};
use crate::model::ModelError;

pub static FAMILY: Family = Family {
    switches: Switches {
        qkv_bias: true,
        ..Switches::PLAIN
    },
    layout,
    ffn_norm: "ffn_norm.weight",
    output_norm: "output_norm.weight",
    swa_period: 0,
    mtp_layer: None,
};

/// Softmax, the chosen probabilities used as they are, a gated shared expert.
const ROUTING: Routing = Routing {
    gating: Gating::Softmax,
    norm_weights: false,
    weights_scale: 1.0,
    n_group: 0,
    n_group_used: 0,
    selection_bias: SelectionBias::None,
    shared_gate: true,
    early_router: false,
};

fn layout(k: &Keys, hp: &HParams) -> Result<Layout, ModelError> {
    let (n_expert, n_expert_used) = expert_counts(k)?;
    // Both widths fall back on feed_forward_length as llama.cpp's qwen2moe does: an expert's
    // to its share of it, the shared expert's to all of it.
    let n_ff_expert = match k.opt_u64("expert_feed_forward_length")? {
        Some(v) => v,
        None => k.u64("feed_forward_length")? / n_expert_used as u64,
    };
    let n_ff_expert = in_range(
        &k.key("expert_feed_forward_length"),
        n_ff_expert,
        1,
        MAX_FEED_FORWARD,
    )?;
    let n_ff_shared = match k.opt_u64("expert_shared_feed_forward_length")? {
        Some(v) => v,
        None => k.u64("feed_forward_length")?,
    };
    let n_ff_shared = in_range(
        &k.key("expert_shared_feed_forward_length"),
        n_ff_shared,
        1,
        MAX_FEED_FORWARD,
    )?;
    let experts = FfnShape::Moe {
        n_ff: n_ff_expert,
        n_expert,
        n_expert_used,
        routing: ROUTING,
        n_ff_shared,
    };
    let n_ff = k.feed_forward_length(Some(n_ff_expert))?;
    Ok(Layout::by_layer(hp, n_ff, |l| LayerShape {
        mixer: MixerShape::Attention(hp.attention_shape(l)),
        ffn: experts,
    }))
}
