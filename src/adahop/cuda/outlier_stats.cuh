// outlier_stats.cuh — one pass over a matrix on the GPU for AdaHOP's outlier statistics: per-row and
// per-column sums of x and x² (FP64) and max |x|. The detector turns them into the pattern
// label (outlier_detector.h); outlier extraction ranks rows/columns by them.
// Napkin math: reads the matrix once (4096×2048 BF16 = 16.8 MB → 3.9 µs at 4.3 TB/s), writes R + C sums;
// FP64 adds ≈ 4 per element (34 MFLOP at ~30 TFLOP/s FP64 ≈ 1 µs, hidden under the loads).
// CPU reference: adahop/outlier_detector.cpp (two-pass FP64). Test: tests/cuda/test_adahop_kernels.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "adahop/outlier_detector.h"
#include "core/cuda_device.h"

namespace lowbit {

// Device scratch for the statistics of an R × C matrix (grown on demand, reused across calls).
struct OutlierStatsWorkspace {
    DeviceBuffer<double> row_sums;   // [2R]: Σx, Σx² per row
    DeviceBuffer<double> col_sums;   // [2C]
    DeviceBuffer<uint32_t> row_max;  // [R] max |x| as float bits
    DeviceBuffer<uint32_t> col_max;  // [C]
    DeviceBuffer<double> moments;    // [6]: mean, std, kurtosis of the row variances, then of the column ones
    DeviceBuffer<uint8_t> partials;  // per-tile partial sums (outlier_stats.cu)
    DeviceBuffer<double> powers;     // [8]: Σv, Σv², Σv³, Σv⁴ of the row variances, then of the column ones
    void reserve(int64_t rows, int64_t cols);
};

// Computes ws.row_sums / col_sums (Σx, Σx²) and ws.row_max / col_max (max |x| as float bits).
void row_col_sums_cuda(const float* x, int64_t rows, int64_t cols, OutlierStatsWorkspace& ws,
                       cudaStream_t stream = 0);
void row_col_sums_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, OutlierStatsWorkspace& ws,
                       cudaStream_t stream = 0);

// The moments of the row and column variances into ws.moments (asynchronous; after row_col_sums_cuda).
void variance_moments_cuda(int64_t rows, int64_t cols, OutlierStatsWorkspace& ws, cudaStream_t stream = 0);

// The whole detector: sums, moments, then (after synchronising `stream`) the label on the host.
PatternStats detect_outlier_pattern_cuda(const float* x, int64_t rows, int64_t cols, const DetectorOptions& opt,
                                         OutlierStatsWorkspace& ws, cudaStream_t stream = 0);
PatternStats detect_outlier_pattern_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const DetectorOptions& opt,
                                         OutlierStatsWorkspace& ws, cudaStream_t stream = 0);

}  // namespace lowbit
