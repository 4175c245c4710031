//! Qwen3 (dense): no Q/K/V biases; instead each Q and K head is RMS-normed before RoPE
//! (QK-norm), NeoX's RoPE order. llama.cpp: src/models/qwen3.cpp.

use super::{Family, Switches};

pub static FAMILY: Family = Family {
    switches: Switches {
        qk_norm: true,
        ..Switches::PLAIN
    },
    layout: super::attention_and_dense_ffn,
    ffn_norm: "ffn_norm.weight",
    output_norm: "output_norm.weight",
    swa_period: 0,
    mtp_layer: None,
};
