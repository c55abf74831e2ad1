#!/usr/bin/env bash
# gpu_check.sh — the one script for the GPU machine (H200): builds the CUDA kernels with their test and
# benchmark, prints the device, runs the GPU tests (log: $OUT/gpu_tests.txt) and the benchmark
# ($OUT/bench_kernels.json), and prints a summary table last. Finishes in ~3-5 minutes.
#
#   bash scripts/gpu_check.sh [--commit HASH] [--build-only] [--no-bench] [--jobs N]
#   bash scripts/gpu_check.sh --prepare      (on the dev machine, before the GPU run; see below)
#
# Why no CMake here: the GPU image has nvcc, g++, cmake and ninja, but not necessarily the Debian
# packages the full build wants (CLI11, nlohmann-json, libfmt-dev, libgtest-dev), and the top-level
# CMakeLists requires all of them. This script compiles exactly what the CUDA test and benchmark need:
# lowbit's CPU references (g++), the lowbit_cuda sources (nvcc, sm_90a, --fmad=false as in
# src/CMakeLists.txt), GoogleTest from source, with
#   fmt:   system headers (+ libfmt when present) or .gpu_deps/include/fmt in header-only mode;
#   gtest: system /usr/src/googletest or /usr/include/gtest + libgtest, else .gpu_deps/googletest.
# --prepare copies fmt's headers and GoogleTest's sources from this (Debian) machine into .gpu_deps/
# (~2 MB): keep .gpu_deps/ out of git (.gitignore) and name it in the device call's `carry`.
# nvcc TUs get -DFMT_USE_CONSTEXPR=1 (fmt 9 + nvcc + C++20 otherwise fails to compile <fmt/format.h>).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

COMMIT=""
BUILD_ONLY=0
NO_BENCH=0
JOBS=$(nproc 2>/dev/null || echo 4)
PREPARE=0
while [ $# -gt 0 ]; do
    case "$1" in
        --commit) COMMIT="$2"; shift 2 ;;
        --build-only) BUILD_ONLY=1; shift ;;
        --no-bench) NO_BENCH=1; shift ;;
        --jobs) JOBS="$2"; shift 2 ;;
        --prepare) PREPARE=1; shift ;;
        *) echo "usage: $0 [--commit HASH] [--build-only] [--no-bench] [--jobs N] | --prepare" >&2; exit 2 ;;
    esac
done

