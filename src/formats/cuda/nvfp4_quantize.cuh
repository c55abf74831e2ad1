// nvfp4_quantize.cuh — NVFP4 quantization on the GPU (E2M1 elements in blocks of 16 with E4M3 block scales
// and one FP32 tensor scale; every Rounding), FP32 or BF16 input, blocks along rows (axis 1) or columns
// (axis 0), and dequantization. Bit-identical to nvfp4_quantize / nvfp4_dequantize (formats/nvfp4.h) with
// the codes packed by pack_e2m1. CPU reference: formats/nvfp4.cpp; test: tests/cuda/test_cuda_nvfp4.cu;
// benchmark: bench/bench_kernels.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "formats/nvfp4.h"

namespace lowbit {

// Device outputs (16-byte aligned): codes packed E2M1 [outer][inner/2] (rows·cols/2 bytes), block_scales
// E4M3 [outer][inner/16] (rows·cols/16 bytes), tensor_scale one float, tensor_amax_bits one uint32: the
// integer maximum of abs_bits(x) over the tensor (written first, by a reduction; the quantizer reads it).
struct Nvfp4DeviceOutput {
    uint8_t* codes = nullptr;
    uint8_t* block_scales = nullptr;
    float* tensor_scale = nullptr;
    uint32_t* tensor_amax_bits = nullptr;
};

// Bytes of the packed codes (rows·cols/2) and of the block scales (rows·cols/16).
int64_t nvfp4_code_bytes(int64_t rows, int64_t cols);
int64_t nvfp4_scale_bytes(int64_t rows, int64_t cols);

// Launches on `stream`: amax reduction, quantization, tensor scale. Shape errors throw Error(input).
void nvfp4_quantize_cuda(const float* x, int64_t rows, int64_t cols, const QuantizeOptions& opt, const Nvfp4DeviceOutput& out,
                         cudaStream_t stream = 0);
void nvfp4_quantize_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const QuantizeOptions& opt,
                         const Nvfp4DeviceOutput& out, cudaStream_t stream = 0);
// Same without the amax output: the tensor_scale slot holds the amax bits until the last launch turns
// them into the scale (stream order makes this safe).
void nvfp4_quantize_cuda(const float* x, int64_t rows, int64_t cols, const QuantizeOptions& opt, uint8_t* codes,
                         uint8_t* block_scales, float* tensor_scale, cudaStream_t stream = 0);
void nvfp4_quantize_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const QuantizeOptions& opt, uint8_t* codes,
                         uint8_t* block_scales, float* tensor_scale, cudaStream_t stream = 0);

// tensor_scale is a device pointer; out is row-major rows × cols FP32.
void nvfp4_dequantize_cuda(const uint8_t* codes, const uint8_t* block_scales, const float* tensor_scale, int64_t rows,
                           int64_t cols, int axis, float* out, cudaStream_t stream = 0);

}  // namespace lowbit
