// attention_cuda.cuh — causal grouped-query attention on the GPU, FP32, one pass with an online softmax
// (flash-attention style; no n_tok × n_tok score matrix is ever stored). CPU reference: attention_causal in
// model/forward_cpu.h; test: tests/cuda/test_model_cuda.cu; benchmark: bench/bench_model.cu.
//
// Layout as the CPU: q/out [rows, n_heads·head_dim], k/v [rows, n_kv_heads·head_dim], rows = n_seq·n_tok
// sequence-major; query head h reads key/value head h / (n_heads / n_kv_heads); every sequence starts at
// position 0 and attends to itself only. head_dim ≤ 256 (any value, not only powers of two).
//
// Numerics: scores q·k/√head_dim, the running max, the exponentials and the weighted sum of values are all
// FP32 (products fused with fmaf, which only makes each step more accurate); the result differs from the
// CPU's only by summation order and expf's last ulps — about 1e-6 relative for scores of modest size.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "model/forward_cpu.h"

namespace lowbit {

// out (FP32) and/or out_bf16 (one may be null) [rows, n_heads·head_dim].
void attention_causal_cuda(const float* q, const float* k, const float* v, BatchShape shape, int64_t n_heads,
                           int64_t n_kv_heads, int64_t head_dim, float* out, __nv_bfloat16* out_bf16,
                           cudaStream_t stream = 0);

// The largest head_dim attention_causal_cuda accepts.
constexpr int64_t kAttentionMaxHeadDim = 256;

}  // namespace lowbit
