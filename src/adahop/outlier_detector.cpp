// outlier_detector.cpp — CPU reference of the outlier-pattern detector (two-pass FP64 variances).
#include "adahop/outlier_detector.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace lowbit {

const char* pattern_name(Pattern p) {
    switch (p) {
        case Pattern::row: return "row";
        case Pattern::col: return "col";
        case Pattern::none: return "none";
    }
    return "?";
}

Pattern parse_pattern(const std::string& name) {
    if (name == "row") return Pattern::row;
    if (name == "col") return Pattern::col;
    if (name == "none") return Pattern::none;
    fail(ErrorKind::usage, "unknown outlier pattern '{}' (row, col, none)", name);
}

// Unbiased std and kurtosis (mean of standardised 4th powers) of n values.
VarianceMoments variance_moments(const double* v, int64_t n) {
    VarianceMoments m;
    if (n < 2) return m;
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += v[i];
    m.mean = s / double(n);
    double s2 = 0;
    for (int64_t i = 0; i < n; ++i) s2 += (v[i] - m.mean) * (v[i] - m.mean);
    m.std = std::sqrt(s2 / double(n - 1));
    if (m.std > 0) {
        double s4 = 0;
        for (int64_t i = 0; i < n; ++i) {
            const double z = (v[i] - m.mean) / m.std;
            s4 += z * z * z * z;
        }
        m.kurtosis = s4 / double(n);
    }
    return m;
}

PatternStats pattern_from_moments(const VarianceMoments& mr, int64_t rows, const VarianceMoments& mc, int64_t cols,
                                  const DetectorOptions& opt) {
    PatternStats st;
    st.rows = rows;
    st.cols = cols;
    if (rows < 2 || cols < 2) return st;
    st.mean_row_variance = mr.mean;
    st.mean_col_variance = mc.mean;
    st.kurtosis_row = mr.kurtosis;
    st.kurtosis_col = mc.kurtosis;
    st.cv_row = mr.std / (mr.mean + 1e-8) / std::sqrt(2.0 / double(std::max<int64_t>(cols - 1, 1)));
    st.cv_col = mc.std / (mc.mean + 1e-8) / std::sqrt(2.0 / double(std::max<int64_t>(rows - 1, 1)));
    if (st.cv_row / (st.cv_col + 1e-8) > opt.tau) st.pattern = st.kurtosis_row >= opt.kappa ? Pattern::row : Pattern::none;
    else if (st.cv_col / (st.cv_row + 1e-8) > opt.tau) st.pattern = st.kurtosis_col >= opt.kappa ? Pattern::col : Pattern::none;
    return st;
}

PatternStats detect_outlier_pattern(const float* x, int64_t rows, int64_t cols, const DetectorOptions& opt) {
    if (rows <= 0 || cols <= 0) fail(ErrorKind::input, "outlier detector: empty matrix ({}x{})", rows, cols);
    std::vector<double> row_var(static_cast<size_t>(rows)), col_mean(size_t(cols), 0.0), col_var(size_t(cols), 0.0);
    bool bad = false;
    // rows: two passes per row
    parallel_for(rows, 64, [&](int64_t r0, int64_t r1) {
        bool local_bad = false;
        for (int64_t r = r0; r < r1; ++r) {
            const float* p = x + r * cols;
            double s = 0;
            for (int64_t c = 0; c < cols; ++c) s += p[c];
            local_bad |= !std::isfinite(s);
            const double m = s / double(cols);
            double s2 = 0;
            for (int64_t c = 0; c < cols; ++c) s2 += (p[c] - m) * (p[c] - m);
            row_var[size_t(r)] = cols > 1 ? s2 / double(cols - 1) : 0.0;
        }
        if (local_bad) bad = true;
    });
    if (bad) fail(ErrorKind::input, "outlier detector: the {}x{} matrix holds NaN or Inf", rows, cols);
    // columns: accumulate over row chunks per column range (threads own column ranges)
    parallel_for(cols, 256, [&](int64_t c0, int64_t c1) {
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = c0; c < c1; ++c) col_mean[size_t(c)] += x[r * cols + c];
        for (int64_t c = c0; c < c1; ++c) col_mean[size_t(c)] /= double(rows);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = c0; c < c1; ++c) {
                const double d = x[r * cols + c] - col_mean[size_t(c)];
                col_var[size_t(c)] += d * d;
            }
        for (int64_t c = c0; c < c1; ++c) col_var[size_t(c)] = rows > 1 ? col_var[size_t(c)] / double(rows - 1) : 0.0;
    });
    return pattern_from_moments(variance_moments(row_var.data(), rows), rows, variance_moments(col_var.data(), cols), cols, opt);
}

}  // namespace lowbit
