#!/usr/bin/env bash
# Guest instructions per generated token of `smolrun run` under qemu-user, on the two emulated
# CPUs of tools/test-aarch64.sh: cortex-a76 (dotprod: the A55's kernels, x4 repacked rows) and
# cortex-a53 (ARMv8.0: the A7's and A53's kernels). qemu does not time, but it counts: the
# TCG plugin tools/qemu-insn/insn.c adds up the instructions executed. Two runs, -n N1 and
# -n N2 tokens, on one thread, greedy; (count(N2) - count(N1)) / (N2 - N1) leaves out loading
# and the prompt.
#
#   tools/insn-per-token.sh [MODEL] [N1] [N2]
#
# MODEL defaults to Qwen2.5-Coder-0.5B Q4_K_M (tools/fetch-models.sh). Needs gcc,
# gcc-aarch64-linux-gnu, qemu-user and the rustup target aarch64-unknown-linux-gnu.
set -euo pipefail
cd "$(dirname "$0")/.."

model=${1:-$HOME/.cache/smolrun/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}
n1=${2:-4}
n2=${3:-12}
target=aarch64-unknown-linux-gnu
[ -f "$model" ] || { echo "no model at $model: run tools/fetch-models.sh or pass a GGUF path"; exit 1; }

plugin=target/qemu-insn/libinsn.so
mkdir -p "$(dirname "$plugin")"
gcc -shared -fPIC -O2 -o "$plugin" tools/qemu-insn/insn.c
CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    cargo build -q --release --target "$target" -p smolrun
bin=target/$target/release/smolrun

count() { # cpu n -> instructions
    local log
    log=$(mktemp)
    qemu-aarch64 -cpu "$1" -L /usr/aarch64-linux-gnu -plugin "$plugin" -d plugin -D "$log" \
        "$bin" run -m "$model" -p "The capital of France is" -n "$2" -t 1 --temp 0 \
        >/dev/null 2>&1
    sed -n 's/^insns: //p' "$log"
    rm -f "$log"
}

printf '%-12s %16s %16s %18s\n' cpu "insns (-n $n1)" "insns (-n $n2)" "insns per token"
for cpu in cortex-a76 cortex-a53; do
    a=$(count "$cpu" "$n1")
    b=$(count "$cpu" "$n2")
    printf '%-12s %16s %16s %18s\n' "$cpu" "$a" "$b" "$(((b - a) / (n2 - n1)))"
done
