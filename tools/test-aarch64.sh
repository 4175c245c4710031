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
bench=${CARGO_TARGET_DIR:-target}/$target/$profile/examples/neon_bench
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
    echo "== unit tests of smolrun-kernels and smolrun-core (kernels/: dispatch and exactness) on $cpu"
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu $cpu -L $sysroot"
    run_logged '^test result|^notice' cargo test --target "$target" "${unit[@]}" "$@" -- --nocapture
done
echo
echo "ok: aarch64 kernels match their scalar twins on cortex-a76 and cortex-a53"
