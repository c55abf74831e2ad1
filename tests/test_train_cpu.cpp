// test_train_cpu.cpp — the CPU FP32 reference of the training engine (src/train/): the training forward
// against the runtime's forward, every parameter gradient against central finite differences, AdamW,
// clipping and the learning-rate schedule against hand computation, memorisation of a repeated sequence,
// determinism, gradient accumulation, the AdaHOP seam, the parameter layout, presets and JSON configs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/counter_rng.h"
#include "core/random_fill.h"
#include "core/thread_pool.h"
#include "error_test_util.h"
#include "model/forward_cpu.h"
#include "train/backward_cpu.h"
#include "train/optimizer.h"
#include "train/param_layout.h"
#include "train/train_linear.h"
#include "train/train_model.h"
#include "train/trainer_cpu.h"
#include "train_test_util.h"

namespace lowbit {
namespace {

// A model small enough for thousands of forwards: 2 layers, d 32, 4 query heads of 8, ffn 48, vocab 37.
LlamaConfig check_config(bool tied, int64_t kv_heads, RopePairing pairing) {
    LlamaConfig c;
    c.architecture = "llama";
    c.name = "gradient check";
    c.vocab_size = 37;
    c.hidden_size = 32;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = kv_heads;
    c.head_dim = 8;
    c.ffn_size = 48;
    c.context_length = 64;
    c.rope_pairing = pairing;
    c.tied_embeddings = tied;
    return c;
}

// Inputs and next-token targets of n_seq random sequences.
Batch random_batch(const LlamaConfig& c, BatchShape shape, uint64_t seed) {
    return batch_from_stream(random_token_ids(shape.n_seq * (shape.n_tok + 1), c.vocab_size, seed), shape);
}

// ---------------------------------------------------------------------------------------------------
// (a) the training forward is the runtime's forward

TEST(TrainForward, LossEqualsRuntimeForwardAndCrossEntropy) {
    for (const bool tied : {true, false})
        for (const RopePairing pairing : {RopePairing::halves, RopePairing::adjacent})
            for (const int64_t n_seq : {1, 3}) {
                SCOPED_TRACE(fmt::format("tied {} pairing {} sequences {}", tied, rope_pairing_name(pairing), n_seq));
                const LlamaConfig c = check_config(tied, 2, pairing);
                LlamaModel m{c, random_llama_weights(c, 5, 0.3f)};
                const ParamLayout layout(c);
                const std::vector<float> params = params_from_model(layout, m);
                const Batch batch = random_batch(c, {n_seq, 11}, 9);
                TrainLinears linears = dense_train_linears(c);
                TrainActivations acts;
                const double loss = train_forward(layout, params.data(), linears, batch.view(), acts);

                const std::vector<float> logits = forward_logits(m, batch.inputs.data(), batch.shape);
                ASSERT_EQ(logits.size(), acts.logits.size());
                if (n_seq == 1) {
                    // Same ops, same order, same GEMM calls: the logits agree bit for bit.
                    EXPECT_EQ(std::memcmp(logits.data(), acts.logits.data(), logits.size() * sizeof(float)), 0);
                } else {
                    // forward_logits runs the LM head per sequence (M = n_tok), the training forward once for
                    // the batch (M = rows): OpenBLAS may then sum in another order, so FP32 rounding only.
                    double max_diff = 0, max_logit = 0;
                    for (size_t i = 0; i < logits.size(); ++i) {
                        max_diff = std::max(max_diff, std::abs(double(logits[i]) - double(acts.logits[i])));
                        max_logit = std::max(max_logit, std::abs(double(logits[i])));
                    }
                    EXPECT_LE(max_diff, 1e-6 * max_logit);
                }
                double expected = 0.0;  // mean NLL computed here in long double, independently of cross_entropy_mean
                for (int64_t r = 0; r < batch.shape.rows(); ++r) {
                    const float* l = logits.data() + r * c.vocab_size;
                    long double mx = *std::max_element(l, l + c.vocab_size), sum = 0;
                    for (int64_t i = 0; i < c.vocab_size; ++i) sum += std::exp((long double)l[i] - mx);
                    expected += double(mx + std::log(sum) - l[batch.targets[size_t(r)]]);
                }
                expected /= double(batch.shape.rows());
                EXPECT_NEAR(loss, expected, (n_seq == 1 ? 1e-12 : 1e-6) * std::abs(expected));
                EXPECT_GT(loss, 0.5);  // not a degenerate model
                // And the runtime model made back from the buffer is the same model.
                const LlamaModel back = to_llama_model(layout, params.data());
                EXPECT_EQ(forward_logits(back, batch.inputs.data(), batch.shape), logits);
            }
}

// ---------------------------------------------------------------------------------------------------
// (b) gradients against central finite differences

struct GradCase {
    bool tied;
    int64_t kv_heads;  // 2: GQA (two query heads per key/value head), 4: MHA
    RopePairing pairing;
};

// The loss is computed in FP32 (the reference has no FP64 path), so a finite difference carries rounding
// noise: the loss (≈ 5 here) moves by a few FP32 ulps (σ ≈ 2.5e-7, inferred from the measured noise) from one perturbed
// forward to the next for reasons unrelated to the perturbation. The fourth-order stencil
//     g ≈ (8·(L(θ+h) − L(θ−h)) − (L(θ+2h) − L(θ−2h))) / (12h),  h = 2^-7 ≈ 7.8e-3
// turns that into ≈ 1.5·σ/h ≈ 5e-5 of noise, while its truncation error (∝ h⁴) stays near 1e-5 here
// (measured over h = 2^-5 … 2^-9: the error is smallest at 2^-6 … 2^-7, at 2^-5 truncation dominates,
// below 2^-7 noise). Each coordinate is checked to |fd − g| ≤ 2e-4 + 2e-3·|g|, which the measured
// errors (≤ 6e-5 absolute, ≤ 0.22 of the bound) meet with a margin of 4. Coordinates: the largest-|g| one
// of each tensor (0.06 … 1 here) plus three random ones. A wrong term in any backward formula — the GQA
// sum, the sign of the RoPE backward, the RMSNorm mean term, the SwiGLU derivative, the softmax scale —
// moves gradients by far more (each was seen to fail this test when broken on purpose).
void check_gradients(const GradCase& gc) {
    const LlamaConfig c = check_config(gc.tied, gc.kv_heads, gc.pairing);
    LlamaModel m{c, random_llama_weights(c, 21, 0.3f)};
    for (float& e : m.weights.token_embd) e *= 0.3f;  // like the other matrices: logits of a few units, not ~6
    const ParamLayout layout(c);
    std::vector<float> params = params_from_model(layout, m);
    const Batch batch = random_batch(c, {2, 7}, 4);
    TrainLinears linears = dense_train_linears(c);
    TrainActivations acts;
    train_forward(layout, params.data(), linears, batch.view(), acts);
    std::vector<float> grads(size_t(layout.total()));
    train_backward(layout, params.data(), linears, batch.view(), acts, grads.data());

    auto loss_at = [&](int64_t i, float value) {
        const float saved = params[size_t(i)];
        params[size_t(i)] = value;
        TrainActivations scratch;
        const double l = train_forward(layout, params.data(), linears, batch.view(), scratch);
        params[size_t(i)] = saved;
        return l;
    };
    const float h = 0x1p-7f;  // θ ± h rounds to FP32 by ≤ 2e-6·h for |θ| < 2: negligible
    for (const ParamTensor& t : layout.tensors()) {
        std::vector<int64_t> coords;
        int64_t top = 0;
        for (int64_t i = 1; i < t.size(); ++i)
            if (std::abs(grads[size_t(t.offset + i)]) > std::abs(grads[size_t(t.offset + top)])) top = i;
        coords.push_back(top);
        for (int k = 0; k < 3; ++k) coords.push_back(int64_t(counter_random24(uint64_t(t.offset), uint64_t(k)) % uint32_t(t.size())));
        for (int64_t local : coords) {
            const int64_t i = t.offset + local;
            const float x = params[size_t(i)];
            const double fd = (8.0 * (loss_at(i, x + h) - loss_at(i, x - h)) - (loss_at(i, x + 2 * h) - loss_at(i, x - 2 * h))) /
                              (12.0 * double(h));
            const double g = grads[size_t(i)];
            EXPECT_NEAR(g, fd, 2e-4 + 2e-3 * std::abs(g)) << t.name << " [" << local << "]";
        }
        // The largest gradient of every tensor is well above the noise: the check has teeth everywhere.
        EXPECT_GT(std::abs(grads[size_t(t.offset + top)]), 3e-2) << t.name;
    }
}

TEST(TrainBackward, GradientsMatchFiniteDifferencesTiedGqaHalves) { check_gradients({true, 2, RopePairing::halves}); }
TEST(TrainBackward, GradientsMatchFiniteDifferencesUntiedGqaAdjacent) { check_gradients({false, 2, RopePairing::adjacent}); }
TEST(TrainBackward, GradientsMatchFiniteDifferencesTiedMhaAdjacent) { check_gradients({true, 4, RopePairing::adjacent}); }
TEST(TrainBackward, GradientsMatchFiniteDifferencesUntiedMhaHalves) { check_gradients({false, 4, RopePairing::halves}); }

// ---------------------------------------------------------------------------------------------------
// (c) AdamW, clipping, schedule

TEST(TrainOptimizer, AdamwStepsMatchHandComputation) {
    const ParamLayout layout(check_config(false, 2, RopePairing::halves));
    AdamWConfig cfg;
    cfg.beta1 = 0.8;
    cfg.beta2 = 0.9;
    cfg.eps = 1e-3;  // large enough to matter in the hand computation
    cfg.weight_decay = 0.25;
    std::vector<float> params(size_t(layout.total())), grads(params.size());
    for (size_t i = 0; i < params.size(); ++i) params[i] = 0.5f - 0.001f * float(i % 997);
    const int64_t w_i = layout.find("blk.1.attn_v.weight").offset + 5;  // decays
    const int64_t n_i = layout.find("blk.0.ffn_norm.weight").offset + 3;  // does not
    AdamW opt(layout, cfg);
    double p_w = params[size_t(w_i)], p_n = params[size_t(n_i)], m_w = 0, v_w = 0, m_n = 0, v_n = 0;
    const double lrs[2] = {0.1, 0.05}, g_w[2] = {0.3, -0.7}, g_n[2] = {-2.0, 0.125};
    for (int t = 1; t <= 2; ++t) {
        grads[size_t(w_i)] = float(g_w[t - 1]);
        grads[size_t(n_i)] = float(g_n[t - 1]);
        opt.step(params.data(), grads.data(), lrs[t - 1]);
        auto hand = [&](double& p, double& m, double& v, double g, double decay) {
            m = cfg.beta1 * m + (1 - cfg.beta1) * g;
            v = cfg.beta2 * v + (1 - cfg.beta2) * g * g;
            const double m_hat = m / (1 - std::pow(cfg.beta1, t)), v_hat = v / (1 - std::pow(cfg.beta2, t));
            p -= lrs[t - 1] * (m_hat / (std::sqrt(v_hat) + cfg.eps) + decay * p);
        };
        hand(p_w, m_w, v_w, g_w[t - 1], cfg.weight_decay);
        hand(p_n, m_n, v_n, g_n[t - 1], 0.0);
        // FP32 arithmetic against double: a few ulps of the values involved.
        EXPECT_NEAR(params[size_t(w_i)], p_w, 1e-6) << "step " << t;
        EXPECT_NEAR(params[size_t(n_i)], p_n, 1e-6) << "step " << t;
        EXPECT_NEAR(opt.first_moment()[size_t(w_i)], m_w, 1e-7);
        EXPECT_NEAR(opt.second_moment()[size_t(n_i)], v_n, 1e-7);
    }
    EXPECT_EQ(opt.steps_done(), 2);
    // Zero gradient, first update of a fresh optimizer: a matrix decays by exactly lr·λ·p, a norm gain stays.
    std::vector<float> p2(params.size(), 2.0f), zero(params.size(), 0.0f);
    AdamW fresh(layout, cfg);
    fresh.step(p2.data(), zero.data(), 0.1);
    EXPECT_FLOAT_EQ(p2[size_t(w_i)], 2.0f - 0.1f * (0.25f * 2.0f));
    EXPECT_EQ(p2[size_t(n_i)], 2.0f);
}

TEST(TrainOptimizer, GradScaleIsTheSameAsScaledGradients) {
    const ParamLayout layout(check_config(true, 2, RopePairing::halves));
    std::vector<float> grads(size_t(layout.total())), scaled(grads.size());
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = float(int(i % 13) - 6) * 0.01f;
    const float c = 0.37f;
    for (size_t i = 0; i < grads.size(); ++i) scaled[i] = c * grads[i];
    std::vector<float> a(grads.size(), 0.1f), b = a;
    AdamW oa(layout, {}), ob(layout, {});
    for (int t = 0; t < 3; ++t) {
        oa.step(a.data(), grads.data(), 1e-2, c);
        ob.step(b.data(), scaled.data(), 1e-2);
    }
    EXPECT_EQ(a, b);
}

TEST(TrainOptimizer, GlobalNormAndClipping) {
    const ParamLayout layout(check_config(true, 2, RopePairing::halves));
    std::vector<float> grads(size_t(layout.total()), 0.0f);
    grads[size_t(layout.find("token_embd.weight").offset)] = 3.0f;
    grads[size_t(layout.find("output_norm.weight").offset + 1)] = -4.0f;
    EXPECT_DOUBLE_EQ(global_grad_norm(layout, grads.data()), 5.0);
    EXPECT_FLOAT_EQ(grad_clip_scale(5.0, 1.0), 0.2f);
    EXPECT_EQ(grad_clip_scale(0.5, 1.0), 1.0f);
    EXPECT_EQ(grad_clip_scale(5.0, 0.0), 1.0f);  // clipping off
    grads[size_t(layout.find("blk.1.ffn_norm.weight").offset + 2)] = std::nanf("");
    expect_error_with([&] { global_grad_norm(layout, grads.data()); }, ErrorKind::runtime,
                      {"blk.1.ffn_norm.weight", "not finite"});
}

TEST(TrainOptimizer, WarmupThenCosineSchedule) {
    LrSchedule s;
    s.warmup_steps = 10;
    s.total_steps = 110;
    s.min_lr_fraction = 0.1;
    const double peak = 1e-3;
    EXPECT_DOUBLE_EQ(s.lr_at(0, peak), 1e-4);   // (0 + 1)/10 of the peak
    EXPECT_DOUBLE_EQ(s.lr_at(4, peak), 5e-4);
    EXPECT_DOUBLE_EQ(s.lr_at(9, peak), 1e-3);
    EXPECT_DOUBLE_EQ(s.lr_at(10, peak), 1e-3);  // cosine starts at the peak
    EXPECT_NEAR(s.lr_at(60, peak), 1e-4 + 0.5 * 9e-4, 1e-15);  // half way: the mean of peak and floor
    EXPECT_NEAR(s.lr_at(35, peak), 1e-4 + 9e-4 * 0.5 * (1 + std::cos(std::acos(-1.0) * 0.25)), 1e-15);
    EXPECT_DOUBLE_EQ(s.lr_at(110, peak), 1e-4);
    EXPECT_DOUBLE_EQ(s.lr_at(1000, peak), 1e-4);
    for (int64_t t = 10; t < 110; ++t) EXPECT_LE(s.lr_at(t + 1, peak), s.lr_at(t, peak));
    s.warmup_steps = 0;
    EXPECT_DOUBLE_EQ(s.lr_at(0, peak), 1e-3);
}

// ---------------------------------------------------------------------------------------------------
// (d) memorisation, (e) determinism

// A 64-token window that repeats a random phrase of 16 distinct tokens; both sequences of the batch start
// at different phases.
Batch repeated_phrase_batch(const LlamaConfig& c, int64_t n_seq, int64_t n_tok) {
    std::vector<int32_t> phrase;
    for (uint64_t i = 0; phrase.size() < 16; ++i) {
        const int32_t t = int32_t(counter_random24(77, i) % uint32_t(c.vocab_size));
        if (std::find(phrase.begin(), phrase.end(), t) == phrase.end()) phrase.push_back(t);
    }
    Batch b;
    b.shape = {n_seq, n_tok};
    for (int64_t s = 0; s < n_seq; ++s)
        for (int64_t t = 0; t < n_tok; ++t) {
            b.inputs.push_back(phrase[size_t((t + 5 * s) % 16)]);
            b.targets.push_back(phrase[size_t((t + 5 * s + 1) % 16)]);
        }
    return b;
}

TrainConfig tiny_run(int64_t steps) {
    TrainConfig t = train_preset("tiny");
    t.batch_size = 2;
    t.schedule.total_steps = steps;
    t.schedule.warmup_steps = std::min<int64_t>(10, steps - 1);
    t.optimizer.lr = 3e-3;
    return t;
}

TEST(TrainRun, MemorisesARepeatedPhrase) {
    const TrainConfig cfg = tiny_run(100);
    CpuTrainer trainer(cfg);
    const Batch batch = repeated_phrase_batch(cfg.model, cfg.batch_size, cfg.seq_len);
    StepStats first, last;
    for (int64_t s = 0; s < cfg.schedule.total_steps; ++s) {
        last = trainer.step(batch.view());
        if (s == 0) first = last;
        ASSERT_EQ(last.step, s);
        ASSERT_DOUBLE_EQ(last.lr, cfg.schedule.lr_at(s, cfg.optimizer.lr));
        ASSERT_TRUE(std::isfinite(last.loss) && std::isfinite(last.grad_norm));
        ASSERT_EQ(last.clip_scale, grad_clip_scale(last.grad_norm, cfg.optimizer.grad_clip));
    }
    // Initialized near uniform (std 0.02): the first loss is close to ln(vocab).
    EXPECT_NEAR(first.loss, std::log(double(cfg.model.vocab_size)), 0.1);
    const double final_loss = trainer.loss(batch.view());
    EXPECT_LT(final_loss, 0.1) << "first " << first.loss << ", last step " << last.loss;
    EXPECT_EQ(trainer.steps_done(), cfg.schedule.total_steps);
}

TEST(TrainRun, SameSeedSameParametersWhateverTheThreadCount) {
    const TrainConfig cfg = tiny_run(6);
    const Batch batch = repeated_phrase_batch(cfg.model, cfg.batch_size, cfg.seq_len);
    auto run = [&](const TrainConfig& c) {
        CpuTrainer t(c);
        for (int64_t s = 0; s < c.schedule.total_steps; ++s) t.step(batch.view());
        return t.params();
    };
    const std::vector<float> a = run(cfg);
    const int threads = thread_count();
    set_thread_count(1);
    const std::vector<float> b = run(cfg);
    set_thread_count(threads);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    TrainConfig other = cfg;
    other.seed = cfg.seed + 1;
    EXPECT_NE(run(other), a);
}

TEST(TrainRun, StepRefusesABatchOfAnotherShape) {
    CpuTrainer trainer(tiny_run(3));
    const Batch batch = repeated_phrase_batch(trainer.config().model, 1, 64);
    expect_error_with([&] { trainer.step(batch.view()); }, ErrorKind::usage, {"1 x 64", "2 sequences of 64"});
}

// ‖got − want‖ / ‖want‖ (Frobenius).
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        den += double(want[i]) * want[i];
    }
    return std::sqrt(num / den);
}

