#!/usr/bin/env python3
"""Writes a GGUF with the shape of Ling-mini-2.0 (bailingmoe2, 16B parameters, 1.4B active) and
random weights: the file an expert pager is built and measured against before a real one is at hand.

    tools/oracle/ling_shaped.py [--out FILE] [--router skewed|uniform] [--skew S | --popularity FILE]
                                [--experts-last] [--layers N --experts N --n-embd N --expert-ff N] [--seed N]

Shape (defaults, as Ling-mini-2.0's config): 20 layers, n_embd 2048, 16 query heads and 4 KV heads
of 128 (fused attn_qkv, QK-norm, NEOX RoPE on the first 64 dimensions, base 600000), the first
layer a dense FFN of 5120, the other 19 a mixture of 256 experts of width 512 in 8 groups (4 groups
and 8 experts used per token, sigmoid router with the exp_probs_b selection bias, weights
normalised over the chosen and scaled by 2.5) plus one shared expert of width 512. The tokenizer is
Qwen2.5-Coder's (151,936 tokens, copied from the real GGUF as synth_model.py does; Ling's own has
157,184): a real tokenizer, so prompts tokenize as they would.

Types: the expert tensors in Q2_K (84 bytes per 256 weights: 336 KB per expert matrix, ~1 MB per
expert, 4.9 GiB of experts), every other matrix in Q4_0, the router, norms and bias in F32: about
5.5 GB in all. Nothing is quantized: each block is random bytes with its f16 scales set so that a
row's weights have about the spread 1/sqrt(fan_in) (and, for Q2_K, mean about 0), which is all a
pager, a kernel or a speed measurement needs. The file is written tensor by tensor (one tensor,
at most ~90 MB, in RAM at a time), in a few minutes.

Routing. Random weights route experts almost uniformly, while a trained model's routing is skewed
(a few experts per layer take a large share of the tokens), and an expert pager's hit rate depends
on that skew. `--router skewed` (the default) gives each layer a popularity over its experts,
Zipf(S) over a random permutation of the experts (`--skew S`, default 1.0) or read from
`--popularity FILE` (one line per layer, or one line for every layer: n_expert non-negative
numbers, e.g. use counts measured on a real model), and sets the selection bias exp_probs_b to
`--bias-scale` x log(popularity / max popularity): the bias changes which experts are chosen, not
their weights, as in the real model. `--router uniform` writes a zero bias. The share of routing
choices that land on the top 10 % of experts is the figure to report; measure it with smolrun (see
cli/tests/ling_shaped.rs, which prints each layer's histogram). Measured over 256 tokens of
tools/head-corpus/en-prose.txt (2048 choices a layer; the share of a perfectly uniform router
would be ~17 % from sampling noise alone), mean over the MoE layers, Zipf skew 1.0:

    --bias-scale   0 (uniform)  0.02   0.03   0.05   0.1    0.25
    top 10 %       27-32 %      44 %   51 %   60 %   74 %   94 %
    experts used   ~245         ~210   ~175   ~130   ~90    ~50   (of 256, over those tokens)

The default 0.02 is a moderate skew: most experts are used, a tenth of them take ~45 % of the
choices. Real routing should replace it as soon as one is measured (`--popularity`).

`--experts-last` writes the expert tensors after every other tensor and records where they begin
in `smolrun.expert_data_offset`, as `smolrun gguf experts-last` does for an existing file.
"""

import argparse
import os
import sys
import time

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synth_model import VOCAB_SOURCE, read_tokenizer, write_tokenizer  # noqa: E402

EXPERT_DATA_OFFSET_KEY = "smolrun.expert_data_offset"

# Block layouts (ggml): bytes per block, weights per block.
Q2_K_BYTES, Q2_K_ELEMS = 84, 256  # scales[16] (scale low nibble, min high), qs[64], d f16, dmin f16
Q4_0_BYTES, Q4_0_ELEMS = 18, 32  # d f16, qs[16] (two 4-bit weights a byte, x = d * (q - 8))

