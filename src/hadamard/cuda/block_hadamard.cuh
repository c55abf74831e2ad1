// block_hadamard.cuh — block-diagonal orthonormal Walsh–Hadamard transform on the GPU: a row-major
// rows × cols matrix transformed in blocks of B ∈ {16, 32, 64, 128, 256} contiguous elements of each row
// (axis 1) or B consecutive rows of each column (axis 0), FP32 or BF16.
// Bit-identical to hadamard_transform(x, rows, cols, {block B, axis}) (hadamard/hadamard.h, the plain
// non-randomized transform); for BF16 the reference is bf16 → f32, that transform, f32 → bf16 rounded to
// nearest even. CPU reference: hadamard/hadamard.cpp; test: tests/cuda/test_cuda_block_hadamard.cu; benchmark:
// bench/bench_kernels.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace lowbit {

// in and out are device pointers (16-byte aligned) and may be the same (in place). Asynchronous on
// `stream`; an unsupported block or a dimension the block does not divide throws before any launch.
void block_hadamard_cuda(const float* in, float* out, int64_t rows, int64_t cols, int64_t block, int axis,
                         cudaStream_t stream = 0);
void block_hadamard_cuda(const __nv_bfloat16* in, __nv_bfloat16* out, int64_t rows, int64_t cols, int64_t block, int axis,
                         cudaStream_t stream = 0);
// In place (as the CPU's hadamard_transform).
void block_hadamard_cuda(float* x, int64_t rows, int64_t cols, int64_t block, int axis, cudaStream_t stream = 0);
void block_hadamard_cuda(__nv_bfloat16* x, int64_t rows, int64_t cols, int64_t block, int axis, cudaStream_t stream = 0);

}  // namespace lowbit
