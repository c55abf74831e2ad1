// outlier_stats.cuh — one pass over a matrix on the GPU for AdaHOP's outlier statistics: per-row and
// per-column Σx, Σx² (FP64) and max |x|, and — when both axes are asked for — the moments of the row and
// column variances that the detector needs (outlier_detector.h): a streaming launch that reads the matrix
// once and writes partials, and a short finalising launch. Outlier extraction ranks rows or columns by the
// same statistics (one axis only).
//
// Floor (H200, ~4.3 TB/s DRAM, 132 SMs): the matrix is read once — 4096×2048 BF16 = 16.8 MB → 3.9 µs;
// 4096×8192 or 8192×4096 BF16 = 67 MB → 15.6 µs (a matrix already in the 60 MB L2 reads faster).
// Arithmetic: ~6 instructions per element for both axes (unpack, 2 adds, 2 FMAs, the row butterfly's
// share), 2× faster than the loads on 132 SMs. Partials: (R·C/256 + segments·C) × 16 B = 1.5–5 MB,
// L2-resident; the finalising launch reads them with one CTA per 32 rows or columns (8 warps splitting the
// parts). Measured (H200, e44d1e5): 11.8 µs on 4096×2048 (launch 1 alone 6.6, the moments step ~2.5), 30.4 µs
// on 4096×8192 — the read floor is 0.28–0.57 of these times. CPU reference: adahop/outlier_detector.cpp (two-pass FP64).
// Test: tests/cuda/test_cuda_outlier_stats.cu. Numbers: bench/results/README.md.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "adahop/cuda/hadamard_mxfp4_stats.cuh"
#include "adahop/outlier_detector.h"
#include "core/cuda_device.h"

namespace lowbit {

// Device scratch for the statistics of an R × C matrix (grown on demand, reused across calls). Not for
// concurrent use from two streams.
struct OutlierStatsWorkspace {
    DeviceBuffer<double> row_sums;    // [2R]: Σx, Σx² per row
    DeviceBuffer<double> col_sums;    // [2C]
    DeviceBuffer<uint32_t> row_max;   // [R] max |x| as float bits (NaN ignored, as the CPU's std::max does)
    DeviceBuffer<uint32_t> col_max;   // [C]
    DeviceBuffer<double> moments;     // [6]: mean, std, kurtosis of the row variances, then of the column ones
    DeviceBuffer<uint8_t> partials;   // per-slab / per-segment partial sums (outlier_stats.cu)
    DeviceBuffer<double> powers;      // [8] per operand: Σv, Σv², Σv³, Σv⁴ of the row variances, then of the column ones
    DeviceBuffer<uint32_t> counters;  // per operand: the finalising launch's last-CTA-done counter; zero between launches
    void reserve(int64_t rows, int64_t cols);
};

// What one statistics pass computes. Both axes always include the sums (and then the moments too).
struct OutlierStatsRequest {
    bool rows = true, cols = true;  // which axes
    bool sums = true;               // Σx, Σx²
    bool max = true;                // max |x|
};

// Two launches: the requested statistics into ws.row_sums / col_sums / row_max / col_max and, with both axes,
// ws.powers and ws.moments. Asynchronous.
void outlier_stats_cuda(const float* x, int64_t rows, int64_t cols, const OutlierStatsRequest& what,
                        OutlierStatsWorkspace& ws, cudaStream_t stream = 0);
void outlier_stats_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const OutlierStatsRequest& what,
                        OutlierStatsWorkspace& ws, cudaStream_t stream = 0);

// Computes ws.row_sums / col_sums (Σx, Σx²) and ws.row_max / col_max (max |x| as float bits), and the
// moments (ws.moments) on the way: outlier_stats_cuda with everything requested.
void row_col_sums_cuda(const float* x, int64_t rows, int64_t cols, OutlierStatsWorkspace& ws,
                       cudaStream_t stream = 0);
void row_col_sums_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, OutlierStatsWorkspace& ws,
                       cudaStream_t stream = 0);

// The detector's device part (two launches: sums of both axes → ws.moments; no max). Asynchronous.
void detector_stats_cuda(const float* x, int64_t rows, int64_t cols, OutlierStatsWorkspace& ws, cudaStream_t stream = 0);
void detector_stats_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, OutlierStatsWorkspace& ws,
                         cudaStream_t stream = 0);

// The whole detector: two launches, then (after synchronising `stream`) the label on the host.
PatternStats detect_outlier_pattern_cuda(const float* x, int64_t rows, int64_t cols, const DetectorOptions& opt,
                                         OutlierStatsWorkspace& ws, cudaStream_t stream = 0);
PatternStats detect_outlier_pattern_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const DetectorOptions& opt,
                                         OutlierStatsWorkspace& ws, cudaStream_t stream = 0);

