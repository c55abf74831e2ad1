#!/usr/bin/env bash
# ptq_vs_llama_cpp.sh — llama.cpp's own quantizer (llama-quantize with an importance matrix from llama-imatrix, and
# without one) against lowbit quantize's GPTQ and TurboBoA at the same llama.cpp file-type mixes (the same GGUF type for
# every tensor, so the same bytes per weight), on SmolLM2-135M: file size, bits per weight, PPL and KLD on the SOTU test
# split with llama.cpp's protocol, quantize time.
#
#   JOBS=1 bash tests/peer/build_llama_cpp.sh     # llama-imatrix, llama-quantize, llama-perplexity (CPU)
#   bash bench/ptq_vs_llama_cpp.sh                # -> bench/results/ptq_vs_llama_cpp_smollm2.md
#   MIXES=Q4_K_M METHODS=gptq LOWBIT=/work/build-lead/lowbit bash bench/ptq_vs_llama_cpp.sh
#
# Steps. Each one is skipped when its output is already in WORK, so an interrupted run continues where it stopped and a
# rerun only rebuilds the table; delete a file in WORK to redo its step (e.g. after rebuilding lowbit).
#   0. WORK/sotu-train.txt, WORK/sotu-test.txt (unless CALIB_TEXT / EVAL_TEXT name other texts): the text lowbit reads
#      for `--corpus NAME`, byte for byte (written by tests/peer/check_llama_cpp.py's corpus_text), checked: `lowbit
#      eval --text FILE` counts the tokens of --corpus NAME.
#   1. lowbit eval --model MODEL --text EVAL_TEXT --ctx CTX --chunks CHUNKS --save-logits base.kld: the reference, the
#      unquantized model as loaded, as scripts/ptq_table.sh does.
#   2. llama-imatrix -m MODEL -f CALIB_TEXT -c CTX --chunks CALIB_CHUNKS -o imatrix.gguf: 16 windows of 512 tokens, the
#      budget lowbit quantize gets (--calib-samples CALIB_CHUNKS --calib-len CTX). llama-imatrix takes the first 16
#      consecutive windows of the text, lowbit 16 windows at seeded random offsets (src/ptq/calibration.cpp); with
#      IMATRIX_ALL=1 a second importance matrix takes every window of the text.
#   3. per mix: llama-quantize --allow-requantize [--imatrix imatrix.gguf] MODEL OUT MIX. The source is Q4_1, so both
#      quantizers start from the same dequantized Q4_1 weights.
#   4. per method of METHODS, per mix: lowbit quantize --model MODEL --method M --mix MIX --calib-text CALIB_TEXT
#      --device DEVICE --out OUT (left out, with a
#      note, when the lowbit binary has no --mix). llama.cpp's rows come first, then all of one method, then the next.
#   5. every file: lowbit eval ... --kld-base base.kld --json (PPL, KLD, top-1 agreement on the same windows).
#   6. spot check of the files named by SPOT: llama-perplexity on the same windows, on the file as is and on its F32
#      dequantization (llama-quantize --allow-requantize F F32, exact: it takes out llama.cpp's quantized activations,
#      tests/peer/check_llama_cpp.py step 3); lowbit's PPL must agree with the F32 run to 3 significant digits (exit 1).
#   7. the table (mix, method, file MB, bits per weight of the whole file, PPL, KLD, quantize time), each file's tensor
#      types, the commands, versions, machine and date -> REPORT (markdown), also printed.
# Quantize time is the wall clock of the command (lowbit's includes its calibration forward passes; llama-quantize's does
# not include llama-imatrix, whose time is given once). Everything runs with THREADS threads. Exit status 1 when a step
# fails, a text differs from its corpus, or a spot check disagrees.
#
# Environment: MIXES (default "Q4_K_M Q3_K_M Q2_K"), METHODS (lowbit methods, default "gptq turboboa"), MODEL (default the
# fetched SmolLM2-135M-Instruct.Q4_1.gguf), NAME (the files' prefix and the report's title, default smollm2 /
# SmolLM2-135M), SOURCE (what the source model is, for its row and the report), CALIB_TEXT and EVAL_TEXT (text files
# instead of sotu-train and sotu-test, e.g. a trained model's own train and val text from scripts/shard_text.py),
# IMATRIX_ALL (1: also a llama.cpp row whose importance matrix takes every window of the calibration text, 0 default),
# DEVICE (lowbit quantize and eval: cpu, the default, or cuda), LOWBIT (default ./build/lowbit, else /work/build-lead/lowbit), LLAMA_BIN
# (default build-peer/llama.cpp-build/bin), WORK (default build-peer/ptq_compare, git-ignored), THREADS (2), CTX (512),
# CHUNKS (evaluation windows, 8), CALIB_CHUNKS (16), SPOT (files as MIX/METHOD; default the first mix's llama.cpp-imatrix
# file and one lowbit file per mix, the methods in turn), REPORT (default bench/results/ptq_vs_llama_cpp_smollm2.md),
# PYTHON (default .venv/bin/python, which has gguf and numpy).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
MIXES="${MIXES:-Q4_K_M Q3_K_M Q2_K}"
METHODS="${METHODS:-gptq turboboa}"
MODEL="${MODEL:-$HOME/.cache/lowbit/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf}"
if [[ -z "${LOWBIT:-}" ]]; then LOWBIT=./build/lowbit; [[ -x $LOWBIT ]] || LOWBIT=/work/build-lead/lowbit; fi
LLAMA_BIN="${LLAMA_BIN:-$REPO/build-peer/llama.cpp-build/bin}"
WORK="${WORK:-$REPO/build-peer/ptq_compare}"
THREADS="${THREADS:-2}"
CTX="${CTX:-512}"
CHUNKS="${CHUNKS:-8}"
CALIB_CHUNKS="${CALIB_CHUNKS:-16}"
NAME="${NAME:-smollm2}"
SOURCE="${SOURCE:-Q4_1 as shipped}"
CALIB_TEXT="${CALIB_TEXT:-}"
EVAL_TEXT="${EVAL_TEXT:-}"
IMATRIX_ALL="${IMATRIX_ALL:-0}"
DEVICE="${DEVICE:-cpu}"
first_mix="${MIXES%% *}"
if [[ -z "${SPOT:-}" ]]; then  # llama.cpp's first file, then one lowbit file per mix (every GGUF type lowbit encodes)
    SPOT="$first_mix/llama.cpp-imatrix"; read -ra spot_methods <<< "$METHODS"; i=0
    for mix in $MIXES; do SPOT+=" $mix/${spot_methods[i % ${#spot_methods[@]}]}"; i=$((i + 1)); done
