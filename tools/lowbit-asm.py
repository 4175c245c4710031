#!/usr/bin/env python3
"""The loop bodies of the aarch64 kernels written from here (kernels-asm/src/aarch64/q1_0.rs,
q2_0.rs, tq1_0.rs; q8_0.rs, q4_0.rs, q5_0.rs; q4_k.rs, q6_k.rs) and their llvm-mca cycles per
block. tools/mca-table.py measures every kernel, as built, beside llama.cpp's.

The Cortex-A53 and A55 issue in order, so the order of the asm lines decides their speed. Each
kernel's loop body is written here as operations with the registers they write and read: block
i's integer part and block i - 1's float part (the software pipeline the .rs files describe).
A greedy list scheduler orders them (every read-after-write, write-after-read and
write-after-write dependence on a register kept, latencies roughly the A55's), and `emit`
prints the lines pasted into the asm! blocks.

    tools/lowbit-asm.py emit q1|q2|tq1 dot|neon [tail]   # the loop body (or the float tail)
    tools/lowbit-asm.py emit lut|lut-build [q1|q2]       # the Q1_0 / Q2_0 lookup-table loops
    tools/lowbit-asm.py emit q8|q4|q5 dot|neon single|pair|tail
                     # the lone first block of an odd row, the two-block trip, the last pair's floats
    tools/lowbit-asm.py emit q4k|q6k dot|neon            # one whole super-block
    tools/lowbit-asm.py emit q3k|q5k neon                # one whole super-block (ARMv8.0 only)
    tools/lowbit-asm.py emit q41|q51 dot|neon single|pair # Q4_1/Q5_1: one block, two blocks
    tools/lowbit-asm.py emit q41 dot|neon first|loop|last # Q4_1's pipelined pair loop
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



# Q8_0, Q4_0, Q5_0 (one row): block i's loads, unpacking and integer sum (into v14), its scales
# converted (v15, v16) in the order the scalar twin multiplies them; block i - 1's float part.
# x advances by the weight block, y by the 34-byte Q8_0 block.
def q8_int(dot):
    o = [op("ldr h15, [{x}]", ["v15"], ["x"], 3),
         op("ldr h16, [{y}]", ["v16"], ["y"], 3),
         op("ldur q0, [{x}, #2]", ["v0"], ["x"], 3),
         op("ldur q1, [{x}, #18]", ["v1"], ["x"], 3),
         op("ldur q2, [{y}, #2]", ["v2"], ["y"], 3),
         op("ldur q3, [{y}, #18]", ["v3"], ["y"], 3),
         op("fcvt s15, h15", ["v15"], ["v15"]),
         op("fcvt s16, h16", ["v16"], ["v16"]),
         # dx * dy, as the twin forms it before multiplying by sumi
         op("fmul s15, s15, s16", ["v15"], ["v15", "v16"])]
    o += int8_sum(dot, ["v0", "v1"], ["v2", "v3"])
    o += [op("add {x}, {x}, #34", ["x"], ["x"], 1), op("add {y}, {y}, #34", ["y"], ["y"], 1)]
    return o


def int8_sum(dot, ws, ys, i16_safe=False):
    """sumi of the 32 products ws x ys into s14 (dotprod: sdot; else widening multiplies,
    widened to i32 at once unless two products always fit in i16)."""
    (w0, w1), (y0, y1) = ws, ys
    if dot:
        return [op("movi v4.4s, #0", ["v4"], [], 1),
                op(f"sdot v4.4s, {w0}.16b, {y0}.16b", ["v4"], ["v4", w0, y0]),
                op("movi v5.4s, #0", ["v5"], [], 1),
                op(f"sdot v5.4s, {w1}.16b, {y1}.16b", ["v5"], ["v5", w1, y1]),
                op("add v4.4s, v4.4s, v5.4s", ["v4"], ["v4", "v5"]),
                op("addv s14, v4.4s", ["v14"], ["v4"])]
    if i16_safe:
        return [op(f"smull v4.8h, {w0}.8b, {y0}.8b", ["v4"], [w0, y0]),
                op(f"smull2 v5.8h, {w0}.16b, {y0}.16b", ["v5"], [w0, y0]),
                op(f"smlal v4.8h, {w1}.8b, {y1}.8b", ["v4"], ["v4", w1, y1]),
                op(f"smlal2 v5.8h, {w1}.16b, {y1}.16b", ["v5"], ["v5", w1, y1]),
                op("add v4.8h, v4.8h, v5.8h", ["v4"], ["v4", "v5"]),
                op("saddlv s14, v4.8h", ["v14"], ["v4"])]
    return [op(f"smull v4.8h, {w0}.8b, {y0}.8b", ["v4"], [w0, y0]),
            op(f"smull2 v5.8h, {w0}.16b, {y0}.16b", ["v5"], [w0, y0]),
            op(f"smull v6.8h, {w1}.8b, {y1}.8b", ["v6"], [w1, y1]),
            op(f"smull2 v7.8h, {w1}.16b, {y1}.16b", ["v7"], [w1, y1]),
            op("saddlp v4.4s, v4.8h", ["v4"], ["v4"]),
            op("saddlp v5.4s, v5.8h", ["v5"], ["v5"]),
            op("sadalp v4.4s, v6.8h", ["v4"], ["v4", "v6"]),
            op("sadalp v5.4s, v7.8h", ["v5"], ["v5", "v7"]),
            op("add v4.4s, v4.4s, v5.4s", ["v4"], ["v4", "v5"]),
            op("addv s14, v4.4s", ["v14"], ["v4"])]


def q8_tail():
    """sumf += sumi as f32 * (dx * dy)."""
    return [op("scvtf s24, s14", ["v24"], ["v14"]),
            op("fmul s24, s24, s15", ["v24"], ["v24", "v15"]),
            op("fadd s21, s21, s24", ["sumf"], ["sumf", "v24"])]


def q4_int(dot):
    """Q4_0: byte j holds element j (low nibble) and j + 16 (high), offset by 8 (v30 = 0x0f,
    v31 = 8)."""
    o = [op("ldr h15, [{x}]", ["v15"], ["x"], 3),
         op("ldr h16, [{y}]", ["v16"], ["y"], 3),
         op("ldur q0, [{x}, #2]", ["v0"], ["x"], 3),
         op("ldur q2, [{y}, #2]", ["v2"], ["y"], 3),
         op("ldur q3, [{y}, #18]", ["v3"], ["y"], 3),
         op("fcvt s15, h15", ["v15"], ["v15"]),
         op("fcvt s16, h16", ["v16"], ["v16"]),
         op("and v8.16b, v0.16b, v30.16b", ["v8"], ["v0", "v30"]),
         op("ushr v9.16b, v0.16b, #4", ["v9"], ["v0"]),
         op("sub v8.16b, v8.16b, v31.16b", ["v8"], ["v8", "v31"]),
         op("sub v9.16b, v9.16b, v31.16b", ["v9"], ["v9", "v31"])]
    # |q - 8| <= 8, |y| <= 128: an i16 lane sums 4 products of at most 1024
    o += int8_sum(dot, ["v8", "v9"], ["v2", "v3"], i16_safe=True)
    o += [op("add {x}, {x}, #18", ["x"], ["x"], 1), op("add {y}, {y}, #34", ["y"], ["y"], 1)]
    return o


def q4_tail():
    """sumf += sumi as f32 * dx * dy, left to right."""
    return [op("scvtf s24, s14", ["v24"], ["v14"]),
            op("fmul s24, s24, s15", ["v24"], ["v24", "v15"]),
            op("fmul s24, s24, s16", ["v24"], ["v24", "v16"]),
            op("fadd s21, s21, s24", ["sumf"], ["sumf", "v24"])]


def q5_int(dot):
    """Q5_0: Q4_0's nibbles (at 6) and a fifth bit from qh (u32 at 2): `tbl` with v28 (8 zeros,
    8 ones) spreads qh bytes 0, 1 (v10) and 2, 3 (v11, loaded from 4) over the lanes of their
    elements, `cmtst` against v29 (1, 2, .. 128 twice) makes the bit a mask, and the quant
    minus 16 is the nibble minus 16 where the bit is clear (`bic` of v31 = 0x10 by the mask).
    v30 = 0x0f."""
    o = [op("ldr h15, [{x}]", ["v15"], ["x"], 3),
         op("ldr h16, [{y}]", ["v16"], ["y"], 3),
         op("ldur s10, [{x}, #2]", ["v10"], ["x"], 3),
         op("ldur h11, [{x}, #4]", ["v11"], ["x"], 3),
         op("ldur q0, [{x}, #6]", ["v0"], ["x"], 3),
         op("ldur q2, [{y}, #2]", ["v2"], ["y"], 3),
         op("ldur q3, [{y}, #18]", ["v3"], ["y"], 3),
         op("fcvt s15, h15", ["v15"], ["v15"]),
         op("fcvt s16, h16", ["v16"], ["v16"]),
         op("fmul s15, s15, s16", ["v15"], ["v15", "v16"]),
         op("tbl v10.16b, {{v10.16b}}, v28.16b", ["v10"], ["v10", "v28"]),
         op("tbl v11.16b, {{v11.16b}}, v28.16b", ["v11"], ["v11", "v28"]),
         op("cmtst v10.16b, v10.16b, v29.16b", ["v10"], ["v10", "v29"]),
         op("cmtst v11.16b, v11.16b, v29.16b", ["v11"], ["v11", "v29"]),
         op("bic v10.16b, v31.16b, v10.16b", ["v10"], ["v10", "v31"]),
         op("bic v11.16b, v31.16b, v11.16b", ["v11"], ["v11", "v31"]),
         op("and v8.16b, v0.16b, v30.16b", ["v8"], ["v0", "v30"]),
         op("ushr v9.16b, v0.16b, #4", ["v9"], ["v0"]),
         op("sub v8.16b, v8.16b, v10.16b", ["v8"], ["v8", "v10"]),
         op("sub v9.16b, v9.16b, v11.16b", ["v9"], ["v9", "v11"])]
    # |q - 16| <= 16, |y| <= 128: an i16 lane sums 4 products of at most 2048
    o += int8_sum(dot, ["v8", "v9"], ["v2", "v3"], i16_safe=True)
    o += [op("add {x}, {x}, #22", ["x"], ["x"], 1), op("add {y}, {y}, #34", ["y"], ["y"], 1)]
    return o


def q5_tail():
    """sumf += (dx * dy) * sumi as f32."""
    return [op("scvtf s24, s14", ["v24"], ["v14"]),
            op("fmul s24, s15, s24", ["v24"], ["v15", "v24"]),
            op("fadd s21, s21, s24", ["sumf"], ["sumf", "v24"])]



def q4k_block(dot):
    """One Q4_K super-block, whole (no trip over chunks): chunk c (sub-blocks 2c, 2c + 1) in
    one of two register sets so that chunk c + 1's loads and multiplies overlap chunk c's;
    the scaled lane sums go to two pairs of accumulators (even and odd chunks). Scales come
    and mins from `{sc}` as 16 bytes, widened to 8 i16 (ARMv8.0: v15, used by element, which
    needs v0..v15) or 8 i32 (dotprod: v14, v15). Nibble mask: v14 (ARMv8.0) or v13."""
    o = []
    sets = [dict(w=("v0", "v1"), lo=("v2", "v3"), y=("v4", "v5", "v6", "v7"),
                 p=("v8", "v9", "v10", "v11"), acc=("v12", "v13")),
            dict(w=("v16", "v17"), lo=("v18", "v19"), y=("v24", "v25", "v26", "v27"),
                 p=("v28", "v29", "v30", "v31"), acc=("v20", "v21"))]
    mask = "v13" if dot else "v14"
    o.append(op(f"movi {mask}.16b, #0x0f", [mask], [], 1))
    # `{sc}`: the 8 six-bit scales, then the 8 mins, as bytes
    if dot:
        o.append(op("ldr d14, [{sc}]", ["v14"], ["sc"], 3))
        o.append(op("uxtl v14.8h, v14.8b", ["v14"], ["v14"]))
        o.append(op("uxtl2 v15.4s, v14.8h", ["v15"], ["v14"]))
        o.append(op("uxtl v14.4s, v14.4h", ["v14"], ["v14"]))
    else:
        o.append(op("ldr d15, [{sc}]", ["v15"], ["sc"], 3))
        o.append(op("uxtl v15.8h, v15.8b", ["v15"], ["v15"]))
    for c in range(4):
        r = sets[c % 2]
        (w0, w1), (l0, l1), (y0, y1, y2, y3), (pa, pb, pc, pd), (a0, a1) = \
            r["w"], r["lo"], r["y"], r["p"], r["acc"]
        o.append(op(f"ldr q{w0[1:]}, [{{qs}}, #{32 * c}]", [w0], ["qs"], 3))
        o.append(op(f"ldr q{w1[1:]}, [{{qs}}, #{32 * c + 16}]", [w1], ["qs"], 3))
        for k, yv in enumerate((y0, y1, y2, y3)):
            o.append(op(f"ldr q{yv[1:]}, [{{q8}}, #{64 * c + 16 * k}]", [yv], ["q8"], 3))
        o.append(op(f"and {l0}.16b, {w0}.16b, {mask}.16b", [l0], [w0, mask]))
        o.append(op(f"and {l1}.16b, {w1}.16b, {mask}.16b", [l1], [w1, mask]))
        o.append(op(f"ushr {w0}.16b, {w0}.16b, #4", [w0], [w0]))
        o.append(op(f"ushr {w1}.16b, {w1}.16b, #4", [w1], [w1]))
        first = c < 2
        if dot:
            # sub-block 2c in pa, 2c + 1 in pc; scale j is lane j % 4 of v14 (j < 4) or v15
            for (x0, x1, ya, yb, pr) in ((l0, l1, y0, y1, pa), (w0, w1, y2, y3, pc)):
                o.append(op(f"movi {pr}.4s, #0", [pr], [], 1))
                o.append(op(f"sdot {pr}.4s, {x0}.16b, {ya}.16b", [pr], [pr, x0, ya]))
                o.append(op(f"sdot {pr}.4s, {x1}.16b, {yb}.16b", [pr], [pr, x1, yb]))
            for j, pr in ((2 * c, pa), (2 * c + 1, pc)):
                sreg = "v14" if j < 4 else "v15"
                if first and j == 2 * c:
                    o.append(op(f"mul {a0}.4s, {pr}.4s, {sreg}.s[{j % 4}]", [a0], [pr, sreg]))
                else:
                    o.append(op(f"mla {a0}.4s, {pr}.4s, {sreg}.s[{j % 4}]", [a0], [a0, pr, sreg]))
        else:
            # i16 lanes: 4 products of at most 15 * 128 each
            for (x0, x1, ya, yb, pr, ps) in ((l0, l1, y0, y1, pa, pb), (w0, w1, y2, y3, pc, pd)):
                o.append(op(f"smull {pr}.8h, {x0}.8b, {ya}.8b", [pr], [x0, ya]))
                o.append(op(f"smull2 {ps}.8h, {x0}.16b, {ya}.16b", [ps], [x0, ya]))
                o.append(op(f"smlal {pr}.8h, {x1}.8b, {yb}.8b", [pr], [pr, x1, yb]))
                o.append(op(f"smlal2 {ps}.8h, {x1}.16b, {yb}.16b", [ps], [ps, x1, yb]))
                o.append(op(f"add {pr}.8h, {pr}.8h, {ps}.8h", [pr], [pr, ps]))
            for j, pr in ((2 * c, pa), (2 * c + 1, pc)):
                if first and j == 2 * c:
                    o.append(op(f"smull {a0}.4s, {pr}.4h, v15.h[{j}]", [a0], [pr, "v15"]))
                    o.append(op(f"smull2 {a1}.4s, {pr}.8h, v15.h[{j}]", [a1], [pr, "v15"]))
                else:
                    o.append(op(f"smlal {a0}.4s, {pr}.4h, v15.h[{j}]", [a0], [a0, pr, "v15"]))
                    o.append(op(f"smlal2 {a1}.4s, {pr}.8h, v15.h[{j}]", [a1], [a1, pr, "v15"]))
    o.append(op("add v12.4s, v12.4s, v20.4s", ["v12"], ["v12", "v20"]))
    if not dot:
        o.append(op("add v13.4s, v13.4s, v21.4s", ["v13"], ["v13", "v21"]))
    # mins: sum over sub-blocks s of (bsum[2s] + bsum[2s + 1]) * min[s], in i32
    # (widened before adding: the i16 sums are the activation's bytes, whatever they hold)
    o += [op("ldr q4, [{q8}, #256]", ["v4"], ["q8"], 3),
          op("ldr q5, [{q8}, #272]", ["v5"], ["q8"], 3),
          op("ldr d6, [{sc}, #8]", ["v6"], ["sc"], 3),
          op("saddlp v4.4s, v4.8h", ["v4"], ["v4"]),
          op("saddlp v5.4s, v5.8h", ["v5"], ["v5"]),
          op("uxtl v6.8h, v6.8b", ["v6"], ["v6"]),
          op("uxtl v7.4s, v6.4h", ["v7"], ["v6"]),
          op("uxtl2 v6.4s, v6.8h", ["v6"], ["v6"]),
          op("mul v4.4s, v4.4s, v7.4s", ["v4"], ["v4", "v7"]),
          op("mla v4.4s, v5.4s, v6.4s", ["v4"], ["v4", "v5", "v6"]),
          op("addv s5, v4.4s", ["v5"], ["v4"]),
          op("scvtf s5, s5", ["v5"], ["v5"]),
          # floats in the twin's order: sumf -= (dmin * dy) * mins; lanes += (d * dy) * sum
          op("ldr s0, [{y}]", ["v0"], ["y"], 3),
          op("ldr h1, [{x}, #2]", ["v1"], ["x"], 3),
          op("ldr h2, [{x}]", ["v2"], ["x"], 3),
          op("fcvt s1, h1", ["v1"], ["v1"]),
          op("fcvt s2, h2", ["v2"], ["v2"]),
          op("fmul s1, s1, s0", ["v1"], ["v1", "v0"]),
          op("fmul s2, s2, s0", ["v2"], ["v2", "v0"]),
          # dmin * mins leaves in s4; Rust subtracts it from sumf (the same one fsub)
          op("fmul s4, s1, s5", ["v4"], ["v1", "v5"]),
          op("scvtf v12.4s, v12.4s", ["v12"], ["v12"]),
          op("fmul v12.4s, v12.4s, v2.s[0]", ["v12"], ["v12", "v2"]),
          op("fadd {lo:v}.4s, {lo:v}.4s, v12.4s", ["lo"], ["lo", "v12"])]
    if not dot:
        o += [op("scvtf v13.4s, v13.4s", ["v13"], ["v13"]),
              op("fmul v13.4s, v13.4s, v2.s[0]", ["v13"], ["v13", "v2"]),
              op("fadd {hi:v}.4s, {hi:v}.4s, v13.4s", ["hi"], ["hi", "v13"])]
    return o



def q6k_block(dot):
    """One Q6_K super-block, whole: 2 halves x 4 quarters of 32 elements (2 sub-blocks of 16
    each), quarters alternating between two register sets and two accumulator pairs (v8/v9,
    v10/v11). Half h: ql in v0..v3, qh in v4, v5. Quarter q's quants: low nibble of ql[0..32]
    (q = 0) or ql[32..64] (q = 1), high nibble of them (q = 2, 3), with qh bits 2q, 2q + 1
    brought to bits 4-5, minus 32. Scales: 16 i8 at 192, widened (ARMv8.0: i16 in v14, v15,
    used by element, which needs v0..v15; dotprod: i32 in v12..v15). v29 = 32, v30 = 0x30,
    v31 = 0x0f."""
    o = [op("movi v29.16b, #32", ["v29"], [], 1),
         op("movi v30.16b, #0x30", ["v30"], [], 1),
         op("movi v31.16b, #0x0f", ["v31"], [], 1),
         op("ldr q14, [{x}, #192]", ["v14"], ["x"], 3)]
    if dot:
        o += [op("sxtl v12.8h, v14.8b", ["v12"], ["v14"]),
              op("sxtl2 v14.8h, v14.16b", ["v14"], ["v14"]),
              op("sxtl2 v13.4s, v12.8h", ["v13"], ["v12"]),
              op("sxtl v12.4s, v12.4h", ["v12"], ["v12"]),
              op("sxtl2 v15.4s, v14.8h", ["v15"], ["v14"]),
              op("sxtl v14.4s, v14.4h", ["v14"], ["v14"])]
    else:
        o += [op("sxtl2 v15.8h, v14.16b", ["v15"], ["v14"]),
              op("sxtl v14.8h, v14.8b", ["v14"], ["v14"])]
    sets = [dict(t=("v16", "v17"), u=("v18", "v19"), y=("v20", "v21")),
            dict(t=("v22", "v23"), u=("v24", "v25"), y=("v26", "v27"))]
    accs = [("v8", "v9"), ("v10", "v11")]
    started = [False, False]
    for h in range(2):
        for k in range(4):
            o.append(op(f"ldr q{k}, [{{x}}, #{64 * h + 16 * k}]", [f"v{k}"], ["x"], 3))
        o.append(op(f"ldr q4, [{{x}}, #{128 + 32 * h}]", ["v4"], ["x"], 3))
        o.append(op(f"ldr q5, [{{x}}, #{144 + 32 * h}]", ["v5"], ["x"], 3))
        for q in range(4):
            r = sets[q % 2]
            (t0, t1), (u0, u1), (y0, y1) = r["t"], r["u"], r["y"]
            a0, a1 = accs[q % 2]
            base = 128 * h + 32 * q
            o.append(op(f"ldr q{y0[1:]}, [{{q8}}, #{base}]", [y0], ["q8"], 3))
            o.append(op(f"ldr q{y1[1:]}, [{{q8}}, #{base + 16}]", [y1], ["q8"], 3))
            src = ("v0", "v1") if q % 2 == 0 else ("v2", "v3")
            for t, u, l, qh in ((t0, u0, src[0], "v4"), (t1, u1, src[1], "v5")):
                if q < 2:
                    o.append(op(f"and {t}.16b, {l}.16b, v31.16b", [t], [l, "v31"]))
                else:
                    o.append(op(f"ushr {t}.16b, {l}.16b, #4", [t], [l]))
                shift = {0: "shl {u}.16b, {qh}.16b, #4", 1: "shl {u}.16b, {qh}.16b, #2",
                         2: None, 3: "ushr {u}.16b, {qh}.16b, #2"}[q]
                if shift:
                    o.append(op(shift.format(u=u, qh=qh), [u], [qh]))
                    o.append(op(f"and {u}.16b, {u}.16b, v30.16b", [u], [u, "v30"]))
                else:
                    o.append(op(f"and {u}.16b, {qh}.16b, v30.16b", [u], [qh, "v30"]))
                o.append(op(f"orr {t}.16b, {t}.16b, {u}.16b", [t], [t, u]))
                o.append(op(f"sub {t}.16b, {t}.16b, v29.16b", [t], [t, "v29"]))
            for j, (t, yv, pr) in enumerate(((t0, y0, u0), (t1, y1, u1))):
                i = 8 * h + 2 * q + j  # sub-block
                if dot:
                    sreg = f"v{12 + i // 4}"
                    o.append(op(f"movi {pr}.4s, #0", [pr], [], 1))
                    o.append(op(f"sdot {pr}.4s, {t}.16b, {yv}.16b", [pr], [pr, t, yv]))
                    if not started[q % 2]:
                        o.append(op(f"mul {a0}.4s, {pr}.4s, {sreg}.s[{i % 4}]", [a0], [pr, sreg]))
                        started[q % 2] = True
                    else:
                        o.append(op(f"mla {a0}.4s, {pr}.4s, {sreg}.s[{i % 4}]", [a0], [a0, pr, sreg]))
                else:
                    # i16 lanes: 2 products of at most 32 * 128
                    sreg = "v14" if i < 8 else "v15"
                    o.append(op(f"smull {pr}.8h, {t}.8b, {yv}.8b", [pr], [t, yv]))
                    o.append(op(f"smlal2 {pr}.8h, {t}.16b, {yv}.16b", [pr], [pr, t, yv]))
                    if not started[q % 2]:
                        o.append(op(f"smull {a0}.4s, {pr}.4h, {sreg}.h[{i % 8}]", [a0], [pr, sreg]))
                        o.append(op(f"smull2 {a1}.4s, {pr}.8h, {sreg}.h[{i % 8}]", [a1], [pr, sreg]))
                        started[q % 2] = True
                    else:
                        o.append(op(f"smlal {a0}.4s, {pr}.4h, {sreg}.h[{i % 8}]", [a0], [a0, pr, sreg]))
                        o.append(op(f"smlal2 {a1}.4s, {pr}.8h, {sreg}.h[{i % 8}]", [a1], [a1, pr, sreg]))
    o.append(op("add v8.4s, v8.4s, v10.4s", ["v8"], ["v8", "v10"]))
    if not dot:
        o.append(op("add v9.4s, v9.4s, v11.4s", ["v9"], ["v9", "v11"]))
    # floats in the twin's order: lanes += (d * dy) * (integer lanes)
    o += [op("ldr s0, [{y}]", ["v0"], ["y"], 3),
          op("ldr h1, [{x}, #208]", ["v1"], ["x"], 3),
          op("fcvt s1, h1", ["v1"], ["v1"]),
          op("fmul s1, s1, s0", ["v1"], ["v1", "v0"]),
          op("scvtf v8.4s, v8.4s", ["v8"], ["v8"]),
          op("fmul v8.4s, v8.4s, v1.s[0]", ["v8"], ["v8", "v1"]),
          op("fadd {lo:v}.4s, {lo:v}.4s, v8.4s", ["lo"], ["lo", "v8"])]
    if not dot:
        o += [op("scvtf v9.4s, v9.4s", ["v9"], ["v9"]),
              op("fmul v9.4s, v9.4s, v1.s[0]", ["v9"], ["v9", "v1"]),
              op("fadd {hi:v}.4s, {hi:v}.4s, v9.4s", ["hi"], ["hi", "v9"])]
    return o



# Two blocks a trip for the 32-element formats (Q8_0, Q4_0, Q5_0): block B is block A's
# operations on other registers and at the next block's offsets, the pointers advance once,
# and the float part of the previous pair adds A then B to sumf (the scalar's order).
WEIGHT_BYTES = {"q8": 34, "q4": 18, "q5": 22}
FIXED = {"v21", "v28", "v29", "v30", "v31", "x", "y", "nb", "flags", "sumf"}


def regs_of(ops):
    return {r for _, w, rd, _ in ops for r in w + rd if r.startswith("v")} - FIXED


def second_block(ops, kind, rename):
    wx = WEIGHT_BYTES[kind]

    def offset(text):
        def x(m):
            return f"[{{x}}, #{int(m.group(1) or 0) + wx}]"

        def y(m):
            return f"[{{y}}, #{int(m.group(1) or 0) + 34}]"
        text = re.sub(r"\[\{x\}(?:, #(\d+))?\]", x, text)
        return re.sub(r"\[\{y\}(?:, #(\d+))?\]", y, text)

    def reg(text):
        return re.sub(r"\b([vqshdb])(\d+)\b",
                      lambda m: m.group(1) + rename.get("v" + m.group(2), "v" + m.group(2))[1:],
                      text)
    out = []
    for t, w, r, lat in ops:
        if t.startswith("add {"):
            continue
        out.append(op(reg(offset(t)), [rename.get(x, x) for x in w],
                      [rename.get(x, x) for x in r], lat))
    return out


def pair_parts(kind, dot):
    """(renaming of block A's registers for block B, A's and B's integer parts with the
    pointer advance, the pair's float part)."""
    tail, intp = KINDS[kind]
    a = intp(dot)
    used = regs_of(a) | regs_of(tail())
    free = [f"v{i}" for i in range(32) if f"v{i}" not in used | FIXED]
    rename = dict(zip(sorted(used, key=lambda r: int(r[1:])), free))
    b = second_block(a, kind, rename)
    adds = [o for o in a if o[0].startswith("add {")]
    a = [o for o in a if not o[0].startswith("add {")]
    adds = [op(t.replace("#34", "#68").replace(f"#{WEIGHT_BYTES[kind]}",
                                                f"#{2 * WEIGHT_BYTES[kind]}"), w, r, lat)
            for t, w, r, lat in adds]
    tb = second_block(tail(), kind, rename)
    return rename, a + b + adds, tail() + tb


def pair_loop(kind, dot):
    _, intp, tails = pair_parts(kind, dot)
    ops = tails + intp + [op("subs {nb}, {nb}, #1", ["nb", "flags"], ["nb"], 1)]
    return schedule(ops) + ["b.ne 2b"]


def pair_tail(kind, dot):
    return schedule(pair_parts(kind, dot)[2])


def single_block(kind, dot):
    """One block, not pipelined: the first block of a row with an odd number of them."""
    tail, intp = KINDS[kind]
    return schedule(intp(dot) + tail())


def pair_carried(kind, dot):
    """The registers the pair loop carries from one trip to the next (zeroed before it)."""
    rename, _, _ = pair_parts(kind, dot)
    tail, _ = KINDS[kind]
    carried = sorted({r for _, _, rd, _ in tail() for r in rd} - FIXED - {"v24"},
                     key=lambda r: int(r[1:]))
    return carried + [rename[r] for r in carried]



def q8x4_int(dot=True):
    """Q8_0 x4 (q8_0_x4.rs): one group block, 4 rows' d at {x}, 8 vectors of 4 rows x 4
    bytes at {x} + 8; two accumulators of 4 `sdot`s each (v20, v22), summed into v14; the
    rows' dx * dy into v15."""
    o = [op("ldr d16, [{x}]", ["v16"], ["x"], 3),
         op("ldr h17, [{y}]", ["v17"], ["y"], 3)]
    for j in range(8):
        o.append(op(f"ldur q{j}, [{{x}}, #{8 + 16 * j}]", [f"v{j}"], ["x"], 3))
    o += [op("ldur q18, [{y}, #2]", ["v18"], ["y"], 3),
          op("ldur q19, [{y}, #18]", ["v19"], ["y"], 3),
          op("fcvtl v16.4s, v16.4h", ["v16"], ["v16"]),
          op("fcvt s17, h17", ["v17"], ["v17"]),
          op("fmul v15.4s, v16.4s, v17.s[0]", ["v15"], ["v16", "v17"]),
          op("movi v20.4s, #0", ["v20"], [], 1),
          op("movi v22.4s, #0", ["v22"], [], 1)]
    for j in range(8):
        a, yv = ("v20", "v18") if j < 4 else ("v22", "v19")
        o.append(op(f"sdot {a}.4s, v{j}.16b, {yv}.4b[{j % 4}]", [a], [a, f"v{j}", yv]))
    o += [op("add v14.4s, v20.4s, v22.4s", ["v14"], ["v20", "v22"]),
          op("add {x}, {x}, #136", ["x"], ["x"], 1),
          op("add {y}, {y}, #34", ["y"], ["y"], 1)]
    return o


def q8x4_tail():
    """Each row: sumf += sumi as f32 * (dx * dy)."""
    return [op("scvtf v24.4s, v14.4s", ["v24"], ["v14"]),
            op("fmul v24.4s, v24.4s, v15.4s", ["v24"], ["v24", "v15"]),
            op("fadd {sums:v}.4s, {sums:v}.4s, v24.4s", ["sums"], ["sums", "v24"])]



def q5x4_int(dot=True):
    """Q5_0 x4 (q5_0_x4.rs): one group block: 4 rows' d at {x}, their fifth bits at {x} + 8
    (v21), 4 nibble vectors at {x} + 24. Vector v's quants minus 16: the nibble minus 16 where
    its fifth bit (bit v for the low nibble, 4 + v for the high one, shifted to bit 4) is clear
    (`bic` of v30 = 0x10 by it); v31 = 0x0f. Low-nibble sdots into v20, high into v22, summed
    into v14; the rows' dx * dy into v15. Three sets of temporaries, taken in turn."""
    o = [op("ldr d16, [{x}]", ["v16"], ["x"], 3),
         op("ldur q21, [{x}, #8]", ["v21"], ["x"], 3),
         op("ldr h17, [{y}]", ["v17"], ["y"], 3),
         op("ldur q18, [{y}, #2]", ["v18"], ["y"], 3),
         op("ldur q19, [{y}, #18]", ["v19"], ["y"], 3)]
    for v in range(4):
        o.append(op(f"ldur q{v}, [{{x}}, #{24 + 16 * v}]", [f"v{v}"], ["x"], 3))
    o += [op("fcvtl v16.4s, v16.4h", ["v16"], ["v16"]),
          op("fcvt s17, h17", ["v17"], ["v17"]),
          op("fmul v15.4s, v16.4s, v17.s[0]", ["v15"], ["v16", "v17"]),
          op("movi v20.4s, #0", ["v20"], [], 1),
          op("movi v22.4s, #0", ["v22"], [], 1)]
    sets = [("v4", "v5", "v6", "v7"), ("v8", "v9", "v10", "v11"),
            ("v12", "v13", "v23", "v25")]
    for v in range(4):
        lo, hi, b1, b2 = sets[v % 3]
        q = f"v{v}"
        o.append(op(f"and {lo}.16b, {q}.16b, v31.16b", [lo], [q, "v31"]))
        o.append(op(f"ushr {hi}.16b, {q}.16b, #4", [hi], [q]))
        o.append(op(f"shl {b1}.16b, v21.16b, #{4 - v}", [b1], ["v21"]))
        o.append(op(f"bic {b1}.16b, v30.16b, {b1}.16b", [b1], [b1, "v30"]))
        if v == 0:
            o.append(op(f"bic {b2}.16b, v30.16b, v21.16b", [b2], ["v21", "v30"]))
        else:
            o.append(op(f"ushr {b2}.16b, v21.16b, #{v}", [b2], ["v21"]))
            o.append(op(f"bic {b2}.16b, v30.16b, {b2}.16b", [b2], [b2, "v30"]))
        o.append(op(f"sub {lo}.16b, {lo}.16b, {b1}.16b", [lo], [lo, b1]))
        o.append(op(f"sub {hi}.16b, {hi}.16b, {b2}.16b", [hi], [hi, b2]))
        o.append(op(f"sdot v20.4s, {lo}.16b, v18.4b[{v}]", ["v20"], ["v20", lo, "v18"]))
        o.append(op(f"sdot v22.4s, {hi}.16b, v19.4b[{v}]", ["v22"], ["v22", hi, "v19"]))
    o += [op("add v14.4s, v20.4s, v22.4s", ["v14"], ["v20", "v22"]),
          op("add {x}, {x}, #88", ["x"], ["x"], 1),
          op("add {y}, {y}, #34", ["y"], ["y"], 1)]
    return o


def q5x4_tail():
    """Each row: sumf += (dx * dy) * sumi as f32."""
    return [op("scvtf v24.4s, v14.4s", ["v24"], ["v14"]),
            op("fmul v24.4s, v15.4s, v24.4s", ["v24"], ["v15", "v24"]),
            op("fadd {sums:v}.4s, {sums:v}.4s, v24.4s", ["sums"], ["sums", "v24"])]



def q4kx4_block(dot=True):
    """Q4_K x4 (q4_k_x4.rs): one super-block of a 4-row group, whole. Chunk c (sub-blocks 2c,
    2c + 1) takes its 64 activation bytes into v0..v3 or v4..v7 (c even / odd); its 8 weight
    vectors rotate through v8..v11, their low nibbles through v12..v14; 4 accumulators
    (v15, v16: sub-block 2c, v17, v18: 2c + 1) so that no `sdot` waits for the one before;
    scaled by the rows' scales (v20, v21) into v19. Mins into v24 (bsum pairs v25, v26).
    v23 = 0x0f."""
    o = [op("movi v23.16b, #0x0f", ["v23"], [], 1)]
    for c in range(4):
        a = [f"v{4 * (c % 2) + k}" for k in range(4)]
        for k in range(4):
            o.append(op(f"ldr q{a[k][1:]}, [{{q8}}, #{64 * c + 16 * k}]", [a[k]], ["q8"], 3))
        o += [op(f"ldr d20, [{{x}}, #{16 + 8 * c}]", ["v20"], ["x"], 3),
              op("uxtl v22.8h, v20.8b", ["v22"], ["v20"]),
              op("uxtl v20.4s, v22.4h", ["v20"], ["v22"]),
              op("uxtl2 v21.4s, v22.8h", ["v21"], ["v22"])]
        for acc in ("v15", "v16", "v17", "v18"):
            o.append(op(f"movi {acc}.4s, #0", [acc], [], 1))
        for j in range(8):
            w, lo = f"v{8 + j % 4}", f"v{12 + j % 3}"
            o.append(op(f"ldr q{w[1:]}, [{{x}}, #{80 + 16 * (8 * c + j)}]", [w], ["x"], 3))
            o.append(op(f"and {lo}.16b, {w}.16b, v23.16b", [lo], [w, "v23"]))
            o.append(op(f"ushr {w}.16b, {w}.16b, #4", [w], [w]))
            al, ah = ("v15", "v17") if j < 4 else ("v16", "v18")
            yl, yh = (a[0], a[2]) if j < 4 else (a[1], a[3])
            o.append(op(f"sdot {al}.4s, {lo}.16b, {yl}.4b[{j % 4}]", [al], [al, lo, yl]))
            o.append(op(f"sdot {ah}.4s, {w}.16b, {yh}.4b[{j % 4}]", [ah], [ah, w, yh]))
        o += [op("add v15.4s, v15.4s, v16.4s", ["v15"], ["v15", "v16"]),
              op("add v17.4s, v17.4s, v18.4s", ["v17"], ["v17", "v18"])]
        if c == 0:
            o.append(op("mul v19.4s, v15.4s, v20.4s", ["v19"], ["v15", "v20"]))
        else:
            o.append(op("mla v19.4s, v15.4s, v20.4s", ["v19"], ["v19", "v15", "v20"]))
        o.append(op("mla v19.4s, v17.4s, v21.4s", ["v19"], ["v19", "v17", "v21"]))
    # mins: per row, sum over sub-blocks s of min[s][row] * (bsum[2s] + bsum[2s + 1]), in i32
    o += [op("ldr q25, [{q8}, #256]", ["v25"], ["q8"], 3),
          op("ldr q26, [{q8}, #272]", ["v26"], ["q8"], 3),
          op("saddlp v25.4s, v25.8h", ["v25"], ["v25"]),
          op("saddlp v26.4s, v26.8h", ["v26"], ["v26"])]
    for h in range(2):
        o.append(op(f"ldr q27, [{{x}}, #{48 + 16 * h}]", ["v27"], ["x"], 3))
        for pp in range(2):
            wide = "uxtl2 v28.8h, v27.16b" if pp else "uxtl v28.8h, v27.8b"
            o.append(op(wide, ["v28"], ["v27"]))
            for e in range(2):
                sb = 4 * h + 2 * pp + e
                o.append(op("uxtl2 v29.4s, v28.8h" if e else "uxtl v29.4s, v28.4h",
                            ["v29"], ["v28"]))
                bs = "v25" if sb < 4 else "v26"
                if sb == 0:
                    o.append(op(f"mul v24.4s, v29.4s, {bs}.s[{sb % 4}]", ["v24"], ["v29", bs]))
                else:
                    o.append(op(f"mla v24.4s, v29.4s, {bs}.s[{sb % 4}]", ["v24"],
                                ["v24", "v29", bs]))
    # floats: d_r * dy and dmin_r * dy as the scalar twin forms them
    o += [op("ldr d20, [{x}]", ["v20"], ["x"], 3),
          op("ldr d21, [{x}, #8]", ["v21"], ["x"], 3),
          op("ldr s22, [{y}]", ["v22"], ["y"], 3),
          op("fcvtl v20.4s, v20.4h", ["v20"], ["v20"]),
          op("fcvtl v21.4s, v21.4h", ["v21"], ["v21"]),
          op("fmul v20.4s, v20.4s, v22.s[0]", ["v20"], ["v20", "v22"]),
          op("fmul v21.4s, v21.4s, v22.s[0]", ["v21"], ["v21", "v22"]),
          op("scvtf v19.4s, v19.4s", ["v19"], ["v19"]),
          op("scvtf v24.4s, v24.4s", ["v24"], ["v24"]),
          op("fmul v19.4s, v20.4s, v19.4s", ["v19"], ["v20", "v19"]),
          op("fmul v24.4s, v21.4s, v24.4s", ["v24"], ["v21", "v24"]),
          op("fadd {sums:v}.4s, {sums:v}.4s, v19.4s", ["sums"], ["sums", "v19"]),
          op("fadd {mins:v}.4s, {mins:v}.4s, v24.4s", ["mins"], ["mins", "v24"])]
    return o


def emit(lines):
    return "\n".join(f'                "{l}",' for l in lines)


KINDS = {"q1": (q1_tail, q1_int), "q2": (q2_tail, q2_int), "tq1": (tq1_tail, tq1_int),
         "q8": (q8_tail, q8_int), "q4": (q4_tail, q4_int), "q5": (q5_tail, q5_int),
         "q8x4": (q8x4_tail, q8x4_int), "q5x4": (q5x4_tail, q5x4_int)}
BLOCK = {"q1": 128, "q2": 64, "tq1": 256, "q8": 32, "q4": 32, "q5": 32, "q4k": 256, "q6k": 256,
         "q8x4": 32, "q5x4": 32, "q4kx4": 256}
PAIRED = {"q8", "q4", "q5"}  # two blocks a trip
CPUS = ["cortex-a55", "cortex-a53", "cyclone"]


def body(kind, face):
    if kind == "q4k":
        return schedule(q4k_block(face == "dot"))
    if kind == "q6k":
        return schedule(q6k_block(face == "dot"))
    if kind == "q4kx4":
        return schedule(q4kx4_block())
    if kind == "q3k":
        return virtual_block(q3k_block_ops(), Q3K_POOL, 5)
    if kind == "q5k":
        return virtual_block(q5k_block_ops(), Q5K_POOL, 11)
    if kind in PAIRED:
        return pair_loop(kind, face == "dot")
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
           "{qs}": "x4", "{q8}": "x5", "{sc}": "x6", "{sumf:s}": "s21", "{lo:v}": "v6",
           "{hi:v}": "v7", "{sums:v}": "v30", "{mins:v}": "v31", "2b": ".Lloop"}
    lines = []
    for l in body(kind, face):
        for a, b in sub.items():
            l = l.replace(a, b)
        lines.append("  " + l)
    back = "" if lines[-1].strip().startswith("b.ne") else "  b .Lloop\n"
    return ".Lloop:\n" + "\n".join(lines) + "\n" + back


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


