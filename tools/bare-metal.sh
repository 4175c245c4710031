#!/usr/bin/env bash
# Runs a model with no operating system: builds examples/bare-metal (aarch64-unknown-none) with
# MODEL's GGUF bytes in the image (include_bytes!), boots it under qemu-system-aarch64 -M virt,
# and prints the generated text on stdout, as `smolrun run -m MODEL -p PROMPT -n N --temp 0`
# does (the boot log, the arena's plan and the static region's peak go to stderr).
#
#   tools/bare-metal.sh [--cpu cortex-a53|cortex-a76] [--kernels scalar] [--compare]
#                       [--hosted x86|aarch64] MODEL PROMPT N
#
#   --cpu      the emulated core (default cortex-a76: dotprod; cortex-a53: ARMv8.0, no dotprod,
#              so an sdot reached by mistake stops the machine with "undefined instruction")
#   --kernels scalar   the scalar reference kernels instead of the CPU's (compared with
#              SMOLRUN_KERNELS=scalar smolrun run): bit for bit the same arithmetic on every
#              machine, where the NEON and x86 faces sum in different orders, which can change a
#              greedy token of a model with activation outliers (Gemma 3, see
#              tools/cross/qemu-greedy.sh)
#   --compare  also run the hosted CLI on the same file and fail unless its text is the same
#   --hosted   which hosted CLI: x86 (default: target/release/smolrun, built if missing), or
#              aarch64 (the static musl build of tools/cross/build.sh under qemu-aarch64 with the
#              same -cpu: the same kernels, so the same bits, whatever the model)
#   MODEL      a .gguf path, or a name under ${SMOLRUN_MODELS:-~/.cache/smolrun/models}
#              (gemma3-270m, qwen2.5-coder-0.5b)
#
# Installs what it needs on Debian (the rustup target, qemu-system-arm). The static region (the
# loader's heap and the run's arena) is sized from the model: 64 MB + 2 x the file (the
# tokenizer's tables and a repacked copy of the weights); SMOLRUN_BM_MEMORY_MB overrides it.
set -euo pipefail
cd "$(dirname "$0")/.."

cpu=cortex-a76
kernels=native
compare=0
hosted=x86
while [[ $# -gt 0 && $1 == --* ]]; do
    case $1 in
        --cpu) cpu=$2; shift 2 ;;
        --kernels) kernels=$2; shift 2 ;;
        --compare) compare=1; shift ;;
        --hosted) hosted=$2; compare=1; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
if [[ $# -ne 3 ]]; then
    sed -n '2,/^set -e/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
model=$1 prompt=$2 n=$3

models=${SMOLRUN_MODELS:-$HOME/.cache/smolrun/models}
case $model in
    gemma3-270m) model=$models/gemma-3-270m-q4_k_m.gguf ;;
    qwen2.5-coder-0.5b) model=$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf ;;
esac
[[ -f $model ]] || { [[ -f $models/$model ]] && model=$models/$model; }
[[ -f $model ]] || { echo "FAILED: no model file $model" >&2; exit 1; }
model=$(realpath "$model")

target=aarch64-unknown-none
if ! rustup target list --installed | grep -qx "$target"; then
    echo "installing the $target target (rustup target add $target)" >&2
    rustup target add "$target" >&2
fi
if ! command -v qemu-system-aarch64 >/dev/null; then
    echo "installing qemu-system-arm (apt-get)" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq >&2
    $sudo apt-get install -y -qq qemu-system-arm >&2
fi

model_mb=$(( ($(stat -c %s "$model") + (1 << 20) - 1) >> 20 ))
memory_mb=${SMOLRUN_BM_MEMORY_MB:-$((64 + 2 * model_mb))}
# RAM: the image (code, the model) from 0x4008_0000, the 8 MB stack, the static region, slack.
ram_mb=$((model_mb + memory_mb + 8 + 64))

echo "== building the image: $(basename "$model") (${model_mb} MB), static region ${memory_mb} MB" >&2
start=$SECONDS
(
    cd examples/bare-metal
    SMOLRUN_BM_MODEL=$model SMOLRUN_BM_PROMPT=$prompt SMOLRUN_BM_N=$n \
        SMOLRUN_BM_MEMORY_MB=$memory_mb SMOLRUN_BM_KERNELS=$kernels cargo build --release -q
) >&2
image=examples/bare-metal/target/$target/release/smolrun-bare-metal
echo "   built in $((SECONDS - start)) s: $image ($(( $(stat -c %s "$image") >> 20 )) MB)" >&2

echo "== qemu-system-aarch64 -M virt -cpu $cpu -m ${ram_mb}M" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS
status=0
timeout "${SMOLRUN_BM_TIMEOUT:-7200}" qemu-system-aarch64 -M virt -cpu "$cpu" -m "${ram_mb}M" \
    -display none -monitor none -serial stdio \
    -semihosting-config enable=on,target=native \
    -kernel "$image" >"$log" || status=$?
# Everything but the text, to stderr.
python3 - "$log" >&2 <<'PY'
import sys
log = open(sys.argv[1], "rb").read()
head, sep, rest = log.partition(b"--- text ---\n")
_, sep2, tail = rest.partition(b"\n--- end ---\n")
sys.stdout.buffer.write(head + (tail if sep2 else rest))
PY
echo "   ran in $((SECONDS - start)) s (qemu exit status $status)" >&2
if [[ $status -ne 0 ]]; then
    echo "FAILED: the bare-metal run ended with status $status" >&2
    exit 1
fi
text=$(mktemp)
trap 'rm -f "$log" "$text"' EXIT
python3 - "$log" "$text" <<'PY'
import sys
log = open(sys.argv[1], "rb").read()
_, sep, rest = log.partition(b"--- text ---\n")
body, sep2, _ = rest.partition(b"\n--- end ---\n")
if not (sep and sep2):
    sys.exit("FAILED: no generated text in the output")
open(sys.argv[2], "wb").write(body + b"\n")
PY
cat "$text"

if [[ $compare -eq 1 ]]; then
    case $hosted in
        x86)
            cli=(target/release/smolrun)
            [[ -x ${cli[0]} ]] || cargo build --release -q -p smolrun >&2
            ;;
        aarch64)
            cli=(target/aarch64-unknown-linux-musl/dist/smolrun)
            [[ -x ${cli[0]} ]] || tools/cross/build.sh aarch64-unknown-linux-musl >&2
            cli=(qemu-aarch64 -cpu "$cpu" "${cli[@]}")
            ;;
        *) echo "--hosted $hosted: expected x86 or aarch64" >&2; exit 2 ;;
    esac
    out=$(mktemp)
    trap 'rm -f "$log" "$text" "$out"' EXIT
    if [[ $kernels == scalar ]]; then
        SMOLRUN_KERNELS=scalar "${cli[@]}" run -m "$model" -p "$prompt" -n "$n" --temp 0 >"$out" 2>/dev/null
    else
        "${cli[@]}" run -m "$model" -p "$prompt" -n "$n" --temp 0 >"$out" 2>/dev/null
    fi
    what="$cpu, $kernels kernels, against the $hosted smolrun run"
    if cmp -s "$text" "$out"; then
        echo "ok: the bare-metal text equals the hosted one ($what)" >&2
    else
        echo "FAILED: the bare-metal text differs from the hosted one ($what):" >&2
        echo "  bare metal: $(head -c 400 "$text")" >&2
        echo "  hosted:     $(head -c 400 "$out")" >&2
        exit 1
    fi
fi
