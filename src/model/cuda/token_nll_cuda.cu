// token_nll_cuda.cu — log-sum-exp, target NLL and argmax of logit rows on the GPU (see token_nll_cuda.cuh).
//
// Napkin math (SmolLM2-135M, ctx 512, a batch of 8 windows): 8·255 scored rows × 49152 × 4 B = 401 MB of
// logits, read twice (pass 1 max/argmax, pass 2 Σexp; the rows in flight exceed the 60 MB L2, so count
// both from HBM): ~0.2 ms at ~4 TB/s, against ~19 ms for the BF16 forward of those 4096 tokens (218K
// tokens/s). The FP64 exps: 100 M × ~25 FP64 operations ≈ 2.5 GFLOP, < 0.1 ms at the H200's ~34 TFLOP/s
// FP64. What crosses to the host: 12 B per row, 24 KB per batch instead of 401 MB (that copy costs ~30 ms
// per batch on the H200 host: bench_model's "forward (device)" and "forward (to host)" rows).
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include "model/cuda/token_nll_cuda.cuh"

#include <cmath>
#include <cstdint>
#include <string>

namespace lowbit {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Keeps (v, i) when it beats (best_v, best_i): larger, or equal at a smaller index. A NaN never wins, so
// the kept pairs are totally ordered and the reduction below is order-free.
__device__ inline void keep_first_max(float& best_v, int32_t& best_i, float v, int32_t i) {
    if (v > best_v || (v == best_v && i < best_i)) {
        best_v = v;
        best_i = i;
    }
}

// exp(x) correctly rounded to FP32 (FP64 exp within 1 ulp of 2^-53, then one rounding): the host's glibc
// expf is within 0.502 ulp of the same value.
__device__ inline double exp_term(float x) { return double(__double2float_rn(exp(double(x)))); }

// One CTA per scored row g = s·n_score + r (logits row s·rows_per_seq + r). Pass 1: FP32 max and its first
// index; pass 2: Σ exp(l − max) in FP64; thread 0 finishes as token_score does.
template <bool kVec4>
__global__ void __launch_bounds__(kThreads)
token_nll_rows_kernel(const float* __restrict__ logits, int64_t vocab, int64_t rows_per_seq, int64_t n_score,
                      const int32_t* __restrict__ targets, double* __restrict__ nll, int32_t* __restrict__ argmax) {
    __shared__ float warp_max[kWarps];
    __shared__ int32_t warp_arg[kWarps];
    __shared__ double warp_sum[kWarps];
    __shared__ float row_max_shared;
    __shared__ int32_t row_arg_shared;
    const int64_t g = blockIdx.x;
    const float* row = logits + ((g / n_score) * rows_per_seq + g % n_score) * vocab;
    const float4* row4 = reinterpret_cast<const float4*>(row);  // used only when kVec4 (16-byte aligned)
    const int64_t n4 = vocab / 4;
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);

    // Pass 1: max and first argmax.
    float best = -INFINITY;
    int32_t arg = INT32_MAX;  // no element yet: any element, even −Inf, beats it
    if constexpr (kVec4) {
        for (int64_t j = threadIdx.x; j < n4; j += kThreads) {
            const float4 x = row4[j];
            const int32_t i = int32_t(4 * j);
            keep_first_max(best, arg, x.x, i);
            keep_first_max(best, arg, x.y, i + 1);
            keep_first_max(best, arg, x.z, i + 2);
            keep_first_max(best, arg, x.w, i + 3);
        }
    } else {
        for (int64_t i = threadIdx.x; i < vocab; i += kThreads) keep_first_max(best, arg, row[i], int32_t(i));
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, arg, o);
        keep_first_max(best, arg, ov, oi);
    }
    if (lane == 0) {
        warp_max[warp] = best;
        warp_arg[warp] = arg;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kWarps; ++w) keep_first_max(best, arg, warp_max[w], warp_arg[w]);
        row_max_shared = best;
        row_arg_shared = arg;
    }
    __syncthreads();
    const float mx = row_max_shared;

    // Pass 2: Σ exp(l − max), the difference in FP32 as on the host, the sum in FP64.
    double sum = 0.0;
    if constexpr (kVec4) {
        for (int64_t j = threadIdx.x; j < n4; j += kThreads) {
            const float4 x = row4[j];
            sum += exp_term(x.x - mx);
            sum += exp_term(x.y - mx);
            sum += exp_term(x.z - mx);
            sum += exp_term(x.w - mx);
        }
    } else {
        for (int64_t i = threadIdx.x; i < vocab; i += kThreads) sum += exp_term(row[i] - mx);
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) warp_sum[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int w = 0; w < kWarps; ++w) total += warp_sum[w];
        const float lse = float(log(total));
        const int32_t t = targets[g];
        const float logit_t = t >= 0 && t < vocab ? row[t] : __int_as_float(0x7fc00000);  // NaN: a bad id
        nll[g] = double(mx + lse - logit_t);  // FP32, left to right, as token_score
        if (argmax) argmax[g] = row_arg_shared == INT32_MAX ? 0 : row_arg_shared;  // a row of NaNs: 0
    }
}

}  // namespace

void token_nll_rows_cuda(const float* logits, int64_t vocab, int64_t n_seq, int64_t rows_per_seq, int64_t n_score,
                         const int32_t* targets, double* nll, int32_t* argmax, cudaStream_t stream) {
    if (vocab <= 0 || vocab > int64_t(INT32_MAX) - 3)
        cuda_usage_error("token_nll_rows_cuda: vocabulary of " + std::to_string(vocab) + " (1 … 2^31 − 4)");
    if (n_seq < 0 || n_score < 0 || n_score > rows_per_seq)
        cuda_usage_error("token_nll_rows_cuda: " + std::to_string(n_score) + " scored rows of " +
                         std::to_string(rows_per_seq) + " per sequence, " + std::to_string(n_seq) + " sequences");
    const int64_t rows = n_seq * n_score;
    if (rows == 0) return;
    if (rows > INT32_MAX) cuda_usage_error("token_nll_rows_cuda: more than 2^31 rows");
    const bool vec4 = vocab % 4 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
    if (vec4)
        token_nll_rows_kernel<true><<<unsigned(rows), kThreads, 0, stream>>>(logits, vocab, rows_per_seq, n_score, targets,
                                                                          nll, argmax);
    else
        token_nll_rows_kernel<false><<<unsigned(rows), kThreads, 0, stream>>>(logits, vocab, rows_per_seq, n_score,
                                                                           targets, nll, argmax);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace lowbit
