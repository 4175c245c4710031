#!/usr/bin/env python3
"""The block loops of the grid i-quant kernels written from here (kernels-asm/src/aarch64/iq2.rs:
IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M), one whole super-block a trip with the previous block's
float step, and their llvm-mca cycles per block.

    tools/iq2-asm.py emit iq2xxs|iq2xs|iq2s|iq1s|iq1m dot|neon  # the loop body for the asm! block
    tools/iq2-asm.py mca [KIND..]     # cycles per super-block, A55 / A53 / A7 (dotprod: A55)
    tools/iq2-asm.py sweep [KIND..]   # the same for each live-register limit (LIVE's choice)

Each super-block is written as operations on virtual registers (`%name`: NEON; `{%gname}`:
general-purpose, an asm! operand `{gN}`), ordered and given registers as tools/lowbit-asm.py
does for Q3_K and Q5_K (`schedule_virtual` keeping few values live, `allocate`, then the list
`schedule` again on the physical registers): the A53 and A55 issue in order, so every load
is issued long before its first use and independent chains interleave. The loop body is block
i's integer part and block i - 1's float part (sumf += (f16(d) * dy) * f32(integer), the scalar
twin's steps in its order): the float chain waits on nothing issued in the same trip.
"""
import importlib.util
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("lowbit_asm", os.path.join(HERE, "lowbit-asm.py"))
lowbit_asm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lowbit_asm)
op, schedule, mca_cycles = lowbit_asm.op, lowbit_asm.schedule, lowbit_asm.mca_cycles
# The two register files' scheduler and allocator are lowbit-asm's.
schedule_virtual, allocate = lowbit_asm.schedule_virtual, lowbit_asm.allocate

CPUS = ["cortex-a55", "cortex-a53", "cyclone"]
# v29: the previous block's d * dy, v30: its integer (s30), v31: sumf.
VPOOL = [f"v{i}" for i in range(29)]
GPOOL = [f"g{i}" for i in range(16)]


def float_tail(frac=0):
    """sumf += D * f32(I) for the previous block (D = f16(d) * dy in s29, I in s30); with
    `frac` = 3, f32(I) / 8 (exact: |I| < 2^23)."""
    return [
        op(f"scvtf s%f, s30{', #' + str(frac) if frac else ''}", ["%f"], ["v30"], 4),
        op("fmul s%f, s29, s%f", ["%f"], ["v29", "%f"], 4),
        op("fadd s31, s31, s%f", ["v31"], ["v31", "%f"], 4),
    ]


