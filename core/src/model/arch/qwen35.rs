//! Qwen3.5 (`qwen35`): a hybrid of recurrent Gated DeltaNet layers (delta_net.rs: a fixed
//! state instead of a KV cache) and, every `full_attention_interval`-th layer (or as
//! `attention.recurrent_layers` lists), full attention with QK-norm, IMRoPE and an output gate
//! (Wq's rows hold each head's query and then its gate). Every layer's FFN is dense, its input
//! norm named `post_attention_norm`. One trailing MTP (nextn) block drafts tokens
//! (mtp.rs; gated attention and a dense FFN, as the trunk's attention layers).
//! llama.cpp: src/models/qwen35.cpp (its graph_mtp for the MTP block).

use super::{Family, Layout, Switches};
use crate::gguf::{GgufError, Value};
use crate::model::attention::AttentionShape;
use crate::model::delta_net::DeltaNetShape;
use crate::model::hparams::{HParams, Keys};
use crate::model::hparams::{MAX_EMBEDDING, MAX_HEADS, MAX_HEAD_DIM, MAX_LAYERS};
use crate::model::layer::{FfnShape, LayerShape, MixerShape};
use crate::model::ModelError;
use alloc::format;
use alloc::vec::Vec;

pub static FAMILY: Family = Family {
    // IMRoPE is NeoX's rotation where, as for text, every section has the same position
    // (`check_rope_sections` makes sure the sections cover the rotated pairs).
    switches: Switches {
        qk_norm: true,
        ..Switches::PLAIN
    },
    layout,
    ffn_norm: "post_attention_norm.weight",
    output_norm: "output_norm.weight",
    swa_period: 0,
    mtp_layer: Some(mtp_layer),
};

fn layout(k: &Keys, hp: &HParams) -> Result<Layout, ModelError> {
    let n_ff = k.feed_forward_length(None)?;
    let ffn = FfnShape::Dense {
        n_ff,
        fused_gate_up: false,
    };
    hybrid_layout(k, hp, n_ff, ffn)
}

/// Qwen3.5's layers (shared with qwen35moe, whose FFNs are experts): recurrent Gated DeltaNet
/// layers and gated full attention where `recurrent_layers` says, each with `ffn`.
pub(super) fn hybrid_layout(
    k: &Keys,
    hp: &HParams,
    n_ff: usize,
    ffn: FfnShape,
) -> Result<Layout, ModelError> {
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
    check_rope_sections(k, hp.n_rot)?;
    let recurrent = recurrent_layers(k, hp.n_layer + hp.n_nextn, hp.n_layer)?;
    let delta_net = delta_net(k)?;
    Ok(Layout::by_layer(hp, n_ff, |l| LayerShape {
        mixer: match recurrent[l] {
            true => MixerShape::DeltaNet(delta_net),
            false => MixerShape::Attention(AttentionShape {
                output_gate: true,
                ..hp.attention_shape(l)
            }),
        },
        ffn,
    }))
}

/// The MTP block (`blk.{n_layer}`): gated full attention and a dense FFN, as llama.cpp's
/// qwen35 graph_mtp runs it.
fn mtp_layer(hp: &HParams) -> LayerShape {
    LayerShape {
        mixer: MixerShape::Attention(AttentionShape {
            n_head: hp.n_head,
            n_head_kv: hp.n_head_kv,
            head_dim: hp.head_dim,
            head_dim_v: hp.head_dim_v,
            window: None,
            fused_qkv: false,
            output_gate: true,
            rope: true,
        }),
        ffn: FfnShape::Dense {
            n_ff: hp.n_ff,
            fused_gate_up: false,
        },
    }
}

