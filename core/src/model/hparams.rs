//! Hyperparameters from GGUF metadata (`<arch>.block_count`, `<arch>.attention.head_count`, ...),
//! each checked for sense before anything is sized from it.
//!
//! [`HParams::from_gguf`] reads the keys every family shares (depth, widths, heads, RoPE, the
//! sliding window, the vocabulary), then hands over to the family's file (`arch/`), which
//! reads its own keys (experts, recurrent layers, ...) through [`Keys`] and says what each
//! layer is made of ([`Family::layout`]).

use super::arch::{Family, Layout};
use super::attention::{AttentionShape, KvCacheType};
use super::error::ModelError;
use super::layer::{LayerShape, MixerShape};
use crate::gguf::{Gguf, GgufError, Value};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

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

#[derive(Debug, Clone, PartialEq)]
pub struct HParams {
    /// The family file that runs this architecture (`arch/`).
    pub family: &'static Family,
    /// The file's `general.architecture`: the prefix of its keys.
    pub arch: String,
    /// Layers inference runs: `block_count` less the trailing MTP layers
    /// (`nextn_predict_layers`), whose tensors are left unread unless MTP drafting loads them
    /// (`Model::load_mtp`).
    pub n_layer: usize,
    /// Trailing MTP (nextn) blocks after the `n_layer` layers (`nextn_predict_layers`).
    pub n_nextn: usize,
    pub n_embd: usize,
    /// The dense FFN's hidden width (`feed_forward_length`; a mixture of experts without a
    /// dense layer may leave it out: then its experts' width).
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
    /// and the memory plan are sized from, and what `Model` loads. The family decides it.
    pub layers: Vec<LayerShape>,
    /// What the attention layers' KV caches store: a run's choice (`--cache-type-k/-v`, f16
    /// from the file), kept here beside the shapes the state and the memory plan are sized
    /// from, like the recurrent state's f16 switch.
    pub kv_type: KvCacheType,
    /// Granite's multipliers (none unless the family reads them: [`Switches::granite_scales`]).
    ///
    /// [`Switches::granite_scales`]: super::arch::Switches::granite_scales
    pub scales: Scales,
}

/// Granite's multipliers (`embedding_scale`, `residual_scale`, `attention.scale`,
/// `logit_scale`), as llama.cpp applies them; `None` where the file leaves the key out or sets
/// it to 0, as llama.cpp reads a 0 as "not set".
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Scales {
    /// The embedding row is multiplied by it.
    pub embedding: Option<f32>,
    /// Each layer's mixer and FFN outputs are multiplied by it before the residual add.
    pub residual: Option<f32>,
    /// Attention scores are scaled by it instead of 1/sqrt(head_dim).
    pub attention: Option<f32>,
    /// The logits are multiplied by 1/it.
    pub logit: Option<f32>,
}

impl Scales {
    /// Reads the four keys: each absent, 0 (unset), or a finite non-zero number.
    pub fn from_keys(k: &Keys) -> Result<Scales, ModelError> {
        let scale = |name: &str| -> Result<Option<f32>, ModelError> {
            match k.opt_f32(name)? {
                None => Ok(None),
                Some(0.0) => Ok(None),
                Some(v) if v.is_finite() => Ok(Some(v)),
                Some(v) => Err(ModelError::BadHParam {
                    key: k.key(name),
                    expected: "a finite number (0: unset)".into(),
                    found: format!("{v}"),
                }),
            }
        };
        Ok(Scales {
            embedding: scale("embedding_scale")?,
            residual: scale("residual_scale")?,
            attention: scale("attention.scale")?,
            logit: scale("logit_scale")?,
        })
    }
}

/// A file's `<arch>.*` keys, each read with an error that names the whole key: what a family
/// file reads its own hyperparameters through.
pub struct Keys<'k> {
    gguf: &'k Gguf<'k>,
    arch: &'k str,
}

impl<'k> Keys<'k> {
    pub fn new(gguf: &'k Gguf<'k>, arch: &'k str) -> Keys<'k> {
        Keys { gguf, arch }
    }

    /// Whether the file has the tensor `name` (for a family whose layout depends on it).
    pub fn has_tensor(&self, name: &str) -> bool {
        self.gguf.tensor(name).is_some()
    }

    /// The file's architecture name, the keys' prefix.
    pub fn arch(&self) -> &'k str {
        self.arch
    }

    /// `<arch>.<name>`: the key as the file spells it and as errors name it.
    pub fn key(&self, name: &str) -> String {
        format!("{}.{name}", self.arch)
    }