def iq2xxs_block(dot):
    """One IQ2_XXS super-block: `{x}` at its qs (byte 2), `{y}` at the Q8_K block's qs (byte
    4). Per sub-block k: a u64 of 4 grid index bytes, 4 seven-bit sign fields and the scale
    nibble; grid and sign entries by `ldr d` at index * 8 (masked to the table sizes)."""
    o = [op("ldur h%d, [{x}, #-2]", ["%d"], ["x"], 3),
         op("ldur s%dy, [{y}, #-4]", ["%dy"], ["y"], 3)]
    sums = []
    for k in range(8):
        w = f"%gw{k}"
        o.append(op(f"ldr {{{w}}}, [{{x}}, #{8 * k}]", [w], ["x"], 3))
        gi = [f"%gi{k}_{l}" for l in range(4)]
        gj = [f"%gj{k}_{l}" for l in range(4)]
        o.append(op(f"and {{{gi[0]}}}, {{{w}}}, #0xff", [gi[0]], [w], 1))
        for l in range(1, 4):
            o.append(op(f"ubfx {{{gi[l]}}}, {{{w}}}, #{8 * l}, #8", [gi[l]], [w], 1))
        for l in range(4):
            o.append(op(f"ubfx {{{gj[l]}}}, {{{w}}}, #{32 + 7 * l}, #7", [gj[l]], [w], 1))
        s = f"%gs{k}"
        # 2s + 1 from bits 59..63 (s << 1 and the top sign bit, which the orr overwrites).
        o.append(op(f"ubfx {{{s}}}, {{{w}}}, #59, #5", [s], [w], 1))
        o.append(op(f"orr {{{s}:w}}, {{{s}:w}}, #1", [s], [s], 1))
        g = [f"%q_{k}_{l}" for l in range(4)]
        m = [f"%m_{k}_{l}" for l in range(4)]
        y = [f"%y_{k}_{l}" for l in range(4)]
        for l in range(4):
            o.append(op(f"ldr d{g[l]}, [{{grid}}, {{{gi[l]}}}, lsl #3]", [g[l]], ["grid", gi[l]], 3))
        for l in range(4):
            o.append(op(f"ldr d{m[l]}, [{{signs}}, {{{gj[l]}}}, lsl #3]", [m[l]], ["signs", gj[l]], 3))
        for l in (0, 2):
            o.append(op(f"ldp d{y[l]}, d{y[l + 1]}, [{{y}}, #{32 * k + 8 * l}]",
                        [y[l], y[l + 1]], ["y"], 3))
        e = [f"%e_{k}_{l}" for l in range(4)]
        for l in range(4):
            o.append(op(f"eor {e[l]}.8b, {g[l]}.8b, {m[l]}.8b", [e[l]], [g[l], m[l]], 2))
            o.append(op(f"sub {e[l]}.8b, {e[l]}.8b, {m[l]}.8b", [e[l]], [e[l], m[l]], 2))
        p0, p1, p = f"%p0_{k}", f"%p1_{k}", f"%p_{k}"
        sc = f"%sc_{k}"
        if dot:
            o.append(op(f"movi {p0}.2s, #0", [p0], [], 1))
            o.append(op(f"movi {p1}.2s, #0", [p1], [], 1))
            o.append(op(f"sdot {p0}.2s, {e[0]}.8b, {y[0]}.8b", [p0], [p0, e[0], y[0]], 4))
            o.append(op(f"sdot {p1}.2s, {e[1]}.8b, {y[1]}.8b", [p1], [p1, e[1], y[1]], 4))
            o.append(op(f"sdot {p0}.2s, {e[2]}.8b, {y[2]}.8b", [p0], [p0, e[2], y[2]], 4))
            o.append(op(f"sdot {p1}.2s, {e[3]}.8b, {y[3]}.8b", [p1], [p1, e[3], y[3]], 4))
            o.append(op(f"add {p}.2s, {p0}.2s, {p1}.2s", [p], [p0, p1], 2))
            o.append(op(f"dup {sc}.2s, {{{s}:w}}", [sc], [s], 3))
            a = f"%a{k % 2}"
            if k < 2:
                o.append(op(f"mul {a}.2s, {p}.2s, {sc}.2s", [a], [p, sc], 4))
            else:
                o.append(op(f"mla {a}.2s, {p}.2s, {sc}.2s", [a], [a, p, sc], 4))
        else:
            # i16 lanes: 4 products of at most 43 * 128 each, < 2^15.
            o.append(op(f"smull {p0}.8h, {e[0]}.8b, {y[0]}.8b", [p0], [e[0], y[0]], 4))
            o.append(op(f"smull {p1}.8h, {e[1]}.8b, {y[1]}.8b", [p1], [e[1], y[1]], 4))
            o.append(op(f"smlal {p0}.8h, {e[2]}.8b, {y[2]}.8b", [p0], [p0, e[2], y[2]], 4))
            o.append(op(f"smlal {p1}.8h, {e[3]}.8b, {y[3]}.8b", [p1], [p1, e[3], y[3]], 4))
            o.append(op(f"add {p}.8h, {p0}.8h, {p1}.8h", [p], [p0, p1], 2))
            o.append(op(f"dup {sc}.8h, {{{s}:w}}", [sc], [s], 3))
            lo, hi = f"%lo{k % 2}", f"%hi{k % 2}"
            if k < 2:
                o.append(op(f"smull {lo}.4s, {p}.4h, {sc}.4h", [lo], [p, sc], 4))
                o.append(op(f"smull2 {hi}.4s, {p}.8h, {sc}.8h", [hi], [p, sc], 4))
            else:
                o.append(op(f"smlal {lo}.4s, {p}.4h, {sc}.4h", [lo], [lo, p, sc], 4))
                o.append(op(f"smlal2 {hi}.4s, {p}.8h, {sc}.8h", [hi], [hi, p, sc], 4))
    if dot:
        o.append(op("add %a0.2s, %a0.2s, %a1.2s", ["%a0"], ["%a0", "%a1"], 2))
        o.append(op("addp v30.2s, %a0.2s, %a0.2s", ["v30"], ["%a0"], 3))
    else:
        o.append(op("add %lo0.4s, %lo0.4s, %hi0.4s", ["%lo0"], ["%lo0", "%hi0"], 2))
        o.append(op("add %lo1.4s, %lo1.4s, %hi1.4s", ["%lo1"], ["%lo1", "%hi1"], 2))
        o.append(op("add %lo0.4s, %lo0.4s, %lo1.4s", ["%lo0"], ["%lo0", "%lo1"], 2))
        o.append(op("addv s30, %lo0.4s", ["v30"], ["%lo0"], 4))
    o.append(op("fcvt s%df, h%d", ["%df"], ["%d"], 4))
    o.append(op("fmul s29, s%df, s%dy", ["v29"], ["%df", "%dy"], 4))
    o.append(op("add {x}, {x}, #66", ["x"], ["x"], 1))
    o.append(op("add {y}, {y}, #292", ["y"], ["y"], 1))
    o.append(op("subs {n}, {n}, #1", ["n", "flags"], ["n"], 1))
    return o


