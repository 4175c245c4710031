//! Phi-3 and Phi-4-mini (`phi3`): the pre-norm transformer with Q, K and V from one fused
//! matrix (`attn_qkv`, or three separate ones if the file has those), NeoX's RoPE order, Q scaled
//! by 1/sqrt(head_dim) after RoPE (before the scores, as llama.cpp orders it), and a SwiGLU FFN
//! whose gate and up projections are one matrix (`ffn_up`, 2 x `feed_forward_length` rows: the
//! gate's first). The file's sliding window is ignored, as llama.cpp b11434 does (its Phi SWA is
//! disabled). The 128k models' LongRoPE frequency factors (`rope_factors_long`/`_short`) are
//! refused, not run. llama.cpp: src/models/phi3.cpp.

use super::{Family, Layout, Switches};
use crate::model::attention::AttentionShape;
use crate::model::hparams::{HParams, Keys};
use crate::model::layer::{FfnShape, LayerShape, MixerShape};
use crate::model::ModelError;
use alloc::format;

pub static FAMILY: Family = Family {
    switches: Switches {
        scale_q_before_attention: true,
        ..Switches::PLAIN
    },
    layout,
    ffn_norm: "ffn_norm.weight",
    output_norm: "output_norm.weight",
    swa_period: 0,
    mtp_layer: None,
};

fn layout(k: &Keys, hp: &HParams) -> Result<Layout, ModelError> {
    for name in ["rope_factors_long.weight", "rope_factors_short.weight"] {
        if k.has_tensor(name) {
            return Err(ModelError::UnsupportedTensor {
                name: name.into(),
                reason: "LongRoPE frequency factors (Phi-3 128k, Phi-3.5, Phi-4-mini) are not \
                         run yet; use a 4k-context Phi-3 file"
                    .into(),
            });
        }
    }
    let n_ff = k.feed_forward_length(None)?;
    Ok(Layout::by_layer(hp, n_ff, |l| LayerShape {
        mixer: MixerShape::Attention(AttentionShape {
            fused_qkv: k.has_tensor(&format!("blk.{l}.attn_qkv.weight")),
            window: None,
            ..hp.attention_shape(l)
        }),
        ffn: FfnShape::Dense {
            n_ff,
            fused_gate_up: true,
        },
    }))
}
