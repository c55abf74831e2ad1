#!/usr/bin/env bash
# gpu_train_check.sh — on the GPU host: the training engine's GPU suites and benchmarks from a small pack
# (.gpu_pack/train1.tar.xz holding t/<binary>: the five new GPU suites and bench_train, bench_flash_attention,
# bench_mx_gemm), then the PyTorch baseline of issue 20's speed goal (bench/train_torch.py) in the same call.
# Logs and JSON go to $OUT. Each step has its own time box so one hang does not take the others.
#   run(command="bash scripts/gpu_train_check.sh", carry=[".gpu_pack/train1.tar.xz"])
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/lb && tar -C /tmp/lb -xJf .gpu_pack/train1.tar.xz
B=/tmp/lb/t
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
step() { local name=$1 limit=$2; shift 2; echo "=== $name"; local t0=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1; local rc=$?
    echo "$name rc $rc  $((SECONDS - t0)) s"; tail -n "${TAIL:-25}" "$OUT/$name.txt"; }
for t in test_cuda_train_ops test_cuda_flash_attention test_cuda_trainer test_cuda_lp_matmul test_cuda_mx_gemm_fp8; do
    TAIL=8 step "$t" 150 "$B/$t" --gtest_brief=1
done
step bench_flash_attention 60 "$B/bench_flash_attention"
step bench_train_base 150 "$B/bench_train" --shape base --steps 8 --warmup 3 --precision bf16,mxfp4-iht,adahop-lv1 --json "$OUT/bench_train_base.json"
step torch_base_compile 200 python3 bench/train_torch.py --shape base --compile
step torch_base_eager 100 python3 bench/train_torch.py --shape base --no-compile
step bench_mx_gemm 100 "$B/bench_mx_gemm" --quick
