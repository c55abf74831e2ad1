// cmd_analyze.cpp — `lowbit analyze {pairs, detect, model}`: why a GEMM loses accuracy in MXFP4. `pairs` runs the
// synthetic pattern-pair experiment (adahop.md §9) and draws its table; `detect` labels a user's matrix and counts
// the chunks of it the INT8 tensor-core GEMM would compute block by block (adahop/int8_window.h); `model` does both
// for every GEMM of a real model's forward and backward on real text (train/operand_analysis.h).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "adahop/int8_window.h"
#include "adahop/lp_matmul.h"
#include "adahop/pair_analysis.h"
#if defined(LOWBIT_HAVE_CUDA)
#include "adahop/cuda/lp_matmul_cuda.cuh"
#endif
#include "cli/commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "io/npy.h"
#include "io/model_registry.h"
#include "io/plot.h"
#include "model/tokenizer.h"
#include "model/weights.h"
#include "ptq/calibration.h"
#include "train/operand_analysis.h"

namespace lowbit {

namespace {

struct PairsArgs {
    int64_t m = 2048, k = 2048, n = 2048;
    int seeds = 3;
    uint64_t seed = 0;
    std::string format = "mxfp4";
    std::string scale_rule = "floor";
    std::string rounding = "away";
    int64_t oe_k = 64;
    std::string oe_metric = "l2";
    bool bf16_slivers = false;
    std::string device = "cpu";
    bool json = false;
    std::string plot;
};

// The low-precision GEMM's options from the command line (an empty scale rule or rounding keeps lp_matmul's default).
LpMatmulOptions lp_options(const std::string& format, const std::string& scale_rule, const std::string& rounding,
                           int64_t oe_k, const std::string& oe_metric, bool bf16_slivers) {
    LpMatmulOptions o;
    const FormatInfo& f = find_format(format);
    if (f.kind == FormatKind::nvfp4) o.nvfp4 = true;
    else if (f.kind == FormatKind::mx) o.element = f.mx_element;
    else fail(ErrorKind::usage, "analyze: --format must be an MX format or nvfp4, not {}", format);
    if (!scale_rule.empty()) parse_scale_rule(scale_rule.c_str(), &o.scale_rule);
    if (!rounding.empty()) parse_rounding(rounding.c_str(), &o.rounding_a);
    o.rounding_b = o.rounding_a;
    LOWBIT_CHECK(oe_k >= 1, ErrorKind::usage, "analyze: --oe-k {}: at least 1", oe_k);
    o.oe_k = oe_k;
    o.oe_metric = parse_outlier_metric(oe_metric);
    o.high_precision_bf16 = bf16_slivers;
    return o;
}

LpMatmulOptions lp_options(const PairsArgs& a) {
    return lp_options(a.format, a.scale_rule, a.rounding, a.oe_k, a.oe_metric, a.bf16_slivers);
}

ProgressLine* g_progress = nullptr;
void report_progress(int done, int) {
    if (g_progress) g_progress->update(done);
}

void run_pairs(const PairsArgs& a) {
    PairAnalysisOptions opt;
    opt.m = a.m;
    opt.k = a.k;
    opt.n = a.n;
    opt.seeds = a.seeds;
    opt.first_seed = a.seed;
    opt.lp = lp_options(a);
    if (a.m <= 0 || a.n <= 0 || a.k <= 0 || a.k % 32 != 0 || a.seeds < 1)
        fail(ErrorKind::usage, "analyze pairs: M, N > 0, K a positive multiple of 32, seeds ≥ 1");
#if defined(LOWBIT_HAVE_CUDA)
    std::unique_ptr<LpMatmulCuda> gpu;
    if (a.device == "cuda") {
        if (!cuda_device_available()) fail(ErrorKind::runtime, "analyze pairs: --device cuda but no CUDA device is available");
        gpu = std::make_unique<LpMatmulCuda>();
        opt.matmul = [&gpu](const float* x, const float* y, int64_t m, int64_t k, int64_t n, Strategy s,
                            const LpMatmulOptions& o, float* c) {
            DeviceBuffer<float> dx(size_t(m * k)), dy(size_t(k * n)), dc(size_t(m * n));
            dx.upload(x, size_t(m * k));
            dy.upload(y, size_t(k * n));
            gpu->matmul(dx.data(), dy.data(), m, k, n, s, o, dc.data());
            dc.download(c, size_t(m * n));
        };
    }
#else
    if (a.device == "cuda") fail(ErrorKind::usage, "analyze pairs: this lowbit was built without CUDA");
#endif
    ProgressLine progress("analyze pairs", 9LL * a.seeds * int64_t(opt.strategies.size()), "GEMMs");
    g_progress = &progress;
    auto results = analyze_pairs(opt, report_progress);
    progress.finish();
    g_progress = nullptr;

    const char* short_pat[3] = {"R", "C", "N"};
    nlohmann::json rows = nlohmann::json::array();
    int correct = 0;
    for (const auto& r : results) {
        correct += (r.a_stats.pattern == r.a) + (r.b_stats.pattern == r.b);
        nlohmann::json errs = nlohmann::json::object(), sq = nlohmann::json::object();
        for (size_t i = 0; i < opt.strategies.size(); ++i) {
            errs[strategy_short_name(opt.strategies[i])] = r.rel_error[i];
            sq[strategy_short_name(opt.strategies[i])] = r.sqnr_db[i];
        }
        rows.push_back({{"pair", std::string(short_pat[int(r.a)]) + short_pat[int(r.b)]},
                        {"a_pattern", pattern_name(r.a)}, {"b_pattern", pattern_name(r.b)},
                        {"a_detected", pattern_name(r.a_stats.pattern)}, {"b_detected", pattern_name(r.b_stats.pattern)},
                        {"a_cv_row", r.a_stats.cv_row}, {"a_cv_col", r.a_stats.cv_col},
                        {"b_cv_row", r.b_stats.cv_row}, {"b_cv_col", r.b_stats.cv_col},
                        {"relative_error", errs}, {"sqnr_db", sq}});
    }
    nlohmann::json report = {{"m", a.m}, {"k", a.k}, {"n", a.n}, {"seeds", a.seeds}, {"format", a.format}, {"device", a.device},
                             {"scale_rule", a.scale_rule}, {"rounding", a.rounding}, {"oe_k", a.oe_k},
                             {"oe_metric", a.oe_metric}, {"slivers", a.bf16_slivers ? "bf16" : "fp32"},
                             {"detector_correct", correct}, {"detector_total", 18}, {"pairs", rows}};
    if (!a.plot.empty()) {
        Heatmap h;
        h.title = fmt::format("{} GEMM error by pattern pair ({}x{}x{}, {} seeds, {} scale)", a.format, a.m, a.k, a.n, a.seeds,
                              a.scale_rule);
        h.value_label = "SQNR (dB) = −20·log10(mean ‖C_q − C‖ / ‖C‖)";
        for (auto s : opt.strategies) h.col_labels.push_back(strategy_short_name(s));
        for (const auto& r : results) {
            h.row_labels.push_back(std::string(short_pat[int(r.a)]) + short_pat[int(r.b)] + " (A " + pattern_name(r.a) + ", B " +
                                   pattern_name(r.b) + ")");
            h.values.push_back(r.sqnr_db);
        }
        write_figure(a.plot, h);
        report["plot"] = a.plot;
    }
    if (a.json) {
        std::printf("%s\n", report.dump(2).c_str());
        return;
    }
    std::printf("%s, M=%lld K=%lld N=%lld, %d seeds, scale rule %s, rounding %s, OE top-%lld by %s, %s slivers\n",
                a.format.c_str(), (long long)a.m, (long long)a.k, (long long)a.n, a.seeds, a.scale_rule.c_str(),
                a.rounding.c_str(), (long long)a.oe_k, a.oe_metric.c_str(), a.bf16_slivers ? "BF16" : "FP32");
    std::printf("relative Frobenius error (SQNR dB)\n%-5s %-9s", "pair", "detected");
    for (auto s : opt.strategies) std::printf(" %17s", strategy_short_name(s));
    std::printf("\n");
    for (const auto& r : results) {
        std::printf("%s%s    %s-%s", short_pat[int(r.a)], short_pat[int(r.b)], short_pat[int(r.a_stats.pattern)],
                    short_pat[int(r.b_stats.pattern)]);
        size_t best = 0;
        for (size_t i = 1; i < r.rel_error.size(); ++i)
            if (r.rel_error[i] < r.rel_error[best]) best = i;
        for (size_t i = 0; i < r.rel_error.size(); ++i)
            std::printf(" %s%7.4f (%5.1f)", i == best ? "*" : " ", r.rel_error[i], r.sqnr_db[i]);
        std::printf("\n");
    }
    std::printf("detector: %d/18 operands labelled as generated (tau = %.1f); * = best strategy%s%s\n", correct,
                opt.detector.tau, a.plot.empty() ? "" : "; plot: ", a.plot.c_str());
}

// The INT8-stage GEMM's window census of x quantized to MXFP4 (round to nearest even) as the product's A (lines =
// rows, K = columns: each line its own base) or B (lines = columns, K = rows: one base per 128 lines), plain and
// under IHT (block-32 Hadamard along K): tile-chunks outside / all. null where K is not a multiple of 32.
nlohmann::json window_census(const NpyArray& x) {
    nlohmann::json out;
    for (const Side side : {Side::left, Side::right}) {
        const int64_t k = side == Side::left ? x.cols() : x.rows(), lines = side == Side::left ? x.rows() : x.cols();
        nlohmann::json j;
        for (const Strategy st : {Strategy::plain, Strategy::iht}) {
            if (k % 32 != 0 || lines == 0) break;
            const PreparedOperand p = lp_prepare(x.data.data(), x.rows(), x.cols(), side, st, LpMatmulOptions{});
            const Int8WindowCensus c = int8_window_census(p.codes.data(), p.scales.data(), lines, k, side == Side::left);
            j[st == Strategy::plain ? "plain" : "iht"] = {
                {"outside", c.outside()}, {"two_planes", c.with_two_planes()}, {"tile_chunks", c.tiles * c.chunks}};
        }
        out[side == Side::left ? "as_a" : "as_b"] = j.is_null() ? nlohmann::json() : j;
    }
    return out;
}

void run_detect(const std::string& path, bool json, double tau, double kappa) {
    NpyArray x = npy_read_matrix(path);
    const nlohmann::json window = window_census(x);
    DetectorOptions o;
    o.tau = tau;
    o.kappa = kappa;
    const PatternStats s = detect_outlier_pattern(x.data.data(), x.rows(), x.cols(), o);
    const double ratio = s.cv_row / (s.cv_col + 1e-8);
    if (json) {
        std::printf("%s\n", nlohmann::json({{"file", path}, {"rows", s.rows}, {"cols", s.cols}, {"pattern", pattern_name(s.pattern)},
                                            {"cv_row", s.cv_row}, {"cv_col", s.cv_col}, {"row_col_ratio", ratio},
                                            {"kurtosis_row", s.kurtosis_row}, {"kurtosis_col", s.kurtosis_col},
                                            {"mean_row_variance", s.mean_row_variance},
                                            {"mean_col_variance", s.mean_col_variance}, {"tau", tau}, {"kappa", kappa},
                                            {"int8_window", window}})
                                  .dump(2)
                                  .c_str());
        return;
    }
    std::printf("%s: %lldx%lld  pattern %s  (normalised CV: rows %.3f, cols %.3f, ratio %.3f vs tau %.1f; kurtosis rows %.2f, "
                "cols %.2f)\n",
                path.c_str(), (long long)s.rows, (long long)s.cols, pattern_name(s.pattern), s.cv_row, s.cv_col, ratio, tau,
                s.kurtosis_row, s.kurtosis_col);
    std::printf("MXFP4 INT8 tensor-core window (128-line tile, 256-deep chunk) pairs outside / all:");
    for (const auto& [role, label] : {std::pair{"as_a", "as A (K = columns)"}, std::pair{"as_b", "as B (K = rows)"}}) {
        const nlohmann::json& j = window[role];
        if (j.is_null()) {
            std::printf("  %s: K not a multiple of 32", label);
            continue;
        }
        std::printf("  %s: plain %lld/%lld (two planes %lld), IHT %lld/%lld (two planes %lld)", label,
                    (long long)j["plain"]["outside"].get<int64_t>(), (long long)j["plain"]["tile_chunks"].get<int64_t>(),
                    (long long)j["plain"]["two_planes"].get<int64_t>(), (long long)j["iht"]["outside"].get<int64_t>(),
                    (long long)j["iht"]["tile_chunks"].get<int64_t>(), (long long)j["iht"]["two_planes"].get<int64_t>());
    }
    std::printf("\n");
}

struct ModelArgs {
    std::string model, tokenizer, corpus = "sotu-train", text_file;
    int64_t windows = 2, ctx = 512, batches = 1, skip_positions = 0;
    uint64_t seed = 0;
    std::string format = "mxfp4", scale_rule, rounding, oe_metric = "l2", table = "lv1", plan_out, report;
    int64_t oe_k = 64;
    double tau = 2.0;
    int window_binades = kInt8WindowBinades;
    int threads = 0;
    bool per_layer = false, json = false;
};

// "q", "k", …, "output", "gate", "up", "down": the projection's GGUF name without its "attn_" / "ffn_".
const char* short_name(Projection p) { return std::strchr(projection_name(p), '_') + 1; }

nlohmann::json census_json(const std::optional<WindowCensus>& c) {
    if (!c) return nullptr;
    return {{"a_outside", c->a_outside},           {"a_units", c->a_units},
            {"b_tile_outside", c->b_tile_outside}, {"b_line_outside", c->b_line_outside},
            {"b_units", c->b_units},               {"pairs", c->pairs},
            {"a_two_planes", c->a_two_planes},     {"b_tile_two_planes", c->b_tile_two_planes},
            {"b_line_two_planes", c->b_line_two_planes},
            {"slow_pairs_tile", c->slow_pairs_tile}, {"slow_pairs_line", c->slow_pairs_line}};
}

nlohmann::json pattern_json(const PatternStats& s) {
    return {{"pattern", pattern_name(s.pattern)}, {"cv_row", s.cv_row}, {"cv_col", s.cv_col},
            {"kurtosis_row", s.kurtosis_row}, {"kurtosis_col", s.kurtosis_col}};
}

// A JSON number, or null for NaN (a slot whose K is not a multiple of 32).
nlohmann::json number_or_null(double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); }

// The mean over blocks of a per-strategy metric of one slot (NaN entries skipped), and of the planner's strategy's.
struct SlotMeans {
    std::vector<double> sum;
    std::vector<int64_t> n;
    double planned_sum = 0;
    int64_t planned_n = 0;
    void add(const std::vector<double>& v, const std::vector<Strategy>& strategies, Strategy planned) {
        sum.resize(v.size(), 0.0);
        n.resize(v.size(), 0);
        for (size_t i = 0; i < v.size(); ++i) {
            if (std::isnan(v[i])) continue;
            sum[i] += v[i];
            ++n[i];
            if (strategies[i] == planned) planned_sum += v[i], ++planned_n;
        }
    }
    double mean(size_t i) const { return i < n.size() && n[i] > 0 ? sum[i] / double(n[i]) : std::nan(""); }
    double planned() const { return planned_n > 0 ? planned_sum / double(planned_n) : std::nan(""); }
};

// Per projection kind, summed over the blocks: pattern and strategy counts, mean errors and gains, census sums.
struct ProjectionSummary {
    std::array<std::array<int64_t, 3>, 3> patterns{};  // [x, w, g][row, col, none]
    std::array<std::map<std::string, int64_t>, 3> strategies;  // per slot: short name → blocks
    std::array<SlotMeans, 3> error, gain;                // per slot
    std::array<WindowCensus, 3> census_plain, census_iht;
    bool census = false;
};

std::array<ProjectionSummary, kProjectionCount> summarize(const ModelOperandAnalysis& r, const OperandAnalysisOptions& o) {
    std::array<ProjectionSummary, kProjectionCount> out;
    for (const ProjectionAnalysis& p : r.projections) {
        ProjectionSummary& s = out[size_t(p.projection)];
        ++s.patterns[0][size_t(p.x.pattern)];
        ++s.patterns[1][size_t(p.w.pattern)];
        ++s.patterns[2][size_t(p.g.pattern)];
        for (size_t sl = 0; sl < 3; ++sl) {
            const SlotAnalysis& a = p.slots[sl];
            ++s.strategies[sl][strategy_short_name(a.planned)];
            s.error[sl].add(a.rel_error, o.strategies, a.planned);
            s.gain[sl].add(a.gain, o.strategies, a.planned);
            if (a.census_plain) {
                s.census_plain[sl] += *a.census_plain;
                s.census = true;
            }
            if (a.census_iht) s.census_iht[sl] += *a.census_iht;
        }
    }
    return out;
}

const char* slot_short_name(int slot) { return slot == 0 ? "fwd" : slot == 1 ? "dgrad" : "wgrad"; }

// One row per (projection, slot): a metric's mean over blocks per strategy and the planner's. mark_lowest: a star on
// the lowest low-precision mean (BF16 is the high-precision reference, not a candidate).
void print_slot_means(const char* title, const std::array<ProjectionSummary, kProjectionCount>& sum,
                      std::array<SlotMeans, 3> ProjectionSummary::*metric, const OperandAnalysisOptions& o, bool mark_lowest) {
    std::printf("\n%s\n%-6s %-6s", title, "proj", "slot");
    for (Strategy st : o.strategies) std::printf(" %12s ", strategy_short_name(st));
    std::printf(" %9s\n", "planned");
    for (Projection p : kProjections) {
        for (int sl = 0; sl < 3; ++sl) {
            const SlotMeans& m = (sum[size_t(p)].*metric)[size_t(sl)];
            std::printf("%-6s %-6s", short_name(p), slot_short_name(sl));
            size_t best = o.strategies.size();
            for (size_t i = 0; i < o.strategies.size(); ++i)
                if (o.strategies[i] != Strategy::full && !std::isnan(m.mean(i)) &&
                    (best == o.strategies.size() || m.mean(i) < m.mean(best)))
                    best = i;
            for (size_t i = 0; i < o.strategies.size(); ++i) std::printf(" %12.4f%s", m.mean(i), mark_lowest && i == best ? "*" : " ");
            std::printf(" %9.4f\n", m.planned());
        }
    }
}

std::string percent(int64_t part, int64_t all) {
    return all > 0 ? fmt::format("{:.1f}%", 100.0 * double(part) / double(all)) : std::string("-");
}

void print_model_report(const ModelArgs& a, const std::string& path, const LlamaConfig& c, const ModelOperandAnalysis& r,
                        const OperandAnalysisOptions& o) {
    const auto sum = summarize(r, o);
    std::printf("analyze model: %s (%lld blocks, d %lld, ffn %lld)\n", path.c_str(), (long long)c.n_layers,
                (long long)c.hidden_size, (long long)c.ffn_size);
    std::printf("  %lld batch%s of %lld windows x %lld tokens of %s (seed %llu), mean loss %.4f nats (FP32 forward and backward, "
                "no update)%s\n",
                (long long)a.batches, a.batches > 1 ? "es" : "", (long long)a.windows, (long long)r.shape.n_tok,
                a.text_file.empty() ? a.corpus.c_str() : a.text_file.c_str(), (unsigned long long)a.seed, r.loss,
                a.batches > 1 ? ";\n  labels: majority vote over the batches; errors and gains: means; census: sums" : "");
    std::printf("  operands: %s, scale rule %s, rounding %s, OE top-%lld; detector tau %.1f; plan table %s%s\n", a.format.c_str(),
                scale_rule_name(o.lp.scale_rule), rounding_name(o.lp.rounding_a), (long long)o.lp.oe_k, o.detector.tau,
                o.table.name.c_str(),
                o.skip_positions > 0 ? fmt::format("; the first {} positions of every window left out", o.skip_positions).c_str() : "");
    std::printf("  slots: fwd Y = X.W^T (A = X, B = W^T), dgrad dX = dY.W (A = dY, B = W), wgrad dW = dY^T.X (A = dY^T, B = X)\n\n");

    std::printf("Outlier patterns, blocks labelled row / col / none:\n%-6s %-12s %-12s %-12s\n", "proj", "X", "W", "dY");
    for (Projection p : kProjections) {
        const ProjectionSummary& s = sum[size_t(p)];
        std::printf("%-6s", short_name(p));
        for (int op = 0; op < 3; ++op)
            std::printf(" %-12s", fmt::format("{}/{}/{}", s.patterns[op][0], s.patterns[op][1], s.patterns[op][2]).c_str());
        std::printf("\n");
    }

    std::printf("\nStrategies the planner fixed (blocks):\n%-6s %-30s %-30s %-30s\n", "proj", "fwd", "dgrad", "wgrad");
    for (Projection p : kProjections) {
        const ProjectionSummary& s = sum[size_t(p)];
        std::printf("%-6s", short_name(p));
        for (int sl = 0; sl < 3; ++sl) {
            std::string cell;
            for (const auto& [name, n] : s.strategies[size_t(sl)]) cell += fmt::format("{}{} {}", cell.empty() ? "" : ", ", name, n);
            std::printf(" %-30s", cell.c_str());
        }
        std::printf("\n");
    }

    print_slot_means("Relative error of the product against FP32, mean over blocks (* = the lowest in low precision; planned = "
                     "the\nplanner's strategy):",
                     sum, &ProjectionSummary::error, o, true);
    print_slot_means("Gain <C_s, C> / |C|^2 of the product (1: no shrinkage along the FP32 product), mean over blocks:", sum,
                     &ProjectionSummary::gain, o, false);

    if (std::any_of(sum.begin(), sum.end(), [](const ProjectionSummary& s) { return s.census; })) {
        std::printf("\nINT8 tensor-core window of %d binades, %d in two planes%s (adahop/int8_window.h): (128x128 output tile,\n"
                    "256-deep chunk) pairs computed block by block, summed over blocks, with B's bases per 128-line tile\n"
                    "(int8_stages) / per line (int8_stages_columns):\n",
                    o.window_binades, 2 * o.window_binades + 1,
                    o.window_binades == kInt8WindowBinades ? ", the kernel's" : " (the kernel's: 3 and 7)");
        std::printf("%-6s %-6s %24s %24s\n", "proj", "slot", "plain: tile / line", "IHT: tile / line");
        for (Projection p : kProjections) {
            const ProjectionSummary& s = sum[size_t(p)];
            for (int sl = 0; sl < 3; ++sl) {
                const WindowCensus& cp = s.census_plain[size_t(sl)];
                const WindowCensus& ci = s.census_iht[size_t(sl)];
                std::printf("%-6s %-6s %24s %24s\n", short_name(p), slot_short_name(sl),
                            (percent(cp.slow_pairs_tile, cp.pairs) + " / " + percent(cp.slow_pairs_line, cp.pairs)).c_str(),
                            (percent(ci.slow_pairs_tile, ci.pairs) + " / " + percent(ci.slow_pairs_line, ci.pairs)).c_str());
            }
        }
    }

    if (a.per_layer) {
        std::printf("\nPer layer: patterns X W dY | planned strategy (error) per slot\n");
        for (const ProjectionAnalysis& p : r.projections) {
            std::printf("%-18s %-4s %-4s %-4s", linear_name(p.layer, p.projection).c_str(), pattern_name(p.x.pattern),
                        pattern_name(p.w.pattern), pattern_name(p.g.pattern));
            for (const SlotAnalysis& sa : p.slots) {
                double e = std::nan("");
                for (size_t i = 0; i < o.strategies.size(); ++i)
                    if (o.strategies[i] == sa.planned) e = sa.rel_error[i];
                std::printf(" | %s %s (%.4f)", slot_short_name(int(sa.slot)), strategy_short_name(sa.planned), e);
            }
            std::printf("\n");
        }
    }
}

nlohmann::json model_report_json(const ModelArgs& a, const std::string& path, const LlamaConfig& c,
                                 const ModelOperandAnalysis& r, const OperandAnalysisOptions& o) {
    nlohmann::json names = nlohmann::json::array();
    for (Strategy st : o.strategies) names.push_back(strategy_short_name(st));
    nlohmann::json projections = nlohmann::json::array();
    for (const ProjectionAnalysis& p : r.projections) {
        nlohmann::json slots;
        for (const SlotAnalysis& sa : p.slots) {
            nlohmann::json errs, gains;
            for (size_t i = 0; i < o.strategies.size(); ++i) {
                errs[strategy_short_name(o.strategies[i])] = number_or_null(sa.rel_error[i]);
                gains[strategy_short_name(o.strategies[i])] = number_or_null(sa.gain[i]);
            }
            slots[slot_name(sa.slot)] = {{"m", sa.m}, {"k", sa.k}, {"n", sa.n}, {"a_pattern", pattern_name(sa.a)},
                                         {"b_pattern", pattern_name(sa.b)}, {"planned", strategy_short_name(sa.planned)},
                                         {"relative_error", errs}, {"gain", gains},
                                         {"int8_window", {{"plain", census_json(sa.census_plain)}, {"iht", census_json(sa.census_iht)}}}};
        }
        projections.push_back({{"name", linear_name(p.layer, p.projection)}, {"layer", p.layer},
                               {"projection", projection_name(p.projection)}, {"x", pattern_json(p.x)}, {"w", pattern_json(p.w)},
                               {"g", pattern_json(p.g)}, {"slots", slots}});
    }
    return {{"model", path}, {"layers", c.n_layers}, {"hidden_size", c.hidden_size}, {"ffn_size", c.ffn_size},
            {"windows", r.shape.n_seq}, {"ctx", r.shape.n_tok}, {"text", a.text_file.empty() ? a.corpus : a.text_file},
            {"seed", a.seed}, {"loss", r.loss}, {"format", a.format}, {"scale_rule", scale_rule_name(o.lp.scale_rule)},
            {"rounding", rounding_name(o.lp.rounding_a)}, {"oe_k", o.lp.oe_k}, {"tau", o.detector.tau},
            {"table", o.table.name}, {"window_binades", o.window_binades}, {"skip_positions", o.skip_positions},
            {"strategies", names}, {"plan", plan_to_json(r.plan())}, {"projections", projections}};
}

nlohmann::json consistency_json(const ErrorConsistency& consistency, const OperandAnalysisOptions& o) {
    const std::vector<ErrorConsistency::Entry> entries = consistency.entries();
    if (entries.empty()) return nullptr;
    nlohmann::json per_layer = nlohmann::json::array();
    for (const ErrorConsistency::Entry& e : entries)
        per_layer.push_back({{"name", linear_name(e.layer, e.projection)}, {"strategy", strategy_short_name(o.strategies[e.strategy])},
                             {"sum_error_norm2", e.sum_error_norm2}, {"error_norm2_sum", e.error_norm2_sum},
                             {"sum_c_norm2", e.sum_c_norm2}, {"dot", e.dot}});
    return {{"slot", "backward_gw"}, {"by_projection", consistency.by_projection_json(o.strategies)}, {"entries", per_layer}};
}

void print_consistency(const ErrorConsistency& consistency, int64_t batches, const OperandAnalysisOptions& o) {
    std::printf("\nwgrad across the %lld batches, summed over blocks: consistency |sum E| / sqrt(sum |E|^2) (1: independent "
                "errors that\naverage out over steps, %.2f = sqrt(batches): the same error every batch) / |sum E| / |sum dW| / "
                "cos(sum E, sum dW):\n%-6s",
                (long long)batches, std::sqrt(double(batches)), "proj");
    for (Strategy st : o.strategies) std::printf(" %22s", strategy_short_name(st));
    std::printf("\n");
    const auto by = consistency.by_projection();
    for (Projection p : kProjections) {
        std::printf("%-6s", short_name(p));
        for (size_t i = 0; i < o.strategies.size(); ++i) {
            const auto it = by.find({p, i});
            if (it == by.end()) {
                std::printf(" %22s", "-");
                continue;
            }
            std::printf(" %22s",
                        fmt::format("{:.2f} / {:.3f} / {:+.2f}", it->second.consistency(), it->second.relative(), it->second.cosine()).c_str());
        }
        std::printf("\n");
    }
}

void run_model(const ModelArgs& a) {
    LOWBIT_CHECK(a.windows >= 1 && a.ctx >= 2 && a.batches >= 1, ErrorKind::usage,
                 "analyze model: --windows ≥ 1, --ctx ≥ 2 and --batches ≥ 1 (got {}, {} and {})", a.windows, a.ctx, a.batches);
    if (a.threads > 0) set_thread_count(a.threads);
    OperandAnalysisOptions o;
    o.lp = lp_options(a.format, a.scale_rule, a.rounding, a.oe_k, a.oe_metric, true);
    o.detector.tau = a.tau;
    o.table = strategy_table_named(a.table);
    LOWBIT_CHECK(a.window_binades >= 0 && a.window_binades <= 30, ErrorKind::usage, "analyze model: --window-binades {}: 0 to 30",
                 a.window_binades);
    o.window_binades = a.window_binades;
    o.skip_positions = a.skip_positions;
    const std::string path = resolve_model_path(a.model);
    const LlamaModel model = load_llama_model(path);
    const LlamaConfig& c = model.config;
    LOWBIT_CHECK(a.ctx <= c.context_length, ErrorKind::usage, "analyze model: --ctx {} exceeds the model's context length {}", a.ctx,
                 c.context_length);
    const Tokenizer tok = load_tokenizer(path, a.tokenizer);
    CalibrationSpec spec;
    spec.corpus = a.corpus;
    spec.text_file = a.text_file;
    spec.samples = a.windows * a.batches;
    spec.length = a.ctx + 1;  // inputs and their next tokens
    spec.seed = a.seed;
    const std::vector<int32_t> w = calibration_windows(tok, spec);
    ProgressLine progress("analyze model", a.batches * c.n_layers * kProjectionCount, "projections");
    ErrorConsistency consistency(Slot::wgrad);
    if (a.batches > 1) o.observe_product = [&consistency](const ProductObservation& p) { consistency.observe(p); };
    std::vector<ModelOperandAnalysis> per_batch;
    for (int64_t b = 0; b < a.batches; ++b) {
        std::vector<int32_t> inputs, targets;
        for (int64_t s = b * a.windows; s < (b + 1) * a.windows; ++s)
            for (int64_t t = 0; t < a.ctx; ++t) {
                inputs.push_back(w[size_t(s * (a.ctx + 1) + t)]);
                targets.push_back(w[size_t(s * (a.ctx + 1) + t + 1)]);
            }
        const int64_t done_before = b * c.n_layers * kProjectionCount;
        o.progress = [&progress, done_before](int64_t done, int64_t) { progress.update(done_before + done); };
        per_batch.push_back(analyze_model_operands(model, {inputs.data(), targets.data(), BatchShape{a.windows, a.ctx}}, o));
        consistency.end_batch();
    }
    progress.finish();
    const ModelOperandAnalysis r = a.batches == 1 ? std::move(per_batch.front()) : merge_batches(per_batch, o.table);
    if (!a.plan_out.empty()) plan_save(r.plan(), a.plan_out);
    if (a.json || !a.report.empty()) {
        nlohmann::json report = model_report_json(a, path, c, r, o);
        report["batches"] = a.batches;
        report["wgrad_consistency"] = consistency_json(consistency, o);
        const std::string text = report.dump(2) + "\n";
        if (!a.report.empty()) write_file_atomic(a.report, text.data(), text.size());
        if (a.json) {
            std::printf("%s", text.c_str());
            return;
        }
    }
    print_model_report(a, path, c, r, o);
    if (a.batches > 1) print_consistency(consistency, a.batches, o);
    if (!a.plan_out.empty()) std::printf("\nplan written to %s\n", a.plan_out.c_str());
    if (!a.report.empty()) std::printf("report written to %s\n", a.report.c_str());
}

}  // namespace

