// hadamard_mxfp4_stats.cuh — the fused block-32 Hadamard + MXFP4 pass (hadamard/cuda/hadamard_mxfp4.cuh) with
// the statistics of its input that AdaHOP takes from it instead of reading the operand again: the Σx² scores
// of outlier extraction (extract_outliers_quantized_cuda, outlier_extraction.cuh) and the (Σx, Σx²) partials
// of the outlier detector (detector_stats_from_blocks_cuda, outlier_stats.cuh).
// CPU reference: hadamard_mxfp4.cuh's definition, with Σx² and Σx of the BF16 inputs per group below;
// test: tests/cuda/test_cuda_hadamard_mxfp4.cu, tests/cuda/test_cuda_outlier_stats.cu; benchmark: bench/bench_adahop.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hadamard/cuda/hadamard_mxfp4.cuh"

namespace lowbit {

// One orientation's codes and scales (Mxfp4DeviceCodes) and optional statistics of the input, written per
// *group* of 32-blocks (block_stats_count entries; the layout below), not with each other:
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
// (H200), more than the finalising launch saves.
struct Mxfp4DeviceOutput : Mxfp4DeviceCodes {
    float* block_sumsq = nullptr;
    float2* detector_partials = nullptr;
};

constexpr int kBlockStatsStripe = 8;  // row blocks per group down columns (the column kernels' warps per CTA)
// Groups per outer vector and entries of block_sumsq / detector_partials for one orientation (axis 1: blocks
// along rows; axis 0: down columns) of a rows × cols matrix.
int64_t block_stats_groups(int64_t rows, int64_t cols, int axis);
int64_t block_stats_count(int64_t rows, int64_t cols, int axis);

// hadamard_mxfp4_cuda with the statistics each output asks for (at most one kind per output: block_sumsq and
// detector_partials are written by separate passes, not one; usage error otherwise). The codes and scales are
// those of the pass without statistics.
void hadamard_mxfp4_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const HadamardMxfp4Options& opt,
                         const Mxfp4DeviceOutput& along_rows, const Mxfp4DeviceOutput& along_cols, cudaStream_t stream = 0);

}  // namespace lowbit
