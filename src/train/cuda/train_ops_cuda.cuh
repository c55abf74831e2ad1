// train_ops_cuda.cuh — the element-wise and row-wise operations of the CUDA training engine, forward and
// backward, one launcher each. They mirror the CPU FP32 reference ops of train/backward_cpu.h and
// model/forward_cpu.h (the definitions); the engine keeps the residual stream and every gradient that is
// summed (residual, norm inputs) in FP32, and the tensors that are GEMM operands or saved for the backward
// in BF16 (round to nearest even), as llm.c does. Test: tests/cuda/test_cuda_train_ops.cu.
//
// All pointers are device pointers; every launcher runs on `stream` and returns without synchronizing.
// Every reduction has a fixed order (no atomics on floats): the same inputs give bit-identical outputs on
// every run, which bit-exact resume needs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/cuda_device.h"
#include "model/config.h"
#include "model/forward_cpu.h"
#include "train/optimizer.h"

namespace lowbit {

// --- RMSNorm: y = x·r·w, r = (mean(x²) + eps)^(−½) per row ---

// y (BF16) and the per-row r (FP32, saved for the backward) for rows × d of FP32 x; x_copy (optional, not x):
// also a copy of x, the residual stream that the next projection adds its output to.
void rms_norm_forward_cuda(const float* x, const float* w, int64_t rows, int64_t d, float eps, __nv_bfloat16* y,
                           float* inv_rms, cudaStream_t stream = 0, float* x_copy = nullptr);

// Scratch of the norm-gain gradient's two-stage reduction (FP64 partial sums per row chunk, then summed in order).
struct RmsNormBackwardWorkspace {
    DeviceBuffer<double> partials;
};
// Given y = rms_norm(x)·w with the saved r: dx += r·(dy·w) − x·r³·mean(dy·w·x) (FP32, in place; dx may not
// alias x or dy), optionally dx_bf16 = bf16(dx after the add), and dw += Σ_rows dy·x·r (FP32, in place).
void rms_norm_backward_cuda(const float* x, const float* w, const float* inv_rms, const float* dy, int64_t rows,
                            int64_t d, float* dx, __nv_bfloat16* dx_bf16, float* dw, RmsNormBackwardWorkspace& ws,
                            cudaStream_t stream = 0);

// --- RoPE on BF16 [rows, n_heads·head_dim] in place (FP32 math, cos/sin tables of rope_tables on the device) ---
// inverse = false: the forward rotation by θ (apply_rope); inverse = true: its backward, the rotation by −θ
// (apply_rope_backward).
void rope_bf16_cuda(__nv_bfloat16* x, BatchShape shape, int64_t n_heads, int64_t head_dim, RopePairing pairing,
                    const float* cos_t, const float* sin_t, bool inverse, cudaStream_t stream = 0);
// The same from x (rows at x + r·x_ld) into y (rows at y + r·y_ld; y = x with x_ld = y_ld is in place): moves q and k
// between the fused q/k/v GEMM's [rows, q_dim + 2·kv_dim] rows and attention's own tensors, rotating on the way.
void rope_bf16_strided_cuda(const __nv_bfloat16* x, int64_t x_ld, __nv_bfloat16* y, int64_t y_ld, BatchShape shape,
                            int64_t n_heads, int64_t head_dim, RopePairing pairing, const float* cos_t, const float* sin_t,
                            bool inverse, cudaStream_t stream = 0);

// --- SwiGLU s = silu(g)·u over n elements (BF16 in and out, FP32 math) ---
void swiglu_forward_cuda(const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t n, __nv_bfloat16* out,
                         cudaStream_t stream = 0);
// du = ds·silu(g); dg = ds·u·σ(g)·(1 + g·(1 − σ(g))). d_gate / d_up may alias gate / up.
void swiglu_backward_cuda(const __nv_bfloat16* gate, const __nv_bfloat16* up, const __nv_bfloat16* d_out, int64_t n,
                          __nv_bfloat16* d_gate, __nv_bfloat16* d_up, cudaStream_t stream = 0);

// --- cross entropy over FP32 logits [rows, vocab] ---
// loss_rows[r] = logsumexp(logits[r]) − logits[r][targets[r]] (FP32 out; FP32 max and exponentials, their sum
// in FP64, in a fixed in-row order); when dlogits is not null also dlogits = (softmax(logits) − onehot)·grad_scale
// in BF16 (grad_scale = 1/rows for the mean loss). Targets must be valid (the host checks them).
void cross_entropy_cuda(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab, float grad_scale,
                        float* loss_rows, __nv_bfloat16* dlogits, cudaStream_t stream = 0);
// Scratch of the two-stage sums (sum_to_double_cuda, sum_squares_cuda): one FP64 partial per CTA of the first
// stage, grown on demand.
struct SumWorkspace {
    DeviceBuffer<double> partials;
};
// Σ of n FP32 values in double, one fixed order, into *out (device).
void sum_to_double_cuda(const float* x, int64_t n, double* out, SumWorkspace& ws, cudaStream_t stream = 0);

// --- embedding ---
// The batch's tokens grouped by id on the host (ids ascending, rows ascending within an id), so the
// backward adds each row's gradient to its table row in the order the CPU does, with no atomics.
struct EmbeddingBackwardPlan {
    std::vector<int32_t> ids;      // distinct token ids
    std::vector<int32_t> offsets;  // ids.size() + 1: rows of ids[i] are rows[offsets[i] .. offsets[i+1])
    std::vector<int32_t> rows;     // row indices
};
EmbeddingBackwardPlan embedding_backward_plan(const int32_t* tokens, int64_t n_rows);
// d_table[ids[i]] += Σ_{rows of ids[i], ascending} d_hidden[row] (FP32 [*, d]). ids/offsets/rows are device
// copies of the plan's vectors.
void embedding_backward_cuda(const int32_t* ids, const int32_t* offsets, const int32_t* rows, int64_t n_ids,
                             const float* d_hidden, int64_t d, float* d_table, cudaStream_t stream = 0);

// --- optimizer ---
// Σ g² over n FP32 values into *out (device, double), fixed order.
void sum_squares_cuda(const float* g, int64_t n, double* out, SumWorkspace& ws, cudaStream_t stream = 0);
// AdamW over the flat buffers exactly as AdamW::step (train/optimizer.cpp): per element in FP32, in that order,
// g = grad_scale·grad; decay_mask[i] != 0 where the element's tensor decays. The FP32 constants are computed
// by the caller as the CPU computes them (from double): beta1, beta2, one_minus_beta1 = float(1 − β₁),
// one_minus_beta2, bias_correction1 = float(1 − β₁ᵗ) and bias_correction2 (divided by, as the CPU does),
// lr = float(η_s), eps, weight_decay. When params_bf16 is not null it also receives bf16(p) after the update
// (the GEMMs' weight copies).
struct AdamwStepArgs {
    float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, grad_scale, bias_correction1,
        bias_correction2;
};
// The constants of update number t (from 1) with learning rate lr, computed as AdamW::step computes them.
AdamwStepArgs adamw_step_args(const AdamWConfig& config, int64_t t, double lr, float grad_scale);
void adamw_step_cuda(float* params, const float* grads, float* m, float* v, const uint8_t* decay_mask, int64_t n,
                     const AdamwStepArgs& a, __nv_bfloat16* params_bf16, cudaStream_t stream = 0);

}  // namespace lowbit
