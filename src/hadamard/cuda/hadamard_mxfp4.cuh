// hadamard_mxfp4.cuh — the fused kernel AdaHOP's inner-Hadamard-transform GEMMs need: block-32 Hadamard
// transform + MXFP4 quantization of a BF16 matrix in one pass, with blocks along rows (axis 1), along
// columns (axis 0), or both orientations (from a single read of the input on sm_90; two passes elsewhere).
//
// Definition (bit for bit): for each requested axis,
//     y   = hadamard_transform(float(x), rows, cols, {block 32, axis})     (hadamard/hadamard.h)
//     q   = mx_quantize(y, rows, cols, e2m1, rule, {axis, rounding, seed})  (formats/mx_block.h)
//     out = pack_e2m1(q.codes), q.scales
// Stochastic rounding uses counter_random24(seed, r·cols + c) in both orientations.
// CPU reference: the composition above; test: tests/cuda/test_kernels.cu; benchmark: bench/bench_kernels.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "formats/format_registry.h"
#include "formats/mx_block.h"

namespace lowbit {

// One orientation's output, device pointers (16-byte aligned): packed E2M1 codes [outer][inner/2] and E8M0
// scales [outer][inner/32], outer = rows for blocks along rows, cols for blocks along columns.
// Sizes: mx_code_bytes(e2m1, rows, cols) = rows·cols/2 and mx_scale_bytes(rows, cols) = rows·cols/32.
//
// Optional statistics of the input, written per *group* of 32-blocks (block_stats_count entries; the layout
// below), not with each other:
//   block_sumsq (floats): Σx² of the group's BF16 input values — the scores of outlier extraction fused into
//     this pass (extract_outliers_quantized_cuda, adahop/cuda/outlier_extraction.cuh);
//   detector_partials (float pairs, 8-byte aligned): (Σx, Σx²) of the group — the outlier detector's row and
//     column statistics from the quantization passes, one pass in each orientation (detector_stats_from_blocks_cuda,
//     adahop/cuda/outlier_stats.cuh); its Σx² has block_sumsq's bits, so it serves outlier extraction too.
// Per block: Σx² is an FP32 FMA chain in element order before the transform, Σx the first coefficient of the
// unnormalised transform (the butterfly's FP32 tree: free). Groups:
//   blocks along rows: one block; layout [rows][cols/32] (the scales' layout);
//   blocks down columns: the kBlockStatsStripe = 8 row blocks of a column kernel's CTA (fewer in the last
//     stripe), added in FP32 in row-block order through shared memory after the CTA's barrier; layout
//     [ceil(rows/256)][cols] — a warp's 32 adjacent columns store one 128-byte line.
// Why stripes: down columns the pairs per block were as many bytes as along rows for the detector's
// finalising launch to read, and a stripe costs the column kernels one shared-memory store per block.
// Along rows, pairs of blocks (a lane shuffle in a warp-uniform loop) cost the row pass ~2 µs at 8192²
// (H200, session 14), more than the finalising launch saved: not kept.
struct Mxfp4DeviceOutput {
    uint8_t* codes = nullptr;
    uint8_t* scales = nullptr;
    float* block_sumsq = nullptr;
    float2* detector_partials = nullptr;
    bool requested() const { return codes != nullptr; }
};

constexpr int kBlockStatsStripe = 8;  // row blocks per group down columns (the column kernels' warps per CTA)
// Groups per outer vector and entries of block_sumsq / detector_partials for one orientation (axis 1: blocks
// along rows; axis 0: down columns) of a rows × cols matrix.
int64_t block_stats_groups(int64_t rows, int64_t cols, int axis);
int64_t block_stats_count(int64_t rows, int64_t cols, int axis);

struct HadamardMxfp4Options {
    ScaleRule rule = kDefaultScaleRule;
    Rounding rounding = Rounding::nearest_even;
    uint64_t seed = 0;  // stochastic rounding stream
};

// x: device BF16, row-major rows × cols. along_rows (axis 1, needs cols % 32 == 0) and/or along_cols
// (axis 0, needs rows % 32 == 0); an output with codes == nullptr is not computed; when both are requested
// the input is read once. Asynchronous on `stream`; shape/alignment errors throw Error(input).
void hadamard_mxfp4_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const HadamardMxfp4Options& opt,
                         const Mxfp4DeviceOutput& along_rows, const Mxfp4DeviceOutput& along_cols, cudaStream_t stream = 0);

}  // namespace lowbit