def signed_grid(o, k, gi, gj, grid, signs):
    """Group l of sub-block k: its grid entry at `grid` + 8 * gi[l] with the sign mask at
    `signs` + 8 * gj[l], (g ^ m) - m: the 4 signed groups' names."""
    g = [f"%q_{k}_{l}" for l in range(4)]
    m = [f"%m_{k}_{l}" for l in range(4)]
    e = [f"%e_{k}_{l}" for l in range(4)]
    for l in range(4):
        o.append(op(f"ldr d{g[l]}, [{{{grid}}}, {{{gi[l]}}}, lsl #3]", [g[l]], [grid, gi[l]], 3))
    for l in range(4):
        o.append(op(f"ldr d{m[l]}, [{{{signs}}}, {{{gj[l]}}}, lsl #3]", [m[l]], [signs, gj[l]], 3))
    for l in range(4):
        o.append(op(f"eor {e[l]}.8b, {g[l]}.8b, {m[l]}.8b", [e[l]], [g[l], m[l]], 2))
        o.append(op(f"sub {e[l]}.8b, {e[l]}.8b, {m[l]}.8b", [e[l]], [e[l], m[l]], 2))
    return e


def acts(o, k):
    """The 32 activations of sub-block k, one group of 8 a register."""
    y = [f"%y_{k}_{l}" for l in range(4)]
    for l in (0, 2):
        o.append(op(f"ldp d{y[l]}, d{y[l + 1]}, [{{y}}, #{32 * k + 8 * l}]", [y[l], y[l + 1]], ["y"], 3))
    return y


def halves(o, k, e, y, sc, dot, first):
    """Sub-block k's two halves (groups 0, 1 and 2, 3) times their 2s + 1 (GPRs sc[0], sc[1])
    into the accumulators: ARMv8.0 %lo{h}/%hi{h} (i32x4), dotprod %a{h} (i32x2)."""
    for h in range(2):
        p, v = f"%p{h}_{k}", f"%sc{h}_{k}"
        if dot:
            o.append(op(f"movi {p}.2s, #0", [p], [], 1))
            o.append(op(f"sdot {p}.2s, {e[2*h]}.8b, {y[2*h]}.8b", [p], [p, e[2*h], y[2*h]], 4))
            o.append(op(f"sdot {p}.2s, {e[2*h+1]}.8b, {y[2*h+1]}.8b", [p], [p, e[2*h+1], y[2*h+1]], 4))
            o.append(op(f"dup {v}.2s, {{{sc[h]}:w}}", [v], [sc[h]], 3))
            a = f"%a{h}"
            if first:
                o.append(op(f"mul {a}.2s, {p}.2s, {v}.2s", [a], [p, v], 4))
            else:
                o.append(op(f"mla {a}.2s, {p}.2s, {v}.2s", [a], [a, p, v], 4))
        else:
            # i16 lanes: 2 products of at most 43 * 128 each.
            o.append(op(f"smull {p}.8h, {e[2*h]}.8b, {y[2*h]}.8b", [p], [e[2*h], y[2*h]], 4))
            o.append(op(f"smlal {p}.8h, {e[2*h+1]}.8b, {y[2*h+1]}.8b", [p], [p, e[2*h+1], y[2*h+1]], 4))
            o.append(op(f"dup {v}.8h, {{{sc[h]}:w}}", [v], [sc[h]], 3))
            lo, hi = f"%lo{h}", f"%hi{h}"
            ins = ("smull", "smull2") if first else ("smlal", "smlal2")
            rd = [] if first else [lo]
            o.append(op(f"{ins[0]} {lo}.4s, {p}.4h, {v}.4h", [lo], rd + [p, v], 4))
            rd = [] if first else [hi]
            o.append(op(f"{ins[1]} {hi}.4s, {p}.8h, {v}.8h", [hi], rd + [p, v], 4))


def block_end(o, dot, x_bytes, accs):
    """The block integer into s30 (from the accumulators `accs`), f16(d) * dy into s29, the
    pointers on."""
    if dot:
        acc = accs[0]
        for a in accs[1:]:
            o.append(op(f"add {acc}.2s, {acc}.2s, {a}.2s", [acc], [acc, a], 2))
        o.append(op(f"addp v30.2s, {acc}.2s, {acc}.2s", ["v30"], [acc], 3))
    else:
        while len(accs) > 1:
            nxt = []
            for a, b in zip(accs[0::2], accs[1::2]):
                o.append(op(f"add {a}.4s, {a}.4s, {b}.4s", [a], [a, b], 2))
                nxt.append(a)
            accs = nxt
        o.append(op(f"addv s30, {accs[0]}.4s", ["v30"], [accs[0]], 4))
    o.append(op("fcvt s%df, h%d", ["%df"], ["%d"], 4))
    o.append(op("fmul s29, s%df, s%dy", ["v29"], ["%df", "%dy"], 4))
    o.append(op(f"add {{x}}, {{x}}, #{x_bytes}", ["x"], ["x"], 1))
    o.append(op("add {y}, {y}, #292", ["y"], ["y"], 1))
    o.append(op("subs {n}, {n}, #1", ["n", "flags"], ["n"], 1))


