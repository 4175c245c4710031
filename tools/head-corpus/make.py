#!/usr/bin/env python3
"""Regenerates the third-party files of the head-selection corpus from local copies of their
sources (see README.md for the licences). The files written by hand (en-prose.txt,
multilingual.txt) are not touched. Run from anywhere: python3 tools/head-corpus/make.py

Needs: rustup component add rust-docs; cargo fetch (in this workspace); Debian's dict-devil and
wordnet-base packages."""
import glob, html.parser, os, re, subprocess, sys, sysconfig

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

def devils_dictionary():
    """Ambrose Bierce's The Devil's Dictionary (1911, public domain), from Debian's dict-devil:
    the book from its title page on, each paragraph on one line (verse keeps its lines), one
    space between sentences."""
    raw = subprocess.run(["zcat", "/usr/share/dictd/devil.dict.dz"], capture_output=True,
                         check=True).stdout.decode("latin-1").split("\n")
    # dictd's own header entries (00-database-*) come before the book's title page.
    start = next(i for i, l in enumerate(raw) if l.strip().startswith("The Internet Wiretap"))
    out, para = [], []
    def flush():
        if para:
            # A word hyphenated at a line end ("cannon-" / "shot") is one word again.
            out.append(re.sub(r"(?<=\w-) (?=\w)", "", " ".join(para)))
            para.clear()
    for line in raw[start:]:
        if not line.strip():
            flush()
            out.append("")
        elif line.startswith(" "):
            flush()
            out.append(line.rstrip())
        else:
            para.append(line.strip())
    flush()
    out = [re.sub(r"(?<=\S) {2,}(?=\S)", " ", l) for l in out]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"
    # dictd's index entry of the alphabet closes the file; it is not part of the book.
    return text.replace(" abcdefghijklmnopqrstuvwxyz", "")

def wordnet_examples():
    """The example sentences of WordNet 3.0's glosses (the quoted parts), one per line, in the
    order of Debian's wordnet-base data files: nouns, verbs, adjectives, adverbs."""
    out = []
    for pos in ("noun", "verb", "adj", "adv"):
        for line in open(f"/usr/share/wordnet/data.{pos}", encoding="latin-1"):
            if line.startswith("  ") or "| " not in line:
                continue  # the licence header, or a synset without a gloss
            out += re.findall(r'"([^"]+)"', line.split("| ", 1)[1])
    return "\n".join(out) + "\n"

def wordnet_licence():
    """WordNet's licence, which must accompany every copy of (a part of) its database."""
    text = open("/usr/share/doc/wordnet-base/copyright").read()
    body = text.split("License: WordNet3.0\n", 1)[1].split("\n\nFiles: ")[0]
    lines = ["" if l == " ." else l[1:] for l in body.split("\n")]
    return ("WordNet 3.0 licence (en-wordnet-examples.txt is derived from the WordNet 3.0 "
            "database)\n\n" + "\n".join(lines).strip() + "\n")

def rust_crates():
    """README.md and src/lib.rs of every crates.io package in this workspace's Cargo.lock, the
    first 12 KB of each (cut at a line end), so that no one crate outweighs the rest. Returns
    the text and the list of (crate, version, licence) for README.md."""
    root = os.path.join(HERE, "..", "..")
    lock = open(os.path.join(root, "Cargo.lock")).read()
    packages = re.findall(
        r'\[\[package\]\]\nname = "([^"]+)"\nversion = "([^"]+)"\nsource = "registry', lock)
    registry = sorted(glob.glob(os.path.expanduser("~/.cargo/registry/src/*/")))
    out, credits = [], []
    for name, version in sorted(packages):
        dirs = [d for d in (os.path.join(r, f"{name}-{version}") for r in registry)
                if os.path.isdir(d)]
        if not dirs:
            sys.exit(f"{name} {version} is not in ~/.cargo/registry: cargo fetch in this workspace")
        manifest = open(os.path.join(dirs[0], "Cargo.toml")).read()
        licence = re.search(r'^license\s*=\s*"([^"]+)"', manifest, re.M)
        used = False
        for f in ("README.md", "src/lib.rs"):
            p = os.path.join(dirs[0], f)
            if not os.path.exists(p):
                continue
            text = open(p, errors="replace").read()
            if len(text) > 12000:
                text = text[:text.rfind("\n", 0, 12000) + 1]
            out.append(text)
            used = True
        if used:
            licence = licence.group(1) if licence else "see the package"
            # Where the crate offers MIT, its MIT notice; otherwise its own licence file.
            files = [f for f in ("LICENSE-MIT", "LICENSE", "COPYING", "LICENSE-APACHE")
                     if os.path.exists(os.path.join(dirs[0], f))]
            notice = (open(os.path.join(dirs[0], files[0]), errors="replace").read().strip()
                      if files else f"(the package has no licence file; Cargo.toml: {licence})")
            credits.append((name, version, licence, notice))
    return "\n".join(out), credits

main()
open(os.path.join(HERE, "en-devils-dictionary.txt"), "w").write(devils_dictionary())
open(os.path.join(HERE, "en-wordnet-examples.txt"), "w").write(wordnet_examples())
os.makedirs(os.path.join(HERE, "licenses"), exist_ok=True)
open(os.path.join(HERE, "licenses", "wordnet.txt"), "w").write(wordnet_licence())
text, credits = rust_crates()
open(os.path.join(HERE, "code-rust-crates.txt"), "w").write(text)
with open(os.path.join(HERE, "licenses", "code-rust-crates.md"), "w") as f:
    f.write("# Crates in code-rust-crates.txt\n\n"
            "README.md and src/lib.rs (the first 12 KB of each) of these crates.io packages, "
            "under their own licences.\n\n"
            "| crate | version | licence |\n|---|---|---|\n")
    for name, version, licence, _ in credits:
        f.write(f"| {name} | {version} | {licence} |\n")
    f.write("\nTheir licence notices (the MIT one where a crate offers it) are in "
            "code-rust-crates-notices.txt.\n")
with open(os.path.join(HERE, "licenses", "code-rust-crates-notices.txt"), "w") as f:
    first = {}
    for name, version, licence, notice in credits:
        if notice in first:
            notice = f"(the same text as {first[notice]}'s above)"
        else:
            first[notice] = name
        f.write(f"==== {name} {version} ({licence})\n\n{notice}\n\n")
