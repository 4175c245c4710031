#!/usr/bin/env python3
"""The block loops of the IQ3_XXS and IQ3_S NEON kernels (kernels-asm/src/aarch64/iq3.rs: one
super-block a trip) and of IQ4_NL (iq4.rs: four blocks a trip, and one for the last nb % 4) and
IQ4_XS (one super-block a trip), list-scheduled (tools/lowbit-asm.py's scheduler: the A53 and
A55 issue in order, so the line order decides their speed).

    tools/iq-asm.py emit xxs|s|nl|nl1|xs neon|dot  # a loop body, as the asm! string lines
    tools/iq-asm.py rust        # rewrite those lines in kernels-asm/src/aarch64/iq3.rs, iq4.rs
    tools/iq-asm.py mca         # llvm-mca cycles per block (super-block) of each

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


def grid_vector(o, G, idx, dst, V=None):
    """dst = the 4 grid entries at the (9- or 8-bit) indices in GPRs idx: with V, each by `ldr s`
    at grid + 4 * index, joined by `zip1` (IQ3_XXS: fewer micro-ops than lane loads on the A7,
    and llvm-mca's A53 and dotprod A55 agree); else the first by `ldr s`, the others by `ld1`
    lane loads (IQ3_S: cheaper on the A55 beside its other NEON work; no lane-insert moves)."""
    if V is not None:
        e = [dst] + [V.new() for _ in range(3)]
        for r, v in zip(idx, e):
            o.append(op(f"ldr s{n(v)}, [{{grid}}, {g(r)}, lsl #2]", [v], [r, "grid"], 4))
        o.append(op(f"zip1 {e[0]}.2s, {e[0]}.2s, {e[1]}.2s", [e[0]], [e[0], e[1]]))
        o.append(op(f"zip1 {e[2]}.2s, {e[2]}.2s, {e[3]}.2s", [e[2]], [e[2], e[3]]))
        o.append(op(f"zip1 {dst}.2d, {dst}.2d, {e[2]}.2d", [dst], [dst, e[2]]))
        return
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
        grid_vector(o, G, bytes_of(o, G, a, 0), G0, V)
        grid_vector(o, G, bytes_of(o, G, a, 4), G1, V)
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



# IQ4_NL and IQ4_XS: v29 the 16 levels (kvalues_iq4nl), v30 0x0f bytes; IQ4_XS also v28 (the
# u16 shifts 14 - 2k) and v27 (32 in u16 lanes); the rest a pool.
VPOOL_4 = [f"v{i}" for i in range(0, 27)]


def nibble_dot(o, V, dot, Q, Y0, Y1, S):
    """The i32x4 whose lanes add to the dot of the 32 levels indexed by the 16 bytes in Q (low
    nibbles: elements 0-15, high: 16-31) with the activations Y0, Y1, into S (ARMv8.0: two
    products per i16 lane, |127 * 128| * 2 < 2^15, then pairwise widened)."""
    L, H = V.new(), V.new()
    o.append(op(f"and {L}.16b, {Q}.16b, v30.16b", [L], [Q, "v30"]))
    o.append(op(f"ushr {H}.16b, {Q}.16b, #4", [H], [Q]))
    o.append(op(f"tbl {L}.16b, {{{{v29.16b}}}}, {L}.16b", [L], [L, "v29"]))
    o.append(op(f"tbl {H}.16b, {{{{v29.16b}}}}, {H}.16b", [H], [H, "v29"]))
    if dot:
        o.append(op(f"movi {S}.4s, #0", [S], [], 2))
        o.append(op(f"sdot {S}.4s, {L}.16b, {Y0}.16b", [S], [S, L, Y0]))
        o.append(op(f"sdot {S}.4s, {H}.16b, {Y1}.16b", [S], [S, H, Y1]))
    else:
        B = V.new()
        o.append(op(f"smull {S}.8h, {L}.8b, {Y0}.8b", [S], [L, Y0]))
        o.append(op(f"smull2 {B}.8h, {L}.16b, {Y0}.16b", [B], [L, Y0]))
        o.append(op(f"smlal {S}.8h, {H}.8b, {Y1}.8b", [S], [S, H, Y1]))
        o.append(op(f"smlal2 {B}.8h, {H}.16b, {Y1}.16b", [B], [B, H, Y1]))
        o.append(op(f"saddlp {S}.4s, {S}.8h", [S], [S]))
        o.append(op(f"sadalp {S}.4s, {B}.8h", [S], [S, B]))
    return S


def sums4(o, V, S):
    """[sum of S[0], .., sum of S[3]] (exact i32 lanes) from four i32x4."""
    a, b = S[0], S[2]
    o.append(op(f"addp {a}.4s, {a}.4s, {S[1]}.4s", [a], [a, S[1]]))
    o.append(op(f"addp {b}.4s, {b}.4s, {S[3]}.4s", [b], [b, S[3]]))
    o.append(op(f"addp {a}.4s, {a}.4s, {b}.4s", [a], [a, b]))
    return a


def add_lanes(o, V, P, count):
    """sumf += P[0]; sumf += P[1]; .. in lane order (the twin's order)."""
    for k in range(count):
        if k == 0:
            o.append(op(f"fadd s31, s31, s{n(P)}", ["v31"], ["v31", P]))
        else:
            t = V.new()
            o.append(op(f"dup s{n(t)}, {P}.s[{k}]", [t], [P], 4))
            o.append(op(f"fadd s31, s31, s{n(t)}", ["v31"], ["v31", t]))


def nl_blocks(dot, nb):
    """nb (4 or 1) IQ4_NL blocks (18 bytes at x: f16 d, 16 index bytes) against Q8_0 blocks (34
    bytes at y: f16 d, 32 quants): sumf += (dy * dx) * sumi, block after block."""
    o = []
    V, G = Regs(VPOOL_4), Regs(GPOOL)
    # Values that live across the blocks stay out of the turn.
    S = [V.reserve() for _ in range(nb)]
    DX, DY = V.reserve(), V.reserve()
    for b in range(nb):
        Q, Y0, Y1 = V.new(), V.new(), V.new()
        o.append(op(f"ldur q{n(Q)}, [{{x}}, #{18 * b + 2}]", [Q], ["x"], 4))
        o.append(op(f"ldur q{n(Y0)}, [{{y}}, #{34 * b + 2}]", [Y0], ["y"], 4))
        o.append(op(f"ldur q{n(Y1)}, [{{y}}, #{34 * b + 18}]", [Y1], ["y"], 4))
        if b == 0:
            o.append(op(f"ldr h{n(DX)}, [{{x}}]", [DX], ["x"], 4))
            o.append(op(f"ldr h{n(DY)}, [{{y}}]", [DY], ["y"], 4))
        else:
            for D, base, size in ((DX, "x", 18), (DY, "y", 34)):
                r = G.new()
                o.append(op(f"add {g(r)}, {{{base}}}, #{size * b}", [r], [base], 3))
                o.append(op(f"ld1 {{{{{D}.h}}}}[{b}], [{g(r)}]", [D], [D, r], 4))
        nibble_dot(o, V, dot, Q, Y0, Y1, S[b])
    if nb == 4:
        P = sums4(o, V, S)
        o.append(op(f"scvtf {P}.4s, {P}.4s", [P], [P]))
        o.append(op(f"fcvtl {DX}.4s, {DX}.4h", [DX], [DX]))
        o.append(op(f"fcvtl {DY}.4s, {DY}.4h", [DY], [DY]))
        o.append(op(f"fmul {DY}.4s, {DY}.4s, {DX}.4s", [DY], [DY, DX]))
        o.append(op(f"fmul {P}.4s, {DY}.4s, {P}.4s", [P], [DY, P]))
    else:
        P = S[0]
        o.append(op(f"addv s{n(P)}, {P}.4s", [P], [P]))
        o.append(op(f"scvtf s{n(P)}, s{n(P)}", [P], [P]))
        o.append(op(f"fcvt s{n(DX)}, h{n(DX)}", [DX], [DX]))
        o.append(op(f"fcvt s{n(DY)}, h{n(DY)}", [DY], [DY]))
        o.append(op(f"fmul s{n(DY)}, s{n(DY)}, s{n(DX)}", [DY], [DY, DX]))
        o.append(op(f"fmul s{n(P)}, s{n(DY)}, s{n(P)}", [P], [DY, P]))
    add_lanes(o, V, P, nb)
    o.append(op(f"add {{x}}, {{x}}, #{18 * nb}", ["x"], ["x"], 3))
    o.append(op(f"add {{y}}, {{y}}, #{34 * nb}", ["y"], ["y"], 3))
    return o


def xs_block(dot):
    """One IQ4_XS super-block (136 bytes at x: f16 d, u16 scales_h, 4 bytes scales_l, 128
    index bytes) against one Q8_K block: per sub-block k, sumf += (d4d8 * (ls_k - 32)) * sumi_k
    with d4d8 = f16(d) * dy, sub-block after sub-block (the twin's order)."""
    o = []
    V, G = Regs(VPOOL_4), Regs(GPOOL)
    # Values that live across the sub-blocks stay out of the turn.
    LS0, LS1 = V.reserve(), V.reserve()
    S = [V.reserve() for _ in range(8)]
    # ls_k = nibble k of scales_l (low first) | bits 2k, 2k + 1 of scales_h << 4, less 32, as
    # f32 lanes (the high bits: scales_h in every u16 lane, shifted left by 14 - 2k, then right
    # by 14; `sli` puts them above the nibble).
    SL, SH, HB = V.new(), V.new(), V.new()
    o.append(op(f"ldr s{n(SL)}, [{{x}}, #4]", [SL], ["x"], 4))
    hp = G.new()
    o.append(op(f"add {g(hp)}, {{x}}, #2", [hp], ["x"], 3))
    o.append(op(f"ld1r {{{{{HB}.8h}}}}, [{g(hp)}]", [HB], [hp], 4))
    o.append(op(f"ushr {SH}.8b, {SL}.8b, #4", [SH], [SL]))
    o.append(op(f"and {SL}.8b, {SL}.8b, v30.8b", [SL], [SL, "v30"]))
    o.append(op(f"zip1 {SL}.8b, {SL}.8b, {SH}.8b", [SL], [SL, SH]))
    o.append(op(f"ushll {SL}.8h, {SL}.8b, #0", [SL], [SL]))
    o.append(op(f"ushl {HB}.8h, {HB}.8h, v28.8h", [HB], [HB, "v28"]))
    o.append(op(f"ushr {HB}.8h, {HB}.8h, #14", [HB], [HB]))
    o.append(op(f"sli {SL}.8h, {HB}.8h, #4", [SL], [SL, HB]))
    o.append(op(f"sub {SL}.8h, {SL}.8h, v27.8h", [SL], [SL, "v27"]))
    o.append(op(f"sxtl {LS0}.4s, {SL}.4h", [LS0], [SL]))
    o.append(op(f"sxtl2 {LS1}.4s, {SL}.8h", [LS1], [SL]))
    o.append(op(f"scvtf {LS0}.4s, {LS0}.4s", [LS0], [LS0]))
    o.append(op(f"scvtf {LS1}.4s, {LS1}.4s", [LS1], [LS1]))
    D, DY = V.new(), V.new()
    o.append(op(f"ldr h{n(D)}, [{{x}}]", [D], ["x"], 4))
    o.append(op(f"ldr s{n(DY)}, [{{y}}]", [DY], ["y"], 4))
    o.append(op(f"fcvt s{n(D)}, h{n(D)}", [D], [D]))
    o.append(op(f"fmul s{n(D)}, s{n(D)}, s{n(DY)}", [D], [D, DY]))
    # dl_k = d4d8 * (ls_k - 32): one rounding each, as the twin's scalar multiplies.
    o.append(op(f"fmul {LS0}.4s, {LS0}.4s, {D}.s[0]", [LS0], [LS0, D]))
    o.append(op(f"fmul {LS1}.4s, {LS1}.4s, {D}.s[0]", [LS1], [LS1, D]))
    for k in range(8):
        Q, Y0, Y1 = V.new(), V.new(), V.new()
        o.append(op(f"ldur q{n(Q)}, [{{x}}, #{8 + 16 * k}]", [Q], ["x"], 4))
        o.append(op(f"ldur q{n(Y0)}, [{{y}}, #{4 + 32 * k}]", [Y0], ["y"], 4))
        o.append(op(f"ldur q{n(Y1)}, [{{y}}, #{20 + 32 * k}]", [Y1], ["y"], 4))
        nibble_dot(o, V, dot, Q, Y0, Y1, S[k])
    for half, LS in ((S[:4], LS0), (S[4:], LS1)):
        P = sums4(o, V, half)
        o.append(op(f"scvtf {P}.4s, {P}.4s", [P], [P]))
        o.append(op(f"fmul {P}.4s, {LS}.4s, {P}.4s", [P], [LS, P]))
        add_lanes(o, V, P, 4)
    o.append(op("add {x}, {x}, #136", ["x"], ["x"], 3))
    o.append(op("add {y}, {y}, #292", ["y"], ["y"], 3))
    return o


def body(kind, face):
    dot = face == "dot"
    ops = {"xxs": lambda: xxs_block(dot), "s": lambda: s_block(dot),
           "nl": lambda: nl_blocks(dot, 4), "nl1": lambda: nl_blocks(dot, 1),
           "xs": lambda: xs_block(dot)}[kind]()
    loop = "3b" if kind == "nl1" else "2b"
    counter = "{m}" if kind == "nl1" else "{n}"
    return schedule(ops) + [f"subs {counter}, {counter}, #1", f"b.ne {loop}"]


def mca_text(lines):
    import re
    regs = {f"t{i}": f"x{i + 3}" for i in range(len(GPOOL))}
    regs.update({"x": "x0", "y": "x1", "n": "x2", "grid": "x20", "sg": "x21", "m": "x22"})
    out = []
    for l in lines:
        l = l.replace("{{", "\x00").replace("}}", "\x01")
        l = re.sub(r"\{(\w+)(:w)?\}",
                   lambda m: ("w" + regs[m.group(1)][1:]) if m.group(2) else regs[m.group(1)], l)
        l = l.replace("\x00", "{").replace("\x01", "}")
        l = l.replace("b.ne 2b", "b.ne .Lloop").replace("b.ne 3b", "b.ne .Lloop")
        out.append("  " + l)
    return ".Lloop:\n" + "\n".join(out) + "\n"


def rust():
    """Each `// tools/iq-asm.py emit KIND FACE` line of iq3.rs and iq4.rs is followed by the
    lines it prints (the string lines after it are replaced)."""
    for name in ("iq3.rs", "iq4.rs"):
        rust_file(os.path.join(os.path.dirname(HERE), "kernels-asm", "src", "aarch64", name))


def rust_file(path):
    import re
    lines = open(path).read().split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        m = re.match(r"^(\s*)// tools/iq-asm.py emit (\w+) (\w+)$", line)
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
        per = {"nl": 4}
        for kind in sys.argv[2:] or ("xxs", "s", "nl", "xs"):
            for face in ("neon", "dot"):
                text = mca_text(body(kind, face))
                cpus = lowbit_asm.CPUS if face == "neon" else lowbit_asm.CPUS[:1]
                print(kind, face, len(body(kind, face)), "insns", " ".join(
                    f"{c}: {mca_cycles(text, c) / per.get(kind, 1):.1f}" for c in cpus))


if __name__ == "__main__":
    main()
