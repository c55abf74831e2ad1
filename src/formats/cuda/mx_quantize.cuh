// mx_quantize.cuh — MX block quantization on the GPU (MXFP4/6/8, MXINT8; every ScaleRule and Rounding),
// FP32 or BF16 input, blocks along rows (axis 1) or columns (axis 0), and dequantization to FP32.
// Bit-identical to the CPU reference mx_quantize / mx_dequantize (formats/mx_block.h) with E2M1 codes
// packed by pack_e2m1. CPU reference: formats/mx_block.cpp; test: tests/cuda/test_cuda_mx_quantize.cu;
// benchmark: bench/bench_kernels.cu.
//
// Device layouts (blocked_view.h): codes [outer][inner] — E2M1 packed two per byte (byte j = code 2j |
// code 2j+1 << 4), other elements one byte each; scales [outer][inner/32] E8M0 bytes.
// All pointers are device pointers, 16-byte aligned (cudaMalloc gives 256). Launches are asynchronous on
// `stream`; shape errors throw Error(input) before anything is launched.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "formats/mx_block.h"

namespace lowbit {

// Bytes of the code array of a rows × cols matrix: E2M1 rows·cols/2, other elements rows·cols.
int64_t mx_code_bytes(MxElement e, int64_t rows, int64_t cols);
// Bytes of the scale array: rows·cols/32.
int64_t mx_scale_bytes(int64_t rows, int64_t cols);

void mx_quantize_cuda(const float* x, int64_t rows, int64_t cols, MxElement e, ScaleRule rule, const QuantizeOptions& opt,
                      uint8_t* codes, uint8_t* scales, cudaStream_t stream = 0);
void mx_quantize_cuda(const __nv_bfloat16* x, int64_t rows, int64_t cols, MxElement e, ScaleRule rule,
                      const QuantizeOptions& opt, uint8_t* codes, uint8_t* scales, cudaStream_t stream = 0);

// out: row-major rows × cols FP32.
void mx_dequantize_cuda(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols, MxElement e, int axis,
                        float* out, cudaStream_t stream = 0);
// Codes in their blocked order [outer][inner] → BF16 values in the same order (out: outer × inner row-major),
// each value round(mx_decode) to nearest even — exact where the value is a BF16 number (every MXFP4 value
// and scale; MXFP8 values below 2^−133 round). inner % 32 == 0; codes and out 16-byte aligned.
void mx_dequantize_blocked_bf16_cuda(const uint8_t* codes, const uint8_t* scales, int64_t outer, int64_t inner, MxElement e,
                                     __nv_bfloat16* out, cudaStream_t stream = 0);

}  // namespace lowbit
