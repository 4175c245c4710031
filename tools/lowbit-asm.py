#!/usr/bin/env python3
"""The loop bodies of the aarch64 low-bit kernels (kernels-asm/src/aarch64/q1_0.rs, q2_0.rs,
tq1_0.rs) and their llvm-mca cycles per block.

The Cortex-A53 and A55 issue in order, so the order of the asm lines decides their speed. Each
kernel's loop body is written here as operations with the registers they write and read: block
i's integer part and block i - 1's float part (the software pipeline the .rs files describe).
A greedy list scheduler orders them (every read-after-write, write-after-read and
write-after-write dependence on a register kept, latencies roughly the A55's), and `emit`
prints the lines pasted into the asm! blocks.

    tools/lowbit-asm.py emit q1|q2|tq1 dot|neon [tail]   # the loop body (or the float tail)
    tools/lowbit-asm.py emit lut|lut-build [q1|q2]       # the Q1_0 / Q2_0 lookup-table loops
    tools/lowbit-asm.py mca [LLAMA_QUANTS_C]              # cycles per block, ours (and llama.cpp's)

`mca` runs llvm-mca (-iterations=100, Total Cycles / 100) on -mcpu=cortex-a55, cortex-a53 and
cyclone. The Q1_0 lookup-table kernel's line is per row (a trip covers 16 rows x 128 weights);
its table build, paid once per token and matrix input whatever the row count, is per 128
activations. With the path of llama.cpp's ggml/src/ggml-cpu/arch/arm/quants.c it also compiles
that file with aarch64-linux-gnu-gcc -O3 (-march=armv8.2-a+dotprod and -march=armv8-a),
extracts the block loop of ggml_vec_dot_q1_0_q8_0, _q2_0_q8_0 and _tq1_0_q8_K and measures
it the same way.
"""
import os
import re
import subprocess
import sys
import tempfile

def schedule(ops):
    n = len(ops)
    deps = [[] for _ in range(n)]  # (pred, delay)
    last_w, reads_since = {}, {}
    for i, (t, w, r, lat) in enumerate(ops):
        for x in r:
            if x in last_w: deps[i].append((last_w[x], ops[last_w[x]][3]))
        for x in w:
            if x in last_w: deps[i].append((last_w[x], 1))
            for j in reads_since.get(x, []): deps[i].append((j, 0))
        for x in r: reads_since.setdefault(x, []).append(i)
        for x in w: last_w[x] = i; reads_since[x] = []
    issued = {}
    out = []
    cycle = 0
    remaining = list(range(n))
    while remaining:
        best = None
        for i in remaining:
            if all(p in issued for p, _ in deps[i]):
                ready = max([issued[p] + d for p, d in deps[i]] + [0])
                if best is None or ready < best[0]:
                    best = (ready, i)
        ready, i = best
        cycle = max(cycle + 1, ready)
        issued[i] = cycle
        out.append(ops[i][0])
        remaining.remove(i)
    return out

def op(text, w, r, lat=4):
    return (text, w, r, lat)