// Gradient accumulation: batch_size 4 as 1, 2 or 4 micro-batches takes the same steps up to FP32 summation order
// (measured: gradients and parameters within 5e-7, dense and mxfp4 alike). mxfp4's bound is looser because a
// last-bit difference may move an element across an E2M1 rounding boundary (none did here).
TEST(TrainRun, GradAccumulationTakesTheSameSteps) {
    for (const Precision precision : {Precision::bf16, Precision::mxfp4}) {
        SCOPED_TRACE(precision_name(precision));
        Recipe recipe;
        recipe.precision = precision;
        TrainConfig cfg = tiny_run(3);
        cfg.batch_size = 4;
        auto run = [&](int64_t grad_accum, std::vector<float>& first_grads, double& first_loss) {
            TrainConfig c = cfg;
            c.grad_accum = grad_accum;
            CpuTrainer t(c, recipe);
            for (int64_t s = 0; s < c.schedule.total_steps; ++s) {
                const Batch b = random_batch(c.model, {c.batch_size, c.seq_len}, 100 + uint64_t(s));
                const StepStats st = t.step(b.view());
                if (s == 0) {
                    first_grads = t.grads();
                    first_loss = st.loss;
                }
            }
            const Batch val = random_batch(c.model, {6, c.seq_len}, 99);  // 6 sequences: micro-batches of 2 and a tail
            return std::make_pair(t.params(), t.loss(val.view()));
        };
        std::vector<float> g1, g;
        double l1 = 0, l = 0;
        const auto [p1, val1] = run(1, g1, l1);
        const double tol = precision == Precision::bf16 ? 1e-5 : 1e-4;
        for (const int64_t accum : precision == Precision::bf16 ? std::vector<int64_t>{2, 4} : std::vector<int64_t>{4}) {
            SCOPED_TRACE(accum);
            const auto [p, val] = run(accum, g, l);
            EXPECT_NEAR(l, l1, tol * l1);
            EXPECT_LT(relative_error(g, g1), tol);
            EXPECT_LT(relative_error(p, p1), tol);
            EXPECT_NEAR(val, val1, tol * val1);
        }
    }
}

