#!/usr/bin/env bash
# The cross-build part of the test command (tools/test.sh runs it after the x86 tests, so the
# x86 release binary exists):
#   1. no compile-time flag picks a kernel (kernels are chosen at run time from CPU features),
#      and no code locks memory;
#   2. clippy -D warnings for aarch64-linux-android and aarch64-apple-ios, the CLI and the C
#      ABI (no NDK or Xcode here, so these are type-checked, not linked);
#   3. core's arena tests on armv7 (32-bit: usize overflow refused), under qemu-arm;
#      the aarch64 musl static binary and the armv7 binary build (tools/cross/build.sh);
#   4. both run Gemma 3 270M under qemu and write the x86 build's greedy text
#      (tools/cross/qemu-greedy.sh);
#   5. the C example, linked with the C ABI's static library, prints the CLI's greedy text on
#      x86-64 and, built for aarch64 musl, under qemu (tools/cross/c-example.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/cross/env.sh
cross_install "${cross_targets_all[@]}"
step() { printf '\n== %s\n' "$*"; step_start=$SECONDS; }
took() { echo "   ($((SECONDS - step_start)) s)"; }

step "no target_feature cfg decides a kernel (core, kernels-asm, cli, platform-*)"
# #[target_feature(enable = ...)] on a function is fine: it is only called after the run-time
# check. A cfg on target_feature would pick a kernel from the build flags.
if grep -rnE 'cfg!?\((.*[^_])?target_feature' --include=*.rs core kernels-asm cli platform-*; then
    echo "FAILED: the lines above choose code by compile-time CPU features; use the run-time CpuFeatures"
    exit 1
fi
echo "ok"

step "nothing relies on mlock (RLIMIT_MEMLOCK is 64 KiB for Android apps; wired weights kernel-panicked an iPad)"
if grep -rnE '\bm(un)?lock(all)?\(' --include=*.rs core kernels-asm cli platform-*; then
    echo "FAILED: the lines above lock memory; resident weights must stay ordinary pages"
    exit 1
fi
echo "ok"

for t in aarch64-linux-android aarch64-apple-ios; do
    step "cargo clippy --target $t -D warnings (type-checked; linking needs its SDK)"
    cargo clippy -q --target "$t" -p smolrun -p smolrun-ffi -p smolrun-android -p smolrun-ios -- -D warnings
    took
done

step "core's arena and memory plan on a 32-bit target (armv7 under qemu-arm): a state beyond 4 GB is refused, never wrapped"
CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_RUNNER="qemu-arm -L /usr/arm-linux-gnueabihf" \
    cargo test -q --release -p smolrun-core --lib --target armv7-unknown-linux-gnueabihf -- arena memory_plan
took

step "build aarch64-unknown-linux-musl (static) and armv7-unknown-linux-gnueabihf"
tools/cross/build.sh aarch64-unknown-linux-musl armv7-unknown-linux-gnueabihf
took

step "greedy text under qemu (aarch64 a53/a76, armv7) against the x86-64 build"
cargo build -q --release -p smolrun
tools/cross/qemu-greedy.sh
took

step "the C example (examples/c/main.c + libsmolrun_ffi.a) on x86-64 and aarch64 musl (qemu a53) against the CLI"
tools/cross/c-example.sh
took
