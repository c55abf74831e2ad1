// outlier_extraction.h — AdaHOP's outlier extraction (adahop.md §5.3): the top-k rows (or columns) of a
// matrix ranked by L2 norm (default) or max |x| are taken out into a compact slice kept in high precision;
// the clean remainder (those rows/columns zeroed) goes through IHT + MX. Ties rank the lower index first;
// indices are returned in ascending order. k larger than the dimension takes everything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lowbit {

enum class OutlierMetric : uint8_t { l2, absmax };
OutlierMetric parse_outlier_metric(const std::string& name);

struct OutlierSplit {
    std::vector<float> clean;      // same shape as the input, selected rows/columns zeroed
    std::vector<float> slice;      // rows: k × cols; columns: rows × k (row-major)
    std::vector<int32_t> indices;  // ascending
};

// Indices of the k largest scores (ties → lower index), ascending.
std::vector<int32_t> top_k_indices(const std::vector<double>& score, int64_t k);

OutlierSplit split_outlier_rows(const float* x, int64_t rows, int64_t cols, int64_t k, OutlierMetric metric);
OutlierSplit split_outlier_cols(const float* x, int64_t rows, int64_t cols, int64_t k, OutlierMetric metric);

}  // namespace lowbit
