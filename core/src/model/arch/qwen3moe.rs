//! Qwen3-MoE (`qwen3moe`): Qwen3's attention (QK-norm, no biases) and, in every layer, a
//! mixture of experts: a softmax router picks `expert_used_count` of `expert_count` experts
//! of width `expert_feed_forward_length`, weighted by their probabilities normalised over the
//! chosen; no shared expert. llama.cpp: src/models/qwen3moe.cpp.

use super::{expert_counts, Family, Layout, Switches};
use crate::model::hparams::{HParams, Keys, MAX_FEED_FORWARD};
use crate::model::layer::{FfnShape, LayerShape, MixerShape};
use crate::model::moe_ffn::Routing;
use crate::model::ModelError;

pub static FAMILY: Family = Family {
    switches: Switches {
        qk_norm: true,
        ..Switches::PLAIN
    },
    layout,
    ffn_norm: "ffn_norm.weight",
    output_norm: "output_norm.weight",
    swa_period: 0,
    mtp_layer: None,
};

fn layout(k: &Keys, hp: &HParams) -> Result<Layout, ModelError> {
    let (n_expert, n_expert_used) = expert_counts(k)?;
    let n_ff_expert = k.count("expert_feed_forward_length", 1, MAX_FEED_FORWARD)?;
    let experts = FfnShape::Moe {
        n_ff: n_ff_expert,
        n_expert,
        n_expert_used,
        routing: Routing::SOFTMAX_NORMALISED,
        n_ff_shared: 0,
    };
    // No dense layer: the file may leave the dense width out.
    let n_ff = k.feed_forward_length(Some(n_ff_expert))?;
    Ok(Layout::by_layer(hp, n_ff, |l| LayerShape {
        mixer: MixerShape::Attention(hp.attention_shape(l)),
        ffn: experts,
    }))
}
