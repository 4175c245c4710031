#!/usr/bin/env python3
"""Writes tests/golden/vocab/pretok-branches.<pre>.out: llama.cpp b11434's ids for the texts of
tests/golden/vocab/pretok-branches.inp on ggml-vocab-qwen35.gguf with `tokenizer.ggml.pre` set
to each pre-tokenizer name below, tokenized as test-tokenizer-0 does (no BOS, special tokens not
parsed).

llama.cpp's tree has test vectors for only some pre-tokenizers; the families smolrun runs name
others (lfm2, smollm, olmo, refact, granite-docling...). The vocabulary and merges stay the same,
so what differs between the files is the pre-tokenizer's split alone. The texts cover the
regexes' branches: contractions in both cases, letters after one punctuation mark, digit runs
of 1 to 10 (split in threes or ones or not at all), punctuation runs with newlines after them,
CR/LF runs, trailing and inner whitespace, tabs, non-Latin letters and digits, emoji. Needs the
oracle's llama-tokenize (see vocab_marks.py).

    tools/oracle/vocab_pretok.py
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vocab_marks import ids, pre_value, texts, tokenize, vocab_dir  # noqa: E402

# one name per llama.cpp pre-type smolrun implements, and every name its families' files carry
PRES = ["lfm2", "llama-bpe", "dbrx", "smollm", "starcoder", "refact", "olmo", "gpt-2",
        "granite-docling", "default"]


def main():
    if not os.access(tokenize, os.X_OK):
        sys.exit(f"vocab_pretok: {tokenize} missing; build the oracle first (tools/oracle/build.sh)")
    cases = texts(os.path.join(vocab_dir, "pretok-branches.inp"))
    qwen35 = os.path.join(vocab_dir, "ggml-vocab-qwen35.gguf")
    data = open(qwen35, "rb").read()
    assert data.count(pre_value(b"qwen35")) == 1
    with tempfile.TemporaryDirectory() as tmp:
        for name in PRES:
            vocab = os.path.join(tmp, f"ggml-vocab-{name}.gguf")
            open(vocab, "wb").write(data.replace(pre_value(b"qwen35"), pre_value(name.encode())))
            lines = [" ".join(str(i) for i in ids(vocab, t)) for t in cases]
            out = os.path.join(vocab_dir, f"pretok-branches.{name}.out")
            open(out, "w").write("".join(line + "\n" for line in lines))
            print(f"vocab_pretok: {out}: {len(lines)} cases")


if __name__ == "__main__":
    main()
