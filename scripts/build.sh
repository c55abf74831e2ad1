#!/usr/bin/env bash
# build.sh — configures and builds lowbit in build/ (Release). CUDA targets build whenever nvcc is found.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${LOWBIT_BUILD_JOBS:-2}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