fi
REPORT="${REPORT:-$REPO/bench/results/ptq_vs_llama_cpp_smollm2.md}"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
export LOWBIT_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" OMP_NUM_THREADS="$THREADS"

PYTHON="$(command -v "$PYTHON" || echo "$PYTHON")"  # a name on PATH (python3) or a path
for f in "$LOWBIT" "$LLAMA_BIN/llama-imatrix" "$LLAMA_BIN/llama-quantize" "$LLAMA_BIN/llama-perplexity" "$PYTHON"; do
    [[ -x "$f" ]] || { echo "ptq_vs_llama_cpp.sh: $f not found (build lowbit; JOBS=1 bash tests/peer/build_llama_cpp.sh)" >&2; exit 1; }
done
[[ -f "$MODEL" ]] || { echo "ptq_vs_llama_cpp.sh: model $MODEL not found (scripts/run.sh fetches it)" >&2; exit 1; }
mkdir -p "$WORK" "$(dirname "$REPORT")"
: > "$WORK/steps.txt"   # the steps of this run in order; their commands are in WORK/STEP.cmd
# The lowbit binaries that made the files (one line each; more than one when WORK mixes builds).
binary="$(sha256sum "$LOWBIT" | cut -d' ' -f1) $(date -u -r "$LOWBIT" '+%Y-%m-%d %H:%M:%S UTC') $(realpath "$LOWBIT")"
grep -qxF "$binary" "$WORK/lowbit_binaries.txt" 2>/dev/null || echo "$binary" >> "$WORK/lowbit_binaries.txt"
has_mix=1; "$LOWBIT" quantize --help 2>&1 | grep -q -- '--mix' || has_mix=0