def q1_int(dot):
    """Integer part of one Q1_0 block: P = [s0..s3] (i32x4, dot) or i16 partials; Q = d8 halves; R = d."""
    o = []
    o.append(op("ldr h20, [{x}]", ["v20"], ["x"], 3))
    bits = ["v22", "v23", "v24", "v25"]
    ys = [("v2", "v3"), ("v4", "v5"), ("v6", "v7"), ("v8", "v9")]
    masks = ["v10", "v11", "v12", "v13"]
    accs = ["v28", "v29", "v30", "v31"]
    d8 = ["v0", "v1", "v26", "v27"]
    for k in range(4):
        o.append(op(f"ldr s{bits[k][1:]}, [{{x}}, #{2 + 4*k}]", [bits[k]], ["x"], 3))
        o.append(op(f"ldur q{ys[k][0][1:]}, [{{y}}, #{34*k + 2}]", [ys[k][0]], ["y"], 3))
        o.append(op(f"ldur q{ys[k][1][1:]}, [{{y}}, #{34*k + 18}]", [ys[k][1]], ["y"], 3))
        o.append(op(f"ldr h{d8[k][1:]}, [{{y}}, #{34*k}]", [d8[k]], ["y"], 3))
    for k in range(4):
        b, m = bits[k], masks[k]
        # first 16 elements into m, the next 16 into b itself
        o.append(op(f"tbl {m}.16b, {{{{{b}.16b}}}}, v16.16b", [m], [b, "v16"]))
        o.append(op(f"tbl {b}.16b, {{{{{b}.16b}}}}, v17.16b", [b], [b, "v17"]))
        for v in (m, b):
            o.append(op(f"cmtst {v}.16b, {v}.16b, v18.16b", [v], [v, "v18"]))
            o.append(op(f"orn {v}.16b, v19.16b, {v}.16b", [v], [v, "v19"]))
        a = accs[k]
        y0, y1 = ys[k]
        if dot:
            o.append(op(f"movi {a}.4s, #0", [a], [], 1))
            o.append(op(f"sdot {a}.4s, {m}.16b, {y0}.16b", [a], [a, m, y0]))
            o.append(op(f"sdot {a}.4s, {b}.16b, {y1}.16b", [a], [a, b, y1]))
        else:
            o.append(op(f"smull {a}.8h, {m}.8b, {y0}.8b", [a], [m, y0]))
            o.append(op(f"smlal2 {a}.8h, {m}.16b, {y0}.16b", [a], [a, m, y0]))
            o.append(op(f"smlal {a}.8h, {b}.8b, {y1}.8b", [a], [a, b, y1]))
            o.append(op(f"smlal2 {a}.8h, {b}.16b, {y1}.16b", [a], [a, b, y1]))
    # [s0, s1, s2, s3]: pairwise adds, exact (dot: i32; neon: i16 lanes of at most 4 * 4 * 128,
    # then widened)
    sz = "4s" if dot else "8h"
    o.append(op(f"addp v28.{sz}, v28.{sz}, v29.{sz}", ["v28"], ["v28", "v29"]))
    o.append(op(f"addp v30.{sz}, v30.{sz}, v31.{sz}", ["v30"], ["v30", "v31"]))
    if dot:
        o.append(op("addp v14.4s, v28.4s, v30.4s", ["v14"], ["v28", "v30"]))
    else:
        o.append(op("addp v28.8h, v28.8h, v30.8h", ["v28"], ["v28", "v30"]))
        o.append(op("saddlp v14.4s, v28.8h", ["v14"], ["v28"]))
    o.append(op("zip1 v0.4h, v0.4h, v1.4h", ["v0"], ["v0", "v1"], 2))
    o.append(op("zip1 v26.4h, v26.4h, v27.4h", ["v26"], ["v26", "v27"], 2))
    o.append(op("zip1 v15.2s, v0.2s, v26.2s", ["v15"], ["v0", "v26"], 2))
    o.append(op("add {x}, {x}, #18", ["x"], ["x"], 1))
    o.append(op("add {y}, {y}, #136", ["y"], ["y"], 1))
    return o

def q1_tail():
    """Float part of the previous block, in the scalar twin's order."""
    return [
        op("scvtf v14.4s, v14.4s", ["v14"], ["v14"]),
        op("fcvtl v15.4s, v15.4h", ["v15"], ["v15"]),
        op("fmul v14.4s, v14.4s, v15.4s", ["v14"], ["v14", "v15"]),
        op("faddp s15, v14.2s", ["v15"], ["v14"]),
        op("ext v14.16b, v14.16b, v14.16b, #8", ["v14"], ["v14"], 2),
        op("fadd s15, s15, s14", ["v15"], ["v15", "v14"]),
        op("ext v14.16b, v14.16b, v14.16b, #4", ["v14"], ["v14"], 2),
        op("fadd s15, s15, s14", ["v15"], ["v15", "v14"]),
        op("fcvt s20, h20", ["v20"], ["v20"]),
        op("fmul s15, s20, s15", ["v15"], ["v15", "v20"]),
        op("fadd s21, s21, s15", ["sumf"], ["sumf", "v15"]),
    ]

def emit(lines):
    return "\n".join(f'                "{l}",' for l in lines)

def q1_loop(dot):
    ops = q1_tail() + q1_int(dot) + [op("subs {nb}, {nb}, #1", ["nb", "flags"], ["nb"], 1)]
    return schedule(ops) + ["b.ne 2b"]

