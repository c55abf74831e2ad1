#!/usr/bin/env bash
# bench/ptq_cuda_h200.sh — on the GPU host: the GPU PTQ tests, then bench_ptq (time and peak GPU memory of
# `lowbit quantize --device cuda`) on random models shaped like SmolLM2-135M, Llama-3.2-1B, Llama-3-8B and
# Llama-3.1-70B. Run from the repository root with .gpu_pack carried (scripts/pack_gpu.sh builds it):
#   bash bench/ptq_cuda_h200.sh [RUN...]   RUN: tests smollm2 smollm2-fp32 1b 8b 8b-full 70b turboboa
#                                         (default: tests smollm2 1b 8b 70b turboboa)
# Logs and JSON go to $OUT (the device machine sets it). bench/results/ptq_cuda_h200.md holds the table.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.gpu_pack/out}
mkdir -p "$OUT"
PACK=.gpu_pack/lowbit-gpu.tar.xz
DIR=.gpu_pack/lowbit-gpu
if [ ! -x "$DIR/bin/bench_ptq" ]; then
    python3 -c 'import sys, tarfile
safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **safe)' "$PACK" .gpu_pack || { echo "cannot unpack $PACK"; exit 1; }
fi
BIN=$DIR/bin
COMMIT=$(sed -n 's/^commit: //p' "$DIR/PACK_INFO")
runs=${*:-tests smollm2 1b 8b 70b turboboa}
bench() {  # name, timeout, bench_ptq args
    local name=$1 limit=$2
    shift 2
    echo "== $name: bench_ptq $*"
    timeout "$limit" "$BIN/bench_ptq" "$@" --commit "$COMMIT" --json "$OUT/$name.json" 2>&1 | grep -v '^quantize gptq\|^quantize turboboa' | tee "$OUT/$name.log"
    echo "   (exit ${PIPESTATUS[0]})"
}
for r in $runs; do
    case $r in
        tests) (cd "$DIR" && ctest -R 'test_cuda_ptq|test_cuda_model' --output-on-failure 2>&1 | tail -40)
               "$BIN/test_cuda_ptq" 2>&1 | grep -E '^\s+(int4|q4_k|mxfp4|gptq|turboboa):' ;;
        smollm2) bench smollm2_gptq_bf16 120 --shape smollm2 --method gptq --format int4 --grid-search minmax --calib-precision bf16
                 bench smollm2_rtn 60 --shape smollm2 --method rtn --format int4 --grid-search minmax ;;
        smollm2-fp32) bench smollm2_gptq_fp32 120 --shape smollm2 --method gptq --format int4 --grid-search minmax --calib-precision fp32 ;;
        1b) bench llama1b_gptq 150 --shape llama-1b --layers 4 --method gptq --format int4 --grid-search minmax ;;
        8b) bench llama8b_gptq 200 --shape llama-8b --layers 2 --method gptq --format int4 --grid-search minmax ;;
        8b-full) bench llama8b_gptq_full 580 --shape llama-8b --method gptq --format int4 --grid-search minmax ;;
        70b) bench llama70b_gptq 200 --shape llama-70b --layers 1 --method gptq --format int4 --grid-search minmax ;;
        turboboa) bench smollm2_turboboa 200 --shape smollm2 --method turboboa --format int4 --grid-search minmax
                  bench llama8b_turboboa 300 --shape llama-8b --layers 1 --method turboboa --format int4 --grid-search minmax ;;
        *) echo "unknown run $r" ;;
    esac
done
