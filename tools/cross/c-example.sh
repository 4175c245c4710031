#!/usr/bin/env bash
# The C example (examples/c/main.c linked with libsmolrun_ffi.a, built by
# tools/build-c-example.sh) must print exactly what `smolrun run -m MODEL -p PROMPT -n N
# --temp 0` prints on x86-64, stdout byte for byte (the text and its final newline):
#   - built for the host (gcc, glibc) and run here;
#   - built for aarch64-unknown-linux-musl (static) and run under qemu-aarch64 -cpu cortex-a53.
# The prompt is tools/cross/qemu-greedy.sh's PROMPT_NATIVE: that script asserts that the CLI's
# own aarch64 build writes the x86-64 text for it under qemu (the NEON kernels pick the same
# tokens), so the C program on aarch64 must write it too. N is small: qemu is slow.
# Needs: the x86 CLI (cargo build --release -p smolrun) and Gemma 3 270M.
set -euo pipefail
cd "$(dirname "$0")/../.."

models=${SMOLRUN_MODELS:-$HOME/.cache/smolrun/models}
model=$models/gemma-3-270m-q4_k_m.gguf
cli=target/release/smolrun
prompt=${PROMPT_NATIVE:-The quick brown fox}
n=8
for file in "$model" "$cli"; do
    [ -e "$file" ] || { echo "FAILED: $file is missing (see the header of $0)" >&2; exit 1; }
done

x86=$(tools/build-c-example.sh)
arm64=$(tools/build-c-example.sh aarch64-unknown-linux-musl)
echo "   built $x86 and $arm64 ($(file -b "$arm64" | grep -o 'statically linked' || echo 'not static'))"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# run LABEL COMMAND...: stdout to $work/LABEL; a failing run stops the script with its stderr.
run() {
    local label=$1 start=$SECONDS
    shift
    if ! "$@" >"$work/$label" 2>"$work/$label.err"; then
        echo "FAILED: $label exited with an error: $*"
        cat "$work/$label.err"
        exit 1
    fi
    printf '   %-22s %3ss  %q\n' "$label" "$((SECONDS - start))" "$(cat "$work/$label")"
}

run "cli x86-64" "$cli" run -m "$model" -p "$prompt" -n $n --temp 0
run "c-example x86-64" "$x86" "$model" "$prompt" $n
run "c-example aarch64 a53" qemu-aarch64 -cpu cortex-a53 "$arm64" "$model" "$prompt" $n

failed=0
for label in "c-example x86-64" "c-example aarch64 a53"; do
    if ! cmp -s "$work/cli x86-64" "$work/$label"; then
        echo "FAILED: $label printed other bytes than the CLI:"
        diff <(od -c "$work/cli x86-64") <(od -c "$work/$label") || true
        failed=1
    fi
done
[ "$failed" -eq 0 ] || exit 1
echo "ok: the C example prints the CLI's greedy text on x86-64 and on aarch64 (musl, qemu a53)"