def q2_int(dot):
    o = [op("ldr h20, [{x}]", ["v20"], ["x"], 3)]
    codes, masks = ["v22", "v24"], ["v10", "v11"]
    ys = [("v2", "v3"), ("v4", "v5")]
    d8 = ["v0", "v1"]
    accs = ["v28", "v29"]
    for k in range(2):
        o.append(op(f"ldr d{codes[k][1:]}, [{{x}}, #{2 + 8*k}]", [codes[k]], ["x"], 3))
        o.append(op(f"ldur q{ys[k][0][1:]}, [{{y}}, #{34*k + 2}]", [ys[k][0]], ["y"], 3))
        o.append(op(f"ldur q{ys[k][1][1:]}, [{{y}}, #{34*k + 18}]", [ys[k][1]], ["y"], 3))
        o.append(op(f"ldr h{d8[k][1:]}, [{{y}}, #{34*k}]", [d8[k]], ["y"], 3))
    for k in range(2):
        c, m = codes[k], masks[k]
        o.append(op(f"tbl {m}.16b, {{{{{c}.16b}}}}, v16.16b", [m], [c, "v16"]))
        o.append(op(f"tbl {c}.16b, {{{{{c}.16b}}}}, v17.16b", [c], [c, "v17"]))
        for v in (m, c):
            o.append(op(f"ushl {v}.16b, {v}.16b, v18.16b", [v], [v, "v18"]))
            o.append(op(f"and {v}.16b, {v}.16b, v19.16b", [v], [v, "v19"]))
            o.append(op(f"sub {v}.16b, {v}.16b, v23.16b", [v], [v, "v23"]))
        a = accs[k]
        y0, y1 = ys[k]
        if dot:
            o.append(op(f"movi {a}.4s, #0", [a], [], 1))
            o.append(op(f"sdot {a}.4s, {m}.16b, {y0}.16b", [a], [a, m, y0]))
            o.append(op(f"sdot {a}.4s, {c}.16b, {y1}.16b", [a], [a, c, y1]))
        else:
            o.append(op(f"smull {a}.8h, {m}.8b, {y0}.8b", [a], [m, y0]))
            o.append(op(f"smlal2 {a}.8h, {m}.16b, {y0}.16b", [a], [a, m, y0]))
            o.append(op(f"smlal {a}.8h, {c}.8b, {y1}.8b", [a], [a, c, y1]))
            o.append(op(f"smlal2 {a}.8h, {c}.16b, {y1}.16b", [a], [a, c, y1]))
    if dot:
        o.append(op("addp v28.4s, v28.4s, v29.4s", ["v28"], ["v28", "v29"]))
        o.append(op("addp v14.4s, v28.4s, v28.4s", ["v14"], ["v28"]))
    else:
        o.append(op("addp v28.8h, v28.8h, v29.8h", ["v28"], ["v28", "v29"]))
        o.append(op("addp v28.8h, v28.8h, v28.8h", ["v28"], ["v28"]))
        o.append(op("saddlp v14.4s, v28.8h", ["v14"], ["v28"]))
    o.append(op("zip1 v15.4h, v0.4h, v1.4h", ["v15"], ["v0", "v1"], 2))
    o.append(op("add {x}, {x}, #18", ["x"], ["x"], 1))
    o.append(op("add {y}, {y}, #68", ["y"], ["y"], 1))
    return o

def q2_tail():
    return [
        op("scvtf v14.4s, v14.4s", ["v14"], ["v14"]),
        op("fcvtl v15.4s, v15.4h", ["v15"], ["v15"]),
        op("fmul v14.4s, v14.4s, v15.4s", ["v14"], ["v14", "v15"]),
        op("faddp s15, v14.2s", ["v15"], ["v14"]),
        op("fcvt s20, h20", ["v20"], ["v20"]),
        op("fmul s15, s20, s15", ["v15"], ["v15", "v20"]),
        op("fadd s21, s21, s15", ["sumf"], ["sumf", "v15"]),
    ]

def tq1_int(dot):
    o = [op("ldur q0, [{x}]", ["v0"], ["x"], 3),
         op("ldur q1, [{x}, #16]", ["v1"], ["x"], 3),
         op("ldur q2, [{x}, #32]", ["v2"], ["x"], 3),
         op("add {t}, {x}, #48", ["t"], ["x"], 1),
         op("ld1r {{v3.4s}}, [{t}]", ["v3"], ["t"], 3),
         op("ldr h20, [{x}, #52]", ["v20"], ["x"], 3),
         op("ldr s15, [{y}]", ["v15"], ["y"], 3),
         op("mul v3.16b, v3.16b, v29.16b", ["v3"], ["v3", "v29"])]
    accs = ["v24", "v25", "v26", "v27"]
    for a in accs:
        o.append(op(f"movi {a}.4s, #0", [a], [], 1))
    ypool = ["v4", "v5", "v6", "v7", "v8", "v9"]
    tpool = ["v10", "v11", "v12", "v13", "v16"]
    upool = ["v17", "v18", "v19", "v22", "v23"]
    # (q register, activation vector index) in element order; a mul by 3 follows a q's use
    # when it has digits left
    seq = []
    for n in range(5):
        seq += [("v0", 2 * n, n < 4), ("v1", 2 * n + 1, n < 4)]
    for n in range(5):
        seq += [("v2", 10 + n, n < 4)]
    seq += [("v3", 15, False)]
    for i, (qr, j, more) in enumerate(seq):
        yv, t, u, a = ypool[i % 6], tpool[i % 5], upool[i % 5], accs[i % 4]
        o.append(op(f"ldur q{yv[1:]}, [{{y}}, #{4 + 16 * j}]", [yv], ["y"], 3))
        # trit = -(q < 86) + (q >= 171), each comparison -1 where true
        o.append(op(f"cmhi {t}.16b, v30.16b, {qr}.16b", [t], [qr, "v30"]))
        o.append(op(f"cmhs {u}.16b, {qr}.16b, v31.16b", [u], [qr, "v31"]))
        o.append(op(f"sub {t}.16b, {t}.16b, {u}.16b", [t], [t, u]))
        if dot:
            o.append(op(f"sdot {a}.4s, {t}.16b, {yv}.16b", [a], [a, t, yv]))
        else:
            o.append(op(f"smlal {a}.8h, {t}.8b, {yv}.8b", [a], [a, t, yv]))
            o.append(op(f"smlal2 {a}.8h, {t}.16b, {yv}.16b", [a], [a, t, yv]))
        if more:
            o.append(op(f"mul {qr}.16b, {qr}.16b, v28.16b", [qr], [qr, "v28"]))
    sz = "4s" if dot else "8h"
    o.append(op(f"add v24.{sz}, v24.{sz}, v25.{sz}", ["v24"], ["v24", "v25"]))
    o.append(op(f"add v26.{sz}, v26.{sz}, v27.{sz}", ["v26"], ["v26", "v27"]))
    o.append(op(f"add v24.{sz}, v24.{sz}, v26.{sz}", ["v24"], ["v24", "v26"]))
    if dot:
        o.append(op("addv s14, v24.4s", ["v14"], ["v24"]))
    else:
        o.append(op("saddlv s14, v24.8h", ["v14"], ["v24"]))
    o.append(op("add {x}, {x}, #54", ["x"], ["x"], 1))
    o.append(op("add {y}, {y}, #292", ["y"], ["y"], 1))
    return o

