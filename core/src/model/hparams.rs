//! Hyperparameters from GGUF metadata (`<arch>.block_count`, `<arch>.attention.head_count`, ...),
//! each checked for sense before anything is sized from it.

use super::attention::AttentionShape;
use super::delta_net::DeltaNetShape;
use super::error::ModelError;
use super::layer::{FfnShape, LayerShape, MixerShape};
use super::moe_ffn::{Gating, Routing, MAX_EXPERTS_USED, MAX_EXPERT_GROUPS};
use crate::gguf::{Gguf, GgufError, Value};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// The model families this module runs. They share the forward pass and differ only in the
/// switches of [`Family::switches`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Llama 2/3.x, SmolLM2, and files written as `llama`.
    Llama,
    /// Qwen2 / Qwen2.5: bias on Q, K and V.
    Qwen2,
    /// Qwen3: RMS norm on each Q and K head.
    Qwen3,
    /// Qwen3-MoE: Qwen3's attention, a mixture-of-experts FFN in every layer.
    Qwen3Moe,
    /// Qwen1.5-MoE (`qwen2moe`): Qwen2's attention (Q, K, V biases, no QK-norm); in every layer
    /// a softmax router whose chosen probabilities weight the experts as they are, plus a shared
    /// expert scaled by a sigmoid gate.
    Qwen2Moe,
    /// Ling 2.0 (`bailingmoe2`): fused QKV with QK-norm and partial RoPE; leading dense layers,
    /// then experts chosen by a sigmoid router with a selection bias and groups, plus a shared
    /// expert; trailing MTP (nextn) layers that inference skips.
    BailingMoe2,
    /// Gemma 3: QK-norm, post-norms, scaled embedding, GELU, sliding-window layers.
    Gemma3,
    /// Qwen3.5 (`qwen35`): recurrent Gated DeltaNet layers (delta_net.rs) and, every
    /// `full_attention_interval`-th layer (or as `attention.recurrent_layers` says), full
    /// attention with QK-norm, an output gate and IMRoPE; the FFN's norm is
    /// `post_attention_norm`; trailing MTP (nextn) layers that inference skips.
    Qwen35,
}

impl Family {
    pub fn from_arch(arch: &str) -> Option<Family> {
        match arch {
            "llama" => Some(Family::Llama),
            "qwen2" => Some(Family::Qwen2),
            "qwen3" => Some(Family::Qwen3),
            "qwen3moe" => Some(Family::Qwen3Moe),
            "qwen2moe" => Some(Family::Qwen2Moe),
            "bailingmoe2" => Some(Family::BailingMoe2),
            "gemma3" => Some(Family::Gemma3),
            "qwen35" => Some(Family::Qwen35),
            _ => None,
        }
    }
}

/// How RoPE is stretched for long contexts (`<arch>.rope.scaling.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeScaling {
    None,
    Linear,
    Yarn,
}

/// Sanity bounds. Real models sit far inside them; a value outside is a corrupt or hostile
/// file, and is rejected before any buffer is sized from it.
pub const MAX_LAYERS: u64 = 1024;
pub const MAX_EMBEDDING: u64 = 1 << 17;
pub const MAX_HEADS: u64 = 1024;
pub const MAX_HEAD_DIM: u64 = 1024;
pub const MAX_FEED_FORWARD: u64 = 1 << 20;
pub const MAX_CONTEXT: u64 = 1 << 24;
pub const MAX_VOCAB: u64 = 1 << 22;
/// Experts per MoE layer (the largest real models have 256; the index is a u16).
pub const MAX_EXPERTS: u64 = 1 << 12;
/// Shared experts per MoE layer (real models have 1 or 2).
pub const MAX_SHARED_EXPERTS: u64 = 64;

