#!/usr/bin/env bash
# Compiles tools/oracle/gelu_table.c against the reference engine's ggml build and writes
# tests/golden/gelu-f16-table.bin (the table llama.cpp's CPU backend computes GELU with).
# Needs the build from tools/oracle/build.sh.
#   tools/oracle/gelu_table.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
oracle=${SMOLRUN_ORACLE:-$HOME/.cache/smolrun/oracle}
lib=$oracle/build/bin
[[ -f $lib/libggml-base.so && -f $lib/libggml-cpu.so ]] || {
  echo "gelu_table: no ggml libraries in $lib; build the reference engine first" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/gelu_table.XXXXXX")
trap 'rm -rf "$work"' EXIT
cc -O2 -std=gnu11 -Wall -Wextra "$here/gelu_table.c" -o "$work/gelu_table" \
  -L "$lib" -Wl,-rpath,"$lib" -lggml-cpu -lggml-base -lm
"$work/gelu_table" "$root/tests/golden/gelu-f16-table.bin"
echo "gelu_table: wrote tests/golden/gelu-f16-table.bin ($(wc -c < "$root/tests/golden/gelu-f16-table.bin") bytes)"