    pub fn get(&self, name: &str) -> Option<Value<'k>> {
        self.gguf.get(&self.key(name))
    }

    /// A required non-negative integer.
    pub fn u64(&self, name: &str) -> Result<u64, ModelError> {
        Ok(self.gguf.get_u64(&self.key(name))?)
    }

    pub fn opt_u64(&self, name: &str) -> Result<Option<u64>, ModelError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                ModelError::Gguf(GgufError::WrongValueType {
                    key: self.key(name),
                    expected: "non-negative integer",
                    found: v.type_name(),
                })
            }),
        }
    }

    pub fn opt_f32(&self, name: &str) -> Result<Option<f32>, ModelError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.as_f32().map(Some).ok_or_else(|| {
                ModelError::Gguf(GgufError::WrongValueType {
                    key: self.key(name),
                    expected: "float",
                    found: v.type_name(),
                })
            }),
        }
    }

    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>, ModelError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| {
                ModelError::Gguf(GgufError::WrongValueType {
                    key: self.key(name),
                    expected: "bool",
                    found: v.type_name(),
                })
            }),
        }
    }

    /// A required count in `lo..=hi`.
    pub fn count(&self, name: &str, lo: u64, hi: u64) -> Result<usize, ModelError> {
        in_range(&self.key(name), self.u64(name)?, lo, hi)
    }

    /// An optional count in `lo..=hi`, `default` when the file leaves it out.
    pub fn count_or(
        &self,
        name: &str,
        default: u64,
        lo: u64,
        hi: u64,
    ) -> Result<usize, ModelError> {
        in_range(
            &self.key(name),
            self.opt_u64(name)?.unwrap_or(default),
            lo,
            hi,
        )
    }

    /// The dense FFN's width (`feed_forward_length`). `experts_only`: the width a mixture of
    /// experts with no dense layer stands in when it leaves the key out (`None`: required).
    pub fn feed_forward_length(&self, experts_only: Option<usize>) -> Result<usize, ModelError> {
        let name = "feed_forward_length";
        match (self.opt_u64(name)?, experts_only) {
            (Some(v), _) => in_range(&self.key(name), v, 1, MAX_FEED_FORWARD),
            (None, Some(n_ff)) => Ok(n_ff),
            (None, None) => self.count(name, 1, MAX_FEED_FORWARD),
        }
    }
}

/// `attention.head_count_kv`: one count for every layer, or (LFM2) an array of one per layer
/// where 0 marks a layer without attention. Each count a divisor of `n_head`; for an array,
/// the widest, which the family's layout refines layer by layer ([`Keys::head_count_kv_layers`]).
fn head_count_kv(k: &Keys, n_head: usize, n_layer: usize) -> Result<usize, ModelError> {
    let key = k.key("attention.head_count_kv");
    let bad = |found: String| ModelError::BadHParam {
        key: key.clone(),
        expected: format!("a divisor of attention.head_count ({n_head})"),
        found,
    };
    if let Some(Value::Array(_)) = k.get("attention.head_count_kv") {
        let counts = k.head_count_kv_layers(n_head, n_layer)?;
        return counts
            .iter()
            .copied()
            .max()
            .filter(|&m| m > 0)
            .ok_or_else(|| bad(format!("{counts:?} (no layer with attention)")));
    }
    let n_head_kv = k.count_or("attention.head_count_kv", n_head as u64, 1, n_head as u64)?;
    if !n_head.is_multiple_of(n_head_kv) {
        return Err(bad(format!("{n_head_kv}")));
    }
    Ok(n_head_kv)
}

impl Keys<'_> {
    /// `attention.head_count_kv` as an array of one count per layer (the first `n_layer`
    /// entries; 0: the layer has no attention), each 0 or a divisor of `n_head`.
    pub fn head_count_kv_layers(
        &self,
        n_head: usize,
        n_layer: usize,
    ) -> Result<Vec<usize>, ModelError> {
        let key = self.key("attention.head_count_kv");
        let a = match self.get("attention.head_count_kv") {
            Some(Value::Array(a)) => a,
            Some(v) => {
                return Err(ModelError::BadHParam {
                    key,
                    expected: format!(
                        "an array of {n_layer} counts (one per layer, 0: no attention)"
                    ),
                    found: v.type_name().into(),
                })
            }
            None => return Err(ModelError::Gguf(GgufError::MissingKey { key })),
        };
        let counts: Vec<u64> = a.iter().filter_map(|v| v.as_u64()).collect();
        if a.len() < n_layer || counts.len() != a.len() {
            return Err(ModelError::BadHParam {
                key,
                expected: format!("an array of {n_layer} counts (one per layer, 0: no attention)"),
                found: format!("an array of {} ({} counts)", a.len(), counts.len()),
            });
        }
        let counts = &counts[..n_layer];
        if let Some(&c) = counts
            .iter()
            .find(|&&c| c > n_head as u64 || (c > 0 && !(n_head as u64).is_multiple_of(c)))
        {
            return Err(ModelError::BadHParam {
                key,
                expected: format!("0 or a divisor of attention.head_count ({n_head}) per layer"),
                found: format!("{c} in {counts:?}"),
            });
        }
        Ok(counts.iter().map(|&c| c as usize).collect())
    }
}

