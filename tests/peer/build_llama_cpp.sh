#!/usr/bin/env bash
# build_llama_cpp.sh — builds llama.cpp's `llama-perplexity`, `llama-tokenize` and `llama-quantize` (CPU only) from the
# llama.cpp sources vendored inside the PyPI source distribution of llama-cpp-python, for the peer
# check tests/peer/check_llama_cpp.sh. Idempotent: the sdist, the unpacked tree and the build are kept
# in an ignored folder and reused; a second run only re-runs `cmake --build` (a no-op when up to date).
#
#   bash tests/peer/build_llama_cpp.sh            # -> build-peer/llama.cpp-build/bin/llama-perplexity
#   PEER_DIR=/elsewhere JOBS=4 bash tests/peer/build_llama_cpp.sh
#
# Environment: PEER_DIR (default <repo>/build-peer, git-ignored by /build*/), JOBS (default 2),
# PYTHON (default <repo>/.venv/bin/python, for `python -m pip download`), LLAMA_CPP_PYTHON_VERSION.
# Needs: cmake >= 3.14, a C/C++ compiler, network access to PyPI on the first run only.
# Prints the path of the bin/ folder on its last line.
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PEER_DIR="${PEER_DIR:-$REPO/build-peer}"
JOBS="${JOBS:-2}"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
[[ -x "$PYTHON" ]] || PYTHON=python3

SDIST_DIR="$PEER_DIR/sdist"
SRC_ROOT="$PEER_DIR/llama_cpp_python-$VERSION"
LLAMA_SRC="$SRC_ROOT/vendor/llama.cpp"
BUILD="$PEER_DIR/llama.cpp-build"
TARGETS=(llama-perplexity llama-tokenize llama-quantize llama-imatrix)

for tool in cmake c++; do
    command -v "$tool" >/dev/null || { echo "build_llama_cpp.sh: '$tool' not found (apt-get install cmake g++)" >&2; exit 1; }
done
mkdir -p "$SDIST_DIR"

# 1. The source distribution (no wheels, no dependencies: we only want the vendored llama.cpp).
sdist="$(ls "$SDIST_DIR"/llama_cpp_python-"$VERSION".tar.gz 2>/dev/null || true)"
if [[ -z "$sdist" ]]; then
    echo "== pip download llama-cpp-python==$VERSION (sdist)" >&2
    "$PYTHON" -m pip download "llama-cpp-python==$VERSION" --no-binary :all: --no-deps \
        -d "$SDIST_DIR" >&2
    sdist="$(ls "$SDIST_DIR"/llama_cpp_python-"$VERSION".tar.gz)"
fi

# 2. Unpack once (into a temporary name, renamed when complete).
if [[ ! -f "$LLAMA_SRC/CMakeLists.txt" ]]; then
    echo "== unpacking $(basename "$sdist")" >&2
    tmp="$PEER_DIR/unpack.tmp-$$"
    rm -rf "$tmp" && mkdir -p "$tmp"
    tar -xzf "$sdist" -C "$tmp"
    [[ -f "$tmp/llama_cpp_python-$VERSION/vendor/llama.cpp/CMakeLists.txt" ]] || {
        echo "build_llama_cpp.sh: no vendor/llama.cpp/CMakeLists.txt in $sdist" >&2; exit 1; }
    rm -rf "$SRC_ROOT"
    mv "$tmp/llama_cpp_python-$VERSION" "$SRC_ROOT"
    rm -rf "$tmp"
fi

# 3. Configure and build only the tools the check needs. CPU only; GGML_NATIVE=OFF gives ggml's fixed
#    x86-64 set (SSE4.2, AVX, AVX2, FMA, F16C, BMI2; no AVX-512) instead of -march=native, so the
#    kernels do not depend on the host that built them (the dev machine has AVX2/FMA and no AVX-512
#    anyway); OpenMP threads, llamafile sgemm on (ggml's defaults).
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
    echo "== configuring llama.cpp in $BUILD" >&2
    cmake -S "$LLAMA_SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF >&2
fi
echo "== building ${TARGETS[*]} (-j$JOBS)" >&2
cmake --build "$BUILD" --config Release -j"$JOBS" --target "${TARGETS[@]}" >&2

for t in "${TARGETS[@]}"; do [[ -x "$BUILD/bin/$t" ]] || { echo "build_llama_cpp.sh: $BUILD/bin/$t missing" >&2; exit 1; }; done

# Provenance for the check's report.
{
    echo "llama-cpp-python $VERSION sdist $(basename "$sdist") sha256 $(sha256sum "$sdist" | cut -d' ' -f1)"
    echo "sources $LLAMA_SRC; $("$BUILD/bin/llama-perplexity" --version 2>&1 | grep -E '^(version|built with)' | tr '\n' ' ')"
    echo "cmake: CPU only, GGML_NATIVE=OFF, Release, targets ${TARGETS[*]}"
} > "$BUILD/peer-build-info.txt"
echo "$BUILD/bin"