// mxfp4-rht-sr's stochastic rounding draws fresh bits per micro-batch: a step over [A; A] in two micro-batches
// averages two different roundings of A's gradient, so it differs from the one-micro-batch step over [A] (same
// counter as micro-batch 0) — it would equal it if both micro-batches drew the same bits.
TEST(TrainRun, GradAccumulationDrawsFreshRoundingPerMicroBatch) {
    Recipe recipe;
    recipe.precision = Precision::mxfp4_rht_sr;
    TrainConfig one = tiny_run(3);
    one.batch_size = 2;
    TrainConfig two = one;
    two.batch_size = 4;
    two.grad_accum = 2;
    const Batch a = random_batch(one.model, {2, one.seq_len}, 7);
    Batch aa = a;
    aa.shape.n_seq = 4;
    aa.inputs.insert(aa.inputs.end(), a.inputs.begin(), a.inputs.end());
    aa.targets.insert(aa.targets.end(), a.targets.begin(), a.targets.end());
    CpuTrainer t1(one, recipe), t2(two, recipe);
    const double loss1 = t1.step(a.view()).loss, loss2 = t2.step(aa.view()).loss;
    EXPECT_EQ(loss1, loss2);  // the forward is deterministic (round to nearest)
    const double diff = relative_error(t2.grads(), t1.grads());
    EXPECT_GT(diff, 1e-4);  // different rounding bits
    EXPECT_LT(diff, 0.5);   // of the same gradient
}