def block_start():
    return [op("ldur h%d, [{x}, #-2]", ["%d"], ["x"], 3),
            op("ldur s%dy, [{y}, #-4]", ["%dy"], ["y"], 3)]


def iq2xs_block(dot):
    """One IQ2_XS super-block: `{x}` at its qs (byte 2), `{y}` at the Q8_K block's qs. Per
    sub-block k: 4 u16 words (9-bit grid index, 7-bit sign field) at 8k, its scale byte at
    64 + k (low nibble: groups 0, 1; high: 2, 3)."""
    o = block_start()
    o.append(op("ldr {%gsc}, [{x}, #64]", ["%gsc"], ["x"], 3))
    for k in range(8):
        w = f"%gw{k}"
        o.append(op(f"ldr {{{w}}}, [{{x}}, #{8 * k}]", [w], ["x"], 3))
        gi = [f"%gi{k}_{l}" for l in range(4)]
        gj = [f"%gj{k}_{l}" for l in range(4)]
        o.append(op(f"and {{{gi[0]}}}, {{{w}}}, #0x1ff", [gi[0]], [w], 1))
        for l in range(1, 4):
            o.append(op(f"ubfx {{{gi[l]}}}, {{{w}}}, #{16 * l}, #9", [gi[l]], [w], 1))
        for l in range(3):
            o.append(op(f"ubfx {{{gj[l]}}}, {{{w}}}, #{16 * l + 9}, #7", [gj[l]], [w], 1))
        o.append(op(f"lsr {{{gj[3]}}}, {{{w}}}, #57", [gj[3]], [w], 1))
        sc = [f"%gs{k}_0", f"%gs{k}_1"]
        # 2s + 1 of each nibble: s << 1 with the bit below it, which the orr overwrites.
        if k == 0:
            o.append(op(f"ubfiz {{{sc[0]}}}, {{%gsc}}, #1, #4", [sc[0]], ["%gsc"], 1))
        else:
            o.append(op(f"ubfx {{{sc[0]}}}, {{%gsc}}, #{8 * k - 1}, #5", [sc[0]], ["%gsc"], 1))
        o.append(op(f"ubfx {{{sc[1]}}}, {{%gsc}}, #{8 * k + 3}, #5", [sc[1]], ["%gsc"], 1))
        for h in range(2):
            o.append(op(f"orr {{{sc[h]}:w}}, {{{sc[h]}:w}}, #1", [sc[h]], [sc[h]], 1))
        e = signed_grid(o, k, gi, gj, "grid", "signs")
        y = acts(o, k)
        halves(o, k, e, y, sc, dot, k == 0)
    block_end(o, dot, 74, ["%a0", "%a1"] if dot else ["%lo0", "%hi0", "%lo1", "%hi1"])
    return o


