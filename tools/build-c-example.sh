#!/usr/bin/env bash
# Builds the C example (examples/c/main.c) against smolrun's static library, as a C program on
# that target would be built, and prints the path of the program it built (nothing else on
# stdout):
#   tools/build-c-example.sh                              the host (gcc, glibc)
#   tools/build-c-example.sh aarch64-unknown-linux-musl   a static aarch64 binary (routers, SBCs,
#                                                         Android's adb shell), for qemu-aarch64
#   tools/build-c-example.sh aarch64-unknown-linux-gnu    aarch64 glibc (run with qemu -L)
# The library: target/<triple>/<profile>/libsmolrun_ffi.a (release for the host, dist for a
# device, as tools/cross/build.sh builds the CLI). Android and iOS have no SDK here: their
# library is type-checked by tools/cross/ci.sh, not linked.
set -euo pipefail
cd "$(dirname "$0")/.."

host=$(rustc -vV | sed -n 's/^host: //p')
target=${1:-$host}
out=target/c-example/$target
program=$out/smolrun-c-example
cflags=(-std=c11 -O2 -Wall -Wextra -Werror -pedantic -Iffi/include)

# The static library, and only it (the crate's cdylib is not wanted here, and musl targets
# cannot make one).
build_lib() {
    local profile=$1
    shift
    cargo rustc -q -p smolrun-ffi --lib --crate-type staticlib --profile "$profile" "$@" >&2
}

mkdir -p "$out"
case $target in
    "$host")
        build_lib release
        # The system libraries: what `rustc --print native-static-libs` names for this library.
        ${CC:-gcc} "${cflags[@]}" examples/c/main.c target/release/libsmolrun_ffi.a \
            -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc -o "$program"
        ;;
    aarch64-unknown-linux-musl)
        source tools/cross/env.sh
        cross_install "$target" >&2
        build_lib dist --target "$target"
        # A musl C toolchain for aarch64: Debian's cross gcc with Debian's musl-dev for arm64
        # (headers, crt files, libc.a) through its musl-gcc specs, pointed at where
        # musl_sysroot unpacked it. Unwinding (the library catches panics at its boundary)
        # comes from the LLVM libunwind that Rust's musl target ships: gcc's libgcc_eh here is
        # built for glibc and needs its _dl_find_object.
        sysroot=$(musl_sysroot arm64)
        specs=$out/musl-gcc.specs
        sed "s#/usr/\(lib\|include\)/aarch64-linux-musl#$sysroot/usr/\1/aarch64-linux-musl#g" \
            "$sysroot/usr/lib/aarch64-linux-musl/musl-gcc.specs" >"$specs"
        unwind=$(rustc --print sysroot)/lib/rustlib/$target/lib/self-contained/libunwind.a
        aarch64-linux-gnu-gcc -specs "$specs" -static "${cflags[@]}" examples/c/main.c \
            "target/$target/dist/libsmolrun_ffi.a" "$unwind" -o "$program"
        ;;
    aarch64-unknown-linux-gnu)
        source tools/cross/env.sh
        cross_install "$target" >&2
        build_lib dist --target "$target"
        aarch64-linux-gnu-gcc "${cflags[@]}" examples/c/main.c \
            "target/$target/dist/libsmolrun_ffi.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc \
            -o "$program"
        ;;
    *)
        echo "build-c-example.sh: no C toolchain here for $target; targets: $host (default)," \
            "aarch64-unknown-linux-musl, aarch64-unknown-linux-gnu" >&2
        exit 2
        ;;
esac
echo "$program"