// ---------------------------------------------------------------------------------------------------
// the AdaHOP seam

std::vector<float> gaussian_matrix(int64_t rows, int64_t cols, uint64_t seed) {
    std::vector<float> v(size_t(rows * cols));
    fill_gaussian(v.data(), rows * cols, seed);
    return v;
}

TEST(TrainLinearSeam, AdahopSlotsAgreeWithDense) {
    const int64_t m = 64, k = 96, n = 32;  // every reduction dimension (K, N, M) a multiple of 32
    const std::vector<float> x = gaussian_matrix(m, k, 1), w = gaussian_matrix(n, k, 2), dy = gaussian_matrix(m, n, 3);
    DenseTrainLinear dense;
    std::vector<float> y(size_t(m * n)), dx(size_t(m * k)), dw(size_t(n * k));
    dense.forward(ConstMatF(x.data(), m, k), ConstMatF(w.data(), n, k), MatF(y.data(), m, n));
    dense.backward_data(ConstMatF(dy.data(), m, n), ConstMatF(w.data(), n, k), MatF(dx.data(), m, k));
    dense.backward_weight(ConstMatF(dy.data(), m, n), ConstMatF(x.data(), m, k), MatF(dw.data(), n, k));
    for (const bool quantize : {false, true})
        for (const Strategy s : {Strategy::plain, Strategy::iht, Strategy::iht_oe_left, Strategy::iht_oe_right}) {
            SCOPED_TRACE(fmt::format("{} quantize {}", strategy_name(s), quantize));
            LayerPlan plan;
            plan.fwd = plan.dgrad = plan.wgrad = s;
            LpMatmulOptions opts;
            opts.quantize = quantize;
            opts.oe_k = 8;
            opts.high_precision_bf16 = false;
            AdahopTrainLinear lin(plan, opts);
            std::vector<float> ya(y.size()), dxa(dx.size()), dwa(dw.size(), 1.0f);
            lin.forward(ConstMatF(x.data(), m, k), ConstMatF(w.data(), n, k), MatF(ya.data(), m, n));
            lin.backward_data(ConstMatF(dy.data(), m, n), ConstMatF(w.data(), n, k), MatF(dxa.data(), m, k));
            lin.backward_weight(ConstMatF(dy.data(), m, n), ConstMatF(x.data(), m, k), MatF(dwa.data(), n, k), 1.0f);
            for (float& v : dwa) v -= 1.0f;  // beta = 1 added the GEMM to the ones
            // Without quantization every strategy is the exact product (FP32 rounding); MXFP4 on Gaussian
            // data: ~0.1–0.2 relative error per product (the plain quantizer's SQNR ≈ 17 dB) — a wrong
            // orientation or transpose would give ~1.4.
            const double bound = quantize ? 0.3 : 1e-5;
            EXPECT_LT(relative_error(ya, y), bound);
            EXPECT_LT(relative_error(dxa, dx), bound);
            EXPECT_LT(relative_error(dwa, dw), bound + 1e-5);
        }
}

