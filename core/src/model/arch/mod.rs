//! The model families, one file each, and the table that names them: the one place in `core`
//! where an architecture's name (`general.architecture`) appears.
//!
//! Every family runs the same forward pass (`Model`: embedding, then per layer a token mixer
//! and an FFN, then the head) over the same layer kinds (attention.rs, delta_net.rs,
//! dense_ffn.rs, moe_ffn.rs). A family file says which kinds its layers are and how they are
//! set, as a [`Family`] value:
//!
//! - its own hyperparameters, read from its keys, and its **layer layout**
//!   ([`Family::layout`]): which mixer and which FFN each layer has, and their shapes: every
//!   layer attention and a dense FFN (llama, qwen2, qwen3, gemma3), a mixture of experts with
//!   its routing, shared expert and leading dense layers (qwen2moe, qwen3moe, bailingmoe2),
//!   recurrent Gated DeltaNet layers between gated attention layers (qwen35), short
//!   convolutions between attention layers (lfm2, and with experts lfm2moe), Mamba-2 layers
//!   between attention layers (granitehybrid);
//! - its **switches** ([`Switches`]): what differs inside the shared kinds (Q/K/V biases,
//!   QK-norm, post-norms, the embedding scale, GELU or SiLU, the RoPE pair order);
//! - its **tensor-name quirks** ([`Family::ffn_norm`]) and its default sliding-window period;
//! - its **MTP block**, if smolrun drafts with it ([`Family::mtp_layer`]).
//!
//! | family file | mixers | FFN | what else |
//! |---|---|---|---|
//! | llama.rs | attention | dense | RoPE in pair order |
//! | qwen2.rs | attention | dense | Q/K/V biases |
//! | qwen3.rs | attention | dense | QK-norm |
//! | gemma3.rs | attention, 5 of 6 windowed | dense, GELU | QK-norm, post-norms, scaled embedding |
//! | qwen2moe.rs | attention | experts | softmax router used as is, gated shared expert |
//! | qwen3moe.rs | attention | experts | QK-norm, softmax router normalised over the chosen |
//! | bailingmoe2.rs | fused-QKV attention | dense, then experts | sigmoid router, bias, groups, shared expert |
//! | qwen35.rs | DeltaNet, every 4th gated attention | dense | IMRoPE sections, MTP block |
//! | qwen35moe.rs | as qwen35 | experts | softmax router normalised over the chosen, gated shared expert |
//! | smollm3.rs | attention, every 4th without RoPE | dense | RoPE in pair order |
//! | phi3.rs | attention, fused QKV | dense, gate and up fused | Q scaled before the scores |
//! | olmoe.rs | attention | experts | QK-norm over all heads at once, softmax router used as is |
//! | lfm2.rs | short convolutions, attention where `head_count_kv` is not 0 | dense | QK-norm, final norm `token_embd_norm` |
//! | lfm2moe.rs | as lfm2 | dense, then experts | sigmoid router with a required bias, normalised over the chosen |
//! | smallthinker.rs | attention, 3 of 4 windowed, the others without RoPE | ReGLU experts | router on the layer's input before attention (early prefetch) |
//! | granitehybrid.rs | Mamba-2, attention where `head_count_kv` is not 0 | dense | Granite's embedding, residual, attention and logit scales; RoPE switched by `rope.scaling.finetuned` |
//!
//! Adding a family is a file here and a row of [`ARCHITECTURES`]; a family that brings a new
//! layer kind adds the kind beside the others (layer.rs says how).

mod bailingmoe2;
mod gemma3;
mod granitehybrid;
mod lfm2;
mod lfm2moe;
mod llama;
mod olmoe;
mod phi3;
mod qwen2;
mod qwen2moe;
mod qwen3;
mod qwen35;
mod qwen35moe;
mod qwen3moe;
mod smallthinker;
mod smollm3;

use super::error::ModelError;
use super::hparams::{HParams, Keys, MAX_EXPERTS};
use super::layer::{FfnShape, LayerShape, MixerShape};
use super::moe_ffn::{Gating, MAX_EXPERTS_USED};
use crate::math::RopeStyle;
use alloc::format;
use alloc::vec::Vec;
use core::fmt;

/// One row of the architecture table: a GGUF architecture name and the family that runs it.
pub struct Architecture {
    /// `general.architecture`, and the prefix of the file's keys.
    pub name: &'static str,
    pub family: &'static Family,
}

