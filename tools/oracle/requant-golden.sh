#!/usr/bin/env bash
# Writes tests/golden/qwen2.5-coder-0.5b/requant.json: the sha256 of the tensor data that
# llama-quantize b11434 writes when it requantizes Qwen2.5-Coder-0.5B (Q4_K_M) with --pure to
# each type `smolrun gguf requant` must match byte for byte in CI (cli/tests/requant.rs). The
# low-bit types have theirs in tests/golden/<model>-<type>/model.json (tools/oracle/regen.sh).
# IQ4_NL and IQ4_XS take llama-quantize about 9 minutes each on 2 cores (a 15-scale search per block).
# Needs: tools/oracle/build.sh, then `cmake --build $SMOLRUN_ORACLE/build --target llama-quantize`.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
oracle=${SMOLRUN_ORACLE:-$HOME/.cache/smolrun/oracle}
models=${SMOLRUN_MODELS:-$HOME/.cache/smolrun/models}
quantize=$oracle/build/bin/llama-quantize
model=$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
[[ -x $quantize ]] || { echo "requant-golden: $quantize is missing (see the header)" >&2; exit 1; }
[[ -f $model ]] || { echo "requant-golden: $model is missing: tools/fetch-models.sh" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
entries=()
for ty in Q8_0 Q4_K IQ4_NL IQ4_XS; do
  "$quantize" --allow-requantize --pure "$model" "$work/$ty.gguf" "$ty" 2 >"$work/$ty.log" 2>&1 \
    || { cat "$work/$ty.log" >&2; exit 1; }
  read -r offset sha < <(python3 "$repo/tools/oracle/tensor_data_sha256.py" "$work/$ty.gguf")
  entries+=("\"$ty\": {\"tensor_data_sha256\": \"$sha\", \"tensor_data_offset\": $offset}")
  rm -f "$work/$ty.gguf"
done
out=$repo/tests/golden/qwen2.5-coder-0.5b/requant.json
{
  echo "{"
  echo " \"input\": \"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf\","
  echo " \"made_by\": \"llama-quantize --allow-requantize --pure INPUT OUT TYPE 2 (b11434)\","
  echo " \"types\": {"
  for i in "${!entries[@]}"; do
    sep=,; (( i == ${#entries[@]} - 1 )) && sep=
    echo "  ${entries[$i]}$sep"
  done
  echo " }"
  echo "}"
} >"$out"
echo "requant-golden: wrote $out"
