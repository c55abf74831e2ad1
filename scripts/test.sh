#!/usr/bin/env bash
# test.sh — install what is missing, build, fetch the reference model, run every test: GoogleTest suites,
# the CUDA suites (skip without a GPU) and the cross-checks against gguf, ml_dtypes, scipy and tokenizers
# (the real-model tests and cross-checks use the SmolLM2 GGUF that fetch_model.sh caches).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/fetch_model.sh
ctest --preset dev  # build/, output on failure, -j2
