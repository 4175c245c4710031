//! Gemma 3: QK-norm; the attention and FFN outputs RMS-normed again before the residual add
//! (`post_attention_norm`, `post_ffw_norm`); the embedding row scaled by sqrt(n_embd); a
//! GELU-tanh gate; Q scaled by 1/sqrt(head_dim) before attention (its order of operations).
//! Five of every six layers attend within a sliding window, with their own RoPE base
//! (`rope.freq_base_swa`) and no RoPE scaling; the file may give its own pattern.
//! llama.cpp: src/models/gemma3.cpp.

use super::{Activation, Family, Switches};

pub static FAMILY: Family = Family {
    switches: Switches {
        qk_norm: true,
        post_norms: true,
        scale_embedding: true,
        activation: Activation::GeluTanh,
        scale_q_before_attention: true,
        ..Switches::PLAIN
    },
    layout: super::attention_and_dense_ffn,
    ffn_norm: "ffn_norm.weight",
    output_norm: "output_norm.weight",
    // Five local layers, then one global.
    swa_period: 6,
    mtp_layer: None,
};