def tq1_tail():
    return [
        op("scvtf s14, s14", ["v14"], ["v14"]),
        op("fcvt s20, h20", ["v20"], ["v20"]),
        op("fmul s20, s20, s15", ["v20"], ["v20", "v15"]),
        op("fmul s14, s14, s20", ["v14"], ["v14", "v20"]),
        op("fadd s21, s21, s14", ["sumf"], ["sumf", "v14"]),
    ]

def loop(tail, intp, dot):
    ops = tail() + intp(dot) + [op("subs {nb}, {nb}, #1", ["nb", "flags"], ["nb"], 1)]
    return schedule(ops) + ["b.ne 2b"]



def emit(lines):
    return "\n".join(f'                "{l}",' for l in lines)


KINDS = {"q1": (q1_tail, q1_int), "q2": (q2_tail, q2_int), "tq1": (tq1_tail, tq1_int)}
BLOCK = {"q1": 128, "q2": 64, "tq1": 256}
CPUS = ["cortex-a55", "cortex-a53", "cyclone"]


def body(kind, face):
    tail, intp = KINDS[kind]
    return loop(tail, intp, face == "dot")


def mca_cycles(asm_text, cpu):
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write(asm_text)
    out = subprocess.run(
        ["llvm-mca", "-mtriple=aarch64", f"-mcpu={cpu}", "-mattr=+dotprod,+fullfp16",
         "-iterations=100", f.name], capture_output=True, text=True, check=True).stdout
    os.unlink(f.name)
    return int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / 100


def ours_asm(kind, face):
    sub = {"{{": "{", "}}": "}", "{x}": "x0", "{y}": "x1", "{nb}": "x2", "{t}": "x3",
           "2b": ".Lloop"}
    lines = []
    for l in body(kind, face):
        for a, b in sub.items():
            l = l.replace(a, b)
        lines.append("  " + l)
    return ".Lloop:\n" + "\n".join(lines) + "\n"


def llama_loop(asm, fn):
    """The innermost backward-branch loop of `fn` in gcc's output (the block loop)."""
    txt = asm.splitlines()
    start = txt.index(f"{fn}:")
    end = next(i for i in range(start, len(txt)) if txt[i].strip().startswith(f".size\t{fn},"))
    lines = [l for l in txt[start:end] if not re.match(r"\s*\.(cfi|loc|file|p2align|align)", l)]
    labels = {l[:-1]: i for i, l in enumerate(lines) if re.match(r"^\.L\w+:$", l)}
    for i, l in enumerate(lines):
        m = re.match(r"\s*(b\.\w+|b\w\w|b|cbnz|cbz|tbnz|tbz)\s+.*?(\.L\w+)$", l)
        if m and m.group(2) in labels and labels[m.group(2)] < i:
            return "\n".join(lines[labels[m.group(2)]:i + 1]) + "\n"
    raise SystemExit(f"no loop in {fn}")



# ------------------------------------------------------------------------------------------
# Q1_0 lookup-table kernel (kernels-asm/src/aarch64/q1_0_lut.rs, layout in
# core/src/quant/q1_0_lut.rs): one 16-row group, one 128-column block per loop trip.
# Ops use virtual registers (%name); `allocate` gives them physical ones (least recently freed
# first, so that the scheduler has room to move them), then `schedule` orders them.
# ------------------------------------------------------------------------------------------

LUT_POOL = [f"v{i}" for i in list(range(0, 20)) + list(range(24, 31))]


def allocate(ops, pool, fixed=()):
    """Virtual registers (%name) -> physical, in program order, freeing each after its last read."""
    last = {}
    for i, (_, w, r, _) in enumerate(ops):
        for x in w + r:
            if x.startswith("%"):
                last[x] = i
    free, phys, out = list(pool), {}, []
    for i, (t, w, r, lat) in enumerate(ops):
        rp = [phys.get(x, x) for x in r]
        for x in dict.fromkeys(r):
            if x.startswith("%") and last[x] == i and x not in w:
                free.append(phys.pop(x))
        wp = []
        for x in w:
            if x.startswith("%"):
                if x not in phys:
                    if not free:
                        raise SystemExit(f"out of registers at op {i}: {t}")
                    phys[x] = free.pop(0)
                wp.append(phys[x])
            else:
                wp.append(x)
        names = dict(zip(r, rp))
        names.update(zip(w, wp))
        for x in sorted(names, key=len, reverse=True):
            if x.startswith("%"):
                # `q%a` / `d%a` / `s%a` / `h%a` take the number, `%a` the whole name (v5).
                t = re.sub(r"(?<=[qshd])" + re.escape(x) + r"\b", names[x][1:], t)
                t = re.sub(re.escape(x) + r"\b", names[x], t)
        for x in w:
            if x.startswith("%") and last[x] == i:
                free.append(phys.pop(x))
        out.append((t, wp, rp, lat))
    return out


