#!/usr/bin/env bash
# Builds smolrun for the devices (profile `dist`: release code, stripped):
#   tools/cross/build.sh                 every target below
#   tools/cross/build.sh TARGET...       only those
# Binaries: target/<triple>/dist/smolrun. Linux targets are linked here; Android and iOS are
# type-checked only (`cargo check`) unless their SDK is present (ANDROID_NDK_HOME for Android;
# iOS links only on macOS with Xcode), since neither SDK is a Debian package.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/cross/env.sh

targets=("$@")
((${#targets[@]})) || targets=("${cross_targets_all[@]}")
cross_install "${targets[@]}"

for t in "${targets[@]}"; do
    start=$SECONDS
    case $t in
        aarch64-linux-android)
            if [ -n "${CARGO_TARGET_AARCH64_LINUX_ANDROID_LINKER:-}" ]; then
                cargo build -q --profile dist --target "$t" -p smolrun
                echo "built $(cross_binary "$t")"
            else
                cargo check -q --target "$t" -p smolrun
                echo "checked $t (set ANDROID_NDK_HOME to link; or use the aarch64 musl binary, which runs on Android too)"
            fi
            ;;
        aarch64-apple-ios)
            if [ "$(uname -s)" = Darwin ]; then
                cargo build -q --profile dist --target "$t" -p smolrun
                echo "built $(cross_binary "$t") (sign it with ldid -S on the device)"
            else
                cargo check -q --target "$t" -p smolrun
                echo "checked $t (linking needs Xcode's iOS SDK, on macOS)"
            fi
            ;;
        *)
            cargo build -q --profile dist --target "$t" -p smolrun
            bin=$(cross_binary "$t")
            link=$(file -b "$bin" | grep -o "statically linked\|dynamically linked\|static-pie linked" || true)
            echo "built $bin ($t, ${link:-linked}, $(($(stat -c %s "$bin") / 1024)) KiB)"
            ;;
    esac
    echo "  ($t: $((SECONDS - start)) s)"
done
