// int_quantize.cuh — GPTQ-style uniform integer grids (INT2…INT8, symmetric or asymmetric, per row or in
// groups of G along the chosen axis; every Rounding) on the GPU, FP32 or BF16 input, and dequantization.
// Bit-identical to int_quantize / int_dequantize (formats/int_grid.h). CPU reference:
// formats/int_grid.cpp; test: tests/cuda/test_cuda_int_quantize.cu; benchmark: bench/bench_kernels.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "formats/int_grid.h"

namespace lowbit {

// Device outputs (16-byte aligned): q [outer][inner], one byte per code (rows·cols bytes); params
// [outer][inner/G] (scale, zero) FP32 pairs. G = int_group_size(f, inner) (group 0 = one group per line).
void int_quantize_cuda(const float* x, int64_t rows, int64_t cols, const IntGridFormat& f, const QuantizeOptions& opt,
                       uint8_t* q, IntGridParams* params, cudaStream_t stream = 0);
void int_quantize_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, const IntGridFormat& f, const QuantizeOptions& opt,
                       uint8_t* q, IntGridParams* params, cudaStream_t stream = 0);

// out: row-major rows × cols FP32.
void int_dequantize_cuda(const uint8_t* q, const IntGridParams* params, int64_t rows, int64_t cols, const IntGridFormat& f,
                         int axis, float* out, cudaStream_t stream = 0);

}  // namespace lowbit