def lut_block_ops(kind="q1"):
    """One weight block of a 16-row group (Q1_0: 128 columns = 4 Q8_0 blocks of 4 index pairs;
    Q2_0: 64 columns = 2 Q8_0 blocks of 8 pairs): sumf (v20-v23, rows 4q..4q+3) += d * sumi."""
    n_q8, pairs = (4, 4) if kind == "q1" else (2, 8)
    o = []
    o.append(op("ldr q%d8, [{s}]" if n_q8 == 4 else "ldr d%d8, [{s}]", ["%d8"], ["s"], 4))
    for k in range(n_q8):
        for j in range(pairs):
            o.append(op(f"ldr q%i{k}_{j}, [{{x}}, #{32 + 16 * (pairs * k + j)}]", [f"%i{k}_{j}"], ["x"], 4))
        for j in range(pairs):
            t = [f"%t{k}_{j}_{n}" for n in range(4)]  # lo_a hi_a lo_b hi_b
            off = 64 * pairs * k + 64 * j
            for n in range(4):
                o.append(op(f"ldr q{t[n]}, [{{t}}, #{off + 16 * n}]", [t[n]], ["t"], 4))
            i, a, b = f"%i{k}_{j}", f"%a{k}_{j}", f"%b{k}_{j}"
            o.append(op(f"and {a}.16b, {i}.16b, v31.16b", [a], [i, "v31"], 2))
            o.append(op(f"ushr {b}.16b, {i}.16b, #4", [b], [i], 2))
            la, ha, lb, hb = (f"%{n}{k}_{j}" for n in ("la", "ha", "lb", "hb"))
            o.append(op(f"tbl {la}.16b, {{{{{t[0]}.16b}}}}, {a}.16b", [la], [t[0], a], 2))
            o.append(op(f"tbl {ha}.16b, {{{{{t[1]}.16b}}}}, {a}.16b", [ha], [t[1], a], 2))
            o.append(op(f"tbl {lb}.16b, {{{{{t[2]}.16b}}}}, {b}.16b", [lb], [t[2], b], 2))
            o.append(op(f"tbl {hb}.16b, {{{{{t[3]}.16b}}}}, {b}.16b", [hb], [t[3], b], 2))
            o.append(op(f"add %L{k}_{j}.16b, {la}.16b, {lb}.16b", [f"%L{k}_{j}"], [la, lb], 2))
            o.append(op(f"add %H{k}_{j}.16b, {ha}.16b, {hb}.16b", [f"%H{k}_{j}"], [ha, hb], 2))
        # lo: 4 groups per byte (<= 252), then widened; hi: every group of the block in one
        # byte (Q1_0: |sum| <= 64; Q2_0: -128..112).
        quads = []
        for j in range(0, pairs, 2):
            q = f"%Q{k}_{j}"
            o.append(op(f"add {q}.16b, %L{k}_{j}.16b, %L{k}_{j+1}.16b", [q], [f"%L{k}_{j}", f"%L{k}_{j+1}"], 2))
            quads.append(q)
        hs = [f"%H{k}_{j}" for j in range(pairs)]
        n = 0
        while len(hs) > 1:
            nh = []
            for x, y in zip(hs[0::2], hs[1::2]):
                h = f"%Hs{k}_{n}"; n += 1
                o.append(op(f"add {h}.16b, {x}.16b, {y}.16b", [h], [x, y], 2))
                nh.append(h)
            hs = nh
        H = hs[0]
        S = []
        for m in range(0, len(quads), 2):
            qa, qb = quads[m], quads[m + 1]
            s0, s1 = f"%S{k}_{m}_0", f"%S{k}_{m}_1"
            o.append(op(f"uaddl {s0}.8h, {qa}.8b, {qb}.8b", [s0], [qa, qb], 2))
            o.append(op(f"uaddl2 {s1}.8h, {qa}.16b, {qb}.16b", [s1], [qa, qb], 2))
            S.append((s0, s1))
        o.append(op(f"sshll %h{k}0.8h, {H}.8b, #6", [f"%h{k}0"], [H], 2))
        o.append(op(f"sshll2 %h{k}1.8h, {H}.16b, #6", [f"%h{k}1"], [H], 2))
        for h in range(2):
            acc = S[0][h]
            for extra in S[1:]:
                nxt = f"%Sx{k}_{h}_{extra[h]}"
                o.append(op(f"add {nxt}.8h, {acc}.8h, {extra[h]}.8h", [nxt], [acc, extra[h]], 2))
                acc = nxt
            o.append(op(f"add %s{k}{h}.8h, {acc}.8h, %h{k}{h}.8h", [f"%s{k}{h}"], [acc, f"%h{k}{h}"], 2))
        # Rows 4q..4q+3: sumi += d8_k * float(S), the scalar's order (first block: a product alone).
        for q in range(4):
            src, half = f"%s{k}{q // 2}", ("4h" if q % 2 == 0 else "8h")
            ins = "sxtl" if q % 2 == 0 else "sxtl2"
            f = f"%f{k}{q}"
            o.append(op(f"{ins} {f}.4s, {src}.{half}", [f], [src], 2))
            o.append(op(f"scvtf {f}.4s, {f}.4s", [f], [f], 4))
            if k == 0:
                o.append(op(f"fmul %sumi{k}{q}.4s, {f}.4s, %d8.s[{k}]", [f"%sumi{k}{q}"], [f, "%d8"], 4))
            else:
                o.append(op(f"fmul {f}.4s, {f}.4s, %d8.s[{k}]", [f], [f, "%d8"], 4))
                o.append(op(f"fadd %sumi{k}{q}.4s, %sumi{k-1}{q}.4s, {f}.4s", [f"%sumi{k}{q}"], [f"%sumi{k-1}{q}", f], 4))
    o.append(op("ldr q%dA, [{x}]", ["%dA"], ["x"], 4))
    o.append(op("ldr q%dB, [{x}, #16]", ["%dB"], ["x"], 4))
    last = n_q8 - 1
    for q in range(4):
        src = "%dA" if q < 2 else "%dB"
        ins = "fcvtl" if q % 2 == 0 else "fcvtl2"
        half = "4h" if q % 2 == 0 else "8h"
        D = f"%D{q}"
        o.append(op(f"{ins} {D}.4s, {src}.{half}", [D], [src], 4))
        o.append(op(f"fmul {D}.4s, {D}.4s, %sumi{last}{q}.4s", [D], [D, f"%sumi{last}{q}"], 4))
        o.append(op(f"fadd v{20+q}.4s, v{20+q}.4s, {D}.4s", [f"v{20+q}"], [f"v{20+q}", D], 4))
    o.append(op("add {x}, {x}, #288", ["x"], ["x"], 1))
    o.append(op("add {t}, {t}, #1024", ["t"], ["t"], 1))
    o.append(op(f"add {{s}}, {{s}}, #{4 * n_q8}", ["s"], ["s"], 1))
    o.append(op("subs {nb}, {nb}, #1", ["nb", "flags"], ["nb"], 1))
    return o


