#!/usr/bin/env bash
# fuzz.sh — builds the libFuzzer targets with clang (ASan + UBSan) and runs each for SECONDS (default 60).
# Usage: scripts/fuzz.sh [SECONDS]. Seeds: tests/fuzz/corpus_*; new findings stay in build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
mkdir -p build-fuzz
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I src)
clang++ "${flags[@]}" tests/fuzz/fuzz_npy.cpp src/io/npy.cpp src/formats/element_codec.cpp src/core/error.cpp \
    -lfmt -o build-fuzz/fuzz_npy
mkdir -p build-fuzz/corpus_npy
cp -n tests/fuzz/corpus_npy/* build-fuzz/corpus_npy/ 2>/dev/null || true
./build-fuzz/fuzz_npy -max_total_time="$secs" -max_len=4096 -print_final_stats=1 build-fuzz/corpus_npy
