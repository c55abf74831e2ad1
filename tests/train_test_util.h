// train_test_util.h — batches for the training tests (the CPU reference, runs, the CUDA engine): random token
// ids, and a TokenBatch with its own storage, cut from a token stream as the trainer cuts its windows (inputs = stream[t], targets =
// stream[t + 1], one window of n_tok + 1 tokens per sequence).
#pragma once

#include <cstdint>
#include <vector>

#include "core/counter_rng.h"
#include "train/backward_cpu.h"

namespace lowbit {

// n token ids below `vocab` from the counter stream of `seed`.
inline std::vector<int32_t> random_token_ids(int64_t n, int64_t vocab, uint64_t seed) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[size_t(i)] = int32_t(counter_random24(seed, uint64_t(i)) % uint32_t(vocab));
    return t;
}

struct Batch {
    std::vector<int32_t> inputs, targets;
    BatchShape shape;
    TokenBatch view() const { return {inputs.data(), targets.data(), shape}; }
};

// shape.n_seq consecutive windows of shape.n_tok + 1 tokens of `stream` (at least n_seq·(n_tok + 1) long).
inline Batch batch_from_stream(const std::vector<int32_t>& stream, BatchShape shape) {
    Batch b;
    b.shape = shape;
    for (int64_t s = 0; s < shape.n_seq; ++s)
        for (int64_t t = 0; t < shape.n_tok; ++t) {
            b.inputs.push_back(stream[size_t(s * (shape.n_tok + 1) + t)]);
            b.targets.push_back(stream[size_t(s * (shape.n_tok + 1) + t + 1)]);
        }
    return b;
}

}  // namespace lowbit
