#!/usr/bin/env bash
# train_headline.sh — issue 20's headline experiment on the GPU host: the same model, data, seed and token
# budget trained with each precision recipe (`lowbit train --device cuda`), validation loss along the way,
# then one plot of all curves and a table (bench/train_headline_table.py). Everything comes back as one
# tarball in $OUT (the device tool returns at most 8 files).
#
#   bash bench/train_headline.sh --pack DIR_WITH(lowbit.xz, shards.tar) --config small --steps N \
#        --precisions "bf16 mxfp4 …" [--val-every K] [--tag NAME]
# The pack: lowbit.xz (the portable binary) and shards/ (scripts/subset_shards.py --xz output, tarred).
set -uo pipefail
cd "$(dirname "$0")/.."
PACK="" CONFIG=small STEPS=1000 PRECISIONS="bf16" VAL_EVERY=250 TAG=headline VAL_WINDOWS=64 TIME_LIMIT=400
while [ $# -gt 0 ]; do
    case "$1" in
        --pack) PACK=$2; shift 2 ;;
        --config) CONFIG=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --precisions) PRECISIONS=$2; shift 2 ;;
        --val-every) VAL_EVERY=$2; shift 2 ;;
        --val-windows) VAL_WINDOWS=$2; shift 2 ;;
        --time-limit) TIME_LIMIT=$2; shift 2 ;;
        --tag) TAG=$2; shift 2 ;;
        *) echo "usage: $0 --pack DIR [--config C] [--steps N] [--precisions \"P …\"] [--val-every K] [--tag T]" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-/tmp/out}
WORK=/tmp/headline
mkdir -p "$OUT" "$WORK/runs"
[ -x "$WORK/lowbit" ] || xz -dc "$PACK/lowbit.xz" > "$WORK/lowbit" && chmod +x "$WORK/lowbit"
if [ ! -f "$WORK/shards/manifest.json" ]; then
    tar -C "$WORK" -xf "$PACK/shards.tar" && (cd "$WORK/shards" && for f in *.xz; do xz -d "$f"; done)
fi
for p in $PRECISIONS; do
    echo "=== $p: $STEPS steps of $CONFIG"
    t0=$SECONDS
    "$WORK/lowbit" train --config "$CONFIG" --data "$WORK/shards" --device cuda --precision "$p" --steps "$STEPS" \
        --val-every "$VAL_EVERY" --val-windows "$VAL_WINDOWS" --log-every 25 --peak-tflops 989 --no-progress \
        --time-limit "$TIME_LIMIT" --out "$WORK/runs/$p" > "$WORK/runs/$p.log" 2>&1
    echo "rc $? after $((SECONDS - t0)) s"; tail -n 4 "$WORK/runs/$p.log"
done
"$WORK/lowbit" plot --out "$WORK/runs/${TAG}_val.svg" --metric val_loss "$WORK"/runs/*/ > /dev/null 2>&1
"$WORK/lowbit" plot --out "$WORK/runs/${TAG}_loss.svg" --metric loss "$WORK"/runs/*/ > /dev/null 2>&1
(cd "$WORK/runs" && tar -czf "$OUT/$TAG.tar.gz" --exclude='checkpoints' --exclude='*.gguf' --exclude='hf' --exclude='*.safetensors' .)
ls -la "$OUT"
