#!/usr/bin/env bash
# build.sh — configures and builds lowbit in build/ (Release), CMake preset `dev` (CMakePresets.json). CUDA
# targets build whenever nvcc is found. The GPU host's binaries come from the `h200` preset: scripts/pack_gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${LOWBIT_BUILD_JOBS:-2}
cmake --preset dev >/dev/null
cmake --build --preset dev -j"$jobs"