/// A mixture-of-experts family's expert hyperparameters, checked.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Experts {
    n_ff: usize,
    n_expert: usize,
    n_expert_used: usize,
    routing: Routing,
    /// The shared experts' hidden width together (0: none).
    n_ff_shared: usize,
    /// The first layers have a dense FFN instead (`leading_dense_block_count`).
    n_dense_lead: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HParams {
    pub family: Family,
    pub arch: String,
    /// Layers inference runs: `block_count` less the trailing MTP layers
    /// (`nextn_predict_layers`), whose tensors are left unread unless MTP drafting loads them
    /// (`Model::load_mtp`).
    pub n_layer: usize,
    /// Trailing MTP (nextn) blocks after the `n_layer` layers (`nextn_predict_layers`).
    pub n_nextn: usize,
    pub n_embd: usize,
    /// The FFN's hidden width (`feed_forward_length`).
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Key (and query) head size.
    pub head_dim: usize,
    /// Value head size.
    pub head_dim_v: usize,
    pub n_vocab: usize,
    pub rms_eps: f32,
    pub n_rot: usize,
    pub rope_freq_base: f32,
    /// Base frequency on sliding-window layers (Gemma 3 uses 10000 there).
    pub rope_freq_base_swa: f32,
    pub rope_scaling: RopeScaling,
    /// 1 / `rope.scaling.factor`; 1.0 when unscaled.
    pub rope_freq_scale: f32,
    pub rope_n_ctx_orig: usize,
    /// YaRN: `rope.scaling.attn_factor`, 1.0 unless the file sets it.
    pub rope_attn_factor: f32,
    pub n_ctx_train: usize,
    /// Sliding window in tokens, when some layers use one.
    pub sliding_window: Option<usize>,
    /// `is_swa[l]`: layer `l` attends only within the sliding window.
    pub is_swa: Vec<bool>,
    pub final_logit_softcap: Option<f32>,
    pub attn_logit_softcap: Option<f32>,
    /// What each layer is made of (its token mixer and FFN kinds and shapes): what the state
    /// and the memory plan are sized from, and what `Model` loads.
    pub layers: Vec<LayerShape>,
}

/// Reads `<arch>.<name>` as an integer, with a default when absent.
fn opt_u64(g: &Gguf, key: &str) -> Result<Option<u64>, ModelError> {
    match g.get(key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            ModelError::Gguf(GgufError::WrongValueType {
                key: key.into(),
                expected: "non-negative integer",
                found: v.type_name(),
            })
        }),
    }
}

fn opt_f32(g: &Gguf, key: &str) -> Result<Option<f32>, ModelError> {
    match g.get(key) {
        None => Ok(None),
        Some(v) => v.as_f32().map(Some).ok_or_else(|| {
            ModelError::Gguf(GgufError::WrongValueType {
                key: key.into(),
                expected: "float",
                found: v.type_name(),
            })
        }),
    }
}

fn in_range(key: &str, v: u64, lo: u64, hi: u64) -> Result<usize, ModelError> {
    if v < lo || v > hi {
        return Err(ModelError::BadHParam {
            key: key.into(),
            expected: format!("{lo}..={hi}"),
            found: format!("{v}"),
        });
    }
    Ok(v as usize)
}

fn finite_positive(key: &str, v: f32) -> Result<f32, ModelError> {
    if !(v.is_finite() && v > 0.0) {
        return Err(ModelError::BadHParam {
            key: key.into(),
            expected: "a finite number > 0".into(),
            found: format!("{v}"),
        });
    }
    Ok(v)
}

impl HParams {
    /// These hyperparameters with the recurrent layers' delta-rule matrices kept as f16
    /// (`on`) or f32: what the state is sized from, so the memory plan counts what is held.
    pub fn with_state_f16(mut self, on: bool) -> HParams {
        self.set_state_f16(on);
        self
    }

    /// [`HParams::with_state_f16`] in place.
    pub fn set_state_f16(&mut self, on: bool) {
        for l in &mut self.layers {
            if let super::layer::MixerShape::DeltaNet(d) = &mut l.mixer {
                d.state_f16 = on;
            }
        }
    }

