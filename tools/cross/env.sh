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

# musl_sysroot ARCH (a Debian architecture: arm64): prints a folder holding Debian's musl-dev
# for ARCH (usr/include/<triple> and usr/lib/<triple>: headers, crt files, libc.a, and
# musl-gcc.specs), for compiling C against musl with the Debian cross gcc (the C example,
# tools/build-c-example.sh). Downloaded once with a private apt state under
# ~/.cache/smolrun/cross (the machine's own sources, ARCH's package lists): the machine's dpkg
# configuration is left as it is.
musl_sysroot() {
    local arch=$1 cache=${SMOLRUN_CROSS_CACHE:-$HOME/.cache/smolrun/cross}
    local root=$cache/musl-dev-$arch
    if [ ! -f "$root/.complete" ]; then
        local apt_dir
        apt_dir=$(mktemp -d)
        local apt_opts=(
            -o "APT::Architecture=$arch" -o "APT::Architectures::=$arch"
            -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
            -o "Dir::State::status=$apt_dir/status" -o Debug::NoLocking=1
            -o APT::Sandbox::User=root
        )
        # Every step checked: `$(musl_sysroot ...)` runs without set -e.
        mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$cache" &&
            touch "$apt_dir/status" || return 1
        echo "fetching musl-dev:$arch into $root" >&2
        apt-get -qq "${apt_opts[@]}" update >&2 &&
            (cd "$apt_dir" && apt-get -qq "${apt_opts[@]}" download "musl-dev:$arch" >&2) &&
            rm -rf "$root" &&
            dpkg-deb -x "$apt_dir"/musl-dev_*_"$arch".deb "$root" || {
            echo "FAILED: could not fetch Debian's musl-dev:$arch (see above)" >&2
            rm -rf "$apt_dir"
            return 1
        }
        rm -rf "$apt_dir"
        touch "$root/.complete"
    fi
    echo "$root"
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
