#!/usr/bin/env bash
# bench_variants.sh — kernel lab: rebuild bench_kernels with compile-time variants of the MX row kernels
# and time them in the same run as the default build. Run after scripts/gpu_check.sh (reuses build-gpu/obj).
#   bash dev/kernel_lab/bench_variants.sh "LOWBIT_MX_ROWS_ITEMS=1" ...
set -uo pipefail
cd "$(dirname "$0")/../.."
OBJ=build-gpu/obj
[ -f $OBJ/bench_kernels.o ] || { echo "run scripts/gpu_check.sh first" >&2; exit 1; }
base=$(ls $OBJ/*.o | grep -v -E "/(test_|bench_|gtest|cli_)|mx_quantize|hadamard_mxfp4")
NVF="-O3 -std=c++20 --fmad=false -lineinfo -gencode=arch=compute_90a,code=sm_90a -Isrc -DLOWBIT_HAVE_CUDA=1 -DFMT_USE_CONSTEXPR=1 -Xcompiler=-ffp-contract=off"
for v in "$@"; do
    name=$(echo "$v" | tr -c 'A-Za-z0-9_\n' '_')
    nvcc $NVF -D"$v" -Xptxas -v -c src/formats/cuda/mx_quantize.cu -o $OBJ/v_$name.mxq.o 2> build-gpu/v_$name.ptxas
    nvcc $NVF -D"$v" -c src/hadamard/cuda/hadamard_mxfp4.cu -o $OBJ/v_$name.hm.o
    nvcc -gencode=arch=compute_90a,code=sm_90a -o build-gpu/bench_$name $OBJ/bench_kernels.o $base $OBJ/v_$name.mxq.o $OBJ/v_$name.hm.o -lcublas -lpthread
    echo "== variant $v"
    grep -A2 "mx_rows_kernelI13__nv_bfloat16Lb1ELb1ELNS_8RoundingE0" build-gpu/v_$name.ptxas | grep -o "Used [0-9]* registers" | head -1 || true
    ./build-gpu/bench_$name --reps 20 | sed -n '/^kernel /,$p' | grep -E "memcpy|mxfp4 rceil axis|hadamard\+mxfp4 axis [01] |hadamard\+mxfp4 both "
done