def schedule_virtual(ops, n_regs):
    """`schedule` for ops on virtual registers, before allocation: the order may keep at most
    `n_regs` of them live at once (so that `allocate` then finds a register for each), and
    otherwise issues the op whose operands are ready soonest."""
    n = len(ops)
    deps = [[] for _ in range(n)]
    last_w, reads_since = {}, {}
    for i, (t, w, r, lat) in enumerate(ops):
        for x in r:
            if x in last_w: deps[i].append((last_w[x], ops[last_w[x]][3]))
        for x in w:
            if x in last_w: deps[i].append((last_w[x], 1))
            for j in reads_since.get(x, []): deps[i].append((j, 0))
        for x in r: reads_since.setdefault(x, []).append(i)
        for x in w: last_w[x] = i; reads_since[x] = []
    readers = {}
    for i, (_, w, r, _) in enumerate(ops):
        for x in r:
            if x.startswith("%"): readers.setdefault(x, set()).add(i)
    live, issued, out, cycle = set(), {}, [], 0
    remaining = list(range(n))
    while remaining:
        best = None
        for i in remaining:
            if not all(p in issued for p, _ in deps[i]):
                continue
            _, w, r, _ = ops[i]
            new = {x for x in w if x.startswith("%") and x not in live}
            freed = {x for x in r if x.startswith("%") and readers[x] == {i} and x not in w}
            grow = len(new) - len(freed)
            # An op that reads no register (a load) leaves room for the ops that consume it.
            reserve = 0 if any(x.startswith("%") for x in r) else 4
            if len(live) + grow > n_regs - reserve:
                continue
            ready = max([issued[p] + d for p, d in deps[i]] + [0])
            key = (ready, i)
            if best is None or key < best[0]:
                best = (key, i, new, freed)
        if best is None:
            # Nothing fits: fall back to program order (the generators write each chain's ops
            # together, so the first op left always runs and soon frees registers).
            i = remaining[0]
            _, w, r, _ = ops[i]
            new = {x for x in w if x.startswith("%") and x not in live}
            freed = {x for x in r if x.startswith("%") and readers[x] == {i} and x not in w}
            best = ((0, i), i, new, freed)
        (ready, _), i, new, freed = best
        cycle = max(cycle + 1, ready)
        issued[i] = cycle
        _, w, r, _ = ops[i]
        for x in r:
            if x.startswith("%"): readers[x].discard(i)
        live |= new
        live -= freed
        for x in w:
            if x.startswith("%") and not readers.get(x):
                live.discard(x)
        out.append(ops[i])
        remaining.remove(i)
    return out


