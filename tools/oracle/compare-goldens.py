#!/usr/bin/env python3
"""The spread between two llama.cpp runs of one file, the way tests/tests/logits.rs measures ours.

    tools/oracle/compare-goldens.py REFERENCE/logits.json OTHER/logits.json

Per position: KL(reference || other) over the reference's top-20 and the rest (kl_top_k in
tests/src/model_helpers.rs), and whether the top-1 changes where the reference's top-2 margin
exceeds 0.1. `other` is known on its own top-20 only: an id outside them gets its 20th logit,
an upper bound on it, so the KL printed is a lower bound at such positions.

Used for #33 to measure the reference against itself: llama.cpp b11434 built with its generic
kernels (cmake -DGGML_NATIVE=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF,
target ggml-cpu), the golden program run with LD_LIBRARY_PATH at that build and --no-repack,
against the goldens of the shipped (AVX2) build.
"""
import json
import math
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a = json.load(open(sys.argv[1]))
    b = json.load(open(sys.argv[2]))
    kls, flips, n_margin, missing = [], [], 0, 0
    for ti, (ta, tb) in enumerate(zip(a["texts"], b["texts"])):
        for pi, (pa, pb) in enumerate(zip(ta["top"], tb["top"])):
            lse_a, lse_b = ta["lse"][pi], tb["lse"][pi]
            other = {int(t): v for t, v in pb}
            floor = min(other.values())
            kl = p_in = q_in = 0.0
            for t, v in pa:
                p = math.exp(v - lse_a)
                missing += int(t) not in other
                q = math.exp(other.get(int(t), floor) - lse_b)
                if p > 0:
                    kl += p * math.log(p / max(q, 1e-300))
                p_in += p
                q_in += q
            p_rest, q_rest = max(1 - p_in, 0.0), max(1 - q_in, 1e-300)
            if p_rest > 1e-12:
                kl += p_rest * math.log(p_rest / q_rest)
            kls.append(kl)
            ranked = sorted(pa, key=lambda x: -x[1])
            margin = ranked[0][1] - ranked[1][1]
            if margin > 0.1:
                n_margin += 1
                if int(max(pb, key=lambda x: x[1])[0]) != int(ranked[0][0]):
                    flips.append((ti, pi, round(margin, 3)))
    print(f"positions {len(kls)}, mean KL {sum(kls) / len(kls):.3e}, max {max(kls):.3e}; "
          f"top-1 changes at margin > 0.1: {len(flips)}/{n_margin} (text, position, margin) {flips}; "
          f"reference ids outside the other's top-20: {missing}")


if __name__ == "__main__":
    main()
