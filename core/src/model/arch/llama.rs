//! Llama 2 and 3.x, SmolLM2, and the many files written as `llama`: the plain pre-norm
//! transformer (RMS norm, grouped-query attention, a SwiGLU FFN) with RoPE rotating adjacent
//! pairs (llama.cpp's "normal" order; the Qwen and Gemma families rotate the halves of a head).
//! Llama 3's per-pair frequency divisors (`rope_freqs.weight`) and RoPE scaling are the shared
//! loader's. llama.cpp: src/models/llama.cpp.

use super::{Family, Switches};
use crate::math::RopeStyle;

pub static FAMILY: Family = Family {
    switches: Switches {
        rope_style: RopeStyle::Normal,
        ..Switches::PLAIN
    },
    layout: super::attention_and_dense_ffn,
    ffn_norm: "ffn_norm.weight",
    output_norm: "output_norm.weight",
    swa_period: 0,
    mtp_layer: None,
};
