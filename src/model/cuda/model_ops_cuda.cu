// model_ops_cuda.cu — RMSNorm, RoPE, SwiGLU, bias add, embedding gather and the BF16 cast on the GPU (see
// model_ops_cuda.cuh). All are memory-bound: napkin math for SmolLM2-135M at 512 tokens, one RMSNorm reads
// and writes 512·576·4 B = 1.2 MB (< 1 µs at 4 TB/s); they matter only through their launch count
// (~10 per block), not their bytes.
#include "core/cuda_device.h"  // first: it prepares fmt for nvcc

#include "model/cuda/model_ops_cuda.cuh"

#include <algorithm>
#include <string>

namespace lowbit {

namespace {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements.
unsigned grid_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(1) << 20)); }

__device__ inline int64_t global_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t global_stride() { return int64_t(gridDim.x) * blockDim.x; }

// One CTA per row. FP64 sum of squares (as the CPU reference: its sqrt and division then round to the same
// float), FP32 scaling.
__global__ void __launch_bounds__(kThreads)
rms_norm_rows_kernel(const float* __restrict__ x, const float* __restrict__ w, int64_t d, float eps, float* y,
                     __nv_bfloat16* y_bf16) {
    __shared__ double warp_sums[kThreads / 32];
    __shared__ float inv_shared;
    const int64_t r = blockIdx.x;
    const float* xr = x + r * d;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
        const double v = double(xr[i]);
        ss += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int i = 0; i < kThreads / 32; ++i) total += warp_sums[i];
        inv_shared = float(1.0 / sqrt(total / double(d) + double(eps)));
    }
    __syncthreads();
    const float inv = inv_shared;
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
        const float v = (xr[i] * inv) * w[i];  // read before the write: y may equal x
        if (y) y[r * d + i] = v;
        if (y_bf16) y_bf16[r * d + i] = __float2bfloat16_rn(v);
    }
}

// One thread per (row, head, pair). Pair i of a head is (2i, 2i+1) adjacent, (i, i + half) halves.
__global__ void apply_rope_kernel(float* x, int64_t rows, int64_t n_tok, int64_t n_heads, int64_t head_dim,
                                  int64_t stride_i, int64_t offset_b, const float* __restrict__ cos_t,
                                  const float* __restrict__ sin_t) {
    const int64_t half = head_dim / 2, per_row = n_heads * half, n = rows * per_row;
    for (int64_t idx = global_index(); idx < n; idx += global_stride()) {
        const int64_t r = idx / per_row, rem = idx % per_row, h = rem / half, i = rem % half;
        const int64_t pos = r % n_tok;
        const float c = cos_t[pos * half + i], s = sin_t[pos * half + i];
        float* xh = x + r * n_heads * head_dim + h * head_dim;
        float* pa = xh + i * stride_i;
        float* pb = pa + offset_b;
        const float a0 = *pa, b0 = *pb;
        *pa = a0 * c - b0 * s;
        *pb = a0 * s + b0 * c;
    }
}

__global__ void swiglu_kernel(const float* gate, const float* __restrict__ up, int64_t n, float* out,
                              __nv_bfloat16* out_bf16) {
    for (int64_t i = global_index(); i < n; i += global_stride()) {
        const float g = gate[i];
        const float v = g / (1.0f + expf(-g)) * up[i];
        if (out) out[i] = v;
        if (out_bf16) out_bf16[i] = __float2bfloat16_rn(v);
    }
}

__global__ void add_bias_rows_kernel(float* y, const float* __restrict__ bias, int64_t rows, int64_t n) {
    const int64_t total = rows * n;
    for (int64_t i = global_index(); i < total; i += global_stride()) y[i] += bias[i % n];
}

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void embed_rows_kernel(const T* __restrict__ table, const int32_t* __restrict__ tokens, int64_t rows,
                                  int64_t d, float* __restrict__ out) {
    const int64_t n = rows * d;
    for (int64_t i = global_index(); i < n; i += global_stride()) {
        const int64_t r = i / d, col = i % d;
        out[i] = to_float(table[int64_t(tokens[r]) * d + col]);
    }
}