# step MODE NAME OUTPUT CMD...: runs CMD unless OUTPUT exists; its command line goes to WORK/NAME.cmd, its wall seconds to
# WORK/NAME.time (the 1-minute load average before and after to WORK/NAME.load), its log to WORK/NAME.log (WORK/NAME.failed.log when it fails, and the script stops). MODE:
#   file    CMD writes OUTPUT itself: "@OUT" in its arguments stands for a temporary name, renamed to OUTPUT on success;
#   stdout  CMD's stdout is OUTPUT (a lowbit --json report);
#   log     CMD's stdout and stderr together are OUTPUT (llama-perplexity).
step() {
    local mode="$1" name="$2" output="$3"; shift 3
    echo "$name" >> "$WORK/steps.txt"
    if [[ -e "$output" ]]; then echo "== $name: have ${output#"$WORK"/}"; return; fi
    local tmp="${output%.*}.tmp-$$.${output##*.}" log="$WORK/$name.log" args=() a shown t0 t1 rc=0
    for a in "$@"; do args+=("${a//@OUT/$tmp}"); done
    shown="$(printf '%q ' "${@//@OUT/$output}")"; shown="${shown% }"
    case $mode in
        stdout) shown+=" > $(printf %q "$output")" ;;
        log) shown+=" > $(printf %q "$output") 2>&1" ;;
    esac
    echo "$shown" > "$WORK/$name.cmd"
    echo "== $name: $shown"
    local load0; load0=$(cut -d' ' -f1 /proc/loadavg); t0=$(date +%s.%N)
    case $mode in
        file) "${args[@]}" > "$log" 2>&1 || rc=$? ;;
        stdout) "${args[@]}" > "$tmp" 2> "$log" || rc=$? ;;
        log) "${args[@]}" > "$tmp" 2>&1 || rc=$?; log="$tmp" ;;
    esac
    t1=$(date +%s.%N)
    if (( rc != 0 )) || [[ ! -e "$tmp" ]]; then
        tail -30 "$log" >&2; mv -f "$log" "$WORK/$name.failed.log"; rm -rf "$tmp"
        local why="exit $rc"; (( rc == 0 )) && why="no ${output#"$WORK"/} written"
        echo "ptq_vs_llama_cpp.sh: step $name failed ($why; log $WORK/$name.failed.log)" >&2; exit 1
    fi
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", b - a }' > "$WORK/$name.time"
    echo "$load0 $(cut -d' ' -f1 /proc/loadavg)" > "$WORK/$name.load"
    mv "$tmp" "$output"
}

# 0. The texts, exactly as lowbit reads the corpora, and a check that lowbit sees the same number of tokens (for the
#    corpora that CALIB_TEXT / EVAL_TEXT do not replace; a given file is read by both programs as it is).
corpora=(); [[ -z $CALIB_TEXT ]] && corpora+=(sotu-train); [[ -z $EVAL_TEXT ]] && corpora+=(sotu-test)
CALIB_TEXT="${CALIB_TEXT:-$WORK/sotu-train.txt}"
EVAL_TEXT="${EVAL_TEXT:-$WORK/sotu-test.txt}"
"$PYTHON" - "$WORK" "${corpora[@]}" <<'PY'
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "peer"))
from check_llama_cpp import corpus_text
for name in sys.argv[2:]:
    path = os.path.join(sys.argv[1], name + ".txt")
    text, files = corpus_text(name)
    if not os.path.exists(path) or open(path, "rb").read() != text:
        with open(path + ".tmp", "wb") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        print(f"== wrote {path}: {len(files)} files, {len(text)} bytes")
PY
for name in "${corpora[@]}"; do
    for src in corpus text; do
        what=(--corpus "$name"); [[ $src == text ]] && what=(--text "$WORK/$name.txt")
        step stdout "tokens_${src}_$name" "$WORK/tokens_${src}_$name.json" \
            "$LOWBIT" eval --model "$MODEL" "${what[@]}" --ctx "$CTX" --chunks 1 --threads "$THREADS" --no-progress --json
    done