def is_g(x):
    """A general-purpose virtual register (`%gname`, an asm! operand `{gN}`); the others are NEON."""
    return x.startswith("%g")


def allocate(ops, pool, gpool=()):
    """Virtual registers (%name) -> physical, in program order, freeing each after its last read:
    NEON ones from `pool`, general-purpose ones (`%gname`) from `gpool`."""
    last = {}
    for i, (_, w, r, _) in enumerate(ops):
        for x in w + r:
            if x.startswith("%"):
                last[x] = i
    free = {False: list(pool), True: list(gpool)}
    phys, out = {}, []
    for i, (t, w, r, lat) in enumerate(ops):
        rp = [phys.get(x, x) for x in r]
        for x in dict.fromkeys(r):
            if x.startswith("%") and last[x] == i and x not in w:
                free[is_g(x)].append(phys.pop(x))
        wp = []
        for x in w:
            if x.startswith("%"):
                if x not in phys:
                    if not free[is_g(x)]:
                        raise SystemExit(f"out of registers at op {i}: {t}")
                    phys[x] = free[is_g(x)].pop(0)
                wp.append(phys[x])
            else:
                wp.append(x)
        names = dict(zip(r, rp))
        names.update(zip(w, wp))
        for x in sorted(names, key=len, reverse=True):
            if x.startswith("%"):
                if is_g(x):
                    t = re.sub(re.escape(x) + r"\b", names[x], t)
                else:
                    # `q%a` / `d%a` / `s%a` / `h%a` / `b%a` take the number, `%a` the whole
                    # name (v5).
                    t = re.sub(r"(?<=[qshdb])" + re.escape(x) + r"\b", names[x][1:], t)
                    t = re.sub(re.escape(x) + r"\b", names[x], t)
        for x in w:
            if x.startswith("%") and last[x] == i:
                free[is_g(x)].append(phys.pop(x))
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