    /// Reads and validates the hyperparameters. `n_vocab` and the embedding width are checked
    /// against `token_embd.weight`, the one tensor every family has.
    pub fn from_gguf(g: &Gguf) -> Result<HParams, ModelError> {
        let arch = g.architecture()?;
        let family = Family::from_arch(arch)
            .ok_or_else(|| ModelError::UnsupportedArch { arch: arch.into() })?;
        let k = |name: &str| format!("{arch}.{name}");
        let req = |name: &str| -> Result<u64, ModelError> { Ok(g.get_u64(&k(name))?) };

        let key = k("block_count");
        let n_block = in_range(&key, req("block_count")?, 1, MAX_LAYERS)?;
        let key = k("nextn_predict_layers");
        let n_nextn = in_range(&key, opt_u64(g, &key)?.unwrap_or(0), 0, n_block as u64 - 1)?;
        let n_layer = n_block - n_nextn;
        let key = k("embedding_length");
        let n_embd = in_range(&key, req("embedding_length")?, 1, MAX_EMBEDDING)?;
        let experts = Self::experts(g, &k, family, n_layer)?;
        let key = k("feed_forward_length");
        // A mixture of experts may leave out the dense width if it has no dense layer.
        let n_ff = match (opt_u64(g, &key)?, experts) {
            (Some(v), _) => in_range(&key, v, 1, MAX_FEED_FORWARD)?,
            (None, Some(x)) if x.n_dense_lead == 0 => x.n_ff,
            _ => in_range(&key, req("feed_forward_length")?, 1, MAX_FEED_FORWARD)?,
        };
        let key = k("attention.head_count");
        let n_head = in_range(&key, req("attention.head_count")?, 1, MAX_HEADS)?;
        let key = k("attention.head_count_kv");
        let n_head_kv = in_range(
            &key,
            opt_u64(g, &key)?.unwrap_or(n_head as u64),
            1,
            n_head as u64,
        )?;
        if n_head % n_head_kv != 0 {
            return Err(ModelError::BadHParam {
                key,
                expected: format!("a divisor of attention.head_count ({n_head})"),
                found: format!("{n_head_kv}"),
            });
        }
        let key = k("attention.key_length");
        let head_dim = in_range(
            &key,
            opt_u64(g, &key)?.unwrap_or((n_embd / n_head) as u64),
            2,
            MAX_HEAD_DIM,
        )?;
        if head_dim % 2 != 0 {
            return Err(ModelError::BadHParam {
                key,
                expected: "an even head size (RoPE rotates pairs)".into(),
                found: format!("{head_dim}"),
            });
        }
        let key = k("attention.value_length");
        let head_dim_v = in_range(
            &key,
            opt_u64(g, &key)?.unwrap_or((n_embd / n_head) as u64),
            1,
            MAX_HEAD_DIM,
        )?;
        let key = k("rope.dimension_count");
        let n_rot = in_range(
            &key,
            opt_u64(g, &key)?.unwrap_or(head_dim as u64),
            2,
            head_dim as u64,
        )?;
        if n_rot % 2 != 0 {
            return Err(ModelError::BadHParam {
                key,
                expected: "an even number".into(),
                found: format!("{n_rot}"),
            });
        }
        let key = k("attention.layer_norm_rms_epsilon");
        let rms_eps = opt_f32(g, &key)?.unwrap_or(1e-5);
        if !(rms_eps.is_finite() && (0.0..1.0).contains(&rms_eps)) {
            return Err(ModelError::BadHParam {
                key,
                expected: "0 <= eps < 1".into(),
                found: format!("{rms_eps}"),
            });
        }
        let key = k("rope.freq_base");
        let rope_freq_base = finite_positive(&key, opt_f32(g, &key)?.unwrap_or(10000.0))?;
        let key = k("rope.freq_base_swa");
        let rope_freq_base_swa = finite_positive(&key, opt_f32(g, &key)?.unwrap_or(10000.0))?;
        let key = k("context_length");
        let n_ctx_train = in_range(&key, req("context_length")?, 1, MAX_CONTEXT)?;

        let key = k("rope.scaling.type");
        let rope_scaling = match g.get(&key) {
            None => RopeScaling::Linear,
            Some(Value::Str("none")) => RopeScaling::None,
            Some(Value::Str("linear")) => RopeScaling::Linear,
            Some(Value::Str("yarn")) => RopeScaling::Yarn,
            Some(v) => {
                return Err(ModelError::BadHParam {
                    key,
                    expected: "\"none\", \"linear\" or \"yarn\"".into(),
                    found: format!("{v:?}"),
                })
            }
        };
        let key = k("rope.scaling.factor");
        let factor = opt_f32(g, &key)?.unwrap_or(0.0);
        if !(factor.is_finite() && (factor == 0.0 || factor >= 1e-3)) {
            return Err(ModelError::BadHParam {
                key,
                expected: "0 (unset) or a positive factor".into(),
                found: format!("{factor}"),
            });
        }
        let rope_freq_scale = if factor == 0.0 || rope_scaling == RopeScaling::None {
            1.0
        } else {
            1.0 / factor
        };
        let key = k("rope.scaling.original_context_length");
        let rope_n_ctx_orig = in_range(
            &key,
            opt_u64(g, &key)?.unwrap_or(n_ctx_train as u64),
            1,
            MAX_CONTEXT,
        )?;
        let key = k("rope.scaling.attn_factor");
        let rope_attn_factor = finite_positive(&key, opt_f32(g, &key)?.unwrap_or(1.0))?;

        let key = k("attention.sliding_window");
        let sliding_window = match opt_u64(g, &key)? {
            None | Some(0) => None,
            Some(w) => Some(in_range(&key, w, 1, MAX_CONTEXT)?),
        };
        let is_swa = Self::swa_pattern(
            g,
            &k("attention.sliding_window_pattern"),
            family,
            n_layer,
            sliding_window,
        )?;

        let cap = |name: &str| -> Result<Option<f32>, ModelError> {
            let key = k(name);
            match opt_f32(g, &key)? {
                None => Ok(None),
                Some(0.0) => Ok(None),
                Some(c) => finite_positive(&key, c).map(Some),
            }
        };
        // Gemma 2 capped both; Gemma 3 dropped them, but a file may still carry the keys.
        let final_logit_softcap = cap("final_logit_softcapping")?;
        let attn_logit_softcap = cap("attn_logit_softcapping")?;

        let embd = g
            .tensor("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor {
                name: "token_embd.weight".into(),
            })?;
        if embd.n_dims != 2 || embd.dims[0] != n_embd as u64 {
            return Err(ModelError::BadHParam {
                key: k("embedding_length"),
                expected: format!("{} (the row length of token_embd.weight)", embd.dims[0]),
                found: format!("{n_embd}"),
            });
        }
        let n_vocab = in_range(
            "token_embd.weight rows (vocabulary)",
            embd.dims[1],
            1,
            MAX_VOCAB,
        )?;