done
"$PYTHON" - "$WORK" "${corpora[@]}" <<'PY'
import json, sys
for name in sys.argv[2:]:
    c, t = (json.load(open(f"{sys.argv[1]}/tokens_{s}_{name}.json")) for s in ("corpus", "text"))
    if (c["n_text_tokens"], c["chunk_ppl"]) != (t["n_text_tokens"], t["chunk_ppl"]):
        sys.exit(f"{name}.txt is not the text of --corpus {name}: {t['n_text_tokens']} vs {c['n_text_tokens']} tokens")
    print(f"== {name}.txt: {c['n_text_tokens']} tokens and window-1 PPL {c['chunk_ppl'][0]:.6f}, as --corpus {name}")
PY

eval_args=(--text "$EVAL_TEXT" --ctx "$CTX" --chunks "$CHUNKS" --threads "$THREADS" --device "$DEVICE" --no-progress --json)
# 1. The reference logits.
step stdout eval_base "$WORK/eval_base.json" "$LOWBIT" eval --model "$MODEL" "${eval_args[@]}" --save-logits "$WORK/base.kld"
evaluate() {  # evaluate TAG FILE
    step stdout "eval_$1" "$WORK/eval_$1.json" "$LOWBIT" eval --model "$2" "${eval_args[@]}" --kld-base "$WORK/base.kld"
}

# 2. The importance matrix.
step file imatrix "$WORK/imatrix.gguf" "$LLAMA_BIN/llama-imatrix" -m "$MODEL" -f "$CALIB_TEXT" -c "$CTX" \
    --chunks "$CALIB_CHUNKS" -t "$THREADS" -o @OUT
variants=(llama.cpp-imatrix llama.cpp)
if [[ $IMATRIX_ALL == 1 ]]; then  # every window of the calibration text: more tokens than lowbit's budget
    step file imatrix_all "$WORK/imatrix_all.gguf" "$LLAMA_BIN/llama-imatrix" -m "$MODEL" -f "$CALIB_TEXT" -c "$CTX" \
        -t "$THREADS" -o @OUT
    variants+=(llama.cpp-imatrix-all)
fi

# 3. llama-quantize, with and without the importance matrix.
for mix in $MIXES; do
    for variant in "${variants[@]}"; do
        tag="${mix}_$variant"; out="$WORK/$NAME-$mix-$variant.gguf"
        imatrix_args=()
        [[ $variant == llama.cpp-imatrix ]] && imatrix_args=(--imatrix "$WORK/imatrix.gguf")
        [[ $variant == llama.cpp-imatrix-all ]] && imatrix_args=(--imatrix "$WORK/imatrix_all.gguf")
        step file "quantize_$tag" "$out" \
            "$LLAMA_BIN/llama-quantize" --allow-requantize "${imatrix_args[@]}" "$MODEL" @OUT "$mix" "$THREADS"
        evaluate "$tag" "$out"
    done
done

# 4. lowbit quantize, one method at a time over all mixes.
if [[ $has_mix == 1 ]]; then
    for method in $METHODS; do
        for mix in $MIXES; do
            tag="${mix}_$method"; out="$WORK/$NAME-$mix-$method.gguf"
            step file "quantize_$tag" "$out" "$LOWBIT" quantize --model "$MODEL" --method "$method" --mix "$mix" \
                --calib-text "$CALIB_TEXT" --calib-samples "$CALIB_CHUNKS" --calib-len "$CTX" --device "$DEVICE" --out @OUT --report "$WORK/quantize_$tag.json" --quiet
            evaluate "$tag" "$out"
        done
    done
else
    echo "== $LOWBIT quantize has no --mix: lowbit's rows left out"
fi