def schedule_virtual(ops, n_regs, n_g=None):
    """`schedule` for ops on virtual registers, before allocation: the order may keep at most
    `n_regs` of them live at once (so that `allocate` then finds a register for each), and
    otherwise issues the op whose operands are ready soonest. With `n_g`, the two register
    files count apart: at most `n_regs` NEON and `n_g` general-purpose (`%gname`) live."""
    n = len(ops)
    deps = [[] for _ in range(n)]
    last_w, reads_since = {}, {}
    for i, (t, w, r, lat) in enumerate(ops):
        for x in r:
            if x in last_w:
                deps[i].append((last_w[x], ops[last_w[x]][3]))
        for x in w:
            if x in last_w:
                deps[i].append((last_w[x], 1))
            for j in reads_since.get(x, []):
                deps[i].append((j, 0))
        for x in r:
            reads_since.setdefault(x, []).append(i)
        for x in w:
            last_w[x] = i
            reads_since[x] = []
    readers = {}
    for i, (_, w, r, _) in enumerate(ops):
        for x in r:
            if x.startswith("%"):
                readers.setdefault(x, set()).add(i)

    def fits(live, new, freed, r):
        if n_g is None:
            # An op that reads no register (a load) leaves room for the ops that consume it.
            reserve = 0 if any(x.startswith("%") for x in r) else 4
            return len(live) + len(new) - len(freed) <= n_regs - reserve
        after = (live | new) - freed
        gp = sum(1 for x in after if is_g(x))
        return len(after) - gp <= n_regs and gp <= n_g

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
            if not fits(live, new, freed, r):
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
            if x.startswith("%"):
                readers[x].discard(i)
        live |= new
        live -= freed
        for x in w:
            if x.startswith("%") and not readers.get(x):
                live.discard(x)
        out.append(ops[i])
        remaining.remove(i)
    return out


