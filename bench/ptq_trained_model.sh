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
#        [--calib-samples S] [--mixes "Q4_K_M Q3_K_M Q2_K"] [--methods "rtn gptq turboboa"] [--only REGEX] [--tag T]
# --calib-samples: windows of 512 tokens for every quantizer (default 16; llama-imatrix gets as many); --calib FILE:
# the calibration text in the pack's ptq/ (default calib.txt, 100 k tokens; calib_large.txt, 1.2 M); --only: the
# cells to run; --tag: a suffix for the result folders, so runs with other settings sit beside each other.
# The pack (scripts/pack_ptq_trained.sh makes it): hl/lowbit.xz and hl/shards.tar (as bench/train_headline.sh),
# ptq/{tokenizer.gguf (SmolLM2's tokenizer metadata, no tensors), sotu.tar.xz, calib.txt, val.txt, COMMIT},
# llama/{llama-imatrix,llama-quantize,llama-perplexity}.xz and whl/gguf-*.whl (the report reads GGUF tensor types).
set -uo pipefail
cd "$(dirname "$0")/.."
PACK="" STEPS=3000 SKIP="" DEADLINE=540 SAMPLES=16 MIXES="Q4_K_M Q3_K_M Q2_K" METHODS="rtn gptq turboboa" ONLY="" TAG="" CALIB=calib.txt
while [ $# -gt 0 ]; do
    case "$1" in
        --pack) PACK=$(realpath "$2"); shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --skip) SKIP=$2; shift 2 ;;
        --deadline) DEADLINE=$2; shift 2 ;;
        --calib-samples) SAMPLES=$2; shift 2 ;;
        --mixes) MIXES=$2; shift 2 ;;
        --methods) METHODS=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --tag) TAG=$2; shift 2 ;;
        --calib) CALIB=$2; shift 2 ;;
        *) echo "usage: $0 --pack DIR [--steps N] [--skip compare|matrix] [--deadline S] [--calib-samples S] [--calib FILE]" \
               "[--mixes \"M …\"] [--methods \"M …\"] [--only REGEX] [--tag T]" >&2; exit 2 ;;
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
        CALIB_TEXT=$PACK/ptq/$CALIB EVAL_TEXT=$PACK/ptq/val.txt CHUNKS=32 CALIB_CHUNKS=$SAMPLES \
        IMATRIX_ALL=$([ "$SAMPLES" = 16 ] && echo 1 || echo 0) DEVICE=cuda THREADS=16 MIXES=$MIXES METHODS=$METHODS \
        LOWBIT=$LOWBIT LLAMA_BIN=$WORK/llama WORK=$WORK/compare$TAG PYTHON=python3 REPORT=$WORK/results/compare$TAG.md \
        bash bench/ptq_vs_llama_cpp.sh > "$WORK/results/compare$TAG.log" 2>&1
    echo "rc $?"; tail -n 4 "$WORK/results/compare$TAG.log"
    mkdir -p "$WORK/results/compare$TAG" && cp "$WORK/compare$TAG"/*.json "$WORK/compare$TAG"/*.time \
        "$WORK/compare$TAG"/*.cmd "$WORK/compare$TAG"/perplexity_*.txt "$WORK/results/compare$TAG/" 2>/dev/null
    save
fi
if [[ $SKIP != matrix ]]; then
    echo "=== core rows (${SECONDS} s)"
    ln -sf "$PACK/hl/lowbit.xz" "$WORK/mpack/lowbit.xz"; ln -sf "$PACK/ptq/COMMIT" "$WORK/mpack/COMMIT"
    ln -sf "$PACK/ptq/sotu.tar.xz" "$WORK/mpack/sotu.tar.xz"
    rm -rf /tmp/ptq_matrix/cells  # a finished cell is skipped: another tag's cells must not stand in for these
    bash bench/ptq_matrix.sh --pack "$WORK/mpack" --model "$run/model.gguf" --cells bench/ptq_trained_cells.txt \
        --only "${ONLY:-.}" --deadline $((DEADLINE - SECONDS)) --table-args "--eval-text $PACK/ptq/val.txt --chunks 32 \
        --calib-text $PACK/ptq/$CALIB --calib-samples $SAMPLES --calib-len 512" > "$WORK/results/matrix$TAG.log" 2>&1
    echo "rc $?"; tail -n 3 "$WORK/results/matrix$TAG.log"
    rm -rf "$WORK/results/cells$TAG" && cp -r /tmp/ptq_matrix/cells "$WORK/results/cells$TAG"
    save
fi
ls -la "$OUT"
