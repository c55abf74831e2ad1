#!/usr/bin/env bash
# run_lab.sh — builds and runs one lab program dev/kernel_lab/NAME.cu on the GPU machine, linked against the
# objects of scripts/gpu_check.sh --build-only (built first when missing):
#   bash dev/kernel_lab/run_lab.sh tma_rows_lab      (the TMA-fed row kernel, session 13)
#   bash dev/kernel_lab/run_lab.sh scatter_lab       (the OE-right column scatter orders, session 15)
set -uo pipefail
cd "$(dirname "$0")/../.."
NAME=${1:?usage: run_lab.sh NAME (dev/kernel_lab/NAME.cu)}
[ -f "dev/kernel_lab/$NAME.cu" ] || { echo "no dev/kernel_lab/$NAME.cu" >&2; exit 2; }
OBJ=build-gpu/obj
[ -f $OBJ/test_kernels.o ] || bash scripts/gpu_check.sh --build-only > /dev/null 2>&1
NVF="-O3 -std=c++20 --fmad=false -lineinfo -gencode=arch=compute_90a,code=sm_90a -Isrc -DLOWBIT_HAVE_CUDA=1 -DFMT_USE_CONSTEXPR=1 -Xcompiler=-ffp-contract=off"
[ -d .gpu_deps/include ] && NVF="$NVF -I.gpu_deps/include"
nvcc $NVF -Xptxas -v -c "dev/kernel_lab/$NAME.cu" -o "$OBJ/lab_$NAME.o" 2> "build-gpu/lab_$NAME.ptxas" || { cat "build-gpu/lab_$NAME.ptxas"; exit 1; }
base=$(ls $OBJ/*.o | grep -v -E "/(test_|bench_|gtest|cli_|v_|lab_)")
nvcc -gencode=arch=compute_90a,code=sm_90a -o "build-gpu/$NAME" "$OBJ/lab_$NAME.o" $base -lcublas -lcublasLt -lpthread || exit 1
"./build-gpu/$NAME"
