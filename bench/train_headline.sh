#!/usr/bin/env bash
# train_headline.sh — issue 20's headline experiment on the GPU host: the same model, data, seed and token
# budget trained with each precision recipe (`lowbit train --device cuda`), validation loss along the way,
# then one plot of all curves. A run that does not fit in this call stops with a checkpoint (--time-limit)
# and the next call of the same command resumes it (--resume), as long as the machine is still warm; a
# finished run (its report.json exists) is skipped. After every recipe the runs' logs and metrics are
# tarred into $OUT/TAG.tar.gz, so a call cut short still returns what finished.
#
#   bash bench/train_headline.sh --pack DIR_WITH(lowbit.xz, shards.tar) --config small|FILE.json \
#        --precisions "bf16 mxfp4 …" [--steps N] [--val-every K] [--val-windows W] [--budget S] [--tag NAME]
#        [--extra "ARGS"]
# Runs live in /tmp/headline/runs-TAG/PRECISION; --extra passes more options to every `lowbit train`
# (e.g. "--stop-at 2000 --probe-every 250" for a slot-error probe run on the same schedule).
# A run may carry its own options after its precision: "mxfp4+mx-slots=wgrad" runs `--precision mxfp4
# --mx-slots wgrad` in runs-TAG/mxfp4+mx-slots=wgrad (the ablations of docs/train.md; "bf16+seed=2" likewise).
# The pack: lowbit.xz (the portable binary) and shards/ (scripts/subset_shards.py --xz output, tarred).
# --budget: seconds of this call the training may use (default 540; the device tool's limit is 600 a call).
set -uo pipefail
cd "$(dirname "$0")/.."
PACK="" CONFIG=small STEPS="" PRECISIONS="bf16" VAL_EVERY=250 TAG=headline VAL_WINDOWS=64 BUDGET=540 EXTRA=""
while [ $# -gt 0 ]; do
    case "$1" in
        --pack) PACK=$2; shift 2 ;;
        --config) CONFIG=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --precisions) PRECISIONS=$2; shift 2 ;;
        --val-every) VAL_EVERY=$2; shift 2 ;;
        --val-windows) VAL_WINDOWS=$2; shift 2 ;;
        --budget) BUDGET=$2; shift 2 ;;
        --tag) TAG=$2; shift 2 ;;
        --extra) EXTRA=$2; shift 2 ;;
        *) echo "usage: $0 --pack DIR [--config C] [--steps N] [--precisions \"P …\"] [--val-every K] [--budget S] [--tag T] [--extra \"ARGS\"]" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-/tmp/out}
WORK=/tmp/headline
RUNS=$WORK/runs-$TAG
mkdir -p "$OUT" "$RUNS"
source bench/headline_pack.sh
unpack_headline_pack "$PACK" || { echo "train_headline: cannot unpack $PACK" >&2; exit 1; }
STEP_ARGS=(); [ -n "$STEPS" ] && STEP_ARGS=(--steps "$STEPS")
read -r -a EXTRA_ARGS <<< "$EXTRA"
pack_results() {
    "$LOWBIT_BIN" plot --out "$RUNS/${TAG}_val.svg" --metric val_loss "$RUNS"/*/ > /dev/null 2>&1
    "$LOWBIT_BIN" plot --out "$RUNS/${TAG}_loss.svg" --metric loss "$RUNS"/*/ > /dev/null 2>&1
    (cd "$RUNS" && tar -czf "$OUT/$TAG.tar.gz.tmp" --exclude='checkpoints' --exclude='*.gguf' --exclude='hf' \
        --exclude='*.safetensors' . && mv "$OUT/$TAG.tar.gz.tmp" "$OUT/$TAG.tar.gz")
}
for run in $PRECISIONS; do
    dir="$RUNS/$run"
    IFS='+' read -r -a parts <<< "$run"
    p=${parts[0]}
    RUN_ARGS=()
    for opt in "${parts[@]:1}"; do RUN_ARGS+=("--${opt%%=*}" "${opt#*=}"); done
    if [ -f "$dir/report.json" ]; then echo "=== $run: finished in an earlier call"; continue; fi
    left=$((BUDGET - SECONDS))
    if [ "$left" -lt 60 ]; then echo "=== $run: not started, ${left} s of this call's budget left"; break; fi
    resume=(); [ -d "$dir/checkpoints" ] && resume=(--resume)
    echo "=== $run: ${resume[*]:-new run}, time limit $((left - 20)) s"
    t0=$SECONDS
    "$LOWBIT_BIN" train --config "$CONFIG" --data "$SHARDS" --device cuda --precision "$p" "${STEP_ARGS[@]}" \
        --val-every "$VAL_EVERY" --val-windows "$VAL_WINDOWS" --log-every 50 --peak-tflops 989 --no-progress \
        --time-limit "$((left - 20))" "${resume[@]}" "${RUN_ARGS[@]}" "${EXTRA_ARGS[@]}" --out "$dir" >> "$RUNS/$run.log" 2>&1
    echo "rc $? after $((SECONDS - t0)) s"; tail -n 3 "$RUNS/$run.log"
    pack_results
done
pack_results
ls -la "$OUT"
