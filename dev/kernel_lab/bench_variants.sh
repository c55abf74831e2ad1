#!/usr/bin/env bash
# bench_variants.sh — kernel lab: rebuild a benchmark with compile-time variants (-D macros) of some kernels
# and time each variant in its own run next to its own device-copy baseline. Run after scripts/gpu_check.sh
# (reuses build-gpu/obj). A variant is one or more MACRO=VALUE separated by spaces.
#   bash dev/kernel_lab/bench_variants.sh "LOWBIT_MX_ROWS_CTAS_PER_SM=16" "LOWBIT_MX_COLS_WARPS=4 LOWBIT_MX_ROWS_CTAS_PER_SM=32"
# Rebuilt: the MX quantizers and the fused Hadamard+MXFP4 kernels; timed: bench_kernels. Other kernels:
#   LAB_TUS="adahop/cuda/outlier_stats.cu" LAB_BENCH=bench_adahop LAB_SHOW="48 operands" bash dev/kernel_lab/bench_variants.sh ...
set -uo pipefail
cd "$(dirname "$0")/../.."
OBJ=build-gpu/obj
TUS=${LAB_TUS:-"formats/cuda/mx_quantize.cu hadamard/cuda/hadamard_mxfp4.cu"}
BENCH=${LAB_BENCH:-bench_kernels}
SHOW=${LAB_SHOW:-"memcpy|mxfp4 rceil axis|hadamard\+mxfp4 axis [01] |hadamard\+mxfp4 both "}
[ -f $OBJ/$BENCH.o ] || { echo "run scripts/gpu_check.sh first" >&2; exit 1; }
NVF="-O3 -std=c++20 --fmad=false -lineinfo -gencode=arch=compute_90a,code=sm_90a -Isrc -DLOWBIT_HAVE_CUDA=1 -DFMT_USE_CONSTEXPR=1 -Xcompiler=-ffp-contract=off"
skip=$(for t in $TUS; do echo -n "|$(echo "$t" | tr '/' '_')"; done)
base=$(ls $OBJ/*.o | grep -v -E "/(test_|bench_|gtest|cli_|v_)${skip}")
# Compile every variant in parallel first (the TUs take ~30 s each), then time them one after another.
for v in "$@"; do
    name=$(echo "$v" | tr -c 'A-Za-z0-9_\n' '_')
    defs=$(for d in $v; do echo -n " -D$d"; done)
    (
        objs=()
        for t in $TUS; do
            o=$OBJ/v_${name}_$(basename "$t" .cu).o
            nvcc $NVF $defs -Xptxas -v -c "src/$t" -o "$o" 2> "build-gpu/v_${name}_$(basename "$t" .cu).ptxas" || exit 1
            objs+=("$o")
        done
        nvcc -gencode=arch=compute_90a,code=sm_90a -o "build-gpu/${BENCH}_$name" $OBJ/$BENCH.o $base "${objs[@]}" -lcublas -lcublasLt -lpthread
    ) &
done
wait
for v in "$@"; do
    name=$(echo "$v" | tr -c 'A-Za-z0-9_\n' '_')
    echo "== variant $v"
    [ -x "build-gpu/${BENCH}_$name" ] || { echo "variant $v: build failed"; cat build-gpu/v_${name}_*.ptxas | grep -m5 error; continue; }
    grep -h -E "spill stores" build-gpu/v_${name}_*.ptxas | sort | uniq -c | sort -rn | head -3
    grep -A3 -E "Compiling entry.*mx_rows_kernel.*Lb1ELb1ELNS_8RoundingE0ELNS0_10BlockStatsE0" build-gpu/v_${name}_hadamard_mxfp4.ptxas 2>/dev/null | grep -m1 -o "Used [0-9]* registers"
    "./build-gpu/${BENCH}_$name" --reps ${LAB_REPS:-20} | grep -E "$SHOW"
done
