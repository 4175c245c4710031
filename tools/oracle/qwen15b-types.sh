#!/usr/bin/env bash
# Qwen2.5-Coder-1.5B in the tensor types issue #33 measures, made as published files are made:
# llama-quantize b11434 --allow-requantize (from the Q4_K_M file, the only 1.5B on the package
# registries) to each --pure type and to the ordinary mixes; the grid i-quants under an importance
# matrix that llama-imatrix makes on tools/head-corpus (English prose and code, 64 chunks of 512,
# --process-output: the head's entry too).
# Two matrices made the files at hand: the first (sha256 01b48be3..., no --process-output, 196
# entries) made the Q3_K_M, Q3_K_S, Q5_K_M, IQ4_XS, IQ3_XXS, IQ2_XXS mixes and IQ4_NL, IQ4_XS,
# IQ3_XXS :pure, whose head llama-quantize therefore quantized without importance data; this one
# (sha256 30bbc914..., 197 entries) made the rest. Its 196 layer entries are the first's, bit for
# bit (llama-imatrix is deterministic here), so only the head differs. Each golden's model.json
# records its file's matrix (imatrix_sha256). Remake a file of the first kind (delete it) and its
# goldens together, or neither.
#   tools/oracle/qwen15b-types.sh [TYPE ...]   (default: every type below)
# Writes $SMOLRUN_MODELS/qwen2.5-coder-1.5b-<type>.gguf (lower case; -pure for the --pure ones).
# Takes ~20 min for the importance matrix (21 on 2 shared cores) and up to ~20 per grid type
# (IQ2_XXS :pure: 17.5, the grid searches). By hand (bench figures), not in CI.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
models=${SMOLRUN_MODELS:-$HOME/.cache/smolrun/models}
bin=${SMOLRUN_ORACLE:-$HOME/.cache/smolrun/oracle}/build/bin
src=$models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
[[ -f $src ]] || "$repo/tools/fetch-models.sh" qwen2.5-coder-1.5b
[[ -x $bin/llama-quantize ]] || "$repo/tools/oracle/build.sh"
mixes=(Q3_K_M Q3_K_S Q5_K_M IQ4_XS IQ3_XXS IQ3_M IQ2_XXS IQ2_M)
pure=(IQ4_NL IQ4_XS IQ3_XXS IQ3_S IQ2_XXS IQ2_XS IQ2_S IQ1_S IQ1_M Q3_K Q5_K)
want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=("${mixes[@]}" "${pure[@]/%/:pure}")
imatrix=$models/qwen2.5-coder-1.5b.imatrix.gguf
if [[ ! -f $imatrix ]]; then
  calib=$(mktemp); trap 'rm -f "$calib"' EXIT
  cat "$repo"/tools/head-corpus/en-prose.txt "$repo"/tools/head-corpus/code-python.txt \
      "$repo"/tools/head-corpus/code-rust.txt > "$calib"
  "$bin/llama-imatrix" -m "$src" -f "$calib" -o "$imatrix.tmp" -c 512 --chunks 64 -t 2 \
    --process-output >/dev/null 2>&1
  mv "$imatrix.tmp" "$imatrix"
fi
for w in "${want[@]}"; do
  t=${w%:pure}; args=(--allow-requantize --imatrix "$imatrix")
  name=$(echo "$t" | tr 'A-Z' 'a-z')
  # --pure: every matrix the type, the token embedding Q8_0, which llama-quantize needs for the
  # grid types (an embedding has no importance data). This file's head is untied (output.weight):
  # --process-output gives the importance matrix an entry for it (197 entries, the 28 layers' 7
  # matrices and the head), which IQ2_XXS, IQ2_XS, IQ1_S and IQ1_M :pure need (llama-quantize
  # aborts on GGML_ASSERT(imatrix != NULL) without one).
  if [[ $w == *:pure ]]; then args+=(--pure --token-embedding-type q8_0); name+=-pure; fi
  out=$models/qwen2.5-coder-1.5b-$name.gguf
  if [[ -f $out ]]; then echo "qwen15b-types: $out present"; continue; fi
  "$bin/llama-quantize" "${args[@]}" "$src" "$out.tmp" "$t" 2 >/dev/null 2>&1
  mv "$out.tmp" "$out"
  echo "qwen15b-types: $out ($(($(stat -c %s "$out") / 1000000)) MB)"
done
