//! Qwen2 and Qwen2.5 (Qwen2.5-Coder too): Llama's layers with biases on Q, K and V, and RoPE
//! over the two halves of each head (NeoX's order). llama.cpp: src/models/qwen2.cpp.

use super::{Family, Switches};

pub static FAMILY: Family = Family {
    switches: Switches {
        qkv_bias: true,
        ..Switches::PLAIN
    },
    layout: super::attention_and_dense_ffn,
    ffn_norm: "ffn_norm.weight",
    output_norm: "output_norm.weight",
    swa_period: 0,
    mtp_layer: None,
};
