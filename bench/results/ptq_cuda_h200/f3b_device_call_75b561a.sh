#!/usr/bin/env bash
# stop 44 device call: test_cuda_ptq (F3b per-channel products on the GPU, block_v automatic); 8B TurboBoA one
# block with the Hessian grid search: this pack (automatic block_v, F3b products on the device) against c4d7640's
# bench_ptq with --value-products by-group (F3b per-channel one-sided on the host), alternating, same machine.
set -uo pipefail
OUT=${OUT:-/tmp/out}
T=$OUT/s44_log.txt
B=.gpu_pack/lowbit-gpu/bin
[ -x $B/test_cuda_ptq ] || tar -C .gpu_pack -xJf .gpu_pack/lowbit-gpu.tar.xz lowbit-gpu/bin/test_cuda_ptq lowbit-gpu/bin/bench_ptq lowbit-gpu/PACK_INFO
el() { echo "[$SECONDS s]"; }
nvidia-smi --query-gpu=name,memory.total --format=csv >> $T 2>&1
head -1 .gpu_pack/lowbit-gpu/PACK_INFO >> $T
timeout 150 $B/test_cuda_ptq > $OUT/test_cuda_ptq.txt 2>&1; echo "test_cuda_ptq rc $? $(el)" >> $T
grep -E "^\[  (FAILED|PASSED) |one-sided int3" $OUT/test_cuda_ptq.txt >> $T
xz -dc .gpu_abl/bench_ptq_c4d7640.xz > /tmp/bench_ptq_c4d7640 && chmod +x /tmp/bench_ptq_c4d7640
for rep in 1 2; do for v in new c4d7640; do
  bin=$B/bench_ptq; a=(); [ $v = c4d7640 ] && { bin=/tmp/bench_ptq_c4d7640; a=(--value-products by-group); }
  echo "=== turboboa hessian 8b 1 block, $v rep $rep $(el)" >> $T
  timeout 80 $bin --shape llama-8b --layers 1 --method turboboa --grid-search hessian "${a[@]}" --json $OUT/ptq8b_${v}_$rep.json >> $T 2>&1
  echo "rc $? $(el)" >> $T
  [ $SECONDS -gt ${UNTIL:-400} ] && break 2
done; done
grep -v "^quantize turboboa" $T | tail -40