TEST(TrainLinearSeam, AdahopTrainingStillLearns) {
    // Every projection's three GEMMs in MXFP4 with IHT (the LM head dense): the repeated phrase is still learnt.
    const TrainConfig cfg = tiny_run(30);
    LayerPlan iht;  // default plan: IHT in every slot
    CpuTrainer trainer(cfg, adahop_train_linears(cfg.model, Plan{}, LpMatmulOptions{}, iht));
    const Batch batch = repeated_phrase_batch(cfg.model, cfg.batch_size, cfg.seq_len);
    const double first = trainer.step(batch.view()).loss;
    for (int64_t s = 1; s < cfg.schedule.total_steps; ++s) trainer.step(batch.view());
    EXPECT_LT(trainer.loss(batch.view()), 0.5 * first);
}

// ---------------------------------------------------------------------------------------------------
// layout, initialization, presets, JSON

TEST(TrainLayout, TensorsTileTheBufferInTheDocumentedOrder) {
    for (const bool tied : {true, false}) {
        const LlamaConfig c = check_config(tied, 2, RopePairing::halves);
        const ParamLayout layout(c);
        EXPECT_EQ(layout.total(), c.total_params());  // the runtime's count
        int64_t next = 0;
        for (const ParamTensor& t : layout.tensors()) {
            EXPECT_EQ(t.offset, next) << t.name;
            next += t.size();
            EXPECT_EQ(t.weight_decay(), t.kind != ParamKind::norm) << t.name;
        }
        EXPECT_EQ(next, layout.total());
        const std::vector<ParamTensor>& ts = layout.tensors();
        EXPECT_EQ(ts.front().name, "token_embd.weight");
        EXPECT_EQ(ts[1].name, "blk.0.attn_norm.weight");
        EXPECT_EQ(ts[2].name, "blk.0.attn_q.weight");
        EXPECT_EQ(ts[6].name, "blk.0.ffn_norm.weight");
        EXPECT_EQ(ts[9].name, "blk.0.ffn_down.weight");
        EXPECT_EQ(ts.back().name, tied ? "output_norm.weight" : "output.weight");
        const ParamTensor& wk = layout.find("blk.1.attn_k.weight");
        EXPECT_EQ(wk.rows, c.kv_dim());
        EXPECT_EQ(wk.cols, c.hidden_size);
        std::vector<float> buf(size_t(layout.total()));
        const ModelTensors<float> v = layout.views(buf.data());
        EXPECT_EQ(v.blocks[1][Projection::k], buf.data() + wk.offset);
        EXPECT_EQ(v.output == v.token_embd, tied);
    }
    const ParamLayout layout(check_config(true, 2, RopePairing::halves));
    expect_error_with([&] { layout.find("output.weight"); }, ErrorKind::usage, {"output.weight"});
    expect_error_with([] { ParamLayout(tiny_llama_config(true, true)); }, ErrorKind::usage, {"biases"});
}

