#!/usr/bin/env bash
# ptq_trained_model.sh — issue 19's K-quant rows on a model lowbit trained itself, on the GPU host: its widths
# are multiples of 256, so llama.cpp's mixes put a K-quant on every projection (SmolLM2's 576 cannot).
#   1. `lowbit train --config small --precision bf16` on the carried shards, exported as an F16 GGUF with
#      SmolLM2's tokenizer (the shards' tokenizer; its source file is not on the GPU host, so it is carried);
#   2. per mix, scripts/ptq_table.sh: RTN, GPTQ and TurboBoA on the GPU, each file evaluated on the SOTU test
#      split (llama.cpp's protocol, 8 × 512) with KLD against the F16 model; results tarred into
#      $OUT/ptq_trained.tar.gz after every mix, so a call cut short still returns the finished ones.
#
#   bash bench/ptq_trained_model.sh --pack DIR [--steps N] [--mixes "q3_k_m q2_k q4_k_m"] [--methods "…"]
# The pack: hl/lowbit.xz and hl/shards.tar (as bench/train_headline.sh), ptq/tokenizer.gguf (SmolLM2's
# tokenizer metadata, no tensors) and ptq/sotu.tar.xz (../shared/data/corpora/sotu, for the SOTU corpora).
set -uo pipefail
cd "$(dirname "$0")/.."
PACK="" STEPS=3000 MIXES="q3_k_m q2_k q4_k_m" METHODS="gptq turboboa rtn"
while [ $# -gt 0 ]; do
    case "$1" in
        --pack) PACK=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --mixes) MIXES=$2; shift 2 ;;
        --methods) METHODS=$2; shift 2 ;;
        *) echo "usage: $0 --pack DIR [--steps N] [--mixes \"M …\"] [--methods \"rtn gptq turboboa\"]" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-/tmp/out}
WORK=/tmp/ptq_trained
mkdir -p "$OUT" "$WORK/results" "$WORK/data/corpora"
source bench/headline_pack.sh
unpack_headline_pack "$PACK/hl" || { echo "ptq_trained_model: cannot unpack $PACK/hl" >&2; exit 1; }
LOWBIT=$LOWBIT_BIN
[ -d "$WORK/data/corpora/sotu" ] || tar -C "$WORK/data/corpora" -xJf "$PACK/ptq/sotu.tar.xz"
export LOWBIT_SHARED_DATA=$WORK/data
run=$WORK/model-run
if [ ! -f "$run/report.json" ]; then
    "$LOWBIT" train --config small --data "$SHARDS" --device cuda --precision bf16 --steps "$STEPS" --seed 1 \
        --val-every 1000 --val-windows 64 --log-every 500 --export-dtype f16 --tokenizer "$PACK/ptq/tokenizer.gguf" \
        --no-progress --out "$run" > "$WORK/results/train.log" 2>&1 || { tail -n 5 "$WORK/results/train.log"; exit 1; }
fi
cp "$run/config.json" "$run/metrics.jsonl" "$run/report.json" "$WORK/results/"
tail -n 2 "$WORK/results/train.log"
for mix in $MIXES; do
    echo "=== $mix (${SECONDS} s)"
    LOWBIT=$LOWBIT bash scripts/ptq_table.sh --mix "$mix" --model "$run/model.gguf" --methods "$METHODS" \
        --out "$WORK/q_$mix" --eval-device cuda --device cuda --calib-samples 16 --calib-len 512 \
        > "$WORK/results/table_$mix.txt" 2>&1
    echo "rc $?"; tail -n 6 "$WORK/results/table_$mix.txt"
    mkdir -p "$WORK/results/$mix" && cp "$WORK/q_$mix"/*.json "$WORK/results/$mix/" 2>/dev/null
    (cd "$WORK/results" && tar -czf "$OUT/ptq_trained.tar.gz.tmp" . && mv "$OUT/ptq_trained.tar.gz.tmp" "$OUT/ptq_trained.tar.gz")
done
ls -la "$OUT"
