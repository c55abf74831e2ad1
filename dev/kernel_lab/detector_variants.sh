#!/usr/bin/env bash
# detector_variants.sh — kernel lab: times the detector's device part (dev/kernel_lab/detector_lab.cu) with
# the tree's src/adahop/cuda/outlier_stats.cu and with each variant given (an edited copy of that file).
# Run on the GPU host after scripts/gpu_check.sh (reuses build-gpu/obj).
#   bash dev/kernel_lab/detector_variants.sh [variant.cu ...]
set -uo pipefail
cd "$(dirname "$0")/../.."
OBJ=build-gpu/obj
[ -f $OBJ/adahop_cuda_outlier_stats.cu.o ] || { echo "run scripts/gpu_check.sh first" >&2; exit 1; }
NVF="-O3 -std=c++20 --fmad=false -lineinfo -gencode=arch=compute_90a,code=sm_90a -Isrc -DLOWBIT_HAVE_CUDA=1 -DFMT_USE_CONSTEXPR=1 -Xcompiler=-ffp-contract=off"
base=$(ls $OBJ/*.o | grep -v -E "/(test_|bench_|gtest|cli_|lab_|v_)|adahop_cuda_outlier_stats")
nvcc $NVF -c dev/kernel_lab/detector_lab.cu -o $OBJ/lab_driver.o || exit 1
run() {  # name, object of the statistics TU
    nvcc -gencode=arch=compute_90a,code=sm_90a -o "build-gpu/lab_$1" $OBJ/lab_driver.o "$2" $base -lcublas -lcublasLt -lpthread \
        && "./build-gpu/lab_$1" "$1"
}
run tree $OBJ/adahop_cuda_outlier_stats.cu.o
for v in "$@"; do
    name=$(basename "$v" .cu)
    cp "$v" src/adahop/cuda/lab_variant_tmp.cu  # compiled in place so that its includes resolve
    nvcc $NVF -c src/adahop/cuda/lab_variant_tmp.cu -o "$OBJ/lab_$name.o"
    rm -f src/adahop/cuda/lab_variant_tmp.cu
    run "$name" "$OBJ/lab_$name.o"
done
