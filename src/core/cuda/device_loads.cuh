// device_loads.cuh — generic device loads and stores of FP32 / BF16 data as FP32 registers: BF16 pairs,
// 8-element vector loads, pair loads for odd shapes, BF16 packing, and the cp.async copies (global →
// shared without registers) with their group bookkeeping. Shared by the quantize, Hadamard and AdaHOP
// kernels. Only .cu files include this header.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace lowbit::cuda_detail {

// BF16 → FP32 is exact (the 16 bits become the top half of the float).
__device__ __forceinline__ void bf16x2_to_float(uint32_t w, float& lo, float& hi) {
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xFFFF0000u);
}

// Two floats → one word of two BF16, each rounded to nearest even (low half first).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __uint_as_float(uint32_t(__bfloat16_as_ushort(v)) << 16); }

// 8 consecutive elements; p must be 16-byte aligned (BF16) or 32-byte aligned (FP32: two 16-byte loads).
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&v)[8]) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    bf16x2_to_float(u.x, v[0], v[1]);
    bf16x2_to_float(u.y, v[2], v[3]);
    bf16x2_to_float(u.z, v[4], v[5]);
    bf16x2_to_float(u.w, v[6], v[7]);
}

// 32 consecutive elements (four load8).
template <typename T>
__device__ __forceinline__ void load32(const T* p, float (&v)[32]) {
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        float t8[8];
        load8(p + 8 * m, t8);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[8 * m + j] = t8[j];
    }
}

__device__ __forceinline__ float load1(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load1(const __nv_bfloat16* p) {
    return __uint_as_float(uint32_t(__ldg(reinterpret_cast<const unsigned short*>(p))) << 16);
}

// Elements (r, c) and (r, c+1) at p. vec: one 4-byte (BF16) / 8-byte (FP32) load, needs c even and cols
// even; else two scalar loads, the second only when has1.
__device__ __forceinline__ void load_pair(const float* p, bool vec, bool has1, float& a, float& b) {
    if (vec) {
        const float2 f = __ldg(reinterpret_cast<const float2*>(p));
        a = f.x;
        b = f.y;
    } else {
        a = __ldg(p);
        b = has1 ? __ldg(p + 1) : 0.0f;
    }
}
__device__ __forceinline__ void load_pair(const __nv_bfloat16* p, bool vec, bool has1, float& a, float& b) {
    if (vec) {
        bf16x2_to_float(__ldg(reinterpret_cast<const unsigned int*>(p)), a, b);
    } else {
        a = load1(p);
        b = has1 ? load1(p + 1) : 0.0f;
    }
}

// 16 bytes global → shared without passing through registers (cp.async, sm_80+; cached in L2 only), and the
// group bookkeeping: a thread's copies since the last commit form a group; wait<N> returns once at most N of
// its groups are still in flight.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(unsigned(__cvta_generic_to_shared(smem))), "l"(gmem) : "memory");
#else
    *static_cast<uint4*>(smem) = *static_cast<const uint4*>(gmem);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

}  // namespace lowbit::cuda_detail
