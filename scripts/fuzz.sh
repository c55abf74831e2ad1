#!/usr/bin/env bash
# fuzz.sh — builds the libFuzzer targets with clang (ASan + UBSan) and runs each for SECONDS (default 60).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   targets: npy gguf safetensors token_shard configs (default: all,
# one after another). Seeds: tests/fuzz/corpus_<target>; the growing corpus and any crash files stay in build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(npy gguf safetensors token_shard configs)

common=(src/core/error.cpp src/formats/element_codec.cpp src/io/npy.cpp)
sources_npy=()
sources_gguf=(src/io/gguf_file.cpp src/io/mapped_file.cpp src/formats/gguf_blocks.cpp src/formats/gguf_types.cpp
              src/formats/mx_block.cpp src/core/thread_pool.cpp)
sources_safetensors=(src/io/safetensors.cpp src/io/mapped_file.cpp)
sources_token_shard=(src/io/token_shards.cpp src/io/mapped_file.cpp src/io/corpus.cpp)
# The config parsers reach the model loaders and the training code: every CPU source of the library (~4 min to build).
mapfile -t sources_configs < <(ls src/{core,formats,hadamard,io,model,train,adahop,ptq}/*.cpp |
                                grep -v -x -e src/core/error.cpp -e src/formats/element_codec.cpp -e src/io/npy.cpp)
max_len_npy=4096
max_len_gguf=8192
max_len_safetensors=4096
max_len_token_shard=2048
max_len_configs=4096

mkdir -p build-fuzz
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I src)
for t in "${targets[@]}"; do
    declare -n extra="sources_$t"
    declare -n max_len="max_len_$t"
    echo "fuzz.sh: building fuzz_$t"
    clang++ "${flags[@]}" "tests/fuzz/fuzz_$t.cpp" "${common[@]}" "${extra[@]}" -lfmt -lopenblas -lpthread -o "build-fuzz/fuzz_$t"
    mkdir -p "build-fuzz/corpus_$t"
    cp -n "tests/fuzz/corpus_$t"/* "build-fuzz/corpus_$t/" 2>/dev/null || true
    echo "fuzz.sh: running fuzz_$t for ${secs}s"
    (cd build-fuzz && "./fuzz_$t" -max_total_time="$secs" -max_len="$max_len" -print_final_stats=1 "corpus_$t")
done
