//! OLMoE (`olmoe`): attention with QK-norm over the whole Q and K projections (one RMS norm of
//! all heads together, weights of `n_embd` values, not per head), NeoX's RoPE order, and in every
//! layer a mixture of experts: a softmax router picks `expert_used_count` of `expert_count`
//! experts, weighted by their probabilities as they are (not renormalised over the chosen, not
//! scaled: llama.cpp's olmoe reads no `expert_weights_scale`); no shared expert. llama.cpp:
//! src/models/olmoe.cpp.

use super::{expert_counts, Family, Layout, Switches};
use crate::model::hparams::{HParams, Keys, MAX_FEED_FORWARD};
use crate::model::layer::{FfnShape, LayerShape, MixerShape};
use crate::model::moe_ffn::{Gating, Routing, SelectionBias};
use crate::model::ModelError;
use alloc::format;

pub static FAMILY: Family = Family {
    switches: Switches {
        qk_norm: true,
        qk_norm_whole: true,
        ..Switches::PLAIN
    },
    layout,
    ffn_norm: "ffn_norm.weight",
    output_norm: "output_norm.weight",
    swa_period: 0,
    mtp_layer: None,
};

/// Softmax, the chosen probabilities used as they are.
const ROUTING: Routing = Routing {
    gating: Gating::Softmax,
    norm_weights: false,
    weights_scale: 1.0,
    n_group: 0,
    n_group_used: 0,
    selection_bias: SelectionBias::None,
    shared_gate: false,
    early_router: false,
};

fn layout(k: &Keys, hp: &HParams) -> Result<Layout, ModelError> {
    let (n_expert, n_expert_used) = expert_counts(k)?;
    // Each expert is `feed_forward_length` wide, as llama.cpp's olmoe reads it (there is no
    // dense FFN, and `expert_feed_forward_length` is not read).
    let n_ff_expert = k.count("feed_forward_length", 1, MAX_FEED_FORWARD)?;
    // Q is n_embd wide, as its whole-projection norm (`attn_q_norm`, n_embd values) is.
    let q_dim = hp.n_head * hp.head_dim;
    if q_dim != hp.n_embd || hp.head_dim != hp.head_dim_v {
        return Err(ModelError::BadHParam {
            key: k.key("attention.head_count"),
            expected: format!(
                "head_count x key_length = embedding_length ({}) and key_length = value_length",
                hp.n_embd
            ),
            found: format!(
                "{} x {} = {q_dim} (value_length {})",
                hp.n_head, hp.head_dim, hp.head_dim_v
            ),
        });
    }
    let experts = FfnShape::Moe {
        n_ff: n_ff_expert,
        n_expert,
        n_expert_used,
        routing: ROUTING,
        n_ff_shared: 0,
    };
    Ok(Layout::by_layer(hp, n_ff_expert, |l| LayerShape {
        mixer: MixerShape::Attention(hp.attention_shape(l)),
        ffn: experts,
    }))
}
