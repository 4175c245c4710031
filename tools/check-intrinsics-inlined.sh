#!/usr/bin/env bash
# Every SIMD intrinsic in the x86-64 release binary is inlined into its kernel: no function
# calls a `core::core_arch` intrinsic out of line. An intrinsic is inlined only into a function
# that enables its target features; a closure (`array::from_fn(|i| ...)`, `.map(|v| ...)`)
# inherits none, so intrinsics inside one become calls, and the kernel runs ~2x slower with the
# same bits, which no exactness test sees (avx2_kt's one-row Q4_K/Q6_K dots were such, found by
# perf). CPU-feature detection (std_detect, libm, `_xgetbv`) is the one allowed caller.
#   tools/check-intrinsics-inlined.sh [BINARY]   (default: target/release/smolrun)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-${CARGO_TARGET_DIR:-target}/release/smolrun}
[[ -x $bin ]] || { echo "no $bin: build it first (cargo build --release -p smolrun)" >&2; exit 1; }
calls=$(objdump -d --no-show-raw-insn -C "$bin" |
    awk '/^[0-9a-f]+ <.*>:$/ { fn = $0 }
         /call.*<core::core_arch::/ && fn !~ /std_detect|libm::|get_cpu_features|detect_features/ && $0 !~ /_xgetbv/ { print fn " -> " $NF }' |
    sort | uniq -c)
if [[ -n $calls ]]; then
    echo "$calls"
    echo "FAILED: the functions above call SIMD intrinsics out of line (a closure inside a kernel?); write the loop out"
    exit 1
fi
echo "ok: no out-of-line SIMD intrinsic in $bin"