# ------------------------------------------------------------------------------------------
# Q3_K and Q5_K, ARMv8.0 (kernels-asm/src/aarch64/q3_k.rs, q5_k.rs): one whole super-block,
# written on virtual registers (%name) beside a few fixed ones (the scales, read by element,
# must sit in v0..v15; the constants; the integer accumulators), ordered by
# `schedule_virtual` and given registers by `allocate`. The smull lanes are the scalar twins'
# (element e of a sub-block in lane e % 8), so the integer lanes and the float steps are theirs.
# ------------------------------------------------------------------------------------------

# v30 and v31 stay free for the f32 lane sums (`{lo}`, `{hi}`).
Q3K_POOL = [f"v{i}" for i in [4, 5, 7] + list(range(9, 20)) + list(range(24, 30))]


def q3k_block_ops():
    """Fixed: v0, v1 the 16 scales as i16, v2, v3 the inverted hmask, v6 = 3,
    v8 = 4; accumulators v20..v23: lanes 0..3 and 4..7 of the even sub-blocks, then of the
    odd ones."""
    o = [op("movi v6.16b, #3", ["v6"], [], 1),
         op("movi v8.16b, #4", ["v8"], [], 1),
         # `{sc}`: the 16 six-bit scales as bytes (0..63), widened here and less 32
         op("ldr q0, [{sc}]", ["v0"], ["sc"], 3),
         op("movi %c32.8h, #32", ["%c32"], [], 1),
         op("uxtl2 v1.8h, v0.16b", ["v1"], ["v0"]),
         op("uxtl v0.8h, v0.8b", ["v0"], ["v0"]),
         op("sub v0.8h, v0.8h, %c32.8h", ["v0"], ["v0", "%c32"]),
         op("sub v1.8h, v1.8h, %c32.8h", ["v1"], ["v1", "%c32"]),
         op("ldr q2, [{x}]", ["v2"], ["x"], 3),
         op("ldr q3, [{x}, #16]", ["v3"], ["x"], 3),
         op("mvn v2.16b, v2.16b", ["v2"], ["v2"]),
         op("mvn v3.16b, v3.16b", ["v3"], ["v3"])]
    for h in range(2):
        qa, qb = f"%qa{h}", f"%qb{h}"
        o.append(op(f"ldr q{qa}, [{{qs}}, #{32 * h}]", [qa], ["qs"], 3))
        o.append(op(f"ldr q{qb}, [{{qs}}, #{32 * h + 16}]", [qb], ["qs"], 3))
        for s in range(4):
            r = 4 * h + s
            acc = ["v20", "v21", "v22", "v23"]
            ya, yb = f"%ya{r}", f"%yb{r}"
            o.append(op(f"ldr q{ya}, [{{q8}}, #{32 * r}]", [ya], ["q8"], 3))
            o.append(op(f"ldr q{yb}, [{{q8}}, #{32 * r + 16}]", [yb], ["q8"], 3))
            for half, (q, y, hm) in enumerate(((qa, ya, "v2"), (qb, yb, "v3"))):
                w, t, p = f"%w{r}{half}", f"%t{r}{half}", f"%p{r}{half}"
                if s == 0:
                    o.append(op(f"and {w}.16b, {q}.16b, v6.16b", [w], [q, "v6"]))
                elif s == 3:
                    o.append(op(f"ushr {w}.16b, {q}.16b, #6", [w], [q]))
                else:
                    o.append(op(f"ushr {w}.16b, {q}.16b, #{2 * s}", [w], [q]))
                    o.append(op(f"and {w}.16b, {w}.16b, v6.16b", [w], [w, "v6"]))
                # inverted hmask bit r moved to bit 2: 4 where the quant is lowered
                if r == 2:
                    o.append(op(f"and {t}.16b, {hm}.16b, v8.16b", [t], [hm, "v8"]))
                else:
                    sh = f"shl {t}.16b, {hm}.16b, #{2 - r}" if r < 2 else \
                        f"ushr {t}.16b, {hm}.16b, #{r - 2}"
                    o.append(op(sh, [t], [hm]))
                    o.append(op(f"and {t}.16b, {t}.16b, v8.16b", [t], [t, "v8"]))
                o.append(op(f"sub {w}.16b, {w}.16b, {t}.16b", [w], [w, t]))
                o.append(op(f"smull {p}.8h, {w}.8b, {y}.8b", [p], [w, y]))
                o.append(op(f"smlal2 {p}.8h, {w}.16b, {y}.16b", [p], [p, w, y]))
                i = 2 * r + half
                sreg = "v0" if i < 8 else "v1"
                a0, a1 = acc[2 * half], acc[2 * half + 1]
                if r == 0:
                    o.append(op(f"smull {a0}.4s, {p}.4h, {sreg}.h[{i % 8}]", [a0], [p, sreg]))
                    o.append(op(f"smull2 {a1}.4s, {p}.8h, {sreg}.h[{i % 8}]", [a1], [p, sreg]))
                else:
                    o.append(op(f"smlal {a0}.4s, {p}.4h, {sreg}.h[{i % 8}]", [a0], [a0, p, sreg]))
                    o.append(op(f"smlal2 {a1}.4s, {p}.8h, {sreg}.h[{i % 8}]", [a1], [a1, p, sreg]))
    for a, b in (("v20", "v22"), ("v21", "v23")):
        o.append(op(f"add {a}.4s, {a}.4s, {b}.4s", [a], [a, b]))
    # the twin's floats: lanes += (d * dy) * integer lanes
    o += [op("ldr h%d, [{x}, #108]", ["%d"], ["x"], 3),
          op("ldr s%dy, [{y}]", ["%dy"], ["y"], 3),
          op("fcvt s%d, h%d", ["%d"], ["%d"]),
          op("fmul s%d, s%d, s%dy", ["%d"], ["%d", "%dy"]),
          op("scvtf v20.4s, v20.4s", ["v20"], ["v20"]),
          op("scvtf v21.4s, v21.4s", ["v21"], ["v21"]),
          op("fmul v20.4s, v20.4s, %d.s[0]", ["v20"], ["v20", "%d"]),
          op("fmul v21.4s, v21.4s, %d.s[0]", ["v21"], ["v21", "%d"]),
          op("fadd {lo:v}.4s, {lo:v}.4s, v20.4s", ["lo"], ["lo", "v20"]),
          op("fadd {hi:v}.4s, {hi:v}.4s, v21.4s", ["hi"], ["hi", "v21"])]
    return o


