// pair_analysis.h — the synthetic pattern-pair experiment of adahop.md §9: operands with row-wise,
// column-wise or no outliers (1 % of rows/columns of N(0,1) scaled ×20), the GEMM error of all nine
// (A, B) pattern pairs under each strategy (mean relative Frobenius error over seeds, SQNR from it),
// and the detector's label of every operand.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "adahop/lp_matmul.h"

namespace lowbit {

// M×N matrix of N(0,1) (counter RNG, `seed`), with round(fraction·dim) rows or columns scaled by `scale`.
std::vector<float> synthetic_operand(int64_t rows, int64_t cols, Pattern p, uint64_t seed, double fraction = 0.01,
                                     float scale = 20.0f);

struct PairAnalysisOptions {
    int64_t m = 2048, k = 2048, n = 2048;
    int seeds = 3;
    uint64_t first_seed = 0;
    std::vector<Strategy> strategies = {Strategy::plain, Strategy::iht, Strategy::oht, Strategy::iht_oe_left,
                                        Strategy::iht_oe_right};
    LpMatmulOptions lp;  // format, scale rule, rounding, oe_k, ...
    DetectorOptions detector;
    // The GEMM under test (default: the CPU reference lp_matmul); the CLI plugs in the CUDA path.
    std::function<void(const float*, const float*, int64_t, int64_t, int64_t, Strategy, const LpMatmulOptions&, float*)> matmul;
};

struct PairResult {
    Pattern a, b;
    PatternStats a_stats, b_stats;      // detector on the first seed's operands
    std::vector<double> rel_error;      // per strategy: mean over seeds
    std::vector<double> sqnr_db;        // −20·log10(mean relative error)
};

// Calls progress(done, total) after each GEMM.
std::vector<PairResult> analyze_pairs(const PairAnalysisOptions& opt, void (*progress)(int, int) = nullptr);

}  // namespace lowbit
