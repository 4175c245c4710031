//! LFM2 (`lfm2`, Liquid's hybrid): short-convolution layers (short_conv.rs: in_proj to b, c
//! and x, y = c * conv(b * x) over the last `shortconv.l_cache` inputs, out_proj) between
//! attention layers with per-head QK-norm and NeoX's RoPE. Which layers attend is the
//! per-layer array `attention.head_count_kv`: 0 marks a conv layer. Every layer's FFN is a
//! dense SwiGLU after `ffn_norm`; the final norm is named `token_embd_norm` (llama.cpp's
//! LLM_TENSOR_OUTPUT_NORM_LFM2); the head may be tied to the embedding. A sliding window in
//! the header applies to every attention layer. llama.cpp: src/models/lfm2.cpp.

use super::{Family, Layout, Switches};
use crate::model::attention::AttentionShape;
use crate::model::hparams::{HParams, Keys};
use crate::model::layer::{FfnShape, LayerShape, MixerShape};
use crate::model::short_conv::ShortConvShape;
use crate::model::ModelError;
use alloc::format;

pub static FAMILY: Family = Family {
    switches: Switches {
        qk_norm: true,
        ..Switches::PLAIN
    },
    layout,
    ffn_norm: "ffn_norm.weight",
    output_norm: "token_embd_norm.weight",
    swa_period: 0,
    mtp_layer: None,
};

/// The most taps a short convolution may have (the real models: 3).
const MAX_L_CACHE: u64 = 64;

fn layout(k: &Keys, hp: &HParams) -> Result<Layout, ModelError> {
    let n_ff = k.feed_forward_length(None)?;
    let dense = FfnShape::Dense {
        n_ff,
        fused_gate_up: false,
    };
    conv_attention_layout(k, hp, n_ff, |_| dense)
}

/// LFM2's layers (shared with lfm2moe, whose FFNs after the leading dense ones are experts):
/// a short convolution of `shortconv.l_cache` taps where `attention.head_count_kv` is 0,
/// attention with that many KV heads elsewhere; layer `l`'s FFN is `ffn(l)`.
pub(super) fn conv_attention_layout(
    k: &Keys,
    hp: &HParams,
    n_ff: usize,
    ffn: impl Fn(usize) -> FfnShape,
) -> Result<Layout, ModelError> {
    let l_cache = k.count("shortconv.l_cache", 2, MAX_L_CACHE)?;
    let n_head_kv = k.head_count_kv_layers(hp.n_head, hp.n_layer)?;
    if hp.head_dim_v != hp.head_dim {
        return Err(ModelError::BadHParam {
            key: k.key("attention.value_length"),
            expected: format!(
                "attention.key_length ({}), as {} needs",
                hp.head_dim, hp.arch
            ),
            found: format!("{}", hp.head_dim_v),
        });
    }
    let conv = ShortConvShape {
        channels: hp.n_embd,
        l_cache,
    };
    Ok(Layout::by_layer(hp, n_ff, |l| LayerShape {
        mixer: match n_head_kv[l] {
            0 => MixerShape::ShortConv(conv),
            n => MixerShape::Attention(AttentionShape {
                n_head_kv: n,
                ..hp.attention_shape(l)
            }),
        },
        ffn: ffn(l),
    }))
}
