#!/usr/bin/env bash
# ptq_trained_model.sh — issue 19's rows on a model lowbit trained itself, on the GPU host. Its widths are multiples
# of 256, so llama.cpp's mixes put a K-quant on every projection (SmolLM2's 576 cannot), and it is genuinely full
# precision (SmolLM2's reference is a dequantized Q4_1). Calibration and evaluation use the model's own kind of text:
# documents of the shards' train split (calibration) and of their val split, which training never saw (evaluation),
# decoded by scripts/shard_text.py on the dev machine and carried.
#   1. `lowbit train --config small --precision bf16` on the carried shards, exported as an F16 GGUF with SmolLM2's
#      tokenizer (the shards' tokenizer; its source file is not on the GPU host, so it is carried);
#   2. bench/ptq_vs_llama_cpp.sh on that model: llama-imatrix + llama-quantize (carried CPU binaries of
#      tests/peer/build_llama_cpp.sh) against lowbit's methods at llama.cpp's mixes, lowbit on the GPU;
#   3. bench/ptq_matrix.sh with bench/ptq_trained_cells.txt: the core INT / MXFP4 / W4A4 rows, all on the GPU.
# Results are tarred into $OUT/ptq_trained.tar.gz after each step, so a call cut short returns the finished ones.
#
#   bash bench/ptq_trained_model.sh --pack DIR [--steps N] [--skip compare|matrix] [--deadline S]
# The pack (scripts/pack_ptq_trained.sh makes it): hl/lowbit.xz and hl/shards.tar (as bench/train_headline.sh),
# ptq/{tokenizer.gguf (SmolLM2's tokenizer metadata, no tensors), sotu.tar.xz, calib.txt, val.txt, COMMIT},
# llama/{llama-imatrix,llama-quantize,llama-perplexity}.xz and whl/gguf-*.whl (the report reads GGUF tensor types).
set -uo pipefail
cd "$(dirname "$0")/.."
PACK="" STEPS=3000 SKIP="" DEADLINE=540
while [ $# -gt 0 ]; do
    case "$1" in
        --pack) PACK=$(realpath "$2"); shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --skip) SKIP=$2; shift 2 ;;
        --deadline) DEADLINE=$2; shift 2 ;;
        *) echo "usage: $0 --pack DIR [--steps N] [--skip compare|matrix] [--deadline S]" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-/tmp/out}
WORK=/tmp/ptq_trained
mkdir -p "$OUT" "$WORK/results" "$WORK/data/corpora" "$WORK/llama" "$WORK/mpack"
save() { (cd "$WORK/results" && tar -czf "$OUT/ptq_trained.tar.gz.tmp" . && mv "$OUT/ptq_trained.tar.gz.tmp" "$OUT/ptq_trained.tar.gz"); }
source bench/headline_pack.sh
unpack_headline_pack "$PACK/hl" || { echo "ptq_trained_model: cannot unpack $PACK/hl" >&2; exit 1; }
LOWBIT=$LOWBIT_BIN
[ -d "$WORK/data/corpora/sotu" ] || tar -C "$WORK/data/corpora" -xJf "$PACK/ptq/sotu.tar.xz"
export LOWBIT_SHARED_DATA=$WORK/data
for b in llama-imatrix llama-quantize llama-perplexity; do
    [ -x "$WORK/llama/$b" ] || { xz -dc "$PACK/llama/$b.xz" > "$WORK/llama/$b" && chmod +x "$WORK/llama/$b"; } || exit 1
done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$PACK"/whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
cp "$PACK/ptq/COMMIT" "$WORK/results/COMMIT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$WORK/results/gpu.txt" 2>/dev/null

run=$WORK/model-run
if [ ! -f "$run/report.json" ]; then
    "$LOWBIT" train --config small --data "$SHARDS" --device cuda --precision bf16 --steps "$STEPS" --seed 1 \
        --val-every 1000 --val-windows 64 --log-every 500 --export-dtype f16 --tokenizer "$PACK/ptq/tokenizer.gguf" \
        --no-progress --out "$run" > "$WORK/results/train.log" 2>&1 || { tail -n 5 "$WORK/results/train.log"; exit 1; }
fi
cp "$run/config.json" "$run/metrics.jsonl" "$run/report.json" "$WORK/results/"
tail -n 2 "$WORK/results/train.log"; echo "trained (${SECONDS} s)"; save

if [[ $SKIP != compare ]]; then
    echo "=== llama.cpp vs lowbit at the mixes (${SECONDS} s)"
    MODEL=$run/model.gguf NAME=trained-small SOURCE="F16, trained by lowbit (small, BF16, $STEPS steps)" \
        CALIB_TEXT=$PACK/ptq/calib.txt EVAL_TEXT=$PACK/ptq/val.txt CHUNKS=32 IMATRIX_ALL=1 DEVICE=cuda THREADS=16 \
        METHODS="rtn gptq turboboa" LOWBIT=$LOWBIT LLAMA_BIN=$WORK/llama WORK=$WORK/compare PYTHON=python3 \
        REPORT=$WORK/results/compare.md bash bench/ptq_vs_llama_cpp.sh > "$WORK/results/compare.log" 2>&1
    echo "rc $?"; tail -n 4 "$WORK/results/compare.log"
    mkdir -p "$WORK/results/compare" && cp "$WORK"/compare/*.json "$WORK"/compare/*.time "$WORK"/compare/*.cmd \
        "$WORK"/compare/perplexity_*.txt "$WORK/results/compare/" 2>/dev/null
    save
fi
if [[ $SKIP != matrix ]]; then
    echo "=== core rows (${SECONDS} s)"
    ln -sf "$PACK/hl/lowbit.xz" "$WORK/mpack/lowbit.xz"; ln -sf "$PACK/ptq/COMMIT" "$WORK/mpack/COMMIT"
    ln -sf "$PACK/ptq/sotu.tar.xz" "$WORK/mpack/sotu.tar.xz"
    bash bench/ptq_matrix.sh --pack "$WORK/mpack" --model "$run/model.gguf" --cells bench/ptq_trained_cells.txt \
        --deadline $((DEADLINE - SECONDS)) --table-args "--eval-text $PACK/ptq/val.txt --chunks 32 \
        --calib-text $PACK/ptq/calib.txt --calib-samples 16 --calib-len 512" > "$WORK/results/matrix.log" 2>&1
    echo "rc $?"; tail -n 3 "$WORK/results/matrix.log"
    rm -rf "$WORK/results/cells" && cp -r /tmp/ptq_matrix/cells "$WORK/results/cells"
    save
fi
ls -la "$OUT"
