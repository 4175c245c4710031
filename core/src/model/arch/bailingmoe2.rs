//! Ling 2.0 (`bailingmoe2`): attention from one fused QKV matrix (`attn_qkv`), with QK-norm
//! and partial RoPE (`rope.dimension_count` < the head size); the first
//! `leading_dense_block_count` layers have a dense FFN, the rest a mixture of experts chosen
//! by a sigmoid (or softmax) router with a selection bias (`exp_probs_b`) and expert groups,
//! the chosen weights normalised and scaled as the file says, plus shared experts that every
//! token runs. Its trailing MTP (nextn) layers are left unread. llama.cpp:
//! src/models/bailingmoe2.cpp.

use super::{expert_counts, expert_gating, Family, Layout, Switches};
use crate::model::attention::AttentionShape;
use crate::model::hparams::{in_range, HParams, Keys, MAX_FEED_FORWARD, MAX_SHARED_EXPERTS};
use crate::model::layer::{FfnShape, LayerShape, MixerShape};
use crate::model::moe_ffn::{Routing, SelectionBias, MAX_EXPERT_GROUPS};
use crate::model::ModelError;
use alloc::format;

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
    let routing = routing(k, n_expert, n_expert_used)?;
    let n_shared = k.count("expert_shared_count", 1, MAX_SHARED_EXPERTS)?;
    let n_ff_one = k.count_or(
        "expert_shared_feed_forward_length",
        n_ff_expert as u64,
        1,
        MAX_FEED_FORWARD,
    )?;
    // The shared experts run as one of their widths together.
    let n_ff_shared = in_range(
        &k.key("expert_shared_feed_forward_length"),
        (n_ff_one * n_shared) as u64,
        1,
        MAX_FEED_FORWARD,
    )?;
    let n_dense_lead = k.count_or("leading_dense_block_count", 0, 0, hp.n_layer as u64)?;
    let experts = FfnShape::Moe {
        n_ff: n_ff_expert,
        n_expert,
        n_expert_used,
        routing,
        n_ff_shared,
    };
    // Without a dense layer the file may leave the dense width out.
    let n_ff = k.feed_forward_length((n_dense_lead == 0).then_some(n_ff_expert))?;
    Ok(Layout::by_layer(hp, n_ff, |l| LayerShape {
        mixer: MixerShape::Attention(AttentionShape {
            fused_qkv: true,
            ..hp.attention_shape(l)
        }),
        ffn: match l < n_dense_lead {
            true => FfnShape::Dense {
                n_ff,
                fused_gate_up: false,
            },
            false => experts,
        },
    }))
}

/// The router as the keys say: its gating (`expert_gating_func`), normalisation and scale of
/// the chosen weights, and expert groups (each scored by its two best experts; a token's
/// experts come from the `expert_group_used_count` best groups).
fn routing(k: &Keys, n_expert: usize, n_expert_used: usize) -> Result<Routing, ModelError> {
    let gating = expert_gating(k)?;
    let norm_weights = k.opt_bool("expert_weights_norm")?.unwrap_or(false);
    let scale = k.opt_f32("expert_weights_scale")?.unwrap_or(0.0);
    if !(scale.is_finite() && scale >= 0.0) {
        return Err(ModelError::BadHParam {
            key: k.key("expert_weights_scale"),
            expected: "a finite number >= 0 (0: unscaled)".into(),
            found: format!("{scale}"),
        });
    }
    let n_group = k.count_or("expert_group_count", 0, 0, MAX_EXPERT_GROUPS as u64)?;
    let mut n_group_used = 0;
    if n_group > 1 {
        // Each group is scored by its two best experts, so it needs at least two.
        if !n_expert.is_multiple_of(n_group) || n_expert / n_group < 2 {
            return Err(ModelError::BadHParam {
                key: k.key("expert_group_count"),
                expected: format!(
                    "a divisor of expert_count ({n_expert}) leaving at least 2 experts a group"
                ),
                found: format!("{n_group}"),
            });
        }
        n_group_used = k.count("expert_group_used_count", 1, n_group as u64 - 1)?;
        let reachable = n_group_used * (n_expert / n_group);
        if n_expert_used > reachable {
            return Err(ModelError::BadHParam {
                key: k.key("expert_used_count"),
                expected: format!(
                    "at most the {reachable} experts of the {n_group_used} groups used"
                ),
                found: format!("{n_expert_used}"),
            });
        }
    }
    Ok(Routing {
        gating,
        norm_weights,
        weights_scale: if scale == 0.0 { 1.0 } else { scale },
        n_group,
        n_group_used,
        selection_bias: SelectionBias::Optional,
        shared_gate: false,
        early_router: false,
    })
}
