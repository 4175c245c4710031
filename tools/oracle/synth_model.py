#!/usr/bin/env python3
"""Writes deterministic synthetic GGUF models for architectures that have no small real file at hand.

    tools/oracle/synth_model.py qwen3|llama|qwen3moe|qwen2moe|bailingmoe2|qwen35|smollm3|phi3|olmoe|lfm2|lfm2moe|smallthinker|granitehybrid|all [--out DIR] [--tokenizer-from QWEN.gguf]

Each model has random weights from a fixed seed and a real tokenizer copied from the Qwen2.5-Coder
0.5B GGUF (tools/fetch-models.sh fetches it). The file is byte-identical on every run with the
same gguf-py and numpy: the random numbers come straight from the PCG64 bit stream (numpy keeps
bit generator streams stable across versions, unlike its distribution methods) and are turned into
floats here. llama.cpp is run on the same files to produce tests/golden/synthetic-<arch>/.

Shapes (small, so a test runs in well under a second per token with scalar kernels):
  both:   n_embd 256, 4 layers, 2 KV heads, head_dim 64, n_ff 512, context 2048, vocab 151936
  qwen3:  8 query heads, so n_head * head_dim = 512 != n_embd (as in the real Qwen3 models);
          QK-norm; NEOX RoPE, base 1e6
  qwen3moe: qwen3's attention; every FFN a mixture of 8 experts of width 128, 2 used per token
          (softmax router, weights normalised over the chosen, as llama.cpp runs qwen3moe); the
          router's weights are larger (std 0.25 on an RMS-normed input of norm ~16: logit std ~4)
          so that routing is decisive, not a near tie that a last-bit difference would flip
  qwen2moe (Qwen1.5-MoE's architecture): Qwen2's attention, 4 query heads (n_head * head_dim =
          n_embd, as llama.cpp's qwen2moe requires), Q/K/V biases, no QK-norm, NEOX RoPE; every FFN a
          mixture of 8 experts of width 128, 2 used per token, a softmax router whose chosen
          probabilities weight the experts unnormalised (router std 0.25, as qwen3moe's), and a
          shared expert of width 256 scaled by sigmoid(ffn_gate_inp_shexp . x) (gate std 0.1: a
          gate logit of std ~1.6, so the sigmoid spreads over (0, 1))
  bailingmoe2 (Ling-mini-2.0's architecture): 4 query heads (n_head * head_dim = n_embd, as the
          fused attn_qkv tensor requires), QK-norm, NEOX RoPE on the first 32 of 64 dimensions;
          layer 0 a dense FFN (leading_dense_block_count 1), layers 1-3 a mixture of 16 experts of
          width 128 in 4 groups, 2 groups and 4 experts used per token, a sigmoid router with a
          selection bias (exp_probs_b, std 0.2: enough to change which experts win), weights
          normalised over the chosen and scaled by 2.5, and one shared expert of width 128 added
          to the routed output; a fifth block is an MTP (nextn) layer that llama.cpp loads and
          skips. Router std 0.15 (logit std ~2.4): sigmoids spread over (0, 1), not saturated,
          so neither the groups' scores nor the experts' are near ties
  qwen35 (Qwen3.5's Gated DeltaNet hybrid): layers 0-2 recurrent (full_attention_interval 4),
          2 key heads and 4 value heads of 32 (dk = dv), conv kernel 4; layer 3 gated full
          attention with 4 query heads (attn_q holds the output gate beside q), QK-norm, IMRoPE
          on 16 of 64 dimensions, base 1e7; post_attention_norm before a SwiGLU FFN (see
          qwen35_layers); a fifth block is the MTP (nextn) layer that drafts the token after next
          (see qwen35_mtp; its own random stream, so the trunk's tensors are those of the file
          without it)
  llama:  4 query heads (n_head * head_dim = n_embd); normal (GPT-J style pairs) RoPE, base 1e4;
          tokenizer pre-type "llama-bpe" and a BOS added. (With the Qwen
          vocabulary llama-bpe gives the same ids as qwen2: they differ only in grouping digits by
          three, and Qwen has no multi-digit tokens. A Llama vocabulary of our own is not at hand;
          Gemma's SPM vocabulary has 262k tokens and is already covered by gemma3-270m.)
  phi3 (Phi-3-mini's architecture): 4 query heads (n_head * head_dim = n_embd, as llama.cpp's
          phi3 requires), 2 KV heads, Q, K and V from one fused attn_qkv, NEOX RoPE, base 1e4; the
          FFN's gate and up in one ffn_up of 2 x 512 rows (gate first); a sliding window of 16 in
          the header, which llama.cpp b11434 ignores for phi3 (so must we); the real Phi-3
          tokenizer (SPM, 32,064 tokens) and chat template, all tokenizer.* keys copied from
          llama.cpp's ggml-vocab-phi-3.gguf
  olmoe (OLMoE's architecture): 4 query and 4 KV heads (Q and K n_embd wide, as their QK-norm
          over the whole projection, n_embd weights, requires), NEOX RoPE; every FFN a mixture of
          16 experts of width 64 (feed_forward_length: llama.cpp's olmoe reads no expert width),
          8 used per token, softmax router, the chosen probabilities unnormalised; pre-type "olmo".
          Its router is softer than the others' (std 0.08: logits of std ~1.3), so that the 8
          chosen of 16 hold ~0.88 of the probability, not ~0.996: weights renormalised over the
          chosen (qwen3moe's rule, not olmoe's) then move the logits beyond logits.rs's MoE bound
  smollm3 (SmolLM3's architecture): llama's attention and FFN in 8 layers, so that two of them
          (3 and 7) are the layers llama.cpp runs without RoPE (every fourth); base 5e6,
          pre-type "llama-bpe" (SmolLM3 has Llama 3's tokenizer), no BOS
  lfm2 (LFM2's architecture, Liquid's short-convolution hybrid): 6 layers, attention at layers 2
          and 5 (LFM2-350M mixes them so: attention.head_count_kv is a per-layer array, 0 on a
          conv layer), the others short convolutions (shortconv.l_cache 3: in_proj to [b | c | x],
          y = c * conv(b * x), out_proj; conv taps F32, std 0.5); attention with per-head QK-norm,
          NEOX RoPE, base 1e6; the final norm named token_embd_norm (llama.cpp's
          LLM_TENSOR_OUTPUT_NORM_LFM2); the Qwen tokenizer, pre-type "qwen2" (LFM2's own
          pre-tokenizer "lfm2", Llama 3's split, would change the synthetic file's bytes)
  lfm2moe (LFM2-8B-A1B's architecture): lfm2's 6 layers (attention at 2 and 5, short convolutions
          of 3 taps elsewhere), layers 0 and 1 a dense FFN (leading_dense_block_count 2, as the real
          model has), layers 2-5 a mixture of 16 experts of width 128, 4 used per token (the real
          model: 32 experts, 4 used): a sigmoid router (expert_gating_func 2, std 0.15 as
          bailingmoe2's) with a selection bias (exp_probs_b, std 0.2) that changes which experts win,
          the chosen sigmoids normalised over the chosen (their sum is ~2, so unnormalised weights
          double the experts' output), no scale, no shared expert; experts' down projections of
          std 2/sqrt(n_ff_exp) so their output is a good share of the residual stream and a routing
          or weighting error shows in the logits; the Qwen tokenizer, pre-type "qwen2"
  smallthinker (SmallThinker-4B-A0.6B's architecture): 8 layers of attention (4 query and 2 KV
          heads of 64, RoPE over whole heads, NEOX order, base 1.5e6, no rope.freq_base_swa: the
          windowed layers use the global base) and a sliding window of 4096 in the header, so
          llama.cpp windows layers 1-3 and 5-7 and runs layers 0 and 4 global and without RoPE;
          every FFN a mixture of 16 ReGLU experts of width 128, 4 used per token, whose softmax
          router (std 0.08 on the un-normed layer input of std ~2: logits of std ~2.6) reads the
          layer's input before attention, weights normalised over the chosen (a sigmoid router,
          as lfm2moe's, saturates on inputs this large: experts whose sigmoids both round to
          within a few ulps of 1 are near ties that last bits decide); experts' down
          projections of std 1/sqrt(n_ff_exp) (not lfm2moe's 2: eight layers of experts that large
          make the file chaotic, a last-bit difference moving later logits by tenths); the Qwen
          tokenizer, pre-type "qwen2"
  granitehybrid (IBM Granite 4.0 H's architecture: Mamba-2 layers between attention layers): 6
          layers of width 128, attention at layers 2 and 5 (attention.head_count_kv a per-layer
          array, 0 on a Mamba-2 layer; 4 query and 2 KV heads of 32, no QK-norm, no RoPE:
          rope.scaling.finetuned false, as the real 4.0 H models), the others Mamba-2 (ssm_in to
          [z | x B C | dt], d_inner 256 = 2 n_embd as llama.cpp requires, 4 heads of 64, state 32,
          2 groups of B and C so each group serves 2 heads, a causal conv of 4 taps with a bias,
          ssm_a = -exp(A_log) with A_log uniform in [-3, 0.5], dt bias std 0.5, D around 1, a
          grouped RMSNorm of 128 per group after the SiLU(z) gate); dense SwiGLU FFNs; Granite's
          scales all set away from 1 (embedding x 1.5, each layer's mixer and FFN output x 0.5
          before the residual add, attention scores x 0.25 instead of 1/sqrt(32), logits / 2:
          the head is written twice as large so the logits keep the other files' gaps); the
          Qwen tokenizer, pre-type "qwen2"

Tensor types are a mix the engine must handle; those the real models already carry (Q4_K, Q6_K,
Q5_0, Q8_0) appear here less, those they lack (F16, BF16, Q4_0, Q4_1, Q5_1) appear more. gguf-py
cannot quantize K-quants, so none are written here; the real models cover Q4_K and Q6_K.

Peaked like a trained model: with plain random weights every next-token distribution is nearly
flat at the top (top-1/top-2 logit gaps of 0.01-0.1 appear within a few steps), so a last-bit
difference in summation order picks another greedy token, which no trained model does that often.
Here each token has a successor (a fixed random permutation of the vocabulary), and the LM head
row of successor(t) points along the input embedding of t. Embeddings (std 2) dominate the
residual stream, so after the last layer the hidden state still points mostly along the current
token's embedding and the successor's logit stands a few units above the rest: greedy decoding
walks successor chains with gaps of several logits, while the 151,936 other tokens still hold
most of the probability mass (top-1 probability ~0.2) and move with the context, which the
logits test compares. Attention and FFN matrices have std 1/sqrt(fan_in), so each layer adds a
context-dependent term of order 1 to the residual stream. Because the head differs from the
input embeddings, both models have their own output.weight; a tied head is covered by the real
gemma3-270m.
"""

