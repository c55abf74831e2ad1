// hadamard_mxfp4.cuh — the fused kernel AdaHOP's inner-Hadamard-transform GEMMs need: block-32 Hadamard
// transform + MXFP4 quantization of a BF16 matrix in one pass, with blocks along rows (axis 1), along
// columns (axis 0), or both orientations from a single read of the input.
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
// block_sumsq (optional, rows·cols/32 floats): Σx² of each block's BF16 input values (FP32 FMAs in element
// order, before the transform) — the scores of outlier extraction fused into this pass
// (extract_outliers_quantized_cuda, adahop/cuda/outlier_extraction.cuh). Layout: blocks along rows
// [rows][cols/32] (the scales' layout); blocks down columns [rows/32][cols] — transposed from the scales, so
// that a warp's 32 adjacent columns store one 128-byte line (in the scales' layout every 4-byte store was a
// sector of its own: on a DRAM-resident 4096×8192 operand that cost more than the sums themselves).
// detector_partials (optional, not with block_sumsq; rows·cols/32 pairs, 8-byte aligned; same layout as
// block_sumsq): (Σx, Σx²) of each block's input values as an FP32 pair — the outlier detector's row and
// column statistics from the quantization passes, one pass in each orientation (detector_stats_from_blocks_cuda,
// adahop/cuda/outlier_stats.cuh) — and, as its Σx² is block_sumsq's, the outlier-extraction scores too. Σx is
// the first coefficient of the block's unnormalised transform (the butterfly's FP32 tree: free), Σx² the FMA
// chain above; one 8-byte store per block. Per block on purpose:
// summing pairs of blocks (a lane shuffle) and stripes of 8 row blocks (shared memory) before the store wrote
// a third of the bytes but cost the H200 passes more time than the bytes did (bench/results/README.md).
struct Mxfp4DeviceOutput {
    uint8_t* codes = nullptr;
    uint8_t* scales = nullptr;
    float* block_sumsq = nullptr;
    float2* detector_partials = nullptr;
    bool requested() const { return codes != nullptr; }
};

// Pairs of detector partials of one orientation of a rows × cols matrix.
int64_t detector_partials_count(int64_t rows, int64_t cols);

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
