#!/usr/bin/env bash
# train_runs_eval.sh — on the GPU host, after bench/train_headline.sh: every finished run's final weights (its HF
# export) evaluated on held-out text twice, with a BF16 forward and with every projection in plain MXFP4
# (`lowbit eval --adahop none`), one line per run and forward: "RUN bf16|mxfp4 PPL …". Separates what a recipe
# did to the weights from what its quantized forward costs at evaluation (bench/results/train_seeds_ablation_small_h100.md).
#
#   bash bench/train_runs_eval.sh --lowbit BIN --text VAL.txt --tokenizer TOKENIZER.gguf --out FILE RUNS_DIR...
# The text: scripts/shard_text.py SHARDS --split val …; the tokenizer: a GGUF holding the shards' tokenizer
# (the GPU host cannot fetch the model it came from). A run without report.json or hf/ is skipped.
set -uo pipefail
LOWBIT="" TEXT="" TOK="" OUTF=""
while [ $# -gt 0 ]; do
    case "$1" in
        --lowbit) LOWBIT=$2; shift 2 ;;
        --text) TEXT=$2; shift 2 ;;
        --tokenizer) TOK=$2; shift 2 ;;
        --out) OUTF=$2; shift 2 ;;
        --*) echo "usage: $0 --lowbit BIN --text FILE --tokenizer GGUF --out FILE RUNS_DIR..." >&2; exit 2 ;;
        *) break ;;
    esac
done
[ -n "$LOWBIT" ] && [ -n "$TEXT" ] && [ -n "$TOK" ] && [ -n "$OUTF" ] && [ $# -gt 0 ] ||
    { echo "usage: $0 --lowbit BIN --text FILE --tokenizer GGUF --out FILE RUNS_DIR..." >&2; exit 2; }
for runs in "$@"; do
    for d in "$runs"/*/; do
        [ -f "$d/report.json" ] && [ -d "$d/hf" ] || continue
        for m in bf16 mxfp4; do
            a=(); [ $m = mxfp4 ] && a=(--adahop none)
            r=$(timeout 60 "$LOWBIT" eval --model "$d/hf" --text "$TEXT" --tokenizer "$TOK" --device cuda --precision bf16 \
                "${a[@]}" --no-progress 2>&1 | grep -E "^PPL|rror" | tr -d '\n')
            echo "$(basename "$d") $m $r" >> "$OUTF"
        done
    done
done
