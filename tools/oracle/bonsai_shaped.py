#!/usr/bin/env python3
"""Writes a GGUF with the shape of Bonsai-8B (PrismML's 1-bit Qwen3-8B) and random weights: every
matrix in Q1_0 (128 signs and one f16 scale a block, 1.125 bits a weight), norms in F32, as the
published file; the device table's stand-in for the write-ups' "dense 1-bit 8B" rows.

    tools/oracle/bonsai_shaped.py [--out FILE] [--layers N] [--seed N]

Shape (Qwen3-8B's config): 36 layers of n_embd 4096, 32 query and 8 KV heads of 128 (QK-norm,
NEOX RoPE, base 1e6), SwiGLU FFN of 12,288, an untied LM head; the tokenizer is Qwen2.5-Coder's
(151,936 tokens, copied from the real GGUF as synth_model.py does; Qwen3's has the same row
count). About 1.15 GB. Nothing is quantized: each block is random sign bits with its f16 scale set
to 1/sqrt(fan_in), which is all a kernel, a memory plan or a speed measurement needs; the text is
noise. Written tensor by tensor (at most ~90 MB in RAM), in well under a minute.
"""

import argparse
import os
import sys
import time

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ling_shaped import f32  # noqa: E402
from synth_model import VOCAB_SOURCE, read_tokenizer, write_tokenizer  # noqa: E402

Q1_0_BYTES, Q1_0_ELEMS = 18, 128  # d f16, qs[16]: x = +d where the bit is set, else -d
Q1_0 = T.Q1_0 if hasattr(T, "Q1_0") else 41  # ggml's GGML_TYPE_Q1_0 (b11434)


def q1_0_blocks(rng, n_rows, row_len, std):
    n_blocks = n_rows * (row_len // Q1_0_ELEMS)
    blocks = np.frombuffer(rng.bytes(n_blocks * Q1_0_BYTES), dtype=np.uint8).reshape(n_blocks, Q1_0_BYTES).copy()
    blocks[:, 0:2] = np.full(n_blocks, std, dtype="<f2").view(np.uint8).reshape(n_blocks, 2)
    return blocks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    models = os.environ.get("SMOLRUN_MODELS", os.path.expanduser("~/.cache/smolrun/models"))
    ap.add_argument("--out", default=os.path.join(models, "bonsai8b-shaped-q1_0.gguf"))
    ap.add_argument("--tokenizer-from", default=os.path.join(models, VOCAB_SOURCE))
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--n-embd", type=int, default=4096)
    ap.add_argument("--n-ff", type=int, default=12288)
    ap.add_argument("--seed", type=int, default=0xB0_5A18)
    args = ap.parse_args()
    if not os.path.isfile(args.tokenizer_from):
        sys.exit(f"bonsai_shaped: tokenizer source {args.tokenizer_from} is missing; run tools/fetch-models.sh")
    started = time.monotonic()
    tok = read_tokenizer(args.tokenizer_from)
    n_vocab = len(tok["tokens"])
    n_embd, n_ff, hd = args.n_embd, args.n_ff, 128
    n_head, n_head_kv = n_embd // hd, n_embd // hd // 4
    n_q, n_kv = n_head * hd, n_head_kv * hd

    tensors = []

    def mat(name, rows, cols, std):
        tensors.append((name, Q1_0, [cols, rows], lambda rng: q1_0_blocks(rng, rows, cols, std)))

    def norm(name, n):
        tensors.append((name, T.F32, [n], lambda rng: f32(1.0 + 0.1 * (rng.random(n) * 2 - 1))))

    mat("token_embd.weight", n_vocab, n_embd, 1.0)
    for i in range(args.layers):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", n_embd)
        mat(p + "attn_q.weight", n_q, n_embd, n_embd ** -0.5)
        mat(p + "attn_k.weight", n_kv, n_embd, n_embd ** -0.5)
        mat(p + "attn_v.weight", n_kv, n_embd, n_embd ** -0.5)
        norm(p + "attn_q_norm.weight", hd)
        norm(p + "attn_k_norm.weight", hd)
        mat(p + "attn_output.weight", n_embd, n_q, n_q ** -0.5)
        norm(p + "ffn_norm.weight", n_embd)
        mat(p + "ffn_gate.weight", n_ff, n_embd, n_embd ** -0.5)
        mat(p + "ffn_up.weight", n_ff, n_embd, n_embd ** -0.5)
        mat(p + "ffn_down.weight", n_embd, n_ff, n_ff ** -0.5)
    norm("output_norm.weight", n_embd)
    mat("output.weight", n_vocab, n_embd, n_embd ** -0.5)

    def nbytes(qtype, dims):
        n = int(np.prod(dims))
        return n // Q1_0_ELEMS * Q1_0_BYTES if qtype == Q1_0 else n * 4

    tmp = args.out + ".tmp"
    w = gguf.GGUFWriter(tmp, "qwen3")
    w.add_name("Bonsai-8B-shaped (random weights)")
    w.add_description(f"random weights in Bonsai-8B's shape (Qwen3-8B, all Q1_0; tools/oracle/bonsai_shaped.py), seed {args.seed}; tokenizer of Qwen2.5-Coder")
    w.add_context_length(40960)
    w.add_embedding_length(n_embd)
    w.add_block_count(args.layers)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(n_vocab)
    w.add_uint32("general.file_type", 27)  # GGML_FTYPE_MOSTLY_Q1_0 (b11434)
    write_tokenizer(w, tok, "qwen2", False)
    for name, qtype, dims, _ in tensors:
        w.add_tensor_info(name, list(reversed(dims)), np.dtype(np.float32), nbytes(qtype, dims), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for i, (name, qtype, dims, maker) in enumerate(tensors):
        data = maker(np.random.Generator(np.random.PCG64([args.seed, i])))
        assert data.nbytes == nbytes(qtype, dims), name
        w.write_tensor_data(data)
    w.close()
    os.replace(tmp, args.out)
    size = os.path.getsize(args.out)
    print(f"bonsai_shaped: {args.out} {size} bytes ({size / 2**30:.2f} GiB) in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