/// `v` as a count, or an error naming `key`, the range and `v`.
pub fn in_range(key: &str, v: u64, lo: u64, hi: u64) -> Result<usize, ModelError> {
    if v < lo || v > hi {
        return Err(ModelError::BadHParam {
            key: key.into(),
            expected: format!("{lo}..={hi}"),
            found: format!("{v}"),
        });
    }
    Ok(v as usize)
}

pub fn finite_positive(key: &str, v: f32) -> Result<f32, ModelError> {
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
    /// These hyperparameters with the attention layers' KV caches of type `kv_type`
    /// (`--cache-type-k/-v`): what the state is sized from, so the memory plan counts it.
    pub fn with_kv_type(mut self, kv_type: KvCacheType) -> HParams {
        self.kv_type = kv_type;
        self
    }

    /// These hyperparameters with the recurrent layers' delta-rule matrices kept as f16
    /// (`on`) or f32: what the state is sized from, so the memory plan counts what is held.
    pub fn with_state_f16(mut self, on: bool) -> HParams {
        self.set_state_f16(on);
        self
    }

    /// [`HParams::with_state_f16`] in place.
    pub fn set_state_f16(&mut self, on: bool) {
        for l in &mut self.layers {
            if let MixerShape::DeltaNet(d) = &mut l.mixer {
                d.state_f16 = on;
            }
        }
    }

    /// Reads and validates the hyperparameters: the keys every family shares here, then the
    /// family's own and its layers ([`Family::layout`]). `n_vocab` and the embedding width are
    /// checked against `token_embd.weight`, the one tensor every family has.
    pub fn from_gguf(g: &Gguf) -> Result<HParams, ModelError> {
        let arch = g.architecture()?;
        let family = Family::from_arch(arch)
            .ok_or_else(|| ModelError::UnsupportedArch { arch: arch.into() })?;
        let k = Keys::new(g, arch);

        let n_block = k.count("block_count", 1, MAX_LAYERS)?;
        let n_nextn = k.count_or("nextn_predict_layers", 0, 0, n_block as u64 - 1)?;
        let n_layer = n_block - n_nextn;
        let n_embd = k.count("embedding_length", 1, MAX_EMBEDDING)?;
        let n_head = k.count("attention.head_count", 1, MAX_HEADS)?;
        let n_head_kv = head_count_kv(&k, n_head, n_layer)?;
        let per_head = (n_embd / n_head) as u64;
        let head_dim = k.count_or("attention.key_length", per_head, 2, MAX_HEAD_DIM)?;
        if head_dim % 2 != 0 {
            return Err(ModelError::BadHParam {
                key: k.key("attention.key_length"),
                expected: "an even head size (RoPE rotates pairs)".into(),
                found: format!("{head_dim}"),
            });
        }
        let head_dim_v = k.count_or("attention.value_length", per_head, 1, MAX_HEAD_DIM)?;
        let n_rot = k.count_or("rope.dimension_count", head_dim as u64, 2, head_dim as u64)?;
        if n_rot % 2 != 0 {
            return Err(ModelError::BadHParam {
                key: k.key("rope.dimension_count"),
                expected: "an even number".into(),
                found: format!("{n_rot}"),
            });
        }
        let rms_eps = k
            .opt_f32("attention.layer_norm_rms_epsilon")?
            .unwrap_or(1e-5);
        if !(rms_eps.is_finite() && (0.0..1.0).contains(&rms_eps)) {
            return Err(ModelError::BadHParam {
                key: k.key("attention.layer_norm_rms_epsilon"),
                expected: "0 <= eps < 1".into(),
                found: format!("{rms_eps}"),
            });
        }
        let positive_or = |name: &str, default: f32| -> Result<f32, ModelError> {
            finite_positive(&k.key(name), k.opt_f32(name)?.unwrap_or(default))
        };
        let rope_freq_base = positive_or("rope.freq_base", 10000.0)?;
        let swa_base_default = match family.switches.swa_rope_base_global {
            true => rope_freq_base,
            false => 10000.0,
        };
        let rope_freq_base_swa = positive_or("rope.freq_base_swa", swa_base_default)?;
        let n_ctx_train = k.count("context_length", 1, MAX_CONTEXT)?;

        let rope_scaling = match k.get("rope.scaling.type") {
            None => RopeScaling::Linear,
            Some(Value::Str("none")) => RopeScaling::None,
            Some(Value::Str("linear")) => RopeScaling::Linear,
            Some(Value::Str("yarn")) => RopeScaling::Yarn,
            Some(v) => {
                return Err(ModelError::BadHParam {
                    key: k.key("rope.scaling.type"),
                    expected: "\"none\", \"linear\" or \"yarn\"".into(),
                    found: format!("{v:?}"),
                })
            }
        };
        let factor = k.opt_f32("rope.scaling.factor")?.unwrap_or(0.0);
        if !(factor.is_finite() && (factor == 0.0 || factor >= 1e-3)) {
            return Err(ModelError::BadHParam {
                key: k.key("rope.scaling.factor"),
                expected: "0 (unset) or a positive factor".into(),
                found: format!("{factor}"),
            });
        }
        let rope_freq_scale = if factor == 0.0 || rope_scaling == RopeScaling::None {
            1.0
        } else {
            1.0 / factor
        };
        let rope_n_ctx_orig = k.count_or(
            "rope.scaling.original_context_length",
            n_ctx_train as u64,
            1,
            MAX_CONTEXT,
        )?;
        let rope_attn_factor = positive_or("rope.scaling.attn_factor", 1.0)?;

        let sliding_window = match k.opt_u64("attention.sliding_window")? {
            None | Some(0) => None,
            Some(w) => Some(in_range(
                &k.key("attention.sliding_window"),
                w,
                1,
                MAX_CONTEXT,
            )?),
        };
        let is_swa = Self::swa_pattern(&k, family.swa_period, n_layer, sliding_window)?;

        let cap = |name: &str| -> Result<Option<f32>, ModelError> {
            match k.opt_f32(name)? {
                None => Ok(None),
                Some(0.0) => Ok(None),
                Some(c) => finite_positive(&k.key(name), c).map(Some),
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
                key: k.key("embedding_length"),
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

        let mut hp = HParams {
            family,
            arch: arch.into(),
            n_layer,
            n_nextn,
            n_embd,
            n_ff: 0,
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
            layers: Vec::new(),
            kv_type: KvCacheType::F16,
            scales: match family.switches.granite_scales {
                true => Scales::from_keys(&k)?,
                false => Scales::default(),
            },
        };
        let Layout { n_ff, layers } = (family.layout)(&k, &hp)?;
        assert_eq!(
            layers.len(),
            n_layer,
            "{arch}: its layout must give every layer"
        );
        hp.n_ff = n_ff;
        hp.layers = layers;
        Ok(hp)
    }

    /// Layer `l`'s attention as the shared keys say it: the heads and their sizes, the window
    /// on a sliding-window layer, Q, K and V from three matrices, no output gate. A family
    /// that differs changes what differs (`AttentionShape { fused_qkv: true, ..hp.attention_shape(l) }`).
    pub fn attention_shape(&self, l: usize) -> AttentionShape {
        AttentionShape {
            n_head: self.n_head,
            n_head_kv: self.n_head_kv,
            head_dim: self.head_dim,
            head_dim_v: self.head_dim_v,
            window: if self.is_swa[l] {
                self.sliding_window
            } else {
                None
            },
            fused_qkv: false,
            output_gate: false,
            rope: true,
        }
    }

    /// The shape of the MTP block that drafts with the family's `nextn` layer (`blk.{n_layer}`);
    /// `None` for a family whose MTP block smolrun does not run.
    pub fn mtp_layer(&self) -> Option<LayerShape> {
        self.family.mtp_layer.map(|shape| shape(self))
    }

    /// Which layers use the sliding window. The file may give a per-layer bool array, or a
    /// period n (layer l is local unless l % n == n - 1); without either, the family's period
    /// (`Family::swa_period`; 0: every layer is windowed).
    fn swa_pattern(
        k: &Keys,
        default_period: usize,
        n_layer: usize,
        window: Option<usize>,
    ) -> Result<Vec<bool>, ModelError> {
        if window.is_none() {
            return Ok(alloc::vec![false; n_layer]);
        }
        let key = k.key("attention.sliding_window_pattern");
        let period = match k.get("attention.sliding_window_pattern") {
            Some(Value::Array(a)) => {
                let flags: Vec<bool> = a.iter().filter_map(|v| v.as_bool()).collect();
                if flags.len() != n_layer {
                    return Err(ModelError::BadHParam {
                        key,
                        expected: format!("{n_layer} booleans (one per layer)"),
                        found: format!("an array of {} ({} booleans)", a.len(), flags.len()),
                    });
                }
                return Ok(flags);
            }
            Some(v) => match v.as_u64() {
                Some(p) => in_range(&key, p, 0, MAX_LAYERS)?,
                None => {
                    return Err(ModelError::BadHParam {
                        key,
                        expected: "an integer period or a bool array".into(),
                        found: v.type_name().into(),
                    })
                }
            },
            None => default_period,
        };
        Ok((0..n_layer)
            .map(|l| period == 0 || l % period < period - 1)
            .collect())
    }
}
