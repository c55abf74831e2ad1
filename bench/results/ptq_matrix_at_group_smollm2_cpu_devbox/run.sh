#!/usr/bin/env bash
# The matrix cells whose TurboBoA group grids changed with a335a8c, re-run on the CPU (lowbit of de9d205).
cd /work/wt_matrix
MODEL=/root/.cache/lowbit/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf
grep -E '^(int2-g64.turboboa|nvfp4.turboboa|rot.int3-g64.tb-f1f3|rot.int3-g64.turboboa|rot.int2-g64.turboboa) ' bench/ptq_matrix_cells.txt |
while IFS='|' read -r name args; do
    name=${name//[[:space:]]/}; args=$(echo $args)
    dir=/work/matrix_cpu/cells/$name
    [ -f "$dir/table.json" ] && continue
    mkdir -p "$dir" && echo "$args" > "$dir/args.txt"
    start=$(date +%s)
    LOWBIT=./build/lowbit bash scripts/ptq_table.sh --model "$MODEL" --out "$dir/files" $args > "$dir/log.txt" 2>&1
    rc=$?
    echo "$name rc $rc $(( $(date +%s) - start )) s" >> /work/matrix_cpu/progress.txt
    [ $rc -eq 0 ] && cp "$dir"/files/*.json "$dir/"
    rm -rf "$dir/files"
done
echo finished >> /work/matrix_cpu/progress.txt
