#!/usr/bin/env python3
"""Writes tests/golden/dequant-<model>.json: for every tensor of a real model, the sha256 of its
dequantized values (little-endian f32 bytes, in file order) as computed by the independent
`gguf` Python package (gguf.quants.dequantize, numpy). tests/tests/dequant.rs dequantizes the
same tensors with core::quant and compares the digests, so the committed files hold checksums,
never tensor data.

    tools/quant-golden.py [gemma3-270m] [qwen2.5-coder-0.5b] [qwen2.5-coder-1.5b]

Models are read from $SMOLRUN_MODELS (default ~/.cache/smolrun/models); run
tools/fetch-models.sh first. With no argument, every model that is present is done.
"""
import hashlib
import importlib.metadata
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

MODELS = {
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
    "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
}

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Rows dequantized per numpy call: bounds the temporaries numpy builds for big embeddings.
ROWS_PER_CHUNK = 4096


def tensor_digest(t) -> str:
    data = t.data
    h = hashlib.sha256()
    if t.tensor_type in (T.F32, T.F16, T.BF16):
        flat = np.ascontiguousarray(data).reshape(-1)
        if t.tensor_type == T.F32:
            h.update(flat.astype("<f4", copy=False).tobytes())
        else:
            raw = flat.view(np.uint8)
            for i in range(0, raw.size, ROWS_PER_CHUNK * 4096):
                h.update(dequantize(raw[i:i + ROWS_PER_CHUNK * 4096], t.tensor_type).astype("<f4").tobytes())
        return h.hexdigest()
    # Quantized: data is (rows, bytes per row) of uint8.
    rows = data.reshape(-1, data.shape[-1])
    for i in range(0, rows.shape[0], ROWS_PER_CHUNK):
        part = dequantize(rows[i:i + ROWS_PER_CHUNK], t.tensor_type)
        h.update(np.ascontiguousarray(part, dtype="<f4").tobytes())
    return h.hexdigest()


def main(argv):
    models_dir = os.environ.get("SMOLRUN_MODELS", os.path.expanduser("~/.cache/smolrun/models"))
    names = argv or list(MODELS)
    for name in names:
        path = os.path.join(models_dir, MODELS[name])
        if not os.path.exists(path):
            if argv:
                sys.exit(f"quant-golden: {path} is absent; run tools/fetch-models.sh {name}")
            print(f"quant-golden: skipping {name}: {path} is absent")
            continue
        reader = gguf.GGUFReader(path)
        tensors = {}
        for t in reader.tensors:
            tensors[t.name] = {
                "type": t.tensor_type.name,
                "n_elements": int(t.n_elements),
                "sha256": tensor_digest(t),
            }
        out = os.path.join(ROOT, "tests", "golden", f"dequant-{name}.json")
        with open(out, "w") as f:
            json.dump({"model": name, "file": MODELS[name],
                       "producer": f"gguf {importlib.metadata.version('gguf')} gguf.quants.dequantize, "
                                   f"numpy {np.__version__}",
                       "tensors": tensors}, f, indent=1)
            f.write("\n")
        print(f"quant-golden: {name}: {len(tensors)} tensors -> {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