Q5K_POOL = [f"v{i}" for i in [0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 24, 25, 26, 27, 28, 29]]


def q5k_block_ops():
    """Fixed: v15 the 8 scales as i16 (`{sc}` bytes 0..8), v14 = 0x0f, v13 = 0x10; the
    accumulators v20..v23 (even chunks), v16..v19 (odd chunks); the min term out in s4.
    The fifth bits go in with `bit` (insert where the mask 0x10 is set)."""
    o = [op("movi v14.16b, #0x0f", ["v14"], [], 1),
         op("movi v13.16b, #0x10", ["v13"], [], 1),
         op("ldr d15, [{sc}]", ["v15"], ["sc"], 3),
         op("uxtl v15.8h, v15.8b", ["v15"], ["v15"]),
         op("ldr q%h0, [{x}, #16]", ["%h0"], ["x"], 3),
         op("ldr q%h1, [{x}, #32]", ["%h1"], ["x"], 3)]
    for c in range(4):
        acc = ["v20", "v21", "v22", "v23"] if c % 2 == 0 else ["v16", "v17", "v18", "v19"]
        qa, qb = f"%qa{c}", f"%qb{c}"
        y = [f"%y{c}{k}" for k in range(4)]
        o.append(op(f"ldr q{qa}, [{{qs}}, #{32 * c}]", [qa], ["qs"], 3))
        o.append(op(f"ldr q{qb}, [{{qs}}, #{32 * c + 16}]", [qb], ["qs"], 3))
        for k in range(4):
            o.append(op(f"ldr q{y[k]}, [{{q8}}, #{64 * c + 16 * k}]", [y[k]], ["q8"], 3))
        parts = []
        for nib in range(2):  # 0: low nibbles (sub-block 2c), 1: high (2c + 1)
            bit = 2 * c + nib
            ws = []
            for half, (q, hreg) in enumerate(((qa, "%h0"), (qb, "%h1"))):
                w, t = f"%w{c}{nib}{half}", f"%t{c}{nib}{half}"
                if nib == 0:
                    o.append(op(f"and {w}.16b, {q}.16b, v14.16b", [w], [q, "v14"]))
                else:
                    o.append(op(f"ushr {w}.16b, {q}.16b, #4", [w], [q]))
                if bit == 4:
                    src = hreg
                else:
                    sh = f"shl {t}.16b, {hreg}.16b, #{4 - bit}" if bit < 4 else \
                        f"ushr {t}.16b, {hreg}.16b, #{bit - 4}"
                    o.append(op(sh, [t], [hreg]))
                    src = t
                o.append(op(f"bit {w}.16b, {src}.16b, v13.16b", [w], [w, src, "v13"]))
                ws.append(w)
            parts.append((ws, y[2 * nib], y[2 * nib + 1]))
        for nib, ((w0, w1), ya, yb) in enumerate(parts):
            pa, pb = f"%pa{c}{nib}", f"%pb{c}{nib}"
            o += [op(f"smull {pa}.8h, {w0}.8b, {ya}.8b", [pa], [w0, ya]),
                  op(f"smull2 {pb}.8h, {w0}.16b, {ya}.16b", [pb], [w0, ya]),
                  op(f"smlal {pa}.8h, {w1}.8b, {yb}.8b", [pa], [pa, w1, yb]),
                  op(f"smlal2 {pb}.8h, {w1}.16b, {yb}.16b", [pb], [pb, w1, yb]),
                  op(f"add {pa}.8h, {pa}.8h, {pb}.8h", [pa], [pa, pb])]
            j = 2 * c + nib
            a0, a1 = acc[2 * nib], acc[2 * nib + 1]
            if c < 2:
                o.append(op(f"smull {a0}.4s, {pa}.4h, v15.h[{j}]", [a0], [pa, "v15"]))
                o.append(op(f"smull2 {a1}.4s, {pa}.8h, v15.h[{j}]", [a1], [pa, "v15"]))
            else:
                o.append(op(f"smlal {a0}.4s, {pa}.4h, v15.h[{j}]", [a0], [a0, pa, "v15"]))
                o.append(op(f"smlal2 {a1}.4s, {pa}.8h, v15.h[{j}]", [a1], [a1, pa, "v15"]))
    for a, b in (("v20", "v16"), ("v21", "v17"), ("v22", "v18"), ("v23", "v19"),
                 ("v20", "v22"), ("v21", "v23")):
        o.append(op(f"add {a}.4s, {a}.4s, {b}.4s", [a], [a, b]))
    # mins (Q4_K's): sum over s of (bsum[2s] + bsum[2s + 1]) * min[s]; then the twin's floats
    o += [op("ldr q%b0, [{q8}, #256]", ["%b0"], ["q8"], 3),
          op("ldr q%b1, [{q8}, #272]", ["%b1"], ["q8"], 3),
          op("ldr d%m, [{sc}, #8]", ["%m"], ["sc"], 3),
          op("saddlp %b0.4s, %b0.8h", ["%b0"], ["%b0"]),
          op("saddlp %b1.4s, %b1.8h", ["%b1"], ["%b1"]),
          op("uxtl %m.8h, %m.8b", ["%m"], ["%m"]),
          op("uxtl %m0.4s, %m.4h", ["%m0"], ["%m"]),
          op("uxtl2 %m1.4s, %m.8h", ["%m1"], ["%m"]),
          op("mul %b0.4s, %b0.4s, %m0.4s", ["%b0"], ["%b0", "%m0"]),
          op("mla %b0.4s, %b1.4s, %m1.4s", ["%b0"], ["%b0", "%b1", "%m1"]),
          op("addv s%ms, %b0.4s", ["%ms"], ["%b0"]),
          op("scvtf s%ms, s%ms", ["%ms"], ["%ms"]),
          op("ldr s%dy, [{y}]", ["%dy"], ["y"], 3),
          op("ldr h%dm, [{x}, #2]", ["%dm"], ["x"], 3),
          op("ldr h%d, [{x}]", ["%d"], ["x"], 3),
          op("fcvt s%dm, h%dm", ["%dm"], ["%dm"]),
          op("fcvt s%d, h%d", ["%d"], ["%d"]),
          op("fmul s%dm, s%dm, s%dy", ["%dm"], ["%dm", "%dy"]),
          op("fmul s%d, s%d, s%dy", ["%d"], ["%d", "%dy"]),
          op("fmul s4, s%dm, s%ms", ["v4"], ["%dm", "%ms"]),
          op("scvtf v20.4s, v20.4s", ["v20"], ["v20"]),
          op("scvtf v21.4s, v21.4s", ["v21"], ["v21"]),
          op("fmul v20.4s, v20.4s, %d.s[0]", ["v20"], ["v20", "%d"]),
          op("fmul v21.4s, v21.4s, %d.s[0]", ["v21"], ["v21", "%d"]),
          op("fadd {lo:v}.4s, {lo:v}.4s, v20.4s", ["lo"], ["lo", "v20"]),
          op("fadd {hi:v}.4s, {hi:v}.4s, v21.4s", ["hi"], ["hi", "v21"])]
    return o