if [ "$PREPARE" = 1 ]; then
    rm -rf .gpu_deps && mkdir -p .gpu_deps/include .gpu_deps/googletest
    [ -f /usr/include/fmt/format.h ] || { echo "prepare: /usr/include/fmt missing (apt-get install libfmt-dev)" >&2; exit 1; }
    [ -f /usr/src/googletest/googletest/src/gtest-all.cc ] || { echo "prepare: /usr/src/googletest missing (apt-get install googletest)" >&2; exit 1; }
    cp -r /usr/include/fmt .gpu_deps/include/
    cp -r /usr/include/CLI /usr/include/nlohmann .gpu_deps/include/  # header-only: the lowbit binary
    cp -r /usr/src/googletest/googletest/include /usr/src/googletest/googletest/src .gpu_deps/googletest/
    rm -f .gpu_deps/googletest/src/*.a
    du -sh .gpu_deps
    echo "prepare: done. Keep .gpu_deps/ ignored by git and carry it in the device call:"
    echo "  run(command=\"bash scripts/gpu_check.sh --commit $(git rev-parse --short HEAD 2>/dev/null || echo HASH)\", carry=[\".gpu_deps\"])"
    exit 0
fi

BUILD=$ROOT/build-gpu
OUT=${OUT:-$BUILD/out}  # the device machine sets OUT
mkdir -p "$BUILD/obj" "$OUT"
LOG=$OUT/build.log
: > "$LOG"
[ -n "$COMMIT" ] || COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
T0=$(date +%s)

say() { echo "== $*"; }
die() { echo "gpu_check: $*" >&2; echo "gpu_check: $*" >> "$LOG"; exit 1; }

# ---------------------------------------------------------------------------------------------------
# Toolchain and dependencies.
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] || die "nvcc not found (PATH or /usr/local/cuda/bin)"
CXX=${CXX:-g++}
command -v "$CXX" >/dev/null || die "$CXX not found"
say "toolchain"
"$NVCC" --version | tail -2
"$CXX" --version | head -1

VENDORED=${LOWBIT_GPU_VENDORED:-0}  # 1: ignore system fmt/gtest and use .gpu_deps (to test that path)
SYS_FMT=/usr/include/fmt/format.h
SYS_GTEST=/usr/src/googletest/googletest/src/gtest-all.cc
[ "$VENDORED" = 1 ] && { SYS_FMT=/nonexistent; SYS_GTEST=/nonexistent; }
FMT_INC=""
FMT_GXX_DEF=""
FMT_LIB=""
if [ -f "$SYS_FMT" ]; then
    if ls /usr/lib/x86_64-linux-gnu/libfmt.so* /usr/lib/x86_64-linux-gnu/libfmt.a /usr/lib64/libfmt.so* /usr/local/lib/libfmt.* >/dev/null 2>&1; then
        FMT_LIB="-lfmt"; echo "fmt: system headers + library"
    else
        FMT_GXX_DEF="-DFMT_HEADER_ONLY"; echo "fmt: system headers, header-only"
    fi
elif [ -f .gpu_deps/include/fmt/format.h ]; then
    FMT_INC="-I$ROOT/.gpu_deps/include"; FMT_GXX_DEF="-DFMT_HEADER_ONLY"; echo "fmt: .gpu_deps (header-only)"
else
    die "fmt headers missing: install libfmt-dev, or run 'bash scripts/gpu_check.sh --prepare' on the dev machine and carry .gpu_deps"
fi

GTEST_DIR=""
if [ -f "$SYS_GTEST" ]; then
    GTEST_DIR=/usr/src/googletest/googletest; echo "gtest: system sources"
elif [ -f .gpu_deps/googletest/src/gtest-all.cc ]; then
    GTEST_DIR=$ROOT/.gpu_deps/googletest; echo "gtest: .gpu_deps sources"
else
    die "GoogleTest sources missing: run 'bash scripts/gpu_check.sh --prepare' on the dev machine and carry .gpu_deps"
fi

# CLI11 / nlohmann-json (header-only) for the lowbit binary: system or .gpu_deps.
CLI_INC=""
if [ ! -f /usr/include/CLI/CLI.hpp ] || [ ! -f /usr/include/nlohmann/json.hpp ]; then
    [ -f .gpu_deps/include/CLI/CLI.hpp ] || die "CLI11 headers missing: run 'bash scripts/gpu_check.sh --prepare' and carry .gpu_deps"
    CLI_INC="-I$ROOT/.gpu_deps/include"
fi
CXXFLAGS="-O2 -std=c++20 -ffp-contract=off -Wall -Isrc $FMT_INC $FMT_GXX_DEF $CLI_INC -DLOWBIT_NO_BLAS -I/usr/local/cuda/include"
ARCH="-gencode=arch=compute_90a,code=sm_90a"
NVFLAGS="-O3 -std=c++20 --fmad=false -lineinfo $ARCH -Isrc $FMT_INC -DLOWBIT_HAVE_CUDA=1 -DFMT_USE_CONSTEXPR=1 -Xcompiler=-ffp-contract=off"

# Every CPU source of lowbit_lib; no BLAS on the GPU image, so gemm_cpu.cpp uses its plain loop.
CPU_SRC=$(cd src && ls core/*.cpp formats/*.cpp hadamard/*.cpp io/*.cpp adahop/*.cpp model/*.cpp 2>/dev/null)
CLI_SRC=$(cd src && ls cli/*.cpp)
CUDA_SRC=$(cd src && ls core/*.cu formats/cuda/*.cu hadamard/cuda/*.cu adahop/cuda/*.cu model/cuda/*.cu 2>/dev/null)
# Every GPU test suite tests/cuda/test_X.cu becomes build-gpu/test_cuda_X; every bench/bench_X.cu a benchmark.
GPU_TESTS=$(cd tests/cuda && ls test_*.cu | sed 's/\.cu$//')
GPU_BENCHES=$(cd bench && ls bench_*.cu | sed 's/\.cu$//')

# ---------------------------------------------------------------------------------------------------
# Build: every translation unit in parallel (at most $JOBS at once), then link.
say "build ($JOBS jobs) -> $BUILD"
PIDS=()
NAMES=()
run_job() {  # name, command...
    local name=$1; shift
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 0.2; done
    ( "$@" > "$BUILD/obj/$name.log" 2>&1 ) &
    PIDS+=($!); NAMES+=("$name")
}
OBJS=()
for s in $CPU_SRC; do
    o=$BUILD/obj/$(echo "$s" | tr '/' '_').o; OBJS+=("$o")
    run_job "$(basename "$o")" $CXX $CXXFLAGS -c "src/$s" -o "$o"
done
for s in $CUDA_SRC; do
    o=$BUILD/obj/$(echo "$s" | tr '/' '_').o; OBJS+=("$o")
    run_job "$(basename "$o")" "$NVCC" $NVFLAGS -Xptxas -v -c "src/$s" -o "$o"
done
run_job gtest-all.o $CXX -O1 -std=c++20 -I"$GTEST_DIR/include" -I"$GTEST_DIR" -c "$GTEST_DIR/src/gtest-all.cc" -o "$BUILD/obj/gtest-all.o"
run_job gtest_main.o $CXX -O1 -std=c++20 -I"$GTEST_DIR/include" -I"$GTEST_DIR" -c "$GTEST_DIR/src/gtest_main.cc" -o "$BUILD/obj/gtest_main.o"
CLI_OBJS=()
for s in $CLI_SRC; do
    o=$BUILD/obj/$(echo "$s" | tr '/' '_').o; CLI_OBJS+=("$o")
    run_job "$(basename "$o")" $CXX $CXXFLAGS -DLOWBIT_HAVE_CUDA=1 -c "src/$s" -o "$o"
done
for t in $GPU_TESTS; do
    run_job "$t.o" "$NVCC" $NVFLAGS -I"$GTEST_DIR/include" -c "tests/cuda/$t.cu" -o "$BUILD/obj/$t.o"
done
for b in $GPU_BENCHES; do
    run_job "$b.o" "$NVCC" $NVFLAGS -c "bench/$b.cu" -o "$BUILD/obj/$b.o"
done
FAILED=0
for i in "${!PIDS[@]}"; do
    if ! wait "${PIDS[$i]}"; then
        FAILED=1
        echo "---- FAILED: ${NAMES[$i]}" | tee -a "$LOG"
        tail -40 "$BUILD/obj/${NAMES[$i]}.log" | tee -a "$LOG"
    fi
done
cat "$BUILD"/obj/*.log >> "$LOG" 2>/dev/null
[ "$FAILED" = 0 ] || die "compilation failed (see above and $LOG)"
LINK_LIBS="-lcublas -lcublasLt -lpthread $FMT_LIB"
for t in $GPU_TESTS; do
    "$NVCC" $ARCH -o "$BUILD/test_cuda_${t#test_}" "$BUILD/obj/$t.o" "${OBJS[@]}" "$BUILD/obj/gtest-all.o" \
        "$BUILD/obj/gtest_main.o" $LINK_LIBS >> "$LOG" 2>&1 || die "linking $t failed (see $LOG)"
done
for b in $GPU_BENCHES; do
    "$NVCC" $ARCH -o "$BUILD/$b" "$BUILD/obj/$b.o" "${OBJS[@]}" $LINK_LIBS >> "$LOG" 2>&1 || die "linking $b failed (see $LOG)"
done
"$NVCC" $ARCH -o "$BUILD/lowbit" "${CLI_OBJS[@]}" "${OBJS[@]}" $LINK_LIBS >> "$LOG" 2>&1 || die "linking lowbit failed (see $LOG)"
T1=$(date +%s)
echo "built in $((T1 - T0)) s"
# Registers / spills (ptxas -v is in the build log): one line per kernel that spills.
awk '/Compiling entry function/ { name = $0; sub(/.*function .(_Z)?/, "", name); sub(/. for .sm_.*/, "", name) }
     /bytes spill stores/ && $5 + 0 > 0 { printf "  spills: %s %s (%s)\n", $5, "bytes", substr(name, 1, 90) }' "$LOG" | sort -u | head -10
