#!/usr/bin/env python3
"""Writes words/en-wordfreq.tsv, the English word list that `smolrun gguf head-ids` weighs
vocabulary ids by (see README.md): the 100,000 most frequent English words of wordfreq's
"large" list, one "word<TAB>count" line each, count = occurrences per billion words.

wordfreq (Robyn Speer; code Apache-2.0, data CC-BY-SA 4.0, sources listed in README.md) is on
PyPI; the version is pinned so that the list is reproducible:

    pip install wordfreq==3.1.1
    python3 tools/head-corpus/make-word-freq.py

wordfreq folds case ("london", "i'm") and writes multi-digit numbers with zeros ("0000");
head-ids adds the capitalised and space-led spellings itself."""
import os, sys

WORDS = 100_000
PINNED = "3.1.1"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "words", "en-wordfreq.tsv")

def main():
    try:
        import wordfreq
    except ImportError:
        sys.exit(f"wordfreq is not installed: pip install wordfreq=={PINNED}")
    version = getattr(wordfreq, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version
        version = dist_version("wordfreq")
    if version != PINNED:
        sys.exit(f"wordfreq {version} is installed; the list is made with {PINNED}: "
                 f"pip install wordfreq=={PINNED}")
    lines = []
    for word in wordfreq.top_n_list("en", WORDS, wordlist="large"):
        # Tabs and newlines never occur in wordfreq's words; a word that had one would break
        # the format, so it is left out rather than written.
        if "\t" in word or "\n" in word:
            continue
        per_billion = round(wordfreq.word_frequency(word, "en", wordlist="large") * 1e9)
        lines.append(f"{word}\t{per_billion}\n")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(f"# English word frequencies from wordfreq {PINNED} (large list, top {WORDS:,}),\n")
        f.write("# occurrences per billion words. Data CC-BY-SA 4.0: see tools/head-corpus/README.md.\n")
        f.write("# Made by tools/head-corpus/make-word-freq.py.\n")
        f.writelines(lines)
    print(f"wrote {OUT}: {len(lines)} words")

if __name__ == "__main__":
    main()
