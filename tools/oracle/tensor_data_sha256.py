#!/usr/bin/env python3
"""Prints a GGUF file's tensor data offset and the sha256 of everything from there to the end:
the bytes two writers must agree on when their headers may differ (tests/tests/golden_files.rs,
tools/oracle/regen.sh). Reads the header itself: the gguf package rejects type ids it does not
know yet (0.19.0 has no Q2_0).
    tools/oracle/tensor_data_sha256.py FILE"""
import hashlib
import struct
import sys

SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


def data_offset(f):
    def u32():
        return struct.unpack("<I", f.read(4))[0]

    def u64():
        return struct.unpack("<Q", f.read(8))[0]

    def string():
        return f.read(u64())

    def skip_value(ty):
        if ty in SCALAR:
            f.read(SCALAR[ty])
        elif ty == STRING:
            string()
        elif ty == ARRAY:
            inner, n = u32(), u64()
            if inner in SCALAR:
                f.read(SCALAR[inner] * n)
            else:
                for _ in range(n):
                    skip_value(inner)
        else:
            sys.exit(f"unknown GGUF value type {ty}")

    if f.read(4) != b"GGUF":
        sys.exit("not a GGUF file")
    version, n_tensors, n_kv = u32(), u64(), u64()
    alignment = 32
    for _ in range(n_kv):
        key, ty = string(), u32()
        if key == b"general.alignment" and ty == 4:
            alignment = u32()
        else:
            skip_value(ty)
    for _ in range(n_tensors):
        string()
        n_dims = u32()
        f.read(8 * n_dims + 4 + 8)
    pos = f.tell()
    return (pos + alignment - 1) // alignment * alignment


with open(sys.argv[1], "rb") as f:
    off = data_offset(f)
    f.seek(off)
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(off, h.hexdigest())