# A Q2_K weight is d * sc * q - dmin * m with sc, m uniform in 0..15 and q in 0..3 (random bytes).
# dmin = 1.5 d makes its mean 0 (E[sc q] = 7.5 * 1.5 = 1.5 E[m]); its std is then
# d * sqrt(Var(sc q) + 1.5^2 Var(m)) = d * sqrt(144.69 + 47.81) = 13.87 d.
Q2_K_STD_PER_D = 13.87
# A Q4_0 weight is d * (q - 8), q uniform in 0..15: std sqrt(255 / 12) d = 4.61 d.
Q4_0_STD_PER_D = 4.61
# Router rows: std such that a router logit (dot with an RMS-normed input of norm ~sqrt(n_embd))
# has std ~2.4, as synth_model.py's bailingmoe2: sigmoids spread over (0, 1), not saturated.
ROUTER_LOGIT_STD = 2.4
# Token embeddings with std 1: the residual stream starts at norm ~sqrt(n_embd).
EMBD_STD = 1.0


def signed_scales(rng, n_blocks, value):
    """`value` with a random sign per block, as f16. Random nibbles are not zero-mean (Q4_0's
    q - 8 averages -0.5; a Q2_K sub-block has its own offset): with one sign for every block, that
    mean adds up along a row into the same offset for every output, the residual stream grows a
    token-independent component, and every token picks the same experts. A random sign per block
    cancels it."""
    signs = rng.integers(0, 2, n_blocks, dtype=np.int8) * 2 - 1
    return (signs * np.float32(value)).astype("<f2")