/// Every architecture smolrun runs.
pub static ARCHITECTURES: [Architecture; 16] = [
    Architecture {
        name: "llama",
        family: &llama::FAMILY,
    },
    Architecture {
        name: "qwen2",
        family: &qwen2::FAMILY,
    },
    Architecture {
        name: "qwen2moe",
        family: &qwen2moe::FAMILY,
    },
    Architecture {
        name: "qwen3",
        family: &qwen3::FAMILY,
    },
    Architecture {
        name: "qwen3moe",
        family: &qwen3moe::FAMILY,
    },
    Architecture {
        name: "qwen35",
        family: &qwen35::FAMILY,
    },
    Architecture {
        name: "qwen35moe",
        family: &qwen35moe::FAMILY,
    },
    Architecture {
        name: "bailingmoe2",
        family: &bailingmoe2::FAMILY,
    },
    Architecture {
        name: "gemma3",
        family: &gemma3::FAMILY,
    },
    Architecture {
        name: "smollm3",
        family: &smollm3::FAMILY,
    },
    Architecture {
        name: "olmoe",
        family: &olmoe::FAMILY,
    },
    Architecture {
        name: "phi3",
        family: &phi3::FAMILY,
    },
    Architecture {
        name: "lfm2",
        family: &lfm2::FAMILY,
    },
    Architecture {
        name: "lfm2moe",
        family: &lfm2moe::FAMILY,
    },
    Architecture {
        name: "smallthinker",
        family: &smallthinker::FAMILY,
    },
    Architecture {
        name: "granitehybrid",
        family: &granitehybrid::FAMILY,
    },
];

/// What a model family is made of, beyond the layer kinds every family shares.
#[derive(Debug)]
pub struct Family {
    /// What the family switches on inside the shared layer kinds.
    pub switches: Switches,
    /// Reads the family's own keys and says what each of the `hp.n_layer` layers is made of.
    /// `hp` holds the hyperparameters every family shares; its `n_ff` and `layers` are what
    /// this returns (0 and empty until then).
    pub layout: fn(&Keys, &HParams) -> Result<Layout, ModelError>,
    /// The FFN's input norm, `blk.N.<ffn_norm>` (most families: `ffn_norm.weight`).
    pub ffn_norm: &'static str,
    /// The final norm before the head (most families: `output_norm.weight`).
    pub output_norm: &'static str,
    /// The sliding-window period when the file gives a window but no pattern: layer l is
    /// local unless l % period == period - 1 (0: every layer is).
    pub swa_period: usize,
    /// The shape of the MTP (nextn) block that smolrun drafts with (`blk.{n_layer}`); `None`:
    /// the family has none smolrun runs, and its nextn layers are left unread.
    pub mtp_layer: Option<fn(&HParams) -> LayerShape>,
}

// Families live in statics and are compared as such: one family is one address.
impl PartialEq for Family {
    fn eq(&self, other: &Family) -> bool {
        core::ptr::eq(self, other)
    }
}

impl Family {
    /// The family that runs the architecture `name` (`general.architecture`), if any.
    pub fn from_arch(name: &str) -> Option<&'static Family> {
        ARCHITECTURES
            .iter()
            .find(|a| a.name == name)
            .map(|a| a.family)
    }
}

/// Every architecture name, as "a, b, ... or z", for errors that say what is supported.
pub struct ArchitectureNames;

impl fmt::Display for ArchitectureNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let last = ARCHITECTURES.len() - 1;
        for (i, a) in ARCHITECTURES.iter().enumerate() {
            let sep = match i {
                0 => "",
                i if i == last => " or ",
                _ => ", ",
            };
            write!(f, "{sep}{}", a.name)?;
        }
        Ok(())
    }
}

/// What a family's keys say its layers are.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// The dense FFN's width (`HParams::n_ff`).
    pub n_ff: usize,
    /// One per layer inference runs (`HParams::n_layer`).
    pub layers: Vec<LayerShape>,
}

impl Layout {
    /// `n_ff`, and layer `l` as `layer(l)` says.
    pub fn by_layer(hp: &HParams, n_ff: usize, layer: impl Fn(usize) -> LayerShape) -> Layout {
        Layout {
            n_ff,
            layers: (0..hp.n_layer).map(layer).collect(),
        }
    }
}

/// What differs between families inside the shared layer kinds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Switches {
    /// Q, K and V have biases (Qwen2).
    pub qkv_bias: bool,
    /// Each Q and K head is RMS-normed before RoPE (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// With `qk_norm`: Q and K are each RMS-normed whole, over all their heads at once, with
    /// weights as long as the projection (OLMoE), instead of head by head.
    pub qk_norm_whole: bool,
    /// The attention and FFN outputs are RMS-normed before the residual add (Gemma 3).
    pub post_norms: bool,
    /// The embedding row is multiplied by sqrt(n_embd) (Gemma).
    pub scale_embedding: bool,
    pub activation: Activation,
    pub rope_style: RopeStyle,
    /// Q is multiplied by 1/sqrt(head_dim) before attention instead of scaling the scores
    /// (Gemma's order of operations; the same value, rounded as the reference rounds it).
    pub scale_q_before_attention: bool,
    /// A sliding-window layer's RoPE base is `rope.freq_base` unless the file gives
    /// `rope.freq_base_swa` (SmallThinker), instead of llama.cpp's default of 10000 (Gemma 3).
    pub swa_rope_base_global: bool,
    /// Granite's multipliers are read from the file (`HParams::scales`): the embedding's, the
    /// residual branches', the attention scores' and the logits'.
    pub granite_scales: bool,
}

