#!/usr/bin/env python3
"""Writes tests/golden/vocab/qwen35-marks.{qwen35,qwen2}.out: llama.cpp b11434's ids for the texts
of tests/golden/vocab/qwen35-marks.inp (combining marks in many scripts and places), on
ggml-vocab-qwen35.gguf and on the same vocabulary with pre-type "qwen2", tokenized as
test-tokenizer-0 does (no BOS, special tokens not parsed).

llama.cpp's own qwen35 vectors give the same ids under Qwen2's pre-tokenizer, so they cannot tell
the two apart; these texts can. Needs the oracle build (tools/oracle/build.sh; llama-tokenize is
enough: `cmake --build $SMOLRUN_ORACLE/build --target llama-tokenize`).

    tools/oracle/vocab_marks.py
"""
import os
import struct
import subprocess
import sys
import tempfile

repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
vocab_dir = os.path.join(repo, "tests/golden/vocab")
cache = os.environ.get("SMOLRUN_ORACLE", os.path.expanduser("~/.cache/smolrun/oracle"))
tokenize = os.path.join(cache, "build/bin/llama-tokenize")
SEP = b"\n__ggml_vocab_test__\n"


def texts(path):
    raw = open(path, "rb").read()
    out, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            out.append(raw[pos:])
            break
        out.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    return out


def pre_value(name):
    key = b"tokenizer.ggml.pre"
    return struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(name)) + name


def ids(vocab, text):
    r = subprocess.run(
        [tokenize, "-m", vocab, "--stdin", "--ids", "--no-bos", "--no-parse-special",
         "--no-escape", "--log-disable"],
        input=text, capture_output=True, check=True)
    line = r.stdout.decode().strip().splitlines()[-1]
    assert line.startswith("[") and line.endswith("]"), line
    return [int(t) for t in line[1:-1].split(",") if t.strip()]


def main():
    if not os.access(tokenize, os.X_OK):
        sys.exit(f"vocab_marks: {tokenize} missing; build the oracle first (tools/oracle/build.sh)")
    cases = texts(os.path.join(vocab_dir, "qwen35-marks.inp"))
    qwen35 = os.path.join(vocab_dir, "ggml-vocab-qwen35.gguf")
    data = open(qwen35, "rb").read()
    assert data.count(pre_value(b"qwen35")) == 1
    with tempfile.TemporaryDirectory() as tmp:
        qwen2 = os.path.join(tmp, "ggml-vocab-qwen2.gguf")
        open(qwen2, "wb").write(data.replace(pre_value(b"qwen35"), pre_value(b"qwen2")))
        for name, vocab in [("qwen35", qwen35), ("qwen2", qwen2)]:
            lines = [" ".join(str(i) for i in ids(vocab, t)) for t in cases]
            out = os.path.join(vocab_dir, f"qwen35-marks.{name}.out")
            open(out, "w").write("".join(line + "\n" for line in lines))
            print(f"vocab_marks: {out}: {len(lines)} cases")


if __name__ == "__main__":
    main()
