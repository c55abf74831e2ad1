#!/usr/bin/env bash
# run.sh — fresh machine to first result: install what is missing, build, run the main job (lowbit demo:
# error of every number format on embedded synthetic data, with and without Hadamard).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/lowbit demo "$@"
