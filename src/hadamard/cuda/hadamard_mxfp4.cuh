// hadamard_mxfp4.cuh — the fused kernel AdaHOP's inner-Hadamard-transform GEMMs need: block-32 Hadamard
// transform + MXFP4 quantization of a BF16 matrix in one pass, with blocks along rows (axis 1), along
// columns (axis 0), or both orientations (from a single read of the input on sm_90; two passes elsewhere).
//
// Definition (bit for bit): for each requested axis,
//     y   = hadamard_transform(float(x), rows, cols, {block 32, axis})     (hadamard/hadamard.h)
//     q   = mx_quantize(y, rows, cols, e2m1, rule, {axis, rounding, seed})  (formats/mx_block.h)
//     out = pack_e2m1(q.codes), q.scales
// Stochastic rounding uses counter_random24(seed, r·cols + c) in both orientations.
// CPU reference: the composition above; test: tests/cuda/test_cuda_hadamard_mxfp4.cu; benchmark: bench/bench_kernels.cu.
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
// The same pass with AdaHOP's statistics of the input: Mxfp4DeviceOutput (adahop/cuda/hadamard_mxfp4_stats.cuh).
struct Mxfp4DeviceCodes {
    uint8_t* codes = nullptr;
    uint8_t* scales = nullptr;
    bool requested() const { return codes != nullptr; }
};

struct HadamardMxfp4Options {
    ScaleRule rule = kDefaultScaleRule;
    Rounding rounding = Rounding::nearest_even;
    uint64_t seed = 0;  // stochastic rounding stream
};

// x: device BF16, row-major rows × cols. along_rows (axis 1, needs cols % 32 == 0) and/or along_cols
// (axis 0, needs rows % 32 == 0); an output with codes == nullptr is not computed; when both are requested
// the input is read once. Asynchronous on `stream`; shape/alignment errors throw Error(input).
void hadamard_mxfp4_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const HadamardMxfp4Options& opt,
                         const Mxfp4DeviceCodes& along_rows, const Mxfp4DeviceCodes& along_cols, cudaStream_t stream = 0);

}  // namespace lowbit
