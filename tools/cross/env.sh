# Sourced by the tools/cross scripts: installs what cross-building needs on a fresh Debian
# machine (rustup targets, the Debian cross linkers, qemu-user) and exports the linkers.
# Safe to source again: every step skips what is already there.
#
# Linkers, as found to work here:
#   aarch64-unknown-linux-musl     aarch64-linux-gnu-gcc (Rust's self-contained musl crt and libc
#                                  make the result static; no musl-gcc needed)
#   aarch64-unknown-linux-gnu      aarch64-linux-gnu-gcc
#   armv7-unknown-linux-gnueabihf  arm-linux-gnueabihf-gcc
#   aarch64-linux-android          needs the Android NDK's clang (not on Debian): cargo check only
#                                  unless ANDROID_NDK_HOME points to an NDK
#   aarch64-apple-ios              needs Xcode's SDK (macOS only): cargo check only

cross_targets_all=(
    aarch64-unknown-linux-musl
    aarch64-unknown-linux-gnu
    armv7-unknown-linux-gnueabihf
    aarch64-linux-android
    aarch64-apple-ios
)

cross_install() {
    local installed missing=() t
    installed=$(rustup target list --installed)
    for t in "$@"; do
        grep -qx "$t" <<<"$installed" || missing+=("$t")
    done
    if ((${#missing[@]})); then
        echo "rustup target add ${missing[*]}"
        rustup target add "${missing[@]}"
    fi
    local packages=()
    command -v aarch64-linux-gnu-gcc >/dev/null || packages+=(gcc-aarch64-linux-gnu)
    command -v arm-linux-gnueabihf-gcc >/dev/null || packages+=(gcc-arm-linux-gnueabihf)
    command -v qemu-aarch64 >/dev/null && command -v qemu-arm >/dev/null || packages+=(qemu-user)
    if ((${#packages[@]})); then
        echo "apt-get install ${packages[*]}"
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo=sudo
        $sudo apt-get update -qq
        $sudo apt-get install -y -qq "${packages[@]}"
    fi
}

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_LINKER=arm-linux-gnueabihf-gcc
if [ -n "${ANDROID_NDK_HOME:-}" ]; then
    ndk_clang=$(ls "$ANDROID_NDK_HOME"/toolchains/llvm/prebuilt/*/bin/aarch64-linux-android2[4-9]-clang 2>/dev/null | head -1)
    [ -n "$ndk_clang" ] && export CARGO_TARGET_AARCH64_LINUX_ANDROID_LINKER=$ndk_clang
fi

# Where `cargo build --profile dist --target T` puts the binary.
cross_binary() { echo "target/$1/dist/smolrun"; }
