#!/usr/bin/env python3
"""The block loops of the IQ3_XXS and IQ3_S NEON kernels (kernels-asm/src/aarch64/iq3.rs), one
whole super-block a trip, list-scheduled (tools/lowbit-asm.py's scheduler: the A53 and A55 issue
in order, so the line order decides their speed).

    tools/iq3-asm.py emit xxs|s neon|dot   # the loop body, as the asm! string lines
    tools/iq3-asm.py rust                  # rewrite those lines in kernels-asm/src/aarch64/iq3.rs
    tools/iq3-asm.py mca                   # llvm-mca cycles per super-block of each

Each value gets the next register of a pool in turn (a value is written once, then read), so
the scheduler can overlap sub-blocks; every dependence on a physical register is kept.
"""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("lowbit_asm", os.path.join(HERE, "lowbit-asm.py"))
lowbit_asm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lowbit_asm)
schedule, op, mca_cycles = lowbit_asm.schedule, lowbit_asm.op, lowbit_asm.mca_cycles

# v31: the running float sum; v15 (ARMv8.0: the 8 scales as i16, by-element operands must be
# v0-v15) or v14, v15 (dotprod: i32); IQ3_S's constants in v25-v30; the rest a pool.
VPOOL = [f"v{i}" for i in list(range(0, 14)) + list(range(16, 31))]
VPOOL_S = [f"v{i}" for i in list(range(0, 14)) + list(range(16, 25))]
GPOOL = [f"t{i}" for i in range(12)]


class Regs:
    def __init__(self, pool):
        self.pool, self.i = list(pool), 0

    def reserve(self):
        """A register taken out of the turn (a value that lives the whole block)."""
        return self.pool.pop()

    def new(self):
        r = self.pool[self.i % len(self.pool)]
        self.i += 1
        return r


def g(r, w=False):
    """The asm! operand of GPR r (x form, or w form)."""
    return f"{{{r}:w}}" if w else f"{{{r}}}"


def n(v):
    return v[1:]


def grid_vector(o, G, idx, dst):
    """dst = the 4 grid entries at the (9- or 8-bit) indices in GPRs idx: the first by `ldr s`
    at grid + 4 * index, the others by `ld1` lane loads (no lane-insert moves)."""
    o.append(op(f"ldr s{n(dst)}, [{{grid}}, {g(idx[0])}, lsl #2]", [dst], [idx[0], "grid"], 4))
    for lane, r in enumerate(idx[1:], 1):
        o.append(op(f"add {g(r)}, {{grid}}, {g(r)}, lsl #2", [r], [r, "grid"], 3))
        o.append(op(f"ld1 {{{{{dst}.s}}}}[{lane}], [{g(r)}]", [dst], [dst, r], 4))


def bytes_of(o, G, word, first):
    """GPRs holding bytes first..first+3 of the 64-bit GPR `word`."""
    out = []
    for b in range(first, first + 4):
        r = G.new()
        if b == 0:
            o.append(op(f"and {g(r)}, {g(word)}, #0xff", [r], [word], 3))
        elif b == 7:
            o.append(op(f"lsr {g(r)}, {g(word)}, #56", [r], [word], 3))
        else:
            o.append(op(f"ubfx {g(r)}, {g(word)}, #{8 * b}, #8", [r], [word], 3))
        out.append(r)
    return out


