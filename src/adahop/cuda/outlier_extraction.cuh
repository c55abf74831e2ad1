// outlier_extraction.cuh — AdaHOP's outlier extraction on the GPU (CPU reference: adahop/outlier_extraction.h):
// rank rows or columns by L2 norm or max |x| (one pass: outlier_stats.cuh), select the top k (CUB radix
// sort, stable, so ties rank the lower index first; indices returned ascending), gather them into a compact
// slice and zero them in the clean operand; plus the scatter of the high-precision sliver product back into C.
// Napkin math for 4096×2048 BF16 rows, k = 64: score pass 16.8 MB (3.9 µs), sort of 4096 keys (a few µs of
// launch latency), gather 256 KB, zeroing 256 KB; the clean copy (when not in place) 2×16.8 MB (7.8 µs).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "adahop/cuda/outlier_stats.cuh"
#include "adahop/outlier_extraction.h"

namespace lowbit {

struct OutlierExtractionWorkspace {
    OutlierStatsWorkspace stats;
    DeviceBuffer<double> keys_in, keys_out;
    DeviceBuffer<int32_t> index_in, index_out;
    DeviceBuffer<uint8_t> sort_temp;
};

// x: rows × cols. by_rows: select rows (slice k × cols) else columns (slice rows × k). clean may equal x
// (in place) or be another rows × cols buffer (x is copied into it first). indices: k int32, ascending.
// k is clamped to the dimension; returns the k used.
int64_t split_outliers_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, bool by_rows, int64_t k, OutlierMetric metric,
                            __nv_bfloat16* clean, __nv_bfloat16* slice, int32_t* indices, OutlierExtractionWorkspace& ws,
                            cudaStream_t stream = 0);
int64_t split_outliers_cuda(const float* x, int64_t rows, int64_t cols, bool by_rows, int64_t k, OutlierMetric metric,
                            float* clean, float* slice, int32_t* indices, OutlierExtractionWorkspace& ws, cudaStream_t stream = 0);

// c (rows_c × cols_c, row-major): by_rows: c[indices[i], :] = src[i, :] (src k × cols_c);
// else c[:, indices[j]] = src[:, j] (src rows_c × k).
void scatter_outliers_cuda(const float* src, int64_t k, const int32_t* indices, bool by_rows, float* c, int64_t rows_c,
                           int64_t cols_c, cudaStream_t stream = 0);

}  // namespace lowbit
