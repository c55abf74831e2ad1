// outlier_detector.h — AdaHOP's outlier-pattern detector (adahop.md §4.2): is a matrix's energy concentrated
// in a few rows (row-wise), a few columns (column-wise), or neither? Returns the statistics, not only the
// label:
//   vr = unbiased variance of each row, vc = of each column
//   cv_row = std(vr)/(mean(vr)+1e-8) / sqrt(2/max(C−1,1))   (CV normalised by a Gaussian sample variance's CV)
//   cv_col = std(vc)/(mean(vc)+1e-8) / sqrt(2/max(R−1,1))
//   row  if cv_row/(cv_col+1e-8) > tau and kurt(vr) ≥ kappa;  col  if cv_col/(cv_row+1e-8) > tau and kurt(vc) ≥ kappa
// std is unbiased, kurt(v) = mean(((v − mean v)/std v)^4). Sums run in FP64. A matrix with fewer than 2 rows
// or columns is labelled none. Scale-invariant: multiplying the matrix by c changes no ratio.
#pragma once

#include <cstdint>
#include <string>

namespace lowbit {

enum class Pattern : uint8_t { row, col, none };

const char* pattern_name(Pattern p);            // "row", "col", "none"
Pattern parse_pattern(const std::string& name);  // Error(usage) on anything else
inline Pattern opposite(Pattern p) { return p == Pattern::row ? Pattern::col : p == Pattern::col ? Pattern::row : Pattern::none; }

struct DetectorOptions {
    double tau = 2.0;    // ratio threshold
    double kappa = 0.0;  // kurtosis gate (0: off, since kurtosis is ≥ 0)
};

struct PatternStats {
    Pattern pattern = Pattern::none;
    int64_t rows = 0, cols = 0;
    double cv_row = 0, cv_col = 0;            // normalised coefficients of variation
    double kurtosis_row = 0, kurtosis_col = 0;
    double mean_row_variance = 0, mean_col_variance = 0;
};

// Mean, unbiased std and kurtosis of a vector of variances.
struct VarianceMoments {
    double mean = 0, std = 0, kurtosis = 0;
};
VarianceMoments variance_moments(const double* v, int64_t n);

// The label and statistics from the moments of the R row variances and C column variances — shared by
// the CPU path and the CUDA path (which computes the moments on the device).
PatternStats pattern_from_moments(const VarianceMoments& row, int64_t rows, const VarianceMoments& col, int64_t cols,
                                  const DetectorOptions& opt);

// x is row-major rows × cols (leading dimensions of a tensor flattened into rows). NaN/Inf → Error(input).
PatternStats detect_outlier_pattern(const float* x, int64_t rows, int64_t cols, const DetectorOptions& opt = {});

}  // namespace lowbit