def virtual_block(ops, pool, live):
    """`schedule_virtual` keeping at most `live` virtual registers live (a small number: long
    chains stay together, so `allocate` reuses few registers), `allocate`, then `schedule`
    again on the physical registers, which spreads the chains apart within the dependences the
    allocation left. `live` is the best of a sweep by llvm-mca (A55 + A53): Q3_K 5 (177 and
    207 cycles, against 312 and 442 with the pool's size and no second pass), Q5_K 11."""
    return schedule(allocate(schedule_virtual(ops, live), pool))


# ------------------------------------------------------------------------------------------
# Q4_1 and Q5_1 (kernels-asm/src/aarch64/q1.rs): a block's integer dot (into s7) and the
# twin's float step; two blocks a trip (block B on registers renamed off A's, `{x2}`/`{y2}`),
# ordered by `schedule` with the dependences read off the lines themselves.
# ------------------------------------------------------------------------------------------

def q1x_int(kind, dot):
    five = kind == "q51"
    o = (["ldr q0, [{x}, #8]", "ldr s8, [{x}, #4]"] if five else ["ldr q0, [{x}, #4]"])
    o += ["ldr q1, [{y}, #4]", "ldr q2, [{y}, #20]"]
    if dot:
        o.append("movi v6.4s, #0")
    if five:
        o += ["tbl v9.16b, {{v8.16b}}, {lo:v}.16b", "tbl v10.16b, {{v8.16b}}, {hi:v}.16b"]
    o += ["and v4.16b, v0.16b, {m0f:v}.16b", "ushr v5.16b, v0.16b, #4"]
    if five:
        o += ["cmtst v9.16b, v9.16b, {bits:v}.16b", "cmtst v10.16b, v10.16b, {bits:v}.16b",
              "bit v4.16b, v9.16b, {m10:v}.16b", "bit v5.16b, v10.16b, {m10:v}.16b"]
    if dot:
        o += ["sdot v6.4s, v4.16b, v1.16b", "sdot v6.4s, v5.16b, v2.16b", "addv s7, v6.4s"]
    else:
        o += ["smull v6.8h, v4.8b, v1.8b", "smull v7.8h, v5.8b, v2.8b",
              "smlal2 v6.8h, v4.16b, v1.16b", "smlal2 v7.8h, v5.16b, v2.16b",
              "add v6.8h, v6.8h, v7.8h", "saddlv s7, v6.8h"]
    # the twin's float step: sumf += (d * dy) * sumi + m * s ([d, m] and [dy, s] in one go)
    o += ["ldr s16, [{x}]", "ldr s17, [{y}]", "fcvtl v16.4s, v16.4h", "fcvtl v17.4s, v17.4h",
          "fmul v16.2s, v16.2s, v17.2s", "scvtf s7, s7", "dup s18, v16.s[1]",
          "fmul s7, s16, s7", "fadd s7, s7, s18", "fadd {sumf:s}, {sumf:s}, s7"]
    return o


