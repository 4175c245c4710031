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
