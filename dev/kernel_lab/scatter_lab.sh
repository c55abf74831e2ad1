#!/usr/bin/env bash
# scatter_lab.sh — builds and runs dev/kernel_lab/scatter_lab.cu on the GPU machine (after
# scripts/gpu_check.sh --build-only, whose objects it links against).
set -uo pipefail
cd "$(dirname "$0")/../.."
OBJ=build-gpu/obj
[ -f $OBJ/test_kernels.o ] || bash scripts/gpu_check.sh --build-only > /dev/null 2>&1
NVF="-O3 -std=c++20 --fmad=false -lineinfo -gencode=arch=compute_90a,code=sm_90a -Isrc -DLOWBIT_HAVE_CUDA=1 -DFMT_USE_CONSTEXPR=1 -Xcompiler=-ffp-contract=off"
[ -d .gpu_deps/include ] && NVF="$NVF -I.gpu_deps/include"
nvcc $NVF -Xptxas -v -c dev/kernel_lab/scatter_lab.cu -o $OBJ/lab_scatter.o 2> build-gpu/lab_scatter.ptxas || { cat build-gpu/lab_scatter.ptxas; exit 1; }
base=$(ls $OBJ/*.o | grep -v -E "/(test_|bench_|gtest|cli_|v_|lab_)")
nvcc -gencode=arch=compute_90a,code=sm_90a -o build-gpu/scatter_lab $OBJ/lab_scatter.o $base -lcublas -lcublasLt -lpthread || exit 1
./build-gpu/scatter_lab
