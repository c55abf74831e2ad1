// block_hadamard.cu — block-diagonal Walsh–Hadamard transform kernels (see block_hadamard.cuh).
//
// Napkin math, 8192×8192: BF16 reads 134 MB + writes 134 MB = 268 MB → 62 µs at 4.3 TB/s; FP32 twice
// that (124 µs). Arithmetic: log2(B) adds per element (+1 shuffle each for the stages across lanes) and
// one multiply, ~10–20 instructions per element ≈ 20–40 µs of issue for 67 M elements: memory-bound.
//
// Arithmetic order (bit-exactness): every element goes through the stages h = 1, 2, …, B/2 in order with
// x[i] = u + v, x[i+h] = u − v, then one multiply by hadamard_inv_sqrt(B) — as hadamard.h defines. Stages
// inside a thread use fwht_unnormalized; a stage whose partner lives in another lane is one shuffle and
// one fma(v, ±1, partner), which rounds once: exactly u + v on the lower lane and u − v on the upper one.
#include "hadamard/cuda/block_hadamard.cuh"

#include <string>

#include "core/cuda/device_loads.cuh"
#include "core/cuda/device_math.cuh"
#include "core/cuda_device.h"
#include "hadamard/cuda/hadamard_device.cuh"
#include "hadamard/hadamard.h"

namespace lowbit {

using namespace cuda_detail;

namespace {

constexpr int kThreads = 256;

// ---- vector loads/stores of V consecutive elements as FP32 ----
template <int V>
__device__ __forceinline__ void loadv(const float* p, bool ok, float (&v)[V]) {
    if constexpr (V == 4) {
        const float4 a = ok ? *reinterpret_cast<const float4*>(p) : make_float4(0.f, 0.f, 0.f, 0.f);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    } else {
        static_assert(V == 1, "FP32 vectors are 4 wide");
        v[0] = ok ? *p : 0.0f;
    }
}
template <int V>
__device__ __forceinline__ void loadv(const __nv_bfloat16* p, bool ok, float (&v)[V]) {
    if constexpr (V == 8) {
        const uint4 u = ok ? *reinterpret_cast<const uint4*>(p) : make_uint4(0u, 0u, 0u, 0u);
        bf16x2_to_float(u.x, v[0], v[1]);
        bf16x2_to_float(u.y, v[2], v[3]);
        bf16x2_to_float(u.z, v[4], v[5]);
        bf16x2_to_float(u.w, v[6], v[7]);
    } else {
        static_assert(V == 1, "BF16 vectors are 8 wide");
        v[0] = ok ? __uint_as_float(uint32_t(*reinterpret_cast<const unsigned short*>(p)) << 16) : 0.0f;
    }
}
template <int V>
__device__ __forceinline__ void storev(float* p, const float (&v)[V]) {
    if constexpr (V == 4) *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    else *p = v[0];
}
template <int V>
__device__ __forceinline__ void storev(__nv_bfloat16* p, const float (&v)[V]) {
    if constexpr (V == 8) {
        *reinterpret_cast<uint4*>(p) =
            make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
    } else {
        *p = __float2bfloat16_rn(v[0]);
    }
}

// Axis 1: the matrix is a flat array of n elements (cols is a multiple of B). A lane holds 8 consecutive
// elements (one or two 16-byte loads), B/8 lanes a block; a warp handles kItems runs of 256 elements.
// No __restrict__: in == out is allowed (every element is read before its lane group writes it).
template <typename T, int B>
__global__ void __launch_bounds__(kThreads) hadamard_rows_kernel(const T* in, T* out, int64_t n, float hs) {
    constexpr int kItems = 2;
    constexpr int V = 8;
    const int lane = threadIdx.x & 31;
    const int64_t base = ((int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5) * (kItems * 256);
    if (base >= n) return;  // whole warp
    float v[kItems][V];
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        const int64_t off = base + k * 256 + lane * 8;
        const bool ok = off < n;
        if constexpr (sizeof(T) == 4) {
            float a[4], b[4];
            loadv<4>(reinterpret_cast<const float*>(in) + off, ok, a);
            loadv<4>(reinterpret_cast<const float*>(in) + off + 4, ok, b);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                v[k][j] = a[j];
                v[k][4 + j] = b[j];
            }
        } else {
            loadv<8>(in + off, ok, v[k]);
        }
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        fwht_unnormalized<8>(v[k]);
#pragma unroll
        for (int m = 1; m < B / 8; m <<= 1) fwht_shuffle_stage(v[k], m, lane);
#pragma unroll
        for (int j = 0; j < V; ++j) v[k][j] *= hs;
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        const int64_t off = base + k * 256 + lane * 8;
        if (off >= n) continue;
        if constexpr (sizeof(T) == 4) {
            const float a[4] = {v[k][0], v[k][1], v[k][2], v[k][3]};
            const float b[4] = {v[k][4], v[k][5], v[k][6], v[k][7]};
            storev<4>(reinterpret_cast<float*>(out) + off, a);
            storev<4>(reinterpret_cast<float*>(out) + off + 4, b);
        } else {
            storev<8>(out + off, v[k]);
        }
    }
}

// Axis 0: a lane holds 8 consecutive rows × V columns (one V-wide load per row: 16 bytes when V > 1);
// B/8 lanes hold one column block, so a warp covers 32/(B/8) column vectors of one row block. The 8-row
// stages run across the lane's rows in registers, the rest by shuffles.
template <typename T, int B, int V>
__global__ void __launch_bounds__(kThreads) hadamard_cols_kernel(const T* in, T* out, int64_t rows, int64_t cols, int64_t groups,
                                                                 float hs) {
    constexpr int L = B / 8;
    constexpr int kVecPerWarp = 32 / L;
    const int lane = threadIdx.x & 31;
    const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const int64_t rb = warp / groups, g = warp - rb * groups;
    if (rb * B >= rows) return;  // whole warp
    const int seg = lane % L, cv = lane / L;
    const int64_t c = (g * kVecPerWarp + cv) * V;
    const bool ok = c < cols;
    const int64_t r0 = rb * B + seg * 8;
    float v[8][V];
#pragma unroll
    for (int j = 0; j < 8; ++j) loadv<V>(in + (r0 + j) * cols + c, ok, v[j]);
#pragma unroll
    for (int h = 1; h < 8; h <<= 1)
#pragma unroll
        for (int j = 0; j < 8; ++j)
            if ((j & h) == 0)
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    const float u = v[j][e], w = v[j + h][e];
                    v[j][e] = u + w;
                    v[j + h][e] = u - w;
                }
#pragma unroll
    for (int m = 1; m < L; m <<= 1) {
        const float sigma = (lane & m) ? -1.0f : 1.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const float other = __shfl_xor_sync(kFullMask, v[j][e], m);
                v[j][e] = __fmaf_rn(v[j][e], sigma, other);
            }
    }
    if (!ok) return;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int e = 0; e < V; ++e) v[j][e] *= hs;
        storev<V>(out + (r0 + j) * cols + c, v[j]);
    }
}