def iq2s_block(dot):
    """One IQ2_S super-block: `{x}` at its qs (byte 2), `{y}` at the Q8_K block's qs. Per
    sub-block k: 4 low index bytes at 4k, 4 sign bytes at 32 + 4k, the top 2 bits of index l
    in bits 2l.. of qh byte k (at 64), the scale byte at 72 + k. `{signs}` holds the bits
    1, 2, .., 128 at byte 32: each sign byte is spread over its group (`dup`) and tested."""
    o = block_start()
    o.append(op("ldr {%gqh}, [{x}, #64]", ["%gqh"], ["x"], 3))
    o.append(op("ldr {%gsc}, [{x}, #72]", ["%gsc"], ["x"], 3))
    o.append(op("ldr d%bits, [{signs}, #32]", ["%bits"], ["signs"], 3))
    for k in range(8):
        w = f"%gw{k}"
        o.append(op(f"ldr {{{w}:w}}, [{{x}}, #{4 * k}]", [w], ["x"], 3))
        gi = [f"%gi{k}_{l}" for l in range(4)]
        gt = [f"%gt{k}_{l}" for l in range(4)]
        for l in range(4):
            if l == 0:
                o.append(op(f"and {{{gi[l]}}}, {{{w}}}, #0xff", [gi[l]], [w], 1))
            else:
                o.append(op(f"ubfx {{{gi[l]}}}, {{{w}}}, #{8 * l}, #8", [gi[l]], [w], 1))
            o.append(op(f"ubfx {{{gt[l]}}}, {{%gqh}}, #{8 * k + 2 * l}, #2", [gt[l]], ["%gqh"], 1))
            o.append(op(f"orr {{{gi[l]}}}, {{{gi[l]}}}, {{{gt[l]}}}, lsl #8", [gi[l]], [gi[l], gt[l]], 1))
        sc = [f"%gs{k}_0", f"%gs{k}_1"]
        if k == 0:
            o.append(op(f"ubfiz {{{sc[0]}}}, {{%gsc}}, #1, #4", [sc[0]], ["%gsc"], 1))
        else:
            o.append(op(f"ubfx {{{sc[0]}}}, {{%gsc}}, #{8 * k - 1}, #5", [sc[0]], ["%gsc"], 1))
        o.append(op(f"ubfx {{{sc[1]}}}, {{%gsc}}, #{8 * k + 3}, #5", [sc[1]], ["%gsc"], 1))
        for h in range(2):
            o.append(op(f"orr {{{sc[h]}:w}}, {{{sc[h]}:w}}, #1", [sc[h]], [sc[h]], 1))
        sg = f"%sg{k}"
        o.append(op(f"ldr s{sg}, [{{x}}, #{32 + 4 * k}]", [sg], ["x"], 3))
        g = [f"%q_{k}_{l}" for l in range(4)]
        m = [f"%m_{k}_{l}" for l in range(4)]
        e = [f"%e_{k}_{l}" for l in range(4)]
        for l in range(4):
            o.append(op(f"ldr d{g[l]}, [{{grid}}, {{{gi[l]}}}, lsl #3]", [g[l]], ["grid", gi[l]], 3))
        for l in range(4):
            o.append(op(f"dup {m[l]}.8b, {sg}.b[{l}]", [m[l]], [sg], 2))
            o.append(op(f"cmtst {m[l]}.8b, {m[l]}.8b, %bits.8b", [m[l]], [m[l], "%bits"], 2))
        for l in range(4):
            o.append(op(f"eor {e[l]}.8b, {g[l]}.8b, {m[l]}.8b", [e[l]], [g[l], m[l]], 2))
            o.append(op(f"sub {e[l]}.8b, {e[l]}.8b, {m[l]}.8b", [e[l]], [e[l], m[l]], 2))
        y = acts(o, k)
        halves(o, k, e, y, sc, dot, k == 0)
    block_end(o, dot, 82, ["%a0", "%a1"] if dot else ["%lo0", "%hi0", "%lo1", "%hi1"])
    return o


def iq1_weights(o, k, gi, shifts, shl):
    """IQ1 groups as one signed weight 8g + e each (g: grid bytes -1, 0, 1 at `grid` + 8 *
    gi[l]; e: the bytes +1 or -1 of shifts[l], a vector name)."""
    g = [f"%q_{k}_{l}" for l in range(4)]
    e = [f"%e_{k}_{l}" for l in range(4)]
    for l in range(4):
        o.append(op(f"ldr d{g[l]}, [{{grid}}, {{{gi[l]}}}, lsl #3]", [g[l]], ["grid", gi[l]], 3))
    for l in range(4):
        o.append(op(f"shl {e[l]}.8b, {g[l]}.8b, #3", [e[l]], [g[l]], 2))
        o.append(op(f"add {e[l]}.8b, {e[l]}.8b, {shifts[l]}.8b", [e[l]], [e[l], shifts[l]], 2))
    return e


