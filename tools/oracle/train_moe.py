#!/usr/bin/env python3
"""Trains a small mixture-of-experts language model from scratch on CPU and writes it as a qwen3moe
GGUF that llama.cpp and smolrun both run: a MoE whose routing is learned, for measuring the expert
pager, Belady's bound, prefetch and the cache bias on (issue #32, item 4).

    pip install torch tokenizers           # PyPI; gguf (gguf-py) is needed too
    tools/oracle/train_moe.py [--out FILE] [--steps N] [--work DIR] [--export-only]

Corpus: every English and code text of tools/head-corpus (en-devils-dictionary, en-wordnet-examples,
en-rust-book (chapters 3-5), en-prose, code-*; not multilingual.txt), about 3.3 MB, read from the
repository, so nothing is downloaded and no corpus text is stored beside this script. None of the
held-out texts the measurements use (tools/head-eval/en-speckled-band.txt, en-rust-book-ch16.txt,
or what tools/head-eval/domains.py builds) is in it: the head-corpus README checks that no
60-character stretch of them occurs there. 5 % of the corpus (every 20th 4 KB block) is kept
out as a validation split.

Tokenizer: a byte-level BPE of 4096 tokens (HF `tokenizers`, GPT-2's pre-tokenizer regex, all 256
bytes in the alphabet, one special token <|endoftext|> as BOS and EOS, no BOS added), written as
tokenizer.ggml.model "gpt2", pre "gpt-2".

Model (qwen3moe, llama.cpp's layout): 6 layers, n_embd 256, 4 query and 4 KV heads of 64 with
QK-norm (RMSNorm per head), NEOX RoPE base 10000, context 256; every FFN a mixture of 32 SwiGLU
experts of width 256, 4 used per token: a softmax router over the RMS-normed input, top 4, their
probabilities renormalised over the chosen (qwen3moe's rule). Embedding tied to the LM head in
training (written twice in the file). Losses: next-token cross entropy, plus the Switch
load-balancing loss (0.01 x E x sum_e f_e P_e per layer, averaged) so that every expert is used,
plus the router z-loss (1e-3 x mean logsumexp^2) to keep router logits bounded.

Training: AdamW (lr 2e-3, betas 0.9/0.95, weight decay 0.1 on matrices), 50 warm-up steps, cosine to
10 % over --steps (500), batches of 8 x 256 tokens (random windows of the stream), gradient clip 1.0, one CPU thread, seeds fixed (torch 1234, data
order from numpy PCG64 4321); `--max-minutes M` stops early (the file measured in docs/moe.md:
`--max-minutes 31`, stopped after 359 steps, 735K tokens, on a busy 2-core machine). The checkpoint (WORK/train_moe.pt) is saved, so `--export-only`
rewrites the GGUF without training. At the end it prints the validation loss and the held-out Speckled
Band's bits per byte in torch (chunks of 256 tokens, every token but each chunk's first scored), which
smolrun's and llama.cpp's figures on the file should match.

Export: F16 for every matrix (token_embd, output, attention, experts), F32 for the router and the
norms. Default output ~/.cache/smolrun/models/trained-moe-e32k4.gguf.
"""
import argparse
import json
import math
import os
import pathlib
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
CORPUS_FILES = ["en-devils-dictionary.txt", "en-wordnet-examples.txt", "en-rust-book.txt",
                "en-prose.txt", "code-python.txt", "code-rust.txt", "code-rust-crates.txt",
                "code-shell.txt", "code-web.txt"]
HELD_OUT = ["tools/head-eval/en-speckled-band.txt", "tools/head-eval/en-rust-book-ch16.txt"]

CFG = dict(n_vocab=4096, n_embd=256, n_layer=6, n_head=4, head_dim=64, n_ctx=256,
           n_expert=32, n_expert_used=4, n_ff_exp=256, rope_base=10000.0, rms_eps=1e-6,
           aux_coef=0.01, z_coef=1e-3)
EOT = "<|endoftext|>"


def corpus():
    texts = [(REPO / "tools/head-corpus" / f).read_text(encoding="utf-8") for f in CORPUS_FILES]
    for h in HELD_OUT:
        held = (REPO / h).read_text(encoding="utf-8")
        for t in texts:
            for i in range(0, len(held) - 60, 997):
                assert held[i:i + 60] not in t, f"held-out text {h} is in the corpus"
    return texts


