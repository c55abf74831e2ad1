// train_test_util.h — batches for the training tests (the CPU reference, runs, the CUDA engine): random token
// ids, and a TokenBatch with its own storage, cut from a token stream as the trainer cuts its windows (inputs = stream[t], targets =
// stream[t + 1], one window of n_tok + 1 tokens per sequence).
#pragma once

#include <cstdint>
#include <vector>

#include <cmath>

#include <gtest/gtest.h>

#include "core/counter_rng.h"
#include "train/backward_cpu.h"
#include "train/operand_analysis.h"
#include "train/trainer.h"

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

// ‖E‖ / ‖C‖ of an observed product (E given, or C_s − C), computed while its arrays exist (inside the observer).
inline double observed_relative_error(const ProductObservation& p) {
    const size_t n = size_t(p.m * p.n);
    if (!p.error) return relative_frobenius_error(p.c_s, p.c, n);
    double e2 = 0, c2 = 0;
    for (size_t i = 0; i < n; ++i) e2 += double(p.error[i]) * p.error[i], c2 += double(p.c[i]) * p.c[i];
    return std::sqrt(e2 / c2);
}

struct SeenProduct {
    ProductObservation p;  // its arrays are gone after the observer returns
    double relative_error = 0;
};
inline ProductObserver record_products(std::vector<SeenProduct>& out) {
    return [&out](const ProductObservation& p) { out.push_back({p, observed_relative_error(p)}); };
}

// A probe's wgrad observations against its slot errors: one per block projection and kProbeStrategies candidate,
// shaped like dW [out, in], with ‖E‖ / ‖C‖ the slot's error of that candidate (to rel_tol of it).
inline void expect_wgrad_observations(const std::vector<SeenProduct>& seen, const std::vector<SlotError>& errors,
                                      const LlamaConfig& c, double rel_tol) {
    ASSERT_EQ(seen.size(), size_t(c.n_layers * kProjectionCount) * kProbeStrategies.size());
    for (const SeenProduct& s : seen) {
        const ProductObservation& p = s.p;
        EXPECT_EQ(p.slot, Slot::wgrad);
        EXPECT_EQ(p.m, projection_out_features(c, p.projection));
        EXPECT_EQ(p.n, projection_in_features(c, p.projection));
        const SlotError& slot = errors[size_t((p.layer * kProjectionCount + int64_t(p.projection)) * 3 + 2)];
        EXPECT_NEAR(s.relative_error, slot.error[p.strategy], rel_tol * slot.error[p.strategy] + 1e-12);
    }
}

}  // namespace lowbit
