#!/usr/bin/env bash
# The one test command (README.md): installs what the tests need on a fresh machine, then runs
# formatting, lints, the bare-metal build of core and kernels, and every test in release mode.
# Safe to re-run: every install step skips what is already there.
#
#   tools/test.sh          what CI runs (.ci/run)
#   tools/test.sh --full   that, then the by-hand group: the tests of Qwen2.5-Coder-1.5B (1.1 GB,
#                          minutes of CPU; #[ignore]d in CI, named *qwen25_coder_15b*)
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step is headed with the minutes and seconds since the start, so a slow step shows in CI's log.
say() { printf '\n== [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
full=0
for arg in "$@"; do
  case $arg in
    --full) full=1 ;;
    *) echo "tools/test.sh: unknown argument '$arg' (--full runs the by-hand group too)" >&2; exit 2 ;;
  esac
done

say "toolchain targets and components"
rustup component add rustfmt clippy >/dev/null 2>&1 || true

say "python packages for the synthetic models (gguf, numpy)"
python3 -c 'import gguf, numpy' 2>/dev/null || python3 -m pip install --quiet gguf==0.19.0 numpy

say "models (tools/fetch-models.sh; cached in ${SMOLRUN_MODELS:-~/.cache/smolrun/models})"
tools/fetch-models.sh gemma3-270m qwen2.5-coder-0.5b lowbit

say "cargo fmt --check"
cargo fmt --all -- --check

say "Android headless mode against stand-ins for am/cmd/svc/settings (tools/android/test-headless.sh)"
command -v mksh >/dev/null || { apt-get install -y mksh >/dev/null 2>&1 || echo "(no mksh: Android's shell untested)"; }
sh tools/android/test-headless.sh

say "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --release -- -D warnings

say "core and kernels build bare-metal (aarch64-unknown-none)"
tools/check-no-std.sh --release

say "aarch64 kernels under qemu: cortex-a76 (dotprod) and cortex-a53 (no dotprod)"
tools/test-aarch64.sh

say "cargo test --workspace --release"
cargo test --workspace --release

say "every x86 SIMD intrinsic inlined into its kernel (tools/check-intrinsics-inlined.sh)"
cargo build -q --release -p smolrun
tools/check-intrinsics-inlined.sh

say "bare metal: a synthetic model in an aarch64-unknown-none image under qemu-system-aarch64, a53 and a76, against smolrun run (tools/bare-metal.sh)"
models_dir=${SMOLRUN_MODELS:-$HOME/.cache/smolrun/models}
[ -f "$models_dir/synthetic-qwen3.gguf" ] || python3 tools/oracle/synth_model.py qwen3
for cpu in cortex-a53 cortex-a76; do
    tools/bare-metal.sh --cpu "$cpu" --compare "$models_dir/synthetic-qwen3.gguf" "The quick brown fox" 32 \
        2> >(grep -E "kernels|static region peak|^ok|FAILED|EXCEPTION|PANIC|ERROR" >&2)
done

say "end-to-end: smolrun serve with a real model (tools/test-e2e.sh)"
tools/test-e2e.sh

say "cross builds: Android and iOS checked, aarch64 musl and armv7 run under qemu (tools/cross/ci.sh)"
tools/cross/ci.sh

if [[ $full == 1 ]]; then
  say "by-hand group: Qwen2.5-Coder-1.5B (tools/fetch-models.sh qwen2.5-coder-1.5b)"
  tools/fetch-models.sh qwen2.5-coder-1.5b
  cargo test --workspace --release -- --ignored qwen25_coder_15b
fi
say "all steps passed"
