#!/usr/bin/env bash
# pack_ptq_trained.sh — on the dev machine: the pack that bench/ptq_trained_model.sh runs on the GPU host, in
# .gpu_pack/pt (about 57 MB; carry=[".gpu_pack/pt"]):
#   hl/lowbit.xz, hl/shards.tar   build-h200/lowbit (xz) and the carried shard subset (scripts/subset_shards.py --xz)
#   ptq/tokenizer.gguf            SmolLM2's tokenizer metadata (the shards' tokenizer), no tensors
#   ptq/sotu.tar.xz               ../shared/data/corpora/sotu
#   ptq/calib.txt, ptq/val.txt    100 k tokens of train documents, 40 k of val documents (scripts/shard_text.py)
#   ptq/calib_large.txt           1.2 M tokens of train documents (calibration at the spec's 262 k-token budget)
#   ptq/COMMIT                    the commit lowbit was built from
#   llama/*.xz                    llama-imatrix, llama-quantize, llama-perplexity (tests/peer/build_llama_cpp.sh)
#   whl/gguf-*.whl                the gguf package for the report (the GPU image lacks it)
# Needs the shard subset at SHARDS_TAR (default .gpu_pack/hl/shards.tar), TOKENIZER (default .gpu_pack/ptq/tokenizer.gguf),
# a built build-h200/lowbit and build-peer/llama.cpp-build/bin.
#   bash scripts/pack_ptq_trained.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SHARDS_TAR=${SHARDS_TAR:-.gpu_pack/hl/shards.tar}
TOKENIZER=${TOKENIZER:-.gpu_pack/ptq/tokenizer.gguf}
LLAMA_BIN=${LLAMA_BIN:-build-peer/llama.cpp-build/bin}
PYTHON=${PYTHON:-.venv/bin/python}
pack=.gpu_pack/pt
for f in "$SHARDS_TAR" "$TOKENIZER" build-h200/lowbit "$LLAMA_BIN/llama-imatrix"; do
    [ -e "$f" ] || { echo "pack_ptq_trained: $f is missing" >&2; exit 1; }
done
mkdir -p "$pack"/{hl,ptq,llama,whl}
xz -T2 -6 -c build-h200/lowbit > "$pack/hl/lowbit.xz"
cp "$SHARDS_TAR" "$pack/hl/shards.tar"
cp "$TOKENIZER" "$pack/ptq/tokenizer.gguf"
tar -C ../shared/data/corpora -cJf "$pack/ptq/sotu.tar.xz" sotu
git rev-parse --short HEAD > "$pack/ptq/COMMIT"
git diff --quiet HEAD || echo "$(cat "$pack/ptq/COMMIT") + uncommitted changes" > "$pack/ptq/COMMIT"
for b in llama-imatrix llama-quantize llama-perplexity; do xz -T2 -6 -c "$LLAMA_BIN/$b" > "$pack/llama/$b.xz"; done
gguf_version=$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("gguf"))')
[ -f "$pack/whl/gguf-$gguf_version-py3-none-any.whl" ] || python3 -m pip download -q --no-deps --only-binary=:all: \
    -d "$pack/whl" "gguf==$gguf_version"
shards=$(mktemp -d); trap 'rm -rf "$shards"' EXIT
tar -C "$shards" -xf "$SHARDS_TAR" && (cd "$shards/shards" && for f in *.xz; do xz -d "$f"; done)
"$PYTHON" scripts/shard_text.py "$shards/shards" --split train --vocab "$TOKENIZER" --tokens 100000 --out "$pack/ptq/calib.txt"
"$PYTHON" scripts/shard_text.py "$shards/shards" --split train --vocab "$TOKENIZER" --tokens 1200000 \
    --out "$pack/ptq/calib_large.txt"
"$PYTHON" scripts/shard_text.py "$shards/shards" --split val --vocab "$TOKENIZER" --tokens 40000 --out "$pack/ptq/val.txt"
du -sh "$pack"
