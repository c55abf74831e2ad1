// pair_analysis.cpp — the synthetic pair/strategy error table (adahop.md §9).
#include "adahop/pair_analysis.h"

#include <cmath>

#include "core/counter_rng.h"
#include "core/gemm_cpu.h"
#include "core/random_fill.h"

namespace lowbit {

std::vector<float> synthetic_operand(int64_t rows, int64_t cols, Pattern p, uint64_t seed, double fraction, float scale) {
    std::vector<float> x(size_t(rows * cols));
    fill_gaussian(x.data(), rows * cols, seed);
    if (p == Pattern::none) return x;
    const int64_t dim = p == Pattern::row ? rows : cols;
    const int64_t count = std::max<int64_t>(1, std::llround(fraction * double(dim)));
    // pick `count` distinct indices: rank all by a seeded random key
    std::vector<double> key(static_cast<size_t>(dim));
    for (int64_t i = 0; i < dim; ++i) key[size_t(i)] = double(counter_random24(seed ^ 0x6F75746CULL, uint64_t(i)));
    for (int32_t idx : top_k_indices(key, count)) {
        if (p == Pattern::row)
            for (int64_t c = 0; c < cols; ++c) x[size_t(idx * cols + c)] *= scale;
        else
            for (int64_t r = 0; r < rows; ++r) x[size_t(r * cols + idx)] *= scale;
    }
    return x;
}

std::vector<PairResult> analyze_pairs(const PairAnalysisOptions& opt, void (*progress)(int, int)) {
    const Pattern pats[3] = {Pattern::row, Pattern::col, Pattern::none};
    std::vector<PairResult> results;
    const int total = 9 * opt.seeds * int(opt.strategies.size());
    int done = 0;
    std::vector<float> c(size_t(opt.m * opt.n)), ref(c.size());
    for (Pattern pa : pats)
        for (Pattern pb : pats) {
            PairResult r;
            r.a = pa;
            r.b = pb;
            r.rel_error.assign(opt.strategies.size(), 0.0);
            for (int s = 0; s < opt.seeds; ++s) {
                const uint64_t seed = opt.first_seed + uint64_t(s);
                auto a = synthetic_operand(opt.m, opt.k, pa, 2 * seed + 101);
                auto b = synthetic_operand(opt.k, opt.n, pb, 2 * seed + 102);
                if (s == 0) {
                    r.a_stats = detect_outlier_pattern(a.data(), opt.m, opt.k, opt.detector);
                    r.b_stats = detect_outlier_pattern(b.data(), opt.k, opt.n, opt.detector);
                }
                if (opt.matmul) {  // exact FP32 product on the same device as the GEMM under test
                    LpMatmulOptions exact;
                    exact.quantize = false;
                    exact.high_precision_bf16 = false;
                    opt.matmul(a.data(), b.data(), opt.m, opt.k, opt.n, Strategy::full, exact, ref.data());
                } else {
                    gemm_f32(ConstMatF(a.data(), opt.m, opt.k), Trans::no, ConstMatF(b.data(), opt.k, opt.n), Trans::no,
                             MatF(ref.data(), opt.m, opt.n));
                }
                double ref2 = 0;
                for (float v : ref) ref2 += double(v) * double(v);
                for (size_t si = 0; si < opt.strategies.size(); ++si) {
                    if (opt.matmul) opt.matmul(a.data(), b.data(), opt.m, opt.k, opt.n, opt.strategies[si], opt.lp, c.data());
                    else lp_matmul(a.data(), b.data(), opt.m, opt.k, opt.n, opt.strategies[si], opt.lp, c.data());
                    double e2 = 0;
                    for (size_t i = 0; i < c.size(); ++i) e2 += double(c[i] - ref[i]) * double(c[i] - ref[i]);
                    r.rel_error[si] += std::sqrt(e2 / ref2) / opt.seeds;
                    if (progress) progress(++done, total);
                }
            }
            for (double e : r.rel_error) r.sqnr_db.push_back(-20.0 * std::log10(e));
            results.push_back(std::move(r));
        }
    return results;
}

}  // namespace lowbit