def one_scale(o, k, e, y, sc, dot, first):
    """Sub-block k's 4 groups times its 2s + 1 (GPR sc) into the accumulators (as IQ2_XXS)."""
    p0, p1, p = f"%p0_{k}", f"%p1_{k}", f"%p_{k}"
    v = f"%sc_{k}"
    if dot:
        o.append(op(f"movi {p0}.2s, #0", [p0], [], 1))
        o.append(op(f"movi {p1}.2s, #0", [p1], [], 1))
        o.append(op(f"sdot {p0}.2s, {e[0]}.8b, {y[0]}.8b", [p0], [p0, e[0], y[0]], 4))
        o.append(op(f"sdot {p1}.2s, {e[1]}.8b, {y[1]}.8b", [p1], [p1, e[1], y[1]], 4))
        o.append(op(f"sdot {p0}.2s, {e[2]}.8b, {y[2]}.8b", [p0], [p0, e[2], y[2]], 4))
        o.append(op(f"sdot {p1}.2s, {e[3]}.8b, {y[3]}.8b", [p1], [p1, e[3], y[3]], 4))
        o.append(op(f"add {p}.2s, {p0}.2s, {p1}.2s", [p], [p0, p1], 2))
        o.append(op(f"dup {v}.2s, {{{sc}:w}}", [v], [sc], 3))
        a = f"%a{k % 2}"
        if first:
            o.append(op(f"mul {a}.2s, {p}.2s, {v}.2s", [a], [p, v], 4))
        else:
            o.append(op(f"mla {a}.2s, {p}.2s, {v}.2s", [a], [a, p, v], 4))
    else:
        o.append(op(f"smull {p0}.8h, {e[0]}.8b, {y[0]}.8b", [p0], [e[0], y[0]], 4))
        o.append(op(f"smull {p1}.8h, {e[1]}.8b, {y[1]}.8b", [p1], [e[1], y[1]], 4))
        o.append(op(f"smlal {p0}.8h, {e[2]}.8b, {y[2]}.8b", [p0], [p0, e[2], y[2]], 4))
        o.append(op(f"smlal {p1}.8h, {e[3]}.8b, {y[3]}.8b", [p1], [p1, e[3], y[3]], 4))
        o.append(op(f"add {p}.8h, {p0}.8h, {p1}.8h", [p], [p0, p1], 2))
        o.append(op(f"dup {v}.8h, {{{sc}:w}}", [v], [sc], 3))
        lo, hi = f"%lo{k % 2}", f"%hi{k % 2}"
        ins = ("smull", "smull2") if first else ("smlal", "smlal2")
        rd = [] if first else [lo]
        o.append(op(f"{ins[0]} {lo}.4s, {p}.4h, {v}.4h", [lo], rd + [p, v], 4))
        rd = [] if first else [hi]
        o.append(op(f"{ins[1]} {hi}.4s, {p}.8h, {v}.8h", [hi], rd + [p, v], 4))


def iq1s_block(dot):
    """One IQ1_S super-block: `{x}` at its qs (byte 2), `{y}` at the Q8_K block's qs. Per
    sub-block k: 4 low index bytes at 4k, its u16 word at 32 + 2k (bits 3l.. the top 3 of
    index l, 12..14 the scale s, 15 the shift sign). The integer is S = 8 * sumi + sumi1 of
    the twin's two: sumi from the grid bytes (-1, 0, 1) times the activations (4 products
    per i16 lane), sumi1 = sum (2s + 1) * (+-1) * (the sub-block's two Q8_K block sums, as
    stored, widened to i32); the block value is then D * (S / 8), the twin's
    f32(sumi) + 0.125 * f32(sumi1) rounded once from the same exact value."""
    o = block_start()
    o.append(op("ldp {%gh0}, {%gh1}, [{x}, #32]", ["%gh0", "%gh1"], ["x"], 3))
    # sumi1, lanes of sub-blocks 0-3 and 4-7: ((h >> 11) & 14 | 1) ^ m - m, m = h >> 15 (arith.)
    o += [op("ldr q%hq, [{x}, #32]", ["%hq"], ["x"], 3),
          op("ldp q%b0, q%b1, [{y}, #256]", ["%b0", "%b1"], ["y"], 3),
          op("movi %c14.8h, #14", ["%c14"], [], 1),
          op("ushr %ls.8h, %hq.8h, #11", ["%ls"], ["%hq"], 2),
          op("sshr %sg.8h, %hq.8h, #15", ["%sg"], ["%hq"], 2),
          op("and %ls.16b, %ls.16b, %c14.16b", ["%ls"], ["%ls", "%c14"], 2),
          op("orr %ls.8h, #1", ["%ls"], ["%ls"], 2),
          op("eor %ls.16b, %ls.16b, %sg.16b", ["%ls"], ["%ls", "%sg"], 2),
          op("sub %ls.8h, %ls.8h, %sg.8h", ["%ls"], ["%ls", "%sg"], 2),
          op("saddlp %b0.4s, %b0.8h", ["%b0"], ["%b0"], 3),
          op("saddlp %b1.4s, %b1.8h", ["%b1"], ["%b1"], 3),
          op("sxtl %f0.4s, %ls.4h", ["%f0"], ["%ls"], 2),
          op("sxtl2 %f1.4s, %ls.8h", ["%f1"], ["%ls"], 2),
          op("mul %s1.4s, %f0.4s, %b0.4s", ["%s1"], ["%f0", "%b0"], 4),
          op("mla %s1.4s, %f1.4s, %b1.4s", ["%s1"], ["%s1", "%f1", "%b1"], 4)]
    for k in range(8):
        h, base = f"%gh{k // 4}", 16 * (k % 4)
        w = f"%gw{k}"
        o.append(op(f"ldr {{{w}:w}}, [{{x}}, #{4 * k}]", [w], ["x"], 3))
        gi = [f"%gi{k}_{l}" for l in range(4)]
        gt = [f"%gt{k}_{l}" for l in range(4)]
        for l in range(4):
            if l == 0:
                o.append(op(f"and {{{gi[l]}}}, {{{w}}}, #0xff", [gi[l]], [w], 1))
            else:
                o.append(op(f"ubfx {{{gi[l]}}}, {{{w}}}, #{8 * l}, #8", [gi[l]], [w], 1))
            o.append(op(f"ubfx {{{gt[l]}}}, {{{h}}}, #{base + 3 * l}, #3", [gt[l]], [h], 1))
            o.append(op(f"orr {{{gi[l]}}}, {{{gi[l]}}}, {{{gt[l]}}}, lsl #8", [gi[l]], [gi[l], gt[l]], 1))
        sc = f"%gs{k}"
        # 2s + 1 from bits 11..14 (s << 1 and index 3's top bit, which the orr overwrites).
        o.append(op(f"ubfx {{{sc}}}, {{{h}}}, #{base + 11}, #4", [sc], [h], 1))
        o.append(op(f"orr {{{sc}:w}}, {{{sc}:w}}, #1", [sc], [sc], 1))
        g = [f"%q_{k}_{l}" for l in range(4)]
        for l in range(4):
            o.append(op(f"ldr d{g[l]}, [{{grid}}, {{{gi[l]}}}, lsl #3]", [g[l]], ["grid", gi[l]], 3))
        y = acts(o, k)
        one_scale(o, k, g, y, sc, dot, k < 2)
    if dot:
        o += [op("add %a0.2s, %a0.2s, %a1.2s", ["%a0"], ["%a0", "%a1"], 2),
              op("shl %a0.2s, %a0.2s, #3", ["%a0"], ["%a0"], 2),
              # the .2s ops left the top lanes zero
              op("add %s1.4s, %s1.4s, %a0.4s", ["%s1"], ["%s1", "%a0"], 2)]
    else:
        o += [op("add %lo0.4s, %lo0.4s, %hi0.4s", ["%lo0"], ["%lo0", "%hi0"], 2),
              op("add %lo1.4s, %lo1.4s, %hi1.4s", ["%lo1"], ["%lo1", "%hi1"], 2),
              op("add %lo0.4s, %lo0.4s, %lo1.4s", ["%lo0"], ["%lo0", "%lo1"], 2),
              op("shl %lo0.4s, %lo0.4s, #3", ["%lo0"], ["%lo0"], 2),
              op("add %s1.4s, %s1.4s, %lo0.4s", ["%s1"], ["%s1", "%lo0"], 2)]
    block_end(o, False, 50, ["%s1"])
    return o


