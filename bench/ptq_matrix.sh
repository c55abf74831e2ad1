#!/usr/bin/env bash
# ptq_matrix.sh — issue 19's results matrix on the GPU host: one model (default SmolLM2-135M) quantized by
# every cell of a cells file (a method, its features, a grid, a rotation) with `--device cuda`, each result
# evaluated on CUDA by scripts/ptq_table.sh (SOTU test, llama.cpp's protocol, 8 × 512, KLD against the model as
# loaded). A cell that finished (table.json) or failed (file `failed`, its log kept) is skipped, so a call cut
# short resumes on the next call of a warm machine; the finished cells' JSON is tarred into
# $OUT/ptq_matrix.tar.gz after each cell.
#   bash bench/ptq_matrix.sh --pack DIR --model GGUF [--cells FILE] [--only REGEX] [--deadline SECONDS]
#                            [--table-args "ARGS"]   (given to every cell's ptq_table.sh, e.g. --eval-text/--calib-text)
# The pack: lowbit.xz (xz of build-h200/lowbit), COMMIT (what it was built from) and sotu.tar.xz
# (../shared/data/corpora/sotu).
# Cells file (bench/ptq_matrix_cells.txt): `NAME | ptq_table.sh arguments` per line, # comments; NAME is the
# cell's folder. No new cell starts after --deadline seconds (default 520: a 600 s call keeps its tarball).
# On this machine: python3 bench/ptq_matrix_table.py DIR (the unpacked tarball) prints the table.
set -uo pipefail
cd "$(dirname "$0")/.."
PACK="" MODEL="" CELLS=bench/ptq_matrix_cells.txt ONLY="" DEADLINE=520 TABLE_ARGS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --pack) PACK=$2; shift 2 ;;
        --model) MODEL=$2; shift 2 ;;
        --cells) CELLS=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --deadline) DEADLINE=$2; shift 2 ;;
        --table-args) TABLE_ARGS=$2; shift 2 ;;
        *) echo "usage: $0 --pack DIR --model GGUF [--cells FILE] [--only REGEX] [--deadline S] [--table-args \"ARGS\"]" >&2; exit 2 ;;
    esac
done
[ -f "$MODEL" ] || { echo "ptq_matrix: no model at '$MODEL'" >&2; exit 1; }
OUT=${OUT:-/tmp/out}
WORK=/tmp/ptq_matrix
mkdir -p "$OUT" "$WORK/cells" "$WORK/data/corpora"
[ -x "$WORK/lowbit" ] || { xz -dc "$PACK/lowbit.xz" > "$WORK/lowbit" && chmod +x "$WORK/lowbit"; } || exit 1
[ -d "$WORK/data/corpora/sotu" ] || tar -C "$WORK/data/corpora" -xJf "$PACK/sotu.tar.xz" || exit 1
export LOWBIT_SHARED_DATA=$WORK/data
cp "$PACK/COMMIT" "$WORK/cells/COMMIT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$WORK/cells/gpu.txt" 2>/dev/null
while IFS='|' read -r name args; do
    name=${name//[[:space:]]/}; args=$(echo $args)
    case "$name" in ''|\#*) continue ;; esac
    [ -n "$ONLY" ] && ! [[ $name =~ $ONLY ]] && continue
    dir=$WORK/cells/$name
    [ -f "$dir/table.json" ] || [ -f "$dir/failed" ] && continue
    if [ "$SECONDS" -ge "$DEADLINE" ]; then echo "ptq_matrix: deadline ${DEADLINE} s reached before $name"; break; fi
    echo "=== $name: $args (${SECONDS} s)"
    mkdir -p "$dir" && echo "$args" > "$dir/args.txt"
    # shellcheck disable=SC2086 # args and TABLE_ARGS are lists of options
    LOWBIT=$WORK/lowbit bash scripts/ptq_table.sh --model "$MODEL" --out "$dir/files" --eval-device cuda --device cuda \
        $args $TABLE_ARGS > "$dir/log.txt" 2>&1
    rc=$?
    echo "rc $rc"; tail -n 3 "$dir/log.txt"
    if [ "$rc" -eq 0 ]; then cp "$dir"/files/*.json "$dir/"; else echo "$rc" > "$dir/failed"; fi
    rm -rf "$dir/files"
    (cd "$WORK" && tar -czf "$OUT/ptq_matrix.tar.gz.tmp" --exclude=files cells && mv "$OUT/ptq_matrix.tar.gz.tmp" "$OUT/ptq_matrix.tar.gz")
done < "$CELLS"
ls -la "$OUT"