def train_tokenizer(texts, path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=CFG["n_vocab"], special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.save(str(path))
    return tok


def model_classes():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    c = CFG

    class RMSNorm(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c["rms_eps"]) * self.weight

    def rope(x, cos, sin):
        # NEOX: dimension i pairs with i + head_dim/2
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            E, d, f = c["n_expert"], c["n_embd"], c["n_ff_exp"]
            self.router = nn.Linear(d, E, bias=False)
            self.gate = nn.Parameter(torch.randn(E, f, d) * 0.02)
            self.up = nn.Parameter(torch.randn(E, f, d) * 0.02)
            self.down = nn.Parameter(torch.randn(E, d, f) * 0.02 / math.sqrt(2 * c["n_layer"]))

        def forward(self, x):
            B, T, d = x.shape
            x = x.reshape(-1, d)
            N, E, K = x.shape[0], c["n_expert"], c["n_expert_used"]
            logits = self.router(x)
            probs = logits.softmax(-1)
            topv, topi = probs.topk(K, dim=-1)
            w = topv / topv.sum(-1, keepdim=True)
            flat = topi.reshape(-1)
            order = flat.argsort(stable=True)
            tok = torch.arange(N).repeat_interleave(K)[order]
            wf = w.reshape(-1)[order]
            counts = torch.bincount(flat, minlength=E)
            out = torch.zeros_like(x)
            start = 0
            for e, n in enumerate(counts.tolist()):
                if n == 0:
                    continue
                idx = tok[start:start + n]
                xe = x[idx]
                h = F.silu(xe @ self.gate[e].t()) * (xe @ self.up[e].t())
                out.index_add_(0, idx, (h @ self.down[e].t()) * wf[start:start + n, None])
                start += n
            frac = counts.float() / (N * K)
            aux = E * (frac * probs.mean(0)).sum()
            z = logits.logsumexp(-1).pow(2).mean()
            return out.reshape(B, T, d), aux, z, counts

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d, hd, nh = c["n_embd"], c["head_dim"], c["n_head"]
            self.attn_norm = RMSNorm(d)
            self.q = nn.Linear(d, nh * hd, bias=False)
            self.k = nn.Linear(d, nh * hd, bias=False)
            self.v = nn.Linear(d, nh * hd, bias=False)
            self.q_norm = RMSNorm(hd)
            self.k_norm = RMSNorm(hd)
            self.o = nn.Linear(nh * hd, d, bias=False)
            self.ffn_norm = RMSNorm(d)
            self.moe = MoE()

        def forward(self, x, cos, sin):
            B, T, d = x.shape
            nh, hd = c["n_head"], c["head_dim"]
            h = self.attn_norm(x)
            q = self.q_norm(self.q(h).view(B, T, nh, hd)).transpose(1, 2)
            k = self.k_norm(self.k(h).view(B, T, nh, hd)).transpose(1, 2)
            v = self.v(h).view(B, T, nh, hd).transpose(1, 2)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(B, T, nh * hd))
            m, aux, z, counts = self.moe(self.ffn_norm(x))
            return x + m, aux, z, counts

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embd = nn.Embedding(c["n_vocab"], c["n_embd"])
            self.blocks = nn.ModuleList([Block() for _ in range(c["n_layer"])])
            self.norm = RMSNorm(c["n_embd"])
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)
                    if name.endswith("o.weight"):
                        p.data /= math.sqrt(2 * c["n_layer"])
            hd = c["head_dim"]
            inv = 1.0 / (c["rope_base"] ** (torch.arange(0, hd // 2).float() * 2 / hd))
            ang = torch.arange(c["n_ctx"]).float()[:, None] * inv[None, :]
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

        def forward(self, ids):
            T = ids.shape[1]
            x = self.embd(ids)
            aux = z = 0.0
            counts = []
            for b in self.blocks:
                x, a, zz, cnt = b(x, self.cos[:T], self.sin[:T])
                aux, z = aux + a, z + zz
                counts.append(cnt)
            logits = self.norm(x) @ self.embd.weight.t()
            return logits, aux / c["n_layer"], z / c["n_layer"], counts

    return Model


def export(model, tok, out):
    import gguf
    from gguf import GGMLQuantizationType as T

    c = CFG
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    vocab = tok.get_vocab()
    tokens = [None] * len(vocab)
    for s, i in vocab.items():
        tokens[i] = s
    assert len(tokens) == c["n_vocab"] and None not in tokens
    merges = json.loads(tok.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    eot = vocab[EOT]
    ttype = [gguf.TokenType.CONTROL if i == eot else gguf.TokenType.NORMAL for i in range(len(tokens))]

    tmp = out + ".tmp"
    w = gguf.GGUFWriter(tmp, "qwen3moe")
    w.add_name("smolrun trained-moe-e32k4")
    w.add_description("a small qwen3moe trained on CPU by tools/oracle/train_moe.py (32 experts, 4 used)")
    w.add_context_length(c["n_ctx"])
    w.add_embedding_length(c["n_embd"])
    w.add_block_count(c["n_layer"])
    w.add_feed_forward_length(c["n_ff_exp"])
    w.add_head_count(c["n_head"])
    w.add_head_count_kv(c["n_head"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_rope_dimension_count(c["head_dim"])
    w.add_rope_freq_base(c["rope_base"])
    w.add_layer_norm_rms_eps(c["rms_eps"])
    w.add_vocab_size(c["n_vocab"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_expert_count(c["n_expert"])
    w.add_expert_used_count(c["n_expert_used"])
    w.add_expert_feed_forward_length(c["n_ff_exp"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(ttype)
    w.add_token_merges(merges)
    w.add_bos_token_id(eot)
    w.add_eos_token_id(eot)
    w.add_add_bos_token(False)

    def f16(name, a):
        w.add_tensor(name, np.ascontiguousarray(a).astype(np.float16), raw_dtype=T.F16)

    def f32(name, a):
        w.add_tensor(name, np.ascontiguousarray(a).astype(np.float32), raw_dtype=T.F32)

    f16("token_embd.weight", sd["embd.weight"])
    for i in range(c["n_layer"]):
        p, s = f"blk.{i}.", f"blocks.{i}."
        f32(p + "attn_norm.weight", sd[s + "attn_norm.weight"])
        f16(p + "attn_q.weight", sd[s + "q.weight"])
        f16(p + "attn_k.weight", sd[s + "k.weight"])
        f16(p + "attn_v.weight", sd[s + "v.weight"])
        f32(p + "attn_q_norm.weight", sd[s + "q_norm.weight"])
        f32(p + "attn_k_norm.weight", sd[s + "k_norm.weight"])
        f16(p + "attn_output.weight", sd[s + "o.weight"])
        f32(p + "ffn_norm.weight", sd[s + "ffn_norm.weight"])
        f32(p + "ffn_gate_inp.weight", sd[s + "moe.router.weight"])
        # numpy [expert, rows, cols] = ggml [cols, rows, expert]
        f16(p + "ffn_gate_exps.weight", sd[s + "moe.gate"])
        f16(p + "ffn_up_exps.weight", sd[s + "moe.up"])
        f16(p + "ffn_down_exps.weight", sd[s + "moe.down"])
    f32("output_norm.weight", sd["norm.weight"])
    f16("output.weight", sd["embd.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out)


def heldout_bpb(model, tok, path):
    """Bits per byte of a text in torch: chunks of n_ctx tokens, each chunk's first token unscored."""
    import torch
    text = (REPO / path).read_text(encoding="utf-8")
    ids = tok.encode(text).ids
    n = CFG["n_ctx"]
    nats, scored = 0.0, 0
    model.eval()
    with torch.no_grad():
        for s in range(0, len(ids) - 1, n):
            chunk = torch.tensor(ids[s:s + n])[None]
            if chunk.shape[1] < 2:
                break
            logits = model(chunk)[0][0]
            lp = logits[:-1].log_softmax(-1).gather(1, chunk[0, 1:, None])
            nats -= lp.sum().item()
            scored += chunk.shape[1] - 1
    model.train()
    return nats / math.log(2) / len(text.encode("utf-8")), nats / scored, len(ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.expanduser("~/.cache/smolrun/models/trained-moe-e32k4.gguf"))
    ap.add_argument("--work", default=os.path.expanduser("~/.cache/smolrun/train-moe"))
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--max-minutes", type=float, default=0, help="stop early after this long (0: never)")
    ap.add_argument("--export-only", action="store_true")
    args = ap.parse_args()

    import torch
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    from tokenizers import Tokenizer

    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    tok_path, ckpt = work / "tokenizer.json", work / "train_moe.pt"
    texts = corpus()
    if tok_path.exists():
        tok = Tokenizer.from_file(str(tok_path))
    else:
        tok = train_tokenizer(texts, tok_path)
    Model = model_classes()
    model = Model()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters {n_params / 1e6:.2f} M", flush=True)

    if not args.export_only:
        # the corpus as one token stream, documents separated by <|endoftext|>; every 20th 4 KB
        # block of each text is validation
        eot = tok.token_to_id(EOT)
        train_ids, val_ids = [], []
        for t in texts:
            for j, s in enumerate(range(0, len(t), 4096)):
                ids = tok.encode(t[s:s + 4096]).ids
                (val_ids if j % 20 == 19 else train_ids).extend(ids)
            train_ids.append(eot)
        train = torch.tensor(train_ids)
        val = torch.tensor(val_ids)
        print(f"corpus {sum(len(t.encode()) for t in texts)} bytes, {len(train)} train tokens, "
              f"{len(val)} validation tokens", flush=True)
        rng = np.random.Generator(np.random.PCG64(4321))
        n = CFG["n_ctx"]
        decay, no_decay = [], []
        for name, p in model.named_parameters():
            (decay if p.dim() >= 2 and "embd" not in name else no_decay).append(p)
        opt = torch.optim.AdamW([dict(params=decay, weight_decay=0.1),
                                 dict(params=no_decay, weight_decay=0.0)],
                                lr=2e-3, betas=(0.9, 0.95))
        t0 = time.time()
        for step in range(args.steps):
            warm = 50
            if step < warm:
                lr = 2e-3 * (step + 1) / warm
            else:
                frac = (step - warm) / max(1, args.steps - warm)
                lr = 2e-3 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
            for g in opt.param_groups:
                g["lr"] = lr
            starts = rng.integers(0, len(train) - n - 1, size=args.batch)
            x = torch.stack([train[s:s + n] for s in starts])
            y = torch.stack([train[s + 1:s + n + 1] for s in starts])
            logits, aux, z, counts = model(x)
            ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss = ce + CFG["aux_coef"] * aux + CFG["z_coef"] * z
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if step % 25 == 0 or step == args.steps - 1:
                top = max(cnt.max().item() / cnt.sum().item() for cnt in counts)
                print(f"step {step} lr {lr:.2e} ce {ce.item():.3f} aux {aux.item():.3f} z {z.item():.2f} "
                      f"busiest expert {top:.3f} {time.time() - t0:.0f}s", flush=True)
            if step % 100 == 99:
                torch.save(model.state_dict(), ckpt)
            if args.max_minutes and time.time() - t0 > 60 * args.max_minutes:
                print(f"stopped at step {step + 1} of {args.steps}: --max-minutes", flush=True)
                args.steps = step + 1
                break
        torch.save(model.state_dict(), ckpt)
        print(f"trained {args.steps} steps, {args.steps * args.batch * n} tokens, "
              f"{time.time() - t0:.0f}s", flush=True)
        model.eval()
        with torch.no_grad():
            vl, vn = 0.0, 0
            for s in range(0, len(val) - n - 1, n):
                lg = model(val[s:s + n][None])[0][0]
                vl += torch.nn.functional.cross_entropy(lg, val[s + 1:s + n + 1], reduction="sum").item()
                vn += n
        print(f"validation loss {vl / vn:.4f} nats/token", flush=True)
    else:
        model.load_state_dict(torch.load(ckpt))
    bpb, nll, ntok = heldout_bpb(model, tok, HELD_OUT[0])
    print(f"{HELD_OUT[0]}: {ntok} tokens, {bpb:.4f} bits per byte, PPL {math.exp(nll):.2f} "
          f"(torch, chunks of {CFG['n_ctx']})", flush=True)
    export(model, tok, args.out)
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
