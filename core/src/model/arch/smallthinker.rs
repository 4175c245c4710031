//! SmallThinker (`smallthinker`, SmallThinker-4B-A0.6B and 21B-A3B: mixtures of experts built
//! for devices that page experts from flash): attention, then in every layer a mixture of
//! experts whose router reads the layer's input x itself, unnormalised, before attention (so
//! the experts are known, and read, while attention runs: `Routing::early_router`). The
//! router's gating is the file's `expert_gating_func`; the chosen weights are normalised over
//! the chosen, not scaled (llama.cpp reads no `expert_weights_scale`); the experts are ReGLU
//! (relu(gate) * up), no shared expert, no bias.
//!
//! With a sliding window in the header, llama.cpp b11434 windows the layers of
//! `attention.sliding_window_pattern` (an array, or a period, 4 when absent, whose first layer
//! of each period is global: l % 4 != 0 is windowed) with a window of 4096 whatever the file
//! says, their RoPE base `rope.freq_base_swa` or else `rope.freq_base`, and runs every fourth
//! layer (l % 4 == 0) without RoPE. Without a window: every layer global, with RoPE.
//! llama.cpp: src/models/smallthinker.cpp.

use super::{expert_counts, expert_gating, Activation, Family, Layout, Switches};
use crate::gguf::Value;
use crate::model::attention::AttentionShape;
use crate::model::hparams::{HParams, Keys, MAX_FEED_FORWARD, MAX_LAYERS};
use crate::model::layer::{FfnShape, LayerShape, MixerShape};
use crate::model::moe_ffn::{Routing, SelectionBias};
use crate::model::ModelError;
use alloc::format;

pub static FAMILY: Family = Family {
    switches: Switches {
        activation: Activation::Relu,
        swa_rope_base_global: true,
        ..Switches::PLAIN
    },
    layout,
    ffn_norm: "ffn_norm.weight",
    output_norm: "output_norm.weight",
    swa_period: 0,
    mtp_layer: None,
};

/// The window of every windowed layer, as llama.cpp b11434 sets it (the file's is not used).
const WINDOW: usize = 4096;
/// Layer l runs without RoPE when the model is windowed and l % NO_ROPE_LAYER_STEP == 0
/// (llama.cpp's `n_no_rope_layer_step`, which SmallThinker leaves at its default).
const NO_ROPE_LAYER_STEP: usize = 4;
/// The sliding-window period when the file gives none.
const SWA_PERIOD: u64 = 4;

fn layout(k: &Keys, hp: &HParams) -> Result<Layout, ModelError> {
    let (n_expert, n_expert_used) = expert_counts(k)?;
    let n_ff_expert = k.count("expert_feed_forward_length", 1, MAX_FEED_FORWARD)?;
    if hp.n_rot != hp.head_dim || hp.head_dim_v != hp.head_dim {
        return Err(ModelError::BadHParam {
            key: k.key("rope.dimension_count"),
            expected: format!(
                "attention.key_length and value_length ({}): RoPE over whole heads",
                hp.head_dim
            ),
            found: format!("{} (value_length {})", hp.n_rot, hp.head_dim_v),
        });
    }
    let experts = FfnShape::Moe {
        n_ff: n_ff_expert,
        n_expert,
        n_expert_used,
        routing: Routing {
            gating: expert_gating(k)?,
            norm_weights: true,
            weights_scale: 1.0,
            n_group: 0,
            n_group_used: 0,
            selection_bias: SelectionBias::None,
            shared_gate: false,
            early_router: true,
        },
        n_ff_shared: 0,
    };
    let windowed = hp.sliding_window.is_some();
    // Which layers are windowed: the file's array as it is (HParams::is_swa), or a period
    // whose first layer is global.
    let pattern = k.get("attention.sliding_window_pattern");
    let period = match pattern {
        Some(Value::Array(_)) => None,
        _ => Some(k.count_or(
            "attention.sliding_window_pattern",
            SWA_PERIOD,
            0,
            MAX_LAYERS,
        )?),
    };
    let is_swa = |l: usize| match period {
        None => hp.is_swa[l],
        Some(p) => p == 0 || !l.is_multiple_of(p),
    };
    // No dense layer: the file may leave the dense width out.
    let n_ff = k.feed_forward_length(Some(n_ff_expert))?;
    Ok(Layout::by_layer(hp, n_ff, |l| LayerShape {
        mixer: MixerShape::Attention(AttentionShape {
            window: (windowed && is_swa(l)).then_some(WINDOW),
            rope: !windowed || !l.is_multiple_of(NO_ROPE_LAYER_STEP),
            ..hp.attention_shape(l)
        }),
        ffn: experts,
    }))
}