// The detector without a pass of its own: from the (Σx, Σx²) partials (Mxfp4DeviceOutput::detector_partials)
// that hadamard_mxfp4_cuda writes when it quantizes the operand in both orientations — as training does for
// X, W and dY (each is an operand of two GEMMs with different reduction dimensions). One launch (the
// finalising one, reading the partials: 8 bytes per group of blocks, block_stats_count); rows and cols
// multiples of 32. Row and column sums are FP64 sums of FP32 partials (the streaming pass above: of FP32
// lane partials), so they differ from it by FP32 rounding (tests: 1e-6 relative on the statistics). Fills ws.row_sums, col_sums, powers and
// moments. Asynchronous; the second form synchronises and labels.
void detector_stats_from_blocks_cuda(const Mxfp4DeviceOutput& along_rows, const Mxfp4DeviceOutput& along_cols, int64_t rows,
                                     int64_t cols, OutlierStatsWorkspace& ws, cudaStream_t stream = 0);
PatternStats detect_outlier_pattern_from_blocks_cuda(const Mxfp4DeviceOutput& along_rows, const Mxfp4DeviceOutput& along_cols,
                                                     int64_t rows, int64_t cols, const DetectorOptions& opt, OutlierStatsWorkspace& ws,
                                                     cudaStream_t stream = 0);

// The same for a batch of operands — a training step's X, W and dY of every layer — in one launch per 32
// operands, so the finalising launch's latency (~6 µs on the H200, most of its time for one operand) is paid
// once. Operand i's moments (mean, std, kurtosis of the row variances, then of the column variances: the
// numbers pattern_from_moments labels) go to moments[6i … 6i+5] (device memory); the same bits as the
// single-operand form. Asynchronous.
struct DetectorPartialsOf {
    const float2* along_rows = nullptr;  // Mxfp4DeviceOutput::detector_partials of the pass along rows
    const float2* along_cols = nullptr;  // ... and of the pass along columns
    int64_t rows = 0, cols = 0;
};
void detector_moments_from_partials_cuda(const DetectorPartialsOf* operands, int n, double* moments, OutlierStatsWorkspace& ws,
                                         cudaStream_t stream = 0);

// Index logic of the statistics kernel, shared with the host-side tests (tests/cuda/test_cuda_outlier_stats.cu).
namespace outlier_stats_detail {

constexpr int kThreads = 256;                 // 8 warps per CTA
constexpr int kWarps = kThreads / 32;
constexpr int kLaneCols = 8;                  // a lane owns 8 adjacent columns (one 16-byte BF16 load per row)
constexpr int kSlabCols = 32 * kLaneCols;     // a CTA covers one slab of 256 columns
constexpr int kSegmentRowAlign = kWarps;      // segment heights are multiples of 8 rows (equal rows per warp)

// The grid: slabs of 256 columns × segments of seg_rows rows; CTA b covers slab b % slabs, segment b / slabs.
struct StatsGeometry {
    int64_t slabs = 0, segs = 0, seg_rows = 0;
};

// target_ctas: CTAs that fill the GPU once (SMs × CTAs per SM). Segments: enough for one full wave, then as
// many as fit in the waves the grid needs anyway (288 CTAs on 264 slots would run two full waves for 1.09
// waves of work). Long segments keep the loads of a warp in flight over many batches.
inline StatsGeometry stats_geometry(int64_t rows, int64_t cols, int64_t target_ctas) {
    StatsGeometry g;
    if (target_ctas < 1) target_ctas = 1;
    g.slabs = (cols + kSlabCols - 1) / kSlabCols;
    const int64_t segs = (target_ctas + g.slabs - 1) / g.slabs;
    const int64_t waves = (g.slabs * segs + target_ctas - 1) / target_ctas;
    const int64_t fill = std::max(segs, waves * target_ctas / g.slabs);
    int64_t seg_rows = (rows + fill - 1) / fill;
    seg_rows = (seg_rows + kSegmentRowAlign - 1) / kSegmentRowAlign * kSegmentRowAlign;
    g.seg_rows = seg_rows;
    g.segs = (rows + seg_rows - 1) / seg_rows;  // ≤ fill: the grid never needs more waves than planned
    return g;
}

// Position t (0 … 255) of a slab's column partials holds column 8·(t % 32) + t / 32 of the slab: the CTA
// combines its warps' column sums in shared memory stored lane-minor (bank-conflict free) and writes them
// in that order.
__host__ __device__ constexpr int slab_column(int t) { return kLaneCols * (t % 32) + t / 32; }

// Rows handled per warp between two FP64 flushes (8 × 16 B BF16 or 4 × 32 B FP32 per lane in flight).
template <typename T>
__host__ __device__ constexpr int batch_rows() {
    return sizeof(T) == 2 ? 8 : 4;
}

// The row sums of a batch are reduced across the warp by a reduce-scatter butterfly (offsets 16, 8, 4, 2,
// 1, halving the values each step while more than one is left): V = 2^log2v values per lane in, and lane
// l ends with the full sum of value scatter_value_of_lane(l); scatter_lane_writes(l) picks one lane per
// value. Pairwise sums in the same order as a plain xor all-reduce, so the results are the same bits.
__host__ __device__ constexpr int scatter_value_of_lane(int lane, int log2v) { return (lane >> (5 - log2v)) & ((1 << log2v) - 1); }
__host__ __device__ constexpr bool scatter_lane_writes(int lane, int log2v) { return (lane & ((1 << (5 - log2v)) - 1)) == 0; }

}  // namespace outlier_stats_detail

}  // namespace lowbit