def lut_loop(kind="q1"):
    ops = allocate(schedule_virtual(lut_block_ops(kind), len(LUT_POOL)), LUT_POOL)
    return [t for t, *_ in ops] + ["b.ne 2b"]


def lut_build_ops(kind="q1"):
    """Tables of one Q8_0 block (see q1_0_lut.rs): v16-v18 the signs of bits 0-2 for codes
    0..7 (+1/-1 as i16), v19 ones, v29 twos, v30 the byte 63."""
    o = [
        op("ldr h%d, [{y}]", ["%d"], ["y"], 4),
        op("ldur q%qa, [{y}, #2]", ["%qa"], ["y"], 4),
        op("ldur q%qb, [{y}, #18]", ["%qb"], ["y"], 4),
        op("fcvt s%d, h%d", ["%d"], ["%d"], 4),
        op("str s%d, [{s}], #4", ["s"], ["%d", "s"], 1),
    ]
    for w in range(4):
        src, ins, half = ("%qa" if w < 2 else "%qb"), ("sxtl" if w % 2 == 0 else "sxtl2"), ("8b" if w % 2 == 0 else "16b")
        o.append(op(f"{ins} %w{w}.8h, {src}.{half}", [f"%w{w}"], [src], 2))
    if kind == "q2":
        # v16: the code of x0 less 1 for codes c = 0..7 (c % 4 - 1); v17, v18: of x1 (c / 4 - 1)
        # for c = 0..7 and 8..15.
        for g in range(16):
            W, e = f"%w{g // 4}", 2 * (g % 4)
            T0, T1 = f"%T0{g}", f"%T1{g}"
            o.append(op(f"mul {T0}.8h, v17.8h, {W}.h[{e + 1}]", [T0], ["v17", W], 4))
            o.append(op(f"mla {T0}.8h, v16.8h, {W}.h[{e}]", [T0], [T0, "v16", W], 4))
            o.append(op(f"mul {T1}.8h, v18.8h, {W}.h[{e + 1}]", [T1], ["v18", W], 4))
            o.append(op(f"mla {T1}.8h, v16.8h, {W}.h[{e}]", [T1], [T1, "v16", W], 4))
            lo, hi = f"%lo{g}", f"%hi{g}"
            o.append(op(f"xtn {lo}.8b, {T0}.8h", [lo], [T0], 2))
            o.append(op(f"xtn2 {lo}.16b, {T1}.8h", [lo], [lo, T1], 2))
            o.append(op(f"and {lo}.16b, {lo}.16b, v30.16b", [lo], [lo, "v30"], 2))
            o.append(op(f"shrn {hi}.8b, {T0}.8h, #6", [hi], [T0], 2))
            o.append(op(f"shrn2 {hi}.16b, {T1}.8h, #6", [hi], [hi, T1], 2))
            o.append(op(f"stp q{lo}, q{hi}, [{{t}}, #{64 * (g // 2) + 32 * (g % 2)}]", [], [lo, hi, "t"], 1))
        o.append(op("add {y}, {y}, #34", ["y"], ["y"], 1))
        o.append(op("add {t}, {t}, #512", ["t"], ["t"], 1))
        o.append(op("subs {nb}, {nb}, #1", ["nb", "flags"], ["nb"], 1))
        return o
    for g in range(8):
        W, e = f"%w{g // 2}", 4 * (g % 2)
        T0, T1, M = f"%T0{g}", f"%T1{g}", f"%M{g}"
        o.append(op(f"mul {T0}.8h, v16.8h, {W}.h[{e}]", [T0], ["v16", W], 4))
        o.append(op(f"mla {T0}.8h, v17.8h, {W}.h[{e + 1}]", [T0], [T0, "v17", W], 4))
        o.append(op(f"mla {T0}.8h, v18.8h, {W}.h[{e + 2}]", [T0], [T0, "v18", W], 4))
        o.append(op(f"mls {T0}.8h, v19.8h, {W}.h[{e + 3}]", [T0], [T0, "v19", W], 4))
        o.append(op(f"mul {M}.8h, v29.8h, {W}.h[{e + 3}]", [M], ["v29", W], 4))
        o.append(op(f"add {T1}.8h, {T0}.8h, {M}.8h", [T1], [T0, M], 2))
        lo, hi = f"%lo{g}", f"%hi{g}"
        o.append(op(f"xtn {lo}.8b, {T0}.8h", [lo], [T0], 2))
        o.append(op(f"xtn2 {lo}.16b, {T1}.8h", [lo], [lo, T1], 2))
        o.append(op(f"and {lo}.16b, {lo}.16b, v30.16b", [lo], [lo, "v30"], 2))
        o.append(op(f"shrn {hi}.8b, {T0}.8h, #6", [hi], [T0], 2))
        o.append(op(f"shrn2 {hi}.16b, {T1}.8h, #6", [hi], [hi, T1], 2))
        o.append(op(f"stp q{lo}, q{hi}, [{{t}}, #{64 * (g // 2) + 32 * (g % 2)}]", [], [lo, hi, "t"], 1))
    o.append(op("add {y}, {y}, #34", ["y"], ["y"], 1))
    o.append(op("add {t}, {t}, #256", ["t"], ["t"], 1))
    o.append(op("subs {nb}, {nb}, #1", ["nb", "flags"], ["nb"], 1))
    return o