TEST(TrainLayout, InitializationFollowsGpt2AndDependsOnlyOnSeedAndName) {
    TrainConfig cfg = train_preset("tiny");
    const ParamLayout layout(cfg.model);
    const std::vector<float> p = init_params(layout, 3, 0.02);
    auto stddev = [&](const std::string& name) {
        const ParamTensor& t = layout.find(name);
        double s = 0;
        for (int64_t i = 0; i < t.size(); ++i) s += double(p[size_t(t.offset + i)]) * p[size_t(t.offset + i)];
        return std::sqrt(s / double(t.size()));
    };
    EXPECT_NEAR(stddev("token_embd.weight"), 0.02, 0.001);
    EXPECT_NEAR(stddev("blk.0.ffn_up.weight"), 0.02, 0.001);
    EXPECT_NEAR(stddev("blk.1.ffn_down.weight"), 0.02 / 2.0, 0.0005);  // 1/√(2·2 layers)
    EXPECT_NEAR(stddev("blk.0.attn_output.weight"), 0.02 / 2.0, 0.0005);
    const ParamTensor& norm = layout.find("blk.1.attn_norm.weight");
    for (int64_t i = 0; i < norm.size(); ++i) EXPECT_EQ(p[size_t(norm.offset + i)], 1.0f);
    // Untying the embeddings adds a tensor and leaves every other tensor's values as they were.
    cfg.model.tied_embeddings = false;
    const ParamLayout untied(cfg.model);
    const std::vector<float> pu = init_params(untied, 3, 0.02);
    const ParamTensor& a = layout.find("blk.1.attn_q.weight");
    const ParamTensor& b = untied.find("blk.1.attn_q.weight");
    EXPECT_TRUE(std::equal(p.begin() + a.offset, p.begin() + a.offset + a.size(), pu.begin() + b.offset));
    EXPECT_NE(init_params(layout, 4, 0.02), p);
    EXPECT_EQ(init_params(layout, 3, 0.02), p);
}

