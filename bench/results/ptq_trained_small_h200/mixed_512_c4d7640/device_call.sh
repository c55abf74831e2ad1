#!/usr/bin/env bash
# device call (written at stop 43, for the next session): test_cuda_ptq (block_v by group, RoPE averages); 8B TurboBoA
# block with block_v by head / by group / the 65da24d binary; GPTQ /
# TurboBoA / RTN on a freshly trained small model at llama.cpp's mixes (512 x 512 calibration) while time is left
set -uo pipefail
OUT=${OUT:-/tmp/out}
T=$OUT/s43ptq_log.txt
B=.gpu_pack/lowbit-gpu/bin
[ -x $B/test_cuda_ptq ] || tar -C .gpu_pack -xJf .gpu_pack/lowbit-gpu.tar.xz lowbit-gpu/bin/lowbit lowbit-gpu/bin/test_cuda_ptq lowbit-gpu/bin/bench_ptq lowbit-gpu/PACK_INFO
el() { echo "[$SECONDS s]"; }
nvidia-smi --query-gpu=name,memory.total --format=csv >> $T 2>&1
head -1 .gpu_pack/lowbit-gpu/PACK_INFO >> $T
if [ ! -f /tmp/ptq_tested ]; then
  timeout 150 $B/test_cuda_ptq > $OUT/test_cuda_ptq.txt 2>&1; echo "test_cuda_ptq rc $? $(el)" >> $T; touch /tmp/ptq_tested
  tail -3 $OUT/test_cuda_ptq.txt >> $T
fi
# 8B TurboBoA, one block: block_v by head and by group (this pack), and 65da24d's bench_ptq as the baseline
if [ ! -f $OUT/ptq8b_by_group.json ]; then
  [ -f .gpu_abl/bench_ptq_old.xz ] && xz -dc .gpu_abl/bench_ptq_old.xz > /tmp/bench_ptq_old && chmod +x /tmp/bench_ptq_old
  for v in by-group by-head $([ -f .gpu_abl/bench_ptq_old.xz ] && echo old); do
    bin=$B/bench_ptq; a=(--value-products $v); [ $v = old ] && { bin=/tmp/bench_ptq_old; a=(); }
    echo "=== turboboa hessian 8b 1 block, $v $(el)" >> $T
    timeout 75 $bin --shape llama-8b --layers 1 --method turboboa --grid-search hessian "${a[@]}" --json $OUT/ptq8b_${v/-/_}.json >> $T 2>&1
    echo "rc $? $(el)" >> $T
  done
fi
# trained model
mkdir -p /tmp/abl && [ -d /tmp/abl/shards ] || { tar -C /tmp/abl -xf .gpu_abl/shards.tar && xz -d /tmp/abl/shards/*.xz; }
W=/tmp/ptqt; mkdir -p $W/res
if [ ! -f $W/run/report.json ]; then
  $B/lowbit train --config small --data /tmp/abl/shards --device cuda --precision bf16 --steps 3000 --seed 1 --val-every 1000 \
    --val-windows 64 --log-every 500 --export-dtype f16 --tokenizer .gpu_abl/tokenizer.gguf --no-progress --out $W/run > $W/res/train.log 2>&1
  echo "train rc $? $(el)" >> $T; tail -2 $W/res/train.log >> $T
  cp $W/run/config.json $W/run/metrics.jsonl $W/run/report.json $W/res/
fi
[ $SECONDS -gt ${PTQ_UNTIL:-330} ] && exit 0
M=$W/run/model.gguf
E=(--text .gpu_abl/val.txt --ctx 512 --chunks 32 --device cuda --no-progress --json)
[ -f $W/res/eval_base.json ] || $B/lowbit eval --model $M "${E[@]}" --save-logits $W/base.kld > $W/res/eval_base.json 2>> $T
for mix in ${MIXES:-Q2_K Q3_K_M Q4_K_M}; do for method in ${METHODS:-gptq turboboa rtn}; do
  tag=${mix}_$method
  [ -f $W/res/eval_$tag.json ] && continue
  [ $SECONDS -gt ${PTQ_UNTIL:-330} ] && break 2
  $B/lowbit quantize --model $M --method $method --mix $mix --calib-text .gpu_abl/calib_large.txt --calib-samples 512 \
    --calib-len 512 --device cuda --out $W/$tag.gguf --report $W/res/quantize_$tag.json --quiet >> $T 2>&1
  echo "quantize $tag rc $? $(el)" >> $T
  $B/lowbit eval --model $W/$tag.gguf "${E[@]}" --kld-base $W/base.kld > $W/res/eval_$tag.json 2>> $T
  ls -l $W/$tag.gguf | awk '{print $5}' > $W/res/bytes_$tag.txt
  (cd $W/res && tar -czf $OUT/ptq_trained.tar.gz.tmp . && mv $OUT/ptq_trained.tar.gz.tmp $OUT/ptq_trained.tar.gz)
done; done
grep -v "^blk\|^ *(" $T | tail -60