/// Which of the `n_layer` layers are recurrent, as llama.cpp decides: the bool array
/// `attention.recurrent_layers` (one per block, MTP blocks included), else every layer but
/// each `full_attention_interval`-th (default 4).
pub(super) fn recurrent_layers(
    k: &Keys,
    n_block: usize,
    n_layer: usize,
) -> Result<Vec<bool>, ModelError> {
    let key = k.key("attention.recurrent_layers");
    let flag = |v: &Value| v.as_bool().or(v.as_u64().map(|n| n != 0));
    if let Some(v) = k.get("attention.recurrent_layers") {
        let flags: Vec<bool> = match v {
            Value::Array(a) => {
                let flags: Vec<bool> = a.iter().filter_map(|v| flag(&v)).collect();
                if a.len() != n_block || flags.len() != n_block {
                    return Err(ModelError::BadHParam {
                        key,
                        expected: format!("{n_block} booleans (one per block: block_count)"),
                        found: format!("an array of {} ({} booleans)", a.len(), flags.len()),
                    });
                }
                flags
            }
            v => match flag(&v) {
                Some(b) => alloc::vec![b; n_block],
                None => {
                    return Err(ModelError::BadHParam {
                        key,
                        expected: "a bool array (one per block)".into(),
                        found: v.type_name().into(),
                    })
                }
            },
        };
        return Ok(flags[..n_layer].to_vec());
    }
    let interval = k.count_or("full_attention_interval", 4, 1, MAX_LAYERS)?;
    Ok((0..n_layer).map(|l| (l + 1) % interval != 0).collect())
}

/// A Gated DeltaNet layer's shape from the `ssm.*` keys, checked as llama.cpp's qwen35 needs
/// it: dk = dv (`ssm.inner_size` = `ssm.state_size` x `ssm.time_step_rank`), value heads a
/// multiple of the key heads.
fn delta_net(k: &Keys) -> Result<DeltaNetShape, ModelError> {
    let conv_kernel = k.count("ssm.conv_kernel", 1, 64)?;
    let head_dim = k.count("ssm.state_size", 1, MAX_HEAD_DIM)?;
    let n_k_heads = k.count("ssm.group_count", 1, MAX_HEADS)?;
    let n_v_heads = k.count("ssm.time_step_rank", 1, MAX_HEADS)?;
    if n_v_heads % n_k_heads != 0 {
        return Err(ModelError::BadHParam {
            key: k.key("ssm.time_step_rank"),
            expected: format!(
                "a multiple of ssm.group_count ({n_k_heads}): value heads share key heads"
            ),
            found: format!("{n_v_heads}"),
        });
    }
    let inner = k.count("ssm.inner_size", 1, MAX_EMBEDDING)?;
    if inner != head_dim * n_v_heads {
        return Err(ModelError::BadHParam {
            key: k.key("ssm.inner_size"),
            expected: format!(
                "ssm.state_size x ssm.time_step_rank = {head_dim} x {n_v_heads} = {}: \
                 {} needs value heads as wide as key heads (dv = dk)",
                head_dim * n_v_heads,
                k.arch(),
            ),
            found: format!("{inner} (dv = {})", inner as f64 / n_v_heads as f64),
        });
    }
    Ok(DeltaNetShape {
        n_k_heads,
        n_v_heads,
        head_dim,
        conv_kernel,
        state_f16: false,
    })
}

/// The IMRoPE sections (`rope.dimension_sections`, 4 integers): with the text positions
/// llama.cpp gives ([p, p, p, 0]) a pair rotates by the position when its section is one of
/// the first three, which is NeoX's rotation; a pair left to the fourth section would not
/// rotate at all. Refused unless every rotated pair is in the first three.
fn check_rope_sections(k: &Keys, n_rot: usize) -> Result<(), ModelError> {
    let key = k.key("rope.dimension_sections");
    let bad = |found: alloc::string::String| ModelError::BadHParam {
        key: key.clone(),
        expected: format!(
            "4 section sizes whose first three interleave over all {} rotated pairs",
            n_rot / 2
        ),
        found,
    };
    let s: Vec<u64> = match k.get("rope.dimension_sections") {
        Some(Value::Array(a)) => a.iter().filter_map(|v| v.as_u64()).collect(),
        Some(v) => return Err(bad(v.type_name().into())),
        None => return Err(ModelError::Gguf(GgufError::MissingKey { key: key.clone() })),
    };
    if s.len() != 4 || s.iter().any(|&v| v > MAX_HEAD_DIM) {
        return Err(bad(format!("{s:?}")));
    }
    let total = s.iter().sum::<u64>() as usize;
    let rotated = |i: usize| {
        let sector = (i % total.max(1)) as u64;
        (0..3).any(|c| sector % 3 == c && sector < 3 * s[c as usize])
    };
    if total == 0 || !(0..n_rot / 2).all(rotated) {
        return Err(bad(format!("{s:?}")));
    }
    Ok(())
}
