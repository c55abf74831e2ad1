// test_operand_analysis.cpp — `lowbit analyze model`'s library half (train/operand_analysis.h): it sees the operands a
// training step's linears see (checked against the calibration's own observer), analyses each slot in the right
// orientation (checked against lp_matmul called directly), and a planted channel outlier shows up where it must: the
// detector's label, the INT8 window of A, and B's per-line bases against per-tile ones.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <tuple>

#include <gtest/gtest.h>

#include "adahop/int8_window.h"
#include "core/error.h"
#include "core/gemm_cpu.h"
#include "core/random_fill.h"
#include "model/linear.h"
#include "train/operand_analysis.h"
#include "train/param_layout.h"
#include "train/train_model.h"
#include "train_test_util.h"

namespace lowbit {
namespace {

// Every GEMM dimension a multiple of 32 (MX blocks and the block-32 Hadamard): d 64, q 4 × 16, kv 2 × 16, ffn 128.
LlamaModel analysis_model(uint64_t seed = 5) {
    LlamaModel m;
    LlamaConfig& c = m.config;
    c.architecture = "llama";
    c.name = "operand analysis";
    c.vocab_size = 97;
    c.hidden_size = 64;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.ffn_size = 128;
    c.context_length = 128;
    c.tied_embeddings = true;
    m.weights = random_llama_weights(c, seed, 0.3f);
    return m;
}

const BatchShape kShape{2, 64};  // 128 tokens: wgrad's K

Batch analysis_batch(const LlamaConfig& c) {
    return batch_from_stream(random_token_ids(kShape.n_seq * (kShape.n_tok + 1), c.vocab_size, 11), kShape);
}

TEST(OperandAnalysis, SeesTheOperandsOfATrainingStepAndPlansFromThem) {
    const LlamaModel m = analysis_model();
    const LlamaConfig& c = m.config;
    const Batch batch = analysis_batch(c);
    const ModelOperandAnalysis r = analyze_model_operands(m, batch.view(), OperandAnalysisOptions{});

    // The reference: AdaHOP's calibration observer (ObservedTrainLinear) on a dense forward and backward.
    const ParamLayout layout(c);
    const std::vector<float> params = params_from_model(layout, m);
    std::map<std::tuple<int64_t, Projection, Operand>, PatternStats> seen;
    TrainLinears observed = make_train_linears(c, [&](int64_t layer, Projection p) -> std::unique_ptr<TrainLinear> {
        return std::make_unique<ObservedTrainLinear>(std::make_unique<DenseTrainLinear>(), [&seen, layer, p](Operand which, ConstMatF t) {
            seen[{layer, p, which}] = detect_outlier_pattern(t.data, t.rows, t.cols);
        });
    });
    TrainActivations acts;
    const double loss = train_forward(layout, params.data(), observed, batch.view(), acts);
    std::vector<float> grads(size_t(layout.total()));
    train_backward(layout, params.data(), observed, batch.view(), acts, grads.data());
    EXPECT_EQ(r.loss, loss);
    EXPECT_EQ(r.shape.rows(), kShape.rows());

    ASSERT_EQ(r.projections.size(), size_t(c.n_layers * kProjectionCount));
    const StrategyTable lv1 = strategy_table_lv1();
    for (const ProjectionAnalysis& a : r.projections) {
        SCOPED_TRACE(linear_name(a.layer, a.projection));
        EXPECT_EQ(&a - r.projections.data(), a.layer * kProjectionCount + int64_t(a.projection));
        for (const auto& [which, stats] : {std::pair{Operand::x, a.x}, std::pair{Operand::w, a.w}, std::pair{Operand::g, a.g}}) {
            const PatternStats& ref = seen.at({a.layer, a.projection, which});
            EXPECT_EQ(stats.pattern, ref.pattern);
            EXPECT_EQ(stats.rows, ref.rows);
            EXPECT_EQ(stats.cols, ref.cols);
            EXPECT_EQ(stats.cv_row, ref.cv_row);
            EXPECT_EQ(stats.cv_col, ref.cv_col);
        }
        const LayerPatterns pat{a.x.pattern, a.w.pattern, a.g.pattern};
        const LayerPlan plan = plan_layer(pat, lv1);
        const int64_t in = projection_in_features(c, a.projection), out = projection_out_features(c, a.projection);
        const int64_t tokens = kShape.rows();
        const std::array<std::array<int64_t, 3>, 3> mkn = {{{tokens, in, out}, {tokens, out, in}, {out, tokens, in}}};
        for (int s = 0; s < 3; ++s) {
            const SlotAnalysis& sa = a.slots[size_t(s)];
            EXPECT_EQ(sa.slot, Slot(s));
            EXPECT_EQ(sa.planned, plan.at(Slot(s)));
            EXPECT_EQ(std::pair(sa.a, sa.b), slot_pair(Slot(s), pat));
            EXPECT_EQ((std::array<int64_t, 3>{sa.m, sa.k, sa.n}), mkn[size_t(s)]);
            ASSERT_EQ(sa.rel_error.size(), OperandAnalysisOptions{}.strategies.size());
            for (double e : sa.rel_error) EXPECT_TRUE(std::isfinite(e) && e >= 0);
            ASSERT_TRUE(sa.census_plain && sa.census_iht);
            EXPECT_EQ(sa.census_plain->pairs, ((sa.m + 127) / 128) * ((sa.n + 127) / 128) * ((sa.k + 255) / 256));
        }
        EXPECT_EQ(r.plan().layers.at(linear_name(a.layer, a.projection)).fwd, plan.fwd);
    }
}

TEST(OperandAnalysis, SlotErrorsAreLpMatmulsInTheSlotsOrientation) {
    const int64_t m = 96, k = 160, n = 64;
    std::vector<float> a(size_t(m * k)), b(size_t(k * n)), exact(size_t(m * n)), c(size_t(m * n));
    fill_gaussian(a.data(), int64_t(a.size()), 3);
    fill_gaussian(b.data(), int64_t(b.size()), 4);
    for (int64_t i = 0; i < k; ++i) b[size_t(i * n + 7)] *= 50.0f;  // one column of B with outliers: OE-right's case
    gemm_f32(ConstMatF(a.data(), m, k), Trans::no, ConstMatF(b.data(), k, n), Trans::no, MatF(exact.data(), m, n));
    OperandAnalysisOptions o;
    const SlotAnalysis s = analyze_slot(Slot::wgrad, a.data(), b.data(), m, k, n, {Pattern::none, Pattern::col}, Strategy::iht_oe_right, o);
    EXPECT_EQ(s.slot, Slot::wgrad);
    EXPECT_EQ(s.planned, Strategy::iht_oe_right);
    for (size_t i = 0; i < o.strategies.size(); ++i) {
        lp_matmul(a.data(), b.data(), m, k, n, o.strategies[i], o.lp, c.data());
        double e2 = 0, n2 = 0, dot = 0;
        for (size_t j = 0; j < c.size(); ++j) {
            e2 += (double(c[j]) - exact[j]) * (double(c[j]) - exact[j]);
            n2 += double(exact[j]) * exact[j];
            dot += double(c[j]) * exact[j];
        }
        EXPECT_NEAR(s.rel_error[i], std::sqrt(e2 / n2), 1e-12) << strategy_short_name(o.strategies[i]);
        EXPECT_NEAR(s.gain[i], dot / n2, 1e-12) << strategy_short_name(o.strategies[i]);
        EXPECT_GT(s.gain[i], 0.8);  // a low-precision product still points along the exact one
    }
    const auto err = [&](Strategy st) { return s.rel_error[size_t(std::find(o.strategies.begin(), o.strategies.end(), st) - o.strategies.begin())]; };
    EXPECT_LT(err(Strategy::iht_oe_right), 0.5 * err(Strategy::plain));  // the column went to the BF16 path
    EXPECT_LT(err(Strategy::full), 0.01);
    // The census is the one of the operands lp_prepare quantizes: B's outlier column sits in one 128-column tile.
    ASSERT_TRUE(s.census_plain);
    EXPECT_EQ(s.census_plain->a_units, 1 * 1);
    EXPECT_EQ(s.census_plain->b_units, 1 * 1);
    EXPECT_EQ(s.census_plain->b_tile_outside, 0);     // 50× is 5.6 binades over the tile's other lines:
    EXPECT_EQ(s.census_plain->b_tile_two_planes, 1);  // inside with two planes
    EXPECT_EQ(s.census_plain->b_line_outside, 0);     // each line alone is Gaussian
    EXPECT_EQ(s.census_plain->b_line_two_planes, 0);
    EXPECT_EQ(s.census_plain->a_outside, 0);

    // Without quantization (and with FP32 OE slices) every strategy is the product up to FP32 rounding; BF16's
    // operands round to 8 bits.
    o.lp.quantize = false;
    o.lp.high_precision_bf16 = false;
    const SlotAnalysis exactish = analyze_slot(Slot::fwd, a.data(), b.data(), m, k, n, {Pattern::none, Pattern::none}, Strategy::iht, o);
    for (size_t i = 0; i < o.strategies.size(); ++i) {
        EXPECT_LT(exactish.rel_error[i], o.strategies[i] == Strategy::full ? 1e-2 : 1e-5) << strategy_short_name(o.strategies[i]);
        EXPECT_NEAR(exactish.gain[i], 1.0, o.strategies[i] == Strategy::full ? 1e-2 : 1e-5) << strategy_short_name(o.strategies[i]);
    }
    EXPECT_FALSE(exactish.census_plain);  // nothing is quantized

    // K not a multiple of 32: no MX blocks, no Hadamard: nothing is measured, and said so (NaN).
    const SlotAnalysis odd = analyze_slot(Slot::dgrad, a.data(), b.data(), m, 40, n, {Pattern::none, Pattern::none}, Strategy::iht, OperandAnalysisOptions{});
    for (double e : odd.rel_error) EXPECT_TRUE(std::isnan(e));
    for (double g : odd.gain) EXPECT_TRUE(std::isnan(g));
    EXPECT_FALSE(odd.census_plain || odd.census_iht);
    // NVFP4 has no INT8-stage GEMM: errors, no census.
    OperandAnalysisOptions nv = o;
    nv.lp = LpMatmulOptions{};
    nv.lp.nvfp4 = true;
    const SlotAnalysis nvfp4 = analyze_slot(Slot::fwd, a.data(), b.data(), m, k, n, {Pattern::none, Pattern::none}, Strategy::iht, nv);
    EXPECT_TRUE(std::isfinite(nvfp4.rel_error[0]));
    EXPECT_FALSE(nvfp4.census_plain);
}

TEST(OperandAnalysis, APlantedChannelOutlierShowsWhereItMust) {
    LlamaModel m = analysis_model();
    const int64_t channel = 5;
    m.weights.blocks[1].attn_norm[channel] *= 1024.0f;  // channel 5 of layer 1's attention input: 10 binades up
    const Batch batch = analysis_batch(m.config);
    const ModelOperandAnalysis r = analyze_model_operands(m, batch.view(), OperandAnalysisOptions{});
    for (Projection p : {Projection::q, Projection::k, Projection::v}) {
        SCOPED_TRACE(projection_name(p));
        const ProjectionAnalysis& hit = r.projections[size_t(1 * kProjectionCount + int64_t(p))];
        const ProjectionAnalysis& clean = r.projections[size_t(0 * kProjectionCount + int64_t(p))];
        EXPECT_EQ(hit.x.pattern, Pattern::col);  // X [tokens, d]: one channel = one column
        const SlotAnalysis& fwd = hit.slots[0];
        // A = X per line: every row holds the channel, so its one chunk (K = 64) is outside in the one row tile.
        EXPECT_EQ(fwd.census_plain->a_outside, fwd.census_plain->a_units);
        EXPECT_EQ(fwd.census_plain->slow_pairs_tile, fwd.census_plain->pairs);
        EXPECT_EQ(clean.slots[0].census_plain->a_outside, 0);
        // wgrad's B = X [tokens, d], lines = channels: one base for the 64-line tile cannot hold the channel, one per
        // line can.
        const WindowCensus& wg = *hit.slots[2].census_plain;
        EXPECT_EQ(wg.b_tile_outside, wg.b_units);
        EXPECT_LT(wg.b_line_outside, wg.b_tile_outside);
        EXPECT_LE(wg.slow_pairs_line, wg.slow_pairs_tile);
    }
}

TEST(OperandAnalysis, EveryProductIsObservedWithTheSlotsError) {
    const LlamaModel m = analysis_model();
    const Batch batch = analysis_batch(m.config);
    OperandAnalysisOptions o;
    std::map<std::tuple<int64_t, Projection, Slot, size_t>, double> seen;  // the relative error recomputed
    o.observe_product = [&seen](const ProductObservation& p) {
        EXPECT_TRUE(seen.emplace(std::tuple{p.layer, p.projection, p.slot, p.strategy}, observed_relative_error(p)).second);
    };
    const ModelOperandAnalysis r = analyze_model_operands(m, batch.view(), o);
    EXPECT_EQ(seen.size(), r.projections.size() * 3 * o.strategies.size());
    for (const ProjectionAnalysis& a : r.projections)
        for (const SlotAnalysis& s : a.slots)
            for (size_t i = 0; i < o.strategies.size(); ++i)
                EXPECT_NEAR(seen.at({a.layer, a.projection, s.slot, i}), s.rel_error[i], 1e-12);
}

TEST(OperandAnalysis, BatchesMergeByMajorityVoteAndMeans) {
    const LlamaModel m = analysis_model();
    const LlamaConfig& c = m.config;
    const OperandAnalysisOptions o;
    std::vector<ModelOperandAnalysis> runs;
    for (uint64_t seed : {21, 22, 23})
        runs.push_back(analyze_model_operands(
            m, batch_from_stream(random_token_ids(kShape.n_seq * (kShape.n_tok + 1), c.vocab_size, seed), kShape).view(), o));
    // Plant disagreeing labels in one projection: x = row, col, row → row; w = none, col, col → col; g = col, row, none →
    // col (a three-way tie goes to the label seen first).
    const size_t j = 3;
    runs[0].projections[j].x.pattern = Pattern::row, runs[1].projections[j].x.pattern = Pattern::col, runs[2].projections[j].x.pattern = Pattern::row;
    runs[0].projections[j].w.pattern = Pattern::none, runs[1].projections[j].w.pattern = Pattern::col, runs[2].projections[j].w.pattern = Pattern::col;
    runs[0].projections[j].g.pattern = Pattern::col, runs[1].projections[j].g.pattern = Pattern::row, runs[2].projections[j].g.pattern = Pattern::none;
    const ModelOperandAnalysis merged = merge_batches(runs, o.table);
    EXPECT_EQ(merged.shape.n_seq, 3 * kShape.n_seq);
    EXPECT_NEAR(merged.loss, (runs[0].loss + runs[1].loss + runs[2].loss) / 3, 1e-12);
    const ProjectionAnalysis& p = merged.projections[j];
    EXPECT_EQ(p.x.pattern, Pattern::row);
    EXPECT_EQ(p.w.pattern, Pattern::col);
    EXPECT_EQ(p.g.pattern, Pattern::col);
    const LayerPatterns voted{Pattern::row, Pattern::col, Pattern::col};
    EXPECT_EQ(p.plan.fwd, plan_layer(voted, o.table).fwd);
    EXPECT_EQ(p.plan.wgrad, plan_layer(voted, o.table).wgrad);
    EXPECT_NEAR(p.x.cv_row, (runs[0].projections[j].x.cv_row + runs[1].projections[j].x.cv_row + runs[2].projections[j].x.cv_row) / 3, 1e-12);
    for (size_t sl = 0; sl < 3; ++sl) {
        const SlotAnalysis& s = p.slots[sl];
        EXPECT_EQ(std::pair(s.a, s.b), slot_pair(Slot(sl), voted));
        EXPECT_EQ(s.planned, p.plan.at(Slot(sl)));
        for (size_t i = 0; i < o.strategies.size(); ++i) {
            double e = 0, g = 0;
            for (const auto& r : runs) e += r.projections[j].slots[sl].rel_error[i] / 3, g += r.projections[j].slots[sl].gain[i] / 3;
            EXPECT_NEAR(s.rel_error[i], e, 1e-12);
            EXPECT_NEAR(s.gain[i], g, 1e-12);
        }
        int64_t pairs = 0, slow = 0;
        for (const auto& r : runs) pairs += r.projections[j].slots[sl].census_iht->pairs, slow += r.projections[j].slots[sl].census_iht->slow_pairs_line;
        EXPECT_EQ(s.census_iht->pairs, pairs);
        EXPECT_EQ(s.census_iht->slow_pairs_line, slow);
    }
    EXPECT_THROW(merge_batches({}, o.table), Error);
}

TEST(OperandAnalysis, ErrorConsistencyTellsSystematicFromIndependentErrors) {
    // One 2 × 2 wgrad product over batches: C = (1, 0, 0, 1) every batch.
    const std::vector<float> c = {1, 0, 0, 1};
    const auto feed = [&c](ErrorConsistency& ec, size_t strategy, const std::vector<float>& error) {
        std::vector<float> c_s(4);
        for (size_t i = 0; i < 4; ++i) c_s[i] = c[i] + error[i];
        ec.observe(ProductObservation{0, Projection::q, Slot::wgrad, strategy, c_s.data(), c.data(), 2, 2});
        ec.observe(ProductObservation{0, Projection::q, Slot::fwd, strategy, c.data(), c_s.data(), 2, 2});  // another slot: ignored
    };
    ErrorConsistency ec(Slot::wgrad);
    // strategy 0: the same shrinkage every batch (−0.1·C); strategy 1: errors that cancel (+e, −e, +e, −e).
    for (int b = 0; b < 4; ++b) {
        feed(ec, 0, {-0.1f, 0, 0, -0.1f});
        feed(ec, 1, b % 2 ? std::vector<float>{0, 0.2f, 0, 0} : std::vector<float>{0, -0.2f, 0, 0});
        ec.end_batch();
    }
    const std::vector<ErrorConsistency::Entry> e = ec.entries();
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(ec.batches(), 4);
    EXPECT_NEAR(e[0].consistency(), 2.0, 1e-6);  // √4: the same error every batch
    EXPECT_NEAR(e[0].sum_c_norm2, 32.0, 1e-6);   // ‖4·C‖²
    EXPECT_NEAR(e[0].dot / std::sqrt(e[0].sum_error_norm2 * e[0].sum_c_norm2), -1.0, 1e-6);  // along −C: shrinkage
    EXPECT_NEAR(e[1].consistency(), 0.0, 1e-6);  // cancels over the batches
    EXPECT_NEAR(e[1].error_norm2_sum, 4 * 0.04, 1e-6);
}

TEST(OperandAnalysis, SkippedPositionsLeaveTheirRowsOut) {
    const LlamaModel m = analysis_model();
    const LlamaConfig& c = m.config;
    const Batch batch = analysis_batch(c);
    OperandAnalysisOptions o;
    o.skip_positions = 32;
    const ModelOperandAnalysis r = analyze_model_operands(m, batch.view(), o);
    // The reference: blk.1.ffn_down's X and dY captured by the calibration observer, their rows at positions ≥ 32.
    const ParamLayout layout(c);
    const std::vector<float> params = params_from_model(layout, m);
    std::vector<float> x, w, dy;
    int64_t x_cols = 0, dy_cols = 0, w_rows = 0;
    TrainLinears observed = make_train_linears(c, [&](int64_t layer, Projection p) -> std::unique_ptr<TrainLinear> {
        return std::make_unique<ObservedTrainLinear>(std::make_unique<DenseTrainLinear>(), [&, layer, p](Operand which, ConstMatF t) {
            if (layer != 1 || p != Projection::down) return;
            std::vector<float>& into = which == Operand::x ? x : which == Operand::w ? w : dy;
            into.clear();
            for (int64_t row = 0; row < t.rows; ++row)
                if (which == Operand::w || row % kShape.n_tok >= 32) into.insert(into.end(), t.row(row), t.row(row) + t.cols);
            (which == Operand::x ? x_cols : which == Operand::w ? w_rows : dy_cols) = which == Operand::w ? t.rows : t.cols;
        });
    });
    TrainActivations acts;
    train_forward(layout, params.data(), observed, batch.view(), acts);
    std::vector<float> grads(size_t(layout.total()));
    train_backward(layout, params.data(), observed, batch.view(), acts, grads.data());
    const int64_t rows = kShape.n_seq * 32;
    ASSERT_EQ(int64_t(x.size()), rows * x_cols);
    const ProjectionAnalysis want = analyze_projection(1, Projection::down, ConstMatF(x.data(), rows, x_cols),
                                                       ConstMatF(w.data(), w_rows, int64_t(w.size()) / w_rows),
                                                       ConstMatF(dy.data(), rows, dy_cols), o);
    const ProjectionAnalysis& got = r.projections[size_t(1 * kProjectionCount + int64_t(Projection::down))];
    EXPECT_EQ(got.slots[0].m, rows);
    EXPECT_EQ(got.slots[2].k, rows);
    EXPECT_EQ(got.x.cv_row, want.x.cv_row);
    for (size_t sl = 0; sl < 3; ++sl) EXPECT_EQ(got.slots[sl].rel_error, want.slots[sl].rel_error) << sl;
    o.skip_positions = kShape.n_tok;
    EXPECT_THROW(analyze_model_operands(m, batch.view(), o), Error);
}

TEST(OperandAnalysis, RefusesAModelWithQkvBiases) {
    LlamaModel m = analysis_model();
    m.config.qkv_bias = true;
    m.config.architecture = "qwen2";
    m.weights = random_llama_weights(m.config, 5, 0.3f);
    const Batch batch = analysis_batch(m.config);
    try {
        analyze_model_operands(m, batch.view(), OperandAnalysisOptions{});
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::usage);
        EXPECT_NE(std::string(e.what()).find("bias"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace lowbit