def iq1m_block(dot):
    """One IQ1_M super-block: `{x}` at its byte 0, `{y}` at the Q8_K block's qs. Per sub-block
    k: 4 low index bytes at 4k, a u16 at 32 + 2k (nibble l: the top 3 bits of index l and
    group l's shift sign), 3-bit scales per half in the u64 at 48 (word k / 2, bits 6 (k % 2)
    and + 3), whose 4 top nibbles are the f16 d. S = 8 * sumi1 + sumi2 as for IQ1_S."""
    o = [op("ldur s%dy, [{y}, #-4]", ["%dy"], ["y"], 3),
         op("ldr {%gsc}, [{x}, #48]", ["%gsc"], ["x"], 3),
         op("ldp {%gh0}, {%gh1}, [{x}, #32]", ["%gh0", "%gh1"], ["x"], 3)]
    # d: the top nibbles of the 4 scale words, bits 12, 28, 44 and 60.
    o.append(op("ubfx {%gd}, {%gsc}, #12, #4", ["%gd"], ["%gsc"], 1))
    for j in range(1, 4):
        t = f"%gdt{j}"
        o.append(op(f"ubfx {{{t}}}, {{%gsc}}, #{12 + 16 * j}, #4", [t], ["%gsc"], 1))
        o.append(op(f"orr {{%gd}}, {{%gd}}, {{{t}}}, lsl #{4 * j}", ["%gd"], ["%gd", t], 1))
    o.append(op("fmov s%d, {%gd:w}", ["%d"], ["%gd"], 3))
    for k in range(8):
        h, base = f"%gh{k // 4}", 16 * (k % 4)
        w = f"%gw{k}"
        o.append(op(f"ldr {{{w}:w}}, [{{x}}, #{4 * k}]", [w], ["x"], 3))
        gi = [f"%gi{k}_{l}" for l in range(4)]
        gt = [f"%gt{k}_{l}" for l in range(4)]
        ge = [f"%ge{k}_{l}" for l in range(4)]
        ev = [f"%ev{k}_{l}" for l in range(4)]
        for l in range(4):
            if l == 0:
                o.append(op(f"and {{{gi[l]}}}, {{{w}}}, #0xff", [gi[l]], [w], 1))
            else:
                o.append(op(f"ubfx {{{gi[l]}}}, {{{w}}}, #{8 * l}, #8", [gi[l]], [w], 1))
            o.append(op(f"ubfx {{{gt[l]}}}, {{{h}}}, #{base + 4 * l}, #3", [gt[l]], [h], 1))
            o.append(op(f"orr {{{gi[l]}}}, {{{gi[l]}}}, {{{gt[l]}}}, lsl #8", [gi[l]], [gi[l], gt[l]], 1))
            o.append(op(f"ubfx {{{ge[l]}}}, {{{h}}}, #{base + 4 * l + 3}, #1", [ge[l]], [h], 1))
            o.append(op(f"ldr d{ev[l]}, [{{signs}}, {{{ge[l]}}}, lsl #3]", [ev[l]], ["signs", ge[l]], 3))
        sc = [f"%gs{k}_0", f"%gs{k}_1"]
        pos = 16 * (k // 2) + 6 * (k % 2)
        if pos == 0:
            o.append(op(f"ubfiz {{{sc[0]}}}, {{%gsc}}, #1, #3", [sc[0]], ["%gsc"], 1))
        else:
            o.append(op(f"ubfx {{{sc[0]}}}, {{%gsc}}, #{pos - 1}, #4", [sc[0]], ["%gsc"], 1))
        o.append(op(f"ubfx {{{sc[1]}}}, {{%gsc}}, #{pos + 2}, #4", [sc[1]], ["%gsc"], 1))
        for hh in range(2):
            o.append(op(f"orr {{{sc[hh]}:w}}, {{{sc[hh]}:w}}, #1", [sc[hh]], [sc[hh]], 1))
        e = iq1_weights(o, k, gi, ev, 3)
        y = acts(o, k)
        halves(o, k, e, y, sc, dot, k == 0)
    block_end(o, dot, 56, ["%a0", "%a1"] if dot else ["%lo0", "%hi0", "%lo1", "%hi1"])
    return o


BLOCKS = {"iq2xxs": iq2xxs_block, "iq2xs": iq2xs_block, "iq2s": iq2s_block,
          "iq1s": iq1s_block, "iq1m": iq1m_block}
# IQ1_S and IQ1_M: the integer is 8 times the twin's sum (see iq1s_block).
FRAC = {"iq1s": 3, "iq1m": 3}
# (kind, dotprod) -> the live-register limits (NEON, general-purpose) of `schedule_virtual`:
# the best of `sweep` on the A55 and A53.
LIVE = {("iq2xxs", False): (18, 10), ("iq2xxs", True): (16, 6),
        ("iq2xs", False): (12, 4), ("iq2xs", True): (6, 6),
        ("iq2s", False): (6, 6), ("iq2s", True): (6, 4),
        ("iq1s", False): (6, 8), ("iq1s", True): (12, 4),
        ("iq1m", False): (12, 4), ("iq1m", True): (6, 4)}


def body(kind, dot, live=None):
    n_v, n_g = live or LIVE[(kind, dot)]
    ops = float_tail(FRAC.get(kind, 0)) + BLOCKS[kind](dot)
    return schedule(allocate(schedule_virtual(ops, n_v, n_g), VPOOL, GPOOL)) + ["b.ne 2b"]


def emit(lines):
    return "\n".join(f'                "{l}",' for l in lines)


def mca_text(lines):
    sub = {"{x}": "x0", "{y}": "x1", "{n}": "x2", "{grid}": "x3", "{signs}": "x4", "2b": ".Lloop"}
    out = []
    for l in lines:
        for a, b in sub.items():
            l = l.replace(a, b)
        l = re.sub(r"\{g(\d+)(:w)?\}", lambda m: ("w" if m.group(2) else "x") + str(5 + int(m.group(1))), l)
        out.append("  " + l)
    return ".Lloop:\n" + "\n".join(out) + "\n"


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "emit":
        print(emit(body(sys.argv[2], sys.argv[3] == "dot")))
        return
    if len(sys.argv) >= 2 and sys.argv[1] in ("mca", "sweep"):
        for kind in (sys.argv[2:] or BLOCKS):
            for face in ["neon", "dot"]:
                cpus = CPUS if face == "neon" else CPUS[:1]
                if sys.argv[1] == "sweep":
                    for n_v in range(6, 30, 3):
                        for n_g in range(4, 17, 2):
                            try:
                                text = mca_text(body(kind, face == "dot", (n_v, n_g)))
                            except SystemExit:
                                continue
                            print(kind, face, n_v, n_g, [mca_cycles(text, c) for c in cpus])
                    continue
                if (kind, face == "dot") not in LIVE:
                    continue
                text = mca_text(body(kind, face == "dot"))
                print(f"{kind} {face:5}" + "".join(f"{mca_cycles(text, c):>10.1f}" for c in cpus))
        return
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
