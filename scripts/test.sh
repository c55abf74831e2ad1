#!/usr/bin/env bash
# test.sh — install what is missing, build, run every test: GoogleTest suites, the CUDA kernel suite
# (skips without a GPU) and the cross-checks against gguf, ml_dtypes and scipy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j2