__global__ void cast_from_bf16_kernel(const __nv_bfloat16* __restrict__ x, int64_t n, float* __restrict__ y) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __bfloat162float(x[i]);
}

__global__ void cast_to_bf16_kernel(const float* __restrict__ x, int64_t n, __nv_bfloat16* __restrict__ y) {
    for (int64_t i = global_index(); i < n; i += global_stride()) y[i] = __float2bfloat16_rn(x[i]);
}

}  // namespace

void rms_norm_rows_cuda(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y,
                        __nv_bfloat16* y_bf16, cudaStream_t stream) {
    if (!y && !y_bf16) cuda_usage_error("rms_norm_rows_cuda: no output given");
    if (d <= 0) cuda_usage_error("rms_norm_rows_cuda: row length must be positive");
    if (rows > INT32_MAX) cuda_usage_error("rms_norm_rows_cuda: more than 2^31 rows");
    if (rows <= 0) return;
    rms_norm_rows_kernel<<<unsigned(rows), kThreads, 0, stream>>>(x, w, d, eps, y, y_bf16);
    CUDA_CHECK(cudaGetLastError());
}

void apply_rope_cuda(float* x, BatchShape shape, int64_t n_heads, int64_t head_dim, RopePairing pairing,
                     const float* cos_t, const float* sin_t, cudaStream_t stream) {
    if (head_dim <= 0 || head_dim % 2 != 0)
        cuda_usage_error("apply_rope_cuda: head_dim must be positive and even, got " + std::to_string(head_dim));
    const int64_t n = shape.rows() * n_heads * (head_dim / 2);
    if (n <= 0) return;
    const int64_t stride_i = pairing == RopePairing::adjacent ? 2 : 1;
    const int64_t offset_b = pairing == RopePairing::adjacent ? 1 : head_dim / 2;
    apply_rope_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, shape.rows(), shape.n_tok, n_heads, head_dim, stride_i,
                                                           offset_b, cos_t, sin_t);
    CUDA_CHECK(cudaGetLastError());
}

void swiglu_cuda(const float* gate, const float* up, int64_t n, float* out, __nv_bfloat16* out_bf16,
                 cudaStream_t stream) {
    if (!out && !out_bf16) cuda_usage_error("swiglu_cuda: no output given");
    if (n <= 0) return;
    swiglu_kernel<<<grid_for(n), kThreads, 0, stream>>>(gate, up, n, out, out_bf16);
    CUDA_CHECK(cudaGetLastError());
}

void add_bias_rows_cuda(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t stream) {
    if (rows <= 0 || n <= 0) return;
    add_bias_rows_kernel<<<grid_for(rows * n), kThreads, 0, stream>>>(y, bias, rows, n);
    CUDA_CHECK(cudaGetLastError());
}

void embed_rows_cuda(const float* table, const int32_t* tokens, int64_t rows, int64_t d, float* out, cudaStream_t stream) {
    if (rows <= 0 || d <= 0) return;
    embed_rows_kernel<float><<<grid_for(rows * d), kThreads, 0, stream>>>(table, tokens, rows, d, out);
    CUDA_CHECK(cudaGetLastError());
}

void embed_rows_cuda(const __nv_bfloat16* table, const int32_t* tokens, int64_t rows, int64_t d, float* out,
                     cudaStream_t stream) {
    if (rows <= 0 || d <= 0) return;
    embed_rows_kernel<__nv_bfloat16><<<grid_for(rows * d), kThreads, 0, stream>>>(table, tokens, rows, d, out);
    CUDA_CHECK(cudaGetLastError());
}

void cast_from_bf16_cuda(const __nv_bfloat16* x, int64_t n, float* y, cudaStream_t stream) {
    if (n <= 0) return;
    cast_from_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, y);
    CUDA_CHECK(cudaGetLastError());
}

void cast_to_bf16_cuda(const float* x, int64_t n, __nv_bfloat16* y, cudaStream_t stream) {
    if (n <= 0) return;
    cast_to_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, y);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace lowbit
