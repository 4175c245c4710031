#!/usr/bin/env python3
"""Held-out English texts by domain, for measuring a pruned LM head (issue #32, item 3).

    python3 tools/head-eval/domains.py OUT_DIR
    python3 tools/head-eval/domains.py OUT_DIR --outside MODEL IDS...   # and measure heads

Writes OUT_DIR/<domain>.txt for six domains; with --outside, also prints for each kept-ids file
(`smolrun gguf head-ids -o`) the share of each text's tokens (MODEL's tokenizer, `smolrun
tokenize`) that fall outside that head: the tokens a pruned model must re-spell. None of these texts is in tools/head-corpus or its
word list, and `head-ids` never reads them: they are what a head is judged on, not chosen from.
They are built from local or package-registry copies, not stored in this repository (their
licences differ from ours and they are large):

| domain | text | source |
|---|---|---|
| prose | "The Adventure of the Speckled Band" (Conan Doyle, 1892) and ppl-text.txt | tools/head-eval, tests/golden |
| legal | GPL-3, LGPL-2.1, MPL-2.0 and the GFDL-1.3 (licence texts, about 120 KB) | Debian's base-files, /usr/share/common-licenses |
| technical | chapter 16 of The Rust Programming Language | tools/head-eval |
| news | the 300 ABC news articles of the Lee corpus (Lee, Pincombe & Welsh 2005) | the gensim wheel on PyPI (test data) |
| dialogue | the English conversations of chatterbot-corpus, as alternating turns | the chatterbot-corpus wheel on PyPI |
| code-comments | the comments and docstrings of 12 CPython standard-library modules (none of the four in the corpus) | this machine's Python 3 |
"""
import ast
import io
import json
import os
import pathlib
import subprocess
import sys
import sysconfig
import tempfile
import tokenize
import zipfile

REPO = pathlib.Path(__file__).resolve().parents[2]
STDLIB = ["argparse", "subprocess", "functools", "logging/__init__", "pathlib", "tempfile",
          "dataclasses", "contextlib", "enum", "fractions", "csv", "calendar"]
CAP = 80_000
LICENSES = ["GPL-3", "LGPL-2.1", "MPL-2.0", "GFDL-1.3"]


def wheel(name, version, tmp):
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary", ":all:", "-d", tmp, f"{name}=={version}"], check=True)
    stem = name.replace("-", "_")
    return zipfile.ZipFile(next(pathlib.Path(tmp).glob(f"{stem}-{version}-*.whl")))


def comments_of(path):
    """Comment lines and docstrings, in file order, one paragraph each."""
    src = path.read_text()
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            if text and not text.startswith("!"):
                out.append((tok.start[0], text))
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                out.append((getattr(node, "lineno", 0), doc))
    out.sort()
    paras, run = [], []
    for _, text in out:
        run.append(text)
        if text.endswith((".", ":", "?")) or "\n" in text:
            paras.append(" ".join(run))
            run = []
    if run:
        paras.append(" ".join(run))
    return "\n".join(paras)


def outside(out, model, ids_files):
    smolrun = os.environ.get("SMOLRUN", str(REPO / "target/release/smolrun"))
    texts = sorted(out.glob("*.txt"))
    tokens = {}
    for t in texts:
        run = subprocess.run([smolrun, "tokenize", "-m", model, "-f", str(t), "--json",
                              "--no-bos"], capture_output=True, text=True, check=True)
        tokens[t.stem] = json.loads(run.stdout)
    print("| ids | rows | " + " | ".join(tokens) + " |")
    print("|---|---|" + "---|" * len(tokens))
    for f in ids_files:
        kept = {int(l) for l in open(f) if l.strip() and not l.startswith("#")}
        shares = [100 * sum(i not in kept for i in ids) / len(ids) for ids in tokens.values()]
        print(f"| {pathlib.Path(f).name} | {len(kept)} | "
              + " | ".join(f"{s:.2f} %" for s in shares) + " |")


def main():
    out = pathlib.Path(sys.argv[1])
    if "--outside" not in sys.argv or not any(out.glob("*.txt")):
        build(out)
    if "--outside" in sys.argv:
        at = sys.argv.index("--outside")
        outside(out, sys.argv[at + 1], sys.argv[at + 2:])


def build(out):
    out.mkdir(parents=True, exist_ok=True)
    texts = {
        "prose": (REPO / "tools/head-eval/en-speckled-band.txt").read_text()
        + "\n" + (REPO / "tests/golden/ppl-text.txt").read_text(),
        "legal": "\n".join(pathlib.Path("/usr/share/common-licenses", n).read_text()
                           for n in LICENSES),
        "technical": (REPO / "tools/head-eval/en-rust-book-ch16.txt").read_text(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        lee = wheel("gensim", "4.4.0", tmp).read("gensim/test/test_data/lee_background.cor")
        texts["news"] = "\n".join(lee.decode("utf-8", "replace").split("\n"))
        chat = wheel("chatterbot-corpus", "1.3.3", tmp)
        turns, seen = [], set()
        for name in sorted(chat.namelist()):
            if not (name.startswith("chatterbot_corpus/data/english/") and name.endswith(".yml")):
                continue
            for line in chat.read(name).decode().splitlines():
                s = line.strip()
                if s.startswith("- - "):
                    turns.append("")  # a new conversation
                    s = s[4:]
                elif s.startswith("- ") and not line.startswith("- "):
                    s = s[2:]
                else:
                    continue
                s = s.strip().strip("'\"")
                if s and s not in seen:
                    seen.add(s)
                    turns.append(s)
        lines, speaker = [], 0
        for t in turns:
            if t == "":
                speaker = 0
                lines.append("")
                continue
            lines.append(("A: ", "B: ")[speaker] + t)
            speaker ^= 1
        texts["dialogue"] = "\n".join(lines).strip() + "\n"
    lib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    texts["code-comments"] = "\n".join(comments_of(lib / f"{m}.py") for m in STDLIB)
    for name, text in texts.items():
        # At most CAP bytes, cut at a line end: a perplexity run per text and head size stays
        # around a minute on 2 cores.
        if len(text.encode()) > CAP:
            text = text.encode()[:CAP].decode("utf-8", "ignore")
            text = text[: text.rfind("\n") + 1]
        (out / f"{name}.txt").write_text(text)
        print(f"{name}: {len(text.encode())} bytes")


if __name__ == "__main__":
    main()
