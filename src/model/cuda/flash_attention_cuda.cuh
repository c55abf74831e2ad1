// flash_attention_cuda.cuh — causal grouped-query attention on the BF16 tensor cores, forward and backward,
// for training and for the forward's optional tensor-core attention (forward_cuda.cuh), flash-style:
// tiles of queries against tiles of keys with an online softmax, no n_tok × n_tok matrix ever in memory;
// the forward saves the per-row log-sum-exp and the backward recomputes the probabilities from it.
// BF16 operands, FP32 scores/softmax/accumulation, BF16 outputs. CPU reference: attention_causal
// (model/forward_cpu.h) and attention_causal_backward (train/backward_cpu.h).
// Test: tests/cuda/test_cuda_flash_attention.cu; benchmark: bench/bench_flash_attention.cu.
//
// Layout as the CPU's: q/out/dq [rows, n_heads·head_dim], k/v/dk/dv [rows, n_kv_heads·head_dim], rows =
// n_seq·n_tok sequence-major; query head h reads key/value head h / (n_heads / n_kv_heads); each sequence
// attends causally to itself only; scores are q·k/√head_dim. lse [n_seq, n_heads, n_tok] (natural log).
// head_dim ∈ {16, 32, 64, 128}; any n_tok ≥ 1 (≤ 4194240), n_seq ≤ 65535; BF16 pointers 16-byte aligned.
//
// Determinism: no floating-point atomics. dK and dV of a key/value head sum over the query heads of its group
// and over the query tiles in one fixed order inside one CTA; dQ is computed by its own pass over key tiles.
// The same inputs give bit-identical outputs on every run (bit-exact resume depends on it).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_device.h"
#include "model/forward_cpu.h"

namespace lowbit {

bool flash_attention_head_dim_supported(int64_t head_dim);

void flash_attention_forward_cuda(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, BatchShape shape,
                                  int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, __nv_bfloat16* out, float* lse,
                                  cudaStream_t stream = 0);

// Scratch of the backward: D = rowsum(dO ⊙ O) per query row and head, FP32 [n_seq, n_heads, n_tok] (grown on use).
struct FlashAttentionBackwardWorkspace {
    DeviceBuffer<float> row_dot;
};

// Given out, lse = forward(q, k, v): dq, dk, dv (overwritten) from d_out.
void flash_attention_backward_cuda(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                   const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* d_out,
                                   BatchShape shape, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                   __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
                                   FlashAttentionBackwardWorkspace& ws, cudaStream_t stream = 0);

}  // namespace lowbit
