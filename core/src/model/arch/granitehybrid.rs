//! IBM Granite 4.0 H (`granitehybrid`): Mamba-2 layers (mamba2.rs: ssm_in to z, xBC and dt, a
//! causal conv with its bias, the selective scan with per-head A, D and dt bias and groups of B
//! and C, a SiLU(z) gate, a grouped RMSNorm, ssm_out) between attention layers. Which layers
//! attend is the per-layer array `attention.head_count_kv`: 0 marks a Mamba-2 layer. RoPE in
//! pair order unless `rope.scaling.finetuned` is false (the 4.0 H models: no positions at
//! all). Every layer's FFN is a dense SwiGLU after `ffn_norm`. Granite's four multipliers
//! (`embedding_scale`, `residual_scale`, `attention.scale`, `logit_scale`) are read into
//! `HParams::scales`. Granite's mixture-of-experts variants (4.0 H Tiny and Small) are refused.
//! llama.cpp: src/models/granite-hybrid.cpp, mamba-base.cpp.

use super::{Family, Layout, Switches};
use crate::math::RopeStyle;
use crate::model::attention::AttentionShape;
use crate::model::hparams::{HParams, Keys, MAX_EMBEDDING, MAX_HEADS, MAX_HEAD_DIM};
use crate::model::layer::{FfnShape, LayerShape, MixerShape};
use crate::model::mamba2::Mamba2Shape;
use crate::model::ModelError;
use alloc::format;

pub static FAMILY: Family = Family {
    switches: Switches {
        rope_style: RopeStyle::Normal,
        granite_scales: true,
        ..Switches::PLAIN
    },
    layout,
    ffn_norm: "ffn_norm.weight",
    output_norm: "output_norm.weight",
    swa_period: 0,
    mtp_layer: None,
};

/// The most taps a Mamba-2 convolution may have (the real models: 4).
const MAX_CONV_KERNEL: u64 = 64;

fn layout(k: &Keys, hp: &HParams) -> Result<Layout, ModelError> {
    if let Some(n) = k.opt_u64("expert_count")?.filter(|&n| n > 0) {
        return Err(ModelError::BadHParam {
            key: k.key("expert_count"),
            expected: format!(
                "0: smolrun runs {}'s dense FFNs (Granite 4.0 H 350M and 1B), not its experts",
                k.arch()
            ),
            found: format!("{n}"),
        });
    }
    let n_ff = k.feed_forward_length(None)?;
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
    let mamba = mamba2_shape(k)?;
    // Granite takes rope.scaling.finetuned as its RoPE switch, on when the key is absent.
    let rope = k.opt_bool("rope.scaling.finetuned")?.unwrap_or(true);
    let ffn = FfnShape::Dense {
        n_ff,
        fused_gate_up: false,
    };
    Ok(Layout::by_layer(hp, n_ff, |l| LayerShape {
        mixer: match n_head_kv[l] {
            0 => MixerShape::Mamba2(mamba),
            n => MixerShape::Attention(AttentionShape {
                n_head_kv: n,
                rope,
                ..hp.attention_shape(l)
            }),
        },
        ffn,
    }))
}

/// A Mamba-2 layer's shape from the `ssm.*` keys: heads that divide the inner width, groups
/// that divide the heads.
fn mamba2_shape(k: &Keys) -> Result<Mamba2Shape, ModelError> {
    let conv_kernel = k.count("ssm.conv_kernel", 2, MAX_CONV_KERNEL)?;
    let d_inner = k.count("ssm.inner_size", 1, MAX_EMBEDDING)?;
    let d_state = k.count("ssm.state_size", 1, MAX_HEAD_DIM)?;
    let n_head = k.count("ssm.time_step_rank", 1, MAX_HEADS)?;
    let n_group = k.count("ssm.group_count", 1, MAX_HEADS)?;
    if !d_inner.is_multiple_of(n_head) {
        return Err(ModelError::BadHParam {
            key: k.key("ssm.time_step_rank"),
            expected: format!("a divisor of ssm.inner_size ({d_inner}): heads of equal width"),
            found: format!("{n_head}"),
        });
    }
    if !n_head.is_multiple_of(n_group) {
        return Err(ModelError::BadHParam {
            key: k.key("ssm.group_count"),
            expected: format!(
                "a divisor of ssm.time_step_rank ({n_head}): each group serves as many heads"
            ),
            found: format!("{n_group}"),
        });
    }
    Ok(Mamba2Shape {
        d_inner,
        d_state,
        n_head,
        n_group,
        conv_kernel,
    })
}