        let recurrent = match family {
            Family::Qwen35 => {
                if head_dim_v != head_dim {
                    return Err(ModelError::BadHParam {
                        key: k("attention.value_length"),
                        expected: format!("attention.key_length ({head_dim}), as qwen35 needs"),
                        found: format!("{head_dim_v}"),
                    });
                }
                Self::check_rope_sections(g, &k("rope.dimension_sections"), n_rot)?;
                Some((
                    Self::recurrent_layers(g, &k, n_block, n_layer)?,
                    Self::delta_net(g, &k)?,
                ))
            }
            _ => None,
        };
        let layers = (0..n_layer)
            .map(|l| LayerShape {
                mixer: match &recurrent {
                    Some((is_recurrent, d)) if is_recurrent[l] => MixerShape::DeltaNet(*d),
                    _ => MixerShape::Attention(AttentionShape {
                        n_head,
                        n_head_kv,
                        head_dim,
                        head_dim_v,
                        window: if is_swa[l] { sliding_window } else { None },
                        fused_qkv: family == Family::BailingMoe2,
                        output_gate: family == Family::Qwen35,
                    }),
                },
                ffn: match experts {
                    Some(x) if l >= x.n_dense_lead => FfnShape::Moe {
                        n_ff: x.n_ff,
                        n_expert: x.n_expert,
                        n_expert_used: x.n_expert_used,
                        routing: x.routing,
                        n_ff_shared: x.n_ff_shared,
                    },
                    _ => FfnShape::Dense { n_ff },
                },
            })
            .collect();

