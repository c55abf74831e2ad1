// model_ops_cuda.cuh — the element-wise and row-wise operations of the Llama block on the GPU, one launcher
// each, mirroring the CPU reference operations of model/forward_cpu.h: RMSNorm, RoPE (both pairings, from
// the CPU's own cos/sin tables), SwiGLU, bias add, embedding gather, and an FP32 → BF16 cast. Attention has
// its own file (attention_cuda.cuh). Test: tests/cuda/test_model_cuda.cu; benchmark: bench/bench_model.cu.
//
// All pointers are device pointers; every launcher runs on `stream` and returns without synchronizing.
// Several launchers take an optional BF16 output next to the FP32 one: the BF16 forward keeps activations
// in FP32 and feeds its GEMMs BF16 copies of their inputs, written by the op that produces them (no extra
// pass). Pass nullptr for an output that is not wanted (at least one must be given).
//
// Rounding contract (lowbit_cuda compiles with --fmad=false, the CPU with -ffp-contract=off):
//   rms_norm_rows_cuda   sum of squares in FP64 like the CPU, then (x·inv)·w in FP32: equal to the CPU up to
//                        the FP64 summation order, i.e. bit-equal in practice (tested to 2^-22 relative).
//   apply_rope_cuda      bit-equal (same tables, same mul/mul/sub and mul/mul/add).
//   swiglu_cuda          g/(1+expf(−g))·up: CUDA's expf is within 2 ulp, so within ~4 ulp of the CPU.
//   add_bias_rows_cuda, embed_rows_cuda, cast_to_bf16_cuda: exact (BF16 outputs round to nearest even).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "model/config.h"
#include "model/forward_cpu.h"

namespace lowbit {

// y[r] = x[r] / sqrt(mean(x[r]²) + eps) · w for `rows` rows of d, into y and/or y_bf16 (either may be null,
// not both). y may equal x.
void rms_norm_rows_cuda(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y,
                        __nv_bfloat16* y_bf16, cudaStream_t stream = 0);

// In place on x [rows, n_heads·head_dim] (row r at position r mod n_tok); cos_t/sin_t [n_tok, head_dim/2]
// as rope_tables() builds them.
void apply_rope_cuda(float* x, BatchShape shape, int64_t n_heads, int64_t head_dim, RopePairing pairing,
                     const float* cos_t, const float* sin_t, cudaStream_t stream = 0);

// out = silu(gate)·up over n elements; out may equal gate; out_bf16 optional (one of the two required).
void swiglu_cuda(const float* gate, const float* up, int64_t n, float* out, __nv_bfloat16* out_bf16,
                 cudaStream_t stream = 0);

// y[r, i] += bias[i] over y [rows, n].
void add_bias_rows_cuda(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t stream = 0);

// out [rows, d] (FP32) = table[tokens[r]] for a [vocab, d] table in FP32 or BF16. Token ids must already
// be validated (the host does it: a device kernel cannot report a bad id with a message).
void embed_rows_cuda(const float* table, const int32_t* tokens, int64_t rows, int64_t d, float* out,
                     cudaStream_t stream = 0);
void embed_rows_cuda(const __nv_bfloat16* table, const int32_t* tokens, int64_t rows, int64_t d, float* out,
                     cudaStream_t stream = 0);

// y = bf16(x), round to nearest even, n elements.
void cast_to_bf16_cuda(const float* x, int64_t n, __nv_bfloat16* y, cudaStream_t stream = 0);

// y = float(x), exact, n elements.
void cast_from_bf16_cuda(const __nv_bfloat16* x, int64_t n, float* y, cudaStream_t stream = 0);

}  // namespace lowbit