TEST(TrainConfigs, PresetsHaveTheDocumentedShapes) {
    const TrainConfig tiny = train_preset("tiny"), small = train_preset("small"), base = train_preset("base");
    EXPECT_EQ(tiny.model.n_layers, 2);
    EXPECT_EQ(tiny.model.hidden_size, 64);
    EXPECT_EQ(tiny.model.n_kv_heads, 2);
    EXPECT_EQ(tiny.model.vocab_size, 512);
    const LlamaConfig& b = base.model;
    EXPECT_EQ(b.n_layers, 12);
    EXPECT_EQ(b.hidden_size, 768);
    EXPECT_EQ(b.n_heads, 12);
    EXPECT_EQ(b.n_kv_heads, 4);
    EXPECT_EQ(b.ffn_size, 3072);
    EXPECT_EQ(b.vocab_size, 49152);
    EXPECT_EQ(b.context_length, 1024);
    EXPECT_EQ(base.seq_len, 1024);
    for (const TrainConfig* t : {&tiny, &small, &base}) {
        validate_train_config(*t, t->preset);
        EXPECT_GT(t->schedule.total_steps, t->schedule.warmup_steps);
    }
    for (const TrainConfig* t : {&small, &base}) {
        EXPECT_EQ(t->model.hidden_size % 256, 0);
        EXPECT_EQ(t->model.ffn_size % 256, 0);
    }
    EXPECT_NEAR(double(ParamLayout(base.model).total()), 141.6e6, 0.1e6);  // the header's ~142 M
    expect_error_with([] { train_preset("huge"); }, ErrorKind::usage, {"huge", "tiny, small, base"});
}

std::string write_temp(const std::string& name, const std::string& text) {
    const std::string path =
        (std::filesystem::temp_directory_path() / fmt::format("lowbit_test_train_{}_{}", ::getpid(), name)).string();
    std::ofstream(path) << text;
    return path;
}

TEST(TrainConfigs, JsonOverridesAPresetAndRoundTrips) {
    const nlohmann::json j = nlohmann::json::parse(R"({
        "preset": "tiny",
        "model": {"num_hidden_layers": 3, "tie_word_embeddings": false},
        "rope_pairing": "adjacent",
        "seq_len": 32, "batch_size": 8, "grad_accum": 2, "steps": 50, "seed": 9,
        "optimizer": {"lr": 0.01, "weight_decay": 0.0},
        "schedule": {"warmup_steps": 5, "min_lr_fraction": 0.0}
    })");
    const TrainConfig t = train_config_from_json(j, "test.json");
    EXPECT_EQ(t.model.n_layers, 3);
    EXPECT_FALSE(t.model.tied_embeddings);
    EXPECT_EQ(t.model.hidden_size, 64);  // from the preset
    EXPECT_EQ(t.model.rope_pairing, RopePairing::adjacent);
    EXPECT_EQ(t.seq_len, 32);
    EXPECT_EQ(t.batch_size, 8);
    EXPECT_EQ(t.grad_accum, 2);
    EXPECT_EQ(micro_batch_size(t), 4);
    EXPECT_EQ(t.seed, 9u);
    EXPECT_EQ(t.optimizer.lr, 0.01);
    EXPECT_EQ(t.optimizer.weight_decay, 0.0);
    EXPECT_EQ(t.optimizer.beta2, 0.95);  // default kept
    EXPECT_EQ(t.schedule.warmup_steps, 5);
    EXPECT_EQ(t.schedule.total_steps, 50);
    const std::string path = write_temp("roundtrip.json", train_config_to_json(t).dump(2));
    const TrainConfig back = train_config_from_file(path);
    std::filesystem::remove(path);
    EXPECT_EQ(train_config_to_json(back), train_config_to_json(t));
    EXPECT_EQ(ParamLayout(back.model).total(), ParamLayout(t.model).total());
}

