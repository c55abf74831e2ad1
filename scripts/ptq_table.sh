#!/usr/bin/env bash
# ptq_table.sh — quantize a model (default SmolLM2-135M) with several methods at one format and print a table of
# file size, perplexity and KLD against the unquantized model (SOTU test split, llama.cpp's protocol, 8 windows
# of 512).
#   scripts/ptq_table.sh --format F [--model M] [--out DIR] [--methods "rtn gptq turboboa"] [--chunks N]
#                        [--eval-device cpu|cuda] [--eval-text FILE] [extra quantize args, e.g. --group 128 --device cuda...]
# --eval-text evaluates on that text file instead of the SOTU test split (e.g. the val split of a model's training text).
# GGUF formats (NVFP4 included) are written as .gguf; int grids as GPTQ-packed safetensors directories.
# Needs a built ./build/lowbit (or LOWBIT=path) and the fetched model (scripts/run.sh does both).
set -euo pipefail
cd "$(dirname "$0")/.."
format=mxfp4; model=smollm2-135m; out=build/ptq_table; methods="rtn gptq turboboa"; chunks=8; extra=(); eval_device=cpu
eval_text=(--corpus sotu-test); eval_name="SOTU test"
while [ $# -gt 0 ]; do
    case "$1" in
        --format) format="$2"; shift 2 ;;
        --mix) format="$2"; extra+=(--mix "$2"); mix=1; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --model) model="$2"; shift 2 ;;
        --methods) methods="$2"; shift 2 ;;
        --chunks) chunks="$2"; shift 2 ;;
        --eval-device) eval_device="$2"; shift 2 ;;
        --eval-text) eval_text=(--text "$2"); eval_name="$(basename "$2")"; shift 2 ;;
        *) extra+=("$1"); shift ;;
    esac
done
lowbit=${LOWBIT:-./build/lowbit}
name=$(basename "$model" .gguf); [ "$model" = smollm2-135m ] && name=smollm2
mkdir -p "$out"
eval_args=("${eval_text[@]}" --ctx 512 --chunks "$chunks" --device "$eval_device" --no-progress --json)
# int grids have no GGUF type: they go to a GPTQ-packed safetensors directory, read back with the model's tokenizer.
suffix=.gguf; tok_arg=()
case "$format" in int*) suffix=""; tok_arg=(--tokenizer "$model") ;; esac
echo "ptq_table: reference logits of the unquantized model"
"$lowbit" eval --model "$model" "${eval_args[@]}" --save-logits "$out/base.kld" > "$out/eval_base.json"
for m in $methods; do
    echo "ptq_table: quantize --method $m --format $format"
    fmt_arg=(--format "$format"); [ -n "${mix:-}" ] && fmt_arg=()
    "$lowbit" quantize --model "$model" --method "$m" "${fmt_arg[@]}" --out "$out/$name-$m-$format$suffix" \
        --report "$out/quantize_$m.json" --quiet "${extra[@]}"
    "$lowbit" eval --model "$out/$name-$m-$format$suffix" "${tok_arg[@]}" "${eval_args[@]}" --kld-base "$out/base.kld" \
        > "$out/eval_$m.json"
done
python3 - "$out" "$format" "$methods" "$model" "$eval_name" <<'PY'
import json, os, sys
out, fmt, methods, model, eval_name = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4], sys.argv[5]
base = json.load(open(f"{out}/eval_base.json"))
default = model == "smollm2-135m"
rows = [("as loaded (Q4_1)" if default else "as loaded", os.path.getsize(base["model"]), base["ppl"], None, None)]
for m in methods:
    e = json.load(open(f"{out}/eval_{m}.json")); q = json.load(open(f"{out}/quantize_{m}.json"))
    rows.append((f"{m} {fmt}", q["file_bytes"], e["ppl"], e["kld"]["kld_mean"], q["seconds"]))
print(f"\n{'SmolLM2-135M' if default else model}, projections quantized to {fmt}; {eval_name}, llama.cpp protocol, {base['n_chunks']} windows of {base['n_ctx']}")
print(f"{'model':<22} {'file MB':>8} {'PPL':>8} {'KLD':>8} {'quantize s':>11}")
for name, size, ppl, kld, sec in rows:
    k = "" if kld is None else f"{kld:.4f}"
    t = "" if sec is None else f"{sec:.1f}"
    print(f"{name:<22} {size/1e6:8.2f} {ppl:8.3f} {k:>8} {t:>11}")
json.dump([dict(model=r[0], file_bytes=r[1], ppl=r[2], kld=r[3], quantize_seconds=r[4]) for r in rows],
          open(f"{out}/table.json", "w"), indent=1)
PY