template <typename T, int B>
void launch_block(const T* in, T* out, int64_t rows, int64_t cols, int axis, cudaStream_t stream) {
    const float hs = hadamard_inv_sqrt(B);
    if (axis == 1) {
        const int64_t n = rows * cols;
        const int64_t warps = (n + 511) / 512;
        hadamard_rows_kernel<T, B><<<unsigned((warps * 32 + kThreads - 1) / kThreads), kThreads, 0, stream>>>(in, out, n, hs);
    } else {
        constexpr int kVec = sizeof(T) == 4 ? 4 : 8;
        constexpr int kVecPerWarp = 32 / (B / 8);
        const bool vec = cols % kVec == 0;
        const int64_t nvec = vec ? cols / kVec : cols;
        const int64_t groups = (nvec + kVecPerWarp - 1) / kVecPerWarp;
        const int64_t warps = rows / B * groups;
        const unsigned blocks = unsigned((warps * 32 + kThreads - 1) / kThreads);
        if (vec) hadamard_cols_kernel<T, B, kVec><<<blocks, kThreads, 0, stream>>>(in, out, rows, cols, groups, hs);
        else hadamard_cols_kernel<T, B, 1><<<blocks, kThreads, 0, stream>>>(in, out, rows, cols, groups, hs);
    }
    CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void block_hadamard_any(const T* in, T* out, int64_t rows, int64_t cols, int64_t block, int axis, cudaStream_t stream) {
    const char* op = "block_hadamard_cuda";
    if (axis != 0 && axis != 1) cuda_usage_error(std::string(op) + ": axis must be 0 or 1, got " + std::to_string(axis));
    if (block != 16 && block != 32 && block != 64 && block != 128 && block != 256)
        cuda_usage_error(std::string(op) + ": block must be 16, 32, 64, 128 or 256, got " + std::to_string(block) +
                         " (other sizes and randomized transforms: hadamard_transform on the CPU)");
    if (rows <= 0 || cols <= 0) cuda_input_error(std::string(op) + ": empty matrix " + std::to_string(rows) + "x" + std::to_string(cols));
    const int64_t dim = axis == 1 ? cols : rows;
    if (dim % block != 0)
        cuda_input_error(std::string(op) + ": the transformed dimension (" + (axis == 1 ? "columns" : "rows") + ") is " +
                         std::to_string(dim) + ", not a multiple of the block size " + std::to_string(block) +
                         "; pad the matrix or choose another block");
    cuda_check_aligned(in, 16, "input", op);
    cuda_check_aligned(out, 16, "output", op);
    if (rows * cols / 256 > 0x7FFFFFFFll) cuda_input_error(std::string(op) + ": matrix too large for one launch");
    switch (block) {
        case 16: return launch_block<T, 16>(in, out, rows, cols, axis, stream);
        case 32: return launch_block<T, 32>(in, out, rows, cols, axis, stream);
        case 64: return launch_block<T, 64>(in, out, rows, cols, axis, stream);
        case 128: return launch_block<T, 128>(in, out, rows, cols, axis, stream);
        default: return launch_block<T, 256>(in, out, rows, cols, axis, stream);
    }
}

}  // namespace

void block_hadamard_cuda(const float* in, float* out, int64_t rows, int64_t cols, int64_t block, int axis, cudaStream_t stream) {
    block_hadamard_any(in, out, rows, cols, block, axis, stream);
}

void block_hadamard_cuda(const __nv_bfloat16* in, __nv_bfloat16* out, int64_t rows, int64_t cols, int64_t block, int axis,
                         cudaStream_t stream) {
    block_hadamard_any(in, out, rows, cols, block, axis, stream);
}

void block_hadamard_cuda(float* x, int64_t rows, int64_t cols, int64_t block, int axis, cudaStream_t stream) {
    block_hadamard_any<float>(x, x, rows, cols, block, axis, stream);
}

void block_hadamard_cuda(__nv_bfloat16* x, int64_t rows, int64_t cols, int64_t block, int axis, cudaStream_t stream) {
    block_hadamard_any<__nv_bfloat16>(x, x, rows, cols, block, axis, stream);
}

}  // namespace lowbit