void register_analyze_command(CLI::App& app) {
    auto* analyze = app.add_subcommand("analyze", "outlier patterns and low-precision GEMM error (AdaHOP)");
    analyze->require_subcommand(1);

    auto a = std::make_shared<PairsArgs>();
    auto* pairs = analyze->add_subcommand("pairs", "error of every (A, B) outlier-pattern pair under each strategy (synthetic)");
    pairs->add_option("--m", a->m, "rows of A");
    pairs->add_option("--k", a->k, "reduction dimension (multiple of 32)");
    pairs->add_option("--n", a->n, "columns of B");
    pairs->add_option("--seeds", a->seeds, "number of seeds averaged");
    pairs->add_option("--seed", a->seed, "first seed");
    pairs->add_option("--format", a->format, "mxfp4 (default), any MX format, or nvfp4");
    pairs->add_option("--scale-rule", a->scale_rule, "floor (default here, as in the spec's table) | rceil | midmax")
        ->check(CLI::IsMember({"floor", "rceil", "midmax"}));
    pairs->add_option("--rounding", a->rounding, "away (default here, microxcaling 'nearest') | rne | stochastic")
        ->check(CLI::IsMember({"rne", "away", "stochastic"}));
    pairs->add_option("--oe-k", a->oe_k, "rows/columns extracted by OE");
    pairs->add_option("--oe-metric", a->oe_metric, "l2 | absmax")->check(CLI::IsMember({"l2", "absmax"}));
    pairs->add_flag("--bf16-slivers", a->bf16_slivers, "round OE slivers to BF16 (default: exact FP32 slivers)");
    pairs->add_option("--device", a->device, "cpu (reference, default) | cuda (GPU emulation path)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    pairs->add_flag("--json", a->json, "machine-readable output");
    pairs->add_option("--plot", a->plot, "write the table as a heatmap: PATH.svg or PATH.png");
    pairs->callback([a] { run_pairs(*a); });

    auto d = std::make_shared<std::tuple<std::string, bool, double, double>>("", false, 2.0, 0.0);
    auto* detect = analyze->add_subcommand("detect", "outlier pattern (row / col / none) and statistics of a 2-D .npy, and "
                                                     "how much of it the INT8 tensor-core MXFP4 GEMM can chain (adahop/int8_window.h)");
    detect->add_option("IN", std::get<0>(*d), "2-D .npy (leading dimensions flattened into rows)")->required();
    detect->add_flag("--json", std::get<1>(*d), "machine-readable output");
    detect->add_option("--tau", std::get<2>(*d), "ratio threshold (default 2.0)");
    detect->add_option("--kappa", std::get<3>(*d), "kurtosis gate (default 0: off)");
    detect->callback([d] { run_detect(std::get<0>(*d), std::get<1>(*d), std::get<2>(*d), std::get<3>(*d)); });

    auto m = std::make_shared<ModelArgs>();
    auto* model = analyze->add_subcommand(
        "model", "AdaHOP on a real model's operands: one FP32 forward and backward on real text, and for every projection's "
                 "fwd, dgrad and wgrad the patterns, the plan, the MX error of each strategy and the INT8 window census");
    model->add_option("--model", m->model, "a .gguf file, an HF checkpoint directory, or a known name (smollm2-135m)")->required();
    model->add_option("--tokenizer", m->tokenizer, "tokenizer override (default: the model's)");
    model->add_option("--corpus", m->corpus, "a named corpus: sotu-train (default) | sotu-validation | sotu-test");
    model->add_option("--text", m->text_file, "windows from this text file instead of a corpus");
    model->add_option("--windows", m->windows, "windows in a batch (default 2)");
    model->add_option("--batches", m->batches,
                      "batches (default 1); more: labels by majority vote (AdaHOP's calibration), means of the errors, and "
                      "whether wgrad's error is the same from batch to batch (memory: ~6 x the model's parameters)");
    model->add_option("--ctx", m->ctx, "tokens per window (default 512; a multiple of 32 keeps wgrad's K = windows x ctx MX-blocked)");
    model->add_option("--seed", m->seed, "seed of the window offsets (default 0)");
    model->add_option("--format", m->format, "mxfp4 (default), any MX format, or nvfp4");
    model->add_option("--scale-rule", m->scale_rule, "floor | rceil | midmax (default: lp_matmul's, midmax)")
        ->check(CLI::IsMember({"floor", "rceil", "midmax"}));
    model->add_option("--rounding", m->rounding, "rne (default) | away")->check(CLI::IsMember({"rne", "away"}));
    model->add_option("--oe-k", m->oe_k, "rows/columns extracted by OE (default 64)");
    model->add_option("--oe-metric", m->oe_metric, "l2 | absmax")->check(CLI::IsMember({"l2", "absmax"}));
    model->add_option("--table", m->table, "the planner's table: lv1 (default) | lv2 | FILE.json");
    model->add_option("--tau", m->tau, "the detector's ratio threshold (default 2.0)");
    model->add_option("--window-binades", m->window_binades,
                      "width of the INT8 window in the census (default 3, the kernel's; wider: what a wider design would chain)");
    model->add_option("--skip-positions", m->skip_positions,
                      "leave the first N positions of every window out of the analysed operands (attention sinks?); the "
                      "forward and backward still see them (default 0)");
    model->add_option("--plan-out", m->plan_out, "write the plan (strategy_plan.h's JSON, the training engine's format) here");
    model->add_option("--report", m->report, "also write the JSON report (every projection and slot) to this file");
    model->add_flag("--per-layer", m->per_layer, "also print every projection's patterns and planned strategies");
    model->add_flag("--json", m->json, "machine-readable output (every projection and slot)");
    model->add_option("--threads", m->threads, "lowbit worker threads (default: all cores)");
    model->callback([m] { run_model(*m); });
}

}  // namespace lowbit