def q2_k_blocks(rng, n_rows, row_len, std):
    """n_rows rows of row_len weights as Q2_K blocks of random bytes with the spread `std`."""
    n_blocks = n_rows * (row_len // Q2_K_ELEMS)
    blocks = np.frombuffer(rng.bytes(n_blocks * Q2_K_BYTES), dtype=np.uint8).reshape(n_blocks, Q2_K_BYTES).copy()
    d = signed_scales(rng, n_blocks, std / Q2_K_STD_PER_D)
    blocks[:, 80:82] = d.view(np.uint8).reshape(n_blocks, 2)
    blocks[:, 82:84] = (d * np.float16(1.5)).astype("<f2").view(np.uint8).reshape(n_blocks, 2)
    return blocks


def q4_0_blocks(rng, n_rows, row_len, std):
    n_blocks = n_rows * (row_len // Q4_0_ELEMS)
    blocks = np.frombuffer(rng.bytes(n_blocks * Q4_0_BYTES), dtype=np.uint8).reshape(n_blocks, Q4_0_BYTES).copy()
    blocks[:, 0:2] = signed_scales(rng, n_blocks, std / Q4_0_STD_PER_D).view(np.uint8).reshape(n_blocks, 2)
    return blocks


def f32(values):
    return np.ascontiguousarray(values, dtype="<f4")


def popularity_per_layer(args, n_moe_layers, rng):
    """Each MoE layer's popularity over its experts (sums to 1), or None for a uniform router."""
    if args.router == "uniform":
        return None
    n_e = args.experts
    if args.popularity:
        with open(args.popularity) as f:
            rows = [[float(x) for x in line.split()] for line in f if line.strip() and not line.startswith("#")]
        if len(rows) not in (1, n_moe_layers):
            sys.exit(f"ling_shaped: {args.popularity}: {len(rows)} lines, expected 1 or {n_moe_layers} (one per MoE layer, MTP layers included)")
        for i, r in enumerate(rows):
            if len(r) != n_e or min(r) < 0 or sum(r) <= 0:
                sys.exit(f"ling_shaped: {args.popularity} line {i + 1}: expected {n_e} non-negative numbers "
                         f"that are not all 0, found {len(r)}")
        if len(rows) == 1:
            rows = rows * n_moe_layers
        pops = [np.array(r, dtype=np.float64) for r in rows]
    else:
        zipf = 1.0 / np.arange(1, n_e + 1, dtype=np.float64) ** args.skew
        # A random permutation per layer: popular experts are not simply the first ids, and each
        # layer has its own.
        pops = [zipf[rng.permutation(n_e)] for _ in range(n_moe_layers)]
    # An expert nobody used gets the least popular one's share over 10: a finite log.
    out = []
    for p in pops:
        p = p / p.sum()
        floor = p[p > 0].min() / 10
        out.append(np.maximum(p, floor) / np.maximum(p, floor).sum())
    return out


def plan_tensors(args, n_vocab):
    """(name, ggml type, ggml dims, maker) for every tensor in file order; maker(rng) -> array.
    Expert tensors are flagged so --experts-last can move them."""
    n_embd, hd = args.n_embd, args.head_dim
    n_head = n_embd // hd
    n_head_kv = max(1, n_head // 4)
    n_q, n_kv = n_head * hd, n_head_kv * hd
    n_e, n_fe, n_fs, n_ff = args.experts, args.expert_ff, args.expert_ff, args.dense_ff
    tensors = []

    def add(name, qtype, dims, maker, expert=False):
        tensors.append((name, qtype, dims, maker, expert))

    def q4(rows, cols, std):
        return lambda rng: q4_0_blocks(rng, rows, cols, std)

    def norm(n):
        return lambda rng: f32(1.0 + 0.1 * (rng.random(n) * 2 - 1))

    add("token_embd.weight", T.Q4_0, [n_embd, n_vocab], q4(n_vocab, n_embd, EMBD_STD))
    n_dense = 1
    for i in range(args.layers + args.nextn):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", T.F32, [n_embd], norm(n_embd))
        add(p + "attn_qkv.weight", T.Q4_0, [n_embd, n_q + 2 * n_kv], q4(n_q + 2 * n_kv, n_embd, n_embd ** -0.5))
        add(p + "attn_q_norm.weight", T.F32, [hd], norm(hd))
        add(p + "attn_k_norm.weight", T.F32, [hd], norm(hd))
        add(p + "attn_output.weight", T.Q4_0, [n_q, n_embd], q4(n_embd, n_q, n_q ** -0.5))
        add(p + "ffn_norm.weight", T.F32, [n_embd], norm(n_embd))
        if i < n_dense:
            add(p + "ffn_gate.weight", T.Q4_0, [n_embd, n_ff], q4(n_ff, n_embd, n_embd ** -0.5))
            add(p + "ffn_up.weight", T.Q4_0, [n_embd, n_ff], q4(n_ff, n_embd, n_embd ** -0.5))
            add(p + "ffn_down.weight", T.Q4_0, [n_ff, n_embd], q4(n_embd, n_ff, n_ff ** -0.5))
            continue
        layer = i - n_dense
        router_std = ROUTER_LOGIT_STD / np.sqrt(n_embd)
        add(p + "ffn_gate_inp.weight", T.F32, [n_embd, n_e],
            lambda rng: f32((rng.random((n_e, n_embd)) * 2 - 1) * (router_std * np.sqrt(3.0))))
        add(p + "exp_probs_b.bias", T.F32, [n_e], lambda rng, layer=layer: f32(args.selection_bias(layer)))
        add(p + "ffn_gate_exps.weight", T.Q2_K, [n_embd, n_fe, n_e],
            lambda rng: q2_k_blocks(rng, n_e * n_fe, n_embd, n_embd ** -0.5), expert=True)
        add(p + "ffn_up_exps.weight", T.Q2_K, [n_embd, n_fe, n_e],
            lambda rng: q2_k_blocks(rng, n_e * n_fe, n_embd, n_embd ** -0.5), expert=True)
        add(p + "ffn_down_exps.weight", T.Q2_K, [n_fe, n_embd, n_e],
            lambda rng: q2_k_blocks(rng, n_e * n_embd, n_fe, n_fe ** -0.5), expert=True)
        add(p + "ffn_gate_shexp.weight", T.Q4_0, [n_embd, n_fs], q4(n_fs, n_embd, n_embd ** -0.5))
        add(p + "ffn_up_shexp.weight", T.Q4_0, [n_embd, n_fs], q4(n_fs, n_embd, n_embd ** -0.5))
        add(p + "ffn_down_shexp.weight", T.Q4_0, [n_fs, n_embd], q4(n_embd, n_fs, n_fs ** -0.5))
        if i >= args.layers:
            # an MTP (nextn) block: its tensors are in the file (and its experts count in the
            # file's size), inference skips it
            add(p + "nextn.eh_proj.weight", T.Q4_0, [2 * n_embd, n_embd], q4(n_embd, 2 * n_embd, (2 * n_embd) ** -0.5))
            add(p + "nextn.enorm.weight", T.F32, [n_embd], norm(n_embd))
            add(p + "nextn.hnorm.weight", T.F32, [n_embd], norm(n_embd))
            add(p + "layer_output_norm.weight", T.F32, [n_embd], norm(n_embd))
    add("output_norm.weight", T.F32, [n_embd], norm(n_embd))
    add("output.weight", T.Q4_0, [n_embd, n_vocab], q4(n_vocab, n_embd, n_embd ** -0.5))
    return tensors, dict(n_head=n_head, n_head_kv=n_head_kv)


def nbytes(qtype, dims):
    n = int(np.prod(dims))
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    return n // block * size


def check_args(args):
    problems = []
    if args.n_embd % Q2_K_ELEMS or args.n_embd % args.head_dim:
        problems.append(f"--n-embd {args.n_embd} must be a multiple of 256 (Q2_K rows) and of the head dim {args.head_dim}")
    if args.expert_ff % Q2_K_ELEMS:
        problems.append(f"--expert-ff {args.expert_ff} must be a multiple of 256 (the down experts' Q2_K rows)")
    if args.dense_ff % Q4_0_ELEMS:
        problems.append(f"--dense-ff {args.dense_ff} must be a multiple of 32")
    if args.nextn < 0 or args.nextn > 4:
        problems.append(f"--nextn {args.nextn}: 0 to 4")
    if args.layers < 2:
        problems.append(f"--layers {args.layers}: at least 2 (the first is dense)")
    if args.experts % args.groups or args.experts // args.groups < 2:
        problems.append(f"--experts {args.experts} must be a multiple of --groups {args.groups} with at least 2 a group")
    if not 1 <= args.groups_used < args.groups and args.groups > 1:
        problems.append(f"--groups-used {args.groups_used} must be in 1..{args.groups - 1}")
    if args.experts_used > args.groups_used * (args.experts // args.groups) or args.experts_used > 16:
        problems.append(f"--experts-used {args.experts_used}: at most 16 and at most the experts of the groups used")
    if problems:
        sys.exit("ling_shaped: " + "; ".join(problems))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    models = os.environ.get("SMOLRUN_MODELS", os.path.expanduser("~/.cache/smolrun/models"))
    ap.add_argument("--out", default=os.path.join(models, "ling-mini-shaped.gguf"))
    ap.add_argument("--tokenizer-from", default=os.path.join(models, VOCAB_SOURCE))
    ap.add_argument("--layers", type=int, default=20, help="blocks; the first is dense (default 20)")
    ap.add_argument("--nextn", type=int, default=0,
                    help="MTP (nextn) blocks after the others, a MoE block each, skipped by inference (default 0)")
    ap.add_argument("--experts", type=int, default=256, help="experts per MoE layer (default 256)")
    ap.add_argument("--experts-used", type=int, default=8)
    ap.add_argument("--groups", type=int, default=8, help="expert groups (default 8)")
    ap.add_argument("--groups-used", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=2048)
    ap.add_argument("--head-dim", type=int, default=128, help="n_head = n_embd / head_dim, n_head_kv = n_head / 4")
    ap.add_argument("--expert-ff", type=int, default=512, help="width of each expert and of the shared one (default 512)")
    ap.add_argument("--dense-ff", type=int, default=5120, help="width of the first layer's dense FFN (default 5120)")
    ap.add_argument("--router", choices=["skewed", "uniform"], default="skewed")
    ap.add_argument("--skew", type=float, default=1.0, help="Zipf exponent of the experts' popularity (default 1.0)")
    ap.add_argument("--popularity", help="file of per-expert popularity: one line per MoE layer, or one for all")
    ap.add_argument("--bias-scale", type=float, default=0.02,
                    help="selection bias per unit of log popularity (default 0.02; see the module docs)")
    ap.add_argument("--seed", type=int, default=0x11A6_0002)
    ap.add_argument("--experts-last", action="store_true",
                    help="write the expert tensors last, with smolrun.expert_data_offset")
    args = ap.parse_args()
    check_args(args)
    if not os.path.isfile(args.tokenizer_from):
        sys.exit(f"ling_shaped: tokenizer source {args.tokenizer_from} is missing; run tools/fetch-models.sh")

    started = time.monotonic()
    tok = read_tokenizer(args.tokenizer_from)
    n_vocab = len(tok["tokens"])
    rng = np.random.Generator(np.random.PCG64(args.seed))
    n_moe = args.layers - 1 + args.nextn
    pops = popularity_per_layer(args, n_moe, rng)
    args.selection_bias = (lambda layer: np.zeros(args.experts)) if pops is None else \
        (lambda layer: args.bias_scale * np.log(pops[layer] / pops[layer].max()))
    tensors, heads = plan_tensors(args, n_vocab)
    # Each tensor draws from its own stream, keyed by its place in the usual order: the
    # experts-last file holds the same bytes as `smolrun gguf experts-last` of the usual one.
    tensors = [(name, qtype, dims, (lambda maker, i: lambda: maker(np.random.Generator(np.random.PCG64([args.seed, i]))))(maker, i), expert)
               for i, (name, qtype, dims, maker, expert) in enumerate(tensors)]
    if args.experts_last:
        tensors = [t for t in tensors if not t[4]] + [t for t in tensors if t[4]]

    tmp = args.out + ".tmp"
    w = gguf.GGUFWriter(tmp, "bailingmoe2")
    w.add_name("Ling-mini-2.0-shaped (random weights)")
    w.add_description(f"random weights in Ling-mini-2.0's shape (tools/oracle/ling_shaped.py), router {args.router}"
                      + (f", popularity from {os.path.basename(args.popularity)}" if args.popularity else
                         f", Zipf skew {args.skew}" if pops is not None else "")
                      + f", bias scale {args.bias_scale}, seed {args.seed}; tokenizer of Qwen2.5-Coder")
    w.add_context_length(32768)
    w.add_embedding_length(args.n_embd)
    w.add_block_count(args.layers + args.nextn)
    w.add_feed_forward_length(args.dense_ff)
    w.add_head_count(heads["n_head"])
    w.add_head_count_kv(heads["n_head_kv"])
    w.add_key_length(args.head_dim)
    w.add_value_length(args.head_dim)
    w.add_rope_dimension_count(args.head_dim // 2)
    w.add_rope_freq_base(600_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q2_K)
    w.add_expert_count(args.experts)
    w.add_expert_used_count(args.experts_used)
    w.add_expert_feed_forward_length(args.expert_ff)
    w.add_leading_dense_block_count(1)
    w.add_nextn_predict_layers(args.nextn)
    w.add_expert_group_count(args.groups)
    w.add_expert_group_used_count(args.groups_used)
    w.add_expert_shared_count(1)
    w.add_expert_shared_feed_forward_length(args.expert_ff)
    w.add_expert_weights_scale(2.5)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    write_tokenizer(w, tok, "qwen2", False)
    # The true value is patched in once the layout is known (a u64: its value moves nothing).
    offset_placeholder = 0xFFFF_FFFF_FFFF_FFFF
    if args.experts_last:
        w.add_uint64(EXPERT_DATA_OFFSET_KEY, offset_placeholder)

    for name, qtype, dims, _, _ in tensors:
        # numpy order for gguf-py (it reverses to ggml order); a float32 dtype with raw_dtype
        # keeps the shape as given
        w.add_tensor_info(name, list(reversed(dims)), np.dtype(np.float32), nbytes(qtype, dims), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    align = w.data_alignment
    data_start = (fout.tell() + align - 1) // align * align
    expert_offset = None
    pos = data_start
    total = sum(nbytes(t[1], t[2]) for t in tensors)
    written = 0
    for name, qtype, dims, maker, expert in tensors:
        if expert and expert_offset is None:
            expert_offset = pos
        data = maker()
        assert data.nbytes == nbytes(qtype, dims), name
        w.write_tensor_data(data)
        pos += (data.nbytes + align - 1) // align * align
        written += data.nbytes
        if expert and sys.stderr.isatty():
            print(f"\rling_shaped: {written / 2**30:.2f} of {total / 2**30:.2f} GiB", end="", file=sys.stderr)
    w.close()
    if sys.stderr.isatty():
        print(file=sys.stderr)

    if args.experts_last:
        # Patch the placeholder: the key, its type (u64 = 10), then the 8 bytes of the value.
        key = EXPERT_DATA_OFFSET_KEY.encode()
        needle = len(key).to_bytes(8, "little") + key + (10).to_bytes(4, "little") + \
            offset_placeholder.to_bytes(8, "little")
        with open(tmp, "r+b") as f:
            head = f.read(data_start)
            at = head.find(needle)
            if at < 0 or head.find(needle, at + 1) >= 0:
                sys.exit(f"ling_shaped: {tmp}: cannot find the {EXPERT_DATA_OFFSET_KEY} placeholder once in the header")
            f.seek(at + len(needle) - 8)
            f.write(expert_offset.to_bytes(8, "little"))
    os.replace(tmp, args.out)
    size = os.path.getsize(args.out)
    print(f"ling_shaped: {args.out} {size} bytes ({size / 2**30:.2f} GiB) in {time.monotonic() - started:.0f} s"
          + (f"; expert data from byte {expert_offset}" if args.experts_last else ""))


if __name__ == "__main__":
    main()