import argparse
import hashlib
import math
import os
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T

VOCAB_SOURCE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Qwen3.5-0.8B's shape, and the base of the 2B's below (the same layer plan, heads and types; a
# wider model and the real vocabulary's row count).
QWEN35_08B = dict(
    arch="qwen35", tokenizer="tests/golden/vocab/ggml-vocab-qwen35.gguf",
    seed=0x5157_3508, n_embd=1024, n_layer=24, n_head=8, n_head_kv=2, head_dim=256, n_ff=3584,
    n_ctx=32768, rope_base=10_000_000.0, rms_eps=1e-6, pre="qwen35", add_bos=False,
    n_rot=64, rope_sections=[11, 11, 10, 0], full_attention_interval=4,
    ssm_conv=4, ssm_state=128, ssm_k_heads=16, ssm_v_heads=16, n_nextn=1,
    types=dict(token_embd=T.Q8_0, output=T.Q8_0, attn_q=T.Q8_0, attn_k=T.Q8_0, attn_v=T.Q8_0, attn_output=T.Q8_0,
               attn_qkv=T.Q8_0, attn_gate=T.Q8_0, ssm_alpha=T.F32, ssm_beta=T.F32, ssm_out=T.Q8_0,
               ffn_gate=T.Q8_0, ffn_up=T.Q8_0, ffn_down=T.Q8_0, eh_proj=T.Q8_0),
)

ARCHS = {
    "qwen3": dict(
        seed=0x5157_3301, n_embd=256, n_layer=4, n_head=8, n_head_kv=2, head_dim=64, n_ff=512,
        n_ctx=2048, rope_base=1_000_000.0, rms_eps=1e-6, pre="qwen2", add_bos=False,
        types=dict(token_embd=T.Q8_0, output=T.Q8_0, attn_q=T.F16, attn_k=T.F16, attn_v=T.Q8_0, attn_output=T.Q4_0,
                   ffn_gate=T.Q4_1, ffn_up=T.Q4_1, ffn_down=T.F16),
    ),
    "qwen3moe": dict(
        seed=0x5157_3303, n_embd=256, n_layer=4, n_head=8, n_head_kv=2, head_dim=64, n_ff=512,
        n_ctx=2048, rope_base=1_000_000.0, rms_eps=1e-6, pre="qwen2", add_bos=False,
        n_expert=8, n_expert_used=2, n_ff_exp=128,
        types=dict(token_embd=T.Q8_0, output=T.Q8_0, attn_q=T.F16, attn_k=T.Q8_0, attn_v=T.Q8_0, attn_output=T.Q4_0,
                   ffn_gate_inp=T.F32, ffn_gate_exps=T.Q8_0, ffn_up_exps=T.Q4_0, ffn_down_exps=T.Q5_0),
    ),
    "qwen2moe": dict(
        seed=0x5157_2002, n_embd=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
        n_ctx=2048, rope_base=1_000_000.0, rms_eps=1e-6, pre="qwen2", add_bos=False,
        n_expert=8, n_expert_used=2, n_ff_exp=128, n_ff_shexp=256,
        types=dict(token_embd=T.Q8_0, output=T.Q8_0, attn_q=T.Q8_0, attn_k=T.F16, attn_v=T.Q8_0, attn_output=T.Q5_0,
                   ffn_gate_inp=T.F32, ffn_gate_exps=T.Q4_0, ffn_up_exps=T.Q8_0, ffn_down_exps=T.F16,
                   ffn_gate_shexp=T.Q8_0, ffn_up_shexp=T.Q4_1, ffn_down_shexp=T.Q8_0),
    ),
    "bailingmoe2": dict(
        seed=0xBA11_0002, n_embd=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
        n_ctx=2048, rope_base=600_000.0, rms_eps=1e-6, pre="qwen2", add_bos=False,
        n_expert=16, n_expert_used=4, n_ff_exp=128, n_rot=32, n_dense_lead=1, n_nextn=1,
        n_group=4, n_group_used=2, n_shared=1, n_ff_shexp=128, weights_scale=2.5,
        types=dict(token_embd=T.Q8_0, output=T.Q8_0, attn_qkv=T.Q8_0, attn_output=T.Q4_0,
                   ffn_gate=T.Q8_0, ffn_up=T.Q4_1, ffn_down=T.F16,
                   ffn_gate_inp=T.F32, ffn_gate_exps=T.Q8_0, ffn_up_exps=T.Q4_0, ffn_down_exps=T.Q5_0,
                   ffn_gate_shexp=T.Q4_1, ffn_up_shexp=T.Q8_0, ffn_down_shexp=T.F16, eh_proj=T.F16),
    ),
    "qwen35": dict(
        seed=0x5157_3501, n_embd=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
        n_ctx=2048, rope_base=10_000_000.0, rms_eps=1e-6, pre="qwen2", add_bos=False,
        n_rot=16, rope_sections=[3, 3, 2, 0], full_attention_interval=4,
        ssm_conv=4, ssm_state=32, ssm_k_heads=2, ssm_v_heads=4, n_nextn=1,
        types=dict(token_embd=T.Q8_0, output=T.Q8_0, attn_q=T.F16, attn_k=T.Q8_0, attn_v=T.Q8_0, attn_output=T.Q4_0,
                   attn_qkv=T.Q8_0, attn_gate=T.F16, ssm_alpha=T.F32, ssm_beta=T.F16, ssm_out=T.Q4_1,
                   ffn_gate=T.Q8_0, ffn_up=T.Q4_1, ffn_down=T.F16, eh_proj=T.Q8_0),
    ),
    # Qwen3.5-0.8B's shape (24 layers of 1024, three recurrent of every four with 16 key and 16
    # value heads of 128, gated attention with 8 query and 2 KV heads of 256, IMRoPE on 64
    # dimensions in sections [11, 11, 10], FFN 3584) with llama.cpp's qwen35 test vocabulary
    # (151,936 Qwen tokens, pre-tokenizer qwen35; the real model's has 248,320). For speed and
    # memory measurements, not CI: 891 MB in Q8_0 with its MTP layer (447 MB of tensor data in Q4_K:
    # `smolrun gguf requant` makes that file).
    # Not generated by `all`.
    "qwen35-0.8b": QWEN35_08B,
    # Qwen3.5-2B's shape as its published config reads (recalled, not checked against the file:
    # no network here): 24 layers of 2048, three recurrent of every four with 16 key and 16 value
    # heads of 128, gated attention with 8 query and 2 KV heads of 256, FFN 6144, its MTP layer,
    # and a vocabulary of 248,320 rows: llama.cpp's qwen35 test vocabulary (151,936 tokens) padded
    # with normal tokens <|pad_N|> to the real model's row count, so the embedding and the LM
    # head are the real model's size (the tokens past 151,935 are never produced by text). For the
    # device table (tools/device-table.sh), not CI: ~2.6 GB in Q8_0 (`smolrun gguf requant` makes
    # its Q4_K file). Not generated by `all`.
    "qwen35-2b": dict(
        QWEN35_08B, seed=0x5157_3502, n_embd=2048, n_ff=6144, pad_vocab=248_320,
    ),
    "smollm3": dict(
        seed=0x5A01_3003, n_embd=256, n_layer=8, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
        n_ctx=2048, rope_base=5_000_000.0, rms_eps=1e-6, pre="llama-bpe", add_bos=False,
        types=dict(token_embd=T.Q8_0, output=T.Q8_0, attn_q=T.Q8_0, attn_k=T.F16, attn_v=T.Q8_0,
                   attn_output=T.Q4_1, ffn_gate=T.Q5_0, ffn_up=T.Q8_0, ffn_down=T.Q4_0),
    ),
    # Phi-3-mini's layout at the small shape; its real tokenizer (llama.cpp's
    # ggml-vocab-phi-3.gguf: SPM, 32,064 tokens, BOS, its chat template), copied key for key
    "phi3": dict(
        vocab_file="tests/golden/vocab/ggml-vocab-phi-3.gguf",
        seed=0x9813_0003, n_embd=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
        n_ctx=4096, rope_base=10_000.0, rms_eps=1e-5, sliding_window=16,
        types=dict(token_embd=T.Q8_0, output=T.Q8_0, attn_qkv=T.Q8_0, attn_output=T.Q4_0,
                   ffn_up=T.Q5_0, ffn_down=T.F16),
    ),
    "olmoe": dict(
        seed=0x01E0_0001, n_embd=256, n_layer=4, n_head=4, n_head_kv=4, head_dim=64, n_ff=64,
        n_ctx=4096, rope_base=10_000.0, rms_eps=1e-5, pre="olmo", add_bos=False,
        n_expert=16, n_expert_used=8, n_ff_exp=64, router_std=0.08,
        types=dict(token_embd=T.Q8_0, output=T.Q8_0, attn_q=T.Q8_0, attn_k=T.Q4_1, attn_v=T.F16, attn_output=T.Q8_0,
                   ffn_gate_inp=T.F32, ffn_gate_exps=T.Q4_0, ffn_up_exps=T.Q8_0, ffn_down_exps=T.Q5_1),
    ),
    # Qwen3.5-MoE (Qwen3.5-35B-A3B's layout at toy size): qwen35's hybrid blocks with a softmax
    # router over 16 experts, 4 used, normalised over the chosen, and a sigmoid-gated shared
    # expert; no MTP block.
    "qwen35moe": dict(
        seed=0x5157_35E0, n_embd=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
        n_ctx=2048, rope_base=10_000_000.0, rms_eps=1e-6, pre="qwen2", add_bos=False,
        n_rot=16, rope_sections=[3, 3, 2, 0], full_attention_interval=4,
        ssm_conv=4, ssm_state=32, ssm_k_heads=2, ssm_v_heads=4, n_nextn=0,
        n_expert=16, n_expert_used=4, n_ff_exp=128, n_ff_shexp=256,
        types=dict(token_embd=T.Q8_0, output=T.Q8_0, attn_q=T.F16, attn_k=T.Q8_0, attn_v=T.Q8_0, attn_output=T.Q4_0,
                   attn_qkv=T.Q8_0, attn_gate=T.F16, ssm_alpha=T.F32, ssm_beta=T.F16, ssm_out=T.Q4_1,
                   ffn_gate_inp=T.F32, ffn_gate_exps=T.Q8_0, ffn_up_exps=T.Q4_0, ffn_down_exps=T.Q5_0,
                   ffn_gate_shexp=T.Q8_0, ffn_up_shexp=T.Q4_1, ffn_down_shexp=T.F16),
    ),
    "lfm2": dict(
        seed=0x1F02_0001, n_embd=256, n_layer=6, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
        n_ctx=4096, rope_base=1_000_000.0, rms_eps=1e-5, pre="qwen2", add_bos=False,
        attention_layers=[2, 5], l_cache=3,
        types=dict(token_embd=T.Q8_0, output=T.Q8_0, attn_q=T.Q8_0, attn_k=T.F16, attn_v=T.Q8_0,
                   attn_output=T.Q4_1, shortconv_in_proj=T.Q8_0, shortconv_out_proj=T.Q5_0,
                   ffn_gate=T.Q4_0, ffn_up=T.Q8_0, ffn_down=T.F16),
    ),
    "lfm2moe": dict(
        seed=0x1F02_E001, n_embd=256, n_layer=6, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
        n_ctx=4096, rope_base=1_000_000.0, rms_eps=1e-5, pre="qwen2", add_bos=False,
        attention_layers=[2, 5], l_cache=3, n_dense_lead=2,
        n_expert=16, n_expert_used=4, n_ff_exp=128,
        types=dict(token_embd=T.Q8_0, output=T.Q8_0, attn_q=T.F16, attn_k=T.Q8_0, attn_v=T.Q8_0,
                   attn_output=T.Q5_0, shortconv_in_proj=T.Q8_0, shortconv_out_proj=T.Q4_1,
                   ffn_gate=T.Q8_0, ffn_up=T.Q4_0, ffn_down=T.F16,
                   ffn_gate_inp=T.F32, ffn_gate_exps=T.Q8_0, ffn_up_exps=T.Q4_1, ffn_down_exps=T.Q5_0),
    ),
    "smallthinker": dict(
        seed=0x5A11_7001, n_embd=256, n_layer=8, n_head=4, n_head_kv=2, head_dim=64, n_ff=128,
        n_ctx=4096, rope_base=1_500_000.0, rms_eps=1e-6, pre="qwen2", add_bos=False,
        sliding_window=4096, n_expert=16, n_expert_used=4, n_ff_exp=128,
        types=dict(token_embd=T.Q8_0, output=T.Q8_0, attn_q=T.Q8_0, attn_k=T.F16, attn_v=T.Q8_0,
                   attn_output=T.Q4_0, ffn_gate_inp=T.F32, ffn_gate_exps=T.Q4_1, ffn_up_exps=T.Q8_0,
                   ffn_down_exps=T.Q5_0),
    ),
    "granitehybrid": dict(
        seed=0x6A41_7E01, n_embd=128, n_layer=6, n_head=4, n_head_kv=2, head_dim=32, n_ff=256,
        n_ctx=4096, rope_base=10_000.0, rms_eps=1e-5, pre="qwen2", add_bos=False,
        attention_layers=[2, 5], ssm_conv=4, ssm_state=32, ssm_heads=4, ssm_groups=2,
        embedding_scale=1.5, residual_scale=0.5, attention_scale=0.25, logit_scale=2.0,
        types=dict(token_embd=T.Q8_0, output=T.Q8_0, attn_q=T.Q8_0, attn_k=T.F16, attn_v=T.Q8_0,
                   attn_output=T.Q4_1, ssm_in=T.Q8_0, ssm_out=T.Q5_0,
                   ffn_gate=T.Q4_0, ffn_up=T.Q8_0, ffn_down=T.F16),
    ),
    "llama": dict(
        seed=0x11A3_A001, n_embd=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
        n_ctx=2048, rope_base=10_000.0, rms_eps=1e-5, pre="llama-bpe", add_bos=True,
        types=dict(token_embd=T.Q4_0, output=T.Q4_1, attn_q=T.Q8_0, attn_k=T.Q8_0, attn_v=T.BF16,
                   attn_output=T.Q5_1, ffn_gate=T.Q4_0, ffn_up=T.Q5_0, ffn_down=T.BF16),
    ),
}


# Router weights of the synthetic mixture of experts (see the module docs).
ROUTER_STD = 0.25
# bailingmoe2's sigmoid router and its selection bias (see the module docs).
SIGMOID_ROUTER_STD = 0.15
PROBS_BIAS_STD = 0.2
# lfm2moe's experts' down projections (see the module docs)
LFM2MOE_DOWN_GAIN = 2.0
# smallthinker's router on the un-normed layer input (see the module docs)
EARLY_ROUTER_STD = 0.08
# qwen2moe's shared-expert gate (see the module docs).
SHEXP_GATE_STD = 0.1

# See the module docs: input embeddings dominate the residual stream, and the head row of each
# token's successor carries the direction of its embedding.
EMBD_STD = 2.0
HEAD_NOISE_STD = 0.05
HEAD_GAIN = 0.7

# qwen35's MTP block (see qwen35_mtp): its own random stream, and eh_proj's two identity gains.
MTP_SEED_XOR = 0x4D54_5000
MTP_E_GAIN = 2.0
MTP_H_GAIN = 1.9
MTP_EH_NOISE_STD = 1.0


class Random:
    """Floats from the raw PCG64 stream: stable across numpy versions and platforms."""

    def __init__(self, seed):
        self.bits = np.random.PCG64(seed)

    def uniform(self, shape):
        """Uniform in [-1, 1), as float64."""
        n = int(np.prod(shape))
        raw = self.bits.random_raw(n)
        raw >>= np.uint64(11)  # 53 random bits
        x = raw.astype(np.float64)
        x *= 2.0 ** -52
        x -= 1.0
        return x.reshape(shape)

    def weight(self, shape, std):
        # a uniform on [-a, a) has std a / sqrt(3)
        return (self.uniform(shape) * (std * np.sqrt(3.0))).astype(np.float32)


def read_kv(path, wanted):
    """The metadata values named in `wanted` from a GGUF file's header (gguf.GGUFReader would parse
    every tensor and array element into numpy views, which takes tens of seconds for a 151k vocab)."""
    import struct

    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # the metadata of any model we copy from is far smaller
    if data[:4] != b"GGUF":
        sys.exit(f"synth_model: {path} is not a GGUF file")
    pos = 8

    def take(fmt):
        nonlocal pos
        (v,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = take("<Q")
        pos += n
        return data[pos - n:pos].decode("utf-8")

    def value(vtype, keep):
        nonlocal pos
        if vtype == 8:
            return string()
        if vtype == 9:
            itype, n = take("<I"), take("<Q")
            if itype == 8:
                items = [string() for _ in range(n)]
                return items if keep else None
            size = struct.calcsize(scalar[itype])
            pos += n * size
            return np.frombuffer(data, scalar[itype], n, pos - n * size).tolist() if keep else None
        return take(scalar[vtype])

    _, n_kv = take("<Q"), take("<Q")
    found = {}
    for _ in range(n_kv):
        key = string()
        found[key] = value(take("<I"), key in wanted)
    missing = [k for k in wanted if k not in found]
    if missing:
        sys.exit(f"synth_model: {path} has no key {missing[0]}; expected the Qwen2.5-Coder 0.5B GGUF")
    return {k: found[k] for k in wanted}


def write_tokenizer(w, tok, pre, add_bos):
    """A byte-level BPE tokenizer's fields (read_tokenizer's) into GGUFWriter `w`, in the order
    every writer here uses (the files' bytes depend on it)."""
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tok["tokens"])
    w.add_token_types(tok["token_type"])
    w.add_token_merges(tok["merges"])
    w.add_bos_token_id(tok["bos"])
    w.add_eos_token_id(tok["eos"])
    w.add_pad_token_id(tok["pad"])
    w.add_add_bos_token(add_bos)


def read_tokenizer(path):
    """The tokenizer fields of a real GGUF: tokens, token types, merges, special ids."""
    keys = dict(tokens="tokenizer.ggml.tokens", token_type="tokenizer.ggml.token_type",
                merges="tokenizer.ggml.merges", bos="tokenizer.ggml.bos_token_id",
                eos="tokenizer.ggml.eos_token_id", pad="tokenizer.ggml.padding_token_id",
                model="tokenizer.ggml.model")
    kv = read_kv(path, set(keys.values()))
    tok = {name: kv[key] for name, key in keys.items()}
    if tok["model"] != "gpt2":
        sys.exit(f"synth_model: {path}: tokenizer.ggml.model is {tok['model']!r}, expected 'gpt2'")
    return tok


def read_vocab_file(path):
    """Every tokenizer.* key of a vocabulary-only GGUF, to copy as it is (an SPM vocabulary has
    scores instead of merges, and may carry its chat template)."""
    r = gguf.GGUFReader(path)
    fields = []
    for key, f in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = f.types[0]
        sub = f.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        fields.append((key, f.contents(), vtype, sub))
    tokens = next(v for k, v, _, _ in fields if k == "tokenizer.ggml.tokens")
    return {"tokens": tokens, "fields": fields}


def quantize(data, qtype):
    if qtype == T.F32:
        return data.astype(np.float32), T.F32
    if qtype == T.F16:
        return data.astype(np.float16), T.F16
    # gguf-py returns the packed bytes as a uint8 array shaped [rows, bytes per row]
    packed = gguf.quants.quantize(data, qtype)
    return packed, qtype


def pad_vocab(tok, n):
    """The tokenizer with tokens <|pad_N|> appended up to n tokens, as normal tokens (most of the
    real model's extra rows are ordinary multilingual tokens; control tokens would all be forced
    into a pruned head)."""
    tok = dict(tok)
    extra = n - len(tok["tokens"])
    tok["tokens"] = list(tok["tokens"]) + [f"<|pad_{i}|>" for i in range(len(tok["tokens"]), n)]
    tok["token_type"] = list(tok["token_type"]) + [1] * extra  # NORMAL
    return tok


def build(name, tok, out_path):
    cfg = ARCHS[name]
    if "pad_vocab" in cfg:
        tok = pad_vocab(tok, cfg["pad_vocab"])
    arch = cfg.get("arch", name)
    rng = Random(cfg["seed"])
    n_embd, n_ff, hd = cfg["n_embd"], cfg["n_ff"], cfg["head_dim"]
    n_q, n_kv = cfg["n_head"] * hd, cfg["n_head_kv"] * hd
    n_vocab = len(tok["tokens"])
    types = cfg["types"]

    tmp = out_path + ".tmp"
    w = gguf.GGUFWriter(tmp, arch)
    w.add_name(f"smolrun synthetic {arch}")
    w.add_description("random weights from a fixed seed (tools/oracle/synth_model.py); tokenizer of "
                      + (os.path.basename(cfg["vocab_file"]) if "vocab_file" in cfg else "Qwen2.5-Coder"))
    w.add_context_length(cfg["n_ctx"])
    w.add_embedding_length(n_embd)
    w.add_block_count(cfg["n_layer"] + cfg.get("n_nextn", 0))
    w.add_feed_forward_length(n_ff)
    w.add_head_count(cfg["n_head"])
    if arch in ("lfm2", "lfm2moe", "granitehybrid"):
        # per layer: 0 marks a short-convolution (lfm2) or Mamba-2 (granitehybrid) layer
        w.add_head_count_kv([cfg["n_head_kv"] if i in cfg["attention_layers"] else 0
                             for i in range(cfg["n_layer"])])
        if "l_cache" in cfg:
            w.add_uint32(f"{arch}.shortconv.l_cache", cfg["l_cache"])
    else:
        w.add_head_count_kv(cfg["n_head_kv"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(cfg.get("n_rot", hd))
    if arch in ("qwen35", "qwen35moe"):
        w.add_rope_dimension_sections(cfg["rope_sections"])
        w.add_full_attention_interval(cfg["full_attention_interval"])
        w.add_ssm_conv_kernel(cfg["ssm_conv"])
        w.add_ssm_state_size(cfg["ssm_state"])
        w.add_ssm_group_count(cfg["ssm_k_heads"])
        w.add_ssm_time_step_rank(cfg["ssm_v_heads"])
        w.add_ssm_inner_size(cfg["ssm_state"] * cfg["ssm_v_heads"])
        w.add_nextn_predict_layers(cfg["n_nextn"])
    if arch == "granitehybrid":
        w.add_ssm_conv_kernel(cfg["ssm_conv"])
        w.add_ssm_state_size(cfg["ssm_state"])
        w.add_ssm_group_count(cfg["ssm_groups"])
        w.add_ssm_time_step_rank(cfg["ssm_heads"])
        w.add_ssm_inner_size(2 * n_embd)
        w.add_embedding_scale(cfg["embedding_scale"])
        w.add_residual_scale(cfg["residual_scale"])
        w.add_attention_scale(cfg["attention_scale"])
        w.add_logit_scale(cfg["logit_scale"])
        w.add_rope_scaling_finetuned(False)
    w.add_rope_freq_base(cfg["rope_base"])
    w.add_layer_norm_rms_eps(cfg["rms_eps"])
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0 if arch == "llama" else gguf.LlamaFileType.MOSTLY_Q8_0)
    moe = "n_expert" in cfg
    if moe:
        w.add_expert_count(cfg["n_expert"])
        w.add_expert_used_count(cfg["n_expert_used"])
        w.add_expert_feed_forward_length(cfg["n_ff_exp"])
    if arch in ("qwen2moe", "qwen35moe"):
        w.add_expert_shared_feed_forward_length(cfg["n_ff_shexp"])
    if arch == "bailingmoe2":
        w.add_leading_dense_block_count(cfg["n_dense_lead"])
        w.add_nextn_predict_layers(cfg["n_nextn"])
        w.add_expert_group_count(cfg["n_group"])
        w.add_expert_group_used_count(cfg["n_group_used"])
        w.add_expert_shared_count(cfg["n_shared"])
        w.add_expert_shared_feed_forward_length(cfg["n_ff_shexp"])
        w.add_expert_weights_scale(cfg["weights_scale"])
        w.add_expert_weights_norm(True)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if arch == "lfm2moe":
        w.add_leading_dense_block_count(cfg["n_dense_lead"])
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if arch == "smallthinker":
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)

    if "sliding_window" in cfg:
        w.add_sliding_window(cfg["sliding_window"])
    if "fields" in tok:
        for key, value, vtype, sub in tok["fields"]:
            w.add_key_value(key, value, vtype, sub)
    else:
        write_tokenizer(w, tok, cfg["pre"], cfg["add_bos"])

    def tensor(name, kind, data):
        packed, qtype = quantize(data, types.get(kind, T.F32))
        w.add_tensor(name, packed, raw_dtype=qtype)

    def norm_weight(n):
        # around 1, not exactly 1, so a kernel that ignores the norm weight is caught
        return (1.0 + 0.1 * rng.uniform((n,))).astype(np.float32)

    # ggml shapes are [cols, rows]; numpy arrays here are [rows, cols] (row = one output)
    embd = rng.weight((n_vocab, n_embd), EMBD_STD)
    tensor("token_embd.weight", "token_embd", embd)
    if arch == "bailingmoe2":
        bailing_layers(cfg, rng, tensor, norm_weight)
    if arch in ("qwen35", "qwen35moe"):
        qwen35_layers(cfg, rng, tensor, norm_weight)
    if arch in ("lfm2", "lfm2moe"):
        lfm2_layers(cfg, rng, tensor, norm_weight)
    if arch == "smallthinker":
        smallthinker_layers(cfg, rng, tensor, norm_weight)
    if arch == "granitehybrid":
        granitehybrid_layers(cfg, rng, tensor, norm_weight)
    for i in range(cfg["n_layer"] if arch not in ("bailingmoe2", "qwen35", "qwen35moe", "lfm2", "lfm2moe", "smallthinker", "granitehybrid") else 0):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", "norm", norm_weight(n_embd))
        if arch == "phi3":
            tensor(p + "attn_qkv.weight", "attn_qkv", rng.weight((n_q + 2 * n_kv, n_embd), 1.0 / np.sqrt(n_embd)))
        else:
            tensor(p + "attn_q.weight", "attn_q", rng.weight((n_q, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "attn_k.weight", "attn_k", rng.weight((n_kv, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "attn_v.weight", "attn_v", rng.weight((n_kv, n_embd), 1.0 / np.sqrt(n_embd)))
        if arch == "qwen2moe":
            tensor(p + "attn_q.bias", "bias", rng.weight((n_q,), 0.5))
            tensor(p + "attn_k.bias", "bias", rng.weight((n_kv,), 0.5))
            tensor(p + "attn_v.bias", "bias", rng.weight((n_kv,), 0.5))
        if arch in ("qwen3", "qwen3moe"):
            tensor(p + "attn_q_norm.weight", "norm", norm_weight(hd))
            tensor(p + "attn_k_norm.weight", "norm", norm_weight(hd))
        if arch == "olmoe":
            # over the whole projection (n_q = n_kv = n_embd here)
            tensor(p + "attn_q_norm.weight", "norm", norm_weight(n_q))
            tensor(p + "attn_k_norm.weight", "norm", norm_weight(n_kv))
        tensor(p + "attn_output.weight", "attn_output", rng.weight((n_embd, n_q), 1.0 / np.sqrt(n_q)))
        tensor(p + "ffn_norm.weight", "norm", norm_weight(n_embd))
        if moe:
            n_e, n_fe = cfg["n_expert"], cfg["n_ff_exp"]
            tensor(p + "ffn_gate_inp.weight", "ffn_gate_inp", rng.weight((n_e, n_embd), cfg.get("router_std", ROUTER_STD)))
            # numpy [expert, rows, cols] = ggml [cols, rows, expert]
            tensor(p + "ffn_gate_exps.weight", "ffn_gate_exps", rng.weight((n_e, n_fe, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_up_exps.weight", "ffn_up_exps", rng.weight((n_e, n_fe, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_down_exps.weight", "ffn_down_exps", rng.weight((n_e, n_embd, n_fe), 1.0 / np.sqrt(n_fe)))
            if arch == "qwen2moe":
                n_fs = cfg["n_ff_shexp"]
                tensor(p + "ffn_gate_inp_shexp.weight", "ffn_gate_inp", rng.weight((n_embd,), SHEXP_GATE_STD))
                tensor(p + "ffn_gate_shexp.weight", "ffn_gate_shexp", rng.weight((n_fs, n_embd), 1.0 / np.sqrt(n_embd)))
                tensor(p + "ffn_up_shexp.weight", "ffn_up_shexp", rng.weight((n_fs, n_embd), 1.0 / np.sqrt(n_embd)))
                tensor(p + "ffn_down_shexp.weight", "ffn_down_shexp", rng.weight((n_embd, n_fs), 1.0 / np.sqrt(n_fs)))
        elif arch == "phi3":
            # rows: the gate's n_ff, then the up's n_ff
            tensor(p + "ffn_up.weight", "ffn_up", rng.weight((2 * n_ff, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_down.weight", "ffn_down", rng.weight((n_embd, n_ff), 1.0 / np.sqrt(n_ff)))
        else:
            tensor(p + "ffn_gate.weight", "ffn_gate", rng.weight((n_ff, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_up.weight", "ffn_up", rng.weight((n_ff, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_down.weight", "ffn_down", rng.weight((n_embd, n_ff), 1.0 / np.sqrt(n_ff)))
    # LFM2's final norm has the name llama.cpp gives LLM_TENSOR_OUTPUT_NORM_LFM2
    tensor("token_embd_norm.weight" if arch in ("lfm2", "lfm2moe") else "output_norm.weight", "norm", norm_weight(n_embd))
    # LM head: a small random row for every token, plus, for successor(t), the direction of t's
    # input embedding (see the module docs); argsort of raw 64-bit draws is a permutation
    # without ties, identical on every platform
    head = rng.weight((n_vocab, n_embd), HEAD_NOISE_STD)
    successor = np.argsort(rng.bits.random_raw(n_vocab), kind="stable")
    # row norms with math.fsum (exactly rounded): numpy's SIMD reductions may round differently
    # on another CPU, and the file must be byte-identical everywhere
    squares = embd.astype(np.float64) ** 2
    norms = np.sqrt(np.array([math.fsum(row) for row in squares]))
    direction = embd.astype(np.float64) / norms[:, None]
    head[successor] += (HEAD_GAIN * direction).astype(np.float32)
    if "logit_scale" in cfg:
        # granitehybrid divides the logits by logit_scale: the head makes up for it
        head *= np.float32(cfg["logit_scale"])
    tensor("output.weight", "output", head)
    if arch == "qwen35":
        qwen35_mtp(cfg, embd, tensor)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out_path)


def bailing_layers(cfg, rng, tensor, norm_weight):
    """bailingmoe2's blocks: fused QKV, dense leading layers, then sigmoid-routed experts in groups
    with a shared expert; the last `n_nextn` blocks are MTP layers (a MoE block plus the nextn
    tensors) that inference skips."""
    n_embd, n_ff, hd = cfg["n_embd"], cfg["n_ff"], cfg["head_dim"]
    n_q, n_kv = cfg["n_head"] * hd, cfg["n_head_kv"] * hd
    for i in range(cfg["n_layer"] + cfg["n_nextn"]):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", "norm", norm_weight(n_embd))
        tensor(p + "attn_qkv.weight", "attn_qkv", rng.weight((n_q + 2 * n_kv, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "attn_q_norm.weight", "norm", norm_weight(hd))
        tensor(p + "attn_k_norm.weight", "norm", norm_weight(hd))
        tensor(p + "attn_output.weight", "attn_output", rng.weight((n_embd, n_q), 1.0 / np.sqrt(n_q)))
        tensor(p + "ffn_norm.weight", "norm", norm_weight(n_embd))
        if i < cfg["n_dense_lead"]:
            tensor(p + "ffn_gate.weight", "ffn_gate", rng.weight((n_ff, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_up.weight", "ffn_up", rng.weight((n_ff, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_down.weight", "ffn_down", rng.weight((n_embd, n_ff), 1.0 / np.sqrt(n_ff)))
        else:
            n_e, n_fe, n_fs = cfg["n_expert"], cfg["n_ff_exp"], cfg["n_ff_shexp"] * cfg["n_shared"]
            tensor(p + "ffn_gate_inp.weight", "ffn_gate_inp", rng.weight((n_e, n_embd), SIGMOID_ROUTER_STD))
            tensor(p + "exp_probs_b.bias", "exp_probs_b", rng.weight((n_e,), PROBS_BIAS_STD))
            tensor(p + "ffn_gate_exps.weight", "ffn_gate_exps", rng.weight((n_e, n_fe, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_up_exps.weight", "ffn_up_exps", rng.weight((n_e, n_fe, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_down_exps.weight", "ffn_down_exps", rng.weight((n_e, n_embd, n_fe), 1.0 / np.sqrt(n_fe)))
            tensor(p + "ffn_gate_shexp.weight", "ffn_gate_shexp", rng.weight((n_fs, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_up_shexp.weight", "ffn_up_shexp", rng.weight((n_fs, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_down_shexp.weight", "ffn_down_shexp", rng.weight((n_embd, n_fs), 1.0 / np.sqrt(n_fs)))
        if i >= cfg["n_layer"]:
            tensor(p + "nextn.eh_proj.weight", "eh_proj", rng.weight((n_embd, 2 * n_embd), 1.0 / np.sqrt(2 * n_embd)))
            tensor(p + "nextn.enorm.weight", "norm", norm_weight(n_embd))
            tensor(p + "nextn.hnorm.weight", "norm", norm_weight(n_embd))
            tensor(p + "layer_output_norm.weight", "norm", norm_weight(n_embd))


def qwen35_layers(cfg, rng, tensor, norm_weight):
    """qwen35's blocks (Qwen3.5, a Gated DeltaNet hybrid): every `full_attention_interval`-th block
    is gated full attention, the others recurrent. Each block: attn_norm, mixer, residual,
    post_attention_norm, SwiGLU FFN, residual.
    Recurrent mixer: attn_qkv [q k v] (2 key heads, 4 value heads of 32: a value head reads key
    head h % 2), attn_gate z, a causal depthwise conv of 4 taps (F32, std 0.5 per tap: the conv
    output keeps the projection's scale), ssm_a = -exp(A_log) with A_log uniform in [-3, 0.5] and
    ssm_dt bias std 0.5: decays exp(softplus(alpha + dt) * a) spread over ~0.2 .. 0.98, so the
    state carries several tokens back; ssm_beta and ssm_alpha std 1/sqrt(n_embd) (logits of
    std ~1). Full attention: attn_q holds [q | gate] per head (2 * head_dim rows each),
    QK-norm, IMRoPE on the first 16 of 64 dimensions (sections [3, 3, 2, 0] cover them all)."""
    n_embd, n_ff, hd = cfg["n_embd"], cfg["n_ff"], cfg["head_dim"]
    n_q, n_kv = cfg["n_head"] * hd, cfg["n_head_kv"] * hd
    d_state, h_k, h_v = cfg["ssm_state"], cfg["ssm_k_heads"], cfg["ssm_v_heads"]
    key_dim, value_dim = d_state * h_k, d_state * h_v
    conv_dim = 2 * key_dim + value_dim
    for i in range(cfg["n_layer"]):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", "norm", norm_weight(n_embd))
        if (i + 1) % cfg["full_attention_interval"] != 0:
            tensor(p + "attn_qkv.weight", "attn_qkv", rng.weight((conv_dim, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "attn_gate.weight", "attn_gate", rng.weight((value_dim, n_embd), 1.0 / np.sqrt(n_embd)))
            # numpy [channel, tap] = ggml {d_conv, conv_dim}
            tensor(p + "ssm_conv1d.weight", "conv", rng.weight((conv_dim, cfg["ssm_conv"]), 0.5))
            tensor(p + "ssm_dt.bias", "bias", rng.weight((h_v,), 0.5))
            a_log = -1.25 + 1.75 * rng.uniform((h_v,))
            tensor(p + "ssm_a", "bias", (-np.exp(a_log)).astype(np.float32))
            tensor(p + "ssm_beta.weight", "ssm_beta", rng.weight((h_v, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ssm_alpha.weight", "ssm_alpha", rng.weight((h_v, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ssm_norm.weight", "norm", norm_weight(d_state))
            tensor(p + "ssm_out.weight", "ssm_out", rng.weight((n_embd, value_dim), 1.0 / np.sqrt(value_dim)))
        else:
            tensor(p + "attn_q.weight", "attn_q", rng.weight((2 * n_q, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "attn_k.weight", "attn_k", rng.weight((n_kv, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "attn_v.weight", "attn_v", rng.weight((n_kv, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "attn_q_norm.weight", "norm", norm_weight(hd))
            tensor(p + "attn_k_norm.weight", "norm", norm_weight(hd))
            tensor(p + "attn_output.weight", "attn_output", rng.weight((n_embd, n_q), 1.0 / np.sqrt(n_q)))
        tensor(p + "post_attention_norm.weight", "norm", norm_weight(n_embd))
        if "n_expert" in cfg:
            # qwen35moe: routed experts and a gated shared expert (qwen2moe's tensors)
            n_e, n_fe, n_fs = cfg["n_expert"], cfg["n_ff_exp"], cfg["n_ff_shexp"]
            tensor(p + "ffn_gate_inp.weight", "ffn_gate_inp", rng.weight((n_e, n_embd), ROUTER_STD))
            tensor(p + "ffn_gate_exps.weight", "ffn_gate_exps", rng.weight((n_e, n_fe, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_up_exps.weight", "ffn_up_exps", rng.weight((n_e, n_fe, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_down_exps.weight", "ffn_down_exps", rng.weight((n_e, n_embd, n_fe), 1.0 / np.sqrt(n_fe)))
            tensor(p + "ffn_gate_inp_shexp.weight", "ffn_gate_inp", rng.weight((n_embd,), SHEXP_GATE_STD))
            tensor(p + "ffn_gate_shexp.weight", "ffn_gate_shexp", rng.weight((n_fs, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_up_shexp.weight", "ffn_up_shexp", rng.weight((n_fs, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_down_shexp.weight", "ffn_down_shexp", rng.weight((n_embd, n_fs), 1.0 / np.sqrt(n_fs)))
            continue
        tensor(p + "ffn_gate.weight", "ffn_gate", rng.weight((n_ff, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "ffn_up.weight", "ffn_up", rng.weight((n_ff, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "ffn_down.weight", "ffn_down", rng.weight((n_embd, n_ff), 1.0 / np.sqrt(n_ff)))


def lfm2_layers(cfg, rng, tensor, norm_weight):
    """lfm2's blocks: attn_norm (LFM2's operator_norm), then attention (layers in
    `attention_layers`: QK-norm per head) or a short convolution (shortconv.in_proj n_embd ->
    3 n_embd as [b | c | x], shortconv.conv {l_cache, n_embd}, shortconv.out_proj), residual,
    ffn_norm, SwiGLU FFN, residual. lfm2moe: from layer `n_dense_lead` on, the FFN is a mixture
    of experts."""
    n_embd, n_ff, hd = cfg["n_embd"], cfg["n_ff"], cfg["head_dim"]
    n_q, n_kv = cfg["n_head"] * hd, cfg["n_head_kv"] * hd
    for i in range(cfg["n_layer"]):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", "norm", norm_weight(n_embd))
        if i in cfg["attention_layers"]:
            tensor(p + "attn_q.weight", "attn_q", rng.weight((n_q, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "attn_k.weight", "attn_k", rng.weight((n_kv, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "attn_v.weight", "attn_v", rng.weight((n_kv, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "attn_q_norm.weight", "norm", norm_weight(hd))
            tensor(p + "attn_k_norm.weight", "norm", norm_weight(hd))
            tensor(p + "attn_output.weight", "attn_output", rng.weight((n_embd, n_q), 1.0 / np.sqrt(n_q)))
        else:
            # b and c of std ~1 (1/sqrt(n_embd) over a normed input), so y = c * conv(b * x) keeps
            # the scale of x times ~1
            tensor(p + "shortconv.in_proj.weight", "shortconv_in_proj", rng.weight((3 * n_embd, n_embd), 1.0 / np.sqrt(n_embd)))
            # numpy [channel, tap] = ggml {l_cache, n_embd}
            tensor(p + "shortconv.conv.weight", "conv", rng.weight((n_embd, cfg["l_cache"]), 0.5))
            tensor(p + "shortconv.out_proj.weight", "shortconv_out_proj", rng.weight((n_embd, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "ffn_norm.weight", "norm", norm_weight(n_embd))
        if i >= cfg.get("n_dense_lead", cfg["n_layer"]):
            # lfm2moe: sigmoid-routed experts with a selection bias, no shared expert
            n_e, n_fe = cfg["n_expert"], cfg["n_ff_exp"]
            tensor(p + "ffn_gate_inp.weight", "ffn_gate_inp", rng.weight((n_e, n_embd), SIGMOID_ROUTER_STD))
            tensor(p + "exp_probs_b.bias", "exp_probs_b", rng.weight((n_e,), PROBS_BIAS_STD))
            tensor(p + "ffn_gate_exps.weight", "ffn_gate_exps", rng.weight((n_e, n_fe, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_up_exps.weight", "ffn_up_exps", rng.weight((n_e, n_fe, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "ffn_down_exps.weight", "ffn_down_exps", rng.weight((n_e, n_embd, n_fe), LFM2MOE_DOWN_GAIN / np.sqrt(n_fe)))
            continue
        tensor(p + "ffn_gate.weight", "ffn_gate", rng.weight((n_ff, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "ffn_up.weight", "ffn_up", rng.weight((n_ff, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "ffn_down.weight", "ffn_down", rng.weight((n_embd, n_ff), 1.0 / np.sqrt(n_ff)))


def granitehybrid_layers(cfg, rng, tensor, norm_weight):
    """granitehybrid's blocks: attn_norm, then attention (layers in `attention_layers`: plain
    grouped-query attention) or Mamba-2 (ssm_in n_embd -> [z | x B C | dt], ssm_conv1d {d_conv,
    conv channels} and its bias, ssm_dt.bias, ssm_a {1, heads}, ssm_d {1, heads}, ssm_norm
    {d_inner / groups, groups}, ssm_out), residual, ffn_norm, SwiGLU FFN, residual."""
    n_embd, n_ff, hd = cfg["n_embd"], cfg["n_ff"], cfg["head_dim"]
    n_q, n_kv = cfg["n_head"] * hd, cfg["n_head_kv"] * hd
    d_inner, d_state, n_h, n_g = 2 * n_embd, cfg["ssm_state"], cfg["ssm_heads"], cfg["ssm_groups"]
    conv_ch = d_inner + 2 * n_g * d_state
    d_in_proj = 2 * d_inner + 2 * n_g * d_state + n_h
    for i in range(cfg["n_layer"]):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", "norm", norm_weight(n_embd))
        if i in cfg["attention_layers"]:
            tensor(p + "attn_q.weight", "attn_q", rng.weight((n_q, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "attn_k.weight", "attn_k", rng.weight((n_kv, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "attn_v.weight", "attn_v", rng.weight((n_kv, n_embd), 1.0 / np.sqrt(n_embd)))
            tensor(p + "attn_output.weight", "attn_output", rng.weight((n_embd, n_q), 1.0 / np.sqrt(n_q)))
        else:
            tensor(p + "ssm_in.weight", "ssm_in", rng.weight((d_in_proj, n_embd), 1.0 / np.sqrt(n_embd)))
            # numpy [channel, tap] = ggml {d_conv, conv channels}
            tensor(p + "ssm_conv1d.weight", "conv", rng.weight((conv_ch, cfg["ssm_conv"]), 0.5))
            tensor(p + "ssm_conv1d.bias", "bias", rng.weight((conv_ch,), 0.2))
            tensor(p + "ssm_dt.bias", "bias", rng.weight((n_h,), 0.5))
            a_log = -1.25 + 1.75 * rng.uniform((n_h, 1))
            tensor(p + "ssm_a", "bias", (-np.exp(a_log)).astype(np.float32))
            tensor(p + "ssm_d", "bias", (1.0 + 0.5 * rng.uniform((n_h, 1))).astype(np.float32))
            tensor(p + "ssm_norm.weight", "norm", norm_weight(d_inner).reshape(n_g, d_inner // n_g))
            tensor(p + "ssm_out.weight", "ssm_out", rng.weight((n_embd, d_inner), 1.0 / np.sqrt(d_inner)))
        tensor(p + "ffn_norm.weight", "norm", norm_weight(n_embd))
        tensor(p + "ffn_gate.weight", "ffn_gate", rng.weight((n_ff, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "ffn_up.weight", "ffn_up", rng.weight((n_ff, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "ffn_down.weight", "ffn_down", rng.weight((n_embd, n_ff), 1.0 / np.sqrt(n_ff)))


def smallthinker_layers(cfg, rng, tensor, norm_weight):
    """smallthinker's blocks: attn_norm, attention (no QK-norm), residual, ffn_norm, ReGLU experts
    whose router (ffn_gate_inp) reads the block's input before attn_norm, residual."""
    n_embd, hd = cfg["n_embd"], cfg["head_dim"]
    n_q, n_kv = cfg["n_head"] * hd, cfg["n_head_kv"] * hd
    n_e, n_fe = cfg["n_expert"], cfg["n_ff_exp"]
    for i in range(cfg["n_layer"]):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", "norm", norm_weight(n_embd))
        tensor(p + "attn_q.weight", "attn_q", rng.weight((n_q, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "attn_k.weight", "attn_k", rng.weight((n_kv, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "attn_v.weight", "attn_v", rng.weight((n_kv, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "attn_output.weight", "attn_output", rng.weight((n_embd, n_q), 1.0 / np.sqrt(n_q)))
        tensor(p + "ffn_norm.weight", "norm", norm_weight(n_embd))
        tensor(p + "ffn_gate_inp.weight", "ffn_gate_inp", rng.weight((n_e, n_embd), EARLY_ROUTER_STD))
        tensor(p + "ffn_gate_exps.weight", "ffn_gate_exps", rng.weight((n_e, n_fe, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "ffn_up_exps.weight", "ffn_up_exps", rng.weight((n_e, n_fe, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "ffn_down_exps.weight", "ffn_down_exps", rng.weight((n_e, n_embd, n_fe), 1.0 / np.sqrt(n_fe)))


def qwen35_mtp(cfg, embd, tensor):
    """qwen35's MTP block (blk.{n_layer}): a gated full-attention block with its own KV cache whose
    input is nextn.eh_proj over [enorm(embedding of the token just sampled) | hnorm(the trunk's
    final normed hidden state before it)], then nextn.shared_head_norm and the shared LM head
    (llama.cpp's graph_mtp). Its weights come from their own random stream, written after every
    tensor of the trunk, so the trunk's tensors (and the goldens of its logits) do not change.

    Drafts that mean something on random weights: the head row of successor(t) points along t's
    embedding, so an MTP hidden state along the embedding of the token just sampled drafts its
    successor, which is what the trunk's greedy decoding writes next most of the time. eh_proj
    maps the embedding half to MTP_E_GAIN x identity (plus noise) and the hidden-state half to
    MTP_H_GAIN x identity: the trunk's hidden state points along the embedding of the token before
    (whose successor the trunk just wrote), so the two halves pull towards different tokens and
    the context (attention, FFN, both noises) sometimes tips the draft the wrong way: most drafts
    are right, not all."""
    n_embd, n_ff, hd = cfg["n_embd"], cfg["n_ff"], cfg["head_dim"]
    n_q, n_kv = cfg["n_head"] * hd, cfg["n_head_kv"] * hd
    rng = Random(cfg["seed"] ^ MTP_SEED_XOR)

    def norm_weight(n):
        return (1.0 + 0.1 * rng.uniform((n,))).astype(np.float32)

    for i in range(cfg["n_layer"], cfg["n_layer"] + cfg["n_nextn"]):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", "norm", norm_weight(n_embd))
        tensor(p + "attn_q.weight", "attn_q", rng.weight((2 * n_q, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "attn_k.weight", "attn_k", rng.weight((n_kv, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "attn_v.weight", "attn_v", rng.weight((n_kv, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "attn_q_norm.weight", "norm", norm_weight(hd))
        tensor(p + "attn_k_norm.weight", "norm", norm_weight(hd))
        tensor(p + "attn_output.weight", "attn_output", rng.weight((n_embd, n_q), 1.0 / np.sqrt(n_q)))
        tensor(p + "post_attention_norm.weight", "norm", norm_weight(n_embd))
        tensor(p + "ffn_gate.weight", "ffn_gate", rng.weight((n_ff, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "ffn_up.weight", "ffn_up", rng.weight((n_ff, n_embd), 1.0 / np.sqrt(n_embd)))
        tensor(p + "ffn_down.weight", "ffn_down", rng.weight((n_embd, n_ff), 1.0 / np.sqrt(n_ff)))
        # numpy [out, in] = ggml {2 n_embd, n_embd}: the input is [enorm(e) | hnorm(h)]
        eh = rng.weight((n_embd, 2 * n_embd), MTP_EH_NOISE_STD / np.sqrt(2 * n_embd))
        eh[:, :n_embd] += MTP_E_GAIN * np.eye(n_embd, dtype=np.float32)
        eh[:, n_embd:] += MTP_H_GAIN * np.eye(n_embd, dtype=np.float32)
        tensor(p + "nextn.eh_proj.weight", "eh_proj", eh)
        tensor(p + "nextn.enorm.weight", "norm", norm_weight(n_embd))
        tensor(p + "nextn.hnorm.weight", "norm", norm_weight(n_embd))
        tensor(p + "nextn.shared_head_norm.weight", "norm", norm_weight(n_embd))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("arch", choices=[*ARCHS, "all"])
    models = os.environ.get("SMOLRUN_MODELS", os.path.expanduser("~/.cache/smolrun/models"))
    ap.add_argument("--out", default=models, help="output dir (default $SMOLRUN_MODELS or ~/.cache/smolrun/models)")
    ap.add_argument("--tokenizer-from", default=os.path.join(models, VOCAB_SOURCE))
    args = ap.parse_args()

    if not os.path.isfile(args.tokenizer_from):
        sys.exit(f"synth_model: tokenizer source {args.tokenizer_from} is missing; run tools/fetch-models.sh")
    tok = read_tokenizer(args.tokenizer_from)
    os.makedirs(args.out, exist_ok=True)
    for name in [a for a in ARCHS if "tokenizer" not in ARCHS[a]] if args.arch == "all" else [args.arch]:
        path = os.path.join(args.out, f"synthetic-{name}.gguf")
        own = ARCHS[name].get("tokenizer")
        vocab_file = ARCHS[name].get("vocab_file")
        if vocab_file:
            build(name, read_vocab_file(os.path.join(REPO, vocab_file)), path)
        else:
            build(name, read_tokenizer(os.path.join(REPO, own)) if own else tok, path)
        print(f"synth_model: {path} {os.path.getsize(path)} bytes sha256 {sha256(path)}")


if __name__ == "__main__":
    main()