# 6. Spot checks with llama-perplexity: the file as is and its exact F32 dequantization (540 MB, deleted once measured).
: > "$WORK/spot.txt"
for spot in $SPOT; do
    mix="${spot%%/*}" variant="${spot#*/}"; tag="${mix}_$variant"; file="$WORK/$NAME-$mix-$variant.gguf"
    [[ -f "$file" ]] || { echo "== spot check $spot: no $file yet, skipped"; continue; }
    echo "$mix $variant" >> "$WORK/spot.txt"
    perplexity=("$LLAMA_BIN/llama-perplexity" -f "$EVAL_TEXT" -c "$CTX" -b "$CTX" --chunks "$CHUNKS" -t "$THREADS")
    step log "perplexity_$tag" "$WORK/perplexity_$tag.txt" "${perplexity[@]}" -m "$file"
    if [[ -e "$WORK/perplexity_f32_$tag.txt" ]]; then echo "f32_$tag" >> "$WORK/steps.txt"
    else step file "f32_$tag" "$WORK/f32_$tag.gguf" "$LLAMA_BIN/llama-quantize" --allow-requantize "$file" @OUT F32 "$THREADS"; fi
    step log "perplexity_f32_$tag" "$WORK/perplexity_f32_$tag.txt" "${perplexity[@]}" -m "$WORK/f32_$tag.gguf"
    rm -f "$WORK/f32_$tag.gguf"
done

# 7. The table and the report.
{ "$LLAMA_BIN/llama-perplexity" --version 2>&1 | grep -E '^(version|built with)' | tr '\n' ' '; echo; } > "$WORK/llama_version.txt"
export NAME SOURCE CALIB_TEXT EVAL_TEXT DEVICE IMATRIX_ALL
"$PYTHON" - "$WORK" "$REPORT" "$MODEL" "$LOWBIT" "$MIXES" "$METHODS" "$has_mix" "$THREADS" "$LLAMA_BIN" "$CALIB_CHUNKS" <<'PY'
import datetime, json, os, re, sys
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "peer"))
from check_llama_cpp import corpus_text, git, lowbit_source, machine_line, parse_llama_perplexity, sig3_agree
import gguf

work, report, model, lowbit, mixes, methods, has_mix, threads, llama_bin, imatrix_chunks = sys.argv[1:]
mixes, methods = mixes.split(), methods.split()
env = os.environ
name, source, device = env["NAME"], env["SOURCE"], env["DEVICE"]
calib_text, eval_text = env["CALIB_TEXT"], env["EVAL_TEXT"]
on_sotu = os.path.basename(calib_text) == "sotu-train.txt" and os.path.dirname(calib_text) == work
title = "SmolLM2-135M" if name == "smollm2" else name
label = {"llama.cpp-imatrix": "llama-quantize + imatrix", "llama.cpp": "llama-quantize, no imatrix",
         "llama.cpp-imatrix-all": "llama-quantize + imatrix of the whole calibration text",
         "gptq": "lowbit gptq", "turboboa": "lowbit turboboa"}
W = lambda name: os.path.join(work, name)
read = lambda name: open(W(name)).read().strip() if os.path.exists(W(name)) else None


def census(path):
    """(number of weights, {type: tensor count}, {tensor: (type, bytes)}) of a GGUF."""
    r = gguf.GGUFReader(path)
    types, per = {}, {}
    for t in r.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        per[t.name] = (t.tensor_type.name, int(t.n_bytes))
    return sum(int(t.n_elements) for t in r.tensors), types, per


base = json.load(open(W("eval_base.json")))
n_weights, base_types, base_per = census(model)
rows, per_tensor = [], {}
variants = ["llama.cpp-imatrix", "llama.cpp"] + (["llama.cpp-imatrix-all"] if env["IMATRIX_ALL"] == "1" else [])
rows.append(dict(mix="(source)", method=f"{source}, the KLD reference", bytes=os.path.getsize(model),
                 n=n_weights, ppl=base["ppl"], ppl_err=base["ppl_err"], kld=None, top1=None, seconds=None,
                 types=base_types))
for variant in variants + methods:
    for mix in mixes:
        f, e = W(f"{name}-{mix}-{variant}.gguf"), W(f"eval_{mix}_{variant}.json")
        if not (os.path.exists(f) and os.path.exists(e)):
            continue
        ev = json.load(open(e))
        n, types, per = census(f)
        per_tensor[(mix, variant)] = per
        rows.append(dict(mix=mix, method=label.get(variant, "lowbit " + variant), bytes=os.path.getsize(f), n=n,
                         ppl=ev["ppl"], ppl_err=ev["ppl_err"], kld=ev["kld"]["kld_mean"], kld_err=ev["kld"]["kld_err"],
                         top1=ev["kld"]["top1_agreement"], seconds=float(read(f"quantize_{mix}_{variant}.time")),
                         load=read(f"quantize_{mix}_{variant}.load"), types=types,
                         calib=(json.load(open(W(f"quantize_{mix}_{variant}.json")))["calibration_seconds"]
                                if os.path.exists(W(f"quantize_{mix}_{variant}.json")) else None)))
