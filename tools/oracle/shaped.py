#!/usr/bin/env python3
"""Writes a GGUF with the shape of a published small-device model and random weights, for speed
figures against llama.cpp before a real file is at hand (the package registries hold none of
these models). Random weights: the text is noise and nothing about quality follows from it; the
bytes read per token, the kernels reached and the state sizes are the real model's.

    tools/oracle/shaped.py FAMILY [--out FILE] [--type Q4_K_M] [--keep-f16]

FAMILY (shapes from the models' config.json as published):
  lfm2-1.2b      LFM2-1.2B: 16 layers of n_embd 2048, attention (32 query, 8 KV heads of 64,
                 QK-norm) at layers 2, 5, 8, 10, 12, 14, short convolutions of 3 taps elsewhere,
                 SwiGLU FFN of 8192 (12288 auto-adjusted to 2/3), tied embeddings, 65,536 tokens
  lfm2-8b-a1b    LFM2-8B-A1B: 24 layers of n_embd 2048, attention at 2, 6, 10, 14, 18, 21, the
                 first two FFNs dense (7168), then 32 experts of 1792, 4 used per token, sigmoid
                 router with its selection bias; tied embeddings, 65,536 tokens
  smallthinker-4b-a0.6b
                 SmallThinker-4B-A0.6B: 32 layers of n_embd 1536, attention (12 query, 2 KV
                 heads of 128; three of every four layers windowed at 4096), then 32 ReGLU
                 experts of 768, 4 used per token, chosen by a softmax router that reads the
                 layer's input before attention; untied head, Qwen's 151,936 tokens
  granite-4.0-h-1b
                 Granite-4.0-H-1B as its published config reads (recalled, not checked against
                 the file: no network here): 40 layers of n_embd 1536, attention (12 query, 4 KV
                 heads of 128, no RoPE) at layers 9, 19, 29, 39, Mamba-2 elsewhere (48 heads of
                 64, state 128, one group, a conv of 4 taps), SwiGLU FFN of 4096, Granite's
                 four scales, tied embeddings, 100,352 tokens

The tokenizer is Qwen2.5-Coder's, for LFM2 cut to the model's vocabulary size (its first 65,536
tokens and the merges among them; end of text is set to the last token; pre-type "lfm2"):
prompts tokenize into real words, and the LM head has the real model's row count.

The weights are written as F16 (one tensor in RAM at a time), then quantized by the oracle's
llama-quantize (b11434) to --type, as a published file is made: Q4_K_M by default.
"""

import argparse
import os
import subprocess
import sys
import time

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synth_model import VOCAB_SOURCE, read_tokenizer  # noqa: E402

FAMILIES = {
    "lfm2-1.2b": dict(arch="lfm2", name="LFM2-1.2B-shaped", n_embd=2048, n_layer=16, n_head=32,
                      n_head_kv=8, head_dim=64, n_ff=8192, attention_layers=[2, 5, 8, 10, 12, 14],
                      l_cache=3, n_vocab=65536, n_ctx=128000, rope_base=1_000_000.0, rms_eps=1e-5,
                      seed=0x1F02_1200),
    "lfm2-8b-a1b": dict(arch="lfm2moe", name="LFM2-8B-A1B-shaped", n_embd=2048, n_layer=24, n_head=32,
                        n_head_kv=8, head_dim=64, n_ff=7168, attention_layers=[2, 6, 10, 14, 18, 21],
                        l_cache=3, n_vocab=65536, n_ctx=128000, rope_base=1_000_000.0, rms_eps=1e-5,
                        n_dense_lead=2, n_expert=32, n_expert_used=4, n_ff_exp=1792,
                        seed=0x1F02_8A1B),
    "smallthinker-4b-a0.6b": dict(arch="smallthinker", name="SmallThinker-4B-A0.6B-shaped", n_embd=1536,
                                  n_layer=32, n_head=12, n_head_kv=2, head_dim=128, n_ff=768,
                                  n_vocab=151936, n_ctx=32768, rope_base=1_500_000.0, rms_eps=1e-6,
                                  sliding_window=4096, n_expert=32, n_expert_used=4, n_ff_exp=768,
                                  seed=0x5A11_4060),
    "granite-4.0-h-1b": dict(arch="granitehybrid", name="Granite-4.0-H-1B-shaped", n_embd=1536, n_layer=40,
                             n_head=12, n_head_kv=4, head_dim=128, n_ff=4096,
                             attention_layers=[9, 19, 29, 39], ssm_conv=4, ssm_state=128, ssm_heads=48,
                             ssm_groups=1, n_vocab=100352, n_ctx=131072, rope_base=10_000.0,
                             rms_eps=1e-5, seed=0x6A41_1B00),
}