impl Switches {
    /// Everything off: no biases, no extra norms, SiLU, NeoX's RoPE (the rotated pairs are
    /// the two halves of a head). Families say what they switch on.
    pub const PLAIN: Switches = Switches {
        qkv_bias: false,
        qk_norm: false,
        qk_norm_whole: false,
        post_norms: false,
        scale_embedding: false,
        activation: Activation::Silu,
        rope_style: RopeStyle::Neox,
        scale_q_before_attention: false,
        swa_rope_base_global: false,
        granite_scales: false,
    };
}

/// The FFN gate's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Silu,
    GeluTanh,
    /// ReLU: the gated MLP is a ReGLU (SmallThinker's experts).
    Relu,
}

/// Every layer attention as the shared keys say it, and a dense FFN of `feed_forward_length`:
/// the plain transformer (llama, qwen2, qwen3, gemma3).
fn attention_and_dense_ffn(k: &Keys, hp: &HParams) -> Result<Layout, ModelError> {
    let n_ff = k.feed_forward_length(None)?;
    Ok(Layout::by_layer(hp, n_ff, |l| LayerShape {
        mixer: MixerShape::Attention(hp.attention_shape(l)),
        ffn: FfnShape::Dense {
            n_ff,
            fused_gate_up: false,
        },
    }))
}

/// `expert_count` and `expert_used_count`, which every mixture of experts has: no more used
/// than there are, nor than a token's fixed list of chosen experts holds.
fn expert_counts(k: &Keys) -> Result<(usize, usize), ModelError> {
    let n_expert = k.count("expert_count", 1, MAX_EXPERTS)?;
    let max_used = (n_expert as u64).min(MAX_EXPERTS_USED as u64);
    let n_expert_used = k.count("expert_used_count", 1, max_used)?;
    Ok((n_expert, n_expert_used))
}

/// `expert_gating_func`, required: 1 softmax, 2 sigmoid.
fn expert_gating(k: &Keys) -> Result<Gating, ModelError> {
    match k.u64("expert_gating_func")? {
        1 => Ok(Gating::Softmax),
        2 => Ok(Gating::Sigmoid),
        v => Err(ModelError::BadHParam {
            key: k.key("expert_gating_func"),
            expected: "1 (softmax) or 2 (sigmoid)".into(),
            found: format!("{v}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelError;
    use alloc::format;
    use alloc::string::ToString;
    use std::fs;

    #[test]
    fn every_name_finds_its_own_family_once() {
        for (i, a) in ARCHITECTURES.iter().enumerate() {
            let family = Family::from_arch(a.name).expect("a listed name");
            assert!(core::ptr::eq(family, a.family), "{}", a.name);
            let twice = ARCHITECTURES[i + 1..].iter().any(|b| b.name == a.name);
            assert!(!twice, "{} is listed twice", a.name);
        }
        assert!(Family::from_arch("mamba").is_none());
        let err = ModelError::UnsupportedArch {
            arch: "mamba".into(),
        };
        assert!(err.to_string().ends_with(
            "expected llama, qwen2, qwen2moe, qwen3, qwen3moe, qwen35, qwen35moe, bailingmoe2, gemma3, smollm3, olmoe, phi3, lfm2, lfm2moe, smallthinker or granitehybrid"
        ));
    }

    /// The table is the one place a name is spelled: no other model file (tests aside) and no
    /// family file compares or builds one.
    #[test]
    fn names_are_spelled_in_the_table_only() {
        let model = concat!(env!("CARGO_MANIFEST_DIR"), "/src/model");
        let arch = format!("{model}/arch");
        let files = [model, &arch]
            .into_iter()
            .flat_map(|dir| fs::read_dir(dir).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
            .filter(|p| !p.ends_with("arch/mod.rs"));
        let mut checked = 0;
        for path in files {
            let text = fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            for a in &ARCHITECTURES {
                let quoted = format!("\"{}\"", a.name);
                assert!(
                    !code.contains(&quoted),
                    "{} spells {quoted}",
                    path.display()
                );
            }
            checked += 1;
        }
        assert!(checked > 20, "only {checked} files read");
    }
}