def products(o, V, dot, k, G0, G1, Y0, Y1, accs, scale):
    """Sub-block k's signed magnitudes G0, G1 (16 each) times its activations Y0, Y1, by its
    scale, into the block accumulators (ARMv8.0: i16 lanes of 4 products, then widened by the
    scale; dotprod: `sdot`, then `mla` by the scale)."""
    A = V.new()
    if dot:
        o.append(op(f"movi {A}.4s, #0", [A], [], 2))
        o.append(op(f"sdot {A}.4s, {G0}.16b, {Y0}.16b", [A], [A, G0, Y0]))
        o.append(op(f"sdot {A}.4s, {G1}.16b, {Y1}.16b", [A], [A, G1, Y1]))
        acc = accs[k % 2]
        sreg = scale[k // 4]
        if k < 2:
            o.append(op(f"mul {acc}.4s, {A}.4s, {sreg}.s[{k % 4}]", [acc], [A, sreg]))
        else:
            o.append(op(f"mla {acc}.4s, {A}.4s, {sreg}.s[{k % 4}]", [acc], [acc, A, sreg]))
    else:
        o.append(op(f"smull {A}.8h, {G0}.8b, {Y0}.8b", [A], [G0, Y0]))
        o.append(op(f"smlal2 {A}.8h, {G0}.16b, {Y0}.16b", [A], [A, G0, Y0]))
        o.append(op(f"smlal {A}.8h, {G1}.8b, {Y1}.8b", [A], [A, G1, Y1]))
        o.append(op(f"smlal2 {A}.8h, {G1}.16b, {Y1}.16b", [A], [A, G1, Y1]))
        lo, hi = accs[2 * (k % 2)], accs[2 * (k % 2) + 1]
        s = scale[0]
        if k < 2:
            o.append(op(f"smull {lo}.4s, {A}.4h, {s}.h[{k}]", [lo], [A, s]))
            o.append(op(f"smull2 {hi}.4s, {A}.8h, {s}.h[{k}]", [hi], [A, s]))
        else:
            o.append(op(f"smlal {lo}.4s, {A}.4h, {s}.h[{k}]", [lo], [lo, A, s]))
            o.append(op(f"smlal2 {hi}.4s, {A}.8h, {s}.h[{k}]", [hi], [hi, A, s]))


def float_step(o, V, dot, accs, nbytes):
    """The twin's float step, in its order: sumf += (f16(d) * dy) * (block integer as f32)."""
    a = accs[0]
    if dot:
        o.append(op(f"add {a}.4s, {a}.4s, {accs[1]}.4s", [a], [a, accs[1]]))
    else:
        b = accs[2]
        o.append(op(f"add {a}.4s, {a}.4s, {accs[1]}.4s", [a], [a, accs[1]]))
        o.append(op(f"add {b}.4s, {b}.4s, {accs[3]}.4s", [b], [b, accs[3]]))
        o.append(op(f"add {a}.4s, {a}.4s, {b}.4s", [a], [a, b]))
    o.append(op(f"addv s{n(a)}, {a}.4s", [a], [a]))
    o.append(op(f"scvtf s{n(a)}, s{n(a)}", [a], [a]))
    d, dy = V.new(), V.new()
    o.append(op(f"ldr h{n(d)}, [{{x}}]", [d], ["x"], 4))
    o.append(op(f"ldr s{n(dy)}, [{{y}}]", [dy], ["y"], 4))
    o.append(op(f"fcvt s{n(d)}, h{n(d)}", [d], [d]))
    o.append(op(f"fmul s{n(d)}, s{n(d)}, s{n(dy)}", [d], [d, dy]))
    o.append(op(f"fmul s{n(d)}, s{n(d)}, s{n(a)}", [d], [d, a]))
    o.append(op(f"fadd s31, s31, s{n(d)}", ["v31"], ["v31", d]))
    o.append(op(f"add {{x}}, {{x}}, #{nbytes}", ["x"], ["x"], 3))
    o.append(op("add {y}, {y}, #292", ["y"], ["y"], 3))


def xxs_block(dot):
    """One IQ3_XXS super-block (98 bytes at x: f16 d, 64 index bytes, 8 signs-and-scale words)
    against one Q8_K block (292 bytes at y: f32 d, 256 quants)."""
    o = []
    V, G = Regs(VPOOL), Regs(GPOOL)
    accs = [V.reserve() for _ in range(2 if dot else 4)]
    # The scales 2s + 1 of the 8 sub-blocks from the words' top nibbles: >> 27 keeps the
    # nibble and the sign field's top bit, which the `orr` overwrites.
    s0, s1 = ("v14", "v15") if dot else (V.new(), V.new())
    o.append(op(f"ldur q{n(s0)}, [{{x}}, #66]", [s0], ["x"], 4))
    o.append(op(f"ldur q{n(s1)}, [{{x}}, #82]", [s1], ["x"], 4))
    o.append(op(f"ushr {s0}.4s, {s0}.4s, #27", [s0], [s0]))
    o.append(op(f"ushr {s1}.4s, {s1}.4s, #27", [s1], [s1]))
    if dot:
        scale = ["v14", "v15"]
        for s in scale:
            o.append(op(f"orr {s}.4s, #1", [s], [s]))
    else:
        o.append(op(f"uzp1 v15.8h, {s0}.8h, {s1}.8h", ["v15"], [s0, s1]))
        o.append(op("orr v15.8h, #1", ["v15"], ["v15"]))
        scale = ["v15"]
    for k in range(8):
        a, w = G.new(), G.new()
        o.append(op(f"ldur {g(a)}, [{{x}}, #{2 + 8 * k}]", [a], ["x"], 4))
        o.append(op(f"ldur {g(w, True)}, [{{x}}, #{66 + 4 * k}]", [w], ["x"], 4))
        Y0, Y1 = V.new(), V.new()
        o.append(op(f"ldur q{n(Y0)}, [{{y}}, #{4 + 32 * k}]", [Y0], ["y"], 4))
        o.append(op(f"ldur q{n(Y1)}, [{{y}}, #{20 + 32 * k}]", [Y1], ["y"], 4))
        G0, G1 = V.new(), V.new()
        grid_vector(o, G, bytes_of(o, G, a, 0), G0)
        grid_vector(o, G, bytes_of(o, G, a, 4), G1)
        # Sign masks: KSIGNS64 entries (8 bytes each) at the four 7-bit fields.
        M0, M1 = V.new(), V.new()
        fs = []
        for l in range(4):
            r = G.new()
            if l == 0:
                o.append(op(f"and {g(r, True)}, {g(w, True)}, #0x7f", [r], [w], 3))
            else:
                o.append(op(f"ubfx {g(r, True)}, {g(w, True)}, #{7 * l}, #7", [r], [w], 3))
            fs.append(r)
        for M, (f0, f1) in ((M0, fs[:2]), (M1, fs[2:])):
            o.append(op(f"ldr d{n(M)}, [{{sg}}, {g(f0)}, lsl #3]", [M], [f0, "sg"], 4))
            o.append(op(f"add {g(f1)}, {{sg}}, {g(f1)}, lsl #3", [f1], [f1, "sg"], 3))
            o.append(op(f"ld1 {{{{{M}.d}}}}[1], [{g(f1)}]", [M], [M, f1], 4))
        for Gv, M in ((G0, M0), (G1, M1)):
            o.append(op(f"eor {Gv}.16b, {Gv}.16b, {M}.16b", [Gv], [Gv, M]))
            o.append(op(f"sub {Gv}.16b, {Gv}.16b, {M}.16b", [Gv], [Gv, M]))
        products(o, V, dot, k, G0, G1, Y0, Y1, accs, scale)
    float_step(o, V, dot, accs, 98)
    return o


def s_block(dot):
    """One IQ3_S super-block (110 bytes at x: f16 d, 64 low index bytes, 8 qh bytes, 32 sign
    bytes, 4 scale bytes) against one Q8_K block."""
    o = []
    V, G = Regs(VPOOL_S), Regs(GPOOL)
    accs = [V.reserve() for _ in range(2 if dot else 4)]
    # Scales: nibble k of the 4 bytes at 106 (low nibble first), as 2s + 1.
    sc, hi = V.new(), V.new()
    o.append(op(f"ldr s{n(sc)}, [{{x}}, #106]", [sc], ["x"], 4))
    o.append(op(f"ushr {hi}.8b, {sc}.8b, #4", [hi], [sc]))
    o.append(op(f"and {sc}.8b, {sc}.8b, v29.8b", [sc], [sc, "v29"]))
    o.append(op(f"zip1 {sc}.8b, {sc}.8b, {hi}.8b", [sc], [sc, hi]))
    if dot:
        o.append(op(f"ushll {sc}.8h, {sc}.8b, #1", [sc], [sc]))
        o.append(op(f"ushll v14.4s, {sc}.4h, #0", ["v14"], [sc]))
        o.append(op(f"ushll2 v15.4s, {sc}.8h, #0", ["v15"], [sc]))
        for s in ("v14", "v15"):
            o.append(op(f"orr {s}.4s, #1", [s], [s]))
        scale = ["v14", "v15"]
    else:
        o.append(op(f"ushll v15.8h, {sc}.8b, #1", ["v15"], [sc]))
        o.append(op("orr v15.8h, #1", ["v15"], ["v15"]))
        scale = ["v15"]
    for k in range(8):
        # The 8 indices: qs bytes widened to u16, bit j of the qh byte moved to bit 8 of lane j
        # (`and` with 0x100 << j of the byte copied into both halves, then shifted right by j).
        Q, H = V.new(), V.new()
        o.append(op(f"ldr d{n(Q)}, [{{x}}, #{2 + 8 * k}]", [Q], ["x"], 4))
        hp = G.new()
        o.append(op(f"add {g(hp)}, {{x}}, #{66 + k}", [hp], ["x"], 3))
        o.append(op(f"ld1r {{{{{H}.16b}}}}, [{g(hp)}]", [H], [hp], 4))
        Y0, Y1 = V.new(), V.new()
        o.append(op(f"ldur q{n(Y0)}, [{{y}}, #{4 + 32 * k}]", [Y0], ["y"], 4))
        o.append(op(f"ldur q{n(Y1)}, [{{y}}, #{20 + 32 * k}]", [Y1], ["y"], 4))
        S = V.new()
        o.append(op(f"ldr s{n(S)}, [{{x}}, #{74 + 4 * k}]", [S], ["x"], 4))
        o.append(op(f"ushll {Q}.8h, {Q}.8b, #0", [Q], [Q]))
        o.append(op(f"and {H}.16b, {H}.16b, v30.16b", [H], [H, "v30"]))
        o.append(op(f"ushl {H}.8h, {H}.8h, v28.8h", [H], [H, "v28"]))
        o.append(op(f"orr {Q}.16b, {Q}.16b, {H}.16b", [Q], [Q, H]))
        lo, hi = G.new(), G.new()
        o.append(op(f"fmov {g(lo)}, d{n(Q)}", [lo], [Q], 4))
        o.append(op(f"mov {g(hi)}, {Q}.d[1]", [hi], [Q], 4))
        G0, G1 = V.new(), V.new()
        for Gv, word in ((G0, lo), (G1, hi)):
            idx = []
            for j in range(4):
                r = G.new()
                if j == 0:
                    o.append(op(f"and {g(r)}, {g(word)}, #0x1ff", [r], [word], 3))
                else:
                    o.append(op(f"ubfx {g(r)}, {g(word)}, #{16 * j}, #9", [r], [word], 3))
                idx.append(r)
            grid_vector(o, G, idx, Gv)
        # Sign masks: sign bytes 0, 1 spread over 8 lanes each (v26), 2, 3 (v27), then each lane
        # tested against its bit (v25).
        M0, M1 = V.new(), V.new()
        o.append(op(f"tbl {M0}.16b, {{{{{S}.16b}}}}, v26.16b", [M0], [S, "v26"]))
        o.append(op(f"tbl {M1}.16b, {{{{{S}.16b}}}}, v27.16b", [M1], [S, "v27"]))
        o.append(op(f"cmtst {M0}.16b, {M0}.16b, v25.16b", [M0], [M0, "v25"]))
        o.append(op(f"cmtst {M1}.16b, {M1}.16b, v25.16b", [M1], [M1, "v25"]))
        for Gv, M in ((G0, M0), (G1, M1)):
            o.append(op(f"eor {Gv}.16b, {Gv}.16b, {M}.16b", [Gv], [Gv, M]))
            o.append(op(f"sub {Gv}.16b, {Gv}.16b, {M}.16b", [Gv], [Gv, M]))
        products(o, V, dot, k, G0, G1, Y0, Y1, accs, scale)
    float_step(o, V, dot, accs, 110)
    return o


def body(kind, face):
    dot = face == "dot"
    ops = xxs_block(dot) if kind == "xxs" else s_block(dot)
    return schedule(ops) + ["subs {n}, {n}, #1", "b.ne 2b"]


def mca_text(lines):
    import re
    regs = {f"t{i}": f"x{i + 3}" for i in range(len(GPOOL))}
    regs.update({"x": "x0", "y": "x1", "n": "x2", "grid": "x20", "sg": "x21"})
    out = []
    for l in lines:
        l = l.replace("{{", "\x00").replace("}}", "\x01")
        l = re.sub(r"\{(\w+)(:w)?\}",
                   lambda m: ("w" + regs[m.group(1)][1:]) if m.group(2) else regs[m.group(1)], l)
        l = l.replace("\x00", "{").replace("\x01", "}").replace("2b", ".Lloop")
        out.append("  " + l)
    return ".Lloop:\n" + "\n".join(out) + "\n"


def rust():
    """Each `// tools/iq3-asm.py emit KIND FACE` line of iq3.rs is followed by the lines it
    prints (the string lines after it are replaced)."""
    import re
    path = os.path.join(os.path.dirname(HERE), "kernels-asm", "src", "aarch64", "iq3.rs")
    lines = open(path).read().split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        m = re.match(r"^(\s*)// tools/iq3-asm.py emit (\w+) (\w+)$", line)
        if not m:
            continue
        while i < len(lines) and lines[i].lstrip().startswith('"'):
            i += 1
        out += [f'{m.group(1)}"{l}",' for l in body(m.group(2), m.group(3))]
    with open(path, "w") as f:
        f.write("\n".join(out))


def main():
    if sys.argv[1] == "rust":
        rust()
    elif sys.argv[1] == "emit":
        for l in body(sys.argv[2], sys.argv[3]):
            print(f'            "{l}",')
    elif sys.argv[1] == "mca":
        for kind in ("xxs", "s"):
            for face in ("neon", "dot"):
                text = mca_text(body(kind, face))
                cpus = lowbit_asm.CPUS if face == "neon" else lowbit_asm.CPUS[:1]
                print(kind, face, len(body(kind, face)), "insns",
                      " ".join(f"{c}: {mca_cycles(text, c):.1f}" for c in cpus))


if __name__ == "__main__":
    main()