TEST(TrainConfigs, JsonRefusesWhatCannotBeTrained) {
    auto from = [](const char* text) { return train_config_from_json(nlohmann::json::parse(text), "cfg.json"); };
    expect_error_with([&] { from(R"({"preset": "tiny", "learning_rate": 1})"); }, ErrorKind::usage, {"cfg.json", "learning_rate"});
    expect_error_with([&] { from(R"({"preset": "tiny", "optimizer": {"betas": 1}})"); }, ErrorKind::usage, {"betas"});
    expect_error_with([&] { from(R"({"steps": 10})"); }, ErrorKind::usage, {"preset", "model"});
    expect_error_with([&] { from(R"({"preset": "tiny", "seq_len": 65})"); }, ErrorKind::usage, {"seq_len 65", "64"});
    expect_error_with([&] { from(R"({"preset": "tiny", "steps": 10, "schedule": {"warmup_steps": 10}})"); },
                      ErrorKind::usage, {"warm-up"});
    expect_error_with([&] { from(R"({"preset": "tiny", "rope_pairing": "neox"})"); }, ErrorKind::usage, {"rope_pairing"});
    expect_error_with([&] { from(R"({"preset": "tiny", "model": {"model_type": "qwen2"}})"); }, ErrorKind::usage, {"biases"});
    expect_error_with([&] { from(R"({"preset": "tiny", "optimizer": {"lr": "fast"}})"); }, ErrorKind::usage, {"'lr'"});
    expect_error_with([&] { from(R"({"preset": "tiny", "batch_size": 4, "grad_accum": 3})"); }, ErrorKind::usage,
                      {"grad_accum 3", "batch_size 4"});
    expect_error_with([&] { from(R"({"preset": "tiny", "grad_accum": 0})"); }, ErrorKind::usage, {"grad_accum 0"});
    const std::string bad = write_temp("bad.json", "{ not json");
    expect_error_with([&] { train_config_from_file(bad); }, ErrorKind::input, {"not valid JSON"});
    std::filesystem::remove(bad);
}

// CpuTrainer::probe_slot_errors: every block slot in layer-major order, the run's own error (0 for FP32 linears; the
// plain candidate's for mxfp4), the wgrad observations for ErrorConsistency, and the run untouched.
TEST(CpuTrainerProbe, MeasuresEverySlotAndLeavesTheRunAsItWas) {
    TrainConfig cfg = train_preset("tiny");
    cfg.batch_size = 2;
    cfg.seq_len = 32;
    for (const Precision precision : {Precision::bf16, Precision::mxfp4}) {
        SCOPED_TRACE(precision_name(precision));
        Recipe recipe;
        recipe.precision = precision;
        CpuTrainer probed(cfg, recipe), plain(cfg, recipe);
        const Batch b0 = random_batch(cfg.model, {cfg.batch_size, cfg.seq_len}, 1);
        const Batch b1 = random_batch(cfg.model, {cfg.batch_size, cfg.seq_len}, 2);
        probed.step(b0.view());
        plain.step(b0.view());
        std::vector<SeenProduct> seen;
        probed.set_probe_observer(record_products(seen));
        const std::vector<SlotError> e = probed.probe_slot_errors(b1.view());
        ASSERT_EQ(e.size(), size_t(cfg.model.n_layers * kProjectionCount * 3));
        for (size_t i = 0; i < e.size(); ++i) {
            EXPECT_EQ(e[i].layer, int64_t(i) / (3 * kProjectionCount));
            EXPECT_EQ(size_t(e[i].projection), i / 3 % kProjectionCount);
            EXPECT_EQ(size_t(e[i].slot), i % 3);
            if (precision == Precision::bf16) {
                EXPECT_EQ(e[i].active, Strategy::full);
                EXPECT_EQ(e[i].active_error, 0.0);
            } else {
                EXPECT_EQ(e[i].active, Strategy::plain);
                EXPECT_NEAR(e[i].active_error, e[i].error[0], 1e-9);
            }
            for (double x : e[i].error) EXPECT_TRUE(x > 0 && x < 1) << x;
        }
        expect_wgrad_observations(seen, e, cfg.model, 1e-9);
        probed.set_probe_observer({});
        EXPECT_EQ(probed.step(b1.view()).loss, plain.step(b1.view()).loss);
        EXPECT_EQ(probed.params(), plain.params());
    }
    // The probe takes a step's batch shape.
    CpuTrainer t(cfg);
    EXPECT_THROW(t.probe_slot_errors(random_batch(cfg.model, {1, cfg.seq_len}, 3).view()), Error);
}

}  // namespace
}  // namespace lowbit
