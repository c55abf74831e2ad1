// test_cuda_trainer.cu — the CUDA training engine (train/cuda/trainer_cuda.cu) against the CPU FP32 reference
// (train/trainer_cpu.h) on the tiny preset: loss and per-tensor gradients of the same parameters, a few
// optimizer steps side by side, gradient accumulation, determinism and bit-exact resume through state()/set_state(), learning, the
// MXFP4 recipes and AdaHOP's calibration → plan, the slot-error probe, the MX tensor-core census, and the NaN
// guard. Skips without a GPU.
//
// Tolerances: the engine keeps activations, the GEMMs' operands and dY in BF16 (8 significant bits, relative
// rounding 2^-9 per value) and sums in FP32; each value of a gradient is a sum over many products of such
// roundings, so a tensor's gradient differs from the FP32 reference by ~1e-2 relative in L2 (measured on the
// H200: see the comments at each bound). A broken op (a wrong sign, a missing GQA sum) moves a tensor's
// gradient by O(1) relative, far outside these bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/counter_rng.h"
#include "cuda_test_util.h"
#include "adahop/lp_matmul.h"
#include "train/cuda/train_linear_cuda.cuh"
#include "train/trainer.h"
#include "train/trainer_cpu.h"
#include "../train_test_util.h"

namespace lowbit {
namespace {

Batch random_batch(const TrainConfig& c, uint64_t seed) {
    std::vector<int32_t> stream(size_t(c.batch_size * (c.seq_len + 1)));
    for (size_t i = 0; i < stream.size(); ++i)
        stream[i] = int32_t(counter_random24(seed, i) % uint32_t(c.model.vocab_size));
    return batch_from_stream(stream, {c.batch_size, c.seq_len});
}

// A repeated phrase of 16 tokens, each sequence at another phase: learnable in a few dozen steps.
Batch phrase_batch(const TrainConfig& c) {
    std::vector<int32_t> stream;
    for (int64_t s = 0; s < c.batch_size; ++s)
        for (int64_t t = 0; t <= c.seq_len; ++t) stream.push_back(int32_t((7 * ((t + 3 * s) % 16) + 11) % c.model.vocab_size));
    return batch_from_stream(stream, {c.batch_size, c.seq_len});
}

TrainConfig tiny(int64_t steps, bool tied = true) {
    TrainConfig t = train_preset("tiny");
    t.model.tied_embeddings = tied;
    t.batch_size = 2;
    t.schedule.total_steps = steps;
    t.schedule.warmup_steps = std::min<int64_t>(5, steps - 1);
    t.optimizer.lr = 3e-3;
    return t;
}

double rel_l2(const float* a, const float* b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

TEST(CudaTrainer, LossAndGradientsMatchTheCpuReference) {
    REQUIRE_GPU();
    for (bool tied : {true, false}) {
        const TrainConfig c = tiny(4, tied);
        CpuTrainer cpu(c);
        auto gpu = make_cuda_trainer(c, Recipe{});
        const Batch batch = random_batch(c, 5);
        const StepStats sc = cpu.step(batch.view());
        const StepStats sg = gpu->step(batch.view());
        // Same initial parameters (same seed): the losses of step 0 differ by the BF16 activations only.
        EXPECT_NEAR(sg.loss, sc.loss, 2e-3 * sc.loss) << "tied " << tied;
        EXPECT_NEAR(sg.grad_norm, sc.grad_norm, 3e-2 * sc.grad_norm) << "tied " << tied;
        const std::vector<float> gg = gpu->gradients();
        const std::vector<float>& gc = cpu.grads();
        for (const ParamTensor& t : cpu.layout().tensors()) {
            const double e = rel_l2(gg.data() + t.offset, gc.data() + t.offset, t.size());
            EXPECT_LT(e, 5e-2) << t.name << " tied " << tied;  // BF16 activations and dY (header)
        }
        EXPECT_LT(rel_l2(gg.data(), gc.data(), int64_t(gc.size())), 2e-2) << "tied " << tied;
    }
}

TEST(CudaTrainer, StepsFollowTheCpuReference) {
    REQUIRE_GPU();
    const TrainConfig c = tiny(8);
    CpuTrainer cpu(c);
    auto gpu = make_cuda_trainer(c, Recipe{});
    for (int64_t s = 0; s < 8; ++s) {
        const Batch batch = random_batch(c, 100 + uint64_t(s));
        const StepStats sc = cpu.step(batch.view()), sg = gpu->step(batch.view());
        EXPECT_EQ(sg.step, s);
        EXPECT_DOUBLE_EQ(sg.lr, sc.lr);
        EXPECT_NEAR(sg.loss, sc.loss, 1e-2) << "step " << s;
    }
    const std::vector<float> pg = gpu->state().params;
    EXPECT_LT(rel_l2(pg.data(), cpu.params().data(), int64_t(pg.size())), 1e-2);
}

// Gradient accumulation: a step of 4 sequences as 2 or 4 micro-batches against the same step in one batch, and
// against the CPU reference with the same micro-batches. The micro-batches see the same rows and the same dlogits
// scale (1/(the step's rows)), so only the GEMMs' summation (cuBLAS picks by shape) and the accumulation order
// differ; a BF16 rounding of dY may flip with them (2^-9 relative per flipped value). A missing accumulation or
// a wrong scale moves the gradient by ≥ 0.5 relative.
TEST(CudaTrainer, GradAccumulationMatchesOneBatchAndTheCpu) {
    REQUIRE_GPU();
    for (const Precision precision : {Precision::bf16, Precision::mxfp4}) {
        SCOPED_TRACE(precision_name(precision));
        Recipe recipe;
        recipe.precision = precision;
        TrainConfig c = tiny(3);
        c.batch_size = 4;
        const Batch batch = random_batch(c, 11), val = random_batch(c, 12);
        auto one = make_cuda_trainer(c, recipe);
        const StepStats s1 = one->step(batch.view());
        const std::vector<float> g1 = one->gradients();
        const double val1 = one->loss(val.view());
        for (const int64_t accum : {2, 4}) {
            SCOPED_TRACE(accum);
            TrainConfig ca = c;
            ca.grad_accum = accum;
            auto gpu = make_cuda_trainer(ca, recipe);
            const StepStats sg = gpu->step(batch.view());
            const std::vector<float> gg = gpu->gradients();
            EXPECT_NEAR(sg.loss, s1.loss, 1e-5 * s1.loss);
            EXPECT_LT(rel_l2(gg.data(), g1.data(), int64_t(g1.size())), precision == Precision::bf16 ? 1e-3 : 1e-2);
            EXPECT_NEAR(gpu->loss(val.view()), val1, 1e-4 * val1);
            if (precision != Precision::bf16) continue;  // the CPU quantizes FP32 activations: other MXFP4 codes
            CpuTrainer cpu(ca, recipe);
            const StepStats sc = cpu.step(batch.view());
            EXPECT_NEAR(sg.loss, sc.loss, 2e-3 * sc.loss);  // BF16 activations (LossAndGradientsMatchTheCpuReference)
            EXPECT_LT(rel_l2(gg.data(), cpu.grads().data(), int64_t(gg.size())), 2e-2);
        }
    }
}

TEST(CudaTrainer, DeterministicAndResumesBitExactly) {
    REQUIRE_GPU();
    const TrainConfig c = tiny(6);
    auto a = make_cuda_trainer(c, Recipe{});
    auto b = make_cuda_trainer(c, Recipe{});
    std::vector<double> losses_a;
    for (int64_t s = 0; s < 6; ++s) losses_a.push_back(a->step(random_batch(c, 200 + uint64_t(s)).view()).loss);
    for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(b->step(random_batch(c, 200 + uint64_t(s)).view()).loss, losses_a[size_t(s)]);
    const TrainerState mid = b->state();
    EXPECT_EQ(mid.steps_done, 3);
    b.reset();
    auto resumed = make_cuda_trainer(c, Recipe{});
    resumed->set_state(mid);
    for (int64_t s = 3; s < 6; ++s) {
        const StepStats st = resumed->step(random_batch(c, 200 + uint64_t(s)).view());
        EXPECT_EQ(st.step, s);
        EXPECT_EQ(st.loss, losses_a[size_t(s)]) << "step " << s;
    }
    const TrainerState ea = a->state(), er = resumed->state();
    EXPECT_EQ(0, std::memcmp(ea.params.data(), er.params.data(), ea.params.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(ea.m.data(), er.m.data(), ea.m.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(ea.v.data(), er.v.data(), ea.v.size() * sizeof(float)));
}

TEST(CudaTrainer, LearnsARepeatedPhraseInEveryRecipe) {
    REQUIRE_GPU();
    for (Precision p : {Precision::bf16, Precision::mxfp4, Precision::mxfp4_iht, Precision::mxfp4_rht_sr}) {
        const TrainConfig c = tiny(60);
        auto gpu = make_cuda_trainer(c, Recipe{p});
        const Batch batch = phrase_batch(c);
        const double first = gpu->loss(batch.view());
        for (int64_t s = 0; s < 60; ++s) ASSERT_TRUE(std::isfinite(gpu->step(batch.view()).loss)) << precision_name(p);
        const double last = gpu->loss(batch.view());
        EXPECT_NEAR(first, std::log(double(c.model.vocab_size)), 0.1) << precision_name(p);
        EXPECT_LT(last, 0.5) << precision_name(p) << " from " << first;  // bf16 reaches ~0.01 (measured)
        if (p == Precision::bf16) {
            EXPECT_EQ(gpu->saved_operand_bytes(), gpu->saved_operand_bytes_bf16());
        } else {
            // Quantized inputs take 4.25 bits of 16; Wo's input (the attention output) stays BF16 because the
            // attention backward reads it: 0.37 of BF16 on the tiny preset (0.48 for rht-sr, whose q/k/v and
            // gate/up keep one quantized copy each: their stochastic rounding bits differ).
            EXPECT_LT(gpu->saved_operand_bytes() * 2, gpu->saved_operand_bytes_bf16()) << precision_name(p);
        }
    }
}

TEST(CudaTrainer, QuantizedRecipesDifferFromBf16) {
    REQUIRE_GPU();
    const TrainConfig c = tiny(3);
    auto bf = make_cuda_trainer(c, Recipe{Precision::bf16});
    auto mx = make_cuda_trainer(c, Recipe{Precision::mxfp4});
    auto iht = make_cuda_trainer(c, Recipe{Precision::mxfp4_iht});
    const Batch batch = random_batch(c, 9);
    const double lb = bf->step(batch.view()).loss, lm = mx->step(batch.view()).loss, li = iht->step(batch.view()).loss;
    EXPECT_NE(lb, lm);
    EXPECT_NE(lb, li);
    EXPECT_NE(lm, li);
    EXPECT_NEAR(lm, lb, 0.05);  // MXFP4 forward error on a near-uniform model: small
}

// The recipe settings of the ablations reach every quantized GEMM of the CUDA engine: another scale rule changes the
// loss; a layer mask naming every block is the unmasked recipe (bit for bit), one naming a single block lies between.
TEST(CudaTrainer, ScaleRuleAndLayerMaskReachTheGemms) {
    REQUIRE_GPU();
    const TrainConfig c = tiny(3);
    const Batch batch = random_batch(c, 9);
    const auto loss = [&](ScaleRule rule, const char* layers) {
        Recipe r{Precision::mxfp4};
        r.mx_scale_rule = rule;
        if (layers) r.mx_layers = parse_layer_mask(layers);
        return make_cuda_trainer(c, r)->step(batch.view()).loss;
    };
    const double midmax = loss(ScaleRule::midmax, nullptr);
    EXPECT_NE(loss(ScaleRule::rceil, nullptr), midmax);
    EXPECT_NE(loss(ScaleRule::floor, nullptr), midmax);
    EXPECT_EQ(loss(ScaleRule::midmax, "0-1"), midmax);  // the tiny model's two blocks
    const double bf16 = make_cuda_trainer(c, Recipe{Precision::bf16})->step(batch.view()).loss;
    for (const char* one : {"0", "1"}) {
        EXPECT_NE(loss(ScaleRule::midmax, one), midmax) << one;
        EXPECT_NE(loss(ScaleRule::midmax, one), bf16) << one;
    }
}

TEST(CudaTrainer, AdahopCalibratesThenFixesAPlan) {
    REQUIRE_GPU();
    const TrainConfig c = tiny(8);
    Recipe r{Precision::adahop_lv1};
    r.calibration_steps = 3;
    auto gpu = make_cuda_trainer(c, r);
    EXPECT_TRUE(gpu->recipe().calibrating());
    for (int64_t s = 0; s < 3; ++s) gpu->step(random_batch(c, 300 + uint64_t(s)).view());
    EXPECT_FALSE(gpu->recipe().calibrating());
    const Plan& plan = gpu->recipe().plan();
    EXPECT_EQ(int64_t(plan.layers.size()), c.model.n_layers * int64_t(kProjectionCount));
    int64_t slots = 0;
    for (const auto& [name, n] : gpu->recipe().strategy_counts()) slots += n;
    EXPECT_EQ(slots, 3 * c.model.n_layers * int64_t(kProjectionCount));
    // The plan travels in the state: a resumed trainer uses it.
    const TrainerState st = gpu->state();
    auto resumed = make_cuda_trainer(c, r);
    resumed->set_state(st);
    EXPECT_FALSE(resumed->recipe().calibrating());
    const Batch batch = random_batch(c, 400);
    EXPECT_EQ(resumed->step(batch.view()).loss, gpu->step(batch.view()).loss);
}

// The probe's measure against the CPU reference: lp_matmul (adahop/lp_matmul.h) and an FP64 product of the
// same BF16 operands give the relative error the GPU reports to FP32 summation order (≤ 1e-3 relative of a
// ~0.1 error here; a wrong operand orientation or a missing scale moves it by O(1)).
TEST(CudaTrainer, SlotProbeErrorsMatchTheCpuLpMatmul) {
    REQUIRE_GPU();
    using namespace testing_util;
    const int64_t m = 96, k = 128, n = 160;  // every OE side has more than k = 64 rows / columns
    const std::vector<float> xa = from_bf16(to_bf16(gaussian(m, k, 1))), wa = from_bf16(to_bf16(gaussian(n, k, 2)));
    const std::vector<float> dya = from_bf16(to_bf16(gaussian(m, n, 3)));
    DeviceBuffer<uint16_t> x = to_device(to_bf16(xa)), w = to_device(to_bf16(wa)), dy = to_device(to_bf16(dya));
    const auto bf = [](const DeviceBuffer<uint16_t>& b) { return reinterpret_cast<const __nv_bfloat16*>(b.data()); };
    const auto transpose = [](const std::vector<float>& t, int64_t rows, int64_t cols) {
        std::vector<float> r(t.size());
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j) r[size_t(j * rows + i)] = t[size_t(i * cols + j)];
        return r;
    };
    // CPU: C = A·B with A [M, K'] and B [K', N'] for each slot (train_linear_cuda.cuh's orientations).
    struct Case {
        Slot slot;
        std::vector<float> a, b;
        int64_t mm, kk, nn;
        const __nv_bfloat16 *ga, *gb;
    };
    const Case cases[] = {{Slot::fwd, xa, transpose(wa, n, k), m, k, n, bf(x), bf(w)},
                          {Slot::dgrad, dya, wa, m, n, k, bf(dy), bf(w)},
                          {Slot::wgrad, transpose(dya, m, n), xa, n, m, k, bf(dy), bf(x)}};
    CudaTrainGemm gemm(0);
    SlotProbeScratch scratch;
    for (const Case& cs : cases) {
        std::vector<TrainGemmMode> modes;
        for (Strategy st : kProbeStrategies) modes.push_back(TrainGemmMode{st, LpMatmulOptions{}});
        modes.push_back(TrainGemmMode{});  // BF16 against itself: exactly 0
        const std::vector<double> got = slot_relative_errors(gemm, cs.slot, modes, cs.ga, cs.gb, m, k, n, scratch, 0);
        ASSERT_EQ(got.size(), modes.size());
        EXPECT_EQ(got.back(), 0.0) << slot_name(cs.slot);
        std::vector<double> sum(size_t(cs.mm * cs.nn), 0.0);
        for (int64_t i = 0; i < cs.mm; ++i)
            for (int64_t t = 0; t < cs.kk; ++t)
                for (int64_t j = 0; j < cs.nn; ++j)
                    sum[size_t(i * cs.nn + j)] += double(cs.a[size_t(i * cs.kk + t)]) * cs.b[size_t(t * cs.nn + j)];
        const std::vector<float> exact(sum.begin(), sum.end());  // FP64 sums rounded once: 2^-24, far below 1e-3
        for (size_t s = 0; s < kProbeStrategies.size(); ++s) {
            std::vector<float> c(exact.size());
            lp_matmul(cs.a.data(), cs.b.data(), cs.mm, cs.kk, cs.nn, kProbeStrategies[s], LpMatmulOptions{}, c.data());
            const double want = rel_l2(c.data(), exact.data(), int64_t(c.size()));
            EXPECT_GT(want, 0.01) << slot_name(cs.slot) << " " << strategy_short_name(kProbeStrategies[s]);
            EXPECT_NEAR(got[s], want, 1e-3 * want) << slot_name(cs.slot) << " " << strategy_short_name(kProbeStrategies[s]);
        }
    }
}

// The probe covers every slot in layer-major order, measures the run's own mode (equal to the same strategy
// among the candidates for the uniform recipes, 0 for BF16), and leaves the run untouched: the steps after a
// probe are bit-identical to those of a trainer that never probed.
TEST(CudaTrainer, SlotProbeCoversEverySlotAndLeavesTheRunAsItWas) {
    REQUIRE_GPU();
    using testing_util::expect_error;
    const TrainConfig c = tiny(6);
    for (Precision p : {Precision::bf16, Precision::mxfp4, Precision::adahop_lv1}) {
        Recipe r{p};
        r.calibration_steps = 2;
        auto probed = make_cuda_trainer(c, r), plain = make_cuda_trainer(c, r);
        for (int64_t s = 0; s < 4; ++s) {
            const Batch batch = random_batch(c, 500 + uint64_t(s));
            const double lp = probed->step(batch.view()).loss, lq = plain->step(batch.view()).loss;
            ASSERT_EQ(lp, lq) << precision_name(p) << " step " << s;
            if (s % 2 == 1) continue;
            const int64_t saved = probed->saved_operand_bytes();
            const std::vector<SlotError> e = probed->probe_slot_errors(random_batch(c, 900).view());
            EXPECT_EQ(probed->saved_operand_bytes(), saved);
            ASSERT_EQ(int64_t(e.size()), c.model.n_layers * int64_t(kProjectionCount) * 3) << precision_name(p);
            for (size_t i = 0; i < e.size(); ++i) {
                const SlotError& x = e[i];
                EXPECT_EQ(x.layer, int64_t(i) / int64_t(3 * kProjectionCount));
                EXPECT_EQ(size_t(x.projection), i / 3 % kProjectionCount);
                EXPECT_EQ(size_t(x.slot), i % 3);
                EXPECT_EQ(x.active, probed->recipe().strategy(x.layer, x.projection, x.slot));
                for (size_t k = 0; k < kProbeStrategies.size(); ++k) {
                    EXPECT_TRUE(std::isfinite(x.error[k]));
                    EXPECT_GE(x.error[k], 0.0);  // 0 where OE extracts every row (tiny's 32-wide k/v)
                    EXPECT_LT(x.error[k], 1.0);
                    if (x.active == kProbeStrategies[k]) EXPECT_EQ(x.active_error, x.error[k]);
                }
                if (x.active == Strategy::full) EXPECT_EQ(x.active_error, 0.0);
            }
        }
        EXPECT_EQ(probed->state().params, plain->state().params) << precision_name(p);
    }
    expect_error(ErrorKind::usage, [&] {
        auto gpu = make_cuda_trainer(c, Recipe{Precision::bf16});
        TrainConfig other = c;
        other.batch_size = 1;
        gpu->probe_slot_errors(random_batch(other, 1).view());
    });
}

// The probe's wgrad observations (Trainer::set_probe_observer, for ErrorConsistency): one per block projection and
// candidate, the weight gradient's shape, and ‖E‖ / ‖C_BF16‖ equal to the probe's own error of that candidate.
TEST(CudaTrainer, SlotProbeHandsEveryWgradErrorToItsObserver) {
    REQUIRE_GPU();
    const TrainConfig c = tiny(6);
    auto gpu = make_cuda_trainer(c, Recipe{Precision::mxfp4});
    gpu->step(random_batch(c, 1).view());
    std::vector<SeenProduct> seen;
    gpu->set_probe_observer(record_products(seen));
    const std::vector<SlotError> e = gpu->probe_slot_errors(random_batch(c, 2).view());
    gpu->set_probe_observer({});
    for (const SeenProduct& s : seen) EXPECT_NE(s.p.error, nullptr);  // the GPU hands E itself
    expect_wgrad_observations(seen, e, c.model, 1e-6);
}

// The MX census (Trainer::set_mx_census) with every slot of mxfp4 on the INT8 tensor cores: per layer, projection
// and slot, one product per step with (⌈M/128⌉ + ⌈N/128⌉) · ⌈K/256⌉ (operand, tile, chunk) triples and ⌈M/128⌉ ·
// ⌈N/128⌉ output tiles for the slot's product C [M × N] over K (train_linear_cuda.cuh), the off-window triples and
// slow tiles among them (a product with a triple outside has a slow tile, and only then); a probe adds nothing. Off
// by default, and refused without Recipe::mx_tensor_cores. The same geometry under both folds of B (one INT8 base per
// 128-line tile, or per line: Recipe::mx_column_bases), whose steps agree with the emulation's within FP32 summation.
TEST(CudaTrainer, MxCensusCountsEveryTensorCoreProductOfEverySlot) {
    REQUIRE_GPU();
    if (!cuda_tma_usable()) GTEST_SKIP() << "the tensor-core MX GEMM is the sm_90a kernel's";
    const TrainConfig c = tiny(6);
    testing_util::expect_error(ErrorKind::usage, [&] { make_cuda_trainer(c, Recipe{Precision::mxfp4})->set_mx_census(true); });
    for (const bool column_bases : {false, true}) {
        SCOPED_TRACE(column_bases ? "one base per line of B" : "one base per tile of B");
        Recipe r{Precision::mxfp4};
        r.mx_tensor_cores = true;
        r.mx_column_bases = column_bases;
        auto gpu = make_cuda_trainer(c, r);
        auto emulated = make_cuda_trainer(c, Recipe{Precision::mxfp4});
        EXPECT_NEAR(gpu->step(random_batch(c, 1).view()).loss, emulated->step(random_batch(c, 1).view()).loss, 1e-4);
        EXPECT_TRUE(gpu->mx_census().empty());
        gpu->set_mx_census(true);
        const int64_t steps = 2;
        for (int64_t s = 0; s < steps; ++s) gpu->step(random_batch(c, 10 + uint64_t(s)).view());
        gpu->probe_slot_errors(random_batch(c, 99).view());
        const std::vector<MxCensusEntry> entries = gpu->mx_census();
        ASSERT_EQ(int64_t(entries.size()), c.model.n_layers * int64_t(kProjectionCount) * 3);
        const int64_t rows = c.batch_size * c.seq_len;
        const auto tiles = [](int64_t lines, int64_t tile) { return (lines + tile - 1) / tile; };
        for (size_t i = 0; i < entries.size(); ++i) {
            const MxCensusEntry& e = entries[i];
            EXPECT_EQ(e.layer, int64_t(i) / int64_t(3 * kProjectionCount));
            EXPECT_EQ(size_t(e.projection), i / 3 % kProjectionCount);
            EXPECT_EQ(size_t(e.slot), i % 3);
            const int64_t in = projection_in_features(c.model, e.projection), out = projection_out_features(c.model, e.projection);
            const int64_t m = e.slot == Slot::wgrad ? out : rows, n = e.slot == Slot::fwd ? out : in,
                          k = e.slot == Slot::fwd ? in : e.slot == Slot::dgrad ? out : rows;
            SCOPED_TRACE("entry " + std::to_string(i));
            EXPECT_EQ(e.tally.calls, steps);
            EXPECT_EQ(e.tally.units, steps * (tiles(m, 128) + tiles(n, 128)) * tiles(k, 256));
            EXPECT_EQ(e.tally.tile_chunks, steps * tiles(m, 128) * tiles(n, 128) * tiles(k, 256));
            EXPECT_GE(e.tally.off_window, 0);
            EXPECT_LE(e.tally.off_window, e.tally.units);
            EXPECT_LE(e.tally.slow_tile_chunks + e.tally.two_plane_tile_chunks, e.tally.tile_chunks);
            if (e.tally.off_window > 0) EXPECT_GT(e.tally.slow_tile_chunks, 0);  // a unit outside slows every pair it meets
        }
        gpu->set_mx_census(false);
        EXPECT_TRUE(gpu->mx_census().empty());
    }
}

TEST(CudaTrainer, NonFiniteParametersStopTheStepNamingIt) {
    REQUIRE_GPU();
    const TrainConfig c = tiny(4);
    auto gpu = make_cuda_trainer(c, Recipe{});
    TrainerState st = gpu->state();
    const ParamTensor& t = gpu->layout().find("blk.1.ffn_up.weight");
    st.params[size_t(t.offset + 3)] = std::nanf("");
    gpu->set_state(st);
    try {
        gpu->step(random_batch(c, 1).view());
        FAIL() << "a NaN weight must stop the step";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::runtime);
        EXPECT_NE(std::string(e.what()).find("step 0"), std::string::npos) << e.what();
    }
    EXPECT_EQ(gpu->steps_done(), 0);
}

TEST(CudaTrainer, RefusesBadBatchesAndState) {
    REQUIRE_GPU();
    const TrainConfig c = tiny(4);
    auto gpu = make_cuda_trainer(c, Recipe{});
    Batch b = random_batch(c, 2);
    b.shape.n_tok -= 1;
    EXPECT_THROW(gpu->step(b.view()), Error);
    Batch bad = random_batch(c, 3);
    bad.inputs[5] = int32_t(c.model.vocab_size);
    EXPECT_THROW(gpu->step(bad.view()), Error);
    TrainerState st = gpu->state();
    st.m.pop_back();
    EXPECT_THROW(gpu->set_state(st), Error);
}

}  // namespace
}  // namespace lowbit
