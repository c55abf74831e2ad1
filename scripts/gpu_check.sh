#!/usr/bin/env bash
# gpu_check.sh — the runner on the GPU machine (H200). It builds nothing: scripts/pack_gpu.sh built the
# `h200` CMake preset on the dev machine and packed the GPU tests, benchmarks and the lowbit binary into
# .gpu_pack/lowbit-gpu.tar.xz. This unpacks it, prints the device, runs `ctest -L gpu` (log:
# $OUT/gpu_tests.txt), the benchmarks (bench_kernels, bench_adahop, bench_model: $OUT/<name>.json),
# `lowbit analyze pairs --device cuda` ($OUT/analyze_pairs_cuda.json/.svg), and prints a summary last;
# all it prints is also in $OUT/gpu_check.log. About a minute; 8 files are left in $OUT, the most the
# device tool brings back.
#
#   on the dev machine:  bash scripts/pack_gpu.sh
#   on the GPU machine:  bash scripts/gpu_check.sh [--commit HASH] [--no-bench]
#                        run(command="bash scripts/gpu_check.sh", carry=[".gpu_pack"])
#
# The binaries need only what the GPU image has: glibc, the NVIDIA driver, and libcublas.so.13 /
# libcublasLt.so.13 (found through their RPATH /usr/local/cuda/lib64 or the loader path); fmt, OpenBLAS,
# libstdc++ and the CUDA runtime are inside them (LOWBIT_PORTABLE_BINARIES). The tests run through the
# pack's own CTestTestfile.cmake, whose paths are relative to the unpacked folder, since the build
# tree's CTest files name the dev machine's absolute paths (pack_gpu.sh says more).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

COMMIT=""
NO_BENCH=0
while [ $# -gt 0 ]; do
    case "$1" in
        --commit) COMMIT="$2"; shift 2 ;;
        --no-bench) NO_BENCH=1; shift ;;
        *) echo "usage: $0 [--commit HASH] [--no-bench]" >&2; exit 2 ;;
    esac
done

PACK=$ROOT/.gpu_pack/lowbit-gpu.tar.xz
DIR=$ROOT/.gpu_pack/lowbit-gpu
BIN=$DIR/bin
OUT=${OUT:-$ROOT/.gpu_pack/out}  # the device machine sets OUT
mkdir -p "$OUT"
T0=$(date +%s)

main() {  # the whole run; its output goes to the terminal and to $OUT/gpu_check.log (end of file)

say() { echo "== $*"; }
die() { echo "gpu_check: $*" >&2; exit 1; }

[ -f "$PACK" ] || die "$PACK missing: run 'bash scripts/pack_gpu.sh' on the dev machine and carry .gpu_pack"
command -v ctest > /dev/null || die "ctest not found on this machine (the GPU image's cmake package provides it)"
rm -rf "$DIR"
python3 -c 'import sys, tarfile
safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.12 (and 3.11.4)
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **safe)' "$PACK" "$ROOT/.gpu_pack" \
    || die "could not unpack $PACK"
say "pack"
cat "$DIR/PACK_INFO"
[ -n "$COMMIT" ] || COMMIT=$(sed -n 's/^commit: //p' "$DIR/PACK_INFO")
if missing=$(ldd "$BIN"/* 2>/dev/null | grep "not found" | sort -u) && [ -n "$missing" ]; then
    die "the packed binaries need libraries this machine lacks:
$missing"
fi
ldd "$BIN/lowbit" | sed 's/^/  /'

# ---------------------------------------------------------------------------------------------------
say "device"
nvidia-smi || echo "(nvidia-smi failed)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>/dev/null

say "GPU tests: ctest -L gpu -> $OUT/gpu_tests.txt"
ctest --test-dir "$DIR" -L gpu --timeout 600 -V > "$OUT/gpu_tests.txt" 2>&1
TEST_RC=$?
# ctest -V prefixes each line of a test's output with "<test number>: ".
grep -E "^[0-9]+: \[ +(FAILED|SKIPPED) +\]|^[0-9]+: \[==========\]|^[0-9]+: \[  PASSED  \]|tests passed|Total Test time" \
    "$OUT/gpu_tests.txt" | tail -40
if [ "$TEST_RC" != 0 ]; then
    echo "---- first failures:"
    grep -B2 -A12 -m 5 -E "Failure|Exception|Error" "$OUT/gpu_tests.txt" | head -120
fi

BENCH_RC=skipped
if [ "$NO_BENCH" = 0 ]; then
    BENCH_RC=0
    bench() {  # name, timeout, args...: $OUT/name.json, its table in $OUT/name.txt
        local name=$1 limit=$2; shift 2
        say "$name -> $OUT/$name.json"
        timeout "$limit" "$BIN/$name" --json "$OUT/$name.json" --commit "$COMMIT" "$@" > "$OUT/$name.txt" 2>&1 \
            || { BENCH_RC=1; echo "$name failed:"; tail -20 "$OUT/$name.txt"; }
    }
    bench bench_kernels 120
    bench bench_adahop 120
    bench bench_model 240
    say "analyze pairs on the GPU -> $OUT/analyze_pairs_cuda.json"
    timeout 240 "$BIN/lowbit" analyze pairs --device cuda --json --plot "$OUT/analyze_pairs_cuda.svg" \
        > "$OUT/analyze_pairs_cuda.json" 2> "$OUT/analyze_pairs_cuda.err" || { BENCH_RC=1; tail -5 "$OUT/analyze_pairs_cuda.err"; }
    for b in bench_adahop bench_model; do
        [ -f "$OUT/$b.txt" ] && { echo "-- $b"; cat "$OUT/$b.txt"; }
    done
fi

# ---------------------------------------------------------------------------------------------------
say "summary (commit $COMMIT, $(( $(date +%s) - T0 )) s)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null
PASSED=$(grep -cE "^[0-9]+: \[       OK \]" "$OUT/gpu_tests.txt" || true)
FAILED_T=$(grep -cE "^[0-9]+: \[  FAILED  \].*\(" "$OUT/gpu_tests.txt" || true)
SKIPPED=$(grep -cE "^[0-9]+: \[  SKIPPED \].*ms\)$" "$OUT/gpu_tests.txt" || true)
echo "GPU tests: ctest exit $TEST_RC; $(grep -E "tests passed" "$OUT/gpu_tests.txt" | tail -1)"
echo "GPU test cases: $PASSED passed, $FAILED_T failed, $SKIPPED skipped"
grep -E "^[0-9]+: \[  FAILED  \].*\(" "$OUT/gpu_tests.txt" | head -20
echo "benchmarks: exit $BENCH_RC"
[ -f "$OUT/bench_kernels.txt" ] && sed -n '/^kernel /,$p' "$OUT/bench_kernels.txt"
[ -f "$OUT/bench_model.txt" ] && grep -E "^(cpu|cuda) " "$OUT/bench_model.txt"
# Printed above (so in gpu_check.log); what comes back: gpu_check.log, gpu_tests.txt, bench_kernels.txt,
# three benchmark .json, analyze's .json and .svg.
rm -f "$OUT/bench_adahop.txt" "$OUT/bench_model.txt" "$OUT/analyze_pairs_cuda.err"
[ "$TEST_RC" = 0 ] && { [ "$BENCH_RC" = 0 ] || [ "$BENCH_RC" = skipped ]; }
}

main 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
