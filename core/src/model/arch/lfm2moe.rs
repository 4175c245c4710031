//! LFM2-MoE (`lfm2moe`, LFM2-8B-A1B): LFM2's layers (lfm2.rs: short convolutions where
//! `attention.head_count_kv` is 0, attention with per-head QK-norm elsewhere; the final norm
//! `token_embd_norm`), the first `leading_dense_block_count` FFNs dense SwiGLU, every later
//! one a mixture of experts: a router (`expert_gating_func`, sigmoid in the real models) picks
//! `expert_used_count` of `expert_count` experts by probability plus a selection bias
//! (`exp_probs_b`, required), and weights them by their probabilities normalised over the
//! chosen; no `expert_weights_scale` (llama.cpp's lfm2moe reads none), no shared expert, and
//! no sliding window (a file's `attention.sliding_window` is ignored, as llama.cpp does).
//! llama.cpp: src/models/lfm2moe.cpp (hyperparameters, tensors), whose graph is lfm2.cpp's.

use super::lfm2::conv_attention_layout;
use super::{expert_counts, expert_gating, Family, Layout, Switches};
use crate::model::hparams::{HParams, Keys, MAX_FEED_FORWARD};
use crate::model::layer::{FfnShape, MixerShape};
use crate::model::moe_ffn::{Routing, SelectionBias};
use crate::model::ModelError;

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

fn layout(k: &Keys, hp: &HParams) -> Result<Layout, ModelError> {
    let (n_expert, n_expert_used) = expert_counts(k)?;
    let n_ff_expert = k.count("expert_feed_forward_length", 1, MAX_FEED_FORWARD)?;
    let n_dense_lead = k.count_or("leading_dense_block_count", 0, 0, hp.n_layer as u64)?;
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
            selection_bias: SelectionBias::Required,
            shared_gate: false,
            early_router: false,
        },
        n_ff_shared: 0,
    };
    // Without a dense layer the file may leave the dense width out.
    let n_ff = k.feed_forward_length((n_dense_lead == 0).then_some(n_ff_expert))?;
    let dense = FfnShape::Dense {
        n_ff,
        fused_gate_up: false,
    };
    let mut layout = conv_attention_layout(k, hp, n_ff, |l| match l < n_dense_lead {
        true => dense,
        false => experts,
    })?;
    // llama.cpp's lfm2moe reads no sliding window (lfm2 does): a file's is ignored.
    for layer in &mut layout.layers {
        if let MixerShape::Attention(a) = &mut layer.mixer {
            a.window = None;
        }
    }
    Ok(layout)
}