echo "  kernels compiled: $(grep -c "Compiling entry function" "$LOG")"
[ "$BUILD_ONLY" = 1 ] && exit 0

# ---------------------------------------------------------------------------------------------------
say "device"
nvidia-smi || echo "(nvidia-smi failed)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>/dev/null

say "GPU tests -> $OUT/gpu_tests.txt"
: > "$OUT/gpu_tests.txt"
TEST_RC=0
for t in $GPU_TESTS; do
    timeout 240 "$BUILD/test_cuda_${t#test_}" --gtest_color=no >> "$OUT/gpu_tests.txt" 2>&1 || TEST_RC=1
done
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|^\[==========\]|^\[  PASSED  \]" "$OUT/gpu_tests.txt" | tail -40
if [ "$TEST_RC" != 0 ]; then
    echo "---- first failures:"
    grep -B2 -A12 -m 5 "Failure" "$OUT/gpu_tests.txt" | head -120
fi

BENCH_RC=skipped
if [ "$NO_BENCH" = 0 ]; then
    say "benchmark -> $OUT/bench_kernels.json"
    timeout 120 "$BUILD/bench_kernels" --json "$OUT/bench_kernels.json" --commit "$COMMIT" > "$OUT/bench_kernels.txt" 2>&1
    BENCH_RC=$?
    [ "$BENCH_RC" = 0 ] || tail -20 "$OUT/bench_kernels.txt"
    say "AdaHOP overheads -> $OUT/bench_adahop.json"
    timeout 120 "$BUILD/bench_adahop" --json "$OUT/bench_adahop.json" --commit "$COMMIT" > "$OUT/bench_adahop.txt" 2>&1 \
        || { BENCH_RC=1; tail -20 "$OUT/bench_adahop.txt"; }
    say "analyze pairs on the GPU -> $OUT/analyze_pairs_cuda.json"
    timeout 240 "$BUILD/lowbit" analyze pairs --device cuda --json --plot "$OUT/analyze_pairs_cuda.svg" \
        > "$OUT/analyze_pairs_cuda.json" 2> "$OUT/analyze_pairs_cuda.err" || { BENCH_RC=1; tail -5 "$OUT/analyze_pairs_cuda.err"; }