Q1X_B = {0: 20, 1: 21, 2: 22, 4: 24, 5: 25, 6: 26, 7: 27, 8: 28, 9: 29, 10: 30,
         16: 20, 17: 21, 18: 22}  # B's float step reuses its dead loads


def q1x_op(line):
    """An op with the registers a line writes and reads (read-modify-write forms read their
    destination; `{name}` operands are names)."""
    mnem, rest = line.split(" ", 1)
    args = [a.strip() for a in re.split(r",(?![^\[]*\])", rest)]
    def regs(a):
        return ([f"v{m.group(2)}" for m in re.finditer(r"(?<!\w)([vqsdh])(\d+)\b", a)]
                + [m.group(1) for m in re.finditer(r"\{(\w+)(?::\w)?\}", a)])
    w = regs(args[0])
    r = [x for a in args[1:] for x in regs(a)]
    if mnem in ("sdot", "smlal", "smlal2", "bit") or "{sumf" in args[0]:
        r += w
    return op(line, w, r, 3 if mnem.startswith("ldr") else 4)


def q1x_pair(kind, dot):
    a = q1x_int(kind, dot)
    def rename(l):
        l = l.replace("{x}", "{x2}").replace("{y}", "{y2}")
        return re.sub(r"(?<!\w)([vqsdh])(\d+)\b",
                      lambda m: m.group(1) + str(Q1X_B.get(int(m.group(2)), int(m.group(2)))), l)
    b = [rename(l) for l in a]
    lines = [l for pair in zip(a, b) for l in pair]
    return schedule([q1x_op(l) for l in lines])


