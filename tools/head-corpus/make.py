#!/usr/bin/env python3
"""Regenerates the third-party files of the head-selection corpus from local copies of their
sources (see README.md for the licences). The files written by hand (en-prose.txt,
multilingual.txt) are not touched. Run from anywhere: python3 tools/head-corpus/make.py"""
import glob, html.parser, os, re, sys, sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
EVAL = os.path.join(HERE, "..", "head-eval")

class Text(html.parser.HTMLParser):
    """The readable text of an mdBook page: the <main> element, code blocks kept."""
    def __init__(self):
        super().__init__()
        self.depth = 0
        self.out = []
    def handle_starttag(self, tag, attrs):
        if tag == "main":
            self.depth += 1
        if self.depth and tag in ("p", "pre", "h1", "h2", "h3", "li", "br"):
            self.out.append("\n")
    def handle_endtag(self, tag):
        if tag == "main":
            self.depth -= 1
        if self.depth and tag in ("p", "pre", "h1", "h2", "h3"):
            self.out.append("\n")
    def handle_data(self, data):
        if self.depth:
            self.out.append(data)

def book_text(pages):
    out = []
    for p in pages:
        t = Text()
        t.feed(open(p, encoding="utf-8").read())
        out.append(re.sub(r"\n{3,}", "\n\n", "".join(t.out)).strip())
    return "\n\n".join(out) + "\n"

def main():
    rustc_doc = sorted(glob.glob(os.path.expanduser(
        "~/.rustup/toolchains/*/share/doc/rust/html/book")))
    if not rustc_doc:
        sys.exit("the Rust book is not installed: rustup component add rust-docs")
    book = rustc_doc[0]
    # Chapters 3-5 train the head; chapter 16 is held out for the bits-per-byte check.
    train = sorted(glob.glob(f"{book}/ch0[3-5]-*.html"))
    open(os.path.join(HERE, "en-rust-book.txt"), "w").write(book_text(train))
    held = sorted(glob.glob(f"{book}/ch16-*.html"))
    os.makedirs(EVAL, exist_ok=True)
    open(os.path.join(EVAL, "en-rust-book-ch16.txt"), "w").write(book_text(held))

    stdlib = sysconfig.get_paths()["stdlib"]
    code = []
    for name in ("textwrap.py", "shlex.py", "bisect.py", "heapq.py"):
        code.append(f"# ---- Python standard library: {name}\n" + open(os.path.join(stdlib, name)).read())
    open(os.path.join(HERE, "code-python.txt"), "w").write("\n".join(code))

    semver = sorted(glob.glob(os.path.expanduser("~/.cargo/registry/src/*/semver-1.*/src")))
    if not semver:
        sys.exit("semver's source is not in ~/.cargo/registry: cargo fetch in this workspace")
    code = []
    for name in ("parse.rs", "impls.rs", "display.rs", "eval.rs"):
        code.append(f"// ---- semver crate: src/{name}\n" + open(os.path.join(semver[-1], name)).read())
    open(os.path.join(HERE, "code-rust.txt"), "w").write("\n".join(code))

main()