fi

# ---------------------------------------------------------------------------------------------------
say "summary (commit $COMMIT, $(( $(date +%s) - T0 )) s)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null
PASSED=$(grep -c "^\[       OK \]" "$OUT/gpu_tests.txt" || true)
FAILED_T=$(grep -c "^\[  FAILED  \].*(" "$OUT/gpu_tests.txt" || true)
SKIPPED=$(grep -c "^\[  SKIPPED \].*ms)$" "$OUT/gpu_tests.txt" || true)
echo "GPU tests: exit $TEST_RC; $PASSED passed, $FAILED_T failed, $SKIPPED skipped"
grep "^\[  FAILED  \].*(" "$OUT/gpu_tests.txt" | head -20
echo "benchmark: exit $BENCH_RC"
if [ -f "$OUT/bench_kernels.txt" ]; then
    sed -n '/^kernel /,$p' "$OUT/bench_kernels.txt"
fi
[ -f "$OUT/bench_adahop.txt" ] && cat "$OUT/bench_adahop.txt"
rm -f "$OUT/bench_adahop.txt" "$OUT/analyze_pairs_cuda.err"  # printed above; at most 8 files come back
[ "$TEST_RC" = 0 ] && { [ "$BENCH_RC" = 0 ] || [ "$BENCH_RC" = skipped ]; }