        Ok(HParams {
            family,
            arch: arch.into(),
            n_layer,
            n_nextn,
            n_embd,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            head_dim_v,
            n_vocab,
            rms_eps,
            n_rot,
            rope_freq_base,
            rope_freq_base_swa,
            rope_scaling,
            rope_freq_scale,
            rope_n_ctx_orig,
            rope_attn_factor,
            n_ctx_train,
            sliding_window,
            is_swa,
            final_logit_softcap,
            attn_logit_softcap,
            layers,
        })
    }

    /// The shape of the MTP block that drafts with Qwen3.5's `nextn` layer (`blk.{n_layer}`): a
    /// gated full-attention block with a dense FFN, as llama.cpp's qwen35 graph_mtp runs it.
    /// `None` for a family whose MTP block smolrun does not run.
    pub fn mtp_layer(&self) -> Option<LayerShape> {
        (self.family == Family::Qwen35).then_some(LayerShape {
            mixer: MixerShape::Attention(AttentionShape {
                n_head: self.n_head,
                n_head_kv: self.n_head_kv,
                head_dim: self.head_dim,
                head_dim_v: self.head_dim_v,
                window: None,
                fused_qkv: false,
                output_gate: true,
            }),
            ffn: FfnShape::Dense { n_ff: self.n_ff },
        })
    }

    /// Which of the `n_layer` layers are recurrent, as llama.cpp decides: the bool array
    /// `attention.recurrent_layers` (one per block, MTP blocks included), else every layer but
    /// each `full_attention_interval`-th (default 4).
    fn recurrent_layers(
        g: &Gguf,
        k: &dyn Fn(&str) -> String,
        n_block: usize,
        n_layer: usize,
    ) -> Result<Vec<bool>, ModelError> {
        let key = k("attention.recurrent_layers");
        if let Some(v) = g.get(&key) {
            let flags: Vec<bool> = match v {
                Value::Array(a) => {
                    let flags: Vec<bool> = a
                        .iter()
                        .filter_map(|v| v.as_bool().or(v.as_u64().map(|n| n != 0)))
                        .collect();
                    if a.len() != n_block || flags.len() != n_block {
                        return Err(ModelError::BadHParam {
                            key,
                            expected: format!("{n_block} booleans (one per block: block_count)"),
                            found: format!("an array of {} ({} booleans)", a.len(), flags.len()),
                        });
                    }
                    flags
                }
                v => match v.as_bool().or(v.as_u64().map(|n| n != 0)) {
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
        let key = k("full_attention_interval");
        let interval = in_range(&key, opt_u64(g, &key)?.unwrap_or(4), 1, MAX_LAYERS)?;
        Ok((0..n_layer).map(|l| (l + 1) % interval != 0).collect())
    }

    /// A Gated DeltaNet layer's shape from the `ssm.*` keys, checked as llama.cpp's qwen35
    /// needs it: dk = dv (`ssm.inner_size` = `ssm.state_size` x `ssm.time_step_rank`), value
    /// heads a multiple of the key heads.
    fn delta_net(g: &Gguf, k: &dyn Fn(&str) -> String) -> Result<DeltaNetShape, ModelError> {
        let req = |name: &str| -> Result<u64, ModelError> { Ok(g.get_u64(&k(name))?) };
        let key = k("ssm.conv_kernel");
        let conv_kernel = in_range(&key, req("ssm.conv_kernel")?, 1, 64)?;
        let key = k("ssm.state_size");
        let head_dim = in_range(&key, req("ssm.state_size")?, 1, MAX_HEAD_DIM)?;
        let key = k("ssm.group_count");
        let n_k_heads = in_range(&key, req("ssm.group_count")?, 1, MAX_HEADS)?;
        let key = k("ssm.time_step_rank");
        let n_v_heads = in_range(&key, req("ssm.time_step_rank")?, 1, MAX_HEADS)?;
        if n_v_heads % n_k_heads != 0 {
            return Err(ModelError::BadHParam {
                key,
                expected: format!(
                    "a multiple of ssm.group_count ({n_k_heads}): value heads share key heads"
                ),
                found: format!("{n_v_heads}"),
            });
        }
        let key = k("ssm.inner_size");
        let inner = in_range(&key, req("ssm.inner_size")?, 1, MAX_EMBEDDING)?;
        if inner != head_dim * n_v_heads {
            return Err(ModelError::BadHParam {
                key,
                expected: format!(
                    "ssm.state_size x ssm.time_step_rank = {head_dim} x {n_v_heads} = {}: \
                     qwen35 needs value heads as wide as key heads (dv = dk)",
                    head_dim * n_v_heads
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

    /// Qwen3.5's IMRoPE sections (`rope.dimension_sections`, 4 integers): with the text
    /// positions llama.cpp gives ([p, p, p, 0]) a pair rotates by the position when its
    /// section is one of the first three, which is NeoX's rotation; a pair left to the fourth
    /// section would not rotate at all. Refused unless every rotated pair is in the first three.
    fn check_rope_sections(g: &Gguf, key: &str, n_rot: usize) -> Result<(), ModelError> {
        let bad = |found: String| ModelError::BadHParam {
            key: key.into(),
            expected: format!(
                "4 section sizes whose first three interleave over all {} rotated pairs",
                n_rot / 2
            ),
            found,
        };
        let s: Vec<u64> = match g.get(key) {
            Some(Value::Array(a)) => a.iter().filter_map(|v| v.as_u64()).collect(),
            Some(v) => return Err(bad(v.type_name().into())),
            None => return Err(ModelError::Gguf(GgufError::MissingKey { key: key.into() })),
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

    /// A mixture-of-experts family's expert hyperparameters, checked; `None` for a dense
    /// family. The keys and defaults are llama.cpp's.
    fn experts(
        g: &Gguf,
        k: &dyn Fn(&str) -> String,
        family: Family,
        n_layer: usize,
    ) -> Result<Option<Experts>, ModelError> {
        if !matches!(
            family,
            Family::Qwen3Moe | Family::Qwen2Moe | Family::BailingMoe2
        ) {
            return Ok(None);
        }
        let req = |name: &str| -> Result<u64, ModelError> { Ok(g.get_u64(&k(name))?) };
        let opt = |name: &str| opt_u64(g, &k(name));
        let key = k("expert_count");
        let n_expert = in_range(&key, req("expert_count")?, 1, MAX_EXPERTS)?;
        let key = k("expert_used_count");
        let max_used = (n_expert as u64).min(MAX_EXPERTS_USED as u64);
        let n_expert_used = in_range(&key, req("expert_used_count")?, 1, max_used)?;
        let key = k("expert_feed_forward_length");
        let n_ff_exp = match (opt("expert_feed_forward_length")?, family) {
            (Some(v), _) => v,
            // llama.cpp's qwen2moe falls back to feed_forward_length / expert_used_count.
            (None, Family::Qwen2Moe) => req("feed_forward_length")? / n_expert_used as u64,
            (None, _) => req("expert_feed_forward_length")?,
        };
        let n_ff = in_range(&key, n_ff_exp, 1, MAX_FEED_FORWARD)?;
        let mut x = Experts {
            n_ff,
            n_expert,
            n_expert_used,
            routing: Routing::SOFTMAX_NORMALISED,
            n_ff_shared: 0,
            n_dense_lead: 0,
        };
        if family == Family::Qwen3Moe {
            return Ok(Some(x));
        }
        if family == Family::Qwen2Moe {
            // One shared expert, always; its width defaults to feed_forward_length.
            let key = k("expert_shared_feed_forward_length");
            let n_ff_shared = match opt("expert_shared_feed_forward_length")? {
                Some(v) => v,
                None => req("feed_forward_length")?,
            };
            x.n_ff_shared = in_range(&key, n_ff_shared, 1, MAX_FEED_FORWARD)?;
            x.routing = Routing::QWEN2MOE;
            return Ok(Some(x));
        }

        // bailingmoe2
        let key = k("expert_gating_func");
        let gating = match req("expert_gating_func")? {
            1 => Gating::Softmax,
            2 => Gating::Sigmoid,
            v => {
                return Err(ModelError::BadHParam {
                    key,
                    expected: "1 (softmax) or 2 (sigmoid)".into(),
                    found: format!("{v}"),
                })
            }
        };
        let key = k("expert_weights_norm");
        let norm_weights = match g.get(&key) {
            None => false,
            Some(v) => v.as_bool().ok_or_else(|| {
                ModelError::Gguf(GgufError::WrongValueType {
                    key: key.clone(),
                    expected: "bool",
                    found: v.type_name(),
                })
            })?,
        };
        let key = k("expert_weights_scale");
        let scale = opt_f32(g, &key)?.unwrap_or(0.0);
        if !(scale.is_finite() && scale >= 0.0) {
            return Err(ModelError::BadHParam {
                key,
                expected: "a finite number >= 0 (0: unscaled)".into(),
                found: format!("{scale}"),
            });
        }
        let key = k("expert_group_count");
        let n_group = in_range(
            &key,
            opt("expert_group_count")?.unwrap_or(0),
            0,
            MAX_EXPERT_GROUPS as u64,
        )?;
        let mut n_group_used = 0;
        if n_group > 1 {
            // Each group is scored by its two best experts, so it needs at least two.
            if n_expert % n_group != 0 || n_expert / n_group < 2 {
                return Err(ModelError::BadHParam {
                    key,
                    expected: format!(
                        "a divisor of expert_count ({n_expert}) leaving at least 2 experts a group"
                    ),
                    found: format!("{n_group}"),
                });
            }
            let key = k("expert_group_used_count");
            n_group_used = in_range(&key, req("expert_group_used_count")?, 1, n_group as u64 - 1)?;
            let reachable = n_group_used * (n_expert / n_group);
            if n_expert_used > reachable {
                return Err(ModelError::BadHParam {
                    key: k("expert_used_count"),
                    expected: format!(
                        "at most the {reachable} experts of the {n_group_used} groups used"
                    ),
                    found: format!("{n_expert_used}"),
                });
            }
        }
        let key = k("expert_shared_count");
        let n_shared = in_range(&key, req("expert_shared_count")?, 1, MAX_SHARED_EXPERTS)?;
        let key = k("expert_shared_feed_forward_length");
        let n_ff_one = in_range(
            &key,
            opt("expert_shared_feed_forward_length")?.unwrap_or(n_ff as u64),
            1,
            MAX_FEED_FORWARD,
        )?;
        let n_ff_shared = in_range(&key, (n_ff_one * n_shared) as u64, 1, MAX_FEED_FORWARD)?;
        let key = k("leading_dense_block_count");
        let n_dense_lead = in_range(
            &key,
            opt("leading_dense_block_count")?.unwrap_or(0),
            0,
            n_layer as u64,
        )?;
        x.routing = Routing {
            gating,
            norm_weights,
            weights_scale: if scale == 0.0 { 1.0 } else { scale },
            n_group,
            n_group_used,
            selection_bias: true,
            shared_gate: false,
        };
        x.n_ff_shared = n_ff_shared;
        x.n_dense_lead = n_dense_lead;
        Ok(Some(x))
    }

    /// Which layers use the sliding window. The file may give a per-layer bool array, or a
    /// period n (layer l is local unless l % n == n - 1); Gemma 3's default period is 6
    /// (five local layers, then one global).
    fn swa_pattern(
        g: &Gguf,
        key: &str,
        family: Family,
        n_layer: usize,
        window: Option<usize>,
    ) -> Result<Vec<bool>, ModelError> {
        if window.is_none() {
            return Ok(alloc::vec![false; n_layer]);
        }
        let period = match g.get(key) {
            Some(Value::Array(a)) => {
                let flags: Vec<bool> = a.iter().filter_map(|v| v.as_bool()).collect();
                if flags.len() != n_layer {
                    return Err(ModelError::BadHParam {
                        key: key.into(),
                        expected: format!("{n_layer} booleans (one per layer)"),
                        found: format!("an array of {} ({} booleans)", a.len(), flags.len()),
                    });
                }
                return Ok(flags);
            }
            Some(v) => match v.as_u64() {
                Some(p) => in_range(key, p, 0, MAX_LAYERS)?,
                None => {
                    return Err(ModelError::BadHParam {
                        key: key.into(),
                        expected: "an integer period or a bool array".into(),
                        found: v.type_name().into(),
                    })
                }
            },
            None if family == Family::Gemma3 => 6,
            // Other families with a window but no pattern: every layer is windowed.
            None => 0,
        };
        Ok((0..n_layer)
            .map(|l| period == 0 || l % period < period - 1)
            .collect())
    }
}
