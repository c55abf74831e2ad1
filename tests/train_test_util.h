// train_test_util.h — batches for the training tests (the CPU reference, runs, the CUDA engine): a TokenBatch
// with its own storage, cut from a token stream as the trainer cuts its windows (inputs = stream[t], targets =
// stream[t + 1], one window of n_tok + 1 tokens per sequence).
#pragma once

#include <cstdint>
#include <vector>

#include "train/backward_cpu.h"

namespace lowbit {

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
