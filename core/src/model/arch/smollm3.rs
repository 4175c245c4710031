//! SmolLM3 (`smollm3`): Llama's transformer (RMS norm, grouped-query attention, a SwiGLU FFN,
//! RoPE on adjacent pairs), except that every fourth layer (layers 3, 7, 11, ..) attends
//! without RoPE ("NoPE"). The period is llama.cpp's fixed `n_no_rope_layer_step = 4`: the file
//! has no key for it. The head may be tied to the embedding. llama.cpp: src/models/smollm3.cpp.

use super::{Family, Layout, Switches};
use crate::math::RopeStyle;
use crate::model::attention::AttentionShape;
use crate::model::hparams::{HParams, Keys};
use crate::model::layer::{FfnShape, LayerShape, MixerShape};
use crate::model::ModelError;

pub static FAMILY: Family = Family {
    switches: Switches {
        rope_style: RopeStyle::Normal,
        ..Switches::PLAIN
    },
    layout,
    ffn_norm: "ffn_norm.weight",
    output_norm: "output_norm.weight",
    swa_period: 0,
    mtp_layer: None,
};

/// Layer `l` has no RoPE when `(l + 1) % NO_ROPE_LAYER_STEP == 0`.
const NO_ROPE_LAYER_STEP: usize = 4;

fn layout(k: &Keys, hp: &HParams) -> Result<Layout, ModelError> {
    let n_ff = k.feed_forward_length(None)?;
    Ok(Layout::by_layer(hp, n_ff, |l| LayerShape {
        mixer: MixerShape::Attention(AttentionShape {
            rope: (l + 1) % NO_ROPE_LAYER_STEP != 0,
            ..hp.attention_shape(l)
        }),
        ffn: FfnShape::Dense {
            n_ff,
            fused_gate_up: false,
        },
    }))
}