order = {m: i for i, m in enumerate(["(source)"] + mixes)}
rows.sort(key=lambda r: order[r["mix"]])  # stable: within a mix, the methods keep their order

out = []
say = out.append
say(f"# llama.cpp's quantizer (with and without an importance matrix) vs lowbit GPTQ / TurboBoA at llama.cpp's mixes — {title}")
say("")
say(f"Model: {os.path.basename(model)} ({n_weights} weights in {len(base_per)} tensors, {source}); both quantizers "
    f"start from its (dequantized) weights. Evaluation: `lowbit eval` on {device}, "
    + ("SOTU test split" if os.path.basename(eval_text) == "sotu-test.txt" else f"`{os.path.basename(eval_text)}`")
    + f", llama.cpp's protocol (second half of each window scored), {base['n_chunks']} windows of {base['n_ctx']} "
    f"({base['n_scored']} scored tokens); KLD and top-1 agreement against the source model's logits on the same windows.")
calib_what = (f"`--corpus sotu-train`, i.e. from {corpus_text('sotu-train')[1][0]} on" if on_sotu
              else f"`{os.path.basename(calib_text)}`")
say(f"Calibration, the same text ({calib_what}, byte for byte) and token budget: llama-imatrix on the first "
    f"{imatrix_chunks} consecutive {base['n_ctx']}-token windows of the text, {read('imatrix.time')} s; lowbit quantize "
    f"on {device}, {imatrix_chunks} windows of {base['n_ctx']} tokens at seeded random offsets (seed 0), inside its quantize time."
    + (f" The 'whole calibration text' rows give llama-imatrix every {base['n_ctx']}-token window of the text "
       f"({read('imatrix_all.time')} s), many times lowbit's budget." if "llama.cpp-imatrix-all" in variants else ""))
