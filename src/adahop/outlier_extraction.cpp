// outlier_extraction.cpp — CPU reference of top-k row/column extraction.
#include "adahop/outlier_extraction.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace lowbit {

OutlierMetric parse_outlier_metric(const std::string& name) {
    if (name == "l2") return OutlierMetric::l2;
    if (name == "absmax") return OutlierMetric::absmax;
    fail(ErrorKind::usage, "unknown outlier metric '{}' (l2, absmax)", name);
}

std::vector<int32_t> top_k_indices(const std::vector<double>& score, int64_t k) {
    const int64_t n = int64_t(score.size());
    k = std::clamp<int64_t>(k, 0, n);
    std::vector<int32_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b);
    });
    idx.resize(size_t(k));
    std::sort(idx.begin(), idx.end());
    return idx;
}

namespace {
double accumulate_metric(double acc, float v, OutlierMetric m) {
    return m == OutlierMetric::l2 ? acc + double(v) * double(v) : std::max(acc, double(std::fabs(v)));
}

// Score of every row (by_rows) or column: Σx² for L2 (the ranking of the norm), max |x| for absmax.
std::vector<double> outlier_scores(const float* x, int64_t rows, int64_t cols, bool by_rows, OutlierMetric metric) {
    std::vector<double> score(static_cast<size_t>(by_rows ? rows : cols), 0.0);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            double& sc = score[size_t(by_rows ? r : c)];
            sc = accumulate_metric(sc, x[r * cols + c], metric);
        }
    return score;
}
}  // namespace

OutlierSplit split_outlier_rows(const float* x, int64_t rows, int64_t cols, int64_t k, OutlierMetric metric) {
    OutlierSplit s;
    s.indices = top_k_indices(outlier_scores(x, rows, cols, true, metric), k);
    s.clean.assign(x, x + rows * cols);
    s.slice.resize(s.indices.size() * size_t(cols));
    for (size_t i = 0; i < s.indices.size(); ++i) {
        const int64_t r = s.indices[i];
        std::copy(x + r * cols, x + (r + 1) * cols, s.slice.begin() + int64_t(i) * cols);
        std::fill(s.clean.begin() + r * cols, s.clean.begin() + (r + 1) * cols, 0.0f);
    }
    return s;
}

OutlierSplit split_outlier_cols(const float* x, int64_t rows, int64_t cols, int64_t k, OutlierMetric metric) {
    OutlierSplit s;
    s.indices = top_k_indices(outlier_scores(x, rows, cols, false, metric), k);
    s.clean.assign(x, x + rows * cols);
    const int64_t kk = int64_t(s.indices.size());
    s.slice.resize(size_t(rows * kk));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < kk; ++i) {
            const int64_t c = s.indices[size_t(i)];
            s.slice[size_t(r * kk + i)] = x[r * cols + c];
            s.clean[size_t(r * cols + c)] = 0.0f;
        }
    return s;
}

}  // namespace lowbit