def cut_tokenizer(tok, n_vocab):
    """The first n_vocab tokens and the merges whose parts and result are among them."""
    if n_vocab == len(tok["tokens"]):
        return tok
    tokens = tok["tokens"][:n_vocab]
    have = set(tokens)
    merges = [m for m in tok["merges"]
              if (lambda a, b: a in have and b in have and a + b in have)(*m.split(" ", 1))]
    return dict(tokens=tokens, token_type=tok["token_type"][:n_vocab], merges=merges,
                eos=n_vocab - 1)


def plan(cfg):
    """(name, numpy shape [rows, cols] or [experts, rows, cols], std or 'norm'/'conv'/'bias')."""
    d, hd, f = cfg["n_embd"], cfg["head_dim"], cfg["n_ff"]
    n_q, n_kv = cfg["n_head"] * hd, cfg["n_head_kv"] * hd
    out = [("token_embd.weight", (cfg["n_vocab"], d), 1.0)]
    for i in range(cfg["n_layer"]):
        p = f"blk.{i}."
        out.append((p + "attn_norm.weight", (d,), "norm"))
        if cfg["arch"] == "smallthinker":
            e, fe = cfg["n_expert"], cfg["n_ff_exp"]
            out += [(p + "attn_q.weight", (n_q, d), d ** -0.5), (p + "attn_k.weight", (n_kv, d), d ** -0.5),
                    (p + "attn_v.weight", (n_kv, d), d ** -0.5), (p + "attn_output.weight", (d, n_q), n_q ** -0.5),
                    (p + "ffn_norm.weight", (d,), "norm"), (p + "ffn_gate_inp.weight", (e, d), 0.02),
                    (p + "ffn_gate_exps.weight", (e, fe, d), d ** -0.5), (p + "ffn_up_exps.weight", (e, fe, d), d ** -0.5),
                    (p + "ffn_down_exps.weight", (e, d, fe), fe ** -0.5)]
            continue
        if cfg["arch"] == "granitehybrid" and i not in cfg["attention_layers"]:
            # Mamba-2: ssm_in to [z | x B C | dt], the conv over x B C with its bias, per-head
            # A (negative), D and dt bias, the grouped norm, ssm_out
            d_inner, n_s, n_h, n_g = 2 * d, cfg["ssm_state"], cfg["ssm_heads"], cfg["ssm_groups"]
            conv_ch = d_inner + 2 * n_g * n_s
            out += [(p + "ssm_in.weight", (2 * d_inner + 2 * n_g * n_s + n_h, d), d ** -0.5),
                    (p + "ssm_conv1d.weight", (conv_ch, cfg["ssm_conv"]), "conv"),
                    (p + "ssm_conv1d.bias", (conv_ch,), "bias"), (p + "ssm_dt.bias", (n_h,), "bias"),
                    (p + "ssm_a", (n_h, 1), "neg"), (p + "ssm_d", (n_h, 1), "norm"),
                    (p + "ssm_norm.weight", (n_g, d_inner // n_g), "norm"),
                    (p + "ssm_out.weight", (d, d_inner), d_inner ** -0.5)]
        elif cfg["arch"] == "granitehybrid":
            out += [(p + "attn_q.weight", (n_q, d), d ** -0.5), (p + "attn_k.weight", (n_kv, d), d ** -0.5),
                    (p + "attn_v.weight", (n_kv, d), d ** -0.5), (p + "attn_output.weight", (d, n_q), n_q ** -0.5)]
        elif i in cfg["attention_layers"]:
            out += [(p + "attn_q.weight", (n_q, d), d ** -0.5), (p + "attn_k.weight", (n_kv, d), d ** -0.5),
                    (p + "attn_v.weight", (n_kv, d), d ** -0.5), (p + "attn_q_norm.weight", (hd,), "norm"),
                    (p + "attn_k_norm.weight", (hd,), "norm"), (p + "attn_output.weight", (d, n_q), n_q ** -0.5)]
        else:
            out += [(p + "shortconv.in_proj.weight", (3 * d, d), d ** -0.5),
                    (p + "shortconv.conv.weight", (d, cfg["l_cache"]), "conv"),
                    (p + "shortconv.out_proj.weight", (d, d), d ** -0.5)]
        out.append((p + "ffn_norm.weight", (d,), "norm"))
        if i >= cfg.get("n_dense_lead", cfg["n_layer"]):
            e, fe = cfg["n_expert"], cfg["n_ff_exp"]
            out += [(p + "ffn_gate_inp.weight", (e, d), 0.15), (p + "exp_probs_b.bias", (e,), "bias"),
                    (p + "ffn_gate_exps.weight", (e, fe, d), d ** -0.5), (p + "ffn_up_exps.weight", (e, fe, d), d ** -0.5),
                    (p + "ffn_down_exps.weight", (e, d, fe), fe ** -0.5)]
        else:
            out += [(p + "ffn_gate.weight", (f, d), d ** -0.5), (p + "ffn_up.weight", (f, d), d ** -0.5),
                    (p + "ffn_down.weight", (d, f), f ** -0.5)]
    if cfg["arch"] == "smallthinker":
        out += [("output_norm.weight", (d,), "norm"), ("output.weight", (cfg["n_vocab"], d), d ** -0.5)]
    elif cfg["arch"] == "granitehybrid":
        out.append(("output_norm.weight", (d,), "norm"))
    else:
        # LFM2's final norm has this name (llama.cpp's LLM_TENSOR_OUTPUT_NORM_LFM2); head tied
        out.append(("token_embd_norm.weight", (d,), "norm"))
    return out


def data(rng, shape, kind):
    if kind == "norm":
        return (1.0 + 0.1 * rng.uniform(-1, 1, shape)).astype(np.float32)
    if kind == "conv":
        return rng.uniform(-0.5, 0.5, shape).astype(np.float32)
    if kind == "bias":
        return rng.uniform(-0.2, 0.2, shape).astype(np.float32)
    if kind == "neg":
        return -np.exp(rng.uniform(-1.25, 0.5, shape)).astype(np.float32)
    # uniform with the given std; F16 for the matrices llama-quantize will quantize
    a = kind * np.sqrt(3.0)
    return (rng.random(shape, dtype=np.float32) * np.float32(2 * a) - np.float32(a)).astype(np.float16)


def write_f16(cfg, tok, path):
    tensors = plan(cfg)
    arch = cfg["arch"]
    w = gguf.GGUFWriter(path + ".tmp", arch)
    w.add_name(cfg["name"] + " (random weights)")
    w.add_description(f"random weights in {cfg['name'][:-7]}'s shape (tools/oracle/shaped.py); "
                      "tokenizer of Qwen2.5-Coder cut to the model's vocabulary size")
    w.add_context_length(cfg["n_ctx"])
    w.add_embedding_length(cfg["n_embd"])
    w.add_block_count(cfg["n_layer"])
    w.add_feed_forward_length(cfg["n_ff"])
    w.add_head_count(cfg["n_head"])
    if arch == "smallthinker":
        w.add_head_count_kv(cfg["n_head_kv"])
        w.add_sliding_window(cfg["sliding_window"])
    elif arch == "granitehybrid":
        w.add_head_count_kv([cfg["n_head_kv"] if i in cfg["attention_layers"] else 0 for i in range(cfg["n_layer"])])
        w.add_ssm_conv_kernel(cfg["ssm_conv"])
        w.add_ssm_state_size(cfg["ssm_state"])
        w.add_ssm_group_count(cfg["ssm_groups"])
        w.add_ssm_time_step_rank(cfg["ssm_heads"])
        w.add_ssm_inner_size(2 * cfg["n_embd"])
        # Granite 4.0's multipliers (embedding 12, residual 0.22, attention 1/128, logits 6)
        w.add_embedding_scale(12.0)
        w.add_residual_scale(0.22)
        w.add_attention_scale(0.0078125)
        w.add_logit_scale(6.0)
        w.add_rope_scaling_finetuned(False)
    else:
        w.add_head_count_kv([cfg["n_head_kv"] if i in cfg["attention_layers"] else 0 for i in range(cfg["n_layer"])])
        w.add_uint32(f"{arch}.shortconv.l_cache", cfg["l_cache"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_rope_freq_base(cfg["rope_base"])
    w.add_layer_norm_rms_eps(cfg["rms_eps"])
    w.add_vocab_size(cfg["n_vocab"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if "n_expert" in cfg:
        w.add_expert_count(cfg["n_expert"])
        w.add_expert_used_count(cfg["n_expert_used"])
        w.add_expert_feed_forward_length(cfg["n_ff_exp"])
    if arch == "lfm2moe":
        w.add_leading_dense_block_count(cfg["n_dense_lead"])
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if arch == "smallthinker":
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre({"smallthinker": "qwen2", "granitehybrid": "qwen2"}.get(arch, "lfm2"))
    w.add_token_list(tok["tokens"])
    w.add_token_types(tok["token_type"])
    w.add_token_merges(tok["merges"])
    w.add_eos_token_id(tok["eos"])
    w.add_add_bos_token(False)
    for name, shape, kind in tensors:
        f16 = not isinstance(kind, str)
        nbytes = int(np.prod(shape)) * (2 if f16 else 4)
        w.add_tensor_info(name, list(shape), np.dtype(np.float16 if f16 else np.float32), nbytes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for i, (name, shape, kind) in enumerate(tensors):
        w.write_tensor_data(data(np.random.default_rng([cfg["seed"], i]), shape, kind))
    w.close()
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    models = os.environ.get("SMOLRUN_MODELS", os.path.expanduser("~/.cache/smolrun/models"))
    oracle = os.environ.get("SMOLRUN_ORACLE", os.path.expanduser("~/.cache/smolrun/oracle"))
    ap.add_argument("family", choices=FAMILIES)
    ap.add_argument("--type", default="Q4_K_M", help="llama-quantize's type name (default Q4_K_M)")
    ap.add_argument("--out", help="default: $SMOLRUN_MODELS/<family>-shaped-<type>.gguf")
    ap.add_argument("--tokenizer-from", default=os.path.join(models, VOCAB_SOURCE))
    ap.add_argument("--keep-f16", action="store_true")
    args = ap.parse_args()
    cfg = FAMILIES[args.family]
    out = args.out or os.path.join(models, f"{args.family}-shaped-{args.type.lower()}.gguf")
    quantize = os.path.join(oracle, "build/bin/llama-quantize")
    if not os.access(quantize, os.X_OK):
        sys.exit(f"shaped: {quantize} missing; build the oracle first (tools/oracle/build.sh)")
    if not os.path.isfile(args.tokenizer_from):
        sys.exit(f"shaped: tokenizer source {args.tokenizer_from} is missing; run tools/fetch-models.sh")
    started = time.monotonic()
    tok = cut_tokenizer(read_tokenizer(args.tokenizer_from), cfg["n_vocab"])
    f16 = out + ".f16.gguf"
    write_f16(cfg, tok, f16)
    print(f"shaped: {f16} written in {time.monotonic() - started:.0f} s", flush=True)
    subprocess.run([quantize, f16, out + ".tmp", args.type, "2"], check=True,
                   stdout=subprocess.DEVNULL)
    os.replace(out + ".tmp", out)
    if not args.keep_f16:
        os.remove(f16)
    print(f"shaped: {out} ({os.path.getsize(out) / 1e6:.0f} MB) in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