# Q4_1 pipelined (#33): the asm loop runs over pairs of blocks; a trip holds pair i's integer
# dots (A into s7, B into s27) and pair i - 1's float steps (its d, m, dy, s loaded at
# negative offsets from the pointers), so the float chain never waits on the same trip's dots.
def q41_pipe_int(dot):
    a = [l for l in q1x_int("q41", dot) if not l.startswith(("ldr s16", "ldr s17"))]
    a = a[:a.index("fcvtl v16.4s, v16.4h")]
    def rename(l):
        l = l.replace("{x}", "{x2}").replace("{y}", "{y2}")
        return re.sub(r"(?<!\w)([vqsdh])(\d+)\b",
                      lambda m: m.group(1) + str(Q1X_B.get(int(m.group(2)), int(m.group(2)))), l)
    b = [rename(l).replace("{x2}, #", "{x}, #2").replace("{y2}, #", "{y}, #3") for l in a]
    # B's loads: x + 20 + off and y + 36 + off (the renames above put a digit in front).
    b = [re.sub(r"\{x\}, #2(\d+)", lambda m: "{x}, #" + str(20 + int(m.group(1))), l) for l in b]
    b = [re.sub(r"\{y\}, #3(\d+)", lambda m: "{y}, #" + str(36 + int(m.group(1))), l) for l in b]
    return a + b


def q41_pipe_tail():
    """Pair i - 1's float steps, A's then B's (the twin's order)."""
    o = []
    for (dm, ys, ms, f, acc, dx, dy) in (("v16", "v17", "s18", "s19", "s7", -40, -72),
                                         ("v28", "v29", "s30", "s31", "s27", -20, -36)):
        o += [f"ldur s{dm[1:]}, [{{x}}, #{dx}]", f"ldur s{ys[1:]}, [{{y}}, #{dy}]",
              f"fcvtl {dm}.4s, {dm}.4h", f"fcvtl {ys}.4s, {ys}.4h",
              f"fmul {dm}.2s, {dm}.2s, {ys}.2s", f"dup {ms}, {dm}.s[1]",
              f"scvtf {f}, {acc}", f"fmul {f}, s{dm[1:]}, {f}", f"fadd {f}, {f}, {ms}",
              f"fadd {{sumf:s}}, {{sumf:s}}, {f}"]
    return o


def q41_pipe(dot, part):
    """`first`: pair 0's dots; `loop`: a trip (tail of i - 1, dots of i); `last`: the tail."""
    step = ["add {x}, {x}, #40", "add {y}, {y}, #72"]
    if part == "first":
        return schedule([q1x_op(l) for l in q41_pipe_int(dot) + step])
    if part == "last":
        return schedule([q1x_op(l) for l in q41_pipe_tail()])
    ops = [q1x_op(l) for l in q41_pipe_tail() + q41_pipe_int(dot) + step]
    ops.append(op("subs {n}, {n}, #1", ["n", "flags"], ["n"], 1))
    return schedule(ops) + ["b.ne 2b"]


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
    if len(sys.argv) >= 5 and sys.argv[1] == "emit" and sys.argv[2] == "q41" and \
            sys.argv[4] in ("first", "loop", "last"):
        print(emit(q41_pipe(sys.argv[3] == "dot", sys.argv[4])))
        return
    if len(sys.argv) >= 5 and sys.argv[1] == "emit" and sys.argv[2] in ("q41", "q51"):
        kind, dot, part = sys.argv[2], sys.argv[3] == "dot", sys.argv[4]
        print(emit(q1x_pair(kind, dot) if part == "pair" else q1x_int(kind, dot)))
        return
    if len(sys.argv) >= 4 and sys.argv[1] == "emit":
        kind, face = sys.argv[2], sys.argv[3]
        part = sys.argv[4] if len(sys.argv) > 4 else None
        if kind in PAIRED and part in ("single", "pair", "tail"):
            f = {"single": single_block, "pair": pair_loop, "tail": pair_tail}[part]
            print(emit(f(kind, face == "dot")))
        elif part == "tail":
            print(emit([t for t, *_ in KINDS[kind][0]()]))
        else:
            print(emit(body(kind, face)))
        return
    if len(sys.argv) >= 2 and sys.argv[1] == "mca":
        print(f"{'cycles per block':<44}" + "".join(f"{c:>12}" for c in CPUS))
        for kind in BLOCK:
            per_trip = 2 if kind in PAIRED else 1
            for face in ["dot", "neon"]:
                name = f"ours {kind} ({BLOCK[kind]} weights) {'dotprod' if face == 'dot' else 'ARMv8.0'}"
                print(f"{name:<44}" + "".join(
                    f"{mca_cycles(ours_asm(kind, face), c) / per_trip:>12.1f}" for c in CPUS))
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
