// cmd_analyze.cpp — `lowbit analyze {pairs, detect}`: why a GEMM loses accuracy in MXFP4. `pairs` runs the
// synthetic pattern-pair experiment (adahop.md §9) and draws its table; `detect` labels a user's matrix and counts
// the chunks of it the INT8 tensor-core GEMM would compute block by block (adahop/int8_window.h).
#include <cmath>
#include <cstdio>
#include <memory>
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
#include "io/npy.h"
#include "io/plot.h"

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

LpMatmulOptions lp_options(const PairsArgs& a) {
    LpMatmulOptions o;
    const FormatInfo& f = find_format(a.format);
    if (f.kind == FormatKind::nvfp4) o.nvfp4 = true;
    else if (f.kind == FormatKind::mx) o.element = f.mx_element;
    else fail(ErrorKind::usage, "analyze: --format must be an MX format or nvfp4, not {}", a.format);
    parse_scale_rule(a.scale_rule.c_str(), &o.scale_rule);
    parse_rounding(a.rounding.c_str(), &o.rounding_a);
    o.rounding_b = o.rounding_a;
    o.oe_k = a.oe_k;
    o.oe_metric = parse_outlier_metric(a.oe_metric);
    o.high_precision_bf16 = a.bf16_slivers;
    return o;
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
            j[st == Strategy::plain ? "plain" : "iht"] = {{"outside", c.outside()}, {"tile_chunks", c.tiles * c.chunks}};
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
        std::printf("  %s: plain %lld/%lld, IHT %lld/%lld", label, (long long)j["plain"]["outside"].get<int64_t>(),
                    (long long)j["plain"]["tile_chunks"].get<int64_t>(), (long long)j["iht"]["outside"].get<int64_t>(),
                    (long long)j["iht"]["tile_chunks"].get<int64_t>());
    }
    std::printf("\n");
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
}

}  // namespace lowbit