say("")
say("| mix | method | file MB | bits/weight (file) | PPL | KLD | top-1 agree | quantize s |")
say("|---|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    kld = "" if r["kld"] is None else f"{r['kld']:.4f} ± {r['kld_err']:.4f}"
    top1 = "" if r["top1"] is None else f"{100 * r['top1']:.2f}%"
    sec = "" if r["seconds"] is None else f"{r['seconds']:.1f}"
    if r.get("calib") is not None:
        sec += f" ({r['calib']:.0f} calibration)"
    if r.get("load"):
        sec += " [load {}→{}]".format(*r["load"].split())
    say(f"| {r['mix']} | {r['method']} | {r['bytes'] / 1e6:.2f} | {8 * r['bytes'] / r['n']:.3f} | "
        f"{r['ppl']:.3f} ± {r['ppl_err']:.3f} | {kld} | {top1} | {sec} |")
say("")
say("bits/weight (file) = 8 × file bytes / number of weights (all tensors, norms included; metadata and tokenizer count "
    "too). ±: standard errors over the scored tokens; every row is scored on the same tokens, so a difference between "
    "two rows is surer than their ± suggest. quantize s: wall clock of the command on this machine (lowbit's includes its "
    "calibration forward passes; llama-quantize + imatrix excludes llama-imatrix); [load a→b]: 1-minute load average "
    "before and after, where recorded.")
if has_mix != "1":
    say(f"\nlowbit's rows are missing: `{lowbit} quantize` has no --mix.")

say("\n## Tensor types per file\n")
for r in rows:
    say(f"- {r['mix']} {r['method']}: " + ", ".join(f"{k} ×{v}" for k, v in sorted(r["types"].items())))
say("")
for mix in mixes:
    log = read(f"quantize_{mix}_llama.cpp.log") or read(f"quantize_{mix}_llama.cpp-imatrix.log") or ""
    falls = {}
    for m in re.finditer(r"required for type\s+(\w+)\) -> falling back to\s+(\w+)", log):
        falls[(m.group(1), m.group(2))] = falls.get((m.group(1), m.group(2)), 0) + 1
    if falls:
        say(f"- {mix}: llama-quantize fell back on {sum(falls.values())} tensors whose rows (ncols) do not divide into "
            "256-weight K-quant blocks: " + ", ".join(f"{a.upper()} → {b.upper()} ×{n}" for (a, b), n in falls.items()))
for mix in mixes:
    ref = per_tensor.get((mix, "llama.cpp-imatrix")) or per_tensor.get((mix, "llama.cpp"))
    for variant in variants[1:] + methods:
        other = per_tensor.get((mix, variant))
        if ref is None or other is None or other is ref:
            continue
        diff = [f"{k}: {ref[k][0] if k in ref else '-'} vs {other[k][0] if k in other else '-'}"
                for k in sorted(set(ref) | set(other)) if ref.get(k) != other.get(k)]
        sizes = {v: os.path.getsize(W(f"{name}-{mix}-{v}.gguf")) for v in ("llama.cpp-imatrix", variant)}
        say(f"- {mix}: {label.get(variant, variant)} vs llama-quantize + imatrix: "
            + ("the same type and tensor-data bytes on every tensor" if not diff
               else f"{len(diff)} tensors differ (type): " + "; ".join(diff[:12]))
            + f"; file {sizes[variant]} vs {sizes['llama.cpp-imatrix']} bytes (metadata)")

say("\n## Spot check: llama-perplexity on the same windows\n")
spots = [line.split() for line in (read("spot.txt") or "").splitlines()]
failed = False
if not spots:
    say("(none ran)")
for mix, variant in spots:
    tag = f"{mix}_{variant}"
    q = parse_llama_perplexity(open(W(f"perplexity_{tag}.txt")).read())
    f32 = parse_llama_perplexity(open(W(f"perplexity_f32_{tag}.txt")).read())
    lb = json.load(open(W(f"eval_{tag}.json")))["ppl"]
    ok = sig3_agree(lb, f32["ppl"])
    failed |= not ok
    say(f"- {mix} {label.get(variant, variant)}: lowbit eval PPL {lb:.4f}; llama-perplexity on the file's F32 "
        f"dequantization {f32['ppl']:.4f} (3 significant digits: {'agree' if ok else 'DISAGREE'}); llama-perplexity on "
        f"the file as is {q['ppl']:.4f} ({q['ppl'] / lb - 1:+.2%}: llama.cpp's CPU matmuls quantize the activations)")

say("\n## Provenance\n")
say(f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")
say(f"- machine: {machine_line()}; {threads} threads for every command")
say(f"- lowbit: {lowbit}; its build folder's sources at report time: {lowbit_source(lowbit)}; this script's "
    f"repository at {git('rev-parse', '--short', 'HEAD')}")
for line in read("lowbit_binaries.txt").splitlines():
    sha, day, clock, tz, path = line.split(" ", 4)
    say(f"- lowbit binary that made the files: {path}, sha256 {sha}, modified {day} {clock} {tz}")
say(f"- llama.cpp: {read('llama_version.txt')}")
info = os.path.join(os.path.dirname(llama_bin.rstrip('/')), "peer-build-info.txt")
if os.path.exists(info):
    for line in open(info).read().strip().splitlines():
        say(f"- llama.cpp build: {line}")
say("\n## Commands, in order\n")
say("```")
say(f"MIXES='{' '.join(mixes)}' METHODS='{' '.join(methods)}' LOWBIT={lowbit} NAME={name} DEVICE={device} "
    f"IMATRIX_ALL={env['IMATRIX_ALL']} CALIB_TEXT={calib_text} EVAL_TEXT={eval_text} bash bench/ptq_vs_llama_cpp.sh")
for name in dict.fromkeys(read("steps.txt").split()):
    cmd = read(f"{name}.cmd")
    if cmd:
        say(cmd.replace(os.getcwd() + "/", "").replace(os.path.expanduser("~"), "~"))
say("```")
text = "\n".join(out) + "\n"
open(report, "w").write(text)
print(text)
sys.exit(1 if failed else 0)
PY