# The `mul/mla ... .h[i]` forms take their element register from v0-v15.
LUT_BUILD_POOL = [f"v{i}" for i in range(0, 16)] + ["v20", "v21", "v22", "v23", "v24", "v25", "v26", "v27", "v28", "v31"]


def lut_build_loop(kind="q1"):
    # Budgets found by trying (the mca figures are flat around them).
    ops = allocate(schedule_virtual(lut_build_ops(kind), 20 if kind == "q1" else 24), LUT_BUILD_POOL)
    # `mul/mla .h[i]` take their element register from v0-v15 (the assembler refuses others).
    assert all(int(w[1:]) < 16 for t, ws, _, _ in ops if t.startswith("sxtl") for w in ws), ops
    return [t for t, *_ in ops] + ["b.ne 2b"]


def lut_asm(lines):
    sub = {"{{": "{", "}}": "}", "{x}": "x0", "{y}": "x1", "{nb}": "x2", "{t}": "x3", "{s}": "x4",
           "2b": ".Lloop"}
    out = []
    for l in lines:
        for a, b in sub.items():
            l = l.replace(a, b)
        out.append("  " + l)
    return ".Lloop:\n" + "\n".join(out) + "\n"

def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "emit" and sys.argv[2] in ("lut", "lut-build"):
        kind = sys.argv[3] if len(sys.argv) > 3 else "q1"
        print(emit(lut_loop(kind) if sys.argv[2] == "lut" else lut_build_loop(kind)))
        return
    if len(sys.argv) >= 4 and sys.argv[1] == "emit":
        kind, face = sys.argv[2], sys.argv[3]
        if len(sys.argv) > 4 and sys.argv[4] == "tail":
            print(emit([t for t, *_ in KINDS[kind][0]()]))
        else:
            print(emit(body(kind, face)))
        return
    if len(sys.argv) >= 2 and sys.argv[1] == "mca":
        print(f"{'cycles per block':<44}" + "".join(f"{c:>12}" for c in CPUS))
        for kind in KINDS:
            for face in ["dot", "neon"]:
                name = f"ours {kind} ({BLOCK[kind]} weights) {'dotprod' if face == 'dot' else 'ARMv8.0'}"
                print(f"{name:<44}" + "".join(f"{mca_cycles(ours_asm(kind, face), c):>12.1f}" for c in CPUS))
        # The lookup-table kernel: one trip is 16 rows x 128 weights; the tables are built once
        # per token and matrix input (one trip: 32 activations), whatever the row count.
        lut = lut_asm(lut_loop())
        print(f"{'ours q1 LUT16 (128 weights, per row) ARMv8.0':<44}"
              + "".join(f"{mca_cycles(lut, c) / 16:>12.1f}" for c in CPUS))
        build = lut_asm(lut_build_loop())
        print(f"{'ours q1 LUT16 table build (128 activations)':<44}"
              + "".join(f"{mca_cycles(build, c) * 4:>12.1f}" for c in CPUS))
        lut = lut_asm(lut_loop("q2"))
        print(f"{'ours q2 LUT16 (64 weights, per row) ARMv8.0':<44}"
              + "".join(f"{mca_cycles(lut, c) / 16:>12.1f}" for c in CPUS))
        build = lut_asm(lut_build_loop("q2"))
        print(f"{'ours q2 LUT16 table build (64 activations)':<44}"
              + "".join(f"{mca_cycles(build, c) * 2:>12.1f}" for c in CPUS))
        if len(sys.argv) > 2:
            quants = sys.argv[2]
            src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(quants))))
            for march, label in [("armv8.2-a+dotprod+fp16", "dotprod"), ("armv8-a", "ARMv8.0")]:
                asm = subprocess.run(
                    ["aarch64-linux-gnu-gcc", "-O3", f"-march={march}", "-DNDEBUG",
                     f"-I{src}/../include", f"-I{src}", f"-I{src}/ggml-cpu", "-S", quants, "-o", "-"],
                    capture_output=True, text=True, check=True).stdout
                for fn in ["ggml_vec_dot_q1_0_q8_0", "ggml_vec_dot_q2_0_q8_0", "ggml_vec_dot_tq1_0_q8_K"]:
                    loop_asm = llama_loop(asm, fn)
                    name = f"llama.cpp {fn[13:]} {label}"
                    print(f"{name:<44}" + "".join(f"{mca_cycles(loop_asm, c):>12.1f}" for c in CPUS))
        return
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
