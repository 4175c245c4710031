#!/usr/bin/env python3
"""Writes tests/golden/dequant-<model>.json: for every tensor of a real model, the sha256 of its
dequantized values (little-endian f32 bytes, in file order) as computed by the independent
`gguf` Python package (gguf.quants.dequantize, numpy). tests/tests/dequant.rs dequantizes the
same tensors with core::quant and compares the digests, so the committed files hold checksums,
never tensor data.

    tools/quant-golden.py [gemma3-270m] [qwen2.5-coder-0.5b] [qwen2.5-coder-1.5b]
    tools/quant-golden.py --check-blocks

--check-blocks cross-checks tests/golden/quant-blocks.json (written by tools/oracle/ggml_ref.sh quant_ref
from libggml) with gguf-py: every block case of a type gguf-py can decode must dequantize to
the same bits, so the two references agree with each other before smolrun is held to them.

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


def check_blocks():
    path = os.path.join(ROOT, "tests", "golden", "quant-blocks.json")
    with open(path) as f:
        golden = json.load(f)
    bad = 0
    for w in golden["weights"]:
        name = w["type"].upper()
        qt = getattr(T, name, None)
        results = []
        for c in w["cases"]:
            raw = np.frombuffer(bytes.fromhex(c["w"]), dtype=np.uint8)
            want = np.frombuffer(bytes.fromhex(c["dequant"]), dtype="<u4")
            try:
                got = np.asarray(dequantize(raw, qt), dtype="<f4").reshape(-1).view("<u4")
            except (NotImplementedError, KeyError, TypeError, AttributeError):
                results = None
                break
            differing = int((got != want).sum())
            bad += differing
            results.append(f"{c['case']}: {'same' if differing == 0 else f'{differing} differ'}")
        print(f"{name}: " + ("gguf-py cannot dequantize it" if results is None else ", ".join(results)))
    if bad:
        sys.exit(f"quant-golden: gguf-py and ggml disagree on {bad} values")


def main(argv):
    if argv == ["--check-blocks"]:
        check_blocks()
        return
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
