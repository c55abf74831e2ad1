#!/usr/bin/env bash
# stop 44, second PTQ call: the GPU host's OpenBLAS kernels (Debian's choice vs lowbit's re-execution) on the 8B
# TurboBoA block with the Hessian grid search, alternating; test_cuda_ptq of the same pack.
set -uo pipefail
OUT=${OUT:-/tmp/out}
T=$OUT/s44b_log.txt
B=.gpu_pack/lowbit-gpu/bin
tar -C .gpu_pack -xJf .gpu_pack/lowbit-gpu.tar.xz lowbit-gpu/bin/test_cuda_ptq lowbit-gpu/bin/bench_ptq lowbit-gpu/PACK_INFO
el() { echo "[$SECONDS s]"; }
nvidia-smi --query-gpu=name --format=csv,noheader >> $T; grep -m1 "model name" /proc/cpuinfo >> $T; grep -m1 "^model\s" /proc/cpuinfo >> $T
head -1 .gpu_pack/lowbit-gpu/PACK_INFO >> $T
timeout 100 $B/test_cuda_ptq > $OUT/test_cuda_ptq.txt 2>&1; echo "test_cuda_ptq rc $? $(el)" >> $T
grep -E "^\[  (PASSED|FAILED)" $OUT/test_cuda_ptq.txt >> $T
for v in native generic; do
  e=(); [ $v = generic ] && e=(env LOWBIT_NATIVE_BLAS=0)
  echo "=== turboboa hessian 8b 1 block, blas $v $(el)" >> $T
  timeout 80 "${e[@]}" $B/bench_ptq --shape llama-8b --layers 1 --method turboboa --grid-search hessian --json $OUT/ptq8b_blas_$v.json >> $T 2>&1
  echo "rc $? $(el)" >> $T
done
grep -v "^quantize turboboa" $T
